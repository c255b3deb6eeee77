"""What migration costs on real libraries: forward + backward of a library's Function, original
against the copy ``python -m compatfn migrate --write`` made, at a tiny and a realistic size.

Needs the copies that ``python -m tools.real_corpus SCRATCH ...`` leaves in ``SCRATCH/work``
(the libraries' code is not part of this repository)::

    python benchmarks/migrate_real.py SCRATCH/work

Both copies are imported in one process, one after the other (the package is removed from
``sys.modules`` in between), and timed alternately. Writes
``benchmarks/results/migrate_real-torch<X.Y.Z>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def load(root: Path, package: str, module: str) -> Any:
    """``package.module`` imported from ``root``, after removing any earlier copy."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(f"{package}.{module}")
    finally:
        sys.path.remove(str(root))


def flash(module: Any, size: Tuple[int, int, int, int], bucket: int) -> Callable[[], None]:
    q, k, v = (torch.randn(*size, requires_grad=True) for _ in range(3))

    def step() -> None:
        out = module.FlashAttentionFunction.apply(q, k, v, None, False, bucket, bucket)
        out.sum().backward()

    return step


def matmul(module: Any, n: int, m: int) -> Callable[[], None]:
    matrix = torch.randn(n, n, requires_grad=True)
    rhs = torch.randn(n, m, requires_grad=True)

    def tree(*args: torch.Tensor) -> Any:
        return _Dense(args[0])

    def step() -> None:
        module.Matmul.apply(tree, rhs, matrix).sum().backward()

    return step


class _Dense:
    """What Matmul calls on its operator: ``_matmul``, ``_t_matmul``, ``_bilinear_derivative``."""

    def __init__(self, matrix: torch.Tensor) -> None:
        self.matrix = matrix

    def _matmul(self, rhs: torch.Tensor) -> torch.Tensor:
        return self.matrix @ rhs

    def _t_matmul(self, rhs: torch.Tensor) -> torch.Tensor:
        return self.matrix.mT @ rhs

    def _bilinear_derivative(self, left: torch.Tensor, right: torch.Tensor) -> Tuple[Any, ...]:
        return (left @ right.mT,)


CASES: List[Tuple[str, str, str, str, Callable[[Any], Callable[[], None]]]] = [
    (
        "flash attention 1x1x8x16 (intermediates=3)",
        "memory-efficient-attention-pytorch",
        "memory_efficient_attention_pytorch",
        "flash_attention",
        lambda m: flash(m, (1, 1, 8, 16), 8),
    ),
    (
        "flash attention 2x8x1024x64",
        "memory-efficient-attention-pytorch",
        "memory_efficient_attention_pytorch",
        "flash_attention",
        lambda m: flash(m, (2, 8, 1024, 64), 512),
    ),
    (
        "linear_operator Matmul 4x4 @ 4x2 (intermediates=2)",
        "linear_operator",
        "linear_operator",
        "functions._matmul",
        lambda m: matmul(m, 4, 2),
    ),
    (
        "linear_operator Matmul 1024x1024 @ 1024x64",
        "linear_operator",
        "linear_operator",
        "functions._matmul",
        lambda m: matmul(m, 1024, 64),
    ),
]


def measure(step: Callable[[], None], seconds: float = 0.5) -> float:
    """Median µs per call over batches filling about ``seconds``."""
    step()
    start = time.perf_counter()
    step()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(1, int(0.05 / once))
    samples = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 5:
        start = time.perf_counter()
        for _ in range(calls):
            step()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="SCRATCH/work from tools.real_corpus")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows: List[List[Any]] = []
    for label, library, package, module, build in CASES:
        steps: Dict[str, Callable[[], None]] = {}
        for copy in ("original", "migrated"):
            steps[copy] = build(load(args.work / library / copy, package, module))
        times: Dict[str, List[float]] = {"original": [], "migrated": []}
        for _ in range(3):  # alternate, so that drift hits both
            for copy, step in steps.items():
                times[copy].append(measure(step))
        original = min(times["original"])
        migrated = min(times["migrated"])
        rows.append(
            [
                label,
                round(original, 1),
                round(migrated, 1),
                round(migrated / original, 3),
                round(migrated - original, 1),
            ]
        )
        print(rows[-1], flush=True)
    version = torch.__version__.split("+")[0]
    result = {
        "meta": {
            "benchmark": "migrate_real",
            "title": "forward + backward of real libraries' Functions, original vs migrated",
            "command": "python benchmarks/migrate_real.py SCRATCH/work",
            "date": datetime.date.today().isoformat(),
            "torch": version,
            "python": platform.python_version(),
            "device": "cpu",
        },
        "columns": ["call", "original µs", "migrated µs", "migrated ratio", "added µs"],
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"migrate_real-torch{version}.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
