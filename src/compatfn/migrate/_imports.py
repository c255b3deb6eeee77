"""Adding the decorator's import where isort or ruff (``I``) would put it.

The import goes into the module's first import block: after ``from __future__`` imports, in its
section (standard library, third party, first party, local: as the project's isort or ruff
settings place modules, see ``_sections``), straight ``import x`` lines before ``from x import
y`` lines, each sorted by module name ignoring case, as both tools do by default (with
``force_sort_within_sections``, every line by its text after ``import``/``from``).
A module with the same ``from`` import gets the name added to it. Example::

    add_import(cst.parse_module("import torch\\n"), "", "compatfn").code
    # 'import compatfn\\nimport torch\\n'
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

import libcst as cst

from ._sections import Sections, sections_for
from ._syntax import dotted, is_docstring


def _module_of(line: cst.SimpleStatementLine) -> Tuple[str, int, bool]:
    """(module name, relative level, is a from-import) of an import line."""
    small = line.body[0]
    if isinstance(small, cst.Import):
        return dotted(small.names[0].name) or "", 0, False
    assert isinstance(small, cst.ImportFrom)
    name = dotted(small.module) if small.module is not None else ""
    return name or "", len(small.relative), True


def _is_import_line(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _import_block(body: Sequence[cst.BaseStatement]) -> Tuple[int, int]:
    """[start, end) of the first run of import lines (empty, after the docstring, if none)."""
    start = next((i for i, stmt in enumerate(body) if _is_import_line(stmt)), None)
    if start is None:
        start = 1 if body and is_docstring(body[0]) else 0
        return start, start
    end = start
    while end < len(body) and _is_import_line(body[end]):
        end += 1
    if all(_module_of(line)[0] == "__future__" for line in body[start:end]):  # type: ignore[arg-type]
        later = next((i for i in range(end, len(body)) if _is_import_line(body[i])), None)
        if later is not None:  # `__all__ = [...]` or a comment between: the imports come later
            start, end = _import_block(body[later:])
            return later + start, later + end
    return start, end


def _already_imported(lines: Sequence[cst.BaseStatement], module: str, name: str) -> bool:
    for line in lines:
        for small in getattr(line, "body", ()):
            if isinstance(small, cst.Import) and not module:
                if any(dotted(a.name) == name and a.asname is None for a in small.names):
                    return True
            elif (
                isinstance(small, cst.ImportFrom)
                and module
                and not small.relative
                and small.module is not None
                and dotted(small.module) == module
                and not isinstance(small.names, cst.ImportStar)
                and any(dotted(a.name) == name and a.asname is None for a in small.names)
            ):
                return True
    return False


def _name_key(alias: cst.ImportAlias) -> Tuple[int, str]:
    """isort's order_by_type: CONSTANTS, then Classes, then the rest; case-insensitive within."""
    name = dotted(alias.name) or ""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower()


def _merge(line: cst.SimpleStatementLine, name: str) -> cst.SimpleStatementLine:
    small = line.body[0]
    assert isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar)
    aliases = sorted([*small.names, cst.ImportAlias(cst.Name(name))], key=_name_key)
    last = small.names[-1].comma
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    names = [a.with_changes(comma=comma) for a in aliases[:-1]]
    names.append(aliases[-1].with_changes(comma=last))
    return line.with_changes(body=[small.with_changes(names=names)])


def add_import(
    module: cst.Module, import_module: str, name: str, path: str = "<string>"
) -> cst.Module:
    """``module`` with ``import name`` (or ``from import_module import name``) added, sorted."""
    body: List[cst.BaseStatement] = list(module.body)
    start, end = _import_block(body)
    if _already_imported(body[start:end], import_module, name):
        return module
    sections = sections_for(path)
    code = f"from {import_module} import {name}\n" if import_module else f"import {name}\n"
    new = cst.parse_statement(code)
    assert isinstance(new, cst.SimpleStatementLine)
    ours = _place(sections, new)
    position = end
    for index in range(start, end):
        line = body[index]
        assert isinstance(line, cst.SimpleStatementLine)
        other, level, is_from = _module_of(line)
        if is_from and other == import_module and sections.of(other, level) == ours[0]:
            body[index] = _merge(line, name)
            return module.with_changes(body=body)
        if _place(sections, line) > ours:
            position = index
            break
    return module.with_changes(body=_insert(body, start, end, position, new, sections))


def _place(sections: Sections, line: cst.SimpleStatementLine) -> Tuple[int, bool, str]:
    """Where isort and ruff order an import line: its section, then (by default) ``import x``
    lines before ``from`` ones, each by module name ignoring case; with
    ``force_sort_within_sections``, by the line without its ``import``/``from`` ignoring case."""
    module, level, is_from = _module_of(line)
    if not sections.force_sort:
        return sections.of(module, level), is_from, module.lower()
    text = cst.Module([]).code_for_node(line.with_changes(leading_lines=[])).strip()
    return sections.of(module, level), False, re.sub(r"^(from|import)\s+", "", text).lower()


def _insert(
    body: List[cst.BaseStatement],
    start: int,
    end: int,
    position: int,
    new: cst.SimpleStatementLine,
    sections: Sections,
) -> List[cst.BaseStatement]:
    """Insert ``new`` at ``position``, with the blank lines that separate sections."""

    def section(index: int) -> Optional[int]:
        if not start <= index < end:
            return None
        line = body[index]
        assert isinstance(line, cst.SimpleStatementLine)
        module, level, _ = _module_of(line)
        return sections.of(module, level)

    small = new.body[0]
    assert isinstance(small, (cst.Import, cst.ImportFrom))
    mine = sections.of(*_module_of(new)[:2])
    before, after = section(position - 1), section(position)
    blank = cst.EmptyLine(indent=True)
    if start == end:  # no import block: a new one, apart from what surrounds it
        if position > 0:
            new = new.with_changes(leading_lines=[blank])
        if position < len(body):
            following = body[position]
            lines = list(getattr(following, "leading_lines", ()))
            if not lines or lines[0].comment is not None:
                body[position] = following.with_changes(leading_lines=[blank, *lines])
        return [*body[:position], new, *body[position:]]
    if after is not None and after == mine:
        following = body[position]
        assert isinstance(following, cst.SimpleStatementLine)
        new = new.with_changes(leading_lines=following.leading_lines)
        body[position] = following.with_changes(leading_lines=[])
    elif after is not None:  # a new section before the section that follows
        following = body[position]
        assert isinstance(following, cst.SimpleStatementLine)
        new = new.with_changes(leading_lines=following.leading_lines if before != mine else [])
        if before != mine:
            body[position] = following.with_changes(leading_lines=[blank])
    elif before is not None and before != mine:
        new = new.with_changes(leading_lines=[blank])
    return [*body[:position], new, *body[position:]]
