"""Call each of linear_operator's autograd Functions once, forward and backward, on fixed inputs.

A test command for ``compatfn migrate linear_operator --verify``: the library's own tests
(``test/functions``, ``test/operators``) leave some of its Functions uncalled, so this script
calls every one of them through the library's public API, seeded, with the iterative code paths
forced (``max_cholesky_size(0)``), and takes gradients of each result. Run it from an unpacked
linear_operator 0.6.1 (the package importable from the current folder)::

    python -m compatfn migrate linear_operator --verify python PATH/probe_linear_operator.py

It imports nothing from this repository and is not part of compatfn's tests.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, List, Tuple

import torch

DTYPE = torch.float64


def _spd(n: int) -> torch.Tensor:
    a = torch.randn(n, n, dtype=DTYPE)
    return (a @ a.mT + n * torch.eye(n, dtype=DTYPE)).requires_grad_()


def _probes() -> List[Tuple[str, Callable[[], Any]]]:  # Any: linear_operator has no types here
    import linear_operator as lo
    from linear_operator.operators import DenseLinearOperator, LowRankRootLinearOperator

    def rhs(columns: int = 2) -> torch.Tensor:
        return torch.randn(6, columns, dtype=DTYPE, requires_grad=True)

    def dense() -> Any:
        return DenseLinearOperator(_spd(6))

    def low_rank() -> Any:
        return LowRankRootLinearOperator(torch.randn(6, 3, dtype=DTYPE, requires_grad=True))

    def sparse_times_dense() -> Any:
        indices = torch.tensor([[0, 1, 2, 4], [1, 3, 0, 5]])
        values = torch.randn(4, dtype=DTYPE)
        sparse = torch.sparse_coo_tensor(indices, values, (6, 6))
        return lo.dsmm(sparse, rhs()).sum()

    def diagonalization() -> Any:
        evals, evecs = dense().diagonalization(method="lanczos")
        return evals.sum() + evecs.to_dense().sum()

    def inv_quad_logdet() -> Any:
        quad, logdet = dense().inv_quad_logdet(rhs(), logdet=True)
        return quad.sum() + logdet.sum()

    def sqrt_inv_matmul(with_lhs: bool) -> Callable[[], Any]:
        def call() -> Any:
            if not with_lhs:
                return dense().sqrt_inv_matmul(rhs()).sum()
            lhs = torch.randn(3, 6, dtype=DTYPE, requires_grad=True)
            result, quad = dense().sqrt_inv_matmul(rhs(), lhs)
            return result.sum() + quad.sum()

        return call

    return [
        ("DSMM", sparse_times_dense),
        ("Diagonalization", diagonalization),
        ("InvQuad", lambda: dense().inv_quad(rhs()).sum()),
        ("InvQuadLogdet", inv_quad_logdet),
        ("Matmul", lambda: low_rank().matmul(rhs()).sum()),
        ("PivotedCholesky", lambda: lo.pivoted_cholesky(dense(), rank=3).sum()),
        ("RootDecomposition", lambda: dense().root_decomposition(method="lanczos").root.sum()),
        ("Solve", lambda: dense().solve(rhs()).sum()),
        ("SqrtInvMatmul", sqrt_inv_matmul(with_lhs=True)),
        ("SqrtInvMatmul without lhs", sqrt_inv_matmul(with_lhs=False)),
    ]


def main() -> int:
    from linear_operator import settings

    failed = 0
    torch.manual_seed(0)
    with settings.max_cholesky_size(0):
        for name, probe in _probes():
            try:
                value = probe()
                value.backward()
                print(f"{name}: {value.item():.6g}")
            except Exception as error:  # reported; the others still run
                failed += 1
                print(f"{name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
