"""``return super().forward(ctx, ...)`` chains between classes of one file: the subclass's
forward calls the base's ``_forward_impl`` and its setup_context reruns the base's.

Example::

    call = super_call(forward, "ctx")  # the call, None, or Refused for another super() use
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Set

import libcst as cst

from ._analysis import body_statements
from ._methods import (
    delegate,
    drop_first_params,
    setup_context_method,
    strip_ctx_decorators,
    with_kind,
)
from ._syntax import (
    Refused,
    dotted,
    loaded_names,
    positional_params,
    source_of,
    statement,
    tuple_target,
    walk,
)

if TYPE_CHECKING:
    from ._plan import Plan, Planner

PURE_BUILTINS = {"dict", "tuple", "list", "int", "float", "bool", "str", "slice"}


def super_call(fn: cst.FunctionDef, ctx: str) -> Optional[cst.Call]:
    """The call in a forward whose body is only ``return super().forward(ctx, ...)``."""
    body = [
        s
        for s in body_statements(fn)
        if not (
            isinstance(s, cst.SimpleStatementLine)
            and isinstance(s.body[0], cst.Expr)
            and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        )
    ]
    for node in walk(fn):
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Call)
            and dotted(node.func.value.func) == "super"
        ):
            break
    else:
        return None
    if (
        len(body) == 1
        and isinstance(body[0], cst.SimpleStatementLine)
        and isinstance(body[0].body[0], cst.Return)
    ):
        value = body[0].body[0].value
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "forward"
            and isinstance(value.func.value, cst.Call)
            and dotted(value.func.value.func) == "super"
            and value.args
            and isinstance(value.args[0].value, cst.Name)
            and value.args[0].value.value == ctx
        ):
            return value
    raise Refused("forward calls super() other than as `return super().forward(ctx, ...)`", fn)


def _pure(expr: cst.BaseExpression) -> bool:
    for node in walk(expr, into_scopes=True):
        if isinstance(node, cst.Call) and dotted(node.func) not in PURE_BUILTINS:
            return False
    return True


def plan_super(planner: Planner, plan: Plan, forward: cst.FunctionDef, call: cst.Call) -> None:
    base = plan.base
    if base is None or not base.decorate:
        raise Refused(
            "forward chains super().forward(ctx, ...) to a class migrate does not migrate "
            "in this file",
            forward,
        )
    if not base.forward_impl:
        raise Refused("forward chains to a base whose forward is not a @classmethod", forward)
    params = positional_params(forward, "forward")[2:]
    plan.forward_params = params
    plan.intermediates = base.intermediates
    plan.forward_impl = True
    given = _bind_super_args(planner, forward, call, base, {p.name.value for p in params})
    bound = {
        name: expr
        for name, expr in given.items()
        if not (isinstance(expr, cst.Name) and expr.value == name)
    }
    decorators = strip_ctx_decorators(forward, planner.names, planner.api, "forward")
    body = forward.body
    assert isinstance(body, cst.IndentedBlock)
    ret = body.body[-1]
    assert isinstance(ret, cst.SimpleStatementLine)
    new_call = call.with_changes(
        func=call.func.with_changes(attr=cst.Name("_forward_impl")),  # type: ignore[attr-defined]
        args=call.args[1:],
    )
    new_ret = ret.with_changes(body=[cst.Return(new_call)])
    impl = drop_first_params(forward, 2).with_changes(
        name=cst.Name("_forward_impl"),
        body=body.with_changes(body=[*body.body[:-1], new_ret]),
    )
    cls_param = positional_params(forward, "forward")[0]
    impl = impl.with_changes(
        params=impl.params.with_changes(params=[cls_param, *impl.params.params])
    )
    impl = with_kind(impl, "classmethod", [])
    public = delegate("forward", params, f"{plan.ref}._forward_impl", decorators)
    ctx = positional_params(forward, "forward")[1].name.value
    inputs_name, output_name = base.setup_names
    own = {p.name.value for p in params} | set(bound)
    if own & {inputs_name, output_name, base.setup_ctx} or base.setup_ctx != ctx:
        raise Refused(
            f"setup_context of {base.name} names ({base.setup_ctx}, {inputs_name}, "
            f"{output_name}) clash with this forward's parameters",
            forward,
        )
    needed = set().union(set(), *(loaded_names(v) for v in given.values()))
    lines: List[cst.BaseStatement] = []
    if needed:
        names = [p.name.value if p.name.value in needed else "_" for p in params]
        lines.append(statement(f"{tuple_target(names)} = {inputs_name}\n"))
    if bound:
        targets = list(bound)
        values = ", ".join(source_of(bound[t]) for t in targets)
        lines.append(
            statement(f"{tuple_target(targets)} = {values}{',' if len(targets) == 1 else ''}\n")
        )
    tail = base.setup_tail
    setup = setup_context_method(ctx, inputs_name, output_name, [*lines, *tail])
    plan.setup_tail = tail
    plan.setup_ctx = ctx
    plan.setup_names = base.setup_names
    plan.needed_inputs = {p.name.value for p in params} & needed
    plan.replacements[id(forward)] = [impl, public, setup]


def _bind_super_args(
    planner: Planner, forward: cst.FunctionDef, call: cst.Call, base: Plan, own: Set[str]
) -> Dict[str, cst.BaseExpression]:
    """Base parameter -> the expression the super call passes for it (needed ones only)."""
    names = [p.name.value for p in base.forward_params]
    given: Dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args[1:]):
        if arg.star:
            raise Refused("super().forward(...) is called with * or ** arguments", forward)
        key = arg.keyword.value if arg.keyword else names[index] if index < len(names) else ""
        if key not in names:
            raise Refused(f"super().forward(...) passes an unknown argument {key}", forward)
        given[key] = arg.value
    for param in base.forward_params:
        if param.name.value not in given and param.default is not None:
            given[param.name.value] = param.default
    bound = {}
    for name in names:
        if name not in base.needed_inputs:
            continue
        if name not in given:
            raise Refused(f"super().forward(...) does not pass {name}", forward)
        expr = given[name]
        if not _pure(expr) or not loaded_names(expr) <= own | set(PURE_BUILTINS) | set(
            planner.names.imports
        ):
            raise Refused(
                f"super().forward(...) passes {source_of(expr)} for {name}, which "
                "setup_context cannot compute again",
                forward,
            )
        bound[name] = expr
    return bound
