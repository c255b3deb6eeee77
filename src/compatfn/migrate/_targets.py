"""Whether the lines the codemod wraps get a comma after ``*args``, as black decides.

Black puts a trailing comma after ``*args`` or ``**kwargs`` in an exploded ``def`` only where
every Python the file targets accepts one (3.6 and later), in an exploded call where every one
is 3.5 or later (:func:`star_commas`). It reads the targets from
``[tool.black] target-version``, else from ``[project] requires-python`` (black 23.1 and later),
else infers them from what the file's own source uses: f-strings, numeric underscores,
``from __future__ import annotations``, ``:=``, positional-only parameters, ``match``,
``except*``, relaxed decorators, parenthesized context managers, unpacking in ``return`` and
``yield``, a tuple assigned in an annotated assignment, ``*`` in a subscript, type parameters, a
comma already after a ``def``'s starred parameters (:func:`targets_python_3_6`). A comma already
after ``*args`` in a call or a class's bases tells 3.5+: calls get one, ``def`` lines not.

Example::

    targets_python_3_6("x = f'{y}'\\n", None)  # True: f-strings are Python 3.6+
    star_commas("g(\\n    *a,\\n)\\n", None)  # StarCommas(calls=True, defs=False)
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path
from typing import Any, List, Optional

from ._layout import _table_value, _toml_lines
from ._wrap import StarCommas

#: Where a nearest pyproject.toml stops the search for one (a repository's root).
_ROOTS = (".git", ".hg")


def star_commas(source: str, path: Optional[Path]) -> StarCommas:
    """Where black puts a comma after ``*args`` in what it explodes of ``source`` (the file at
    ``path``, if any): calls where it targets Python 3.5+, ``def`` lines where 3.6+."""
    lowest = _configured(path) if path is not None else None
    if lowest is not None:
        return StarCommas(calls=lowest >= 5, defs=lowest >= 6)
    if _uses_python_3_6(source):
        return StarCommas(calls=True, defs=True)
    return StarCommas(calls=_star_comma_in_call(source), defs=False)


def targets_python_3_6(source: str, path: Optional[Path]) -> bool:
    """Whether black takes ``source`` (the file at ``path``, if any) to target Python 3.6+."""
    lowest = _configured(path) if path is not None else None
    if lowest is not None:
        return lowest >= 6
    return _uses_python_3_6(source)


def _configured(path: Path) -> Optional[int]:
    """The lowest Python 3 minor the nearest pyproject.toml above ``path`` names, None where it
    says nothing."""
    folder = Path(path).resolve().parent
    for current in [folder, *folder.parents]:
        toml = current / "pyproject.toml"
        if toml.is_file():
            return _from_pyproject(toml)
        if any((current / root).exists() for root in _ROOTS):
            return None
    return None


def _from_pyproject(toml: Path) -> Optional[int]:
    """black's lowest ``target-version``, else ``requires-python``'s lowest 3.x: its minor."""
    try:
        lines = _toml_lines(toml)
    except OSError:
        return None
    targets = _table_value(lines, "tool.black", "target-version")
    if targets:
        minors = [int(m) for m in re.findall(r"py3(\d+)", targets)]
        if minors:
            return min(minors)
    requires = _table_value(lines, "project", "requires-python")
    if requires:
        lowest = re.search(r"(?:>=|~=|==|>)\s*3\.(\d+)", requires)
        if lowest:
            return int(lowest.group(1))
    return None


def _uses_python_3_6(source: str) -> bool:
    """Whether ``source`` uses syntax black knows to need Python 3.6 or later."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    if any(_needs_python_3_6(node, source) for node in ast.walk(tree)):
        return True
    return _has_numeric_underscores(source)


def _needs_python_3_6(node: ast.AST, source: str) -> bool:
    if isinstance(node, (ast.JoinedStr, ast.NamedExpr)):
        return True
    if isinstance(node, ast.arguments) and node.posonlyargs:
        return True
    if isinstance(node, ast.arg) and isinstance(node.annotation, ast.Starred):  # *args: *Ts
        return True
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return any(alias.name == "annotations" for alias in node.names)
    newer = tuple(
        getattr(ast, name) for name in ("Match", "TryStar", "TypeAlias") if hasattr(ast, name)
    )
    if newer and isinstance(node, newer):
        return True
    if getattr(node, "type_params", None):  # def f[T](), class A[T]
        return True
    decorated = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    if decorated and any(_relaxed_decorator(d, source) for d in node.decorator_list):  # type: ignore[attr-defined]
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _star_comma_in_def(node, source)
    if isinstance(node, (ast.Return, ast.Yield)) and isinstance(node.value, ast.Tuple):
        starred = any(isinstance(e, ast.Starred) for e in node.value.elts)
        return starred and not _parenthesized(node.value, source)
    if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Tuple):
        return not _parenthesized(node.value, source)
    if isinstance(node, ast.Subscript):  # a[*b], Tuple[*Ts]
        index = node.slice
        return isinstance(index, ast.Starred) or (
            isinstance(index, ast.Tuple) and any(isinstance(e, ast.Starred) for e in index.elts)
        )
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return _parenthesized_context_managers(node, source)
    return False


