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

__all__ = ["below_autograd", "define", "impl_once", "library_for"]

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
        impl_once(op, dispatch_key(device), op._device_kernel)
    impl_once(op, "Autograd", op._autograd_kernel)


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
