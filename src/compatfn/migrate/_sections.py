"""Which import section a module belongs to, as the project's isort or ruff settings place it.

The settings are read from the nearest folder above the file that has any (the search stops at
a repository's root): isort's ``known_first_party``, ``known_third_party``,
``known_local_folder`` and ``default_section`` (``.isort.cfg``, ``pyproject.toml``
``[tool.isort]``, ``setup.cfg``/``tox.ini`` ``[isort]``) and ruff's ``known-first-party``,
``known-third-party`` and ``known-local-folder`` (``[tool.ruff.lint.isort]``, ruff.toml). As
the tools do, a module listed as known goes to that section (the standard library first); one
found in the project's folder (the one with the settings, else the repository's; else in a
folder the path names) or its ``src/`` is first party; any other, ``default_section`` (third party
unless set). Example::

    sections_for(Path("src/mylib/ops.py")).of("mylib.utils", 0)  # FIRST_PARTY
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Dict, List, Optional, Tuple

from ._layout import _ini_parser, _table_value, _toml_lines

FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY, LOCAL = range(5)

#: Standard-library modules, for Pythons without ``sys.stdlib_module_names`` (before 3.10).
_COMMON_STDLIB = frozenset(
    [
        "__future__",
        "abc",
        "argparse",
        "array",
        "ast",
        "asyncio",
        "collections",
        "contextlib",
        "copy",
        "dataclasses",
        "enum",
        "functools",
        "importlib",
        "inspect",
        "io",
        "itertools",
        "json",
        "logging",
        "math",
        "numbers",
        "operator",
        "os",
        "pathlib",
        "pickle",
        "random",
        "re",
        "string",
        "sys",
        "tempfile",
        "threading",
        "time",
        "types",
        "typing",
        "unittest",
        "warnings",
        "weakref",
    ]
)
STDLIB_MODULES = frozenset(getattr(sys, "stdlib_module_names", _COMMON_STDLIB))

_KNOWN = {"first_party": FIRST_PARTY, "third_party": THIRD_PARTY, "local_folder": LOCAL}
#: (file, section or TOML table, spelling of the keys: "_" isort, "-" ruff)
_SOURCES: Tuple[Tuple[str, str, str], ...] = (
    (".isort.cfg", "settings", "_"),
    (".isort.cfg", "isort", "_"),
    ("pyproject.toml", "tool.isort", "_"),
    ("pyproject.toml", "tool.ruff.lint.isort", "-"),
    ("pyproject.toml", "tool.ruff.isort", "-"),
    ("ruff.toml", "lint.isort", "-"),
    ("ruff.toml", "isort", "-"),
    (".ruff.toml", "lint.isort", "-"),
    (".ruff.toml", "isort", "-"),
    ("setup.cfg", "isort", "_"),
    ("setup.cfg", "tool:isort", "_"),
    ("tox.ini", "isort", "_"),
)


@dataclass(frozen=True)
class Sections:
    """The section of each module for one file: ``known`` (module -> section), the folders
    first-party modules live in (``roots``), and the section of every other one (``default``)."""

    known: Tuple[Tuple[str, int], ...] = ()
    roots: Tuple[Path, ...] = ()  # the project's folder and its src/, where first party lives
    default: int = THIRD_PARTY
    force_sort: bool = False  # force_sort_within_sections: ``import x`` and ``from`` lines mixed

    def of(self, module: str, level: int) -> int:
        """The section of ``module`` imported with ``level`` leading dots."""
        top = module.split(".")[0]
        if level:
            return LOCAL
        if top == "__future__":
            return FUTURE
        if top in STDLIB_MODULES:
            return STDLIB
        for name, section in sorted(self.known, key=lambda item: item[1]):
            if module == name or module.startswith(f"{name}."):
                return section
        if any((root / top).is_dir() or (root / f"{top}.py").is_file() for root in self.roots):
            return FIRST_PARTY
        return self.default


def sections_for(path: str) -> Sections:
    """The sections of imports in the file at ``path`` (See the module's docstring); a path
    that names no file (source migrated from a string) gets the tools' defaults."""
    if not Path(path).is_file():
        return Sections()
    known, default, root, force_sort = _settings(Path(path).resolve().parent)
    roots: Tuple[Path, ...] = ()
    if root is not None:
        roots = (root, root / "src")
    else:  # no project to look in: the current folder and those the path names
        roots = tuple(Path(*PurePath(path).parts[:i]) for i in range(len(PurePath(path).parts)))
    return Sections(known, roots, THIRD_PARTY if default is None else default, force_sort)


_Settings = Tuple[Tuple[Tuple[str, int], ...], Optional[int], Optional[Path], bool]


@functools.lru_cache(maxsize=None)
def _settings(folder: Path) -> _Settings:
    """(known modules and their sections, the default section, the project's folder, whether
    sections are force-sorted) from the nearest folder with settings; the project's folder is
    that one, else the repository's."""
    for current in [folder, *folder.parents]:
        values: Dict[str, List[str]] = {}
        for name, section, dash in _SOURCES:
            if (current / name).is_file():
                for key, found in _read(current / name, section, dash).items():
                    values.setdefault(key, found)
        if values:
            known = tuple((module, _KNOWN[key]) for key in _KNOWN for module in values.get(key, []))
            default = values.get("default_section", [""])[0].upper()
            force_sort = values.get("force_sort_within_sections", [""])[0].lower() in _TRUE
            placed = {"FIRSTPARTY": FIRST_PARTY, "LOCALFOLDER": LOCAL}.get(default)
            return known, placed, current, force_sort
        if (current / ".git").exists() or (current / ".hg").exists():
            return (), None, current, False
    return (), None, None, False


_TRUE = ("true", "1", "yes", "on")


def _read(path: Path, section: str, dash: str) -> Dict[str, List[str]]:
    """The known lists (and ``default_section``, ``force_sort_within_sections``) set in
    ``section`` of one file, by key name spelled with ``_``."""
    keys = [*(f"known{dash}{k.replace('_', dash)}" for k in _KNOWN), "default_section"]
    keys.append(f"force{dash}sort{dash}within{dash}sections")
    if path.suffix == ".toml":
        raw = {key: _toml_list(path, section, key) for key in keys}
    else:
        raw = {key: _ini_list(path, section, key) for key in keys}
    return {key.replace("-", "_").replace("known_", ""): v for key, v in raw.items() if v}


def _ini_list(path: Path, section: str, key: str) -> List[str]:
    parser = _ini_parser(path)
    value = parser.get(section, key, fallback="") if parser is not None else ""
    return [item.strip() for item in re.split(r"[,\s]+", value or "") if item.strip()]


def _toml_list(path: Path, section: str, key: str) -> List[str]:
    """A string, an array of strings (on one line or several) or a bare word (``true``) set to
    ``key`` in ``[section]``."""
    text = _table_value(_toml_lines(path), section, key) or ""
    strings = [a or b for a, b in re.findall(r'"([^"]*)"|\'([^\']*)\'', text)]
    return strings or ([text.strip()] if re.fullmatch(r"\s*\w+\s*", text) else [])
