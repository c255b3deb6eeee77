"""Registration with torch's dispatcher (the "registered" tier, torch 1.13-2.3): the operator's
definition, its kernels per dispatch key and its Autograd kernel."""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from compatfn.core import _HAS_IS_COMPILING as HAS_DYNAMO
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
    "dynamo_disabled",
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


def _with_pt2_compliant_tag(tags: Sequence[Any]) -> Tuple[Any, ...]:
    """The tags torch's own custom_op gives its operator: ``pt2_compliant_tag`` first (where
    this torch has it: 2.2+), then the op's own."""
    pt2 = getattr(torch.Tag, "pt2_compliant_tag", None)
    return tuple(tags) if pt2 is None else (pt2, *(tag for tag in tags if tag != pt2))


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
    if _define_takes_tags():
        op._library.define(schema, tags=_with_pt2_compliant_tag(tags))
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
        _FAKE_REGISTRY(qualname, dynamo_disabled(op._fake_kernel), lib=op._library)
        op._registered_keys.add("Meta")


def impl_once(op: CustomOp, key: str, kernel: Callable) -> None:
    """Register ``kernel`` for dispatch key ``key`` unless one is registered: every kernel
    compatfn registers looks the op's current state up when it runs."""
    if key not in op._registered_keys:
        op._library.impl(op._full_name, dynamo_disabled(kernel), key)
        op._registered_keys.add(key)


# NOTE: [kernels run without dynamo]
# Where torch.compile cannot put an op's call in its graph (a data-dependent output size without
# ``capture_dynamic_output_shape_ops``, say), the call runs eagerly inside the compiled function,
# where dynamo takes every Python frame that starts for one to compile, the kernels the
# dispatcher calls included: it traced compatfn's Autograd kernel and the user's kernel (torch
# 2.2: an AssertionError from dynamo; 2.3 and 2.13: the kernel ran with ``is_compiling()`` True).
# torch's own custom op runs its kernels with dynamo disabled, and so does compatfn: each
# registered kernel is wrapped by ``dynamo_disabled``. A wrapper of compatfn's own is a frame
# dynamo would take too, so where torch's C-level ``skip_code`` exists (torch 2.0-2.4, the torch
# of the registered tier) the wrapper's code (one code object for every wrapper) is marked
# skipped once, at import; the wrapper calls the kernel through ``torch._dynamo.disable``, made
# at its first call after dynamo is imported (before that nothing compiles: the kernel runs as
# it is). Elsewhere torch's ``torch._disable_dynamo`` (its frame is in torch's files, which
# dynamo never takes; it caches what it makes from torch 2.4 on; torch 2.1-2.3 make it again at
# each call, 10-15 us) where it has torch 2.1-2.15's form, else torch's public
# ``torch.compiler.disable``, which imports dynamo when the kernel is registered.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_library/custom_ops.py
_SKIP_CODE: Optional[Callable[[Any], None]] = getattr(
    getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None), "skip_code", None
)


def _run_without_dynamo(kernel: Callable) -> Callable:
    """``kernel`` run through ``torch._dynamo.disable`` once dynamo is imported (See NOTE:
    [kernels run without dynamo]: this wrapper's code is marked skipped)."""
    disabled: List[Callable] = []

    def run_kernel_without_dynamo(*args: Any, **kwargs: Any) -> Any:
        if not disabled:
            disable = getattr(sys.modules.get("torch._dynamo"), "disable", None)
            if disable is None:  # dynamo is not imported: nothing compiles
                return kernel(*args, **kwargs)
            disabled.append(disable(kernel))
        return disabled[0](*args, **kwargs)

    return run_kernel_without_dynamo


def _lazy_disable() -> Optional[Callable[..., Any]]:
    """``torch._disable_dynamo`` where it takes ``(fn=None, recursive=True)``, else None."""
    lazy = getattr(torch, "_disable_dynamo", None)
    try:
        parameters = list(inspect.signature(lazy).parameters) if callable(lazy) else []
    except (TypeError, ValueError):
        parameters = []
    return lazy if parameters == ["fn", "recursive"] else None


def _wrapper_code_skipped() -> bool:
    """Mark the code of ``_run_without_dynamo``'s wrappers skipped by dynamo, where torch can."""
    if _SKIP_CODE is None:
        return False
    try:
        _SKIP_CODE(_run_without_dynamo(len).__code__)
    except Exception:  # a skip_code of another form: torch's other paths below
        return False
    return True


_WRAPPER_SKIPPED = HAS_DYNAMO and _wrapper_code_skipped()
_LAZY_DISABLE = _lazy_disable() if HAS_DYNAMO and not _WRAPPER_SKIPPED else None


def dynamo_disabled(kernel: Callable) -> Callable:
    """``kernel``, run with dynamo disabled where this torch has dynamo (See NOTE: [kernels run
    without dynamo])."""
    if not HAS_DYNAMO:
        return kernel
    if _WRAPPER_SKIPPED:
        return _run_without_dynamo(kernel)

    def run_kernel(*args: Any, **kwargs: Any) -> Any:  # a function: torch caches on it
        return kernel(*args, **kwargs)

    if _LAZY_DISABLE is not None:
        return _LAZY_DISABLE(run_kernel, True)
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return disable(run_kernel) if disable is not None else kernel


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
