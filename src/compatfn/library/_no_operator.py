"""What the dispatcher does around an operator's call, for ops without one (the ``function``
tier: torch < 1.13) and for what only the operator can do on the ``registered`` tier."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List

import torch

from compatfn.core import _transforms_active as transforms_active
from compatfn.library._call_errors import refuse_named_tensors
from compatfn.library._dispatch_state import (
    dispatcher_test_source,
    profiler_enabled,
)
from compatfn.library._facts import (
    HAS_LAZY_CONJ,
    HAS_ZERO_TENSOR,
    fx_calls_any_target,
)
from compatfn.library._generated import generated_function

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = [
    "call_without_operator",
    "fallback_inputs",
    "needs_dispatcher",
    "refuse_transforms",
    "resolved",
    "torch_function_arguments",
    "transforms_active",
]

# NOTE: [what the dispatcher does around a call]
# An operator's call is more than its kernels: torch.fx proxies (and other objects taking part in
# ``__torch_function__``) get the operator handed to them, so a trace records one node; a profiler
# records the call by the operator's name; lazily conjugated or negated views are materialized
# before a kernel sees them. A registered op sends such calls to its operator (its short path
# and ``CustomOp._eager_ok`` refuse them); an op of the ``function`` tier, which has no operator,
# does the same itself: the op object is handed to ``__torch_function__`` (the proxy records a
# node calling the op object), the call runs inside ``record_function(<ns>::<name>)``, and views
# are resolved where the kernel runs, below autograd (``run_kernel``: an argument the op mutates
# cannot be, an error names the op).


def torch_function_arguments(inputs: tuple, keyword_only: Dict[str, Any]) -> List:
    """The arguments (or items of list arguments) that are not tensors but take part in
    ``__torch_function__`` (torch.fx proxies): the operator's call hands them the op."""
    found = []
    for value in (*inputs, *keyword_only.values()):
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(v, (torch.Tensor, type)) and hasattr(v, "__torch_function__"):
                found.append(v)
    return found


def _lazy(t: torch.Tensor) -> bool:
    return HAS_LAZY_CONJ and (t.is_conj() or t.is_neg())


def _zero(t: torch.Tensor) -> bool:
    return HAS_ZERO_TENSOR and t._is_zerotensor()


def fallback_inputs(inputs: tuple) -> bool:
    """Whether a tensor argument is one the dispatcher's fallbacks materialize before the kernel
    runs: a lazily conjugated or negated view (torch >= 1.10) or a ZeroTensor (torch >= 1.11)."""
    if not (HAS_LAZY_CONJ or HAS_ZERO_TENSOR):
        return False
    return any(
        isinstance(t, torch.Tensor) and (_lazy(t) or _zero(t))
        for v in inputs
        for t in (v if isinstance(v, (list, tuple)) else (v,))
    )


def _refuse_views_mutated_together(op: CustomOp, inputs: tuple) -> None:
    """torch's math-bit fallbacks (negation, then conjugation: the order of their dispatch keys)
    refuse, before the kernel runs, a call that mutates more than one tensor with their bit set,
    in their words (measured on torch 2.13 and 2.15)."""
    mutated = [inputs[i] for i in op._mutated if isinstance(inputs[i], torch.Tensor)]
    for name, bit in (("negation", torch.Tensor.is_neg), ("conjugate", torch.Tensor.is_conj)):
        if sum(1 for t in mutated if bit(t)) > 1:
            raise RuntimeError(
                f"{name} fallback does not support operators with more than one mutable tensors "
                f"with {name}bit set to true."
            )


def resolved(op: CustomOp, inputs: tuple) -> tuple:
    """``inputs`` with each lazily conjugated or negated tensor and each ZeroTensor materialized,
    as the dispatcher's fallbacks hand them to a kernel (an argument the op mutates is refused:
    the fallback cannot write the kernel's change back through the view; a ZeroTensor is
    immutable). A ZeroTensor becomes zeros expanded to its shape, as the ZeroTensor fallback
    makes it."""

    def one(i: int, t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if _zero(t):
            if i in op._mutated:
                raise RuntimeError(
                    "ZeroTensors are immutable. Please use the materialized zero tensor obtained "
                    "using .clone() if you want a mutable tensor."
                )
            return torch.zeros((), dtype=t.dtype, device=t.device).expand(t.shape)
        if not _lazy(t):
            return t
        if i in op._mutated:
            raise RuntimeError(
                f"{op._qualname}: argument {op._positional[i]!r} is a lazily conjugated or "
                "negated view, which an operator cannot mutate; call resolve_conj() and "
                "resolve_neg() on it first"
            )
        return t.resolve_conj().resolve_neg()

    if HAS_LAZY_CONJ:
        _refuse_views_mutated_together(op, inputs)
    return tuple(
        type(v)(one(i, t) for t in v) if isinstance(v, (list, tuple)) else one(i, v)
        for i, v in enumerate(inputs)
    )


def call_without_operator(
    op: CustomOp, inputs: tuple, keyword_only: Dict[str, Any], count: int
) -> Any:
    """A general call of an op without an operator (See NOTE: [what the dispatcher does around a
    call]; ``count``: how many of ``inputs`` the dispatcher would pass)."""
    proxies = torch_function_arguments(inputs, keyword_only)
    if proxies and (fx_calls_any_target() or _importable(op)):
        return torch.overrides.handle_torch_function(op, proxies, *inputs, **keyword_only)
    refuse_named_tensors(inputs, keyword_only)  # as an operator converting its arguments
    if profiler_enabled():
        with torch.autograd.profiler.record_function(op._qualname):
            return op._apply(inputs, keyword_only, op._eager_fn, count)
    return op._apply(inputs, keyword_only, op._eager_fn, count)


def _importable(op: CustomOp) -> bool:
    """Whether ``op`` is what its module has under its name (an op defined at a module's top
    level): the code torch 1.8's fx generates can call it."""
    module = sys.modules.get(getattr(op, "__module__", ""), None)
    return getattr(module, op.__qualname__, None) is op


def _needs_dispatcher_function() -> Any:
    globals_: Dict[str, Any] = {}
    source = f"def $function():\n    return {dispatcher_test_source(globals_)}\n"
    return generated_function(source, globals_, set(), "<compatfn: needs the dispatcher>")


#: Whether a call of a registered op must go through its operator (tracing, modes, transforms,
#: profiler, forward AD): ``DISPATCHER_TESTS`` in one generated function.
needs_dispatcher: Callable[[], bool] = _needs_dispatcher_function()


def refuse_transforms(op: CustomOp) -> None:
    """Raise: a registered op's Autograd kernel cannot run its autograd Function inside torch.func
    transforms (torch < 2.4 has no rule for an autograd.Function below the transforms' autograd
    layer: an assertion or a missing kernel of ``custom_function_call``, measured on 2.1 and
    2.15). ``vmap`` and ``jvp`` of calls with no input requiring grad do not get here."""
    raise RuntimeError(
        f"{op._qualname}: torch {torch.__version__} cannot differentiate this custom operator "
        "inside torch.func transforms (grad, vjp, jacrev, ...): torch.func differentiates custom "
        "operators from torch 2.4. Differentiate it with torch.autograd.grad instead."
    )
