"""``register_autocast`` on compatfn's tiers: the op's inputs cast, autocast off inside."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

import torch

from compatfn.library._facts import HAS_DEVICE_AUTOCAST
from compatfn.library._utils import is_tensor_list, tensors_in

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = ["autocast_dtype", "call_autocast"]


def autocast_dtype(autocast: Dict[str, torch.dtype]) -> Optional[torch.dtype]:
    """The dtype registered for the device type whose autocast is on, if any."""
    for device_type, dtype in autocast.items():
        enabled = (
            torch.is_autocast_enabled()
            if device_type == "cuda"
            else getattr(torch, "is_autocast_cpu_enabled", lambda: False)()
        )
        if enabled:
            return dtype
    return None


def call_autocast(op: CustomOp, inputs: tuple, keyword_only: Dict[str, Any], dtype: Any) -> Any:
    """``op`` with its floating-point tensor inputs cast to ``dtype`` and autocast off."""

    def cast(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.to(dtype)
        if is_tensor_list(v):
            return [cast(t) for t in v]
        return v

    cast_inputs = tuple(cast(v) for v in inputs)
    devices = {"cuda" if t.is_cuda else "cpu" for t in tensors_in(inputs)}
    with _autocast_off(devices.pop() if len(devices) == 1 else "cpu"):
        return op(*cast_inputs, **keyword_only)


def _autocast_off(device_type: str) -> Any:
    """Autocast off for ``device_type`` (torch 1.8 has only ``torch.cuda.amp.autocast``)."""
    if HAS_DEVICE_AUTOCAST:
        return torch.autocast(device_type, enabled=False)
    return torch.cuda.amp.autocast(enabled=False)
