"""Whether the lines the codemod wraps get a comma after ``*args``, as black decides.

Black puts a trailing comma after ``*args`` or ``**kwargs`` in an exploded call or ``def`` only
where every Python the file targets accepts one (3.6 and later). It reads the targets from
``[tool.black] target-version``, else from ``[project] requires-python`` (black 23.1 and later),
else infers them from what the file's own source uses: f-strings, numeric underscores,
``from __future__ import annotations``, ``:=``, positional-only parameters, ``match``,
``except*`` (:func:`targets_python_3_6`).

Example::

    targets_python_3_6("x = f'{y}'\\n", None)  # True: f-strings are Python 3.6+
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import List, Optional

from ._layout import _toml_lines, _toml_table

#: Where a nearest pyproject.toml stops the search for one (a repository's root).
_ROOTS = (".git", ".hg")


def targets_python_3_6(source: str, path: Optional[Path]) -> bool:
    """Whether black takes ``source`` (the file at ``path``, if any) to target Python 3.6+."""
    configured = _configured(path) if path is not None else None
    if configured is not None:
        return configured
    return _uses_python_3_6(source)


def _configured(path: Path) -> Optional[bool]:
    """What the nearest pyproject.toml above ``path`` says, None where it says nothing."""
    folder = Path(path).resolve().parent
    for current in [folder, *folder.parents]:
        toml = current / "pyproject.toml"
        if toml.is_file():
            return _from_pyproject(toml)
        if any((current / root).exists() for root in _ROOTS):
            return None
    return None


def _from_pyproject(toml: Path) -> Optional[bool]:
    """black's ``target-version`` (every one 3.6+), else ``requires-python``'s lowest 3.x."""
    try:
        lines = _toml_lines(toml)
    except OSError:
        return None
    targets = _table_value(lines, "tool.black", "target-version")
    if targets:
        minors = [int(m) for m in re.findall(r"py3(\d+)", targets)]
        if minors:
            return min(minors) >= 6
    requires = _table_value(lines, "project", "requires-python")
    if requires:
        lowest = re.search(r"(?:>=|~=|==|>)\s*3\.(\d+)", requires)
        if lowest:
            return int(lowest.group(1)) >= 6
    return None


def _table_value(lines: List[str], table: str, key: str) -> Optional[str]:
    """The raw value of ``key`` in ``[table]`` of a TOML file's lines (as :func:`_toml_lines`
    gives them; a list may span lines), by a plain scan."""
    current = ""
    for n, line in enumerate(lines):
        header = _toml_table(line)
        if header is not None:
            current = header
            continue
        match = re.match(rf"{re.escape(key)}\s*=\s*(.*)", line)
        if match and current == table:
            rest = [match.group(1)]
            for more in lines[n + 1 :]:
                if rest[0].count("[") <= "".join(rest).count("]"):
                    break
                rest.append(more)
            return " ".join(rest)
    return None


def _uses_python_3_6(source: str) -> bool:
    """Whether ``source`` uses syntax black knows to need Python 3.6 or later."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    if any(_needs_python_3_6(node) for node in ast.walk(tree)):
        return True
    return _has_numeric_underscores(source)


def _needs_python_3_6(node: ast.AST) -> bool:
    if isinstance(node, (ast.JoinedStr, ast.NamedExpr)):
        return True
    if isinstance(node, ast.arguments) and node.posonlyargs:
        return True
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return any(alias.name == "annotations" for alias in node.names)
    newer = tuple(getattr(ast, name) for name in ("Match", "TryStar") if hasattr(ast, name))
    return bool(newer) and isinstance(node, newer)


def _has_numeric_underscores(source: str) -> bool:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    return any(token.type == tokenize.NUMBER and "_" in token.string for token in tokens)
