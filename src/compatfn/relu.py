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
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, Tuple

import torch

import compatfn
from compatfn.core import BACKWARD_RETRACED_BY_MAKE_FX, is_compiling, transforms_active

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

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_threshold_backward = torch.ops.aten.threshold_backward


# --------------------------------------------------------------------------- kernels


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


def _threshold(x: torch.Tensor) -> torch.Tensor:
    """``torch.threshold(x, 0, 0)``: ReLU with ``+0.0`` for ``-0.0`` on every torch."""
    return _in_float32_where_missing(torch.threshold, x, 0.0, 0.0)


def _threshold_(x: torch.Tensor) -> torch.Tensor:
    """In-place :func:`_threshold`: returns ``x``, overwritten."""
    return _in_float32_where_missing(torch.threshold_, x, 0.0, 0.0, inplace=True)


def _clamp(x: torch.Tensor, clip: float) -> torch.Tensor:
    """``x.clamp(0, clip)``."""
    return _in_float32_where_missing(torch.clamp, x, 0.0, clip)


def _out_variant_ok() -> bool:
    """Whether backward may write its result into a scratch buffer it owns (``out=``).

    Not when building a graph (double backward), under torch.func transforms or while
    torch.compile traces: there the out-of-place op is the one that composes.
    """
    # is_compiling first: dynamo cannot trace the transforms check (a C call returning a bool).
    return not (torch.is_grad_enabled() or is_compiling() or transforms_active())


_HAS_OUT = hasattr(_threshold_backward, "grad_input")  # aten overloads: torch >= 1.10 or so


def _select(grad: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
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


def _grad_where_output_positive(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    """The backward of ReLU and InplaceReLU: ``grad`` where the saved output is nonzero, else 0."""
    (y,) = ctx.saved_tensors
    return _in_float32_where_missing(_threshold_backward, grad, y, 0)


def _masked_grad(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``grad`` where the bool ``mask`` is set, else 0."""
    # torch 2.0's vmap has no batching rule for view(dtype); dynamo (2.1) cannot trace the check.
    if is_compiling() or not transforms_active():
        # uint8 -> float converts about 1.5x faster than bool -> float on CPU; the view is free.
        mask = mask.view(torch.uint8)
    return _select(grad, mask.to(grad.dtype))


# Bit packing. Fast path: word-wide multiply on int64 views (needs Tensor.view(dtype) across
# element sizes, torch >= 1.11, and a little-endian machine). Fallback: a broadcast weighted sum.
_PACK = 0x0102040810204080  # byte k of a word -> bit 56 + k of the product (no carries)
_SPREAD = 0x0101010101010101  # copy one byte into all eight bytes of a word
# Keep bit k in byte k. A 0-d int64 tensor, not a Python int: torch 2.1's fake tensors (used by
# torch.compile) have no in-place ``bitwise_and_`` with a Scalar operand ("Expected a value of type
# 'Tensor' for argument 'other'"), while the Tensor overload traces everywhere; eagerly a 0-d CPU
# tensor is a scalar operand for any device, and costs the same as the Python int.
_SELECT = 0x8040201008040201 - (1 << 64)


def _has_wide_views() -> bool:
    try:
        torch.zeros(8, dtype=torch.bool).view(torch.int64)
    except RuntimeError:  # torch < 1.11: "Viewing a tensor as a new dtype with a different ..."
        return False
    return sys.byteorder == "little"


_WIDE_VIEWS = _has_wide_views()


def _not_tracing() -> bool:
    return False


# The word-wide tricks are an eager-mode optimisation: while torch traces (torch.compile), plain
# ops are used, which the compiler fuses anyway. torch 2.1's fake tensors get both tricks wrong
# (``view(dtype)`` across element sizes keeps the element count; no ``bitwise_and_`` with a
# Scalar), and torch 2.1-2.2 trace a Function's backward a second time with make_fx (AOTAutograd)
# outside dynamo, where ``is_compiling()`` is False but ``torch.fx`` reports the trace. (Newer
# torch traces it with dynamo only, and warns on ``is_fx_tracing``: not consulted there.)
_fx_tracing: Callable[[], bool] = _not_tracing
if BACKWARD_RETRACED_BY_MAKE_FX:
    import torch.fx

    _fx_tracing = torch.fx._symbolic_trace.is_fx_tracing


def _tracing() -> bool:
    """Whether torch is tracing this code (dynamo, or make_fx on torch 2.1-2.2)."""
    return is_compiling() or _fx_tracing()


def _bit_weights(device: torch.device) -> torch.Tensor:
    return torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=device)


def _pack_nonzero(y: torch.Tensor) -> torch.Tensor:
    """One bit per element of ``y`` (set where ``y != 0``, NaN included), ``ceil(n/8)`` bytes."""
    n = y.numel()
    words = (n + 7) // 8
    if n == 0:
        return torch.empty(0, dtype=torch.uint8, device=y.device)
    bits = torch.empty(words * 8, dtype=torch.bool, device=y.device)
    bits[:n].copy_(y.reshape(-1))  # float -> bool conversion: the cheapest "!= 0" there is
    bits[n:].zero_()
    if _WIDE_VIEWS and not _tracing():
        product = bits.view(torch.int64).mul_(_PACK)
        return (
            product.view(torch.uint8)
            .view(words, 8)[:, 7]
            .clone(memory_format=torch.contiguous_format)
        )
    weighted = bits.view(words, 8).to(torch.uint8) * _bit_weights(y.device)
    return weighted.sum(1).to(torch.uint8)


def _unpack_keep(packed: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """A ``dtype`` tensor of ``n`` elements, ``> 0`` where the bit is set and ``0`` elsewhere."""
    if n == 0:
        return torch.empty(0, dtype=dtype, device=packed.device)
    if _WIDE_VIEWS and not _tracing():
        spread = (
            packed.to(torch.int64, memory_format=torch.contiguous_format)
            .mul_(_SPREAD)
            .bitwise_and_(_SELECT)
        )
        keep = spread.view(torch.uint8)  # byte k holds 0 or 2**k
    else:
        keep = (packed.unsqueeze(-1) & _bit_weights(packed.device)).view(-1)
    return keep[:n].to(dtype)


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
        return _threshold(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    backward = staticmethod(_grad_where_output_positive)


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
        return _clamp(x, clip)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        x, clip = inputs  # compatfn always passes the defaults: clip is here even for apply(x)
        mask = (x > 0) & (x < clip)  # compared in x.dtype, like the clamp bound
        ctx.save_for_backward(mask)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        (mask,) = ctx.saved_tensors
        return _masked_grad(grad, mask), None  # None: clip is not differentiable


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
        return _threshold(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.set_materialize_grads(False)  # backward receives None for an unused output
        ctx.save_for_backward(output.bool())  # float -> bool is the cheapest "!= 0" in torch

    @staticmethod
    def backward(ctx: Any, grad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if grad is None:  # possible because of set_materialize_grads(False)
            return None
        (mask,) = ctx.saved_tensors
        return _masked_grad(grad, mask)


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
        _threshold_(x)
        return x  # the very input object: torch.compile checks that dirty inputs are returned

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        (x,) = inputs
        ctx.mark_dirty(x)
        ctx.save_for_backward(output)  # the overwritten input *is* the output: no extra memory

    backward = staticmethod(_grad_where_output_positive)


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
        return _threshold(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(_pack_nonzero(output))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (packed,) = ctx.saved_tensors
        keep = _unpack_keep(packed, grad.numel(), grad.dtype).view(grad.shape)
        return _select(grad, keep)


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
