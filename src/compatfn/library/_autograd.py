"""Autograd for compatfn's tiers: the ``compatfn.function`` that gives an op its registered
formula, and the legacy-form Function of the generated call's short path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

import torch

from compatfn.core import function
from compatfn.library._facts import is_alias_of, storage_id
from compatfn.library._generated import generated_function
from compatfn.library._kernels import checked_output, run_kernel
from compatfn.library._registration import below_autograd
from compatfn.library._utils import (
    Definition,
    below_autograd_lines,
    distinct_storage_source,
    legacy_function_class,
    unflatten,
)

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = ["Call", "autograd_function", "simple_function", "user_backward"]


class Call:
    """The non-tensor part of one call, handed through the autograd Function."""

    __slots__ = ("keyword_only", "layout")

    def __init__(self, layout: List[int], keyword_only: Dict[str, Any]) -> None:
        self.layout = layout
        self.keyword_only = keyword_only

    def __repr__(self) -> str:  # the same for equal calls: torch.jit.trace compares graphs
        return f"Call(layout={self.layout!r}, keyword_only={self.keyword_only!r})"


def autograd_function(op: CustomOp, dispatched: bool) -> Any:
    """The ``compatfn.function`` that gives ``op`` its registered autograd formula.

    ``dispatched``: forward redispatches to the operator below autograd (the ``Autograd`` kernel
    of a registered op); else it runs the kernel directly (eager calls of the op object).
    """

    def run(call: Call, flat: tuple) -> Any:
        inputs = unflatten(flat, call.layout)
        if not dispatched:  # below autograd, as torch's Autograd kernel runs it
            out = below_autograd(run_kernel, (op, inputs, call.keyword_only), {})
        else:
            out = below_autograd(op._opoverload, inputs, call.keyword_only)
        return tuple(out) if op._returns_list else out  # autograd tracks tuples, not lists

    def forward(call: Call, *flat: Any) -> Any:
        return run(call, flat)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        call = inputs[0]
        ctx._input_layout = call.layout  # for regrad: a list input's None is one None per tensor
        if op._setup_context is None:
            return
        args = unflatten(inputs[1:], call.layout)
        output = list(output) if op._returns_list else output
        kwargs = {"ctx": ctx, "inputs": args, "output": output}
        if op._keyword_only:
            kwargs["keyword_only_inputs"] = call.keyword_only
        below_autograd(op._setup_context, (), kwargs)  # as torch's Autograd kernel runs it

    # See Definition: a graph keeps the formula of the definition that recorded it.
    definition: Any = Definition(op)

    def backward(ctx: Any, *grads: Any) -> Any:
        grads = (list(grads),) if definition._returns_list else grads
        result = user_backward(definition, ctx, grads)
        result = result if isinstance(result, tuple) else (result,)
        return (None, *regrad(result, ctx._input_layout))

    # Named at creation: torch names the class's autograd node (``<name>Backward``) then, so the
    # node is named as the short path's (``simple_function``) whichever path a call takes.
    name = node_class_name(op)
    namespace: Dict[str, Any] = {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
        "__qualname__": name,
        "__module__": __name__,
    }
    return function(type(name, (torch.autograd.Function,), namespace))


def user_backward(op: CustomOp, ctx: Any, grads: tuple) -> Any:
    """Run the registered backward; torch's errors when there is none or it miscounts."""
    if op._backward is None:
        raise RuntimeError(
            f"Trying to backward through {op._namespace}.{op._name}.default but no "
            "autograd formula was registered. Please use register_autograd to add one."
        )
    return counted_gradients(op, op._backward(ctx, *grads))


def counted_gradients(op: CustomOp, result: Any) -> Any:
    """``result``, the registered backward's; torch's error unless it has one gradient per
    forward input."""
    got = len(result) if isinstance(result, tuple) else 1
    expected = len(op._positional)
    if got != expected:
        raise RuntimeError(
            f"The backward formula for {op._qualname} returned an incorrect number of "
            f"gradients (expected {expected}, got {got}). Expected one gradient for each "
            "forward input. Use None for inputs that do not require a gradient."
        )
    return result


