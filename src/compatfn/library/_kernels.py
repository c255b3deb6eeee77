"""Running an op's kernels on compatfn's tiers (torch < 2.4): the kernel for a call's device,
the fake kernel for meta tensors, torch's aliasing rule and the version bump of mutated
arguments."""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from compatfn.library._facts import HAS_ZERO_TENSOR
from compatfn.library._infer_schema import arguments_text, declared_arguments
from compatfn.library._no_operator import fallback_inputs, resolved
from compatfn.library._returns import (
    as_tensor,
    as_tensor_list,
    converted_returns,
    is_sequence,
    return_types,
    type_name,
)
from compatfn.library._storage import (
    aliases_any,
    other_backend,
)
from compatfn.library._utils import (
    bump_version,
    compared_kind,
    dispatch_key,
    elidable,
    tensors_in,
)

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

#: torch's ``set_kernel_enabled`` warnings, as torch logs them (``logging``, not ``warnings``).
_log = logging.getLogger(__name__)

__all__ = [
    "ad_inplace_or_view_runs",
    "as_autograd_returned",
    "as_returned",
    "bump_zero_tensors",
    "check_device_argument",
    "check_device_types",
    "check_no_alias",
    "checked_output",
    "converted_output",
    "device_argument_index",
    "has_tensor_argument",
    "kernel_keywords",
    "kernel_switched",
    "keyword_defaults",
    "run_kernel",
]


def check_device_types(device_types: Optional[Tuple[str, ...]]) -> None:
    """torch's error for a device type it does not know ("gpu"), as torch 2.4+ at definition."""
    for device_type in device_types or ():
        if device_type != "meta":  # torch 1.8 has no meta device; its fake kernels never run
            torch.device(device_type)


def kernel_for(op: CustomOp, inputs: tuple) -> Callable:
    """The kernel registered for the device of the call's first tensor (the function the op was
    made from where that kernel is disabled); torch's error where there is none. A call without
    tensors runs the kernel for its ``device`` argument, else the kernel for every device (See
    NOTE: [calls without tensors])."""
    tensors = tensors_in(inputs)
    backend = other_backend(tensors) if tensors else None
    if backend is not None:  # See NOTE: [backends other than dense]
        kernel = op._kernels.get(None)
        if kernel is None or backend.startswith("NestedTensor"):
            raise _no_kernel_error(op, backend)
        return kernel
    if tensors:
        device: Optional[str] = tensors[0].device.type
    elif op._device_index is not None and op._device_index < len(inputs):
        device = torch.device(inputs[op._device_index]).type
        if op._by_device_only and device not in op._kernels:
            raise RuntimeError(
                f"{op._name} does not have a kernel registered for {device}. Please use "
                "register_kernel to do so."
            )
    else:
        device = None
    if device == "meta":
        return _meta_kernel_for(op)
    kernel = op._kernels.get(device, op._kernels.get(None))
    if op._switched_by.get(device, device) in op._disabled_kernels and device in op._kernels:
        return op._init_fn  # as torch: the function the op was made from
    if kernel is None:
        raise _no_kernel_error(op, device)
    return kernel


# NOTE: [calls without tensors]
# torch's dispatcher picks a kernel by the dispatch keys of a call's tensors. Without any (an
# empty ``Tensor[]``, a None ``Tensor?``), it runs the kernel registered for every device, else
# fails; an op whose schema has no tensor argument at all takes its device from a ``device:
# torch.device`` argument (torch's BackendSelect kernel), and torch refuses device kernels for
# such an op without one (``CustomOpDef.register_kernel``, torch >= 2.4; measured on 2.13).
# Once the op has kernels for named device types (``device_types=``, ``register_kernel("cpu")``)
# that BackendSelect kernel refuses a device without a kernel of its own, meta included, even
# where the op has a kernel for every device (``_by_device_only``; measured on 2.13).


# NOTE: [kernels of several devices]
# torch's ``CustomOpDef.register_kernel(("cpu", "cuda"), fn)`` wraps ``fn`` once per device in
# a closure over its loop variable: every one of those kernels reads whether the *last*
# device of the tuple is disabled (measured on torch 2.13 and 2.15). ``set_kernel_enabled
# ("cpu", False)`` then leaves that "cpu" kernel running, and disabling "cuda" switches
# both. compatfn's kernels follow (``_switched_by``); a later registration for one device
# switches by that device again.


