"""Every torch fact ``compatfn.library`` depends on, detected once, at import.

Feature detection first; each fact says from/until which torch it holds and links upstream
(``grep -n "Upstream:" src/compatfn/library/_facts.py`` lists them). The rest of the package reads
these names and never probes torch itself.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from compatfn.core import _C_APPLY as _CORE_C_APPLY
from compatfn.core import (
    _HAS_FUNCTORCH,
    _HAS_IS_COMPILING,
    _HAS_TORCH_AUTOCAST,
    _TORCH_VERSION,
    _is_compiling,
    _transforms_active,
)

__all__ = [
    "CUSTOM_OP_DEF_FIELDS",
    "CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS",
    "DISPATCHER_TESTS",
    "DTYPE_OF_NUMBER",
    "ENUM_NUMBERS",
    "HAS_INFERENCE_MODE",
    "HAS_IS_INFERENCE",
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
    "SCALAR_TYPE_NUMBERS",
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


#: torch's forward-mode AD module: inside ``dual_level()`` its ``_current_level`` is 0 or more
#: (-1 outside; torch 2.4-2.15 measured). A custom op's call then goes through the dispatcher,
#: where torch's autograd kernel has no forward-mode formula (the output carries no tangent).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/autograd/forward_ad.py
forward_ad: Any = getattr(getattr(torch, "autograd", None), "forward_ad", None)
#: Whether the TorchScript tracer runs (``torch.jit.trace``; what ``torch.jit.is_tracing`` asks).
#: It reads the same state as ``torch._C._get_tracing_state() is not None`` and costs less: it
#: returns a bool, not the state object (measured with callgrind on 2.15).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/jit/_trace.py
is_tracing: Callable[[], bool] = getattr(torch._C, "_is_tracing", lambda: False)
#: Whether a ``TorchFunctionMode`` is active: torch's OpOverload call hands it the op.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/overrides.py
torch_function_mode_enabled: Callable[[], bool] = getattr(
    torch._C, "_is_torch_function_mode_enabled", lambda: False
)
#: Whether autocast is on for any device (torch >= 2.4 has ``_is_any_autocast_enabled``). The
#: torch tier's call asks it only for an op given an autocast rule through the op object
#: (``register_autocast``, torch >= 2.5): without a rule the dispatcher's autocast keys fall
#: through, and the call is the same with autocast on or off.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/amp/autocast_mode.py
any_autocast_enabled: Callable[[], bool] = getattr(
    torch._C, "_is_any_autocast_enabled", lambda: False
)

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

#: ``torch.inference_mode`` and inference tensors (torch >= 1.9).
# Upstream: https://github.com/pytorch/pytorch/pull/58045
HAS_INFERENCE_MODE = hasattr(torch, "is_inference_mode_enabled")
#: ``Tensor.is_inference()`` (torch >= 1.10; 1.9 makes inference tensors but cannot tell them).
HAS_IS_INFERENCE = hasattr(torch.Tensor, "is_inference")

#: Below-autograd redispatch guard (every torch with ``torch.library``); a context manager on
#: torch >= 2.1, a plain guard object (active while alive) on 1.13 and 2.0 (measured).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_library/autograd.py
BelowAutograd: Any = getattr(torch._C, "_AutoDispatchBelowAutograd", None)
GUARD_IS_CONTEXT = hasattr(BelowAutograd, "__enter__")
# NOTE: [where torch's Autograd kernel runs]
# The dispatcher calls an op's Autograd kernel only when the autograd dispatch keys are not
# excluded on this thread (inference mode and the below-autograd guard exclude them, whatever the
# grad mode: ``enable_grad()`` inside ``inference_mode()`` records nothing) and some tensor
# argument carries them (an inference tensor does not). The Autograd kernel of a custom op runs
# the op's kernel below autograd (the guard above), through its autograd Function when grad mode
# is on and an input requires grad (always on torch 2.4, ``AUTOGRAD_KERNEL_ALWAYS_APPLIES``), so
# that the kernel's own operations on captured tensors record no graph, an in-place change of a
# captured leaf is allowed and ``torch.autograd.grad`` inside it finds no graph. compatfn's eager
# calls decide the same way: ``autograd_excluded()`` reads the thread's excluded keys as the
# dispatcher does (measured on 1.13, 2.1, 2.4, 2.13, 2.15: the per-backend keys such as
# ``AutogradCPU`` always read False there; the functionality key answers). torch 1.9 to 1.12 have
# inference mode but neither that query nor the guard in Python: inference mode is then the only
# exclusion a Python caller can be under, and ``torch.is_inference_mode_enabled()`` reads it
# (measured on 1.9 and 1.10). torch 1.8 has neither: nothing is ever excluded.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.5.0/torch/_library/autograd.py
_AUTOGRAD_KEY: Any = getattr(getattr(torch._C, "DispatchKey", None), "AutogradFunctionality", None)
_IS_EXCLUDED: Any = getattr(torch._C, "_dispatch_tls_is_dispatch_key_excluded", None)
autograd_excluded: Callable[[], bool] = (
    functools.partial(_IS_EXCLUDED, _AUTOGRAD_KEY)
    if _IS_EXCLUDED is not None and _AUTOGRAD_KEY is not None
    else (torch.is_inference_mode_enabled if HAS_INFERENCE_MODE else lambda: False)
)

# NOTE: [the guard where autograd is excluded]
# A below-autograd guard entered where autograd is already excluded (inference mode, a kernel
# running below autograd) changes nothing: it excludes only what is not excluded yet, and leaving
# it restores just that. So the kernel of a call that does not go through autograd runs in the
# guard whether or not autograd is excluded, and only a call that would go through autograd (an
# input requires grad in grad mode) asks ``autograd_excluded()``: a no-grad call skips that query.
# Where the Autograd kernel's treatment of the output depends on it (the registered tier's
# multi-output ops) the query stays.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.1.0/c10/core/impl/LocalDispatchKeySet.h

# NOTE: [reused below-autograd guards]
# Making torch's below-autograd guard (``_AutoDispatchBelowAutograd``) costs about half of using
# it (a pybind11 object made per call: 3,000 of 5,900 instructions on torch 2.15, measured with
# callgrind), and it cannot be entered again once left: it excludes from the moment it is made
# (torch's ``DeprecatedRAIIContextManager``). torch's ``_ExcludeDispatchKeyGuard`` given the keys
# that guard excludes does the same when entered (the C++ ``AutoDispatchBelowAutograd`` is such a
# guard of the autograd keys), and it makes its C++ guard on each ``__enter__`` and drops it on
# ``__exit__`` (``RAIIContextManager``, torch >= 2.1), so one can be entered again after it is
# left. So where a check run once, in a new thread (whose dispatch state is torch's default),
# finds both guards exclude exactly the same keys, nested either way too, generated code takes
# such a guard from ``BELOW_AUTOGRAD_GUARDS``, a pool shared by every op, makes one
# (``new_below_autograd_guard``) when the pool is empty, and gives it back after leaving it.
# ``list.pop`` and ``append`` are atomic, so no two calls, nested or on two threads, hold the same
# guard at once; a kernel that raises loses its guard, and a later call makes another one.
# Where the check fails (torch 1.13 and 2.0 have no such guard), every call makes torch's own.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.1.0/torch/csrc/utils/python_raii.h


def _same_exclusion_keys() -> Any:
    """The keys ``BelowAutograd`` excludes, where ``_ExcludeDispatchKeyGuard`` given them excludes
    the same, each time it is entered, nested inside ``BelowAutograd`` or around it; else None."""
    exclude_guard = getattr(torch._C, "_ExcludeDispatchKeyGuard", None)
    excluded = getattr(torch._C, "_dispatch_tls_local_exclude_set", None)
    if not GUARD_IS_CONTEXT or exclude_guard is None or excluded is None:
        return None
    found: List[Any] = []
    keys_of = _key_fingerprint  # DispatchKeySet has no == on every torch (2.4)

    def check() -> None:
        outside = keys_of(excluded())
        with BelowAutograd():
            inside = excluded()
        keys, inside = inside - excluded(), keys_of(inside)
        if inside == outside:  # a fingerprint that cannot tell them apart
            return
        guard = exclude_guard(keys)
        seen = []
        for _ in range(2):  # entered again after it is left
            with guard:
                seen.append(keys_of(excluded()))
                with BelowAutograd():
                    seen.append(keys_of(excluded()))
                seen.append(keys_of(excluded()))
            with BelowAutograd():
                with guard:
                    seen.append(keys_of(excluded()))
                seen.append(keys_of(excluded()))
            if set(seen) != {inside} or keys_of(excluded()) != outside:
                return
        found.append(keys)

    def checked() -> None:
        try:
            check()
        except Exception:  # a guard that takes other arguments or cannot be entered again
            found.clear()

    thread = threading.Thread(target=checked, name="compatfn-guard-check")
    thread.start()
    thread.join()
    return found[0] if found else None


def _key_fingerprint(keys: Any) -> Tuple[Optional[bool], ...]:
    """Which dispatch keys ``keys`` (a ``DispatchKeySet``) has, one entry per key torch names."""
    found: List[Optional[bool]] = []
    for key in torch._C.DispatchKey.__members__.values():
        try:
            found.append(bool(keys.has(key)))
        except Exception:  # an alias key
            found.append(None)
    return tuple(found)


_BELOW_AUTOGRAD_KEYS = _same_exclusion_keys()
#: Whether generated code reuses guards (See NOTE: [reused below-autograd guards]).
GUARDS_REUSABLE = _BELOW_AUTOGRAD_KEYS is not None
#: A new reusable below-autograd guard, where ``GUARDS_REUSABLE``.
new_below_autograd_guard: Optional[Callable[[], Any]] = (
    functools.partial(torch._C._ExcludeDispatchKeyGuard, _BELOW_AUTOGRAD_KEYS)
    if GUARDS_REUSABLE
    else None
)
#: Reusable below-autograd guards not in use.
BELOW_AUTOGRAD_GUARDS: List[Any] = []

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

#: How many dispatch modes are active (``_len_torch_dispatch_stack``, torch >= 2.0; a single
#: mode before).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.0.0/torch/utils/_python_dispatch.py
dispatch_mode_count: Callable[[], int] = getattr(
    torch._C,
    "_len_torch_dispatch_stack",
    lambda: int(getattr(torch._C, "_get_torch_dispatch_mode", lambda: None)() is not None),
)

#: Whether a profiler collects (``torch.profiler``, ``torch.autograd.profiler``, the legacy one;
#: every torch, 1.8 included): the dispatcher records an operator's call by its name, so a call
#: of an op with an operator then goes through it, and a call on the ``function`` tier (no
#: operator) runs inside a range of that name. ``torch.autograd.profiler._is_profiler_enabled``
#: (cheaper to read) stays False under ``torch.autograd.profiler_legacy`` (measured on 2.13).
# Upstream: https://github.com/pytorch/pytorch/blob/v1.8.0/torch/autograd/profiler.py
profiler_enabled: Callable[[], bool] = getattr(
    getattr(torch._C, "_autograd", None), "_profiler_enabled", lambda: False
)
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

#: What sends a registered op's call through the dispatcher, as source tests (``{}`` stands for
#: the object next to it): dynamo, dispatch modes, torch.func transforms, the TorchScript tracer
#: (which records the op by its name), TorchFunctionModes (torch's OpOverload call hands them the
#: op), a profiler (it records the op by its name) and forward-mode AD (``dual_level``: torch's
#: Autograd kernel decides what a tangent becomes), in the order they are asked
#: (``is_compiling`` first: under dynamo it answers before the C probes, which dynamo 2.1 cannot
#: trace), leaving out those this torch cannot answer True (nothing compiles before torch 2.0, no
#: TorchFunctionMode before 1.13).
DISPATCHER_TESTS: Tuple[Tuple[str, Any], ...] = tuple(
    (test, probe)
    for test, probe, present in (
        ("{}()", _is_compiling, _HAS_IS_COMPILING),
        ("{}()", dispatch_mode_count, True),
        ("{}()", _transforms_active, _HAS_FUNCTORCH),
        ("{}()", is_tracing, True),
        ("{}()", torch_function_mode_enabled, hasattr(torch._C, "_is_torch_function_mode_enabled")),
        ("{}()", profiler_enabled, True),
        ("{}._current_level >= 0", forward_ad, hasattr(forward_ad, "_current_level")),
    )
    if present
)


def dispatcher_test_source(globals_: Dict[str, Any]) -> str:
    """``DISPATCHER_TESTS`` as one source expression (``$dispatcher_test<i>`` names, which
    ``globals_`` gets): True where a registered op's call must go through its operator."""
    tests = []
    for i, (test, probe) in enumerate(DISPATCHER_TESTS):
        globals_[f"dispatcher_test{i}"] = probe
        tests.append(test.format(f"$dispatcher_test{i}"))
    return " or ".join(tests) or "False"


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
def int_type() -> str:
    """``SymInt`` where this torch's schema parser knows it (torch >= 2.0), else ``int``."""
    try:
        torch._C.parse_schema("f(SymInt x) -> ()")
    except RuntimeError:
        return "int"
    return "SymInt"


