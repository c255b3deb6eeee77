"""Keep the lines the codemod writes within the file's line length, laid out as black lays them out.

The line length is the one the project's formatter or linter is set to, read from the nearest
configuration above the file (:func:`line_length_for`); statements the codemod did not write or
change are never touched (:func:`wrap_new_lines`).

Example::

    new = wrap_new_lines(old_source, new_source, line_length_for(Path("src/mylib/ops.py")))
"""

from __future__ import annotations

import configparser
import difflib
import io
import re
import tokenize
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ._join import relayout
from ._leaves import width
from ._wrap import NO_STAR_COMMAS, StarCommas, wrap

DEFAULT_LINE_LENGTH = 88  # black's and ruff's default
FLAKE8_LINE_LENGTH = 79  # flake8's and pycodestyle's default
#: (file, section, key) in the order they are read in each folder; the first one set wins.
TOML_KEYS = (
    ("pyproject.toml", "tool.black", "line-length"),
    ("pyproject.toml", "tool.ruff", "line-length"),
    ("ruff.toml", "", "line-length"),
    (".ruff.toml", "", "line-length"),
)
INI_KEYS = (
    ("setup.cfg", "flake8", "max-line-length"),
    ("tox.ini", "flake8", "max-line-length"),
    (".flake8", "flake8", "max-line-length"),
    ("setup.cfg", "pycodestyle", "max-line-length"),
    ("tox.ini", "pycodestyle", "max-line-length"),
)
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def _toml_lines(path: Path) -> List[str]:
    """The lines of a TOML file without comments, stripped."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return [raw.split("#", 1)[0].strip() for raw in text.splitlines()]


def _toml_table(line: str) -> Optional[str]:
    """The table a ``[table]`` header line opens (quotes and spaces dropped), else None."""
    header = re.fullmatch(r"\[\s*([^\[\]]+?)\s*\]", line)
    return header.group(1).replace('"', "").replace(" ", "") if header else None


def _toml_value(path: Path, section: str, key: str) -> Optional[int]:
    """``key`` of ``[section]`` in a TOML file where it is a number, read by a plain scan of its
    lines (no TOML parser on Python 3.8-3.10)."""
    value = (_table_value(_toml_lines(path), section, key) or "").strip()
    return int(value) if value.isdigit() else None


def _ini_parser(path: Path) -> Optional[configparser.ConfigParser]:
    """The INI file read, or None where it does not parse."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    return parser


def _ini_value(path: Path, section: str, key: str) -> Optional[int]:
    parser = _ini_parser(path)
    try:
        value = parser.get(section, key, fallback=None) if parser is not None else None
    except configparser.Error:
        return None
    return int(value) if value is not None and value.strip().isdigit() else None


def line_length_for(path: Path, cache: Optional[Dict[Path, Optional[int]]] = None) -> int:
    """The line length set for ``path`` by the nearest folder above it that sets one: black's
    or ruff's ``line-length`` (pyproject.toml, ruff.toml), flake8's or pycodestyle's
    ``max-line-length`` (setup.cfg, tox.ini, .flake8); the search stops at a repository's root
    (``.git``, ``.hg``). A ``[tool.black]`` or ``[tool.ruff]`` table without a length is 88,
    a ``[flake8]`` or ``[pycodestyle]`` section without one 79, as those tools default. Where
    nothing is set, the file's own: its longest line, within 79 to 88."""
    cache = {} if cache is None else cache
    folder = Path(path).resolve().parent
    visited: List[Path] = []
    found: Optional[int] = None
    for current in [folder, *folder.parents]:
        if current in cache:
            found = cache[current]
            break
        visited.append(current)
        found = _folder_value(current)
        if found is not None:
            break
        if (current / ".git").exists() or (current / ".hg").exists():
            break
    for seen in visited:
        cache[seen] = found
    return found if found is not None else _length_of_file(Path(path))


