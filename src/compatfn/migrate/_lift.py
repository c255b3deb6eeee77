"""An ``if`` made only of ctx statements that reads the random state (or draws) is evaluated in
forward: see NOTE: [random state under a condition].

Example::

    lift = lift_if(cst.parse_statement(
        "if keep:\\n    ctx.state = torch.get_rng_state()\\n"), "ctx", {"ctx", "keep"},
        lambda test: True)
    # lift.forward: state = None; if keep: state = torch.get_rng_state()
    # lift.setup:   if keep: ctx.state = state
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Set, Union

import libcst as cst

from ._branches import PASS
from ._syntax import Refused, fresh_name, loaded_names, source_of, statement

# NOTE: [random state under a condition]
# torch's own CheckpointFunction (and memcnn, revlib, ... after it) keeps the random state on ctx
# under a condition, before forward draws (dropout):
#     if preserve_rng_state:
#         ctx.fwd_cpu_state = torch.get_rng_state()
#         if torch.cuda._initialized:
#             ctx.fwd_gpu_devices, ctx.fwd_gpu_states = get_device_states(*args)
# setup_context runs after forward: reading the state there would read it after the draws. So
# forward keeps the whole ``if`` in its place, each value assigned to a local of its own (None
# where no branch sets it), and each condition that is not a plain test of an input forward
# never changes is evaluated there too, recorded in a flag (False unless its branch ran).
# setup_context gets the same ``if`` with those flags as conditions, setting each attribute from
# its local: an attribute the original never set stays unset (backward may test hasattr).
# Constants (``ctx.had_cuda_in_fwd = True``) are set in setup_context alone.


@dataclass
class Lift:
    """forward's statements, setup_context's ``if``, and what it reads from forward."""

    forward: List[cst.BaseStatement] = field(default_factory=list)
    setup: Optional[cst.If] = None
    intermediates: List[str] = field(default_factory=list)  # locals and flags, in order
    test_names: Set[str] = field(default_factory=set)  # read by conditions setup_context tests
    call_names: Set[str] = field(default_factory=set)  # plain names passed to ctx calls


def _constant(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _constant(expr.expression)
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    return isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString))


def _flag_base(test: cst.BaseExpression) -> str:
    """``cuda_initialized`` for ``torch.cuda._initialized``, ``cuda_is_initialized`` for
    ``torch.cuda.is_initialized()``; ``condition`` otherwise."""
    if isinstance(test, cst.Call) and not test.args:
        test = test.func
    parts = [p.strip("_") for p in source_of(test).split(".")]
    if len(parts) > 1 and all(p.isidentifier() for p in parts):
        return "_".join(p for p in parts[1:] if p)
    return "condition"


class _Lifter:
    def __init__(
        self, ctx: str, taken: Set[str], reevaluable: Callable[[cst.BaseExpression], bool]
    ) -> None:
        self.ctx = ctx
        self.taken = taken
        self.reevaluable = reevaluable
        self.lift = Lift()
        self.start_none: List[str] = []
        self.start_false: List[str] = []

    def branch(self, node: Union[cst.If, cst.Else]) -> tuple:
        """(forward's branch, setup_context's branch) for one ``if``/``elif``/``else``."""
        assert isinstance(node.body, cst.IndentedBlock)
        forward: List[cst.BaseStatement] = []
        setup: List[cst.BaseStatement] = []
        test = node.test if isinstance(node, cst.If) else None
        if test is not None:
            self.refuse_ctx_read(test, node)
        if test is not None and not self.reevaluable(test):
            flag = fresh_name(_flag_base(test), self.taken)
            self.start_false.append(flag)
            self.lift.intermediates.append(flag)
            forward.append(statement(f"{flag} = True\n"))
            setup_test: Optional[cst.BaseExpression] = cst.Name(flag)
        else:
            setup_test = test
            if test is not None:
                self.lift.test_names |= loaded_names(test)
        for stmt in node.body.body:
            kept, moved = self.statement(stmt)
            forward += kept
            setup += moved
        forward_node = node.with_changes(body=node.body.with_changes(body=forward or [PASS]))
        # an else with nothing left for forward is dropped (its conditions are evaluated anyway)
        setup_node = node.with_changes(body=node.body.with_changes(body=setup or [PASS]))
        if isinstance(node, cst.If):
            setup_node = setup_node.with_changes(test=setup_test)
            if node.orelse is not None:
                f_else, s_else = self.branch(node.orelse)
                empty = isinstance(f_else, cst.Else) and list(f_else.body.body) == [PASS]
                forward_node = forward_node.with_changes(orelse=None if empty else f_else)
                setup_node = setup_node.with_changes(orelse=s_else)
        return forward_node, setup_node

    def refuse_ctx_read(self, expr: cst.BaseExpression, where: cst.CSTNode) -> None:
        """forward evaluates ``expr``: it has no ctx to read."""
        if self.ctx in loaded_names(expr):
            raise Refused(
                "forward reads ctx in an if block that reads the random state; compute the "
                "value into a name before the if to let it through",
                where,
            )

    def statement(self, stmt: cst.BaseStatement) -> tuple:
        """(forward's statements, setup_context's statements) for one ctx statement."""
        if isinstance(stmt, cst.If):
            forward_if, setup_if = self.branch(stmt)
            return [forward_if], [setup_if]
        assert isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        small = stmt.body[0]
        if isinstance(small, cst.Expr):  # a ctx call: plain names and constants only
            assert isinstance(small.value, cst.Call)
            for arg in small.value.args:
                if not isinstance(arg.value, cst.Name) or arg.star:
                    raise Refused(
                        "forward passes a computed value to a ctx call under a condition that "
                        "reads the random state; assign it to a name before the if and pass "
                        "the name to let it through",
                        stmt,
                    )
                self.lift.call_names.add(arg.value.value)
            return [], [stmt]
        if not isinstance(small, cst.Assign) or len(small.targets) != 1:
            raise Refused(
                "forward sets ctx attributes under a condition that reads the random state in "
                "a way migrate cannot move; write one `ctx.attr = value` per line to let it "
                "through",
                stmt,
            )
        if _constant(small.value):
            return [], [stmt]
        self.refuse_ctx_read(small.value, stmt)
        target = small.targets[0].target
        attributes = (
            [e.value for e in target.elements] if isinstance(target, cst.Tuple) else [target]
        )
        if not all(isinstance(a, cst.Attribute) for a in attributes) or any(
            isinstance(e, cst.StarredElement) for e in getattr(target, "elements", ())
        ):
            raise Refused(
                "forward sets a starred ctx target under a condition that reads the random "
                "state; unpack into names first to let it through",
                stmt,
            )
        names = [fresh_name(a.attr.value, self.taken) for a in attributes]  # type: ignore[attr-defined]
        self.start_none += names
        self.lift.intermediates += names
        joined = ", ".join(names)
        locals_ = cst.parse_expression(joined)
        assert isinstance(locals_, (cst.Name, cst.Tuple))
        kept = stmt.with_changes(body=[small.with_changes(targets=[cst.AssignTarget(locals_)])])
        moved = cst.SimpleStatementLine(  # comments stay with the value, in forward
            [small.with_changes(value=cst.parse_expression(joined))]
        )
        return [kept], [moved]


def lift_if(
    stmt: cst.If,
    ctx: str,
    taken: Set[str],
    reevaluable: Callable[[cst.BaseExpression], bool],
) -> Lift:
    """Split ``stmt`` (an ``if`` of ctx statements only) as NOTE: [random state under a
    condition] says; ``reevaluable(test)``: whether setup_context may evaluate ``test`` again."""
    lifter = _Lifter(ctx, taken, reevaluable)
    forward_if, setup_if = lifter.branch(stmt)
    assert isinstance(forward_if, cst.If) and isinstance(setup_if, cst.If)
    first = [statement(f"{name} = None\n") for name in lifter.start_none]
    first += [statement(f"{name} = False\n") for name in lifter.start_false]
    if first:
        first[0] = first[0].with_changes(leading_lines=stmt.leading_lines)
        forward_if = forward_if.with_changes(leading_lines=())
    lifter.lift.forward = [*first, forward_if]
    lifter.lift.setup = setup_if.with_changes(leading_lines=())
    return lifter.lift
