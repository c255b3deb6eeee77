"""Instructions per call of Python statements, counted with valgrind's callgrind.

Counts are the same on a busy or an idle machine (timings on a shared machine swing by tens of
percent), but blind to cache misses. A script re-runs itself under callgrind with a worker flag;
the worker runs :func:`worker`, the parent reads the dumps with :func:`count`::

    if args.worker:
        callgrind.worker([(statement, names) for statement in statements], args.worker)
    else:
        per_call = callgrind.count([__file__, "--worker"], len(statements), 1000)

Imported by the scripts next to it (a script's own folder is on ``sys.path``). Needs ``valgrind``
(with ``callgrind_control``) on ``PATH``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, List, Sequence, Tuple

#: Calls of each statement before counting: Python 3.8 caches a function's global lookups only
#: after 1,024 calls of it.
WARM_UP = 1100


def worker(measured: Sequence[Tuple[str, Dict[str, Any]]], n: int) -> None:
    """Under callgrind: run each statement (with the names it uses) ``n`` and ``3n`` times,
    counters zeroed before and dumped after each run; an empty loop first (its cost is
    subtracted)."""
    pid = str(os.getpid())

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, pid], stdout=subprocess.DEVNULL, check=True)

    loops: List[Callable[[int], Any]] = []
    for statement, names in [("pass", {}), *measured]:
        scope = dict(names)
        source = f"def loop(m):\n    for _ in range(m):\n        {statement}\n"
        exec(compile(source, "<loop>", "exec"), scope)
        loops.append(scope["loop"])
    for loop in loops:
        loop(WARM_UP)
    control("-i", "on")
    for loop in loops:
        for m in (n, 3 * n):
            control("-z")
            loop(m)
            control("-d")
    control("-i", "off")


def count(command: Sequence[str], statements: int, n: int) -> List[float]:
    """Instructions per call of each of ``statements`` statements, the loop's own cost taken out,
    from running ``python command... n`` under callgrind (the script then calls :func:`worker`)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--callgrind needs valgrind on PATH (e.g. apt install valgrind)")
    with tempfile.TemporaryDirectory() as folder:
        run = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={folder}/out",
            sys.executable,
            *command,
            str(n),
        ]
        subprocess.run(run, check=True, capture_output=True)
        dumps = sorted(glob.glob(f"{folder}/out.*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        totals = []
        for path in dumps:
            with open(path) as f:
                totals.append(next(int(ln.split()[1]) for ln in f if ln.startswith("totals:")))
    per_call = [(totals[i + 1] - totals[i]) / (2 * n) for i in range(0, len(totals), 2)]
    if len(per_call) != statements + 1:
        raise RuntimeError(f"callgrind gave {len(per_call)} counts for {statements + 1} loops")
    return [c - per_call[0] for c in per_call[1:]]
