"""Placement: where each statement of a legacy forward that uses ctx goes (forward keeps a
snapshot, setup_context runs the statement), classifying every value it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from ._branches import IfSplit, flag_branches, if_tests, is_plain, plain_test
from ._ctx_uses import ReadBacks, draws_random, is_literal, reads_attribute, value_expressions
from ._effects import (
    Later,
    handed_to_calls,
    makes_unknown_calls,
    reevaluation_problem,
)
from ._lift import lift_if
from ._order import check_branch_order, check_order, check_recomputable, starred_argument
from ._syntax import (
    Refused,
    alias_groups,
    bindings,
    free_names,
    fresh_name,
    loaded_names,
    source_of,
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
class Placement:
    """Place the ctx statements of one forward's ``body``, recording what they read in
    ``values``; raise :class:`Refused` where setup_context could not compute it again."""

    body: List[cst.BaseStatement]
    ctx: str
    cls: Optional[str]  # the cls parameter of a classmethod forward
    param_names: List[str]
    readbacks: ReadBacks
    values: Values
    taken: Set[str]  # names in use; snapshot names are added to it
    imports: Dict[str, str] = field(default_factory=dict)  # the file's: name -> dotted path
    other_state: str = ""  # what forward's decorators change (runs_in_other_state)

    def _later(self, index: int) -> Tuple[Set[str], Set[str]]:
        assigned: Set[str] = set()
        mutated: Set[str] = set()
        for stmt in self.body[index + 1 :]:
            a, m = bindings(stmt)
            assigned |= a
            mutated |= m
        return assigned, mutated

    def _changed_later(self, index: int) -> Set[str]:
        """Names whose value may change in place after ``body[index]``, through any name that
        may share its memory (see NOTE: [in-place changes])."""
        direct = self._later(index)[1]
        groups = alias_groups(self.body)
        return direct.union(*(groups.get(name, set()) for name in direct))

    def _later_effects(self, index: int, block: Sequence[cst.CSTNode] = ()) -> Later:
        """What the calls after ``body[index]`` may change (see NOTE: [calls forward makes]);
        with the calls of ``block`` (what forward keeps of a split ``if`` or ``with``, whose
        ctx statements run in setup_context after all of it)."""
        later = [*block, *self.body[index + 1 :]]
        handed: Set[str] = set().union(*(handed_to_calls(s, self.imports) for s in later))
        groups = alias_groups(self.body)
        local = {self.ctx, *self.param_names, *([self.cls] if self.cls else [])}
        for stmt in self.body:
            local |= bindings(stmt)[0]
        return Later(
            handed=handed.union(*(groups.get(name, set()) for name in handed)),
            unknown_calls=any(makes_unknown_calls(s, self.imports) for s in later),
            imports=self.imports,
            local=local,
            other_state=self.other_state,
        )

    def _earlier_assigned(self, index: int) -> Set[str]:
        assigned: Set[str] = set()
        for stmt in self.body[:index]:
            assigned |= bindings(stmt)[0]
        return assigned

    def place(
        self, index: int, stmt: cst.BaseStatement
    ) -> Tuple[List[cst.BaseStatement], cst.BaseStatement]:
        """Classify the names a ctx statement reads; return the snapshot statements forward must
        keep in its place and the statement setup_context runs."""
        later_assigned = self._later(index)[0]
        later_changed = self._changed_later(index)
        effects = self._later_effects(index)
        earlier = self._earlier_assigned(index)
        if self.cls is not None and self.cls in loaded_names(stmt):
            raise Refused(f"a ctx value is computed with {self.cls}", stmt)
        if isinstance(stmt, cst.If) and draws_random(stmt):
            return self._lift(index, stmt)
        if isinstance(stmt, cst.If):
            check_recomputable([stmt], later_changed, stmt, "under a condition", effects)
            self._classify_block(index, stmt, earlier, later_assigned)
            return [], stmt
        assert isinstance(stmt, cst.SimpleStatementLine)
        small = stmt.body[0]
        snapshots: List[cst.BaseStatement] = []
        replacements: Dict[int, cst.BaseExpression] = {}
        for position, expr in enumerate(value_expressions(small)):
            ordered = [name for name in free_names(expr) if name != self.ctx]
            names = set(ordered)
            kinds = {name: self._classify(name, earlier, later_assigned) for name in ordered}
            starred = starred_argument(small, position)
            bare = isinstance(expr, cst.Name)
            recompute_unsafe = (
                self._read_back(index, small, expr, later_assigned)
                or draws_random(expr)
                or any(
                    kinds[n] == "intermediate" and n in later_assigned for n in names
                )  # reassigned later: the value at this point is gone
                or (not bare and bool(names & later_changed))
                or reevaluation_problem(expr, effects) is not None
            )
            if starred and bare and names & (later_changed | effects.handed):
                raise Refused(
                    f"forward passes *{source_of(expr)} to a ctx call and changes "
                    f"{source_of(expr)} in place later; pass *tuple({source_of(expr)}) to let it "
                    "through",
                    stmt,
                )
            if recompute_unsafe:
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

    def _lift(self, index: int, stmt: cst.If) -> Tuple[List[cst.BaseStatement], cst.If]:
        """(forward's statements, setup_context's ``if``) for an ``if`` of ctx statements that
        reads the random state (see NOTE: [random state under a condition])."""
        later_assigned, later_mutated = self._later(index)
        earlier = self._earlier_assigned(index)
        changed = earlier | later_assigned | self._changed_later(index)

        effects = self._later_effects(index)

        def reevaluable(test: cst.BaseExpression) -> bool:
            names = loaded_names(test)
            return (
                plain_test(test)
                and all(n in self.param_names and n not in changed for n in names)
                and reevaluation_problem(test, effects) is None
            )

        lift = lift_if(stmt, self.ctx, self.taken, reevaluable)
        for name in sorted(lift.test_names):
            self._record(name, "input")
        for name in sorted(lift.call_names - {self.ctx}):
            kind = self._classify(name, earlier, later_assigned)
            if kind == "intermediate" and name in later_assigned | later_mutated:
                raise Refused(
                    f"forward saves {name} under a condition and changes it later; save a "
                    "copy (or save before the change) to let it through",
                    stmt,
                )
            self._record(name, kind)
        for name in lift.intermediates:
            self.values.add_intermediate(name)
        assert lift.setup is not None
        return lift.forward, lift.setup

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
        if isinstance(expr, cst.Name) and expr.value not in later and not is_literal(expr):
            self.readbacks.aliases[target.attr.value] = expr.value
            return False
        if is_literal(expr):  # read back as the literal; setup_context sets it again
            self.readbacks.aliases[target.attr.value] = expr
            return False
        return True

    def _alias(self, small: cst.BaseSmallStatement, name: str) -> None:
        target = small.targets[0].target if isinstance(small, cst.Assign) else None
        if isinstance(target, cst.Attribute) and reads_attribute(
            self.body, self.ctx, target.attr.value
        ):
            self.readbacks.aliases[target.attr.value] = name

    def _classify_block(
        self, index: int, stmt: cst.If, earlier: Set[str], later_assigned: Set[str]
    ) -> None:
        """Record what an ``if`` moved to setup_context reads; raise :class:`Refused` where
        setup_context could not compute it again (conditions on computed values are flagged
        instead: see NOTE: [branch flags])."""
        _, later_mutated = self._later(index)
        for test in if_tests(stmt):
            untestable = self._untestable(test, index, set())
            if untestable is not None:  # the caller flags such an if: never reached
                raise Refused(f"forward uses ctx under a condition on {untestable}", stmt)
        for name in sorted(set(free_names(stmt)) - {self.ctx}):
            kind = self._classify(name, earlier, later_assigned)
            if kind == "intermediate" and (name in later_assigned or name in later_mutated):
                raise Refused(
                    f"forward saves {name} under a condition and changes it later; save a "
                    "copy (or save before the change) to let it through",
                    stmt,
                )
            self._record(name, kind)

    def _untestable(
        self, test: cst.BaseExpression, index: int, inside: Set[str], calls: bool = True
    ) -> Optional[str]:
        """A name ``test`` reads that setup_context could not test again as forward did: one
        changed in place later, or assigned or changed inside the ``if`` (``inside``); or a value
        forward computes, unless ``test`` only names it (``if needs_grad:``: handed over); with
        ``calls``, what forward's calls may change or a call made again may answer otherwise
        (see NOTE: [calls forward makes])."""
        later_assigned, later_mutated = self._later(index)
        earlier = self._earlier_assigned(index)
        plain = plain_test(test)
        for name in sorted(loaded_names(test) - {self.ctx}):
            kind = self._classify(name, earlier, later_assigned)
            if name in later_mutated or name in inside:
                return name
            if kind == "intermediate" and (not plain or name in later_assigned):
                return name
        if calls and reevaluation_problem(test, self._later_effects(index)) is not None:
            return min(loaded_names(test) - {self.ctx}, default=source_of(test))
        return None

    def needs_flag(self, index: int, stmt: cst.If, inside: Optional[Set[str]] = None) -> bool:
        """Whether setup_context must learn from forward which branch of ``stmt`` ran (see
        NOTE: [branch flags]; an ``if`` that reads the random state tests its conditions as
        NOTE: [random state under a condition] says)."""
        calls = not draws_random(stmt)
        return any(self._untestable(t, index, inside or set(), calls) for t in if_tests(stmt))

    def place_split(
        self, index: int, stmt: cst.If, split: IfSplit
    ) -> Tuple[List[cst.BaseStatement], cst.If]:
        """Classify what the ctx statements of a split ``if`` read; forward's statements for it
        and setup_context's ``if`` (testing a branch flag where a condition reads a value forward
        computes: see NOTE: [branch flags])."""
        if any(draws_random(test) for test in [*if_tests(stmt), *split.nested_tests]):
            raise Refused(
                "forward draws a random number in the condition of an if block that uses ctx "
                "and computes values; draw it into a name before the if to let it through",
                stmt,
            )
        if any(draws_random(s) for s in split.moved):
            raise Refused(
                "forward reads the random state (or draws) for ctx inside an if block that also "
                "computes values; compute those values before the if to let it through",
                stmt,
            )
        later_assigned = self._later(index)[0]
        earlier = self._earlier_assigned(index)
        inside, changed_inside = bindings(split.forward)
        groups = alias_groups(self.body)
        touched = inside.union(changed_inside, *(groups.get(n, set()) for n in changed_inside))
        flagged = self.needs_flag(index, stmt, touched)
        tested = split.nested_tests if flagged else [*if_tests(stmt), *split.nested_tests]
        for test in tested:
            name = self._untestable(test, index, touched)
            if name is not None:
                raise Refused(
                    f"forward uses ctx under a nested condition on {name}, a value forward "
                    "computes or changes; compute the condition into a name before the outer if "
                    "and test that name to let it through",
                    stmt,
                )
            for name in sorted(loaded_names(test) - {self.ctx}):
                self._record(name, self._classify(name, earlier, later_assigned))
        check_branch_order(self.body, self.ctx, stmt)
        check_recomputable(
            split.moved,
            self._changed_later(index),
            stmt,
            "under a condition",
            self._later_effects(index, [split.forward]),
        )
        for ctx_stmt in split.moved:
            for name in sorted(set(free_names(ctx_stmt)) - {self.ctx}):
                kind = self._classify(name, earlier | inside, later_assigned)
                if kind == "intermediate" and name in later_assigned:
                    raise Refused(
                        f"forward saves {name} under a condition and changes it later; save a "
                        "copy (or save before the change) to let it through",
                        stmt,
                    )
                self._record(name, kind)  # one only some branches assign: see
        if not flagged:  # NOTE: [intermediates that may be unbound]
            return [split.forward], split.setup
        flag = fresh_name("branch_taken", self.taken)
        first, forward_if, setup_if = flag_branches(split, flag)
        self.values.add_intermediate(flag)
        first = first.with_changes(leading_lines=forward_if.leading_lines)
        return [first, forward_if.with_changes(leading_lines=())], setup_if

    def place_with(
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
        check_order(self.body, self.ctx, list(stmt.body.body), stmt, "inside a with block", "block")
        check_recomputable(
            moved,
            self._changed_later(index),
            stmt,
            "inside a with block",
            self._later_effects(index, [forward_with]),
        )
        for ctx_stmt in moved:
            assert isinstance(ctx_stmt, cst.SimpleStatementLine)
            small = ctx_stmt.body[0]
            if not all(is_plain(expr) for expr in value_expressions(small)):
                raise Refused(
                    "forward passes a computed value to a ctx call inside a with block; assign "
                    "it to a name in the block and pass the name to let it through",
                    ctx_stmt,
                )
            for name in sorted(set(free_names(ctx_stmt)) - {self.ctx}):
                kind = self._classify(name, earlier, later_assigned)
                if kind == "intermediate" and name in later_assigned:
                    raise Refused(
                        f"forward saves {name} inside a with block and assigns it again after "
                        "the block; save a copy (or save after the change) to let it through",
                        stmt,
                    )
                self._record(name, kind)
        return [forward_with]

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
