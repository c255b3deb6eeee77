"""Refusals shared by the placements of split ``if`` and ``with`` blocks: a ctx statement that
setup_context would compute differently from forward, because its values are random, changed in
place later, or assigned again after it in the same block."""

from __future__ import annotations

from typing import List, Optional, Sequence, Set, Union

import libcst as cst

from ._ctx_uses import draws_random, is_ctx_statement, value_expressions
from ._effects import Later, reevaluation_problem
from ._syntax import Refused, alias_groups, bindings, free_names, loaded_names, walk


def check_recomputable(
    statements: Sequence[cst.CSTNode],
    changed: Set[str],
    stmt: cst.BaseStatement,
    where: str,
    effects: Optional[Later] = None,
) -> None:
    """Refuse ctx values that setup_context would compute differently: random draws, values
    read from names forward changes in place later (see NOTE: [in-place changes]) and what
    ``effects`` says forward's later calls may change (see NOTE: [calls forward makes])."""
    for node in statements:
        for line in walk(node):
            if not isinstance(line, cst.SimpleStatementLine):
                continue
            for position, expr in enumerate(value_expressions(line.body[0])):
                if draws_random(expr):
                    raise Refused(
                        f"forward sets a random ctx value {where}; draw it into a name "
                        "before the block and pass the name to let it through",
                        stmt,
                    )
                names = set(free_names(expr)) & changed
                shared = isinstance(expr, cst.Name) and not starred_argument(line.body[0], position)
                if names and not shared:
                    raise Refused(
                        f"forward computes a ctx value {where} from {min(names)}, which it "
                        "changes in place later; compute it into a name before the block "
                        "and pass the name to let it through",
                        stmt,
                    )
                if effects is None:
                    continue
                problem = reevaluation_problem(expr, effects)
                starred = starred_argument(line.body[0], position)
                if starred and isinstance(expr, cst.Name) and expr.value in effects.handed:
                    problem = f"{expr.value}, which forward hands to a call later"
                if problem is not None:
                    raise Refused(
                        f"forward computes a ctx value {where} from {problem}; compute it "
                        "into a name on a line of its own just before the ctx statement and "
                        "pass the name to let it through",
                        stmt,
                    )


def check_branch_order(
    body_of_forward: List[cst.BaseStatement], ctx: str, stmt: cst.If, top: Optional[cst.If] = None
) -> None:
    """Refuse a ctx statement whose values its branch (or a branch around it) assigns again
    after it."""
    node: Union[cst.If, cst.Else, None] = stmt
    while node is not None:
        body = list(getattr(node.body, "body", ()))
        check_order(body_of_forward, ctx, body, top or stmt, "under a condition", "branch")
        for inner in body:
            if isinstance(inner, cst.If) and not is_ctx_statement(inner, ctx):
                check_branch_order(body_of_forward, ctx, inner, top or stmt)
        node = node.orelse if isinstance(node, cst.If) else None


def check_order(
    body_of_forward: List[cst.BaseStatement],
    ctx: str,
    body: List[cst.BaseStatement],
    stmt: cst.BaseStatement,
    where: str,
    block: str,
) -> None:
    """Refuse a ctx statement of ``body`` whose values ``body`` assigns again after it."""
    groups = alias_groups(body_of_forward)
    for position, whole in enumerate(body):
        if is_ctx_statement(whole, ctx):
            inner: List[cst.CSTNode] = [whole]
        elif isinstance(whole, cst.If):  # a nested split if: its ctx statements
            inner = [n for n in walk(whole) if _is_ctx_line(n, ctx)]
        else:
            continue
        if not inner:
            continue
        after: Set[str] = set()
        changed: Set[str] = set()
        for later in body[position + 1 :]:
            assigned, mutated = bindings(later)
            after |= assigned
            changed |= mutated.union(*(groups.get(name, set()) for name in mutated))
        check_recomputable(inner, changed, stmt, where)
        changed = set().union(*(loaded_names(n) for n in inner)) - {ctx}
        changed &= after
        if changed:
            raise Refused(
                f"forward saves {min(changed)} {where} and assigns it again in the same "
                f"{block}; save after the last assignment to let it through",
                stmt,
            )


def _is_ctx_line(node: cst.CSTNode, ctx: str) -> bool:
    return isinstance(node, cst.SimpleStatementLine) and is_ctx_statement(node, ctx)


def starred_argument(small: cst.BaseSmallStatement, position: int) -> bool:
    """Whether argument ``position`` of a ctx call is unpacked (``*tensors``)."""
    return (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and small.value.args[position].star == "*"
    )
