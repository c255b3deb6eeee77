"""Bit packing for ``BitReLU``: one bit per element (``ceil(numel/8)`` bytes) and back.

Example::

    >>> from compatfn.relu._bits import pack_nonzero, unpack_keep
    >>> packed = pack_nonzero(torch.tensor([0.0, 2.0, 0.0, 1.0]))
    >>> packed.tolist(), unpack_keep(packed, 4, torch.float32) > 0
    ([10], tensor([False,  True, False,  True]))
"""

from __future__ import annotations

import sys
from typing import Callable

import torch

from compatfn.core import TORCH_VERSION, is_compiling

__all__ = ["pack_nonzero", "unpack_keep"]

#: torch 2.1-2.2: AOTAutograd re-traces a Function's backward with make_fx outside dynamo, so
#: backward code must be traceable by make_fx too (measured; torch 2.3 traces it within dynamo).
BACKWARD_RETRACED_BY_MAKE_FX = (2, 1) <= TORCH_VERSION < (2, 3)

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


def pack_nonzero(y: torch.Tensor) -> torch.Tensor:
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


def unpack_keep(packed: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
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
