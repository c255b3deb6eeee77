"""Reference custom operators: ``clipped_relu`` and ``mask_relu`` as ``compatfn.custom_op`` ops.

The same math as :mod:`compatfn.relu`'s Functions, written once as operators
(``torch.ops.compatfn.clipped_relu`` / ``torch.ops.compatfn.mask_relu`` wherever the running torch
registers operators, see :data:`compatfn.library.TIER`). Importing this module defines them.

Example::

    >>> from compatfn.relu_ops import clipped_relu_op
    >>> clipped_relu_op(torch.tensor([-1.0, 0.5, 3.0]), clip=2.0)
    tensor([0.0000, 0.5000, 2.0000])
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from compatfn.library import custom_op

__all__ = ["clipped_relu_op", "mask_relu_op"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _keep(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``grad`` where ``mask`` is set, else exactly 0 (a select: ``0 * inf`` would be NaN)."""
    return torch.where(mask, grad, torch.zeros_like(grad))


@custom_op("compatfn::clipped_relu", mutates_args=())
def clipped_relu_op(x: torch.Tensor, clip: float = 1.0) -> torch.Tensor:
    """``x.clamp(0, clip)``; the gradient passes where ``0 < x < clip``."""
    if x.dtype in _LOW_PRECISION and x.device.type == "cpu":
        return x.float().clamp(0.0, clip).to(x.dtype)  # no half clamp on CPU before torch 2.1
    return x.clamp(0.0, clip)


@clipped_relu_op.register_fake
def _clipped_relu_fake(x: torch.Tensor, clip: float = 1.0) -> torch.Tensor:
    return torch.empty_like(x)


def _clipped_relu_setup(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
    x, clip = inputs  # the default is filled in on every torch
    ctx.save_for_backward((x > 0) & (x < clip))


def _clipped_relu_backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
    (mask,) = ctx.saved_tensors
    return _keep(grad, mask), None


clipped_relu_op.register_autograd(_clipped_relu_backward, setup_context=_clipped_relu_setup)


@custom_op("compatfn::mask_relu", mutates_args=())
def mask_relu_op(x: torch.Tensor) -> torch.Tensor:
    """ReLU that keeps only a bool mask alive for backward."""
    if x.dtype in _LOW_PRECISION and x.device.type == "cpu":
        return torch.threshold(x.float(), 0.0, 0.0).to(x.dtype)
    return torch.threshold(x, 0.0, 0.0)


@mask_relu_op.register_fake
def _mask_relu_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _mask_relu_setup(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(output != 0)


def _mask_relu_backward(ctx: Any, grad: torch.Tensor) -> Optional[torch.Tensor]:
    (mask,) = ctx.saved_tensors
    return _keep(grad, mask)


mask_relu_op.register_autograd(_mask_relu_backward, setup_context=_mask_relu_setup)