@functools.lru_cache(maxsize=None)
def parser_reads_dtype_names() -> bool:
    """Whether the schema parser takes a dtype default by name (``ScalarType d=float64``, what
    torch 2.4+'s ``infer_schema`` writes); torch 1.13-2.3 refuse it ("invalid numeric default
    value", measured) and take the ScalarType's number."""
    try:
        torch._C.parse_schema("f(ScalarType d=float64) -> ()")
    except RuntimeError:
        return False
    return True


_ANNOTATED_PROBES = """
from typing import List, Optional, Sequence, Tuple


def probe(
    x: torch.Tensor,
    y: Optional[torch.Tensor],
    z: Sequence[torch.Tensor],
    w: typing.Sequence[Optional[torch.Tensor]],
    n: Optional[int] = None,
    s: float = 1.0,
    d: Optional[torch.dtype] = None,
) -> Tuple[torch.Tensor, torch.Tensor]: ...


def probe_one(x: torch.Tensor, ns: List[int]) -> typing.Tuple[torch.Tensor]: ...


def probe_list(x: torch.Tensor) -> List[torch.Tensor]: ...


def probe_refused(x: dict) -> torch.Tensor: ...
"""


@functools.lru_cache(maxsize=None)
def infers_from_string_annotations() -> bool:
    """Whether torch's own ``torch.library.infer_schema`` reads string annotations (``from
    __future__ import annotations``) as it reads the same annotations written as objects
    (See NOTE: [string annotations]): torch 2.4 refuses them, later releases misread some."""
    infer = getattr(getattr(torch, "library", None), "infer_schema", None)  # torch >= 2.5
    if infer is None:
        return False
    schemas = []
    for header in ("", "from __future__ import annotations\n"):
        namespace: Dict[str, Any] = {}
        exec(header + "import typing\nimport torch\n" + _ANNOTATED_PROBES, namespace)
        try:
            schemas.append(
                [infer(namespace[n], mutates_args=()) for n in ("probe", "probe_one", "probe_list")]
            )
        except Exception:  # a supported annotation refused: this torch does not
            return False
        if not _refuses(infer, namespace["probe_refused"]):
            return False
    return schemas[0] == schemas[1]


