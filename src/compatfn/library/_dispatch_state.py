"""The dispatcher's state as a Python caller reads it (inference mode, the below-autograd guard,
dispatch and TorchFunction modes, the tracer, a profiler, forward-mode AD), and the reusable
below-autograd guards, each detected once, at import (facts as in ``_facts``)."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from compatfn.core import _HAS_FUNCTORCH, _HAS_IS_COMPILING, _is_compiling, _transforms_active

__all__ = [
    "BELOW_AUTOGRAD_GUARDS",
    "DISPATCHER_TESTS",
    "GUARDS_REUSABLE",
    "GUARD_IS_CONTEXT",
    "HAS_INFERENCE_MODE",
    "HAS_IS_INFERENCE",
    "BelowAutograd",
    "any_autocast_enabled",
    "autograd_excluded",
    "dispatch_mode_count",
    "dispatcher_test_source",
    "excluded_source",
    "forward_ad",
    "inference_lines",
    "is_tracing",
    "new_below_autograd_guard",
    "profiler_enabled",
    "torch_function_mode_enabled",
]

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


def excluded_source(globals_: Dict[str, Any]) -> str:
    """Generated source asking ``autograd_excluded()``: the query itself where torch has it
    (measured per call: ~120 instructions fewer than the partial on torch 2.13 and 2.15, ~70
    more on 1.13-2.4); ``globals_`` gets the names it uses."""
    if _IS_EXCLUDED is not None and _AUTOGRAD_KEY is not None:
        globals_.update(is_excluded=_IS_EXCLUDED, autograd_key=_AUTOGRAD_KEY)
        return "$is_excluded($autograd_key)"
    globals_["excluded"] = autograd_excluded
    return "$excluded()"


def inference_lines(
    tensors: List[str], globals_: Dict[str, Any], none: str
) -> Tuple[List[str], str]:
    """Generated lines setting ``$inference`` to whether every one of ``tensors`` (plain
    tensors, their names) is an inference tensor, and the test to read after them (``none``
    where there is no tensor; "False" where this torch cannot tell: 1.8, 1.9). The first tensor's
    ``_version`` is read first: an inference tensor has no version counter (RuntimeError), and
    the read costs half of ``is_inference()`` (~540-590 instructions against ~1,000-1,100 on
    torch 1.13-2.15)."""
    if not tensors:
        return [], none
    if not HAS_IS_INFERENCE:
        return [], "False"
    globals_.update(RuntimeError=RuntimeError, inference=None)
    every = " and ".join(f"{t}.is_inference()" for t in tensors)
    lines = ["try:", f"    {tensors[0]}._version", "except $RuntimeError:"]
    lines += [f"    $inference = {every}", "else:", "    $inference = False"]
    return lines, "$inference"


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
