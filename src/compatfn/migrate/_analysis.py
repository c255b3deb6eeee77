"""Analysis: split one legacy ``forward(ctx, ...)`` into its ctx-free part and the statements
setup_context runs, classifying every value those statements read (input, output, intermediate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from ._branches import (
    Localize,
    deferred_attributes,
    hoist_plain_tails,
    if_tests,
    is_plain,
    split_if,
    split_with,
)
from ._ctx_uses import (
    ReadBacks,
    ctx_call_names,
    ctx_misuse,
    draws_random,
    is_ctx_statement,
    reads_attribute,
    value_expressions,
)
from ._syntax import (
    Refused,
    bindings,
    fresh_name,
    loaded_names,
    names_in_order,
    positional_params,
    star_param,
    statement,
    walk,
)


@dataclass
class Values:
    """How setup_context gets one name: from ``inputs``, from ``output`` or from an intermediate."""

    inputs: Set[str] = field(default_factory=set)
    outputs: Set[str] = field(default_factory=set)
    intermediates: List[str] = field(default_factory=list)

    def add_intermediate(self, name: str) -> None:
        if name not in self.intermediates:
            self.intermediates.append(name)


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


def _returns(body: Sequence[cst.BaseStatement]) -> List[cst.Return]:
    found = []
    for stmt in body:
        found += [n for n in walk(stmt) if isinstance(n, cst.Return)]
    return found


def body_statements(fn: cst.FunctionDef) -> List[cst.BaseStatement]:
    if not isinstance(fn.body, cst.IndentedBlock):
        raise Refused(f"{fn.name.value} is written on one line", fn)
    return list(fn.body.body)


class ForwardAnalysis:
    """Split one legacy forward; raise :class:`Refused` when it cannot be done safely."""

    def __init__(self, fn: cst.FunctionDef, kind: str, grads: Optional[int]) -> None:
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

    def split(self) -> Split:
        body, ctx_statements = self._partition()
        output_names, count = self._outputs(body)
        body = self._views_of_saved_inputs(body, output_names, ctx_statements)
        return Split(
            self.params, body, ctx_statements, self.values, output_names, count, self.ctx, self.star
        )

    def _views_of_saved_inputs(
        self,
        body: List[cst.BaseStatement],
        outputs: Sequence[Optional[str]],
        moved: Sequence[cst.BaseStatement],
    ) -> List[cst.BaseStatement]:
        """forward's body returning ``x.view_as(x)`` for an input ``x`` it returns as it is and
        saves: torch 2.x refuses to save such an output with setup_context, and a legacy
        Function returned a view of it anyway (unless marked dirty)."""
        assigned: Set[str] = set()
        for stmt in self.body:
            assigned |= bindings(stmt)[0]
        saved = ctx_call_names(moved, self.ctx, "save_for_backward")
        dirty = ctx_call_names(moved, self.ctx, "mark_dirty")
        views = {
            name
            for name in outputs
            if name in self.param_names and name not in assigned and name in saved - dirty
        }
        if not views:
            return body
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
        return [*body[:-1], new_last]

    def _partition(self) -> Tuple[List[cst.BaseStatement], List[cst.BaseStatement]]:
        keep: List[cst.BaseStatement] = []
        moved: List[cst.BaseStatement] = []
        returns = _returns(self.body)
        has_ctx = any(is_ctx_statement(s, self.ctx) for s in self.body)
        if has_ctx and not returns:
            raise Refused("forward has no return statement; end it with `return <output>`", self.fn)
        if has_ctx and (len(returns) != 1 or not self._ends_with(returns[0])):
            raise Refused(
                "forward returns from more than one place (an early return skips ctx calls)",
                self.fn,
            )
        for index, stmt in enumerate(self.body):
            if is_ctx_statement(stmt, self.ctx):
                snapshot, stmt = self._place(index, stmt)
                keep += snapshot
                moved.append(stmt)
                continue
            stmt = self.readbacks.apply(stmt)
            parts = split_if(stmt, self.ctx)
            if parts is not None:
                assert isinstance(stmt, cst.If)
                keep += self._place_split(index, stmt, parts[0], parts[2])
                moved.append(parts[1])
                continue
            with_parts = split_with(stmt, self.ctx)
            if with_parts is not None:
                keep += self._place_with(index, stmt, *with_parts)
                moved += with_parts[1]
                continue
            misuse = ctx_misuse(stmt, self.ctx)
            if misuse:
                raise Refused(misuse, stmt)
            if self.cls is not None and self.cls in loaded_names(stmt):
                pass  # handled by the caller (cls helper)
            keep.append(stmt)
        for attr, local in self.deferred.items():
            moved.append(statement(f"{self.ctx}.{attr} = {local}\n"))
            self.values.add_intermediate(local)
        return keep, moved

    def _ends_with(self, ret: cst.Return) -> bool:
        last = self.body[-1]
        return isinstance(last, cst.SimpleStatementLine) and last.body[-1] is ret

    def _later(self, index: int) -> Tuple[Set[str], Set[str]]:
        assigned: Set[str] = set()
        mutated: Set[str] = set()
        for stmt in self.body[index + 1 :]:
            a, m = bindings(stmt)
            assigned |= a
            mutated |= m
        return assigned, mutated

    def _earlier_assigned(self, index: int) -> Set[str]:
        assigned: Set[str] = set()
        for stmt in self.body[:index]:
            assigned |= bindings(stmt)[0]
        return assigned

    def _place(
        self, index: int, stmt: cst.BaseStatement
    ) -> Tuple[List[cst.BaseStatement], cst.BaseStatement]:
        """Classify the names a ctx statement reads; return the snapshot statements forward must
        keep in its place and the statement setup_context runs."""
        later_assigned, later_mutated = self._later(index)
        earlier = self._earlier_assigned(index)
        if self.cls is not None and self.cls in loaded_names(stmt):
            raise Refused(f"a ctx value is computed with {self.cls}", stmt)
        if isinstance(stmt, cst.If):
            self._classify_block(stmt, set(), earlier, later_assigned, later_mutated)
            return [], stmt
        assert isinstance(stmt, cst.SimpleStatementLine)
        small = stmt.body[0]
        snapshots: List[cst.BaseStatement] = []
        replacements: Dict[int, cst.BaseExpression] = {}
        for position, expr in enumerate(value_expressions(small)):
            ordered = [name for name in names_in_order(expr) if name != self.ctx]
            names = set(ordered)
            kinds = {name: self._classify(name, earlier, later_assigned) for name in ordered}
            bare = isinstance(expr, cst.Name) or (
                isinstance(expr, cst.StarredElement) and isinstance(expr.value, cst.Name)
            )
            recompute_unsafe = (
                self._read_back(index, small, expr, later_assigned)
                or draws_random(expr)
                or any(
                    kinds[n] == "intermediate" and n in later_assigned for n in names
                )  # reassigned later: the value at this point is gone
                or (not bare and bool(names & later_mutated))
            )
            if recompute_unsafe:
                if isinstance(expr, cst.StarredElement):
                    raise Refused("a starred ctx argument forward changes later", stmt)
                name = fresh_name(self._snapshot_base(small, position), self.taken)
                snapshots.append(
                    stmt.with_changes(body=[cst.Assign([cst.AssignTarget(cst.Name(name))], expr)])
                )
                replacements[position] = cst.Name(name)
                self.values.add_intermediate(name)
                self._alias(small, name)
                continue
            for name, kind in kinds.items():
                self._record(name, kind)
        if replacements:
            stmt = stmt.with_changes(body=[_replace_values(small, replacements)])
            snapshots = [snapshots[0].with_changes(leading_lines=stmt.leading_lines)] + [
                s.with_changes(leading_lines=()) for s in snapshots[1:]
            ]
            stmt = stmt.with_changes(leading_lines=())
        return snapshots, stmt

    def _read_back(
        self, index: int, small: cst.BaseSmallStatement, expr: cst.BaseExpression, later: Set[str]
    ) -> bool:
        """For ``ctx.attr = expr`` with ``ctx.attr`` read later in forward: True when forward
        must keep the value under a name of its own (False, with the read-backs replaced by
        ``expr``'s name, when ``expr`` is a name forward does not assign again)."""
        target = small.targets[0].target if isinstance(small, cst.Assign) else None
        if not isinstance(target, cst.Attribute) or len(getattr(small, "targets", ())) != 1:
            return False
        if not reads_attribute(self.body[index + 1 :], self.ctx, target.attr.value):
            self.readbacks.aliases.pop(target.attr.value, None)
            return False
        if isinstance(expr, cst.Name) and expr.value not in later:
            self.readbacks.aliases[target.attr.value] = expr.value
            return False
        return True

    def _alias(self, small: cst.BaseSmallStatement, name: str) -> None:
        target = small.targets[0].target if isinstance(small, cst.Assign) else None
        if isinstance(target, cst.Attribute) and reads_attribute(
            self.body, self.ctx, target.attr.value
        ):
            self.readbacks.aliases[target.attr.value] = name

    def _classify_block(
        self,
        stmt: cst.If,
        local: Set[str],
        earlier: Set[str],
        later_assigned: Set[str],
        later_mutated: Set[str],
    ) -> None:
        """Record what an ``if`` moved to setup_context reads; raise :class:`Refused` where
        setup_context could not compute it again (conditions on computed values included)."""
        tests: Set[str] = set()
        node: Union[cst.If, cst.Else, None] = stmt
        while isinstance(node, cst.If):
            tests |= loaded_names(node.test)
            node = node.orelse
        for name in sorted(loaded_names(stmt) - local - {self.ctx}):
            kind = self._classify(name, earlier, later_assigned)
            if name in tests and (kind == "intermediate" or name in later_mutated):
                raise Refused(
                    f"forward uses ctx under a condition on {name}, a value forward computes "
                    "(a conditional save that depends on data); test an input or save "
                    "unconditionally to let it through",
                    stmt,
                )
            if kind == "intermediate" and (name in later_assigned or name in later_mutated):
                raise Refused(
                    f"forward saves {name} under a condition and changes it later; save a "
                    "copy (or save before the change) to let it through",
                    stmt,
                )
            self._record(name, kind)

    def _place_split(
        self, index: int, stmt: cst.If, forward_if: cst.If, moved: List[cst.BaseStatement]
    ) -> List[cst.BaseStatement]:
        """Classify what the ctx statements of a split ``if`` read; forward's statements for it
        (names only some branches assign start as None, so that forward can return them)."""
        later_assigned, later_mutated = self._later(index)
        earlier = self._earlier_assigned(index)
        inside = bindings(forward_if)[0]
        for test in if_tests(stmt):
            for name in sorted(loaded_names(test) - {self.ctx}):
                kind = self._classify(name, earlier, later_assigned)
                if kind == "intermediate" or name in later_mutated or name in inside:
                    raise Refused(
                        f"forward uses ctx under a condition on {name}, a value forward "
                        "computes (a conditional save that depends on data); test an input or "
                        "save unconditionally to let it through",
                        stmt,
                    )
                self._record(name, kind)
        self._check_branch_order(stmt)
        start_as_none = []
        for ctx_stmt in moved:
            if draws_random(ctx_stmt):
                raise Refused("forward saves a random value under a condition", stmt)
            for name in sorted(loaded_names(ctx_stmt) - {self.ctx}):
                kind = self._classify(name, earlier | inside, later_assigned)
                if kind == "intermediate" and name in later_assigned:
                    raise Refused(
                        f"forward saves {name} under a condition and changes it later; save a "
                        "copy (or save before the change) to let it through",
                        stmt,
                    )
                if kind == "intermediate" and name not in earlier and name not in start_as_none:
                    start_as_none.append(name)
                self._record(name, kind)
        first = [statement(f"{name} = None\n") for name in start_as_none]
        if first:
            first[0] = first[0].with_changes(leading_lines=forward_if.leading_lines)
            forward_if = forward_if.with_changes(leading_lines=())
        return [*first, forward_if]

    def _place_with(
        self,
        index: int,
        stmt: cst.BaseStatement,
        forward_with: cst.With,
        moved: List[cst.BaseStatement],
    ) -> List[cst.BaseStatement]:
        """Classify what the ctx calls of a split ``with`` read (see NOTE: [neutral with blocks]);
        forward's statement for it."""
        assert isinstance(stmt, cst.With) and isinstance(stmt.body, cst.IndentedBlock)
        later_assigned, _ = self._later(index)
        earlier = self._earlier_assigned(index) | bindings(forward_with)[0]
        self._check_order(list(stmt.body.body), stmt, "inside a with block", "block")
        for ctx_stmt in moved:
            assert isinstance(ctx_stmt, cst.SimpleStatementLine)
            small = ctx_stmt.body[0]
            if not all(is_plain(expr) for expr in value_expressions(small)):
                raise Refused(
                    "forward passes a computed value to a ctx call inside a with block; assign "
                    "it to a name in the block and pass the name to let it through",
                    ctx_stmt,
                )
            for name in sorted(loaded_names(ctx_stmt) - {self.ctx}):
                kind = self._classify(name, earlier, later_assigned)
                if kind == "intermediate" and name in later_assigned:
                    raise Refused(
                        f"forward saves {name} inside a with block and assigns it again after "
                        "the block; save a copy (or save after the change) to let it through",
                        stmt,
                    )
                self._record(name, kind)
        return [forward_with]

    def _check_branch_order(self, stmt: cst.If) -> None:
        """Refuse a ctx statement whose values its branch assigns again after it."""
        node: Union[cst.If, cst.Else, None] = stmt
        while node is not None:
            body = list(getattr(node.body, "body", ()))
            self._check_order(body, stmt, "under a condition", "branch")
            node = node.orelse if isinstance(node, cst.If) else None

    def _check_order(
        self, body: List[cst.BaseStatement], stmt: cst.BaseStatement, where: str, block: str
    ) -> None:
        """Refuse a ctx statement of ``body`` whose values ``body`` assigns again after it."""
        for position, inner in enumerate(body):
            if not is_ctx_statement(inner, self.ctx):
                continue
            after: Set[str] = set()
            for later in body[position + 1 :]:
                after |= bindings(later)[0]
            changed = (loaded_names(inner) - {self.ctx}) & after
            if changed:
                raise Refused(
                    f"forward saves {min(changed)} {where} and assigns it again in the same "
                    f"{block}; save after the last assignment to let it through",
                    stmt,
                )

    def _snapshot_base(self, small: cst.BaseSmallStatement, position: int) -> str:
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            target = small.targets[0].target if isinstance(small, cst.Assign) else small.target
            if isinstance(target, cst.Attribute):
                return target.attr.value
        return f"saved_{position}"

    def _classify(self, name: str, earlier: Set[str], later: Set[str]) -> str:
        if name in self.param_names and name not in earlier:
            return "input"
        if name in earlier or name in later:
            return "intermediate"
        return "global"

    def _record(self, name: str, kind: str) -> None:
        if kind == "input":
            self.values.inputs.add(name)
        elif kind == "intermediate":
            self.values.add_intermediate(name)

    def _outputs(self, body: List[cst.BaseStatement]) -> Tuple[List[Optional[str]], Optional[int]]:
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
            count = 1 if isinstance(value, cst.Name) or self.grads == 1 else None
            if count is None:
                names = []
        for name in names:
            if name is not None and name in self.values.intermediates:
                self.values.intermediates.remove(name)
                self.values.outputs.add(name)
        return names, count


def _replace_values(
    small: cst.BaseSmallStatement, replacements: Dict[int, cst.BaseExpression]
) -> cst.BaseSmallStatement:
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        args = [
            arg.with_changes(value=replacements.get(i, arg.value))
            for i, arg in enumerate(small.value.args)
        ]
        return small.with_changes(value=small.value.with_changes(args=args))
    assert isinstance(small, (cst.Assign, cst.AnnAssign))
    return small.with_changes(value=replacements[0])
