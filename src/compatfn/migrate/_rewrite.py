"""Rewrite: apply the plans of one module's Functions and add the decorator's import.

Example::

    result = migrate_source(open("ops.py", "rb").read(), path="ops.py")
    print(result.new_source)
    for refusal in result.refusals:
        print(refusal)  # ops.py:12: MyFn: forward passes ctx to _save(); ...
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ._imports import add_import
from ._layout import DEFAULT_LINE_LENGTH, wrap_new_lines
from ._plan import Plan, Planner, methods_of
from ._soundness import unsound
from ._syntax import Refused
from ._targets import star_commas
from ._unused import drop_unused_amp_imports

DEFAULT_DECORATOR = "compatfn:function"
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


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
    """What :func:`migrate_source` did to one file (``encoding`` writes it back as it was)."""

    path: str
    old_source: str
    new_source: str
    migrated: List[str] = field(default_factory=list)
    refusals: List[Refusal] = field(default_factory=list)
    encoding: str = "utf-8"
    #: What a migrated class does differently from the original, printed as refusals are.
    notes: List[Refusal] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.new_source != self.old_source

    def new_bytes(self) -> bytes:
        """The new source encoded as the old one was (a UTF-8 byte-order mark kept)."""
        return self.new_source.encode(self.encoding)

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


class ReplaceClasses(cst.CSTTransformer):
    def __init__(self, new: Dict[int, cst.ClassDef]) -> None:
        self.new = new

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.ClassDef:
        return self.new.get(id(original_node), updated_node)


def refuse_families(planner: Planner) -> None:
    """A refused class refuses its whole in-file hierarchy (subclasses chain to bases)."""
    changed = True
    while changed:
        changed = False
        for plan in planner.plans.values():
            if plan.refusal is not None:
                continue
            relatives = [plan.base] if plan.base else []
            relatives += [planner.plans[c] for c in planner.children.get(plan.name, [])]
            for other in relatives:
                if other is not None and other.refusal is not None:
                    plan.refusal = Refused(
                        f"{other.name} in the same class hierarchy is not migrated "
                        f"({other.refusal.reason})"
                    )
                    changed = True
                    break


def rebuild(planner: Planner, plan: Plan) -> cst.ClassDef:
    """The class of ``plan`` with its new methods and the decorator."""
    node = plan.node
    decorators = [d for d in node.decorators if not planner.is_our_decorator(d)]
    arg = f"(intermediates={plan.intermediates})" if plan.intermediates else ""
    ours = cst.Decorator(cst.parse_expression(f"{planner.api}.{planner.function_name}{arg}"))
    node = node.with_changes(decorators=[ours, *decorators])
    if isinstance(node.body, cst.SimpleStatementSuite):  # `class Sub(Base): pass`
        if not plan.additions:
            return node
        lines = [cst.SimpleStatementLine([small]) for small in node.body.body]
        node = node.with_changes(body=cst.IndentedBlock(lines))
    assert isinstance(node.body, cst.IndentedBlock)
    body: List[cst.BaseStatement] = []
    for stmt in node.body.body:
        body += plan.replacements.get(id(stmt), [stmt])
    body += plan.additions
    return node.with_changes(body=node.body.with_changes(body=body))


def checked_classes(planner: Planner, plans: List[Plan]) -> Dict[int, cst.ClassDef]:
    """id(old class) -> its rewrite, for the plans whose rewrite passes :func:`unsound`; the
    others (and their in-file hierarchies) are refused with the reason."""
    while True:
        refuse_families(planner)
        new: Dict[int, cst.ClassDef] = {}
        failed = False
        for plan in plans:
            if plan.refusal is not None or not plan.decorate:
                continue
            node = rebuild(planner, plan)
            allowed = {planner.api, plan.ref.split(".")[0], planner.torch_module() or "torch"}
            reason = unsound(plan.node, node, allowed)
            if reason is not None:
                plan.refusal = Refused(
                    f"migrate's rewrite of it fails migrate's own check: {reason}; the class is "
                    "left unchanged (please report it)"
                )
                failed = True
            new[id(plan.node)] = node
        if not failed:
            return new


def _parse(source: Union[str, bytes]) -> cst.Module:
    return cst.parse_module(source)


def _first_unkept_line(old: str, written: str) -> int:
    """The first line (1-based) LibCST writes differently from ``old``; 0 if none."""
    if old == written:
        return 0
    old_lines, new_lines = LINE.findall(old), LINE.findall(written)  # not str.splitlines: a
    pairs = zip(old_lines, new_lines)  # form feed does not end a line of Python
    return next((n for n, (a, b) in enumerate(pairs, 1) if a != b), len(old_lines))


def migrate_source(
    source: Union[str, bytes],
    path: str = "<string>",
    decorator: str = DEFAULT_DECORATOR,
    line_length: int = DEFAULT_LINE_LENGTH,
) -> Result:
    """Migrate the legacy Functions of one module's source; never raises for a refused class.

    ``source`` as bytes (a file's content) keeps its encoding, byte-order mark and line endings
    (``Result.new_bytes()``); the lines it writes longer than ``line_length`` are wrapped as
    black wraps them. Raises ``libcst.ParserSyntaxError`` for source that does not parse.

    Example::

        result = migrate_source(text, "ops.py")
        result.new_source, result.migrated, [str(r) for r in result.refusals]
    """
    wrapper = MetadataWrapper(_parse(source))
    module = wrapper.module
    old = source.decode(module.encoding) if isinstance(source, bytes) else source
    positions = wrapper.resolve(PositionProvider)
    planner = Planner(module, decorator)
    result = Result(path, old, old, encoding=module.encoding)
    plans = []
    for node in planner.function_classes():
        if planner.already_decorated(node) and "setup_context" in methods_of(node):
            continue
        plans.append(planner.plan(node))
    new = checked_classes(planner, plans)
    for plan in plans:
        if plan.refusal is not None:
            where = plan.refusal.node
            line = positions[where if where in positions else plan.node].start.line  # type: ignore[index]
            result.refusals.append(Refusal(path, line, plan.name, plan.refusal.reason))
        elif plan.decorate:
            result.migrated.append(plan.name)
            line = positions[plan.node].start.line  # type: ignore[index]
            result.notes += [Refusal(path, line, plan.name, note) for note in plan.notes]
    if not new:
        return result
    unfaithful = _first_unkept_line(old, module.code)
    if unfaithful:
        for plan in plans:
            if id(plan.node) in new:
                result.refusals.append(
                    Refusal(
                        path,
                        unfaithful,
                        plan.name,
                        f"LibCST would not write line {unfaithful} of this file back as it is "
                        "(a form feed inside an indented block, for example), so the file is "
                        "left unchanged; remove what is unusual on that line to let it through",
                    )
                )
        result.migrated, result.notes = [], []
        return result
    rewritten = drop_unused_amp_imports(module, module.visit(ReplaceClasses(new)))
    module = add_import(rewritten, planner.import_module, planner.api, path)
    result.new_source = _wrapped(old, module.code, line_length, path)
    return result


def _wrapped(old: str, new: str, line_length: int, path: str) -> str:
    """``new`` with the lines migrate wrote kept within ``line_length`` (as it is, should the
    wrapped text not parse: a layout is never worth a broken file). A comma follows ``*args``
    where black would put one (the Pythons the file at ``path`` targets)."""
    file = Path(path) if Path(path).is_file() else None
    wrapped = wrap_new_lines(old, new, line_length, star_commas(old, file))
    try:
        ast.parse(wrapped)
    except SyntaxError:
        return new
    return wrapped
