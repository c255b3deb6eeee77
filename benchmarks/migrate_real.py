"""What migration costs on real libraries: forward + backward of a library's Function, original
against the copy ``python -m compatfn migrate --write`` made, at a tiny and a realistic size.

Needs the copies that ``python -m tools.real_corpus SCRATCH ...`` leaves in ``SCRATCH/work``
(the libraries' code is not part of this repository); give every such folder that holds a
library below (a case whose library is in none of them is left out)::

    python benchmarks/migrate_real.py SCRATCH/work SCRATCH2/work

Both copies are imported in one process, one after the other (the package is removed from
``sys.modules`` in between), and timed in pairs: one batch of the original, then one of the
migrated copy, many times over, so that drift on a shared machine hits both alike. A row gives
the median time per call of each copy and the median of the pairs' ratios. torch runs on one
thread (``--threads``) so that the realistic sizes do not swing with the machine's load. Writes
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
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

RESULTS = Path(__file__).resolve().parent / "results"
Step = Callable[[], None]


def load(root: Path, package: str, module: str) -> Any:
    """``package.module`` imported from ``root``, after removing any earlier copy."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(f"{package}.{module}")
    finally:
        sys.path.remove(str(root))


def flash(module: Any, size: Tuple[int, int, int, int], bucket: int) -> Step:
    q, k, v = (torch.randn(*size, requires_grad=True) for _ in range(3))

    def step() -> None:
        out = module.FlashAttentionFunction.apply(q, k, v, None, False, bucket, bucket)
        out.sum().backward()

    return step


def matmul(module: Any, n: int, m: int) -> Step:
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


def sparsemax(module: Any, rows: int, columns: int) -> Step:
    x = torch.randn(rows, columns, requires_grad=True)
    weights = torch.randn(rows, columns)

    def step() -> None:
        (module.SparsemaxFunction.apply(x, -1, None) * weights).sum().backward()

    return step


def sparse_mm(module: Any, n: int, p: int, density: float) -> Step:
    dense = torch.randn(n, n) * (torch.rand(n, n) < density)
    a = dense.to_sparse().requires_grad_(True)
    b = torch.randn(n, p, requires_grad=True)

    def step() -> None:
        module.SparseMatMul.apply(a, b).sum().backward()

    return step


#: label, the library's folder in SCRATCH/work, its package, the module, how to build a step.
CASES: List[Tuple[str, str, str, str, Callable[[Any], Step]]] = [
    (
        "flash attention 1x1x8x16 (intermediates=3)",
        "memory-efficient-attention-pytorch",
        "memory_efficient_attention_pytorch",
        "flash_attention",
        lambda m: flash(m, (1, 1, 8, 16), 8),
    ),
    (
        "flash attention 1x4x256x64",
        "memory-efficient-attention-pytorch",
        "memory_efficient_attention_pytorch",
        "flash_attention",
        lambda m: flash(m, (1, 4, 256, 64), 128),
    ),
    (
        "linear_operator Matmul 4x4 @ 4x2 (intermediates=2)",
        "linear_operator",
        "linear_operator",
        "functions._matmul",
        lambda m: matmul(m, 4, 2),
    ),
    (
        "linear_operator Matmul 512x512 @ 512x64",
        "linear_operator",
        "linear_operator",
        "functions._matmul",
        lambda m: matmul(m, 512, 64),
    ),
    (
        "entmax sparsemax 1x8 (intermediates=1)",
        "entmax",
        "entmax",
        "activations",
        lambda m: sparsemax(m, 1, 8),
    ),
    (
        "entmax sparsemax 64x4096",
        "entmax",
        "entmax",
        "activations",
        lambda m: sparsemax(m, 64, 4096),
    ),
    (
        "torchsparsegradutils sparse_mm 8x8 @ 8x2 (intermediates=5)",
        "torchsparsegradutils",
        "torchsparsegradutils",
        "sparse_matmul",
        lambda m: sparse_mm(m, 8, 2, 0.5),
    ),
    (
        "torchsparsegradutils sparse_mm 2048x2048 @ 2048x64, 1% dense",
        "torchsparsegradutils",
        "torchsparsegradutils",
        "sparse_matmul",
        lambda m: sparse_mm(m, 2048, 64, 0.01),
    ),
]


def batch_size(step: Step, seconds: float = 0.02) -> int:
    """How many calls make a batch of about ``seconds`` (after two warm-up calls)."""
    step()
    start = time.perf_counter()
    step()
    return max(1, int(seconds / max(time.perf_counter() - start, 1e-7)))


def timed(step: Step, calls: int) -> float:
    """µs per call over one batch of ``calls``."""
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - start) / calls * 1e6


def paired(original: Step, migrated: Step, pairs: int) -> Tuple[float, float, float]:
    """Median µs of each copy and the median ratio of ``pairs`` back-to-back batches."""
    calls = min(batch_size(original), batch_size(migrated))
    firsts: List[float] = []
    seconds: List[float] = []
    for _ in range(pairs):
        firsts.append(timed(original, calls))
        seconds.append(timed(migrated, calls))
    ratios = [after / before for before, after in zip(firsts, seconds)]
    return statistics.median(firsts), statistics.median(seconds), statistics.median(ratios)


def find(works: Sequence[Path], library: str) -> Optional[Path]:
    """The first work folder holding both copies of ``library``."""
    for work in works:
        if (work / library / "original").is_dir() and (work / library / "migrated").is_dir():
            return work / library
    return None


def run(works: Sequence[Path], pairs: int) -> List[List[Any]]:
    rows: List[List[Any]] = []
    for label, library, package, module, build in CASES:
        folder = find(works, library)
        if folder is None:
            print(f"skipped {label}: no {library}/original and /migrated in {list(works)}")
            continue
        torch.manual_seed(0)
        original = build(load(folder / "original", package, module))
        torch.manual_seed(0)
        migrated = build(load(folder / "migrated", package, module))
        before, after, ratio = paired(original, migrated, pairs)
        rows.append([label, round(before, 1), round(after, 1), round(ratio, 3)])
        print(rows[-1], flush=True)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, nargs="+", help="SCRATCH/work from tools.real_corpus")
    parser.add_argument("--pairs", type=int, default=41, help="timed pairs per row (default 41)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = run(args.work, args.pairs)
    version = torch.__version__.split("+")[0]
    result = {
        "meta": {
            "benchmark": "migrate_real",
            "title": "forward + backward of real libraries' Functions, original vs migrated",
            "command": "python benchmarks/migrate_real.py SCRATCH/work SCRATCH2/work",
            "date": datetime.date.today().isoformat(),
            "torch": version,
            "python": platform.python_version(),
            "device": "cpu",
            "note": (
                f"torch on {args.threads} thread(s); medians of {args.pairs} back-to-back pairs "
                "of batches; the ratio is the median of the pairs' ratios"
            ),
        },
        "columns": ["call", "original µs", "migrated µs", "migrated ratio"],
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"migrate_real-torch{version}.json"
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
