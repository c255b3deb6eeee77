"""``register_autocast`` on compatfn's tiers: as torch's Autocast kernel of a custom op, the op's
eligible tensor inputs cast and autocast off for the device inside."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import torch

from compatfn.core import _autocast_api, _cast
from compatfn.library._facts import HAS_DEVICE_AUTOCAST
from compatfn.library._kernels import kernel_keywords
from compatfn.library._utils import tensors_in

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = [
    "autocast_kernel",
    "autocast_rule",
    "call_autocast",
    "check_autocast_device_type",
    "check_autocast_key",
]

# NOTE: [a custom op's autocast rule]
# torch runs an op's autocast rule (``register_autocast``) as the op's kernel for the Autocast
# key of a device type, which a call reaches only where a tensor argument is on that device
# type and autocast is on for it (meta tensors or CPU tensors under CUDA autocast do not). The
# rule refuses keyword arguments (keyword-only ones the dispatcher does not leave out: "Custom
# ops do not support kwargs yet"), casts each floating-point tensor on that device type that is
# not float64 (in tensor lists too) and calls the op with that Autocast key excluded. compatfn's
# tiers do the same in the op's call (measured against torch 2.13's own op).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.5.0/torch/_library/custom_ops.py


#: The device types torch 2.13 parses (its ``torch.device`` error lists them) and those of them its
#: ``register_autocast`` accepts (measured on 2.13; the answer depends on the torch release, and
#: compatfn's tiers answer as 2.13 does, then refuse what this torch has no autocast for).
_DEVICE_TYPES = frozenset(
    [
        "cpu",
        "cuda",
        "ipu",
        "xpu",
        "mkldnn",
        "opengl",
        "opencl",
        "ideep",
        "hip",
        "ve",
        "fpga",
        "maia",
        "xla",
        "lazy",
        "vulkan",
        "mps",
        "meta",
        "hpu",
        "mtia",
        "privateuseone",
    ]
)
_AUTOCAST_DEVICE_TYPES = frozenset(
    ["cpu", "cuda", "xpu", "mps", "hpu", "xla", "ipu", "mtia", "maia", "privateuseone"]
)

#: Those of them torch 2.13's own op refuses with this AttributeError, each time (its dispatcher
#: has no such Autocast key: measured on 2.13 and 2.15).
_NO_AUTOCAST_KEY = {"xla": "AutocastXLA", "mtia": "AutocastMTIA", "maia": "AutocastMAIA"}


def _is_autocast_available(device_type: str) -> bool:
    """Whether torch 2.13's ``register_autocast`` takes ``device_type`` (its errors for a device
    string with an index, and this torch's for one it cannot parse)."""
    name, _, index = device_type.partition(":")
    if name not in _DEVICE_TYPES or not (index == "" or index.isdigit()):
        torch.device(device_type)  # this torch's error for a string it cannot parse
        return False
    if name in _AUTOCAST_DEVICE_TYPES and index:
        raise RuntimeError(
            f"Expected device_type string to not have a device index; got {device_type}"
        )
    return name in _AUTOCAST_DEVICE_TYPES


def check_autocast_device_type(op: CustomOp, device_type: Any) -> None:
    """torch's checks of ``register_autocast``'s device type, with its errors; then compatfn's
    error naming the op where this torch has autocast for that device type that compatfn cannot
    query (``xpu`` on torch 1.13, say)."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if not _is_autocast_available(device_type):
        raise ValueError(f"Device type '{device_type}' does not support autocast.")
    try:
        _autocast_api(device_type)
    except ValueError as error:
        if device_type != "cpu":  # torch 1.8/1.9 have no CPU autocast: the rule never applies
            raise ValueError(f"{op._qualname}: register_autocast: {error}") from None


def check_autocast_key(device_type: str) -> None:
    """torch 2.13's error registering a rule for a device type its dispatcher has no Autocast
    key for (See ``_NO_AUTOCAST_KEY``)."""
    key = _NO_AUTOCAST_KEY.get(device_type)
    if key is not None:
        raise AttributeError(f"type object 'torch._C.DispatchKey' has no attribute '{key}'")


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
    """``op`` called as its autocast rule calls it (See NOTE: [a custom op's autocast rule]):
    with the arguments the dispatcher passes (``inputs``: trailing ones equal to their defaults
    left out)."""
    keywords = kernel_keywords(op, keyword_only)
    if keywords:
        raise AssertionError(f"Custom ops do not support kwargs yet, got {list(keywords)}")
    device_type, dtype = rule
    with _autocast_off(device_type):
        return op(*(_cast(v, device_type, dtype) for v in inputs), **keyword_only)


def autocast_kernel(op: CustomOp, device_type: str, dtype: Any) -> Callable:
    """What torch's ``register_autocast`` returns: the rule as a kernel, called with a dispatch
    key set first (which it ignores) and the op's arguments, keywords refused."""

    def kernel(_: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise AssertionError(f"Custom ops do not support kwargs yet, got {list(kwargs)}")
        with _autocast_off(device_type):
            return op(*(_cast(v, device_type, dtype) for v in args))

    return kernel


def _autocast_off(device_type: str) -> Any:
    """Autocast off for ``device_type`` (torch 1.8 has only ``torch.cuda.amp.autocast``)."""
    if HAS_DEVICE_AUTOCAST:
        return torch.autocast(device_type, enabled=False)
    return torch.cuda.amp.autocast(enabled=False)
