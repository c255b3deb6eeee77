"""Registration with torch's dispatcher (the "registered" tier, torch 1.13-2.3): the operator's
definition, its kernels per dispatch key and its Autograd kernel."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

import torch

from compatfn.library._dispatch_state import (
    GUARD_IS_CONTEXT,
    BelowAutograd,
)
from compatfn.library._infer_schema import schema_for_this_torch
from compatfn.library._utils import dispatch_key

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = [
    "below_autograd",
    "define",
    "fake_kernel_in_registry",
    "impl_once",
    "library_for",
    "register_device_kernel",
    "register_fake_kernel",
]

#: One ``torch.library.Library`` per namespace, kept alive for the process (a Library that is
#: garbage-collected unregisters its operators).
_LIBRARIES: Dict[str, Any] = {}


def library_for(namespace: str, qualname: str) -> Any:
    """The process's ``torch.library.Library`` for ``namespace`` (``qualname``: the op that
    needs it, named in the error where this torch cannot add to the namespace)."""
    lib = _LIBRARIES.get(namespace)
    if lib is None:
        try:
            lib = torch.library.Library(namespace, "FRAGMENT")
        except ValueError:  # torch < 2.1 knows only "DEF" (one per namespace) and "IMPL"
            lib = _defining_library(namespace, qualname)
        _LIBRARIES[namespace] = lib
    return lib


def _defining_library(namespace: str, qualname: str) -> Any:
    """A ``"DEF"`` Library: torch < 2.1 refuses a second one for a namespace another library
    defines (``aten``, or one a C++ extension or another Library owns), with its C++ error."""
    try:
        return torch.library.Library(namespace, "DEF")
    except RuntimeError as error:
        if "Only a single TORCH_LIBRARY" not in str(error):
            raise
        raise RuntimeError(
            f"custom_op({qualname!r}): torch {torch.__version__} cannot add an operator to the "
            f"namespace {namespace!r}, which another library defines already (torch before 2.1 "
            "allows one defining library per namespace; torch's own custom_op adds to any "
            "namespace). Choose a namespace of your own, e.g. your package's name."
        ) from None


def _define_takes_tags() -> bool:
    """Whether ``Library.define`` takes ``tags`` (torch >= 2.1, measured)."""
    return "tags" in inspect.signature(torch.library.Library.define).parameters


def check_tags(qualname: str, tags: Sequence[Any], registered: bool) -> None:
    """Refuse, at definition, tags this torch cannot attach to an operator (a ``registered``
    one, or none: the ``function`` tier defines no operator)."""
    if tags and not (registered and _define_takes_tags()):
        raise RuntimeError(
            f"custom_op({qualname!r}): torch {torch.__version__} cannot attach tags to an "
            "operator (its torch.library.Library.define takes no tags, or it defines no operator "
            "for compatfn: torch < 1.13); drop tags= on this torch"
        )


def define(op: CustomOp, tags: Sequence[Any]) -> None:
    """Define ``op``'s schema with the dispatcher, or take over an earlier definition of the
    same name (re-running a definition: the newest op wins, as on torch >= 2.4)."""
    previous = op._previous
    if previous is not None and previous._library is not None:
        if previous._schema != op._schema:
            raise RuntimeError(
                f"custom_op({op._qualname!r}): the operator is already defined with schema "
                f"{previous._schema}; torch {torch.__version__} cannot remove an operator, so "
                f"a new definition must keep that schema (got {op._schema}). Restart the "
                "process or choose another name."
            )
        op._library = previous._library
        op._opoverload = previous._opoverload
        op._registered_keys = previous._registered_keys
        return
    op._library = library_for(op._namespace, op._qualname)
    schema = op._full_name + schema_for_this_torch(op._schema)
    if tags:
        op._library.define(schema, tags=tuple(tags))
    else:
        op._library.define(schema)
    packet = getattr(getattr(torch.ops, op._namespace), op._name)
    op._opoverload = getattr(packet, op._overload or "default")


def register_kernels(op: CustomOp, device_types: Optional[Sequence[str]]) -> None:
    """The kernels of a just defined op, and its Autograd kernel."""
    for device in device_types or (None,):
        register_device_kernel(op, device)
    if _FAKE_REGISTRY is not None:  # as torch's own op: its error where there is none
        register_fake_kernel(op)
    impl_once(op, "Autograd", op._autograd_kernel)


def register_device_kernel(op: CustomOp, device: Optional[str]) -> None:
    """Register the op's kernel for ``device`` (None: every device) with the dispatcher once;
    for ``"meta"``, its fake kernel (which runs a meta kernel where there is no fake one)."""
    if device == "meta":
        register_fake_kernel(op)
    else:
        impl_once(op, dispatch_key(device), op._device_kernel)


# NOTE: [the fake kernel of a registered op]
# torch >= 2.2 keeps fake kernels in a registry of its own (``torch.library.impl_abstract``, 2.2
# and 2.3; ``register_fake``, 2.4+): under a FakeTensorMode it calls the registered kernel with
# the FakeTensors as they are (on their real device) and a context for data-dependent sizes
# (``torch.library.get_ctx().new_dynamic_size()``), and it makes the operator's ``Meta`` kernel
# call it with meta tensors and a ``get_ctx()`` that raises torch's error. That is what torch's
# own custom op does with its fake kernel (registered when the op is defined, so that an op
# without one gets torch's error), so a registered op's ``_fake_kernel`` goes there: for
# FakeTensors the fake kernel, for meta tensors a kernel registered for ``"meta"`` first (torch's
# op registers that one over its Meta kernel), else the fake kernel; else torch's trivial one or
# its error. A call with meta tensors then goes through the operator (``_eager_ok``). Older
# torch has no such registry: the fake kernel is the operator's ``Meta`` kernel, so a
# FakeTensorMode hands it meta tensors and ``get_ctx()`` is None (documented).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.2.0/torch/library.py (impl_abstract)
_FAKE_REGISTRY: Optional[Callable[..., Any]] = getattr(
    getattr(torch, "library", None), "register_fake", None
) or getattr(getattr(torch, "library", None), "impl_abstract", None)


def fake_kernel_in_registry(op: CustomOp) -> bool:
    """Whether the op's fake kernel is in torch's registry (so meta tensors go through the
    operator: See NOTE: [the fake kernel of a registered op])."""
    return _FAKE_REGISTRY is not None and "Meta" in op._registered_keys


def register_fake_kernel(op: CustomOp) -> None:
    """Register the op's fake kernel once (See NOTE: [the fake kernel of a registered op])."""
    if _FAKE_REGISTRY is None:
        impl_once(op, "Meta", op._fake_kernel)
    elif "Meta" not in op._registered_keys:
        qualname = f"{op._namespace}::{op._full_name}"
        _FAKE_REGISTRY(qualname, op._fake_kernel, lib=op._library)
        op._registered_keys.add("Meta")


def impl_once(op: CustomOp, key: str, kernel: Callable) -> None:
    """Register ``kernel`` for dispatch key ``key`` unless one is registered: every kernel
    compatfn registers looks the op's current state up when it runs."""
    if key not in op._registered_keys:
        op._library.impl(op._full_name, kernel, key)
        op._registered_keys.add(key)


def below_autograd(fn: Callable, args: tuple, kwargs: Dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` with the autograd dispatch keys excluded (a redispatch); torch 1.8
    has no guard in Python: ``fn(*args, **kwargs)``."""
    if BelowAutograd is None:
        return fn(*args, **kwargs)
    if GUARD_IS_CONTEXT:
        with BelowAutograd():
            return fn(*args, **kwargs)
    guard = BelowAutograd()
    try:
        return fn(*args, **kwargs)
    finally:
        del guard
