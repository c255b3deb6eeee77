"""ctx inside ``if`` and ``with`` blocks that also compute values: the block is split in two
(forward keeps the computation, setup_context the ctx statements, under the same conditions for
an ``if``), and ctx attributes set in such blocks become local variables of forward, handed over
at the end. Only ``with`` blocks whose context does not change what a ctx call does are split
(grad mode, device guards, autocast: :data:`NEUTRAL_CONTEXTS`).

Example::

    forward_if, setup_if = split_if(cst.parse_statement(
        "if x.requires_grad:\\n    d = x / r\\n    ctx.save_for_backward(d)\\n"), "ctx")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import libcst as cst

from ._ctx_uses import ctx_misuse, is_ctx_statement
from ._syntax import dotted, source_of, statement, tidy_first, walk

PASS = cst.SimpleStatementLine([cst.Pass()])

# NOTE: [neutral with blocks]
# A ctx call (save_for_backward, mark_dirty, mark_non_differentiable, set_materialize_grads,
# save_for_forward) records which objects it is given; grad mode, the current CUDA device and
# autocast do not change what it records. So inside ``with`` blocks of these context managers
# the calls move to setup_context (their arguments must be plain names or constants, which
# evaluate the same outside the block), and ``ctx.attr = value`` becomes a local of forward
# computed in place (under the block's grad mode, device and autocast), handed over at the end.
# Any other context manager (``torch.random.fork_rng``, a user's own, ``inference_mode``, whose
# tensors torch treats differently when saved) keeps the class refused.
NEUTRAL_CONTEXTS = frozenset(
    {
        "torch.no_grad",
        "torch.enable_grad",
        "torch.set_grad_enabled",
        "torch.autograd.no_grad",
        "torch.autograd.enable_grad",
        "torch.autograd.set_grad_enabled",
        "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.enable_grad",
        "torch.autograd.grad_mode.set_grad_enabled",
        "torch.cuda.device",
        "torch.cuda.device_of",
        "torch.device",
        "torch.autocast",
        "torch.amp.autocast",
        "torch.cuda.amp.autocast",
        "torch.cpu.amp.autocast",
    }
)


def neutral_with(stmt: cst.CSTNode) -> bool:
    """Whether ``stmt`` is a (non-async) ``with`` of :data:`NEUTRAL_CONTEXTS` calls only."""
    return (
        isinstance(stmt, cst.With)
        and stmt.asynchronous is None
        and isinstance(stmt.body, cst.IndentedBlock)
        and all(
            isinstance(item.item, cst.Call) and dotted(item.item.func) in NEUTRAL_CONTEXTS
            for item in stmt.items
        )
    )


def is_plain(expr: cst.BaseExpression) -> bool:
    """A name, ``*name`` or a constant: evaluates the same inside and outside a ``with``."""
    if isinstance(expr, cst.StarredElement):
        return is_plain(expr.value)
    return isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString))


def plain_test(expr: cst.BaseExpression) -> bool:
    """``x``, ``x is None``, ``not x``, ``a and b`` of plain names and constants."""
    if isinstance(expr, cst.UnaryOperation):
        return isinstance(expr.operator, cst.Not) and plain_test(expr.expression)
    if isinstance(expr, cst.BooleanOperation):
        return plain_test(expr.left) and plain_test(expr.right)
    if isinstance(expr, cst.Comparison):
        return is_plain(expr.left) and all(
            isinstance(c.operator, (cst.Is, cst.IsNot)) and is_plain(c.comparator)
            for c in expr.comparisons
        )
    return is_plain(expr)


def _plain_value(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(_plain_value(e.value) for e in expr.elements)
    return is_plain(expr)


def _plain_statement(stmt: cst.BaseStatement, ctx: str) -> bool:
    """A statement that evaluates only names and constants (no call, operator or attribute but
    ctx's own): it does the same inside and outside a neutral ``with``."""
    if isinstance(stmt, cst.If):
        branches = _branches(stmt)
        return all(
            isinstance(b.body, cst.IndentedBlock)
            and all(_plain_statement(s, ctx) for s in b.body.body)
            and (isinstance(b, cst.Else) or plain_test(b.test))
            for b in branches
        )
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Pass):
            continue
        if is_ctx_statement(cst.SimpleStatementLine([small]), ctx):
            values = [a.value for a in small.value.args] if isinstance(small, cst.Expr) else []  # type: ignore[attr-defined]
            if isinstance(small, cst.Assign):
                values = [small.value]
            if all(_plain_value(v) for v in values):
                continue
            return False
        if not isinstance(small, cst.Assign) or not _plain_value(small.value):
            return False
        if not all(_plain_value(t.target) for t in small.targets):
            return False
    return True


