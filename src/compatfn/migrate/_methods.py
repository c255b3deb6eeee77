"""Building the new methods: ctx-free forward, setup_context, staticmethod delegates."""

from __future__ import annotations

from typing import List, Sequence, Set, Tuple

import libcst as cst

from ._analysis import Split
from ._names import Amp, Names, amp_decorator
from ._syntax import (
    Refused,
    decorator_name,
    fresh_name,
    source_of,
    statement,
    tuple_target,
)

BLANK = cst.EmptyLine(indent=False)
#: Decorators that set the grad mode forward runs in: kept on the new forward (setup_context
#: runs with grad mode off on every path).
GRAD_MODE_DECORATORS = {
    "torch.no_grad",
    "torch.enable_grad",
    "torch.autograd.no_grad",
    "torch.autograd.enable_grad",
    "torch.autograd.grad_mode.no_grad",
    "torch.autograd.grad_mode.enable_grad",
}


#: TorchScript marks that only tell the scripting compiler to leave the method alone: kept.
SCRIPTING_MARKS = {"torch.jit.ignore", "torch.jit.unused", "torch.jit._script.ignore"}


def strip_ctx_decorators(
    fn: cst.FunctionDef, names: Names, api: str, what: str
) -> List[cst.Decorator]:
    """fn's decorators without staticmethod/classmethod, AMP decorators turned into compatfn's."""
    kept = []
    for decorator in fn.decorators:
        name = decorator_name(decorator)
        if name in ("staticmethod", "classmethod"):
            continue
        amp = amp_decorator(names, decorator)
        if amp is not None:
            kept.append(decorator.with_changes(decorator=_amp_expression(amp, api, fn)))
            continue
        expr = decorator.decorator
        qualified = names.qualify(expr.func if isinstance(expr, cst.Call) else expr) or ""
        if what == "forward" and qualified in GRAD_MODE_DECORATORS | SCRIPTING_MARKS:
            kept.append(decorator)  # forward keeps its grad mode; setup_context runs without
            continue
        if qualified.endswith("once_differentiable") and what != "forward":
            kept.append(decorator)
            continue
        if what == "forward" or name is None:
            raise Refused(
                f"{fn.name.value} has a decorator migrate does not know: "
                f"@{source_of(decorator.decorator)}, which may use ctx or the arguments; "
                "remove it (or migrate this class by hand) to let it through",
                fn,
            )
        kept.append(decorator)
    return kept


def _amp_expression(amp: Amp, api: str, fn: cst.FunctionDef) -> cst.BaseExpression:
    if not amp.device_type:
        raise Refused(f"@{amp.which} on {fn.name.value} names no device_type", fn)
    args = f'device_type="{amp.device_type}"'
    if amp.cast_inputs is not None:
        args += f", cast_inputs={amp.cast_inputs}"
    return cst.parse_expression(f"{api}.{amp.which}({args})")


def with_kind(fn: cst.FunctionDef, kind: str, extra: Sequence[cst.Decorator]) -> cst.FunctionDef:
    head = cst.Decorator(cst.Name(kind))
    old = list(fn.decorators)
    leading = old[0].leading_lines if old else ()
    decorators = [head.with_changes(leading_lines=leading), *extra]
    return fn.with_changes(decorators=decorators)


def drop_first_params(fn: cst.FunctionDef, count: int) -> cst.FunctionDef:
    params = fn.params
    positional = [*params.posonly_params, *params.params][count:]
    return fn.with_changes(params=params.with_changes(posonly_params=(), params=positional))


# NOTE: [outputs of unknown number]
# ``intermediates=k`` takes the last k items of forward's tuple and hands torch the rest, unwrapped
# when one item is left. Where forward returns a tuple whose length migrate cannot read
# (``return (ys, *extra)``, a name holding ``tuple(...)``) or a one-element tuple, appending the
# intermediates would change what torch receives (``(ys,)`` would become ``ys``). So the whole
# value stays one item, ``return (ys, *extra), i1, i2``: torch receives it exactly as before (the
# class takes the legacy form, see core's NOTE: [intermediates]), and setup_context reads only
# the intermediates from ``output``. Under torch.func, which the original could not run under,
# such an output cannot be differentiated: the decorator refuses it there with a TypeError.