def _relaxed_decorator(expression: ast.expr, source: str) -> bool:
    """Anything but a dotted name, or a call of one (black's relaxed decorators, 3.9+)."""
    if _after_parenthesis(expression, source):
        return True
    if isinstance(expression, ast.Call):
        expression = expression.func
    while isinstance(expression, ast.Attribute):
        expression = expression.value
    return not isinstance(expression, ast.Name)


def _after_parenthesis(node: ast.expr, source: str) -> bool:
    """Whether an opening parenthesis precedes ``node`` on its line (``@(a)``: ast drops it)."""
    lines = _lines(source)
    line = lines[node.lineno - 1] if 0 < node.lineno <= len(lines) else ""
    return line[: node.col_offset].rstrip().endswith("(")


@functools.lru_cache(maxsize=4)
def _lines(source: str) -> List[str]:
    return source.splitlines(True)


def _header(node: Any, source: str) -> str:
    """The lines of a compound statement's header (its body's first line too, where the body
    is on the header's line)."""
    lines = _lines(source)
    return "".join(lines[node.lineno - 1 : max(node.body[0].lineno - 1, node.lineno)])


def _tokens(text: str) -> List[tokenize.TokenInfo]:
    """The significant tokens of ``text`` (no comments, line breaks or indentation)."""
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    try:
        found = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return [t for t in found if t.type not in skipped and t.type != tokenize.ENDMARKER]


def _closing(tokens: List[tokenize.TokenInfo], opening: int) -> int:
    """The index of the bracket closing ``tokens[opening]`` (-1 if none)."""
    depth = 0
    for n in range(opening, len(tokens)):
        if tokens[n].string in "([{":
            depth += 1
        elif tokens[n].string in ")]}":
            depth -= 1
            if depth == 0:
                return n
    return -1


def _parenthesized(node: ast.AST, source: str) -> bool:
    """Whether ``node``'s own source is one pair of parentheses around it all."""
    tokens = _tokens(ast.get_source_segment(source, node) or "")
    return bool(tokens) and tokens[0].string == "(" and _closing(tokens, 0) == len(tokens) - 1


def _star_comma_in_def(node: ast.AST, source: str) -> bool:
    """A ``def`` whose parameters, starred ones among them, end with a comma."""
    args = node.args  # type: ignore[attr-defined]
    if not (args.vararg or args.kwarg or args.kwonlyargs):
        return False
    tokens = _tokens(_header(node, source))
    names = [n for n, t in enumerate(tokens) if t.string == "def"]
    if not names or names[0] + 2 >= len(tokens):
        return False
    opening = names[0] + 2
    if tokens[opening].string == "[":  # type parameters
        opening = _closing(tokens, opening) + 1
    end = _closing(tokens, opening) if 0 < opening < len(tokens) else -1
    return end > 0 and tokens[end - 1].string == ","


def _star_comma_in_call(source: str) -> bool:
    """A call, or a class's bases, whose arguments, starred ones among them, end with a comma."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            arguments: List[ast.AST] = [*node.args, *node.keywords]
            tokens = _tokens(ast.get_source_segment(source, node) or "")
            end = len(tokens) - 1
            opening = _opening(tokens, end)
        elif isinstance(node, ast.ClassDef):
            arguments = [*node.bases, *node.keywords]
            tokens = _tokens(_header(node, source))
            opening = 2 if len(tokens) > 2 else -1  # class Name (
            if 0 < opening < len(tokens) and tokens[opening].string == "[":  # type parameters
                opening = _closing(tokens, opening) + 1
            end = _closing(tokens, opening) if 0 < opening < len(tokens) else -1
        else:
            continue
        starred = any(
            isinstance(a, ast.Starred) or (isinstance(a, ast.keyword) and a.arg is None)
            for a in arguments
        )
        if starred and 0 <= opening < end and tokens[end - 1].string == ",":
            return True
    return False


def _opening(tokens: List[tokenize.TokenInfo], closing: int) -> int:
    """The index of the ``(`` that ``tokens[closing]``, a ``)``, closes (-1 if none)."""
    if not 0 <= closing < len(tokens) or tokens[closing].string != ")":
        return -1
    depth = 0
    for n in range(closing, -1, -1):
        depth += (tokens[n].string in ")]}") - (tokens[n].string in "([{")
        if depth == 0:
            return n
    return -1


def _parenthesized_context_managers(node: ast.AST, source: str) -> bool:
    """``with (a as b, ...):``: parentheses around the items, an ``as`` among them."""
    tokens = _tokens(_header(node, source))
    start = 1 if tokens and tokens[0].string == "async" else 0
    if len(tokens) < start + 2 or tokens[start + 1].string != "(":
        return False
    end = _closing(tokens, start + 1)
    if end < 0 or end + 1 >= len(tokens) or tokens[end + 1].string != ":":
        return False
    depth = 0
    for t in tokens[start + 1 : end]:
        depth += (t.string in "([{") - (t.string in ")]}")
        if depth == 1 and t.string == "as":
            return True
    return False


def _has_numeric_underscores(source: str) -> bool:
    return any(t.type == tokenize.NUMBER and "_" in t.string for t in _tokens(source))
