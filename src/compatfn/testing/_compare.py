"""How :func:`~compatfn.testing.check_function` compares results: bit for bit or within
tolerances, failing with an error that names the Function, the check and the torch.

Example::

    >>> Comparison("ReLU", "parity", exact=True).check("outputs", torch.zeros(2), torch.zeros(2))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Comparison", "check_failure"]


def check_failure(name: str, check: str, detail: str) -> AssertionError:
    """The error for a failed check: ``check_function(Name) failed [check] on torch X: ...``."""
    return AssertionError(
        f"check_function({name}) failed [{check}] on torch {torch.__version__}: {detail}"
    )


@dataclass
class Comparison:
    """Compares results for one check of one Function: bit for bit (``exact``, NaN equal to NaN)
    or with ``rtol``/``atol``; raises the check's failure on the first difference."""

    name: str
    check_name: str
    exact: bool
    rtol: float = 1e-5
    atol: float = 1e-6

    def check(self, what: str, a: Any, b: Any) -> None:
        """Compare ``a`` and ``b`` (tensors, other values, or sequences of them)."""
        if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
            a_seq = list(a) if isinstance(a, (tuple, list)) else [a]
            b_seq = list(b) if isinstance(b, (tuple, list)) else [b]
            if len(a_seq) != len(b_seq):
                raise self._failure(f"{what}: {len(a_seq)} vs {len(b_seq)} values")
            for k, (x, y) in enumerate(zip(a_seq, b_seq)):
                self.check(f"{what}[{k}]", x, y)
            return
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if a is None and b is None:
                return
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
                raise self._failure(f"{what}: {a!r} != {b!r}")
            return
        if a.shape != b.shape or a.dtype != b.dtype:
            raise self._failure(
                f"{what}: shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
            )
        a_, b_ = a.detach(), b.detach()
        if not self._tensors_match(a_, b_):
            diff = (a_.double() - b_.double()).abs()
            finite = diff[~torch.isnan(diff)]
            worst = float(finite.max()) if finite.numel() else float("nan")
            tolerance = (
                "exact match required" if self.exact else f"rtol={self.rtol}, atol={self.atol}"
            )
            raise self._failure(f"{what} differ (max abs difference {worst:g}; {tolerance})")

    def _tensors_match(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        if self.exact:
            same = a == b
            if a.is_floating_point() or a.is_complex():
                same = same | (torch.isnan(a) & torch.isnan(b))
            return bool(same.all())
        low = (torch.float16, torch.bfloat16)
        return torch.allclose(
            a.double() if a.dtype in low else a,
            b.double() if b.dtype in low else b,
            rtol=self.rtol,
            atol=self.atol,
            equal_nan=True,
        )

    def _failure(self, detail: str) -> AssertionError:
        return check_failure(self.name, self.check_name, detail)
