"""``register_autocast`` on compatfn's tiers: as torch's Autocast kernel of a custom op, the op's
eligible tensor inputs cast and autocast off for the device inside."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import torch

from compatfn.core import _autocast_api
from compatfn.library._facts import HAS_DEVICE_AUTOCAST
from compatfn.library._kernels import kernel_keywords
from compatfn.library._utils import is_tensor_list, tensors_in

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = ["autocast_rule", "call_autocast"]

# NOTE: [a custom op's autocast rule]
# torch runs an op's autocast rule (``register_autocast``) as the op's kernel for the Autocast
# key of a device type, which a call reaches only where a tensor argument is on that device
# type and autocast is on for it (meta tensors or CPU tensors under CUDA autocast do not). The
# rule refuses keyword arguments (keyword-only ones the dispatcher does not leave out: "Custom
# ops do not support kwargs yet"), casts each floating-point tensor on that device type that is
# not float64 (in tensor lists too) and calls the op with that Autocast key excluded. compatfn's
# tiers do the same in the op's call (measured against torch 2.13's own op).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.5.0/torch/_library/custom_ops.py


def autocast_rule(op: CustomOp, inputs: tuple) -> Optional[Tuple[str, torch.dtype]]:
    """The device type and dtype of the autocast rule a call of ``op`` with ``inputs`` reaches
    (See NOTE: [a custom op's autocast rule]), if any."""
    for device_type, dtype in op._autocast.items():
        if _autocast_enabled(device_type)() and any(
            t.device.type == device_type for t in tensors_in(inputs)
        ):
            return device_type, dtype
    return None


@functools.lru_cache(maxsize=None)
def _autocast_enabled(device_type: str) -> Callable[[], bool]:
    """Whether autocast is on for ``device_type``: core's query for this torch (never, where
    this torch has no autocast for it: the CPU on torch 1.8)."""
    try:
        return _autocast_api(device_type)[0]
    except ValueError:
        return lambda: False


def call_autocast(
    op: CustomOp, inputs: tuple, keyword_only: Dict[str, Any], rule: Tuple[str, torch.dtype]
) -> Any:
    """``op`` called as its autocast rule calls it (See NOTE: [a custom op's autocast rule])."""
    keywords = kernel_keywords(op, keyword_only)
    if keywords:
        raise AssertionError(f"Custom ops do not support kwargs yet, got {list(keywords)}")
    device_type, dtype = rule

    def cast(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            eligible = (
                v.is_floating_point()
                and v.device.type == device_type
                and v.dtype is not torch.float64
            )
            return v.to(dtype) if eligible else v
        if is_tensor_list(v):
            return [cast(t) for t in v]
        return v

    with _autocast_off(device_type):
        return op(*(cast(v) for v in inputs), **keyword_only)


def _autocast_off(device_type: str) -> Any:
    """Autocast off for ``device_type`` (torch 1.8 has only ``torch.cuda.amp.autocast``)."""
    if HAS_DEVICE_AUTOCAST:
        return torch.autocast(device_type, enabled=False)
    return torch.cuda.amp.autocast(enabled=False)