def hoist_plain_tails(body: Sequence[cst.BaseStatement], ctx: str) -> List[cst.BaseStatement]:
    """``body`` with the trailing statements of each neutral ``with`` that use ctx and evaluate
    only names and constants moved after the block (``if event_fn is None: y = ans;
    ctx.save_for_backward(t, y)``): they do the same there, and become top-level statements the
    rest of the analysis splits. See NOTE: [neutral with blocks]."""
    result: List[cst.BaseStatement] = []
    for stmt in body:
        result.append(stmt)
        if not isinstance(stmt, cst.With) or not neutral_with(stmt):
            continue
        inner = list(getattr(stmt.body, "body", ()))
        start = len(inner)
        while start > 1 and _plain_statement(inner[start - 1], ctx):
            start -= 1
        tail = inner[start:]
        if not any(isinstance(n, cst.Name) and n.value == ctx for s in tail for n in walk(s)):
            continue
        result[-1] = stmt.with_changes(body=stmt.body.with_changes(body=inner[:start]))
        result += tail
    return result


def split_with(
    stmt: cst.BaseStatement, ctx: str
) -> Optional[Tuple[cst.With, List[cst.BaseStatement]]]:
    """(forward's ``with`` without the ctx calls, the ctx calls) for a neutral ``with`` whose
    top-level statements mix both; None where ctx is used otherwise (see
    :data:`NEUTRAL_CONTEXTS`)."""
    if not neutral_with(stmt):
        return None
    assert isinstance(stmt, cst.With) and isinstance(stmt.body, cst.IndentedBlock)
    body = list(stmt.body.body)
    moved: List[cst.BaseStatement] = [
        s for s in body if isinstance(s, cst.SimpleStatementLine) and is_ctx_statement(s, ctx)
    ]
    kept = [s for s in body if not any(s is m for m in moved)]
    if not moved or any(ctx_misuse(s, ctx) for s in [*kept, *stmt.items]):
        return None
    if any(isinstance(n, (cst.Return, cst.Break, cst.Continue)) for s in kept for n in walk(s)):
        return None
    return stmt.with_changes(body=stmt.body.with_changes(body=kept or [PASS])), moved


def with_misuse(stmt: cst.BaseStatement, ctx: str) -> Optional[str]:
    """Why a grad mode/device/autocast ``with`` that uses ctx cannot be split: the statement in
    it that keeps it whole (None for another statement, or where the block splits)."""
    if not neutral_with(stmt):
        return None
    assert isinstance(stmt, cst.With) and isinstance(stmt.body, cst.IndentedBlock)
    block = f"`with {', '.join(source_of(item.item) for item in stmt.items)}:`"
    for inner in stmt.body.body:
        uses = any(isinstance(n, cst.Name) and n.value == ctx for n in walk(inner, True))
        if not uses or (
            isinstance(inner, cst.SimpleStatementLine) and is_ctx_statement(inner, ctx)
        ):
            continue
        if isinstance(inner, cst.If):
            return (
                f"forward uses ctx in an if block inside {block}, which migrate splits only "
                "outside a with block; compute the values inside the with block and put the if "
                "with the ctx statements after it to let it through"
            )
        if neutral_with(inner):
            return (
                f"forward uses ctx in a with block nested in {block}; move the ctx statements "
                "out of the inner block to let it through"
            )
        return ctx_misuse(inner, ctx)
    if any(isinstance(n, (cst.Return, cst.Break, cst.Continue)) for n in walk(stmt)):
        return (
            f"forward returns (or leaves a loop) inside {block}, which also uses ctx; return "
            "after the block to let it through"
        )
    return None


def _branches(stmt: cst.If) -> List[Union[cst.If, cst.Else]]:
    found: List[Union[cst.If, cst.Else]] = []
    node: Union[cst.If, cst.Else, None] = stmt
    while node is not None:
        found.append(node)
        node = node.orelse if isinstance(node, cst.If) else None
    return found


def if_tests(stmt: cst.If) -> List[cst.BaseExpression]:
    """The conditions of an ``if``/``elif`` chain."""
    return [b.test for b in _branches(stmt) if isinstance(b, cst.If)]


