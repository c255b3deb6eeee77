"""``python -m compatfn migrate``: rewrite legacy ``forward(ctx, ...)`` Functions to the
setup_context style, on LibCST (``pip install 'compatfn[migrate]'``).

For every class deriving from ``torch.autograd.Function`` (any import spelling or alias, or from
such a class in the same file) whose forward takes ctx, the codemod:

* splits forward into a ctx-free ``forward`` and ``setup_context(ctx, inputs, output)``: the ctx
  statements (``save_for_backward``, ``save_for_forward``, ``mark_dirty``,
  ``mark_non_differentiable``, ``set_materialize_grads``, ``ctx.attr = ...``, and ``if`` blocks
  made only of them) move there, in their order;
* values that ctx keeps and forward computed (neither an input nor an output) become
  intermediates: forward returns ``(*outputs, *intermediates)`` and the class gets
  ``@compatfn.function(intermediates=k)``. A value that cannot be recomputed in setup_context
  (its names are reassigned or modified in place later, or it draws random numbers) is computed
  in forward at the same place, under a new name, and handed over as an intermediate;
* turns ``@classmethod`` methods that do not use ``cls`` into ``@staticmethod``; a forward or
  backward that uses ``cls`` becomes a ``@classmethod`` helper (``_forward_impl`` /
  ``_backward_impl``) called by a static method in the class and in each subclass in the same
  file; ``return super().forward(ctx, ...)`` chains to such a class become calls of the helper;
* replaces ``torch.cuda.amp.custom_fwd/custom_bwd``, ``torch.amp.custom_fwd/custom_bwd`` and
  module-level switches between them (``if ...: custom_fwd = functools.partial(torch.amp.custom_fwd,
  device_type="cuda") else: custom_fwd = torch.cuda.amp.custom_fwd``) by
  ``compatfn.custom_fwd/custom_bwd(device_type=...)`` on the methods (the switch itself is left);
* adds ``@compatfn.function`` and ``import compatfn`` (``decorator="mylib._compat:function"``:
  ``@_compat.function`` and ``from mylib import _compat``).

A class it cannot prove equivalent is left untouched and reported as a :class:`Refusal`.

Example::

    result = migrate_source(open("ops.py").read(), path="ops.py")
    print(result.new_source)
    for refusal in result.refusals:
        print(refusal)  # ops.py:12: MyFn: forward passes ctx to helper _save
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

FUNCTION_BASES = {"torch.autograd.Function", "torch.autograd.function.Function"}
CTX_METHODS = {
    "save_for_backward",
    "save_for_forward",
    "mark_dirty",
    "mark_non_differentiable",
    "set_materialize_grads",
}
CUDA_AMP = {"torch.cuda.amp", "torch.cuda.amp.autocast_mode"}
TORCH_AMP = {"torch.amp", "torch.amp.autocast_mode"}
PARTIAL = {"functools.partial"}
RANDOM_CALL = re.compile(
    r"rand|bernoulli|multinomial|normal|uniform|dropout|rng|seed|exponential|geometric|cauchy|poisson"
)
PURE_BUILTINS = {"dict", "tuple", "list", "int", "float", "bool", "str", "slice"}
AUTOGRAD_METHODS = ("forward", "backward", "jvp", "vjp", "vmap")
DEFAULT_DECORATOR = "compatfn:function"
BLANK = cst.EmptyLine(indent=False)


class Refused(Exception):
    """A class the codemod leaves untouched; ``node`` locates it in the source."""

    def __init__(self, reason: str, node: Optional[cst.CSTNode] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.node = node


@dataclass(frozen=True)
class Refusal:
    """One refused class: printed as ``path:line: Class: reason``."""

    path: str
    line: int
    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}: {self.reason}"


@dataclass
class Result:
    """What :func:`migrate_source` did to one file."""

    path: str
    old_source: str
    new_source: str
    migrated: List[str] = field(default_factory=list)
    refusals: List[Refusal] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.new_source != self.old_source

    def diff(self) -> str:
        """A unified diff from the old to the new source (empty when nothing changes)."""
        return "".join(
            difflib.unified_diff(
                self.old_source.splitlines(keepends=True),
                self.new_source.splitlines(keepends=True),
                fromfile=f"a/{self.path}",
                tofile=f"b/{self.path}",
            )
        )


# --- small CST helpers --------------------------------------------------------------------------


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _dotted(node: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def _walk(node: cst.CSTNode, into_scopes: bool = False) -> Iterator[cst.CSTNode]:
    """``node`` and its descendants; nested functions, lambdas and classes only if asked."""
    yield node
    for child in node.children:
        if not into_scopes and isinstance(child, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        yield from _walk(child, into_scopes)


def _loaded_names(node: cst.CSTNode) -> Set[str]:
    """Names an expression or statement reads (attribute names and keywords excluded)."""
    skip: Set[int] = set()
    names = set()
    for sub in _walk(node, into_scopes=True):
        if isinstance(sub, cst.Attribute):
            skip.add(id(sub.attr))
        elif isinstance(sub, cst.Arg) and sub.keyword is not None:
            skip.add(id(sub.keyword))
        elif isinstance(sub, cst.Name) and id(sub) not in skip:
            names.add(sub.value)
    return names


def _target_names(target: cst.BaseExpression, out: Set[str], mutated: Set[str]) -> None:
    if isinstance(target, cst.Name):
        out.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _target_names(element.value, out, mutated)
    elif isinstance(target, cst.StarredElement):
        _target_names(target.value, out, mutated)
    elif isinstance(target, (cst.Subscript, cst.Attribute)) and isinstance(target.value, cst.Name):
        mutated.add(target.value.value)


def _bindings(node: cst.CSTNode) -> Tuple[Set[str], Set[str]]:
    """(names assigned, names modified in place) anywhere in ``node`` (not in nested scopes)."""
    assigned: Set[str] = set()
    mutated: Set[str] = set()
    for sub in _walk(node):
        if isinstance(sub, cst.AssignTarget):
            _target_names(sub.target, assigned, mutated)
        elif isinstance(sub, (cst.AnnAssign, cst.AugAssign)):
            _target_names(sub.target, assigned, mutated)
            if isinstance(sub, cst.AugAssign) and isinstance(sub.target, cst.Name):
                mutated.add(sub.target.value)
        elif isinstance(sub, (cst.For, cst.CompFor)):
            _target_names(sub.target, assigned, mutated)
        elif isinstance(sub, cst.AsName):
            _target_names(sub.name, assigned, mutated)  # type: ignore[arg-type]
        elif isinstance(sub, cst.NamedExpr):
            _target_names(sub.target, assigned, mutated)
        elif isinstance(sub, (cst.FunctionDef, cst.ClassDef)) and sub is not node:
            assigned.add(sub.name.value)
        elif isinstance(sub, (cst.Import, cst.ImportFrom)) and not isinstance(
            sub.names, cst.ImportStar
        ):
            for alias in sub.names:
                name = alias.asname.name if alias.asname else alias.name
                assigned.add((_dotted(name) or "").split(".")[0])  # type: ignore[arg-type]
        elif isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute):
            method = sub.func.attr.value
            receiver = sub.func.value
            if (
                method.endswith("_")
                and not method.endswith("__")
                and isinstance(receiver, cst.Name)
            ):
                mutated.add(receiver.value)
    return assigned, mutated


def _decorator_name(decorator: cst.Decorator) -> Optional[str]:
    expr = decorator.decorator
    return _dotted(expr.func if isinstance(expr, cst.Call) else expr)


def _method_kind(fn: cst.FunctionDef) -> str:
    names = {_decorator_name(d) for d in fn.decorators}
    if "staticmethod" in names:
        return "static"
    if "classmethod" in names:
        return "class"
    return "instance"


def _positional_params(fn: cst.FunctionDef, what: str) -> List[cst.Param]:
    params = fn.params
    if params.star_arg is not cst.MaybeSentinel.DEFAULT and params.star_arg is not None:
        raise Refused(f"{what} takes *args or keyword-only parameters", fn)
    if params.kwonly_params or params.star_kwarg is not None:
        raise Refused(f"{what} takes keyword-only or **kwargs parameters", fn)
    return [*params.posonly_params, *params.params]


def _fresh(base: str, taken: Set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def _tuple_target(names: Sequence[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else ", ".join(names)


# --- module-level resolution: imports, Function classes, AMP switches ----------------------------


class _Names:
    """What module-level names stand for: imports (``F`` -> ``torch.autograd.Function``) and the
    values assigned to them (for AMP decorator switches)."""

    def __init__(self, module: cst.Module) -> None:
        self.imports: Dict[str, str] = {}
        self.values: Dict[str, List[cst.BaseExpression]] = {}
        for stmt in module.body:
            self._scan(stmt)

    def _scan(self, node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = _dotted(alias.name) or ""
                if alias.asname is not None:
                    self.imports[_dotted(alias.asname.name) or ""] = full  # type: ignore[arg-type]
                else:
                    self.imports[full.split(".")[0]] = full.split(".")[0]
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            module = _dotted(node.module) if node.module is not None else None
            if module is not None and not node.relative:
                for alias in node.names:
                    name = alias.name.value if isinstance(alias.name, cst.Name) else ""
                    local = (
                        _dotted(alias.asname.name)  # type: ignore[arg-type]
                        if alias.asname is not None
                        else name
                    )
                    self.imports[local or name] = f"{module}.{name}"
                    self.values.setdefault(local or name, []).append(
                        cst.parse_expression(f"{module}.{name}")
                    )
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self.values.setdefault(target.target.value, []).append(node.value)
        for child in node.children:
            self._scan(child)

    def qualify(self, expr: cst.BaseExpression) -> Optional[str]:
        """The dotted name ``expr`` refers to, imports resolved: ``ag.Function`` ->
        ``torch.autograd.Function``."""
        dotted = _dotted(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.imports:
            head = self.imports[head]
        return f"{head}.{rest}" if rest else head


@dataclass
class _Amp:
    """A custom_fwd/custom_bwd decorator: which one, its device type and cast_inputs source."""

    which: str  # "custom_fwd" or "custom_bwd"
    device_type: str
    cast_inputs: Optional[str] = None


def _amp_from_reference(names: _Names, expr: cst.BaseExpression, depth: int = 0) -> Optional[_Amp]:
    """The AMP decorator an expression names (torch's own, a partial of it, or a switch)."""
    if isinstance(expr, cst.Call):
        head = names.qualify(expr.func)
        if head in PARTIAL and expr.args:
            inner = _amp_from_reference(names, expr.args[0].value, depth)
            return _with_call_args(inner, expr.args[1:]) if inner else None
        return None
    qualified = names.qualify(expr)
    if qualified is None:
        return None
    module, _, which = qualified.rpartition(".")
    if which in ("custom_fwd", "custom_bwd"):
        if module in CUDA_AMP:
            return _Amp(which, "cuda")
        if module in TORCH_AMP:
            return _Amp(which, "")
    if isinstance(expr, cst.Name) and depth < 3 and expr.value in names.values:
        found = [_amp_from_reference(names, v, depth + 1) for v in names.values[expr.value]]
        if found and all(found):
            devices = {amp.device_type for amp in found if amp and amp.device_type}
            first = found[0]
            assert first is not None
            if len(devices) <= 1 and len({amp.which for amp in found if amp}) == 1:
                casts = {amp.cast_inputs for amp in found if amp}
                cast = casts.pop() if len(casts) == 1 else None
                return _Amp(first.which, devices.pop() if devices else "", cast)
    return None


def _with_call_args(amp: Optional[_Amp], args: Sequence[cst.Arg]) -> Optional[_Amp]:
    if amp is None:
        return None
    device, cast = amp.device_type, amp.cast_inputs
    for arg in args:
        keyword = arg.keyword.value if arg.keyword else None
        if keyword == "device_type" and isinstance(arg.value, cst.SimpleString):
            device = arg.value.evaluated_value  # type: ignore[assignment]
        elif keyword == "cast_inputs":
            cast = _code(arg.value)
        else:
            return None
    return _Amp(amp.which, device, cast)


def _amp_decorator(names: _Names, decorator: cst.Decorator) -> Optional[_Amp]:
    expr = decorator.decorator
    if isinstance(expr, cst.Call):
        return _with_call_args(_amp_from_reference(names, expr.func), expr.args)
    return _amp_from_reference(names, expr)


# --- forward analysis -----------------------------------------------------------------------------


@dataclass
class _Value:
    """How setup_context gets one name: from ``inputs``, from ``output`` or from an intermediate."""

    inputs: Set[str] = field(default_factory=set)
    outputs: Set[str] = field(default_factory=set)
    intermediates: List[str] = field(default_factory=list)

    def add_intermediate(self, name: str) -> None:
        if name not in self.intermediates:
            self.intermediates.append(name)


@dataclass
class _Split:
    """forward split into its ctx-free part and what setup_context runs."""

    params: List[cst.Param]
    forward_body: List[cst.BaseStatement]
    ctx_statements: List[cst.BaseStatement]
    values: _Value
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


def _is_ctx_statement(stmt: cst.BaseStatement, ctx: str) -> bool:
    """A ctx call or ctx attribute assignment, or an ``if`` made only of them."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return len(stmt.body) == 1 and _is_ctx_small(stmt.body[0], ctx)
    if isinstance(stmt, cst.If):
        orelse = stmt.orelse
        if isinstance(orelse, cst.If) and not _is_ctx_statement(orelse, ctx):
            return False
        blocks = [stmt.body, orelse.body] if isinstance(orelse, cst.Else) else [stmt.body]
        return all(
            isinstance(b, cst.IndentedBlock) and all(_is_ctx_statement(s, ctx) for s in b.body)
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
        callee = _dotted(parents[-2].func) or _code(parents[-2].func)
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
        found += [n for n in _walk(stmt) if isinstance(n, cst.Return)]
    return found


def _body_statements(fn: cst.FunctionDef) -> List[cst.BaseStatement]:
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
    for node in _walk(expr, into_scopes=True):
        if isinstance(node, cst.Call):
            name = (_dotted(node.func) or "").rsplit(".", 1)[-1]
            if RANDOM_CALL.search(name):
                return True
    return False


class _ForwardAnalysis:
    """Split one legacy forward; raise :class:`Refused` when it cannot be done safely."""

    def __init__(self, fn: cst.FunctionDef, kind: str, grads: Optional[int]) -> None:
        self.fn = fn
        params = _positional_params(fn, "forward")
        skip = 1 if kind == "class" else 0
        if len(params) <= skip:
            raise Refused("forward takes no ctx parameter", fn)
        self.ctx = params[skip].name.value
        self.cls = params[0].name.value if skip else None
        self.params = params[skip + 1 :]
        self.param_names = [p.name.value for p in self.params]
        self.grads = grads
        self.body = _body_statements(fn)
        self.values = _Value()
        self.taken = {self.ctx, *self.param_names}
        for stmt in self.body:
            self.taken |= _bindings(stmt)[0] | _loaded_names(stmt)

    def split(self) -> _Split:
        body, ctx_statements = self._partition()
        output_names, count = self._outputs(body)
        return _Split(self.params, body, ctx_statements, self.values, output_names, count, self.ctx)

    def _partition(self) -> Tuple[List[cst.BaseStatement], List[cst.BaseStatement]]:
        keep: List[cst.BaseStatement] = []
        moved: List[cst.BaseStatement] = []
        returns = _returns(self.body)
        has_ctx = any(_is_ctx_statement(s, self.ctx) for s in self.body)
        if has_ctx and (len(returns) != 1 or not self._ends_with(returns[0])):
            raise Refused(
                "forward returns from more than one place (an early return skips ctx calls)",
                self.fn,
            )
        for index, stmt in enumerate(self.body):
            if _is_ctx_statement(stmt, self.ctx):
                snapshot, stmt = self._place(index, stmt)
                keep += snapshot
                moved.append(stmt)
                continue
            misuse = _ctx_misuse(stmt, self.ctx)
            if misuse:
                raise Refused(misuse, stmt)
            if self.cls is not None and self.cls in _loaded_names(stmt):
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
            a, m = _bindings(stmt)
            assigned |= a
            mutated |= m
        return assigned, mutated

    def _earlier_assigned(self, index: int) -> Set[str]:
        assigned: Set[str] = set()
        for stmt in self.body[:index]:
            assigned |= _bindings(stmt)[0]
        return assigned

    def _place(
        self, index: int, stmt: cst.BaseStatement
    ) -> Tuple[List[cst.BaseStatement], cst.BaseStatement]:
        """Classify the names a ctx statement reads; return the snapshot statements forward must
        keep in its place and the statement setup_context runs."""
        later_assigned, later_mutated = self._later(index)
        earlier = self._earlier_assigned(index)
        if self.cls is not None and self.cls in _loaded_names(stmt):
            raise Refused(f"a ctx value is computed with {self.cls}", stmt)
        if isinstance(stmt, cst.If):
            for name in _loaded_names(stmt) - {self.ctx}:
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
            names = _loaded_names(expr) - {self.ctx}
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
                name = _fresh(self._snapshot_base(small, position), self.taken)
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


# --- building the new methods ---------------------------------------------------------------------


def _strip_ctx_decorators(
    fn: cst.FunctionDef, names: _Names, api: str, what: str
) -> List[cst.Decorator]:
    """fn's decorators without staticmethod/classmethod, AMP decorators turned into compatfn's."""
    kept = []
    for decorator in fn.decorators:
        name = _decorator_name(decorator)
        if name in ("staticmethod", "classmethod"):
            continue
        amp = _amp_decorator(names, decorator)
        if amp is not None:
            kept.append(decorator.with_changes(decorator=_amp_expression(amp, api, fn)))
            continue
        qualified = names.qualify(decorator.decorator) or ""
        if qualified.endswith("once_differentiable") and what != "forward":
            kept.append(decorator)
            continue
        if what == "forward" or name is None:
            raise Refused(
                f"{fn.name.value} has a decorator migrate does not know: "
                f"@{_code(decorator.decorator)}",
                fn,
            )
        kept.append(decorator)
    return kept


def _amp_expression(amp: _Amp, api: str, fn: cst.FunctionDef) -> cst.BaseExpression:
    if not amp.device_type:
        raise Refused(f"@{amp.which} on {fn.name.value} names no device_type", fn)
    args = f'device_type="{amp.device_type}"'
    if amp.cast_inputs is not None:
        args += f", cast_inputs={amp.cast_inputs}"
    return cst.parse_expression(f"{api}.{amp.which}({args})")


def _with_kind(fn: cst.FunctionDef, kind: str, extra: Sequence[cst.Decorator]) -> cst.FunctionDef:
    head = cst.Decorator(cst.Name(kind))
    old = list(fn.decorators)
    leading = old[0].leading_lines if old else ()
    decorators = [head.with_changes(leading_lines=leading), *extra]
    return fn.with_changes(decorators=decorators)


def _drop_first_params(fn: cst.FunctionDef, count: int) -> cst.FunctionDef:
    params = fn.params
    positional = [*params.posonly_params, *params.params][count:]
    return fn.with_changes(params=params.with_changes(posonly_params=(), params=positional))


def _forward_return(split: _Split, body: List[cst.BaseStatement]) -> List[cst.BaseStatement]:
    """forward's body with the intermediates appended to its return value."""
    inter = split.values.intermediates
    if not inter:
        return body
    last = body[-1]
    assert isinstance(last, cst.SimpleStatementLine)
    ret = last.body[-1]
    assert isinstance(ret, cst.Return) and ret.value is not None
    extra = [cst.Element(cst.Name(n)) for n in inter]
    value = ret.value
    if isinstance(value, cst.Tuple):
        if len(value.elements) == 1:
            raise Refused("forward returns a one-element tuple and needs intermediates", last)
        elements = list(value.elements)
        elements[-1] = elements[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new_value: cst.BaseExpression = value.with_changes(elements=[*elements, *extra])
    elif split.output_count == 1:
        new_value = cst.Tuple([cst.Element(value), *extra], lpar=[], rpar=[])
    else:
        raise Refused(
            "forward returns an expression whose number of outputs migrate cannot read, and "
            "needs intermediates; return a tuple literal",
            last,
        )
    return [
        *body[:-1],
        last.with_changes(body=[*last.body[:-1], ret.with_changes(value=new_value)]),
    ]


def _setup_lines(
    split: _Split, taken: Set[str]
) -> Tuple[str, str, List[cst.BaseStatement], List[cst.BaseStatement]]:
    """(inputs name, output name, inputs unpacking, output unpacking) for setup_context."""
    inputs_name = _fresh("inputs", set(taken))
    output_name = _fresh("output", set(taken))
    unpack_inputs: List[cst.BaseStatement] = []
    if split.values.inputs:
        names = [
            n if n in split.values.inputs else "_" for n in (p.name.value for p in split.params)
        ]
        unpack_inputs.append(_stmt(f"{_tuple_target(names)} = {inputs_name}\n"))
    unpack_output: List[cst.BaseStatement] = []
    inter = split.values.intermediates
    wanted = split.values.outputs
    if inter or wanted:
        if inter and split.output_count is None:
            raise Refused("forward's number of outputs cannot be read")
        outs = [n if n in wanted else "_" for n in split.output_names] if (inter or wanted) else []
        if not inter and len(outs) == 1 and split.output_count == 1:
            unpack_output.append(_stmt(f"{outs[0]} = {output_name}\n"))
        else:
            target = _tuple_target([*outs, *inter])
            unpack_output.append(_stmt(f"{target} = {output_name}\n"))
    return inputs_name, output_name, unpack_inputs, unpack_output


def _setup_context(
    ctx: str,
    inputs_name: str,
    output_name: str,
    body: List[cst.BaseStatement],
) -> cst.FunctionDef:
    fn = _stmt(
        f"@staticmethod\ndef setup_context({ctx}, {inputs_name}, {output_name}):\n    pass\n"
    )
    assert isinstance(fn, cst.FunctionDef)
    fn = fn.with_changes(leading_lines=[BLANK])
    if not body:
        return fn
    return fn.with_changes(body=fn.body.with_changes(body=body))


def _tidy_first(statements: List[cst.BaseStatement]) -> List[cst.BaseStatement]:
    """The statements with blank lines dropped before the first (its comments are kept)."""
    if not statements:
        return statements
    first = statements[0]
    lines = [line for line in getattr(first, "leading_lines", ()) if line.comment is not None]
    return [first.with_changes(leading_lines=lines), *statements[1:]]


def _call_args(params: Sequence[cst.Param]) -> str:
    return ", ".join(p.name.value for p in params)


def _delegate(
    name: str, params: Sequence[cst.Param], target: str, decorators: Sequence[cst.Decorator]
) -> cst.FunctionDef:
    """``@staticmethod def name(<params>): return <target>(<params>)``."""
    fn = _stmt(f"def {name}(a):\n    return {target}({_call_args(params)})\n")
    assert isinstance(fn, cst.FunctionDef)
    fn = fn.with_changes(params=cst.Parameters(params=list(params)))
    return _with_kind(fn, "staticmethod", decorators).with_changes(leading_lines=[BLANK])


# --- per-class plans ------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What becomes of one Function class."""

    node: cst.ClassDef
    name: str
    base: Optional[_Plan] = None
    intermediates: int = 0
    forward_params: List[cst.Param] = field(default_factory=list)
    forward_impl: bool = False  # forward's body lives in a classmethod _forward_impl
    forward_decorators: List[cst.Decorator] = field(default_factory=list)
    backward_impl: Optional[List[cst.Param]] = None  # params of backward if in _backward_impl
    backward_decorators: List[cst.Decorator] = field(default_factory=list)
    setup_tail: List[cst.BaseStatement] = field(default_factory=list)  # after inputs unpacking
    needed_inputs: Set[str] = field(default_factory=set)
    setup_ctx: str = "ctx"
    setup_names: Tuple[str, str] = ("inputs", "output")
    replacements: Dict[int, List[cst.BaseStatement]] = field(default_factory=dict)
    additions: List[cst.BaseStatement] = field(default_factory=list)
    refusal: Optional[Refused] = None
    decorate: bool = False


def _methods(node: cst.ClassDef) -> Dict[str, cst.FunctionDef]:
    found = {}
    if isinstance(node.body, cst.IndentedBlock):
        for stmt in node.body.body:
            if isinstance(stmt, cst.FunctionDef):
                found[stmt.name.value] = stmt
    return found


def _grad_count(backward: Optional[cst.FunctionDef]) -> Optional[int]:
    if backward is None:
        return None
    params = backward.params
    if params.star_arg not in (cst.MaybeSentinel.DEFAULT, None):
        return None
    skip = 2 if _method_kind(backward) == "class" else 1
    return len([*params.posonly_params, *params.params]) - skip


def _super_call(fn: cst.FunctionDef, ctx: str) -> Optional[cst.Call]:
    """The call in a forward whose body is only ``return super().forward(ctx, ...)``."""
    body = [
        s
        for s in _body_statements(fn)
        if not (
            isinstance(s, cst.SimpleStatementLine)
            and isinstance(s.body[0], cst.Expr)
            and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        )
    ]
    for node in _walk(fn):
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Call)
            and _dotted(node.func.value.func) == "super"
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
            and _dotted(value.func.value.func) == "super"
            and value.args
            and isinstance(value.args[0].value, cst.Name)
            and value.args[0].value.value == ctx
        ):
            return value
    raise Refused("forward calls super() other than as `return super().forward(ctx, ...)`", fn)


