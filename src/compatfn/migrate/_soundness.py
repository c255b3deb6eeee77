"""The check every rewrite passes before it is written: the new class compiles, and its methods
read no name that is not bound where they read it, compared with the original class.

A name a new method reads must be, in that method, a parameter or local bound on every path
before the read (a simple definite-assignment analysis over if/for/while/with/try/match), or a
global the original class read too (a builtin, or a name the codemod brings in itself: the
class, torch). A local read where some path leaves it unbound passes only where the original
read that name so too (the user's own code may do that). Anything else refuses the class.

Example::

    reason = unsound(old_class, new_class, allowed={"torch", "Square"})
    # None, or "the migrated forward would read ctx, which it does not bind"
"""

from __future__ import annotations

import ast
import builtins
import symtable
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set

import libcst as cst

#: The methods that take over what the legacy forward did.
FORWARD_ROLES = ("forward", "_forward_impl", "setup_context")
BUILTINS = frozenset(dir(builtins)) | {"__class__"}
State = Optional[FrozenSet[str]]  # the names bound on every path; None: unreachable


def _class_code(node: cst.ClassDef) -> str:
    return cst.Module(body=[node.with_changes(leading_lines=())]).code


def _function_tables(table: symtable.SymbolTable) -> Dict[str, List[symtable.SymbolTable]]:
    found: Dict[str, List[symtable.SymbolTable]] = {}
    for child in table.get_children():
        if isinstance(child, symtable.Function):
            found.setdefault(child.get_name(), []).append(child)
    return found


def _global_reads(table: symtable.SymbolTable) -> Set[str]:
    """Globals read by a function, its nested functions, lambdas and comprehensions."""
    found = {s.get_name() for s in table.get_symbols() if s.is_referenced() and s.is_global()}
    for child in table.get_children():
        found |= _global_reads(child)
    return found


def _locals(table: symtable.SymbolTable) -> Set[str]:
    return {s.get_name() for s in table.get_symbols() if s.is_local() or s.is_parameter()}


class _Methods:
    """One class's methods: symbol tables and AST, by name."""

    def __init__(self, code: str) -> None:
        top = symtable.symtable(code, "<class>", "exec")
        self.tables = _function_tables(top.get_children()[0])
        tree = ast.parse(code)
        klass = tree.body[0]
        assert isinstance(klass, ast.ClassDef)
        self.defs = [
            s for s in klass.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]

    def globals_of(self, name: str) -> Set[str]:
        return set().union(*(_global_reads(t) for t in self.tables.get(name, [])))

    def locals_of(self, name: str) -> Set[str]:
        return set().union(*(_locals(t) for t in self.tables.get(name, [])))

    def all_globals(self) -> Set[str]:
        return set().union(*(self.globals_of(name) for name in self.tables))

    def maybe_unbound(self) -> Dict[str, Set[str]]:
        found: Dict[str, Set[str]] = {}
        for fn in self.defs:
            tables = self.tables.get(fn.name, [])
            local = set().union(*(_locals(t) for t in tables))
            found.setdefault(fn.name, set()).update(_Flow(local).function(fn))
        return found


