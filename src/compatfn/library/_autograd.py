"""Autograd for compatfn's tiers: the ``compatfn.function`` that gives an op its registered
formula, and the legacy-form Function of the generated call's short path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import torch

from compatfn.core import function
from compatfn.library._facts import NEEDS_INPUT_GRAD_WRITABLE, is_alias_of
from compatfn.library._generated import generated_function, setup_context_call
from compatfn.library._gradients import structured_gradients, torch_checked_gradients
from compatfn.library._kernels import checked_output, kernel_keywords, run_kernel
from compatfn.library._registration import below_autograd
from compatfn.library._storage import distinct_output_test
from compatfn.library._utils import (
    Definition,
    below_autograd_lines,
    elidable_tail,
    flatten,
    legacy_function_class,
    schema_has_tensor_lists,
    unflatten,
)

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = [
    "Call",
    "apply_autograd",
    "autograd_function",
    "regrouped_returns",
    "simple_functions",
    "user_backward",
]


# NOTE: [needs_input_grad of a custom op]
# torch's custom_op (2.4-2.13, the oracle of the older tiers) applies its autograd.Function to the
# positional arguments the dispatcher passed (trailing ones equal to their defaults left out;
# keyword-only ones apart) and a metadata object; an op with a tensor-list argument or return
# gets those arguments pytree-flattened, its metadata and a second metadata object. So in
# setup_context ``ctx.needs_input_grad`` has one entry per argument passed, then one False (two
# for a tensor-list op); torch assigns it without them for backward (each list an entry of its
# own, a list of bools). backward's result gets a None for the metadata (``(*result, None)``) and
# autograd checks that against the Function's inputs, naming its node in the error.
# compatfn's Functions take the same inputs: the dispatched arguments, then the ``Call`` (where
# the op has keyword-only or tensor-list arguments) or a None, and a None more for a tensor-list
# op. Where Python cannot assign needs_input_grad (NEEDS_INPUT_GRAD_WRITABLE False; measured on
# 1.8-2.3), an op that needs no ``Call`` takes no metadata input: backward sees torch's
# needs_input_grad, setup_context one entry fewer than torch's, and ``torch_checked_gradients``
# checks the gradients against torch's inputs as autograd would.


# NOTE: [tensor lists among several returns]
# An autograd.Function records the tensors of its output tuple, not those inside a list in it: an
# op returning ``(Tensor[], SymInt)`` would hand back tensors without a grad_fn. torch's own op
# flattens its outputs for its Function and regroups them (torch/_library/autograd.py, with a
# pytree spec); compatfn's Function returns each list's items in its place and the lists' lengths
# as one more output (``_Lengths``, no tensor); the op's caller, setup_context and backward see
# the returns regrouped, each list a list (backward: of gradients, None for a non-tensor return).


class _Lengths:
    """The lengths of an output's tensor lists, the last output of the op's autograd Function."""

    __slots__ = ("lengths",)

    def __init__(self, lengths: List[int]) -> None:
        self.lengths = lengths


def _flat_returns(output: Any, positions: Tuple[int, ...]) -> Any:
    """``output`` with each list at ``positions`` spread in its place and the lengths last; an
    output of another shape as it is (torch's conversion refuses it afterwards)."""
    if not isinstance(output, (tuple, list)) or any(
        i >= len(output) or not isinstance(output[i], (tuple, list)) for i in positions
    ):
        return output
    flat: List[Any] = []
    lengths = []
    for i, item in enumerate(output):
        if i in positions:
            flat.extend(item)
            lengths.append(len(item))
        else:
            flat.append(item)
    return (*flat, _Lengths(lengths))


def regrouped_returns(flat: Any, positions: Tuple[int, ...]) -> Any:
    """The returns of ``_flat_returns``'s output (or its gradients, the lengths last) regrouped:
    each list at ``positions`` a list again."""
    if not isinstance(flat, tuple) or not flat or type(flat[-1]) is not _Lengths:
        return flat
    lengths = iter(flat[-1].lengths)
    items = iter(flat[:-1])
    count = len(flat) - 1 - sum(flat[-1].lengths) + len(positions)
    return tuple(
        [next(items) for _ in range(next(lengths))] if i in positions else next(items)
        for i in range(count)
    )


class Call:
    """The non-tensor part of one call, handed through the autograd Function."""

    __slots__ = ("keyword_only", "layout")

    def __init__(self, layout: List[int], keyword_only: Dict[str, Any]) -> None:
        self.layout = layout
        self.keyword_only = keyword_only

    def __repr__(self) -> str:  # the same for equal calls: torch.jit.trace compares graphs
        return f"Call(layout={self.layout!r}, keyword_only={self.keyword_only!r})"


def metadata_inputs(op: CustomOp) -> int:
    """How many inputs follow the dispatched arguments in a call of ``op``'s autograd Function
    (See NOTE: [needs_input_grad of a custom op])."""
    if has_tensor_lists(op):
        return 2
    return 1 if NEEDS_INPUT_GRAD_WRITABLE or op._keyword_only else 0


def has_tensor_lists(op: CustomOp) -> bool:
    """Whether torch wraps the op's autograd Function for tensor lists (a ``Tensor[]`` or
    ``Tensor?[]`` argument or return)."""
    return schema_has_tensor_lists(op._schema)


def apply_autograd(
    fn: Any, op: CustomOp, inputs: tuple, keyword_only: Dict[str, Any], count: int
) -> Any:
    """``fn`` (an ``autograd_function`` of ``op``) applied to the first ``count`` of ``inputs``
    (the arguments the dispatcher passes) and its metadata inputs."""
    extra = fn._metadata_inputs
    if extra == 2:  # only an op with tensor lists has them spliced in (an empty int list stays)
        flat, layout = flatten(inputs[:count])
        return fn.apply(*flat, Call(layout, keyword_only), None)
    args = inputs[:count]
    if op._keyword_only:
        return fn.apply(*args, Call([-1] * count, keyword_only))
    return fn.apply(*args, None) if extra else fn.apply(*args)


def autograd_function(op: CustomOp, dispatched: bool) -> Any:
    """The ``compatfn.function`` that gives ``op`` its registered autograd formula, applied by
    ``apply_autograd``.

    ``dispatched``: forward redispatches to the operator below autograd (the ``Autograd`` kernel
    of a registered op); else it runs the kernel directly (eager calls of the op object).
    """
    extra = metadata_inputs(op)
    with_call = extra == 2 or bool(op._keyword_only)
    schema_defaults = positional_defaults(op)

    def split(flat: tuple) -> Tuple[tuple, List[int], Dict[str, Any]]:
        """The dispatched arguments, their layout and the keyword-only arguments."""
        args = flat[: len(flat) - extra]
        if not with_call:
            return args, [-1] * len(args), {}
        call = flat[len(flat) - extra]
        return unflatten(args, call.layout), call.layout, call.keyword_only

    def forward(*flat: Any) -> Any:
        args, _, keyword_only = split(flat)
        if not dispatched:  # below autograd, as torch's Autograd kernel runs it
            inputs = (*args, *schema_defaults[len(args) :])
            call = (op, inputs, len(args), kernel_keywords(op, keyword_only))
            out = below_autograd(run_kernel, call, {})
        else:
            out = below_autograd(op._opoverload, args, keyword_only)
        if op._list_returns:  # See NOTE: [tensor lists among several returns]
            return _flat_returns(out, op._list_returns)
        return tuple(out) if op._returns_list else out  # autograd tracks tuples, not lists

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        args, layout, keyword_only = split(inputs)
        ctx._custom_op_input_layout = layout  # for backward: which arguments are lists, of how many
        if not extra:  # for torch_checked_gradients: an optional tensor left None too
            ctx._custom_op_non_tensors = frozenset(
                i for i, v in enumerate(args) if not isinstance(v, torch.Tensor)
            )
        if op._list_returns:  # for backward: See NOTE: [tensor lists among several returns]
            ctx._custom_op_output_lengths = (
                output[-1] if isinstance(output, tuple) and output else None
            )
        if op._setup_context is None:
            return
        args = (*args, *schema_defaults[len(args) :])  # torch fills them in (fill_defaults)
        output = list(output) if op._returns_list else output
        if op._list_returns:
            output = regrouped_returns(output, op._list_returns)
        kwargs = {"ctx": ctx, "inputs": args, "output": output}
        if op._keyword_only:
            kwargs["keyword_only_inputs"] = keyword_only
        below_autograd(op._setup_context, (), kwargs)  # as torch's Autograd kernel runs it

    # See Definition: a graph keeps the formula of the definition that recorded it.
    definition: Any = Definition(op)
    name = node_class_name(op)

    def backward(ctx: Any, *grads: Any) -> Any:
        grads = (list(grads),) if definition._returns_list else grads
        if definition._list_returns:  # the lengths' gradient (None) replaced by the lengths
            grads = regrouped_returns(
                (*grads[:-1], ctx._custom_op_output_lengths), definition._list_returns
            )
        layout = ctx._custom_op_input_layout
        result = stripped_backward(definition, ctx, grads, layout, extra)
        if extra == 2:  # torch checks a tensor-list op's gradients by their structure
            return structured_gradients(result, layout)
        static = frozenset() if extra else ctx._custom_op_non_tensors  # used only without metadata
        return torch_checked_gradients(name, result, len(layout), static, extra)

    # Named at creation: torch names the class's autograd node (``<name>Backward``) then, so the
    # node is named as the short path's (``simple_function``) whichever path a call takes.
    namespace: Dict[str, Any] = {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
        "_metadata_inputs": extra,  # read by apply_autograd at each call
        "__qualname__": name,
        "__module__": __name__,
    }
    return function(type(name, (torch.autograd.Function,), namespace))


def positional_defaults(op: CustomOp) -> tuple:
    """The schema's defaults of ``op``'s positional parameters (setup_context gets them for
    arguments the dispatcher left out); ``inspect.Parameter.empty`` for a required one."""
    params = op._signature.parameters.values()
    return tuple(p.default for p in params if p.kind is not p.KEYWORD_ONLY)


def non_tensor_positions(op: CustomOp) -> frozenset:
    """Positions of ``op``'s positional parameters that never take a tensor."""
    tensors = {name for _, name in op._tensor_params}
    return frozenset(i for i, name in enumerate(op._positional) if name not in tensors)


def stripped_backward(op: CustomOp, ctx: Any, grads: tuple, layout: List[int], extra: int) -> Any:
    """The registered backward, ``ctx.needs_input_grad`` without the metadata's entries while it
    runs, each list's entries in a list, where Python can assign it (See NOTE: [needs_input_grad
    of a custom op])."""
    if not (NEEDS_INPUT_GRAD_WRITABLE and extra):
        return user_backward(op, ctx, grads)
    seen = ctx.needs_input_grad
    flags = seen[: len(seen) - extra]
    ctx.needs_input_grad = unflatten(flags, layout) if extra == 2 else flags
    try:
        return user_backward(op, ctx, grads)
    finally:
        ctx.needs_input_grad = seen


def user_backward(op: CustomOp, ctx: Any, grads: tuple) -> Any:
    """Run the registered backward; torch's error when there is none."""
    if op._backward is None:
        raise RuntimeError(
            f"Trying to backward through {op._namespace}.{op._name}.default but no "
            "autograd formula was registered. Please use register_autograd to add one."
        )
    return op._backward(ctx, *grads)


def simple_functions(op: CustomOp) -> Dict[int, Any]:
    """The autograd Functions of the short path by how many arguments the dispatcher passes
    (trailing ones equal to their defaults left out, See NOTE: [needs_input_grad of a custom
    op]), written as a hand-written one would be: a legacy ``forward(ctx, <those parameters>)``
    that runs the kernel and the registered setup_context (if any), and the registered backward
    (torch's checks on its gradients)."""
    name = node_class_name(op)
    return {
        count: legacy_function_class(
            name, _legacy_kernel_forward(op, count), _short_path_backward(op, count), __name__
        )
        for count in range(elidable_tail(op), len(op._positional) + 1)
    }


def node_class_name(op: CustomOp) -> str:
    """The name of the autograd Function, so of its node (``<name>Backward``): torch's for the
    Function of a custom op's Autograd kernel."""
    return f"GeneratedBackwardFor_{op._namespace}_{op._name}_{op._overload or 'default'}"


def _short_path_backward(op: CustomOp, count: int) -> Any:
    """``backward(ctx, *grads)`` of the short path's Function for calls passing ``count``
    arguments: the registered backward, its gradients checked as torch's (See NOTE:
    [needs_input_grad of a custom op])."""

    definition: Any = Definition(op)  # a graph keeps the formula of its definition
    name = node_class_name(op)
    static = non_tensor_positions(op)
    extra = metadata_inputs(op)
    every = len(op._positional)

    def usual(result: Any) -> Any:
        """The gradients of the arguments passed where ``result`` is one per argument passed or
        per parameter (None for those left out), else None."""
        if type(result) is tuple:
            if len(result) == count:
                return result
            if len(result) == every:
                for g in result[count:]:
                    if g is not None:
                        return None
                return result[:count]
        return None

    def backward(ctx: Any, *grads: Any) -> Any:  # a metadata input: its entry stripped
        user = definition._backward  # read at backward time, as user_backward
        if user is None:
            return user_backward(definition, ctx, grads)
        seen = ctx.needs_input_grad
        ctx.needs_input_grad = seen[:-1]
        try:
            result = user(ctx, *grads)
        finally:
            ctx.needs_input_grad = seen
        passed = usual(result)
        return (*passed, None) if passed is not None else checked(result)

    def backward_without_metadata(ctx: Any, *grads: Any) -> Any:
        user = definition._backward  # read at backward time, as user_backward
        if user is None:
            return user_backward(definition, ctx, grads)
        result = user(ctx, *grads)
        if type(result) is tuple and len(result) == every:  # usual: one per parameter
            if count == every:
                return result
            if count + 1 == every and result[count] is None:  # one default left out
                return result[:count]
        passed = usual(result)
        return passed if passed is not None else checked(result)

    def checked(result: Any) -> tuple:
        return torch_checked_gradients(name, result, count, static, extra)

    return backward if extra else backward_without_metadata


def _legacy_kernel_forward(op: CustomOp, count: int) -> Any:
    """``forward(ctx, <the first count parameters>[, metadata])``: the default kernel with them,
    then the registered setup_context (where there is one) with the schema's defaults for the
    others, generated with the op's own parameter names (See NOTE: [generated code] in core)."""
    params = list(op._signature.parameters)
    passed = params[:count]
    globals_: Dict[str, Any] = {
        "kernel": op._kernels[None],
        "setup_context": op._setup_context,
        "ctx": None,
        "output": None,
    }
    schema_defaults = positional_defaults(op)
    left_out = []
    for i in range(count, len(params)):
        globals_[f"default{i}"] = schema_defaults[i]
        left_out.append(f"$default{i}")
    filled = [*passed, *left_out]
    inputs = "(" + ", ".join(filled) + ("," if len(filled) == 1 else "") + ")"
    # The kernel, torch's aliasing rule and its conversion of the output (as torch's backend
    # kernel checks it), then setup_context: all below autograd, as torch's Autograd kernel.
    tensors = [n for _, n in op._tensor_params]
    globals_.update(
        op=op,
        type=type,
        Tensor=torch.Tensor,
        alias_of=is_alias_of,
        checked_output=checked_output,
    )
    body = [f"$output = $kernel({', '.join(passed)})"]
    checked = f"$output = $checked_output($op, {inputs}, $output)"
    if op._tensor_returns == 1:  # a tensor sharing no storage needs no check
        quick, distinct = distinct_output_test("$output", tensors, globals_)
        body += [*quick, f"if not ({distinct}):", f"    {checked}"]
    else:  # one tensor for two: torch's backend raises before setup_context runs
        body.append(checked)
    if op._setup_context is not None:
        body.append(setup_context_call(op._setup_context, inputs))
    header = ["$ctx", *passed] + (["$metadata"] if metadata_inputs(op) else [])
    globals_["metadata"] = None
    lines = [f"def $function({', '.join(header)}):"]
    lines += [f"    {line}" for line in below_autograd_lines(body, globals_)]
    lines.append("    return $output")
    return generated_function(
        "".join(line + "\n" for line in lines),
        globals_,
        set(params),
        f"<legacy forward of custom op {op._qualname}"
        + ("" if count == len(params) else f", {count} arguments")
        + ">",
    )