def simple_function(op: CustomOp) -> Any:
    """The autograd Function of the short path, written as a hand-written one would be: a legacy
    ``forward(ctx, <the op's parameters>)`` that runs the kernel and the registered
    setup_context (if any), and the registered backward (torch's checks on its gradients)."""

    forward = _legacy_kernel_forward(op)
    return legacy_function_class(node_class_name(op), forward, _short_path_backward(op), __name__)


def node_class_name(op: CustomOp) -> str:
    """The name of the autograd Function, so of its node (``<name>Backward``): torch's for the
    Function of a custom op's Autograd kernel."""
    return f"GeneratedBackwardFor_{op._namespace}_{op._name}_{op._overload or 'default'}"


def _short_path_backward(op: CustomOp) -> Any:
    """``backward(ctx, *grads)`` of the short path's Function: ``user_backward`` with its count
    of the gradients skipped when they are a tuple of one per input."""

    definition: Any = Definition(op)  # a graph keeps the formula of its definition

    def backward(ctx: Any, *grads: Any) -> Any:
        user = definition._backward  # at backward time, as user_backward
        if user is None:
            return user_backward(definition, ctx, grads)
        result = user(ctx, *grads)
        if type(result) is tuple and len(result) == len(definition._positional):
            return result
        return counted_gradients(definition, result)

    return backward


def _legacy_kernel_forward(op: CustomOp) -> Any:
    """``forward(ctx, <the op's parameters>)``: the default kernel, then the registered
    setup_context (where there is one), generated with the op's own parameter names (See NOTE:
    [generated code] in core)."""
    params = list(op._signature.parameters)
    inputs = "(" + ", ".join(params) + ("," if len(params) == 1 else "") + ")"
    call = ", ".join(params)
    globals_: Dict[str, Any] = {
        "kernel": op._kernels[None],
        "setup_context": op._setup_context,
        "ctx": None,
        "output": None,
    }
    # The kernel, torch's aliasing rule and its conversion of the output (as torch's backend
    # kernel checks it), then setup_context: all below autograd, as torch's Autograd kernel.
    tensors = [n for _, n in op._tensor_params]
    distinct = distinct_storage_source(
        "$output", tensors, {"storage_id": "$storage_id", "alias_of": "$alias_of"}
    )
    globals_.update(
        op=op,
        type=type,
        Tensor=torch.Tensor,
        storage_id=storage_id,
        alias_of=is_alias_of,
        checked_output=checked_output,
    )
    body = [
        f"$output = $kernel({call})",
        f"if not ($type($output) is $Tensor and {distinct}):",
        f"    $output = $checked_output($op, {inputs}, $output)",
    ]
    if op._setup_context is not None:
        body.append(f"$setup_context($ctx, {inputs}, $output)")
    lines = [f"def $function($ctx, {call}):"]
    lines += [f"    {line}" for line in below_autograd_lines(body, globals_)]
    lines.append("    return $output")
    return generated_function(
        "".join(line + "\n" for line in lines),
        globals_,
        set(params),
        f"<legacy forward of custom op {op._qualname}>",
    )


def regrad(result: tuple, layout: List[int]) -> List[Any]:
    """Per-input gradients flattened like the inputs (``layout`` from ``flatten``: the length of
    each spliced list of tensors, -1 for an input kept as is, an empty list included); a spliced
    list gets a list of gradients, or None for all of its tensors.

    Example::

        >>> regrad((g, None, [h], []), [-1, 2, 1, -1])
        [g, None, None, h, None]
    """
    flat: List[Any] = []
    for i, g in enumerate(result):
        n = layout[i] if i < len(layout) else -1
        if n >= 0:
            flat.extend([None] * n if g is None else g)
        elif isinstance(g, (list, tuple)) and not g:
            flat.append(None)  # an empty list input is one input, kept as is
        else:
            flat.append(g)
    return flat
