"""Analysis: split one legacy ``forward(ctx, ...)`` into its ctx-free part and the statements
setup_context runs, classifying every value those statements read (input, output, intermediate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple, Union

import libcst as cst

from ._branches import (
    Localize,
    deferred_attributes,
    hoist_plain_tails,
    sets_attribute,
    split_if,
    split_with,
    with_misuse,
)
from ._ctx_uses import ReadBacks, ctx_misuse, is_ctx_statement, reads_attribute
from ._effects import runs_in_other_state
from ._outputs import ends_with, outputs, returns, returns_one_tuple, views_of_saved_inputs
from ._placement import Placement, Values
from ._syntax import (
    Refused,
    bindings,
    fresh_name,
    is_docstring,
    loaded_names,
    positional_params,
    star_param,
    statement,
    walk,
)


@dataclass
class Split:
    """forward split into its ctx-free part and what setup_context runs."""

    params: List[cst.Param]
    forward_body: List[cst.BaseStatement]
    ctx_statements: List[cst.BaseStatement]
    values: Values
    output_names: List[Optional[str]]  # one per public output (None: not a plain name)
    output_count: Optional[int]
    ctx: str
    star: Optional[str] = None  # the *args parameter
    one_tuple: bool = False  # forward returns a one-element tuple literal: `return (y,)`
    viewed: List[str] = field(default_factory=list)  # inputs returned as x.view_as(x)


# NOTE: [needs_input_grad in forward]
# In a legacy forward, ctx.needs_input_grad[i] is whether argument i is a tensor that requires
# grad: torch computes it from the arguments alone when apply is called, whatever the grad mode
# (measured on 1.13.1 and 2.13.0: the same under torch.no_grad() and inference_mode, and forward
# always runs with grad mode off). So a migrated forward computes it first from its own inputs,
# ``tuple(isinstance(arg, torch.Tensor) and arg.requires_grad for arg in (x, w, *args))``; ctx
# statements that move to setup_context keep reading ctx.needs_input_grad there.
def body_statements(fn: cst.FunctionDef) -> List[cst.BaseStatement]:
    if not isinstance(fn.body, cst.IndentedBlock):
        raise Refused(f"{fn.name.value} is written on one line", fn)
    return list(fn.body.body)


class ForwardAnalysis:
    """Split one legacy forward; raise :class:`Refused` when it cannot be done safely."""

    def __init__(
        self,
        fn: cst.FunctionDef,
        kind: str,
        grads: Optional[int],
        torch_name: Optional[str] = None,
        imports: Optional[Dict[str, str]] = None,
    ) -> None:
        self.fn = fn
        params = positional_params(fn, "forward", allow_star=True)
        star = star_param(fn)
        self.star = star.name.value if star is not None else None
        skip = 1 if kind == "class" else 0
        if len(params) <= skip:
            raise Refused("forward takes no ctx parameter", fn)
        self.ctx = params[skip].name.value
        self.cls = params[0].name.value if skip else None
        self.params = params[skip + 1 :]
        if self.params and self.params[0].name.value == "ctx":
            raise Refused(
                "forward's first input is named ctx (its ctx parameter is "
                f"{self.ctx}), which @compatfn.function would read as the legacy form; rename "
                "that input to let it through",
                fn,
            )
        self.param_names = [p.name.value for p in self.params] + ([self.star] if self.star else [])
        self.readbacks = ReadBacks(self.ctx)
        self.grads = grads
        self.body = hoist_plain_tails(body_statements(fn), self.ctx)
        self.values = Values()
        self.taken = {self.ctx, *self.param_names}
        for stmt in self.body:
            self.taken |= bindings(stmt)[0] | loaded_names(stmt)
        self.deferred = {
            attr: fresh_name(attr, self.taken) for attr in deferred_attributes(self.body, self.ctx)
        }
        if self.deferred:
            localize = Localize(self.ctx, self.deferred)
            self.body = [stmt.visit(localize) for stmt in self.body]  # type: ignore[misc]
        local = {self.ctx, *self.param_names, *self._assigned()}
        if torch_name is not None and torch_name not in local:
            self.body = self._needs_input_grad_from_inputs(torch_name)
        self.placement = Placement(
            self.body,
            self.ctx,
            self.cls,
            self.param_names,
            self.readbacks,
            self.values,
            self.taken,
            imports or {},
            runs_in_other_state(fn),
        )

    def _needs_input_grad_from_inputs(self, torch_name: str) -> List[cst.BaseStatement]:
        """forward's body with its reads of ``ctx.needs_input_grad`` (outside the ctx statements
        that move whole) replaced by a local computed first from the inputs.
        See NOTE: [needs_input_grad in forward]."""
        kept = [s for s in self.body if not is_ctx_statement(s, self.ctx)]
        if not reads_attribute(kept, self.ctx, "needs_input_grad") or any(
            sets_attribute(s, self.ctx, "needs_input_grad") for s in self.body
        ):
            return self.body
        local = fresh_name("needs_input_grad", self.taken)
        localize = Localize(self.ctx, {"needs_input_grad": local})
        body: List[cst.BaseStatement] = [
            s if is_ctx_statement(s, self.ctx) else s.visit(localize)  # type: ignore[misc]
            for s in self.body
        ]
        names = [p.name.value for p in self.params] + ([f"*{self.star}"] if self.star else [])
        inputs = ", ".join(names) + ("," if len(names) == 1 else "")
        first = statement(
            f"{local} = tuple(isinstance(arg, {torch_name}.Tensor) and arg.requires_grad "
            f"for arg in ({inputs}))\n"
        )
        start = 1 if body and is_docstring(body[0]) else 0
        return [*body[:start], first, *body[start:]]

    def split(self) -> Split:
        body, ctx_statements = self._partition()
        both = [n for n in self.values.intermediates if n in self.values.inputs]
        if both:
            raise Refused(
                f"setup_context needs both the input {both[0]} and the value forward assigns "
                f"to {both[0]} later; give that value a name of its own to let it through",
                self.fn,
            )
        body = start_as_none(body, self.values.intermediates, self.param_names)
        output_names, count = outputs(body, self.values, self.grads)
        body, viewed = views_of_saved_inputs(
            body, output_names, ctx_statements, self._assigned(), self.ctx, self.param_names
        )
        return Split(
            self.params,
            body,
            ctx_statements,
            self.values,
            output_names,
            count,
            self.ctx,
            self.star,
            returns_one_tuple(body),
            viewed,
        )

    def _assigned(self) -> Set[str]:
        assigned: Set[str] = set()
        for stmt in self.body:
            assigned |= bindings(stmt)[0]
        return assigned

    def _check_single_return(self) -> None:
        """Refuse a forward that uses ctx unless it ends with its only ``return``."""
        found = returns(self.body)
        has_ctx = any(is_ctx_statement(s, self.ctx) for s in self.body)
        if has_ctx and not found:
            raise Refused("forward has no return statement; end it with `return <output>`", self.fn)
        if has_ctx and (len(found) != 1 or not ends_with(self.body, found[0])):
            raise Refused(
                "forward returns from more than one place (an early return skips ctx calls); "
                "assign the result to a name and return it once, at the end, to let it through",
                self.fn,
            )

    def _partition(self) -> Tuple[List[cst.BaseStatement], List[cst.BaseStatement]]:
        keep: List[cst.BaseStatement] = []
        moved: List[cst.BaseStatement] = []
        self._check_single_return()
        blank: List[cst.EmptyLine] = []  # before statements that left forward whole
        for index, stmt in enumerate(self.body):
            before = len(keep)
            self._partition_one(index, stmt, keep, moved)
            if len(keep) == before:
                blank = blank or _blank_lines(stmt)
            elif blank:
                keep[before] = _after_blank(keep[before], blank)
                blank = []
        for attr, local in self.deferred.items():
            moved.append(statement(f"{self.ctx}.{attr} = {local}\n"))
            self.values.add_intermediate(local)
        return keep, moved

    def _partition_one(
        self,
        index: int,
        stmt: cst.BaseStatement,
        keep: List[cst.BaseStatement],
        moved: List[cst.BaseStatement],
    ) -> None:
        """Put forward's statement ``stmt`` (or its parts) in ``keep`` (forward) and ``moved``
        (setup_context)."""
        flagged = isinstance(stmt, cst.If) and self.placement.needs_flag(index, stmt)
        if is_ctx_statement(stmt, self.ctx) and not flagged:
            _refuse_walrus([stmt])
            stmt = self.readbacks.apply_values(stmt)
            snapshot, stmt = self.placement.place(index, stmt)
            keep += snapshot
            moved.append(stmt)
            return
        stmt = self.readbacks.apply(stmt)
        parts = split_if(stmt, self.ctx)
        if parts is not None:
            assert isinstance(stmt, cst.If)
            _refuse_walrus(parts.moved)
            forward_part, setup_if = self.placement.place_split(index, stmt, parts)
            keep += forward_part
            moved.append(setup_if)
            return
        with_parts = split_with(stmt, self.ctx)
        if with_parts is not None:
            _refuse_walrus(with_parts[1])
            keep += self.placement.place_with(index, stmt, *with_parts)
            moved += with_parts[1]
            return
        misuse = with_misuse(stmt, self.ctx) or ctx_misuse(stmt, self.ctx)
        if misuse:
            raise Refused(misuse, stmt)
        keep.append(stmt)


def _blank_lines(stmt: cst.BaseStatement) -> List[cst.EmptyLine]:
    """The blank lines before ``stmt`` and its comments (the comments go where it goes)."""
    lines: List[cst.EmptyLine] = []
    for line in getattr(stmt, "leading_lines", ()):
        if line.comment is not None:
            break
        lines.append(line)
    return lines


def _after_blank(stmt: cst.BaseStatement, blank: List[cst.EmptyLine]) -> cst.BaseStatement:
    """``stmt`` after the blank lines of the statements before it that left forward (as black
    keeps it: after an import, the blank line is one black requires), unless it has its own."""
    lines = list(getattr(stmt, "leading_lines", ()))
    if lines and lines[0].comment is None:
        return stmt
    return stmt.with_changes(leading_lines=[*blank, *lines])


def _refuse_walrus(moved: List[cst.BaseStatement]) -> None:
    """Refuse ``:=`` in statements that move to setup_context: forward would lose the name."""
    for stmt in moved:
        if any(isinstance(node, cst.NamedExpr) for node in walk(stmt)):
            raise Refused(
                "forward assigns a name with := in a statement that moves to setup_context; "
                "assign it on a line of its own before that statement to let it through",
                stmt,
            )


# NOTE: [intermediates that may be unbound]
# forward returns every intermediate at its end, where setup_context used to read it only on the
# paths that save it (``if x.requires_grad: y = x * 2`` ... ``if x.requires_grad:
# ctx.save_for_backward(y)``). A name not assigned on every path before the return starts as
# None just before the statement that first assigns it, so that forward can always return it.
def start_as_none(
    body: List[cst.BaseStatement], intermediates: List[str], params: List[str]
) -> List[cst.BaseStatement]:
    """``body`` with ``name = None`` before the first statement that assigns an intermediate
    only on some paths (see NOTE: [intermediates that may be unbound])."""
    result = list(body)
    for name in intermediates:
        if name in params:
            continue
        first = next((i for i, s in enumerate(result) if name in bindings(s)[0]), None)
        if first is None or _always_assigns(result[first], name):
            continue
        stmt = result[first]
        lines = getattr(stmt, "leading_lines", ())
        start = statement(f"{name} = None\n").with_changes(leading_lines=lines)
        result[first : first + 1] = [start, stmt.with_changes(leading_lines=())]
    return result


def _always_assigns(stmt: cst.BaseStatement, name: str) -> bool:
    """Whether every path through ``stmt`` that does not raise leaves ``name`` assigned."""
    if isinstance(stmt, cst.SimpleStatementLine):
        deletes = [n for n in walk(stmt) if isinstance(n, cst.Del)]
        return name in bindings(stmt)[0] and not any(name in bindings(d)[0] for d in deletes)
    if isinstance(stmt, (cst.Try, cst.TryStar)):
        return _try_always_assigns(stmt, name)
    blocks: List[cst.BaseSuite] = []
    if isinstance(stmt, cst.With):
        blocks = [stmt.body]
    elif isinstance(stmt, cst.If) and _else_of(stmt) is not None:
        node: Optional[cst.CSTNode] = stmt
        while isinstance(node, (cst.If, cst.Else)):
            blocks.append(node.body)
            node = node.orelse if isinstance(node, cst.If) else None
    return bool(blocks) and all(
        isinstance(b, cst.IndentedBlock) and any(_always_assigns(s, name) for s in b.body)
        for b in blocks
    )


def _try_always_assigns(stmt: Union[cst.Try, cst.TryStar], name: str) -> bool:
    """A ``finally`` that assigns it; else the ``try`` body (or its ``else``) and every handler
    (one that ends raising leaves no path)."""

    def assigns(block: Optional[cst.CSTNode]) -> bool:  # or never ends but by raising
        body = getattr(block, "body", None)
        if not isinstance(body, cst.IndentedBlock):
            return False
        last = body.body[-1]
        raises = isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Raise)
        return raises or any(_always_assigns(s, name) for s in body.body)

    if assigns(stmt.finalbody):
        return True
    return (assigns(stmt) or assigns(stmt.orelse)) and all(assigns(h) for h in stmt.handlers)


def _else_of(stmt: cst.If) -> Optional[cst.Else]:
    node: Optional[cst.CSTNode] = stmt.orelse
    while isinstance(node, cst.If):
        node = node.orelse
    return node if isinstance(node, cst.Else) else None
