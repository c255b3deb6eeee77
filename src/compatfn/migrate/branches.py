"""ctx inside ``if`` blocks that also compute values: the block is split in two (forward keeps
the computation, setup_context the ctx statements under the same conditions), and ctx
attributes set in such blocks become local variables of forward, handed over at the end.

Example::

    forward_if, setup_if = split_if(cst.parse_statement(
        "if x.requires_grad:\\n    d = x / r\\n    ctx.save_for_backward(d)\\n"), "ctx")
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import libcst as cst

from .ctx_uses import ctx_misuse, is_ctx_statement
from .syntax import walk

PASS = cst.SimpleStatementLine([cst.Pass()])


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
    node: Union[cst.If, cst.Else], bodies: List[List[cst.BaseStatement]]
) -> Union[cst.If, cst.Else]:
    body = bodies[0] or [PASS]
    assert isinstance(node.body, cst.IndentedBlock)
    block = node.body.with_changes(body=body)
    if isinstance(node, cst.Else):
        return node.with_changes(body=block)
    orelse = node.orelse
    rest = _rebuild(orelse, bodies[1:]) if orelse is not None else None
    return node.with_changes(body=block, orelse=rest)


def split_if(
    stmt: cst.BaseStatement, ctx: str
) -> Optional[Tuple[cst.If, cst.If, List[cst.BaseStatement]]]:
    """(forward's ``if`` without the ctx statements, setup_context's ``if`` with only them, the
    ctx statements) for an ``if`` whose branches mix both; None where ctx is used otherwise."""
    if not isinstance(stmt, cst.If):
        return None
    keep: List[List[cst.BaseStatement]] = []
    move: List[List[cst.BaseStatement]] = []
    for branch in _branches(stmt):
        if not isinstance(branch.body, cst.IndentedBlock):
            return None
        kept = [s for s in branch.body.body if not is_ctx_statement(s, ctx)]
        if any(ctx_misuse(s, ctx) for s in kept):
            return None
        if any(isinstance(n, (cst.Return, cst.Break, cst.Continue)) for s in kept for n in walk(s)):
            return None
        keep.append(kept)
        move.append([s for s in branch.body.body if is_ctx_statement(s, ctx)])
    if not any(move) or any(ctx_misuse(t, ctx) for t in if_tests(stmt)):
        return None
    forward_if = _rebuild(stmt, keep)
    setup_if = _rebuild(stmt, move)
    assert isinstance(forward_if, cst.If) and isinstance(setup_if, cst.If)
    return forward_if, setup_if, [s for branch in move for s in branch]


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
        first = next(s for s in body if _sets(s, ctx, attr))
        if _assigns_everywhere(first, ctx, attr):
            found.append(attr)
    return found


def _sets(stmt: cst.BaseStatement, ctx: str, attr: str) -> bool:
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