@contextlib.contextmanager
def kernel_switched(op: CustomOp, device_type: str, enabled: bool) -> Iterator[None]:
    """``op.set_kernel_enabled``: the kernel for ``device_type`` switched inside the block, with
    torch's log warnings for a device without a kernel and a switch to the state it has."""
    was_disabled = device_type in op._disabled_kernels
    action = "enable" if enabled else "disable"
    if device_type not in op._kernels:
        _log.warning(
            "Attempted to %s kernel for %s but no kernel was registered for this device type.",
            action,
            device_type,
        )
    if was_disabled is not enabled:
        already = "disabled" if was_disabled else "enabled"
        _log.warning(
            "Attempted to %s kernel for %s but it was already %s.", action, device_type, already
        )
    if enabled:
        op._disabled_kernels.discard(device_type)
    else:
        op._disabled_kernels.add(device_type)
    try:
        yield
    finally:
        if was_disabled:
            op._disabled_kernels.add(device_type)
        else:
            op._disabled_kernels.discard(device_type)


def _no_kernel_error(op: CustomOp, device: Optional[str]) -> NotImplementedError:
    """torch's error for a call no registered kernel takes (its first paragraph: the registry
    torch lists after it is the dispatcher's own)."""
    available = ", ".join(sorted(dispatch_key(d) for d in op._kernels))
    if device is None:
        return NotImplementedError(
            "There were no tensor arguments to this function (e.g., you passed an empty list of "
            f"Tensors), but no fallback function is registered for schema {op._qualname}.  This "
            "usually means that this function requires a non-empty list of Tensors, or that you "
            "(the operator writer) forgot to register a fallback function.  Available functions "
            f"are [{available}]."
        )
    key = device if device[0].isupper() else dispatch_key(device)  # a backend's key as is
    return NotImplementedError(
        f"Could not run '{op._qualname}' with arguments from the '{key}' "
        "backend. This could be because the operator doesn't exist for this backend, or was "
        "omitted during the selective/custom build process (if using custom build). If you are a "
        "Facebook employee using PyTorch on mobile, please visit https://fburl.com/ptmfixes for "
        f"possible resolutions. '{op._qualname}' is only available for these backends: "
        f"[{available}]."
    )


def check_device_argument(op: CustomOp, device_types: Tuple[str, ...]) -> None:
    """torch's error for device kernels of an op without tensor arguments and without a
    ``device`` argument (See NOTE: [calls without tensors])."""
    if device_types and op._device_index is None and not has_tensor_argument(op._schema):
        raise ValueError(
            "Functions without tensor inputs are required to have a `device: torch.device` argument"
        )


def has_tensor_argument(schema: str) -> bool:
    """Whether ``schema`` has an argument of a tensor type (``Tensor``, ``Tensor?``, lists)."""
    return any(kind.startswith("Tensor") for kind, _ in declared_arguments(schema))


def device_argument_index(schema: str) -> Optional[int]:
    """The position of the ``Device device`` argument (``device: torch.device``), if any."""
    arguments = declared_arguments(schema)
    return arguments.index(("Device", "device")) if ("Device", "device") in arguments else None


def _meta_kernel_for(op: CustomOp, fake_tensors: bool = False) -> Callable:
    """The kernel registered for ``"meta"``, else the fake kernel (the fake kernel alone for
    FakeTensors on their own device: ``fake_tensors``), else, for an op that mutates arguments
    and returns nothing, one returning None (torch's trivial fake impl, torch >= 2.5), else
    torch's error (the device-generic kernel never runs for meta tensors, as on torch >= 2.4)."""
    kernel = op._fake if fake_tensors else op._kernels.get("meta") or op._fake
    if kernel is None and _has_trivial_fake(op._schema):
        return _returns_nothing
    if kernel is None:
        raise RuntimeError(
            f"There was no fake impl registered for {op!r}. This is necessary for "
            f"torch.compile/export/fx tracing to work. Please use "
            f"`{getattr(op._init_fn, '__name__', op._name)}.register_fake` to add an "
            "fake impl."
        )
    return kernel


def _has_trivial_fake(schema: str) -> bool:
    """Whether an op of ``schema`` mutates an argument and returns nothing: its fake impl is
    trivial (torch's ``can_generate_trivial_fake_impl``).

    Example::

        >>> _has_trivial_fake("(Tensor(a0!) x, float s) -> ()")
        True
        >>> _has_trivial_fake("(Tensor x) -> ()")
        False
    """
    return "!" in arguments_text(schema) and return_types(schema) == ((), False)


def _returns_nothing(*args: Any, **kwargs: Any) -> None:
    return None


