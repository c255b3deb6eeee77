"""The torch facts ``compatfn.library`` depends on (tiers, torch's op object, tensor kinds),
detected once, at import.

Feature detection first; each fact says from/until which torch it holds and links upstream
(``grep -n "Upstream:" src/compatfn/library/*facts.py src/compatfn/library/_dispatch_state.py``
lists them). The dispatcher's state as Python reads it is in ``_dispatch_state``, what the schema
parser reads in ``_schema_facts``. The rest of the package reads these names and never probes
torch itself.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from typing import Any, Callable, Optional, Tuple

import torch

from compatfn.core import _C_APPLY as _CORE_C_APPLY
from compatfn.core import (
    _HAS_TORCH_AUTOCAST,
    _TORCH_VERSION,
)

__all__ = [
    "CUSTOM_OP_DEF_FIELDS",
    "CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS",
    "HAS_LAZY_CONJ",
    "HAS_LIBRARY",
    "HAS_META_DEVICE",
    "HAS_NAMED_TENSORS",
    "HAS_NESTED",
    "HAS_TAGS",
    "HAS_TORCH_CUSTOM_OP",
    "HAS_TORCH_OPCHECK",
    "HAS_ZERO_TENSOR",
    "NEEDS_INPUT_GRAD_WRITABLE",
    "RESERVED_NAMESPACES",
    "TIER",
    "TORCH_CUSTOM_OP",
    "TORCH_CUSTOM_OP_TAKES_TAGS",
    "VIEW_OPS_SINCE",
    "TorchCustomOpDef",
    "torch_autograd_backward",
]

_library: Any = getattr(torch, "library", None)


def _torch_custom_ops_module() -> Any:
    """``torch._library.custom_ops``, the module that defines torch's own ``custom_op`` and its
    op object (None where torch has none). Read from there, not from ``torch.library``: a program
    may have put another function there (compatfn's own, or a wrapper forwarding to it) before
    this module is imported."""
    try:
        return importlib.import_module("torch._library.custom_ops")
    except ImportError:  # torch < 2.4
        return None


_CUSTOM_OPS: Any = _torch_custom_ops_module()


#: torch's ``torch.library.custom_op`` (torch >= 2.4; measured: 2.3 has no
#: ``torch._library.custom_ops``, 2.4-2.15 define it there): the "torch" tier hands everything
#: to it, and calls it, never the name ``torch.library.custom_op`` (which a program may have
#: replaced with ``compatfn.custom_op``).
# Upstream: https://github.com/pytorch/pytorch/pull/122344
TORCH_CUSTOM_OP: Optional[Callable[..., Any]] = getattr(_CUSTOM_OPS, "custom_op", None)
HAS_TORCH_CUSTOM_OP = TORCH_CUSTOM_OP is not None
#: ``torch.library.Library`` with ``define`` and the below-autograd redispatch guard
#: ``torch._C._AutoDispatchBelowAutograd`` (torch >= 1.13): operators can be defined from Python
#: and given an Autograd kernel. torch 1.8 has no ``torch.library``; torch 1.12 has ``Library``
#: but not the guard (and its schema parser rejects schemas 1.13+ accept), so it takes the
#: ``function`` tier (measured: the registered tier failed there).
# Upstream: https://github.com/pytorch/pytorch/blob/v1.13.1/torch/library.py
HAS_LIBRARY = (
    hasattr(_library, "Library")
    and hasattr(_library, "define")
    and hasattr(torch._C, "_AutoDispatchBelowAutograd")
)
#: torch 2.4-2.13: the autograd of ``torch.library.custom_op`` fails in backward for an operator
#: with a tensor-list argument or return when a trailing defaulted argument is left at its
#: default: the dispatcher drops that argument, and torch's tensor-list wrapper then rejects the
#: gradient backward returns for it ("Expected the return from backward to be of the same
#: structure as the inputs"; measured on 2.4.1 and in every row 2.4-2.13, fixed in 2.14).
# Upstream: https://github.com/pytorch/pytorch/pull/185132
CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS = (2, 4) <= _TORCH_VERSION < (2, 14)

#: Which implementation ``compatfn.custom_op`` uses on the running torch (package docstring).
TIER = "torch" if HAS_TORCH_CUSTOM_OP else ("registered" if HAS_LIBRARY else "function")

#: The first torch whose own custom_op makes an op whose schema returns a view of an input
#: (``(Tensor(a) x) -> Tensor(a)``: its ADInplaceOrView fallback makes the output a view;
#: https://github.com/pytorch/pytorch/pull/164520). Measured: 2.4 and 2.9 refuse the output by
#: the aliasing rule at call, 2.10 and 2.13 return the view. The older tiers refuse such a schema
#: at definition (an autograd Function cannot make its output a view of an input).
VIEW_OPS_SINCE = "2.10"

#: ``torch.library.custom_op(..., tags=)`` (torch >= 2.5; measured: 2.4's takes no tags).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.5.0/torch/_library/custom_ops.py
TORCH_CUSTOM_OP_TAKES_TAGS = (
    TORCH_CUSTOM_OP is not None and "tags" in inspect.signature(TORCH_CUSTOM_OP).parameters
)

#: torch's ``opcheck`` as a public API (torch >= 2.4); torch 2.1-2.3 ship the same function under
#: ``torch.testing._internal.optests``.
# Upstream: https://github.com/pytorch/pytorch/pull/103063
HAS_TORCH_OPCHECK = hasattr(_library, "opcheck")

#: ``torch.Tag`` (torch >= 2.0): operator tags, which ``Library.define`` takes in later releases
#: (not 2.1.2's: measured; ``_registration._define_takes_tags`` asks the signature).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.1.0/torch/library.py
HAS_TAGS = hasattr(torch, "Tag")

#: Namespaces torch refuses for new operators (``torch.library._reserved_namespaces``, every
#: torch with ``torch.library``): TorchScript's interpreter owns ``prim``.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/library.py
RESERVED_NAMESPACES = tuple(getattr(_library, "_reserved_namespaces", ("prim",)))

#: ``torch.autocast(device_type)`` (torch >= 1.10; torch 1.8 has only ``torch.cuda.amp.autocast``):
#: core's ``_HAS_TORCH_AUTOCAST``, under the name this package reads.
HAS_DEVICE_AUTOCAST = _HAS_TORCH_AUTOCAST

#: ``torch.autograd.graph.increment_version`` (torch >= 2.1): bump the version counter of an
#: argument a kernel mutated outside torch (NumPy), as torch >= 2.4 does for declared mutations.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.1.0/torch/autograd/graph.py
increment_version: Optional[Callable[[Any], None]] = getattr(
    getattr(torch.autograd, "graph", None), "increment_version", None
)


def _probe_meta_device() -> bool:
    try:
        torch.empty(0, device="meta")
    except RuntimeError:  # torch 1.8 (measured)
        return False
    return True


#: The ``meta`` device (not on torch 1.8): fake kernels run for meta tensors.
# Upstream: https://github.com/pytorch/pytorch/blob/v1.13.1/c10/core/DeviceType.h
HAS_META_DEVICE = _probe_meta_device()

#: torch's op object, ``torch._library.custom_ops.CustomOpDef`` (torch >= 2.4): the "torch" tier
#: subclasses it (``_torch_call``), keeping every method and the registration torch's own.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_library/custom_ops.py
TorchCustomOpDef: Any = _CUSTOM_OPS.CustomOpDef if HAS_TORCH_CUSTOM_OP else None


#: The fields of torch's ``CustomOpDef`` that the torch tier's call reads (``_torch_call``): the
#: operator, the function the op was made from, the kernels per device type, the registered
#: autograd formula (every torch >= 2.4; measured on 2.4, 2.5, 2.8, 2.12, 2.13, 2.15).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_library/custom_ops.py
CUSTOM_OP_DEF_FIELDS = (
    "_opoverload",
    "_init_fn",
    "_backend_fns",
    "_setup_context_fn",
    "_backward_fn",
)


def _autograd_impl_nested_names() -> Tuple[str, ...]:
    """Names of the functions nested in ``torch._library.autograd.make_autograd_impl``."""
    if not HAS_TORCH_CUSTOM_OP:
        return ()
    code = torch._library.autograd.make_autograd_impl.__code__  # type: ignore[attr-defined]
    return tuple(c.co_name for c in code.co_consts if inspect.iscode(c))


#: Whether torch's Autograd kernel of a custom op calls its autograd Function (so the registered
#: setup_context) even when no input requires grad: torch 2.4 only; from 2.5 such calls run the
#: kernel alone (``forward_no_grad``, later ``redispatch_no_grad``; measured on 2.4, 2.5, 2.8,
#: 2.15).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.5.0/torch/_library/autograd.py
AUTOGRAD_KERNEL_ALWAYS_APPLIES = HAS_TORCH_CUSTOM_OP and not {
    "forward_no_grad",
    "redispatch_no_grad",
} & set(_autograd_impl_nested_names())


def torch_autograd_backward(opdef: Any) -> Callable:
    """The backward of the autograd Function torch makes for ``opdef``'s Autograd kernel
    (``make_autograd_impl``'s ``Generated``, a closure of the kernel it returns): torch's own
    checks on the registered formula's gradients, the trailing gradient of its metadata input
    included (torch >= 2.4)."""
    # Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_library/autograd.py
    kernel = torch._library.autograd.make_autograd_impl(  # type: ignore[attr-defined]
        opdef._opoverload, opdef
    )
    cells = dict(zip(kernel.__code__.co_freevars, kernel.__closure__ or ()))
    generated = cells["Generated"].cell_contents
    return generated.__dict__["backward"].__func__  # the function its staticmethod holds


#: ``torch._C._storage_id`` (absent on torch 1.8, present on 1.13 and later; measured): the
#: identity of a tensor's storage, which torch's own aliasing check compares. Without it compatfn
#: compares ``t.storage()._cdata`` (the StorageImpl's address). See NOTE: [storage identity].
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_subclasses/meta_utils.py
storage_id: Optional[Callable[[torch.Tensor], int]] = getattr(torch._C, "_storage_id", None)
#: ``torch._C._is_alias_of(a, b)`` (torch >= 1.13; measured): whether two tensors share a storage,
#: in one call (two ``_storage_id`` calls cost more, measured with callgrind on 1.13).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_subclasses/meta_utils.py
is_alias_of: Optional[Callable[[torch.Tensor, torch.Tensor], bool]] = getattr(
    torch._C, "_is_alias_of", None
)

#: torch's C-level ``Function.apply``: no binding, no transform checks (the caller has done them).
#: core's, under the name this package reads.
C_APPLY = _CORE_C_APPLY


def _needs_input_grad_writable() -> bool:
    """Whether Python can assign ``ctx.needs_input_grad`` (measured: 2.4+ take it; 1.8-2.3
    refuse it, "attribute 'needs_input_grad' of 'torch._C._FunctionBase' objects is not
    writable")."""
    base = getattr(torch._C, "_FunctionBase", None)
    try:
        base().needs_input_grad = (True,)  # type: ignore[misc]
    except Exception:  # a torch without the class, or one that refuses it
        return False
    return True


#: See NOTE: [needs_input_grad of a custom op]: torch's custom_op strips its metadata's entry
#: from ``ctx.needs_input_grad`` for backward by assigning it; compatfn's tiers do the same where
#: torch lets Python assign it.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_library/autograd.py
NEEDS_INPUT_GRAD_WRITABLE = _needs_input_grad_writable()

#: ``Tensor.is_neg`` (torch >= 1.10, with ``is_conj``): lazily conjugated or negated views, which
#: the dispatcher's fallbacks materialize before an operator's kernel sees them.
# Upstream: https://github.com/pytorch/pytorch/blob/v1.10.0/aten/src/ATen/ConjugateFallback.cpp
HAS_LAZY_CONJ = hasattr(torch.Tensor, "is_neg") and hasattr(torch.Tensor, "is_conj")
#: ``Tensor._is_zerotensor`` (torch >= 1.11): a ZeroTensor (forward-mode AD's and some backward
#: formulas' zeros, ``torch._efficientzerotensor``), which the dispatcher's ZeroTensor fallback
#: hands to a kernel as zeros expanded to its shape, and refuses for an argument the op mutates.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/aten/src/ATen/ZeroTensorFallback.cpp
HAS_ZERO_TENSOR = hasattr(torch.Tensor, "_is_zerotensor")
#: ``Tensor.is_nested`` (torch >= 1.13): a nested tensor, whose backend (``NestedTensorCPU``)
#: has no kernel of a custom op's (See NOTE: [backends other than dense]).
HAS_NESTED = hasattr(torch.Tensor, "is_nested")


#: Named tensors, which torch's operators refuse in a Python call ("NYI: Named tensors are
#: currently unsupported in TorchScript"): the torch tier's short path leaves them to its
#: operator. Read off the class (measured: 1.8-2.12 have ``Tensor.has_names``, 2.13 removed named
#: tensors), not by making one: that would spend torch's one warning about them.
HAS_NAMED_TENSORS = hasattr(torch.Tensor, "has_names")


class _NotImportable:
    """A callable that cannot be imported by its module and name."""

    __name__ = __qualname__ = "_not_importable"

    def __call__(self, x: Any) -> Any:
        return x


@functools.lru_cache(maxsize=None)
def fx_calls_any_target() -> bool:
    """Whether the code torch.fx generates for a graph calls a node's target whatever it is
    (a global of that code) rather than importing it by module and name (torch 1.8, measured:
    an op defined inside a function cannot be called from a traced module there)."""
    # Upstream: https://github.com/pytorch/pytorch/blob/v1.8.0/torch/fx/graph.py
    import torch.fx

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(_NotImportable(), (x,)))
    try:
        # forward, not the module's call: this may run while torch.fx traces (which patches it)
        return bool(torch.fx.GraphModule(torch.nn.Module(), graph).forward(1) == 1)
    except Exception:
        return False


@functools.lru_cache(maxsize=None)
def has_auto_functionalize() -> bool:
    """torch 2.2+ functionalizes mutating custom operators under torch.compile
    (``torch._higher_order_ops.auto_functionalize``); torch 2.1 raises "Found a custom (non-ATen)
    operator that either mutates or its inputs" (measured)."""
    # Upstream: https://github.com/pytorch/pytorch/blob/v2.2.0/torch/_higher_order_ops/auto_functionalize.py
    try:
        return importlib.util.find_spec("torch._higher_order_ops.auto_functionalize") is not None
    except ImportError:  # torch < 2.1: no torch._higher_order_ops
        return False