def _length_of_file(path: Path) -> int:
    """The longest line of ``path``, within flake8's 79 and black's 88."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return DEFAULT_LINE_LENGTH
    longest = max((len(line) for line in lines), default=0)
    return min(DEFAULT_LINE_LENGTH, max(FLAKE8_LINE_LENGTH, longest))


def _folder_value(folder: Path) -> Optional[int]:
    for name, section, key in TOML_KEYS:
        if (folder / name).is_file():
            value = _toml_value(folder / name, section, key)
            if value is not None:
                return value
    for name, section, key in INI_KEYS:
        if (folder / name).is_file():
            value = _ini_value(folder / name, section, key)
            if value is not None:
                return value
    for name, section, _ in TOML_KEYS:  # a formatter configured with its default length
        if section and (folder / name).is_file() and _toml_has(folder / name, section):
            return DEFAULT_LINE_LENGTH
    for name, section, _ in INI_KEYS:  # a linter configured with its default length
        if (folder / name).is_file() and _ini_has(folder / name, section):
            return FLAKE8_LINE_LENGTH
    return None


def _toml_has(path: Path, section: str) -> bool:
    """Whether the TOML file has table ``[section]`` (or a sub-table of it)."""
    tables = (_toml_table(line) for line in _toml_lines(path))
    return any(t is not None and (t == section or t.startswith(f"{section}.")) for t in tables)


def _ini_has(path: Path, section: str) -> bool:
    parser = _ini_parser(path)
    return parser is not None and parser.has_section(section)


def _statements(source: str) -> List[Tuple[int, int]]:
    """The first and last line (0-based) of each logical line of ``source``."""
    found: List[Tuple[int, int]] = []
    start: Optional[int] = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if token.type == tokenize.NEWLINE:
                if start is not None:
                    found.append((start - 1, token.start[0] - 1))
                start = None
            elif start is None and token.type != tokenize.ENDMARKER:
                start = token.start[0]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return found


def wrap_new_lines(old: str, new: str, limit: int, star_commas: StarCommas = NO_STAR_COMMAS) -> str:
    """``new`` with each statement migrate wrote or changed laid out as black lays it out within
    ``limit``: a line longer than ``limit`` wrapped, a statement over several lines joined where
    it fits and split again where it does not (:func:`._join.relayout`). Left as they are: a line
    as long in ``old``, and a statement of several lines that was not in black's layout in
    ``old`` (changed, or moved unchanged): the author's own style. ``star_commas``: where a comma
    follows ``*args`` (:func:`._targets.star_commas`)."""
    old_lines, new_lines = LINE.findall(old), LINE.findall(new)
    long_before = {line.strip() for line in old_lines if width(line.rstrip("\r\n")) > limit}
    authors: Optional[Tuple[Set[int], Set[Tuple[str, ...]]]] = None  # read when first needed
    opcodes = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes()
    for first, last in reversed(_statements(new)):
        aligned = _aligned(opcodes, first, last)
        if aligned is None:
            continue  # not changed
        texts = _texts(new_lines, first, last)
        if first < last:
            if authors is None:
                authors = _authors_statements(old, old_lines, limit, star_commas)
            stripped = tuple(text.strip() for text in texts)
            if stripped in authors[1] or aligned & authors[0]:
                continue
            laid = relayout(texts, limit, star_commas)
        elif width(texts[0]) <= limit or texts[0].strip() in long_before:
            continue
        else:
            laid = wrap(texts[0], limit, star_commas)
        if laid:
            ending = new_lines[last][len(texts[-1]) :]
            between = ending or ("\r\n" if new.count("\r\n") else "\n")
            new_lines[first : last + 1] = [
                *(part + between for part in laid[:-1]),
                laid[-1] + ending,
            ]
    return "".join(new_lines)


def _authors_statements(
    old: str, old_lines: List[str], limit: int, star_commas: StarCommas
) -> Tuple[Set[int], Set[Tuple[str, ...]]]:
    """The lines, and the stripped texts, of the statements of several lines in ``old`` that are
    not in black's layout (the author's own style: :func:`._join.relayout` would change them)."""
    authors = [
        (first, last)
        for first, last in _statements(old)
        if first < last and relayout(_texts(old_lines, first, last), limit, star_commas)
    ]
    lines = {n for first, last in authors for n in range(first, last + 1)}
    texts = {tuple(line.strip() for line in old_lines[a : b + 1]) for a, b in authors}
    return lines, texts


def _texts(lines: List[str], first: int, last: int) -> List[str]:
    return [line.rstrip("\r\n") for line in lines[first : last + 1]]


def _aligned(
    opcodes: Sequence[Tuple[str, int, int, int, int]], first: int, last: int
) -> Optional[Set[int]]:
    """The lines of the old source that lines ``first`` to ``last`` of the new one come from
    (difflib's pairing), or None where all of them are unchanged."""
    changed = False
    aligned: Set[int] = set()
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            low, high = max(j1, first), min(j2, last + 1)
            aligned.update(range(i1 + low - j1, i1 + high - j1))
        elif (j1 <= last and j2 > first) or (j1 == j2 and first < j1 <= last):
            changed = True
            aligned.update(range(i1, i2))
    return aligned if changed else None


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