def run_kernel(
    op: CustomOp, inputs: tuple, count: int, keywords: Dict[str, Any], fake: bool = False
) -> Any:
    """Run the call's kernel with the arguments the dispatcher passes it: the first ``count`` of
    ``inputs`` and ``keywords`` (those left out get the kernel's own defaults, or Python's
    error where it has none, as for torch's kernels). torch's aliasing rule on its output, and
    the version counter of an argument it mutated outside torch (NumPy) bumped, so that
    autograd sees the change. ``fake``: the fake kernel's call, whatever the inputs' device
    (FakeTensors report their real device)."""
    bump_declared(op, inputs)  # above the fallbacks, as torch's ADInplaceOrView kernel
    # No operator: lazy views are resolved here (See NOTE: [what the dispatcher does around a call])
    if op._opoverload is None and fallback_inputs(inputs):
        inputs = resolved(op, inputs)
    if fake:  # from torch's registry: FakeTensors on their device, or meta tensors
        tensors = tensors_in(inputs)
        # No tensor: only a FakeTensorMode calls it (the fake kernel alone, as torch's own op)
        kernel = _meta_kernel_for(op, not tensors or tensors[0].device.type != "meta")
    else:
        kernel = kernel_for(op, inputs)
    output = kernel(*inputs[:count], **keywords)
    if kernel is not op._fake:
        return checked_output(op, inputs, output, kernel)
    return converted_output(op, output)  # the fake kernel's: no aliasing rule


def kernel_keywords(op: CustomOp, keyword_only: Dict[str, Any]) -> Dict[str, Any]:
    """The keyword-only arguments the dispatcher passes a kernel: each equal to its default
    (None included) is left out, as trailing positional ones are (See NOTE: [arguments equal
    to their defaults]), so the kernel gets its own default, or Python's error where it has
    none.

    Example: for ``(Tensor x, *, int k=2)``, ``{"k": 2}`` -> ``{}``; ``{"k": 3}`` stays.
    """
    defaults = op._keyword_defaults
    if not defaults:
        return keyword_only
    return {k: v for k, v in keyword_only.items() if not _is_default(v, defaults.get(k))}


def keyword_defaults(op: CustomOp) -> Dict[str, Tuple[Any, Any]]:
    """For ``kernel_keywords``: each keyword-only parameter whose arguments can equal its default
    (See ``elidable``), with the default and the exact type of such an argument (None for a None
    default)."""
    found: Dict[str, Tuple[Any, Any]] = {}
    for p in op._signature.parameters.values():
        if p.kind is not p.KEYWORD_ONLY:
            continue
        if p.default is None:
            found[p.name] = (None, None)
        elif elidable(op, p):
            kind = op._conversions.get(p.name, (None,))[0] or list  # None: converted to a list
            found[p.name] = (p.default, compared_kind(kind, p.default))
    return found


def _is_default(value: Any, default: Optional[Tuple[Any, Any]]) -> bool:
    """Whether a converted argument equals ``default`` (the default, the argument's exact type)
    as the dispatcher compares them: by value and type (None: the argument is None)."""
    if default is None:  # a parameter whose arguments never equal its default
        return False
    expected, kind = default
    if expected is None:
        return value is None
    return type(value) is kind and bool(value == expected)


def bump_declared(op: CustomOp, inputs: tuple) -> None:
    """As torch's ADInplaceOrView kernel of a mutating custom op: each declared argument's
    version goes up once before the kernel runs (whatever the kernel does, or if it raises, or
    if there is none for the device: a meta tensor without a fake kernel), the fake kernel
    included."""
    for t in _mutated_tensors(op, inputs):
        if not is_inference(t):  # an inference tensor has no version counter
            bump_version(t)


def bump_zero_tensors(op: CustomOp, inputs: tuple) -> None:
    """Before a call through the operator where a declared argument is a ZeroTensor: the
    ZeroTensor fallback refuses the call before compatfn's kernel bumps anything, and torch's
    ADInplaceOrView kernel, above that fallback, has bumped the version of each declared argument
    by then: so does this."""
    mutated = _mutated_tensors(op, inputs)
    if HAS_ZERO_TENSOR and any(t._is_zerotensor() for t in mutated):
        bump_declared(op, inputs)


def checked_output(
    op: CustomOp, inputs: tuple, output: Any, kernel: Optional[Callable] = None
) -> Any:
    """The kernel's ``output`` as torch hands it on: its aliasing rule checked, then converted to
    what the schema returns (:func:`as_returned`)."""
    check_no_alias(op, inputs, output, kernel)
    return converted_output(op, output)


