"""Outputs: how a split forward returns (one ``return``, at its end) and which of the values
setup_context reads it gets from ``output`` rather than as intermediates."""

from __future__ import annotations

from typing import List, Optional, Sequence, Set, Tuple

import libcst as cst

from ._ctx_uses import ctx_call_names
from ._placement import Values
from ._syntax import Refused, walk


def returns(body: Sequence[cst.BaseStatement]) -> List[cst.Return]:
    found = []
    for stmt in body:
        found += [n for n in walk(stmt) if isinstance(n, cst.Return)]
    return found


def ends_with(body: Sequence[cst.BaseStatement], ret: cst.Return) -> bool:
    last = body[-1]
    return isinstance(last, cst.SimpleStatementLine) and last.body[-1] is ret


def outputs(
    body: List[cst.BaseStatement], values: Values, grads: Optional[int]
) -> Tuple[List[Optional[str]], Optional[int]]:
    """Move intermediates that forward returns anyway to ``outputs``."""
    last = body[-1] if body else None
    ret = (
        last.body[-1]
        if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)
        else None
    )
    if ret is None or ret.value is None:
        return [], None
    value = ret.value
    if isinstance(value, cst.Tuple):
        names: List[Optional[str]] = [
            e.value.value if isinstance(e.value, cst.Name) else None for e in value.elements
        ]
        if any(isinstance(e, cst.StarredElement) for e in value.elements):
            return [], None
        count: Optional[int] = len(names)
    else:
        names = [value.value if isinstance(value, cst.Name) else None]
        one = isinstance(value, cst.Name) and grads in (1, None) and not _holds_tuple(body, value)
        count = 1 if one or grads == 1 else None
        if count is None:
            names = []
    for name in names:
        if name is not None and name in values.intermediates:
            values.intermediates.remove(name)
            values.outputs.add(name)
    return names, count


def returns_one_tuple(body: Sequence[cst.BaseStatement]) -> bool:
    """Whether forward ends with ``return (y,)``: torch gets a tuple of one output."""
    last = body[-1] if body else None
    if not isinstance(last, cst.SimpleStatementLine) or not isinstance(last.body[-1], cst.Return):
        return False
    value = last.body[-1].value
    return isinstance(value, cst.Tuple) and len(value.elements) == 1


def _holds_tuple(body: Sequence[cst.BaseStatement], name: cst.Name) -> bool:
    """Whether forward assigns ``name`` a tuple (a literal or ``tuple(...)``): returned, it is
    several outputs, as many as the tuple holds (memcnn's ``outputs = tuple(...)``)."""
    for stmt in body:
        for node in walk(stmt):
            if not isinstance(node, cst.Assign) or not any(
                isinstance(t.target, cst.Name) and t.target.value == name.value
                for t in node.targets
            ):
                continue
            value = node.value
            if isinstance(value, cst.Tuple) or (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Name)
                and value.func.value == "tuple"
            ):
                return True
    return False


# NOTE: [an input returned as it is]
# A legacy forward that returns an input x as it is and saves it: with grad mode on, torch hands
# the caller a view of x (made with grad mode off) whose grad_fn is the Function's. A
# setup_context forward cannot return x itself and save it there (torch 2.x raises), so the
# codemod returns x.view_as(x), which is the same with grad mode on. Under torch.no_grad() the
# original's output is an alias of x that does not require grad (torch detaches it), while
# x.view_as(x), made inside forward, is a view of x that does (a view of a tensor that requires
# grad does, whatever the grad mode; measured on torch 2.15). forward cannot tell the two cases
# apart (torch runs it with grad mode off either way), so the class is migrated with a note that
# names the difference (Result.notes), never silently.
def views_of_saved_inputs(
    body: List[cst.BaseStatement],
    output_names: Sequence[Optional[str]],
    moved: Sequence[cst.BaseStatement],
    assigned: Set[str],
    ctx: str,
    param_names: Sequence[str],
) -> Tuple[List[cst.BaseStatement], List[str]]:
    """forward's body returning ``x.view_as(x)`` for an input ``x`` it returns as it is and
    saves (``assigned``: the names forward assigns), and those inputs: torch 2.x refuses to save
    such an output with setup_context, and a legacy Function returned a view of it anyway
    (unless marked dirty), except under torch.no_grad() (see NOTE: [an input returned as it
    is])."""
    saved = ctx_call_names(moved, ctx, "save_for_backward")
    dirty = ctx_call_names(moved, ctx, "mark_dirty")
    views = {
        name
        for name in output_names
        if name in param_names and name not in assigned and name in saved - dirty
    }
    if not views:
        return body, []
    marked = sorted(views & ctx_call_names(moved, ctx, "mark_non_differentiable"))
    if marked:
        raise Refused(
            f"forward returns its input {marked[0]} as it is, saves it and marks it "
            "non-differentiable; setup_context would have to mark a view of it (torch refuses "
            f"to save the input itself there), so return {marked[0]}.clone() or do not mark it "
            "to let it through"
        )
    last = body[-1]
    assert isinstance(last, cst.SimpleStatementLine)
    ret = last.body[-1]
    assert isinstance(ret, cst.Return) and ret.value is not None

    def view(expr: cst.BaseExpression) -> cst.BaseExpression:
        if isinstance(expr, cst.Name) and expr.value in views:
            return cst.parse_expression(f"{expr.value}.view_as({expr.value})")
        return expr

    value = ret.value
    if isinstance(value, cst.Tuple):
        elements = [e.with_changes(value=view(e.value)) for e in value.elements]
        value = value.with_changes(elements=elements)
    else:
        value = view(value)
    new_last = last.with_changes(body=[*last.body[:-1], ret.with_changes(value=value)])
    return [*body[:-1], new_last], sorted(views)