def _pure(expr: cst.BaseExpression) -> bool:
    for node in _walk(expr, into_scopes=True):
        if isinstance(node, cst.Call) and _dotted(node.func) not in PURE_BUILTINS:
            return False
    return True


class _Migrator:
    """Plans and applies the migration of every Function class of one module."""

    def __init__(self, module: cst.Module, decorator: str) -> None:
        self.module = module
        self.names = _Names(module)
        mod, _, func = decorator.partition(":")
        self.import_module, _, self.api = mod.rpartition(".")
        self.api_module = mod
        self.function_name = func
        self.plans: Dict[str, _Plan] = {}
        self.children: Dict[str, List[str]] = {}

    # -- discovery

    def function_classes(self) -> List[cst.ClassDef]:
        found: List[cst.ClassDef] = []
        known: Set[str] = set()
        for node in _walk(self.module, into_scopes=True):
            if not isinstance(node, cst.ClassDef):
                continue
            for base in node.bases:
                if base.keyword is not None:
                    continue
                qualified = self.names.qualify(base.value)
                local = _dotted(base.value)
                if qualified in FUNCTION_BASES or local in known:
                    found.append(node)
                    known.add(node.name.value)
                    if local in known and local != node.name.value:
                        self.children.setdefault(local, []).append(node.name.value)
                    break
        return found

    def _in_file_base(self, node: cst.ClassDef) -> Optional[_Plan]:
        for base in node.bases:
            local = _dotted(base.value)
            if local in self.plans:
                return self.plans[local]
        return None

    def _already_decorated(self, node: cst.ClassDef) -> bool:
        target = f"{self.api_module}.{self.function_name}"
        for decorator in node.decorators:
            expr = decorator.decorator
            head = expr.func if isinstance(expr, cst.Call) else expr
            if self.names.qualify(head) == target:
                return True
        return False

    # -- planning

    def plan(self, node: cst.ClassDef) -> _Plan:
        plan = _Plan(node=node, name=node.name.value, base=self._in_file_base(node))
        self.plans[plan.name] = plan
        try:
            self._plan(plan)
        except Refused as refused:
            plan.refusal = refused
        return plan

    def _plan(self, plan: _Plan) -> None:
        methods = _methods(plan.node)
        if "setup_context" in methods:
            return  # already in the setup_context style
        base = plan.base
        if base is not None and base.refusal is not None:
            raise Refused(f"its base class {base.name} is not migrated")
        forward = methods.get("forward")
        if forward is None:
            if base is not None and base.decorate:
                self._plan_inherited(plan, base)
            return
        kind = _method_kind(forward)
        if kind == "instance":
            raise Refused("forward is neither a @staticmethod nor a @classmethod", forward)
        plan.decorate = True
        params = _positional_params(forward, "forward")
        ctx = (
            params[1 if kind == "class" else 0].name.value
            if len(params) > (kind == "class")
            else ""
        )
        call = _super_call(forward, ctx) if kind == "class" and ctx else None
        if call is not None:
            self._plan_super(plan, forward, call)
        else:
            self._plan_forward(plan, forward, kind, _grad_count(methods.get("backward")))
        self._plan_backward(plan, methods)

    def _plan_inherited(self, plan: _Plan, base: _Plan) -> None:
        plan.decorate = True
        plan.intermediates = base.intermediates
        plan.forward_params = base.forward_params
        methods = _methods(plan.node)
        if base.forward_impl and "_forward_impl" not in methods:
            plan.additions.append(
                _delegate("forward", base.forward_params, f"{plan.name}._forward_impl", [])
            )
        self._plan_backward(plan, methods)

    def _plan_forward(
        self, plan: _Plan, forward: cst.FunctionDef, kind: str, grads: Optional[int]
    ) -> None:
        analysis = _ForwardAnalysis(forward, kind, grads)
        split = analysis.split()
        plan.intermediates = len(split.values.intermediates)
        plan.forward_params = split.params
        plan.setup_ctx = split.ctx
        decorators = _strip_ctx_decorators(forward, self.names, self.api, "forward")
        body = _forward_return(split, split.forward_body)
        uses_cls = analysis.cls is not None and any(analysis.cls in _loaded_names(s) for s in body)
        plan.forward_impl = uses_cls or (kind == "class" and bool(self.children.get(plan.name)))
        new_forward = forward.with_changes(body=forward.body.with_changes(body=body))
        drop = 2 if kind == "class" else 1
        if plan.forward_impl:
            impl = _drop_first_params(new_forward, drop)
            impl = impl.with_changes(
                name=cst.Name("_forward_impl"),
                params=impl.params.with_changes(
                    params=[cst.Param(cst.Name(analysis.cls or "cls")), *impl.params.params]
                ),
            )
            impl = _with_kind(impl, "classmethod", [])
            public = _delegate("forward", split.params, f"{plan.name}._forward_impl", decorators)
            methods = [impl, public]
        else:
            methods = [
                _with_kind(_drop_first_params(new_forward, drop), "staticmethod", decorators)
            ]
        taken = set(analysis.taken)
        inputs_name, output_name, unpack_in, unpack_out = _setup_lines(split, taken)
        plan.needed_inputs = split.values.inputs
        plan.setup_names = (inputs_name, output_name)
        plan.setup_tail = [*unpack_out, *_tidy_first(split.ctx_statements)]
        setup = _setup_context(split.ctx, inputs_name, output_name, [*unpack_in, *plan.setup_tail])
        plan.replacements[id(forward)] = [*methods, setup]

    def _plan_super(self, plan: _Plan, forward: cst.FunctionDef, call: cst.Call) -> None:
        base = plan.base
        if base is None or not base.decorate:
            raise Refused(
                "forward chains super().forward(ctx, ...) to a class migrate does not migrate "
                "in this file",
                forward,
            )
        if not base.forward_impl:
            raise Refused("forward chains to a base whose forward is not a @classmethod", forward)
        params = _positional_params(forward, "forward")[2:]
        plan.forward_params = params
        plan.intermediates = base.intermediates
        plan.forward_impl = True
        given = self._bind_super_args(forward, call, base, {p.name.value for p in params})
        bound = {
            name: expr
            for name, expr in given.items()
            if not (isinstance(expr, cst.Name) and expr.value == name)
        }
        decorators = _strip_ctx_decorators(forward, self.names, self.api, "forward")
        body = forward.body
        assert isinstance(body, cst.IndentedBlock)
        ret = body.body[-1]
        assert isinstance(ret, cst.SimpleStatementLine)
        new_call = call.with_changes(
            func=call.func.with_changes(attr=cst.Name("_forward_impl")),  # type: ignore[attr-defined]
            args=call.args[1:],
        )
        new_ret = ret.with_changes(body=[cst.Return(new_call)])
        impl = _drop_first_params(forward, 2).with_changes(
            name=cst.Name("_forward_impl"),
            body=body.with_changes(body=[*body.body[:-1], new_ret]),
        )
        cls_param = _positional_params(forward, "forward")[0]
        impl = impl.with_changes(
            params=impl.params.with_changes(params=[cls_param, *impl.params.params])
        )
        impl = _with_kind(impl, "classmethod", [])
        public = _delegate("forward", params, f"{plan.name}._forward_impl", decorators)
        ctx = _positional_params(forward, "forward")[1].name.value
        inputs_name, output_name = base.setup_names
        own = {p.name.value for p in params} | set(bound)
        if own & {inputs_name, output_name, base.setup_ctx} or base.setup_ctx != ctx:
            raise Refused(
                f"setup_context of {base.name} names ({base.setup_ctx}, {inputs_name}, "
                f"{output_name}) clash with this forward's parameters",
                forward,
            )
        needed = set().union(set(), *(_loaded_names(v) for v in given.values()))
        lines: List[cst.BaseStatement] = []
        if needed:
            names = [p.name.value if p.name.value in needed else "_" for p in params]
            lines.append(_stmt(f"{_tuple_target(names)} = {inputs_name}\n"))
        if bound:
            targets = list(bound)
            values = ", ".join(_code(bound[t]) for t in targets)
            lines.append(
                _stmt(f"{_tuple_target(targets)} = {values}{',' if len(targets) == 1 else ''}\n")
            )
        tail = base.setup_tail
        setup = _setup_context(ctx, inputs_name, output_name, [*lines, *tail])
        plan.setup_tail = tail
        plan.setup_ctx = ctx
        plan.setup_names = base.setup_names
        plan.needed_inputs = {p.name.value for p in params} & needed
        plan.replacements[id(forward)] = [impl, public, setup]

    def _bind_super_args(
        self, forward: cst.FunctionDef, call: cst.Call, base: _Plan, own: Set[str]
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
            if not _pure(expr) or not _loaded_names(expr) <= own | set(PURE_BUILTINS) | set(
                self.names.imports
            ):
                raise Refused(
                    f"super().forward(...) passes {_code(expr)} for {name}, which setup_context "
                    "cannot compute again",
                    forward,
                )
            bound[name] = expr
        return bound

    def _plan_backward(self, plan: _Plan, methods: Dict[str, cst.FunctionDef]) -> None:
        for name in AUTOGRAD_METHODS[1:]:
            fn = methods.get(name)
            if fn is None:
                continue
            kind = _method_kind(fn)
            decorators = _strip_ctx_decorators(fn, self.names, self.api, name)
            if kind == "static":
                if (
                    decorators != list(fn.decorators)[1:]
                    or _decorator_name(fn.decorators[0]) != "staticmethod"
                ):
                    keep = [d for d in fn.decorators if _decorator_name(d) == "staticmethod"]
                    plan.replacements[id(fn)] = [
                        _with_kind(fn.with_changes(decorators=keep), "staticmethod", decorators)
                    ]
                continue
            if kind != "class":
                raise Refused(f"{name} is neither a @staticmethod nor a @classmethod", fn)
            params = _positional_params(fn, name)
            cls_name = params[0].name.value
            if not any(cls_name in _loaded_names(s) for s in _body_statements(fn)):
                plan.replacements[id(fn)] = [
                    _with_kind(_drop_first_params(fn, 1), "staticmethod", decorators)
                ]
                continue
            if name != "backward":
                raise Refused(f"{name} uses {cls_name}", fn)
            if any(isinstance(n, cst.Call) and _dotted(n.func) == "super" for n in _walk(fn)):
                raise Refused("backward calls super()", fn)
            impl = _with_kind(fn.with_changes(name=cst.Name("_backward_impl")), "classmethod", [])
            public = _delegate("backward", params[1:], f"{plan.name}._backward_impl", decorators)
            plan.backward_impl = params[1:]
            plan.replacements[id(fn)] = [impl, public]
        base = plan.base
        if "backward" not in methods and base is not None:
            inherited = self._inherited_backward(base)
            if inherited is not None:
                plan.backward_impl = inherited
                plan.additions.append(
                    _delegate("backward", inherited, f"{plan.name}._backward_impl", [])
                )

    def _inherited_backward(self, base: Optional[_Plan]) -> Optional[List[cst.Param]]:
        while base is not None:
            if base.backward_impl is not None:
                return base.backward_impl
            if "backward" in _methods(base.node):
                return None
            base = base.base
        return None

    # -- applying

    def refuse_families(self) -> None:
        """A refused class refuses its whole in-file hierarchy (subclasses chain to bases)."""
        changed = True
        while changed:
            changed = False
            for plan in self.plans.values():
                if plan.refusal is not None:
                    continue
                relatives = [plan.base] if plan.base else []
                relatives += [self.plans[c] for c in self.children.get(plan.name, [])]
                for other in relatives:
                    if other is not None and other.refusal is not None:
                        plan.refusal = Refused(
                            f"{other.name} in the same class hierarchy is not migrated "
                            f"({other.refusal.reason})"
                        )
                        changed = True
                        break

    def rebuild(self, plan: _Plan) -> cst.ClassDef:
        node = plan.node
        assert isinstance(node.body, cst.IndentedBlock)
        body: List[cst.BaseStatement] = []
        for stmt in node.body.body:
            body += plan.replacements.get(id(stmt), [stmt])
        body += plan.additions
        decorators = [d for d in node.decorators if not self._is_our_decorator(d)]
        arg = f"(intermediates={plan.intermediates})" if plan.intermediates else ""
        ours = cst.Decorator(cst.parse_expression(f"{self.api}.{self.function_name}{arg}"))
        return node.with_changes(
            decorators=[ours, *decorators], body=node.body.with_changes(body=body)
        )

    def _is_our_decorator(self, decorator: cst.Decorator) -> bool:
        expr = decorator.decorator
        head = expr.func if isinstance(expr, cst.Call) else expr
        return self.names.qualify(head) == f"{self.api_module}.{self.function_name}"


class _Replace(cst.CSTTransformer):
    def __init__(self, new: Dict[int, cst.ClassDef]) -> None:
        self.new = new

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.ClassDef:
        return self.new.get(id(original_node), updated_node)


def migrate_source(
    source: str, path: str = "<string>", decorator: str = DEFAULT_DECORATOR
) -> Result:
    """Migrate the legacy Functions of one module's source; never raises for a refused class.

    Raises ``libcst.ParserSyntaxError`` for source that does not parse.

    Example::

        result = migrate_source(text, "ops.py")
        result.new_source, result.migrated, [str(r) for r in result.refusals]
    """
    wrapper = MetadataWrapper(cst.parse_module(source))
    module = wrapper.module
    positions = wrapper.resolve(PositionProvider)
    migrator = _Migrator(module, decorator)
    result = Result(path, source, source)
    plans = []
    for node in migrator.function_classes():
        if migrator._already_decorated(node) and "setup_context" in _methods(node):
            continue
        plans.append(migrator.plan(node))
    migrator.refuse_families()
    new: Dict[int, cst.ClassDef] = {}
    for plan in plans:
        if plan.refusal is not None:
            where = plan.refusal.node
            line = positions[where if where in positions else plan.node].start.line  # type: ignore[index]
            result.refusals.append(Refusal(path, line, plan.name, plan.refusal.reason))
        elif plan.decorate:
            new[id(plan.node)] = migrator.rebuild(plan)
            result.migrated.append(plan.name)
    if not new:
        return result
    module = module.visit(_Replace(new))
    context = CodemodContext()
    if migrator.import_module:
        AddImportsVisitor.add_needed_import(context, migrator.import_module, migrator.api)
    else:
        AddImportsVisitor.add_needed_import(context, migrator.api)
    module = AddImportsVisitor(context).transform_module(module)
    result.new_source = module.code
    return result


def python_files(paths: Sequence[Union[str, Path]]) -> List[Path]:
    """The ``.py`` files named or found (recursively, sorted) in the folders named."""
    files: List[Path] = []
    for entry in map(Path, paths):
        if entry.is_dir():
            files += sorted(p for p in entry.rglob("*.py") if p.is_file())
        elif entry.is_file():
            files.append(entry)
        else:
            raise FileNotFoundError(f"{entry} does not exist")
    return files


def _decorator_spec(decorator: str) -> str:
    module, colon, name = decorator.partition(":")
    if (
        not colon
        or not name.isidentifier()
        or not all(part.isidentifier() for part in module.split("."))
    ):
        raise ValueError(
            f"--decorator {decorator!r} is not MODULE:NAME, e.g. mylib._autograd_compat:function"
        )
    return decorator


def run(
    paths: Sequence[Union[str, Path]], mode: str = "diff", decorator: str = DEFAULT_DECORATOR
) -> int:
    """The ``migrate`` command: ``mode`` is ``diff``, ``write`` or ``check``; returns the exit
    status (0; 1 for ``check`` when a file would change; 2 for a usage error).

    Diffs go to stdout, refusals (``path:line: Class: reason``) and errors to stderr, and a last
    line to stderr counts migrated and refused classes.

    Example::

        run(["src/mylib"], mode="check")
    """
    try:
        _decorator_spec(decorator)
        files = python_files(paths)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    status = 0
    migrated = refused = changed = 0
    for path in files:
        try:
            result = migrate_source(path.read_text(encoding="utf-8"), path.as_posix(), decorator)
        except cst.ParserSyntaxError as error:
            print(f"error: {path}: cannot parse: {str(error).splitlines()[0]}", file=sys.stderr)
            status = 2
            continue
        except (OSError, UnicodeDecodeError) as error:
            print(f"error: cannot read {path}: {error}", file=sys.stderr)
            status = 2
            continue
        for refusal in result.refusals:
            print(refusal, file=sys.stderr)
        migrated += len(result.migrated)
        refused += len(result.refusals)
        if not result.changed:
            continue
        changed += 1
        if mode == "write":
            path.write_text(result.new_source, encoding="utf-8")
        elif mode == "check":
            print(f"would migrate {path}: {', '.join(result.migrated)}")
        else:
            sys.stdout.write(result.diff())
    verb = {"write": "migrated", "check": "would migrate", "diff": "would migrate"}[mode]
    print(
        f"{verb} {migrated} class(es) in {changed} file(s); refused {refused}",
        file=sys.stderr,
    )
    if status == 0 and mode == "check" and changed:
        status = 1
    return status
