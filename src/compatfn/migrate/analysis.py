"""Analysis: split one legacy ``forward(ctx, ...)`` into its ctx-free part and the statements
setup_context runs, classifying every value those statements read (input, output, intermediate)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from .syntax import (
    Refused,
    bindings,
    dotted,
    fresh_name,
    loaded_names,
    positional_params,
    source_of,
    walk,
)

CTX_METHODS = {
    "save_for_backward",
    "save_for_forward",
    "mark_dirty",
    "mark_non_differentiable",
    "set_materialize_grads",
}
#: Calls that draw random numbers, matched anywhere in the called name (``np.random.choice``,
#: ``torch.randperm``, ``rng.integers``, ``dist.sample``): their values stay in forward.
RANDOM_CALL = re.compile(
    r"rand|bernoulli|multinomial|normal|uniform|dropout|rng|seed|exponential|geometric|cauchy|"
    r"poisson|choice|permut|shuffle|sample|generator|gumbel|noise",
    re.IGNORECASE,
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


def _is_ctx_call(node: cst.BaseSmallStatement, ctx: str) -> bool:
    return (
        isinstance(node, cst.Expr)
        and isinstance(node.value, cst.Call)
        and isinstance(node.value.func, cst.Attribute)
        and isinstance(node.value.func.value, cst.Name)
        and node.value.func.value.value == ctx
        and node.value.func.attr.value in CTX_METHODS
    )


def _is_ctx_attribute(target: cst.BaseExpression, ctx: str) -> bool:
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(_is_ctx_attribute(e.value, ctx) for e in target.elements)
    return (
        isinstance(target, cst.Attribute)
        and isinstance(target.value, cst.Name)
        and target.value.value == ctx
    )


def _is_ctx_small(node: cst.BaseSmallStatement, ctx: str) -> bool:
    if _is_ctx_call(node, ctx):
        return True
    if isinstance(node, cst.Assign):
        return all(_is_ctx_attribute(t.target, ctx) for t in node.targets)
    return isinstance(node, cst.AnnAssign) and _is_ctx_attribute(node.target, ctx)


def is_ctx_statement(stmt: cst.BaseStatement, ctx: str) -> bool:
    """A ctx call or ctx attribute assignment, or an ``if`` made only of them."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return len(stmt.body) == 1 and _is_ctx_small(stmt.body[0], ctx)
    if isinstance(stmt, cst.If):
        orelse = stmt.orelse
        if isinstance(orelse, cst.If) and not is_ctx_statement(orelse, ctx):
            return False
        blocks = [stmt.body, orelse.body] if isinstance(orelse, cst.Else) else [stmt.body]
        return all(
            isinstance(b, cst.IndentedBlock) and all(is_ctx_statement(s, ctx) for s in b.body)
            for b in blocks
        )
    return False


def _ctx_misuse(stmt: cst.CSTNode, ctx: str) -> Optional[str]:
    """Why a statement that is not a movable ctx statement uses ctx, or None if it does not."""
    parents: List[cst.CSTNode] = []

    def visit(node: cst.CSTNode) -> Optional[str]:
        if isinstance(node, cst.Name) and node.value == ctx:
            return _describe_ctx_use(node, parents)
        parents.append(node)
        try:
            for child in node.children:
                found = visit(child)
                if found:
                    return found
        finally:
            parents.pop()
        return None

    return visit(stmt)


def _describe_ctx_use(name: cst.Name, parents: List[cst.CSTNode]) -> str:
    parent = parents[-1] if parents else None
    if isinstance(parent, cst.Arg) and len(parents) > 1 and isinstance(parents[-2], cst.Call):
        callee = dotted(parents[-2].func) or source_of(parents[-2].func)
        return f"forward passes ctx to {callee}(); move what it does with ctx into forward"
    kinds = [
        ((cst.For, cst.While), "forward uses ctx inside a loop"),
        ((cst.FunctionDef, cst.Lambda), "forward uses ctx inside a nested function"),
        ((cst.With, cst.Try), "forward uses ctx inside a with/try block"),
        (
            (cst.If,),
            "forward uses ctx inside an if block that also computes values "
            "(a conditional save that depends on data)",
        ),
    ]
    for types, reason in kinds:
        if any(isinstance(node, types) for node in parents):
            return reason
    if isinstance(parent, cst.Attribute):
        return f"forward reads ctx.{parent.attr.value} back"
    return "forward uses ctx in a way migrate cannot move to setup_context"


def _returns(body: Sequence[cst.BaseStatement]) -> List[cst.Return]:
    found = []
    for stmt in body:
        found += [n for n in walk(stmt) if isinstance(n, cst.Return)]
    return found


def body_statements(fn: cst.FunctionDef) -> List[cst.BaseStatement]:
    if not isinstance(fn.body, cst.IndentedBlock):
        raise Refused(f"{fn.name.value} is written on one line", fn)
    return list(fn.body.body)


def _value_expressions(small: cst.BaseSmallStatement) -> List[cst.BaseExpression]:
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return [arg.value for arg in small.value.args]
    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
        return [small.value]
    return []


def _draws_random(expr: cst.CSTNode) -> bool:
    for node in walk(expr, into_scopes=True):
        if isinstance(node, cst.Call):
            name = dotted(node.func) or source_of(node.func)
            if RANDOM_CALL.search(name):
                return True
    return False


class ForwardAnalysis:
    """Split one legacy forward; raise :class:`Refused` when it cannot be done safely."""

    def __init__(self, fn: cst.FunctionDef, kind: str, grads: Optional[int]) -> None:
        self.fn = fn
        params = positional_params(fn, "forward")
        skip = 1 if kind == "class" else 0
        if len(params) <= skip:
            raise Refused("forward takes no ctx parameter", fn)
        self.ctx = params[skip].name.value
        self.cls = params[0].name.value if skip else None
        self.params = params[skip + 1 :]
        self.param_names = [p.name.value for p in self.params]
        self.grads = grads
        self.body = body_statements(fn)
        self.values = Values()
        self.taken = {self.ctx, *self.param_names}
        for stmt in self.body:
            self.taken |= bindings(stmt)[0] | loaded_names(stmt)

    def split(self) -> Split:
        body, ctx_statements = self._partition()
        output_names, count = self._outputs(body)
        return Split(self.params, body, ctx_statements, self.values, output_names, count, self.ctx)

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
            misuse = _ctx_misuse(stmt, self.ctx)
            if misuse:
                raise Refused(misuse, stmt)
            if self.cls is not None and self.cls in loaded_names(stmt):
                pass  # handled by the caller (cls helper)
            keep.append(stmt)
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
            for name in loaded_names(stmt) - {self.ctx}:
                kind = self._classify(name, earlier, later_assigned)
                if kind == "intermediate" or name in later_mutated:
                    raise Refused(
                        f"forward uses ctx under a condition on {name}, a value forward computes "
                        "(a conditional save that depends on data)",
                        stmt,
                    )
                self._record(name, kind)
            return [], stmt
        assert isinstance(stmt, cst.SimpleStatementLine)
        small = stmt.body[0]
        snapshots: List[cst.BaseStatement] = []
        replacements: Dict[int, cst.BaseExpression] = {}
        for position, expr in enumerate(_value_expressions(small)):
            names = loaded_names(expr) - {self.ctx}
            kinds = {name: self._classify(name, earlier, later_assigned) for name in names}
            bare = isinstance(expr, cst.Name) or (
                isinstance(expr, cst.StarredElement) and isinstance(expr.value, cst.Name)
            )
            recompute_unsafe = (
                _draws_random(expr)
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


