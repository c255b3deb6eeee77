"""Write a benchmark's result in the shape the docs' Performance page renders (tools/perf_page.py).

``benchmarks/results/<benchmark>-torch<X.Y.Z>[-<device>].json``::

    {"meta": {"benchmark", "title", "command", "date", "torch", "python", "device"[, "note"]},
     "columns": ["<label>", "<number column>", ...], "rows": [["<label>", 1.0, ...], ...]}

Columns whose name ends in "ratio" are plotted. Imported by the scripts next to it (a script's own
folder is on ``sys.path``).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from typing import Any, List, Optional, Sequence

import torch

#: Where results go by default: ``benchmarks/results/`` next to this file.
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def torch_release() -> str:
    """The running torch's release without its local part: ``2.15.0`` for ``2.15.0+cu132``."""
    return str(torch.__version__).split("+")[0]


def command(script: str, argv: Optional[Sequence[str]]) -> str:
    """The command line that produced a result, as a reader would type it."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python", f"benchmarks/{script}", *args])


def write(
    benchmark: str,
    title: str,
    cmd: str,
    columns: Sequence[str],
    rows: List[List[Any]],
    device: str,
    note: str = "",
    results: str = RESULTS,
) -> str:
    """Write one result file into ``results`` and return its path."""
    meta = {
        "benchmark": benchmark,
        "title": title,
        "command": cmd,
        "date": datetime.date.today().isoformat(),
        "torch": torch_release(),
        "python": platform.python_version(),
        "device": device,
    }
    if note:
        meta["note"] = note
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, f"{benchmark}-torch{torch_release()}-{device}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "columns": list(columns), "rows": rows}, f, indent=1)
        f.write("\n")
    return path
