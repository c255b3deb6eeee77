"""Small LibCST helpers shared by every step of the codemod: names, walks, bindings, parameters."""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

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


def collect_targets(target: cst.BaseExpression, out: Set[str], mutated: Set[str]) -> None:
    if isinstance(target, cst.Name):
        out.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            collect_targets(element.value, out, mutated)
    elif isinstance(target, cst.StarredElement):
        collect_targets(target.value, out, mutated)
    elif isinstance(target, (cst.Subscript, cst.Attribute)) and isinstance(target.value, cst.Name):
        mutated.add(target.value.value)


def bindings(node: cst.CSTNode) -> Tuple[Set[str], Set[str]]:
    """(names assigned, names modified in place) anywhere in ``node`` (not in nested scopes)."""
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


def statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def tuple_target(names: Sequence[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else ", ".join(names)