def _rebuild(
    node: Union[cst.If, cst.Else], bodies: List[List[cst.BaseStatement]], tidy: bool = False
) -> Union[cst.If, cst.Else]:
    """``node`` with ``bodies`` as its branches' (``tidy``: no blank line opening a branch,
    for setup_context's copy, whose branches start with what came after forward's lines)."""
    body = (tidy_first(bodies[0]) if tidy else bodies[0]) or [PASS]
    assert isinstance(node.body, cst.IndentedBlock)
    block = node.body.with_changes(body=body)
    if isinstance(node, cst.Else):
        return node.with_changes(body=block)
    orelse = node.orelse
    rest = _rebuild(orelse, bodies[1:], tidy) if orelse is not None else None
    return node.with_changes(body=block, orelse=rest)


@dataclass
class IfSplit:
    """An ``if`` whose branches mix computation and ctx statements, split in two."""

    forward: cst.If  # forward's if without the ctx statements
    setup: cst.If  # setup_context's if with only them, under the same conditions
    moved: List[cst.BaseStatement]  # every ctx statement, in order (nested ifs' included)
    branches: List[bool]  # per branch of the chain: whether it has ctx statements
    nested_tests: List[cst.BaseExpression]  # conditions of nested ifs setup_context tests again


Statements = List[cst.BaseStatement]


def _split_body(
    body: Sequence[cst.BaseStatement], ctx: str
) -> Optional[Tuple[Statements, Statements, Statements, List[cst.BaseExpression]]]:
    """(kept, moved, every ctx statement, nested conditions) of one branch; None where ctx is
    used otherwise."""
    kept: List[cst.BaseStatement] = []
    move: List[cst.BaseStatement] = []
    flat: List[cst.BaseStatement] = []
    tests: List[cst.BaseExpression] = []
    for stmt in body:
        if is_ctx_statement(stmt, ctx):
            move.append(stmt)
            flat.append(stmt)
            tests += [t for n in walk(stmt) if isinstance(n, cst.If) for t in if_tests(n)]
            continue
        nested = split_if(stmt, ctx)
        if nested is not None:
            kept.append(nested.forward)
            move.append(nested.setup.with_changes(leading_lines=()) if not move else nested.setup)
            flat += nested.moved
            tests += [*if_tests(nested.setup), *nested.nested_tests]
            continue
        if ctx_misuse(stmt, ctx):
            return None
        if any(isinstance(n, (cst.Return, cst.Break, cst.Continue)) for n in walk(stmt)):
            return None
        kept.append(stmt)
    return kept, move, flat, tests


def split_if(stmt: cst.BaseStatement, ctx: str) -> Optional[IfSplit]:
    """The split of an ``if`` whose branches (or nested ``if`` blocks) mix computation and ctx
    statements; None where ctx is used otherwise."""
    if not isinstance(stmt, cst.If) or any(ctx_misuse(t, ctx) for t in if_tests(stmt)):
        return None
    keep: List[List[cst.BaseStatement]] = []
    move: List[List[cst.BaseStatement]] = []
    flat: List[cst.BaseStatement] = []
    tests: List[cst.BaseExpression] = []
    for branch in _branches(stmt):
        if not isinstance(branch.body, cst.IndentedBlock):
            return None
        parts = _split_body(branch.body.body, ctx)
        if parts is None:
            return None
        keep.append(parts[0])
        move.append(parts[1])
        flat += parts[2]
        tests += parts[3]
    if not any(move):
        return None
    forward_if = _rebuild(stmt, keep)
    setup_if = _rebuild(stmt, move, tidy=True)
    assert isinstance(forward_if, cst.If) and isinstance(setup_if, cst.If)
    return IfSplit(forward_if, setup_if, flat, [bool(m) for m in move], tests)


