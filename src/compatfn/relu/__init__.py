"""Reference ReLU suite: five ``@compatfn.function`` classes that show each ctx feature done right.

Every Function is written once in the setup_context style and runs on every torch from 1.8 to the
newest. Each comes with a functional wrapper (built with :func:`compatfn.functional`) and an
``nn.Module``:

* ``ReLU`` / ``relu(x)`` / ``ReLUModule``: the minimal form; saves the output, nothing more.
* ``ClippedReLU`` / ``clipped_relu(x, clip=1.0)`` / ``ClippedReLUModule``: a non-tensor argument
  with a default and a ``None`` gradient for it.
* ``MaskReLU`` / ``mask_relu(x)`` / ``MaskReLUModule``: saves a bool mask (1 byte/element) instead
  of the output; ``set_materialize_grads(False)``.
* ``InplaceReLU`` / ``inplace_relu(x)`` / ``InplaceReLUModule``: in-place forward with
  ``mark_dirty``; saves the output (which is the overwritten input: no extra memory).
* ``BitReLU`` / ``bit_relu(x)`` / ``BitReLUModule``: saves a bit-packed mask (1 bit/element, 32x
  less than the float32 output ``torch.relu`` keeps alive).

Semantics, identical on every torch, any shape and dtype (float16/bfloat16/float32/float64):

* values: ``relu(x) == torch.threshold(x, 0, 0)`` (``-0.0`` maps to ``+0.0``, NaN stays NaN);
  ``clipped_relu(x, C) == x.clamp(0, C)``.
* gradients: ``grad`` where ``relu(x) != 0`` (NaN inputs pass it, like ``torch.relu``), for
  ``ClippedReLU`` where ``0 < x < C`` (NaN inputs get 0, like ``clamp``); else exactly ``0``, also
  for infinite or NaN incoming gradients (a select, never ``0 * inf``). At the kinks (``x == 0``
  and ``x == C``) the gradient is ``0``.
* double backward: supported by all five. Each backward is linear in ``grad`` with a mask that
  does not depend differentiably on ``x``, so ``d(backward)/d(grad)`` is the same masking and the
  second derivative w.r.t. ``x`` is ``0`` (everywhere except the kinks, where it is undefined).

On CPU, dtypes a torch has no kernel for (float16 on torch < 2.1, bfloat16 ReLU on 1.8) are
computed in float32 and rounded back, which is exact for these piecewise-linear functions.

Layout: the Functions, their wrappers and modules are here; the kernels they share are in
``_kernels`` and the bit packing of ``BitReLU`` in ``_bits``.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

import compatfn
from compatfn.relu._bits import pack_nonzero, unpack_keep
from compatfn.relu._kernels import (
    clamp,
    grad_where_output_positive,
    masked_grad,
    select,
    threshold,
    threshold_,
)

__all__ = [
    "BitReLU",
    "BitReLUModule",
    "ClippedReLU",
    "ClippedReLUModule",
    "InplaceReLU",
    "InplaceReLUModule",
    "MaskReLU",
    "MaskReLUModule",
    "ReLU",
    "ReLUModule",
    "bit_relu",
    "clipped_relu",
    "inplace_relu",
    "mask_relu",
    "relu",
]


# --------------------------------------------------------------------------- Functions


@compatfn.function
class ReLU(torch.autograd.Function):
    """ReLU in its minimal form: saves the output (what backward needs), nothing more.

    Example: ``ReLU.apply(torch.randn(3, requires_grad=True))``, or ``relu(x)``.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        """ReLU, ``max(x, 0)``; saves the output (like ``torch.relu``).

        Example::

            >>> from compatfn.relu import relu
            >>> relu(torch.tensor([-1.0, 0.0, 2.0]))
            tensor([0., 0., 2.])
        """
        return threshold(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    backward = staticmethod(grad_where_output_positive)


@compatfn.function
class ClippedReLU(torch.autograd.Function):
    """Clipped ReLU ``min(max(0, x), clip)``: a non-tensor argument with a default.

    Example: ``ClippedReLU.apply(torch.randn(3, requires_grad=True), clip=6.0)``, or
    ``clipped_relu(x, clip=6.0)``.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, clip: float = 1.0) -> torch.Tensor:
        """Clipped ReLU ``x.clamp(0, clip)``; the gradient is 1 on ``0 < x < clip``, else 0.

        ``clip`` is a Python number ``>= 0`` and gets a ``None`` gradient. Saves a bool mask.

        Example::

            >>> from compatfn.relu import clipped_relu
            >>> clipped_relu(torch.tensor([-1.0, 0.5, 3.0]), clip=2.0)
            tensor([0.0000, 0.5000, 2.0000])
        """
        if isinstance(clip, torch.Tensor) or not clip >= 0:
            raise ValueError(f"ClippedReLU: clip must be a number >= 0, got {clip!r}")
        return clamp(x, clip)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        x, clip = inputs  # compatfn always passes the defaults: clip is here even for apply(x)
        mask = (x > 0) & (x < clip)  # compared in x.dtype, like the clamp bound
        ctx.save_for_backward(mask)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        (mask,) = ctx.saved_tensors
        return masked_grad(grad, mask), None  # None: clip is not differentiable


@compatfn.function
class MaskReLU(torch.autograd.Function):
    """ReLU that saves a bool mask (1 byte/element, a quarter of a float32 output).

    Example: ``MaskReLU.apply(torch.randn(3, requires_grad=True))``, or ``mask_relu(x)``.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        """ReLU that keeps only a bool mask alive for backward (4x less than ``torch.relu``).

        Example::

            >>> from compatfn.relu import mask_relu
            >>> mask_relu(torch.tensor([-1.0, 2.0]))
            tensor([0., 2.])
        """
        return threshold(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.set_materialize_grads(False)  # backward receives None for an unused output
        ctx.save_for_backward(output.bool())  # float -> bool is the cheapest "!= 0" in torch

    @staticmethod
    def backward(ctx: Any, grad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if grad is None:  # possible because of set_materialize_grads(False)
            return None
        (mask,) = ctx.saved_tensors
        return masked_grad(grad, mask)


@compatfn.function
class InplaceReLU(torch.autograd.Function):
    """ReLU that overwrites its input (``mark_dirty``) and saves the output for backward.

    Example: ``InplaceReLU.apply(torch.randn(3))``, or ``inplace_relu(x)`` (``x`` must not be a
    leaf that requires grad: autograd refuses in-place changes to those).
    """

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        """In-place ReLU: overwrites ``x`` and returns it.

        Like ``torch.relu_``: an error on a leaf that requires grad (raised by autograd after
        forward ran, as for every custom in-place Function), correct on views. Where nothing
        requires grad, torch < 2.0 (and the legacy path) may return a new Tensor object sharing
        ``x``'s memory (pytorch #90209).

        Example::

            >>> from compatfn.relu import inplace_relu
            >>> x = torch.tensor([-1.0, 2.0])
            >>> inplace_relu(x) is x, x
            (True, tensor([0., 2.]))
        """
        threshold_(x)
        return x  # the very input object: torch.compile checks that dirty inputs are returned

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        (x,) = inputs
        ctx.mark_dirty(x)
        ctx.save_for_backward(output)  # the overwritten input *is* the output: no extra memory

    backward = staticmethod(grad_where_output_positive)


@compatfn.function
class BitReLU(torch.autograd.Function):
    """ReLU that saves a bit-packed mask: 1 bit/element, 32x less than a float32 output.

    Example: ``BitReLU.apply(torch.randn(3, requires_grad=True))``, or ``bit_relu(x)``.
    """

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        """ReLU that keeps one bit per element alive for backward (``ceil(numel/8)`` bytes).

        Example::

            >>> from compatfn.relu import bit_relu
            >>> bit_relu(torch.tensor([-1.0, 2.0]))
            tensor([0., 2.])
        """
        return threshold(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(pack_nonzero(output))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (packed,) = ctx.saved_tensors
        keep = unpack_keep(packed, grad.numel(), grad.dtype).view(grad.shape)
        return select(grad, keep)


# --------------------------------------------------------------------------- wrappers, modules

relu = compatfn.functional(ReLU)
clipped_relu = compatfn.functional(ClippedReLU)
mask_relu = compatfn.functional(MaskReLU)
inplace_relu = compatfn.functional(InplaceReLU)
bit_relu = compatfn.functional(BitReLU)


class ReLUModule(torch.nn.Module):
    """``nn.Module`` for :class:`ReLU`. Example: ``ReLUModule()(torch.randn(3))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu(x)


class ClippedReLUModule(torch.nn.Module):
    """``nn.Module`` for :class:`ClippedReLU`.

    Example: ``ClippedReLUModule(clip=6.0)(torch.randn(3))``.
    """

    def __init__(self, clip: float = 1.0) -> None:
        super().__init__()
        if isinstance(clip, torch.Tensor) or not clip >= 0:
            raise ValueError(f"ClippedReLUModule: clip must be a number >= 0, got {clip!r}")
        self.clip = clip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return clipped_relu(x, self.clip)

    def extra_repr(self) -> str:
        return f"clip={self.clip}"


class MaskReLUModule(torch.nn.Module):
    """``nn.Module`` for :class:`MaskReLU`. Example: ``MaskReLUModule()(torch.randn(3))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mask_relu(x)


class InplaceReLUModule(torch.nn.Module):
    """``nn.Module`` for :class:`InplaceReLU` (overwrites its input).

    Example: ``InplaceReLUModule()(torch.randn(3))``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return inplace_relu(x)


class BitReLUModule(torch.nn.Module):
    """``nn.Module`` for :class:`BitReLU`. Example: ``BitReLUModule()(torch.randn(3))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bit_relu(x)