def converted_output(op: CustomOp, output: Any) -> Any:
    """A kernel's ``output`` converted to what the schema returns, with torch's errors."""
    if op._scalar_returns is not None:  # See NOTE: [non-tensor returns]
        return converted_returns(op._qualname, op._scalar_returns, output)
    if op._returns_list and not _traced(output):  # a Tensor[] alone, as pybind11 takes it
        return as_tensor_list(output)
    return as_returned(op._tensor_returns, output)


def _traced(value: Any) -> bool:
    """An object standing for a tensor while something traces (a torch.fx proxy)."""
    return not isinstance(value, (tuple, list, torch.Tensor)) and hasattr(
        value, "__torch_function__"
    )


def as_returned(count: int, output: Any) -> Any:
    """``output`` converted as torch (2.4-2.13) converts the result of a custom op's kernel for a
    schema returning ``count`` tensors (the backend kernel's return): one tensor (or None) as it
    is; for two or more, a sequence as pybind11 takes one, a 1-sequence giving its item, a list of
    ``count`` a tuple; torch's errors for anything else (a float, None for two outputs, an item
    that is no tensor; an empty sequence, converted twice). A longer sequence passes as it is once
    its first ``count`` items are tensors (torch crashes on one of tensors alone).
    See :func:`as_autograd_returned`."""
    if count < 1 or _traced(output):
        return output
    if count == 1:
        return as_tensor(output)
    if not is_sequence(output):
        raise TypeError(f"Object of type '{type_name(output)}' is not an instance of 'sequence'")
    if not len(output):  # no value the first time, so None the second (See _returns)
        raise TypeError("Object of type 'NoneType' is not an instance of 'sequence'")
    items = tuple(o if _traced(o) else as_tensor(o) for o in output[:count])
    if len(output) not in (1, count):  # its first items converted (torch reads past them)
        return output
    if len(items) == 1:
        return items[0]
    return output if type(output) is tuple else items


def as_autograd_returned(count: int, output: Any) -> Any:
    """What torch's Autograd kernel of a custom op returns from the backend kernel's converted
    ``output`` (:func:`as_returned`), converted again: for two or more outputs, a tensor (a
    1-tuple's item) raises torch's error after setup_context ran, and so does a list."""
    if count < 2 or isinstance(output, tuple) or _traced(output):
        return output
    if isinstance(output, torch.Tensor) or output is None:
        raise TypeError(
            f"Object of type '{type(output).__name__}' is not an instance of 'sequence'"
        )
    if isinstance(output, list):
        raise RuntimeError(f"Unable to cast {output} to Tensor")
    return as_returned(count, output)


def is_inference(t: torch.Tensor) -> bool:
    """Whether ``t`` is an inference tensor (torch >= 1.9; never on 1.8)."""
    return bool(getattr(t, "is_inference", _false)())


def _false() -> bool:
    return False


def ad_inplace_or_view_runs(tensors: List[torch.Tensor]) -> bool:
    """Whether torch's ADInplaceOrView kernel runs for a call with ``tensors``: its key is in
    the thread's default include set, which inference mode takes it out of; there a tensor that
    is no inference tensor brings it (measured on torch 2.13: a mutating op's second conversion
    of its output, for a call without tensors too)."""
    if not _INFERENCE_MODE_ENABLED():
        return True
    return not all(is_inference(t) for t in tensors)


_INFERENCE_MODE_ENABLED: Callable[[], bool] = getattr(torch, "is_inference_mode_enabled", _false)


def check_no_alias(
    op: CustomOp, inputs: tuple, output: Any, kernel: Optional[Callable] = None
) -> None:
    """torch's rule: no output shares storage with an input or with another output (torch's
    message, naming the op and the module of the kernel that broke it)."""
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    if aliases_any(inputs, outputs):
        module = inspect.getmodule(kernel if kernel is not None else op._kernels.get(None))
        # Upstream: https://github.com/pytorch/pytorch/blob/v2.15.0/torch/_library/utils.py
        raise RuntimeError(
            f"{op._name} (with implementation in {module}): The output of this custom operator "
            "(1) must not also be an input to this custom operator and (2) may not alias any "
            "inputs to this custom operator or other returns. The most common way to trigger "
            "this error is if we have y = custom_op(x) and y and x are the same Tensor. Please "
            "instead return a clone of the offending output tensor(s) (e.g. return x.clone()) "
            "or refactor the custom operator to not return y."
        )


def _mutated_tensors(op: CustomOp, inputs: tuple) -> List[torch.Tensor]:
    if not op._mutated:
        return []
    return tensors_in(inputs[i] for i in op._mutated)
