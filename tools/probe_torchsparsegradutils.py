"""Call torchsparsegradutils' JAX and CuPy/SciPy sparse solves on the CPU, forward and backward.

A test command for ``compatfn migrate torchsparsegradutils --verify``: the library's tests skip
``SparseSolveJ4T`` without JAX (``test_jax_sparse_solve.py``) and ``SparseSolveC4T`` without
CuPy (``test_cupy_sparse_solve.py``), although without CuPy the latter runs on NumPy/SciPy for
CPU tensors. This script calls both through the library's API, seeded, on small diagonally
dominant symmetric matrices, and takes gradients of each result with respect to the matrix's
values (sparse, on its pattern) and the right-hand side:

- ``SparseSolveJ4T`` (``torchsparsegradutils.jax.sparse_solve_j4t``; needs the CPU ``jax``
  wheels): COO with a vector right-hand side and the default BiCGSTAB, CSR with several
  right-hand sides and ``jax.scipy.sparse.linalg.cg`` (with ``tol``), float32 COO with an
  ``(n, 1)`` right-hand side, and a matrix that needs no gradient;
- ``SparseSolveC4T`` (``torchsparsegradutils.cupy.sparse_solve_c4t``, on SciPy for CPU
  tensors: no CUDA is needed): the default ``spsolve`` (COO, vector), the default factorized
  solve for several right-hand sides (CSR; its backward reuses the factorization), ``"cg"``
  with ``tol`` (CSR, vector), ``"gmres"`` (COO, vector) and float32 ``"spsolve"`` for several
  right-hand sides.

Run it from an unpacked torchsparsegradutils 0.2.7 (the package importable from the current
folder)::

    python -m compatfn migrate torchsparsegradutils \\
        --verify python PATH/probe_torchsparsegradutils.py

It imports nothing from this repository and is not part of compatfn's tests.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, List, Optional, Tuple

import torch

DTYPE = torch.float64
SIZE = 6


def _matrix(layout: torch.layout, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """A sparse, symmetric, diagonally dominant SIZE x SIZE matrix (a leaf needing gradients)."""
    dense = torch.randn(SIZE, SIZE, dtype=dtype) * (torch.rand(SIZE, SIZE) < 0.4)
    dense = dense + dense.T + 2 * SIZE * torch.eye(SIZE, dtype=dtype)
    coo = dense.to_sparse().coalesce()
    matrix = coo if layout == torch.sparse_coo else coo.to_sparse_csr()
    return matrix.requires_grad_()


def _gradients(leaves: List[torch.Tensor]) -> float:
    """A checksum of the leaves' gradients (a sparse one's values); a leaf without one counts 0."""
    total = 0.0
    for leaf in leaves:
        grad = leaf.grad
        if grad is None:
            continue
        if grad.layout == torch.sparse_coo:
            grad = grad.coalesce().values()
        elif grad.layout != torch.strided:
            grad = grad.values()
        total += float(grad.abs().sum())
    return total


def _probes() -> List[Tuple[str, Callable[[], Tuple[torch.Tensor, List[torch.Tensor]]]]]:
    import jax.scipy.sparse.linalg as jax_linalg
    from torchsparsegradutils.cupy import sparse_solve_c4t
    from torchsparsegradutils.jax import sparse_solve_j4t

    def solve(
        solver: Callable[..., torch.Tensor],
        layout: torch.layout,
        columns: Optional[int],
        dtype: torch.dtype = DTYPE,
        matrix_grad: bool = True,
        **kwargs: Any,
    ) -> Callable[[], Tuple[torch.Tensor, List[torch.Tensor]]]:
        def call() -> Tuple[torch.Tensor, List[torch.Tensor]]:
            matrix = _matrix(layout, dtype).requires_grad_(matrix_grad)
            shape = (SIZE,) if columns is None else (SIZE, columns)
            rhs = torch.randn(*shape, dtype=dtype, requires_grad=True)
            x = solver(matrix, rhs, **kwargs)
            value = (x * torch.randn_like(x)).sum()
            return value, [matrix, rhs] if matrix_grad else [rhs]

        return call

    j4t, c4t = sparse_solve_j4t, sparse_solve_c4t
    coo, csr = torch.sparse_coo, torch.sparse_csr
    return [
        ("sparse_solve_j4t COO vector, bicgstab", solve(j4t, coo, None)),
        (
            "sparse_solve_j4t CSR 3 columns, cg",
            solve(j4t, csr, 3, solve=jax_linalg.cg, transpose_solve=jax_linalg.cg, tol=1e-10),
        ),
        ("sparse_solve_j4t COO (n, 1) float32", solve(j4t, coo, 1, dtype=torch.float32)),
        (
            "sparse_solve_j4t CSR vector, matrix without grad",
            solve(j4t, csr, None, matrix_grad=False),
        ),
        ("sparse_solve_c4t COO vector, spsolve", solve(c4t, coo, None)),
        ("sparse_solve_c4t CSR 3 columns, factorized", solve(c4t, csr, 3)),
        ("sparse_solve_c4t CSR vector, cg", solve(c4t, csr, None, solve="cg", tol=1e-10)),
        ("sparse_solve_c4t COO vector, gmres", solve(c4t, coo, None, solve="gmres", tol=1e-10)),
        (
            "sparse_solve_c4t CSR 2 columns float32, spsolve",
            solve(c4t, csr, 2, dtype=torch.float32, solve="spsolve", transpose_solve="spsolve"),
        ),
    ]


def main() -> int:
    failed = 0
    torch.manual_seed(0)
    warnings.simplefilter("ignore")  # SciPy's and the library's efficiency and import warnings
    for name, probe in _probes():
        try:
            value, leaves = probe()
            torch.autograd.backward(value)
            print(f"{name}: {value.item():.6g}, gradients {_gradients(leaves):.6g}")
        except Exception as error:  # reported; the others still run
            failed += 1
            print(f"{name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