# NOTE: [branch flags]
# setup_context runs the ctx statements of a split ``if`` under the same conditions, evaluated
# again, where they read only inputs and names forward does not change (a computed value only
# when the condition just names it, ``if needs_grad:``: forward hands the value over). Where a
# condition computes on such a value (``if z_is_small.sum() > 0:``) or the block changes what
# it reads, forward instead records which branch ran in a new local (True, or the branch's
# number in an if/elif chain) set first in each branch that has ctx statements, and
# setup_context tests that local: the same statements run, for the same branch, without
# evaluating the condition again. Conditions of nested ``if`` blocks are always evaluated again.
def flag_branches(split: IfSplit, flag: str) -> Tuple[cst.BaseStatement, cst.If, cst.If]:
    """(the flag's first value, forward's if setting the flag, setup_context's if testing it) for
    a split ``if`` (see NOTE: [branch flags])."""
    numbered = split.branches.count(True) > 1
    forward_branches = _branches(split.forward)
    setup_branches = _branches(split.setup)
    bodies: List[List[cst.BaseStatement]] = []
    chain: List[Tuple[str, cst.IndentedBlock]] = []
    for number, (node, has_moves, setup) in enumerate(
        zip(forward_branches, split.branches, setup_branches), start=1
    ):
        body = list(getattr(node.body, "body", ()))
        if has_moves:
            body = [s for s in body if not _is_pass(s)]
            value = str(number) if numbered else "True"
            body = [statement(f"{flag} = {value}\n"), *body]
            assert isinstance(setup.body, cst.IndentedBlock)
            block = setup.body.with_changes(body=tidy_first(list(setup.body.body)))
            chain.append((f"{flag} == {number}" if numbered else flag, block))
        bodies.append(body)
    forward_if = _rebuild(split.forward, bodies)
    setup_if: Optional[cst.If] = None
    for test, block in reversed(chain):
        setup_if = cst.If(test=cst.parse_expression(test), body=block, orelse=setup_if)
    assert isinstance(forward_if, cst.If) and setup_if is not None
    setup_if = setup_if.with_changes(leading_lines=split.setup.leading_lines)
    first = statement(f"{flag} = {'0' if numbered else 'False'}\n")
    return first, forward_if, setup_if


def _is_pass(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, cst.Pass) for s in stmt.body
    )


def _ctx_attribute(node: cst.CSTNode, ctx: str) -> Optional[str]:
    if (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == ctx
    ):
        return node.attr.value
    return None


def _assigned_attribute(stmt: cst.BaseStatement, ctx: str) -> Optional[str]:
    """``attr`` for a line ``ctx.attr = value``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return _ctx_attribute(small.targets[0].target, ctx)
    return None


def _assigns_everywhere(stmt: cst.BaseStatement, ctx: str, attr: str) -> bool:
    """Whether every path through ``stmt`` sets ``ctx.attr`` (at a branch's top level)."""
    if _assigned_attribute(stmt, ctx) == attr:
        return True
    if isinstance(stmt, cst.With) and neutral_with(stmt):  # its body always runs: see
        body = getattr(stmt.body, "body", ())  # NOTE: [neutral with blocks]
        return any(_assigns_everywhere(s, ctx, attr) for s in body)
    if not isinstance(stmt, cst.If) or not isinstance(_branches(stmt)[-1], cst.Else):
        return False
    return all(
        isinstance(b.body, cst.IndentedBlock)
        and any(_assigns_everywhere(s, ctx, attr) for s in b.body.body)
        for b in _branches(stmt)
    )


def deferred_attributes(body: Sequence[cst.BaseStatement], ctx: str) -> List[str]:
    """Attributes set inside compound statements that compute values (``ctx.is_vector = True``
    under ``if x.dim() == 1: x = x.unsqueeze(-1)``), where the first statement that sets one
    sets it on every path: forward keeps them as local variables."""
    nested: List[str] = []
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine) or is_ctx_statement(stmt, ctx):
            continue
        for node in walk(stmt):
            if isinstance(node, cst.AssignTarget):
                attr = _ctx_attribute(node.target, ctx)
                if attr is not None and attr not in nested:
                    nested.append(attr)
    found = []
    for attr in nested:
        first = next(s for s in body if sets_attribute(s, ctx, attr))
        if _assigns_everywhere(first, ctx, attr):
            found.append(attr)
    return found


def sets_attribute(stmt: cst.BaseStatement, ctx: str, attr: str) -> bool:
    return any(
        isinstance(n, cst.AssignTarget) and _ctx_attribute(n.target, ctx) == attr
        for n in walk(stmt)
    )


class Localize(cst.CSTTransformer):
    """``ctx.attr`` (set and read) becomes the local ``names[attr]`` in forward."""

    def __init__(self, ctx: str, names: Dict[str, str]) -> None:
        self.ctx = ctx
        self.names = names

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        attr = _ctx_attribute(original_node, self.ctx)
        if attr in self.names:
            return cst.Name(self.names[attr], lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node
