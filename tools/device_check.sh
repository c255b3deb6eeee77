#!/usr/bin/env bash
# The check to run first whenever a machine with a GPU is at hand (about 8 minutes at most):
#
#     bash tools/device_check.sh OUTDIR            # the whole suite, time-boxed, + CUDA benchmarks
#     bash tools/device_check.sh OUTDIR --quick    # a few test files only (CI keeps it working)
#     PYTHON=/path/to/python bash tools/device_check.sh OUTDIR
#
# Runs compatfn's suite against the torch installed in $PYTHON (default: python), native and with
# COMPATFN_LEGACY=1, CUDA tests first, within a time box (tests that would start after it are
# skipped, visibly), then the quick benchmarks (ReLU suite and per-call overhead) on the GPU.
# Writes JUnit XML, `python -m compatfn --json`, benchmark JSON and check.json into OUTDIR;
# `nox -s report` reads OUTDIR from reports/installed/. Nothing is installed into $PYTHON and
# nothing is downloaded. On a machine without a GPU the CUDA tests are skipped with the reason
# and the benchmarks run on the CPU. Exit status 0 only when every run passed.
set -euo pipefail

usage() { echo "usage: bash tools/device_check.sh OUTDIR [--quick]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
out=$1
quick=${2:-}
[ -z "$quick" ] || [ "$quick" = --quick ] || usage
cd "$(dirname "$0")/.."

# Time box for the test runs, in seconds. Measured on a 2-core machine: one run of the whole
# suite takes about 2.5 minutes of CPU time (7 minutes of wall time on a loaded machine), the
# whole check 6.5 minutes with the box below. With 4 cores or more the native and the legacy
# run go side by side, each with the whole box; otherwise they share it. What does not fit is
# skipped with its reason, the CUDA tests first in line.
budget=${DEVICE_CHECK_TEST_SECONDS:-270}
tests=()
if [ "$quick" = --quick ]; then
    budget=${DEVICE_CHECK_TEST_SECONDS:-120}
    tests=(tests/test_amp.py tests/test_relu.py tests/test_relu_bits.py -k "not check_function and not compile")
fi
parallel=()
if [ "$(nproc 2>/dev/null || echo 1)" -ge 4 ]; then
    parallel=(--parallel)
fi

exec "${PYTHON:-python}" -m tools.check_installed "$out" --deadline "$budget" --bench \
    ${parallel[@]+"${parallel[@]}"} -- -q -rs ${tests[@]+"${tests[@]}"}