def _refuses(infer: Callable, fn: Callable) -> bool:
    """Whether ``infer`` refuses ``fn``'s unsupported annotation with torch's ValueError."""
    try:
        infer(fn, mutates_args=())
    except ValueError:
        return True
    except Exception:  # another error (torch 2.7/2.8's AttributeError for "dict")
        return False
    return False


#: c10's ScalarType numbers (fixed in c10/core/ScalarType.h since torch 1.0; a new dtype gets the
#: next number), for the schema default of a dtype parameter on torch < 2.4, an int given for a
#: dtype, and a dtype given for a number (the dispatcher passes its number). The dtypes this
#: torch lacks are left out where the tables are read.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/c10/core/ScalarType.h
SCALAR_TYPE_NUMBERS: Dict[str, int] = {
    name: number
    for number, name in enumerate(
        [
            "uint8",
            "int8",
            "int16",
            "int32",
            "int64",
            "float16",
            "float32",
            "float64",
            "complex32",
            "complex64",
            "complex128",
            "bool",
            "qint8",
            "quint8",
            "qint32",
            "bfloat16",
            "quint4x2",
            "quint2x4",
            "bits1x8",
            "bits2x4",
            "bits4x2",
            "bits8",
            "bits16",
            "float8_e5m2",
            "float8_e4m3fn",
            "float8_e5m2fnuz",
            "float8_e4m3fnuz",
            "uint16",
            "uint32",
            "uint64",
            "uint1",
            "uint2",
            "uint3",
            "uint4",
            "uint5",
            "uint6",
            "uint7",
            "int1",
            "int2",
            "int3",
            "int4",
            "int5",
            "int6",
            "int7",
            "float8_e8m0fnu",
            "float4_e2m1fn_x2",
        ]
    )
}
#: ScalarType number -> dtype: the dispatcher takes an int for a ``ScalarType`` (True is 1), and
#: the schema parser gives a dtype default as its number.
DTYPE_OF_NUMBER = {
    number: getattr(torch, name)
    for name, number in SCALAR_TYPE_NUMBERS.items()
    if isinstance(getattr(torch, name, None), torch.dtype)
}
#: c10's Layout and QScheme numbers: the dispatcher passes them for a layout or a quantization
#: scheme given for a number (measured on torch 2.13: ``torch.sparse_csc`` is 4).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/c10/core/Layout.h
# Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/c10/core/QScheme.h
_ENUM_NAMES = {
    "strided": 0,
    "sparse_coo": 1,
    "sparse_csr": 2,
    "_mkldnn": 3,
    "sparse_csc": 4,
    "sparse_bsr": 5,
    "sparse_bsc": 6,
    "jagged": 7,
    "per_tensor_affine": 0,
    "per_channel_affine": 1,
    "per_tensor_symmetric": 2,
    "per_channel_symmetric": 3,
    "per_channel_affine_float_qparams": 4,
}
#: dtype, layout or quantization scheme -> the number the dispatcher passes for it as a number.
ENUM_NUMBERS: Dict[Any, int] = {
    **{dtype: number for number, dtype in DTYPE_OF_NUMBER.items()},
    **{
        getattr(torch, name): number
        for name, number in _ENUM_NAMES.items()
        if isinstance(getattr(torch, name, None), (torch.layout, torch.qscheme))
    },
}


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
