"""Kernels of the reference ReLU suite: forward values and the masked backward, exact on every
torch and dtype (dtypes without a CPU kernel are computed in float32 and rounded back).

Example::

    >>> from compatfn.relu._kernels import threshold
    >>> threshold(torch.tensor([-1.0, 2.0]))
    tensor([0., 2.])
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from compatfn.core import _is_compiling, _transforms_active

__all__ = [
    "clamp",
    "grad_where_output_positive",
    "masked_grad",
    "select",
    "threshold",
    "threshold_",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_threshold_backward = torch.ops.aten.threshold_backward


def _in_float32_where_missing(
    op: Callable[..., torch.Tensor], x: torch.Tensor, *args: Any, inplace: bool = False
) -> Any:
    """``op(x, *args)``; where torch has no kernel for ``x``'s dtype (float16 on CPU before torch
    2.1, bfloat16 ReLU on 1.8), ``op`` on float32 copies of the tensors, rounded back (into ``x``
    for an ``inplace`` op).

    Exact for these piecewise-linear functions: the float32 result is one of the inputs' values, 0
    or a bound, and rounding a bound to ``x.dtype`` is what the native kernel does with it.

    Example::

        _in_float32_where_missing(torch.threshold, torch.ones(2, dtype=torch.half), 0.0, 0.0)
    """
    try:
        return op(x, *args)
    except RuntimeError:  # e.g. "threshold_cpu" not implemented for 'Half'
        if x.dtype not in _LOW_PRECISION:
            raise
        wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        result = op(x.float(), *wide)
        return x.copy_(result) if inplace else result.to(x.dtype)


def threshold(x: torch.Tensor) -> torch.Tensor:
    """``torch.threshold(x, 0, 0)``: ReLU with ``+0.0`` for ``-0.0`` on every torch."""
    return _in_float32_where_missing(torch.threshold, x, 0.0, 0.0)


def threshold_(x: torch.Tensor) -> torch.Tensor:
    """In-place :func:`threshold`: returns ``x``, overwritten."""
    return _in_float32_where_missing(torch.threshold_, x, 0.0, 0.0, inplace=True)


def clamp(x: torch.Tensor, clip: float) -> torch.Tensor:
    """``x.clamp(0, clip)``."""
    return _in_float32_where_missing(torch.clamp, x, 0.0, clip)


def _out_variant_ok() -> bool:
    """Whether backward may write its result into a scratch buffer it owns (``out=``).

    Not when building a graph (double backward), under torch.func transforms or while
    torch.compile traces: there the out-of-place op is the one that composes.
    """
    # is_compiling first: dynamo cannot trace the transforms check (a C call returning a bool).
    return not (torch.is_grad_enabled() or _is_compiling() or _transforms_active())


_HAS_OUT = hasattr(_threshold_backward, "grad_input")  # aten overloads: torch >= 1.10 or so


def select(grad: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``grad`` where ``keep > 0`` else exactly 0; ``keep`` is a scratch tensor we own.

    ``threshold_backward`` is torch's own fused ReLU-backward kernel: a single same-dtype pass,
    and a select, not a multiply (``0 * inf`` would be NaN).
    """
    return _in_float32_where_missing(_threshold_backward_into, grad, keep)


def _threshold_backward_into(grad: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``threshold_backward(grad, keep, 0)``, written into ``keep`` where that is allowed."""
    if _HAS_OUT and _out_variant_ok() and keep.is_contiguous():
        # Reuse the scratch buffer for the result: one fresh allocation fewer (on CPU a fresh
        # 64 MiB tensor costs as much in page faults as the kernel itself).
        return _threshold_backward.grad_input(grad, keep, 0, grad_input=keep)
    return _threshold_backward(grad, keep, 0)


def grad_where_output_positive(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    """The backward of ReLU and InplaceReLU: ``grad`` where the saved output is nonzero, else 0."""
    (y,) = ctx.saved_tensors
    return _in_float32_where_missing(_threshold_backward, grad, y, 0)


def masked_grad(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``grad`` where the bool ``mask`` is set, else 0."""
    # torch 2.0's vmap has no batching rule for view(dtype); dynamo (2.1) cannot trace the check.
    if _is_compiling() or not _transforms_active():
        # uint8 -> float converts about 1.5x faster than bool -> float on CPU; the view is free.
        mask = mask.view(torch.uint8)
    return select(grad, mask.to(grad.dtype))
