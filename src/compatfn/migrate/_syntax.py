"""Small LibCST helpers shared by every step of the codemod: names, walks, bindings, parameters."""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst


class Refused(Exception):
    """A class the codemod leaves untouched; ``node`` locates it in the source."""

    def __init__(self, reason: str, node: Optional[cst.CSTNode] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.node = node


def source_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def dotted(node: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def walk(node: cst.CSTNode, into_scopes: bool = False) -> Iterator[cst.CSTNode]:
    """``node`` and its descendants; nested functions, lambdas and classes only if asked."""
    yield node
    for child in node.children:
        if not into_scopes and isinstance(child, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        yield from walk(child, into_scopes)


def loaded_names(node: cst.CSTNode) -> Set[str]:
    """Names an expression or statement reads (attribute names and keywords excluded)."""
    return set(names_in_order(node))


def names_in_order(node: cst.CSTNode) -> List[str]:
    """:func:`loaded_names` in the order the source first reads them (what the codemod writes
    must not depend on string hashing)."""
    skip: Set[int] = set()
    names: Dict[str, None] = {}
    for sub in walk(node, into_scopes=True):
        if isinstance(sub, cst.Attribute):
            skip.add(id(sub.attr))
        elif isinstance(sub, cst.Arg) and sub.keyword is not None:
            skip.add(id(sub.keyword))
        elif isinstance(sub, cst.Name) and id(sub) not in skip:
            names[sub.value] = None
    return list(names)


def free_names(node: cst.CSTNode) -> List[str]:
    """:func:`names_in_order` without the names a comprehension or lambda inside ``node`` binds
    for itself (``t`` in ``[t + 1 for t in ys]``): forward has no such variable to hand over."""
    found: Dict[str, None] = {}
    _collect_free(node, frozenset(), found)
    return list(found)


def _collect_free(node: cst.CSTNode, bound: FrozenSet[str], found: Dict[str, None]) -> None:
    if isinstance(node, cst.Name):
        if node.value not in bound:
            found[node.value] = None
        return
    if isinstance(node, cst.Attribute):
        _collect_free(node.value, bound, found)
        return
    if isinstance(node, cst.Arg):
        _collect_free(node.value, bound, found)
        return
    if isinstance(node, cst.Lambda):
        params = {p.name.value for p in walk(node.params) if isinstance(p, cst.Param)}
        _collect_free(node.body, bound | params, found)
        return
    if isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
        inner: Set[str] = set()
        for sub in walk(node.for_in):
            if isinstance(sub, cst.CompFor):
                collect_targets(sub.target, inner, set())
        _collect_free(node.for_in.iter, bound, found)  # evaluated outside the comprehension
        for child in node.children:
            if child is not node.for_in:
                _collect_free(child, bound | inner, found)
        for child in node.for_in.children:
            if child is not node.for_in.iter:
                _collect_free(child, bound | inner, found)
        return
    for child in node.children:
        _collect_free(child, bound, found)


def collect_targets(target: cst.BaseExpression, out: Set[str], mutated: Set[str]) -> None:
    if isinstance(target, cst.Name):
        out.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            collect_targets(element.value, out, mutated)
    elif isinstance(target, cst.StarredElement):
        collect_targets(target.value, out, mutated)
    elif isinstance(target, (cst.Subscript, cst.Attribute)):
        root = root_name(target)
        if root is not None:
            mutated.add(root)


def bindings(node: cst.CSTNode) -> Tuple[Set[str], Set[str]]:
    """(names assigned, names modified in place) anywhere in ``node``: assignments not in nested
    scopes, in-place changes in them too (see NOTE: [in-place changes])."""
    assigned: Set[str] = set()
    mutated: Set[str] = set()
    for sub in walk(node):
        if isinstance(sub, cst.AssignTarget):
            collect_targets(sub.target, assigned, mutated)
        elif isinstance(sub, (cst.AnnAssign, cst.AugAssign)):
            collect_targets(sub.target, assigned, mutated)
            if isinstance(sub, cst.AugAssign) and isinstance(sub.target, cst.Name):
                mutated.add(sub.target.value)
        elif isinstance(sub, (cst.For, cst.CompFor)):
            collect_targets(sub.target, assigned, mutated)
        elif isinstance(sub, cst.AsName):
            collect_targets(sub.name, assigned, mutated)  # type: ignore[arg-type]
        elif isinstance(sub, cst.NamedExpr):
            collect_targets(sub.target, assigned, mutated)
        elif isinstance(sub, cst.Del):
            collect_targets(sub.target, assigned, mutated)  # deleted: gone like a reassignment
        elif isinstance(sub, (cst.FunctionDef, cst.ClassDef)) and sub is not node:
            assigned.add(sub.name.value)
        elif isinstance(sub, (cst.Import, cst.ImportFrom)) and not isinstance(
            sub.names, cst.ImportStar
        ):
            for alias in sub.names:
                name = alias.asname.name if alias.asname else alias.name
                assigned.add((dotted(name) or "").split(".")[0])  # type: ignore[arg-type]
    for sub in walk(node, into_scopes=True):
        if isinstance(sub, cst.Call):
            mutated |= changed_by_call(sub)
    return assigned, mutated


# NOTE: [in-place changes]
# A ctx value that setup_context computes again (``ctx.total = y.sum()``) is right only if forward
# does not change what it reads after that line. Changes in place are found by their spelling:
# assignments to ``y[...]`` or ``y.attr`` (``y.data[0] = ...``), a method ending in ``_`` called
# on anything that starts from ``y`` (``y.mul_``, ``y.data.mul_``, ``y.view(-1).mul_``), a function
# ending in ``_`` given ``y`` (``torch.relu_(y)``), ``out=y`` and ``inplace=True``, and a
# container's own mutators (``parts.append``), in nested functions too. A name assigned ``y``, an
# attribute, item or method result of it may share its memory (``v = y[:2]``): _placement counts
# a change to it as a change to ``y``. Not seen: a helper that changes its argument without
# saying so, and views made by functions (``torch.narrow(y, ...)``).
#: Methods of Python containers that change them in place (a tensor's in-place methods end in
#: ``_``; ``add`` and ``sort`` are left out: on a tensor they are not in place).
CONTAINER_MUTATORS = frozenset(
    [
        "append",
        "extend",
        "insert",
        "pop",
        "popitem",
        "remove",
        "clear",
        "update",
        "setdefault",
        "discard",
        "appendleft",
        "extendleft",
    ]
)


def root_name(expr: cst.BaseExpression) -> Optional[str]:
    """The name an expression starts from: ``x`` for ``x.data[0]`` or ``x.view(-1).t()``."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        elif isinstance(expr, cst.Call):
            expr = expr.func
        else:
            return None


def _in_place(name: str) -> bool:
    return name.endswith("_") and not name.endswith("__")


def changed_by_call(call: cst.Call) -> Set[str]:
    """Names a call may change in place (see NOTE: [in-place changes])."""
    changed: Set[str] = set()
    func = call.func
    if isinstance(func, cst.Attribute):
        method = func.attr.value
        root = root_name(func.value)
        if root is not None and (_in_place(method) or method in CONTAINER_MUTATORS):
            changed.add(root)
    by_name = _in_place(dotted(func) or "")
    for arg in call.args:
        keyword = arg.keyword.value if arg.keyword else None
        if keyword == "out":
            changed |= {r for r in map(root_name, _elements(arg.value)) if r}
        elif keyword == "inplace" and not (
            isinstance(arg.value, cst.Name) and arg.value.value == "False"
        ):
            by_name = True
    if by_name:
        changed |= {r for r in (root_name(a.value) for a in call.args if not a.keyword) if r}
    return changed


def alias_groups(statements: Sequence[cst.CSTNode]) -> Dict[str, Set[str]]:
    """Name -> the names it may share memory with: ``v = y[:2]`` or ``v = y.view(-1)`` joins v
    and y, closed over chains (see NOTE: [in-place changes])."""
    links: Dict[str, Set[str]] = {}
    for stmt in statements:
        for sub in walk(stmt):
            pairs: List[Tuple[cst.BaseExpression, Optional[cst.BaseExpression]]] = []
            if isinstance(sub, cst.Assign):
                pairs = [(t.target, sub.value) for t in sub.targets]
            elif isinstance(sub, (cst.AnnAssign, cst.NamedExpr)):
                pairs = [(sub.target, sub.value)]
            elif isinstance(sub, cst.For):
                pairs = [(sub.target, sub.iter)]
            for target, value in pairs:
                targets: Set[str] = set()
                collect_targets(target, targets, set())
                values = _elements(value) if value is not None else []
                group = targets | {r for r in map(_shared_root, values) if r is not None}
                for name in group:
                    links.setdefault(name, set()).update(group)
    changed = True
    while changed:
        changed = False
        for name, group in links.items():
            wider = set().union(group, *(links.get(other, set()) for other in group))
            if wider != group:
                links[name] = wider
                changed = True
    return links


def _shared_root(expr: cst.BaseExpression) -> Optional[str]:
    """The name whose memory ``expr`` may share: ``y`` for ``y``, ``y[:2]``, ``y.data`` or
    ``y.view(-1)`` (not for ``y.clone()`` or ``y.new_zeros(...)``, nor for ``y * 2``)."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            method = expr.func.attr.value
            if method == "clone" or method.startswith("new_"):
                return None
            expr = expr.func.value
        else:
            return None


def _elements(expr: cst.BaseExpression) -> List[cst.BaseExpression]:
    if isinstance(expr, (cst.Tuple, cst.List)):
        return [e.value for e in expr.elements]
    return [expr]


def decorator_name(decorator: cst.Decorator) -> Optional[str]:
    expr = decorator.decorator
    return dotted(expr.func if isinstance(expr, cst.Call) else expr)


def method_kind(fn: cst.FunctionDef) -> str:
    names = {decorator_name(d) for d in fn.decorators}
    if "staticmethod" in names:
        return "static"
    if "classmethod" in names:
        return "class"
    return "instance"


def star_param(fn: cst.FunctionDef) -> Optional[cst.Param]:
    """The ``*args`` parameter of ``fn``, or None."""
    star = fn.params.star_arg
    return star if isinstance(star, cst.Param) else None


def positional_params(fn: cst.FunctionDef, what: str, allow_star: bool = False) -> List[cst.Param]:
    """``fn``'s positional parameters; raises :class:`Refused` for keyword-only parameters,
    ``**kwargs``, and ``*args`` unless ``allow_star``."""
    params = fn.params
    if params.kwonly_params or params.star_kwarg is not None:
        raise Refused(
            f"{what} takes keyword-only or **kwargs parameters; Function.apply passes "
            "arguments by position only, so make them positional to let it through",
            fn,
        )
    if star_param(fn) is not None and not allow_star:
        raise Refused(f"{what} takes *args here", fn)
    return [*params.posonly_params, *params.params]


def fresh_name(base: str, taken: Set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def tuple_target(names: Sequence[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else ", ".join(names)


def tidy_first(statements: List[cst.BaseStatement]) -> List[cst.BaseStatement]:
    """The statements with blank lines dropped before the first (its comments are kept)."""
    if not statements:
        return statements
    first = statements[0]
    lines = [line for line in getattr(first, "leading_lines", ()) if line.comment is not None]
    return [first.with_changes(leading_lines=lines), *statements[1:]]
