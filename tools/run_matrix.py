"""Run the whole support matrix in batches that clean up after themselves, then ``nox -s report``.

Every CUDA build of torch costs 2-5 GB in the uv cache, so the full table does not fit on a small
disk at once. The default rows (``tools/sessions.py``: what CI runs) use the normal uv cache and
``.nox/``, so they stay warm. All other rows run ``--batch-size`` releases at a time with their own
uv cache and environment folder, both deleted when the batch ends (each torch is still downloaded
only once per run: a row's plain and legacy-forced sessions share its batch). Free disk space is
checked between batches. Each batch's output goes to ``reports/logs/``.

    python -m tools.run_matrix                    # everything, 3 releases per batch
    python -m tools.run_matrix --only 2.4 2.5     # some rows
    python -m tools.run_matrix --cuda             # also the cuda-X-Y sessions (needs a GPU)
    python -m tools.run_matrix --no-legacy        # legacy-forced runs only on the default rows
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Sequence

from compatfn import matrix
from tools import sessions as own

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "reports" / "logs"
SCRATCH = ROOT / ".nox" / "_batch"


def sessions(rows: Sequence[matrix.Row], cuda: bool, legacy: bool = True) -> List[str]:
    """The nox sessions of ``rows``: tests, legacy-forced tests (all, or the defaults') and CUDA."""
    names = []
    for row in rows:
        names.append(matrix.session_name("tests", row))
        if row.setup_context and (legacy or own.default(row)):
            names.append(matrix.session_name("tests", row, legacy=True))
        if cuda:
            names.append(matrix.session_name("cuda", row))
    return names


def free_gb() -> float:
    return shutil.disk_usage(ROOT).free / 2**30


def run_batch(
    label: str, rows: Sequence[matrix.Row], cuda: bool, scratch: bool, legacy: bool = True
) -> bool:
    """Run one batch of rows through nox; return whether every session passed."""
    names = sessions(rows, cuda, legacy)
    command = [sys.executable, "-m", "nox", "--no-color", "-s", *names]
    env = dict(os.environ)
    if scratch:
        shutil.rmtree(SCRATCH, ignore_errors=True)
        command[3:3] = ["--envdir", str(SCRATCH / "envs")]
        env["UV_CACHE_DIR"] = str(SCRATCH / "uv-cache")
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{label}.log"
    print(f"[{label}] {' '.join(names)} (log: {log.relative_to(ROOT)})", flush=True)
    started = time.monotonic()
    with log.open("w", buffering=1) as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if "SUMMARY" in line or "Session " in line:
                print(f"[{label}] {line.rstrip()}", flush=True)
        returncode = proc.wait()
    if scratch:
        shutil.rmtree(SCRATCH, ignore_errors=True)
    minutes = (time.monotonic() - started) / 60
    print(f"[{label}] exit {returncode}, {minutes:.1f} min, {free_gb():.0f} GB free", flush=True)
    return returncode == 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.run_matrix", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--batch-size", type=int, default=3, help="releases per batch (default 3)")
    parser.add_argument("--only", nargs="+", metavar="X.Y", help="run only these rows")
    parser.add_argument("--cuda", action="store_true", help="also run the cuda-X-Y sessions")
    parser.add_argument(
        "--min-free-gb", type=float, default=15, help="stop before a batch if less disk is free"
    )
    parser.add_argument("--no-report", action="store_true", help="skip `nox -s report` at the end")
    parser.add_argument(
        "--no-legacy",
        action="store_true",
        help="skip the tests-X-Y-legacy sessions of non-default rows (about half the time)",
    )
    args = parser.parse_args(argv)

    rows = [matrix.row(key) for key in args.only] if args.only else list(matrix.ROWS)
    warm = [r for r in rows if own.default(r)]
    cold = [r for r in rows if not own.default(r)]
    batches = [("default", warm, False)] if warm else []
    for start in range(0, len(cold), args.batch_size):
        chunk = cold[start : start + args.batch_size]
        batches.append((f"batch-{chunk[0].key}-to-{chunk[-1].key}", chunk, True))

    failed = []
    for label, chunk, scratch in batches:
        if free_gb() < args.min_free_gb:
            print(f"only {free_gb():.0f} GB free (< {args.min_free_gb}); stopping", flush=True)
            return 2
        if not run_batch(label, chunk, args.cuda, scratch, not args.no_legacy):
            failed.append(label)
    if not args.no_report:
        subprocess.run([sys.executable, "-m", "nox", "--no-color", "-s", "report"], cwd=ROOT)
    if failed:
        print(f"failed batches: {', '.join(failed)} (see reports/logs/)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