def forward_return(split: Split, body: List[cst.BaseStatement]) -> List[cst.BaseStatement]:
    """forward's body with the intermediates appended to its return value."""
    inter = split.values.intermediates
    if not inter:
        return body
    last = body[-1]
    assert isinstance(last, cst.SimpleStatementLine)
    ret = last.body[-1]
    assert isinstance(ret, cst.Return)
    if ret.value is None:
        raise Refused(
            "forward ends with a bare `return` and needs intermediates; return its output "
            "(`return None` for none) to let it through",
            last,
        )
    extra = [cst.Element(cst.Name(n)) for n in inter]
    value = ret.value
    if isinstance(value, cst.Tuple) and split.output_count is not None and not split.one_tuple:
        elements = list(value.elements)
        elements[-1] = elements[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new_value: cst.BaseExpression = value.with_changes(elements=[*elements, *extra])
    elif split.output_count == 1 and not split.one_tuple:
        new_value = cst.Tuple([cst.Element(value), *extra], lpar=[], rpar=[])
    else:  # see NOTE: [outputs of unknown number]
        if isinstance(value, cst.Tuple) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        new_value = cst.Tuple([cst.Element(value), *extra], lpar=[], rpar=[])
    return [
        *body[:-1],
        last.with_changes(body=[*last.body[:-1], ret.with_changes(value=new_value)]),
    ]


def setup_lines(
    split: Split, taken: Set[str]
) -> Tuple[str, str, List[cst.BaseStatement], List[cst.BaseStatement]]:
    """(inputs name, output name, inputs unpacking, output unpacking) for setup_context."""
    inputs_name = fresh_name("inputs", set(taken))
    output_name = fresh_name("output", set(taken))
    unpack_inputs: List[cst.BaseStatement] = []
    needed = split.values.inputs
    names = [n if n in needed else "_" for n in (p.name.value for p in split.params)]
    if split.star is None and needed:
        unpack_inputs.append(statement(f"{tuple_target(names)} = {inputs_name}\n"))
    elif split.star is not None:
        count = len(names)
        used = [i for i, n in enumerate(names) if n != "_"]
        if len(used) == 1:  # `f = inputs[0]`, not `f, _, _ = inputs[:3]`
            unpack_inputs.append(statement(f"{names[used[0]]} = {inputs_name}[{used[0]}]\n"))
        elif used:
            head = tuple_target(names[: used[-1] + 1])
            unpack_inputs.append(statement(f"{head} = {inputs_name}[:{used[-1] + 1}]\n"))
        if split.star in needed:
            rest = f"{inputs_name}[{count}:]" if count else inputs_name
            unpack_inputs.append(statement(f"{split.star} = {rest}\n"))
    unpack_output: List[cst.BaseStatement] = []
    inter = split.values.intermediates
    wanted = split.values.outputs
    if inter or wanted:
        outs = [n if n in wanted else "_" for n in split.output_names]
        if split.output_count is None:  # see NOTE: [outputs of unknown number]
            outs = ["_"]
        elif split.one_tuple:  # `return (y,)`: output is that tuple, or holds it
            outs = ["_" if outs[0] == "_" else f"({outs[0]},)"]
        if not inter and len(outs) == 1 and split.output_count == 1:
            unpack_output.append(statement(f"{outs[0]} = {output_name}\n"))
        else:
            target = tuple_target([*outs, *inter])
            unpack_output.append(statement(f"{target} = {output_name}\n"))
    return inputs_name, output_name, unpack_inputs, unpack_output


def setup_context_method(
    ctx: str,
    inputs_name: str,
    output_name: str,
    body: List[cst.BaseStatement],
) -> cst.FunctionDef:
    fn = statement(
        f"@staticmethod\ndef setup_context({ctx}, {inputs_name}, {output_name}):\n    pass\n"
    )
    assert isinstance(fn, cst.FunctionDef)
    fn = fn.with_changes(leading_lines=[BLANK])
    if not body:
        return fn
    return fn.with_changes(body=fn.body.with_changes(body=body))


def _call_args(params: Sequence[cst.Param]) -> str:
    return ", ".join(p.name.value for p in params)


def delegate(
    name: str, params: Sequence[cst.Param], target: str, decorators: Sequence[cst.Decorator]
) -> cst.FunctionDef:
    """``@staticmethod def name(<params>): return <target>(<params>)``."""
    fn = statement(f"def {name}(a):\n    return {target}({_call_args(params)})\n")
    assert isinstance(fn, cst.FunctionDef)
    fn = fn.with_changes(params=cst.Parameters(params=list(params)))
    return with_kind(fn, "staticmethod", decorators).with_changes(leading_lines=[BLANK])
