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

# Time box for the two test runs together, in seconds: measured, the whole suite takes about
# 3 minutes of one core per run, more where the GPU compiles kernels; what does not fit in
# the box is skipped with its reason (the CUDA tests run first).
budget=${DEVICE_CHECK_TEST_SECONDS:-270}
tests=()
if [ "$quick" = --quick ]; then
    budget=${DEVICE_CHECK_TEST_SECONDS:-120}
    tests=(tests/test_amp.py tests/test_relu.py -k "not check_function and not compile")
fi

exec "${PYTHON:-python}" -m tools.check_installed "$out" --deadline "$budget" --bench \
    -- -q -rs ${tests[@]+"${tests[@]}"}