def unsound(old: cst.ClassDef, new: cst.ClassDef, allowed: Iterable[str]) -> Optional[str]:
    """Why ``new`` (the rewrite of ``old``) would read a name it does not bind, or does not
    compile; None when it passes. ``allowed``: globals the codemod itself brings in."""
    try:
        compile(_class_code(new), "<migrated>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"the migrated class would not compile ({error.msg})"
    try:
        before = _Methods(_class_code(old))
    except SyntaxError as error:
        return f"migrate cannot check this class on its own ({error.msg})"
    after = _Methods(_class_code(new))
    known = before.all_globals() | BUILTINS | set(allowed)
    old_locals = before.locals_of("forward")
    old_unbound = set().union(*before.maybe_unbound().values())
    for name in sorted(after.tables):
        lost = after.globals_of(name) - known
        if name in FORWARD_ROLES:
            lost |= after.globals_of(name) & old_locals
        else:
            lost |= after.globals_of(name) & before.locals_of(name)
        if lost:
            return (
                f"the migrated {name} would read {', '.join(sorted(lost))}, which it does not bind"
            )
    twice = _bound_twice(after.defs, "setup_context")
    if twice:
        return f"the migrated setup_context would bind {twice} twice (one value hides another)"
    for name, unbound in sorted(after.maybe_unbound().items()):
        new_unbound = unbound - old_unbound
        if new_unbound:
            return (
                f"the migrated {name} would read {', '.join(sorted(new_unbound))} where "
                "some path has not assigned it"
            )
    return None


def _bound_twice(defs: Sequence[ast.AST], name: str) -> Optional[str]:
    """A local that method ``name`` assigns in two top-level statements (setup_context only
    unpacks; the ctx statements it runs assign no local)."""
    seen: Set[str] = set()
    for fn in defs:
        if getattr(fn, "name", None) != name:
            continue
        for stmt in fn.body:  # type: ignore[attr-defined]
            if isinstance(stmt, ast.Assign):
                names = set().union(*(_targets(t) for t in stmt.targets)) - {"_"}
                if names & seen:
                    return sorted(names & seen)[0]
                seen |= names
    return None


def _join(*states: State) -> State:
    live = [s for s in states if s is not None]
    if not live:
        return None
    return frozenset.intersection(*live)


def _targets(node: ast.AST) -> Set[str]:
    """Names an assignment target binds."""
    return {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


class _Flow:
    """Definite assignment over one function: the locals some read may find unbound."""

    def __init__(self, local: Set[str]) -> None:
        self.local = local
        self.unbound: Set[str] = set()

    def function(self, fn: ast.AST) -> Set[str]:
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        args = fn.args
        params = [*getattr(args, "posonlyargs", []), *args.args, *args.kwonlyargs]
        names = {a.arg for a in params}
        names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        self.block(fn.body, frozenset(names))
        return self.unbound

    # -- expressions: reads in evaluation order, := binds

    def expr(self, node: Optional[ast.AST], state: State) -> State:
        if node is None or state is None:
            return state
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id in self.local and node.id not in state:
                self.unbound.add(node.id)
            return state
        if isinstance(node, ast.NamedExpr):
            state = self.expr(node.value, state)
            return None if state is None else state | {node.target.id}  # type: ignore[attr-defined]
        if isinstance(node, ast.Lambda):
            return self._defaults(node.args, state)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self._comprehension(node, state)
        if isinstance(node, ast.BoolOp):
            state = self.expr(node.values[0], state)
            for value in node.values[1:]:
                self.expr(value, state)  # may not run: what it binds does not count
            return state
        if isinstance(node, ast.IfExp):
            state = self.expr(node.test, state)
            return _join(self.expr(node.body, state), self.expr(node.orelse, state))
        for child in ast.iter_child_nodes(node):
            state = self.expr(child, state)
        return state

    def _defaults(self, args: ast.arguments, state: State) -> State:
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            state = self.expr(default, state)
        return state

    def _comprehension(self, node: ast.AST, state: State) -> State:
        inner = state
        for gen in node.generators:  # type: ignore[attr-defined]
            inner = self.expr(gen.iter, inner)
            inner = None if inner is None else inner | _targets(gen.target)
            for test in gen.ifs:
                inner = self.expr(test, inner)
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        for part in parts:
            inner = self.expr(part, inner)
        # := inside binds in the function: count it only where the first iterable is not empty,
        # which is unknown, so it does not count
        return state

    # -- statements

    def block(self, body: List[ast.stmt], state: State) -> State:
        for stmt in body:
            if state is None:
                return None
            state = self.stmt(stmt, state)
        return state

    def stmt(self, node: ast.stmt, state: State) -> State:
        if isinstance(node, (ast.Return, ast.Raise)):
            for child in ast.iter_child_nodes(node):
                state = self.expr(child, state)
            return None
        if isinstance(node, (ast.Break, ast.Continue)):
            return None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return self._definition(node, state)
        if isinstance(node, ast.Assign):
            state = self.expr(node.value, state)
            for target in node.targets:
                state = self._store(target, state)
            return state
        if isinstance(node, ast.AugAssign):
            state = self.expr(node.value, state)
            if isinstance(node.target, ast.Name):
                load = ast.Name(id=node.target.id, ctx=ast.Load())
                state = self.expr(load, state)
            return self._store(node.target, state)
        if isinstance(node, ast.AnnAssign):
            if node.value is None:
                return state
            return self._store(node.target, self.expr(node.value, state))
        if isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    state = self.expr(ast.Name(id=target.id, ctx=ast.Load()), state)
                    state = None if state is None else state - {target.id}
                else:
                    state = self.expr(target, state)
            return state
        if isinstance(node, ast.If):
            state = self.expr(node.test, state)
            return _join(self.block(node.body, state), self.block(node.orelse, state))
        if isinstance(node, ast.While):
            state = self.expr(node.test, state)
            self.block(node.body, state)
            self.block(node.orelse, state)
            return state  # the body may not run; what it binds does not count
        if isinstance(node, (ast.For, ast.AsyncFor)):
            state = self.expr(node.iter, state)
            self.block(node.body, self._store(node.target, state))
            self.block(node.orelse, state)
            return state
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                state = self.expr(item.context_expr, state)
                if item.optional_vars is not None:
                    state = self._store(item.optional_vars, state)
            return self.block(node.body, state)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).split(".")[0] for a in node.names}
            return None if state is None else state | bound
        if type(node).__name__ in ("Try", "TryStar"):
            return self._try(node, state)
        if type(node).__name__ == "Match":
            return self._match(node, state)
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Pass)):
            return state
        for child in ast.iter_child_nodes(node):  # Expr, Assert and anything else: reads only
            state = self.expr(child, state)
        return state

    def _store(self, target: ast.AST, state: State) -> State:
        """Evaluate what an assignment target reads (``a[i]``, ``a.b``), then bind its names."""
        for node in ast.walk(target):
            if isinstance(node, (ast.Subscript, ast.Attribute)):
                state = self.expr(node.value, state)
                if isinstance(node, ast.Subscript):
                    state = self.expr(node.slice, state)
        return None if state is None else state | _targets(target)

    def _definition(self, node: ast.stmt, state: State) -> State:
        for decorator in getattr(node, "decorator_list", []):
            state = self.expr(decorator, state)
        if isinstance(node, ast.ClassDef):
            for base in [*node.bases, *(k.value for k in node.keywords)]:
                state = self.expr(base, state)
            for stmt in node.body:  # runs now; its own names are the class's
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                        self.expr(sub, state)
        else:
            state = self._defaults(node.args, state)  # type: ignore[attr-defined]
        return None if state is None else state | {node.name}  # type: ignore[attr-defined]

    def _try(self, node: ast.stmt, state: State) -> State:
        body = self.block(node.body, state)  # type: ignore[attr-defined]
        ends = [self.block(node.orelse, body)]  # type: ignore[attr-defined]
        for handler in node.handlers:  # type: ignore[attr-defined]
            start = self.expr(handler.type, state)  # the body may have stopped anywhere
            if handler.name and start is not None:
                start = start | {handler.name}
            ends.append(self.block(handler.body, start))
        after = _join(*ends)
        final = self.block(node.finalbody, state)  # type: ignore[attr-defined]
        if final is None or after is None:
            return None
        return after | (final - (state or frozenset()))

    def _match(self, node: ast.stmt, state: State) -> State:
        state = self.expr(node.subject, state)  # type: ignore[attr-defined]
        ends: List[State] = [state]  # no case matched
        for case in node.cases:  # type: ignore[attr-defined]
            bound = {
                name
                for sub in ast.walk(case.pattern)
                for name in [getattr(sub, "name", None)]
                if isinstance(name, str)
            }
            start = None if state is None else state | bound
            start = self.expr(case.guard, start)
            ends.append(self.block(case.body, start))
        return _join(*ends)
