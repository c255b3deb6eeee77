"""compatfn.migrate._targets: whether black takes a file to target Python 3.6+ (and so puts a
comma after ``*args`` in what it explodes), from its configuration or from the file's source."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from compatfn.migrate._targets import star_commas, targets_python_3_6
from compatfn.migrate._wrap import StarCommas

PLAIN = "def f(x, *args):\n    return g(x, *args)\n"


@pytest.mark.parametrize(
    "source, expected",
    [
        (PLAIN, False),
        ("x = f'{y}'\n", True),
        ("from __future__ import annotations\n", True),
        ("from __future__ import division\n", False),
        ("n = 1_000\n", True),
        ("if (n := 1):\n    pass\n", True),
        ("def f(a, /, b):\n    pass\n", True),
        ("x = '{}'.format(y)  # f'{y}' in a comment\n", False),
        ("def broken(:\n", False),
    ],
)
def test_from_the_source(source, expected):
    assert targets_python_3_6(source, None) is expected


def _since(version: tuple, source: str, expected: bool) -> Any:
    """A case whose syntax this Python parses only from ``version`` on (a file of it cannot be
    migrated by an older one)."""
    shown = ".".join(map(str, version))
    older = pytest.mark.skipif(sys.version_info < version, reason=f"Python {shown} syntax")
    return pytest.param(source, expected, marks=older)


#: Each measured with black 26.10.1 (``get_features_used``: its targets all 3.6+, or not).
@pytest.mark.parametrize(
    "source, expected",
    [
        _since((3, 9), "@a(b)(c)\ndef f():\n    pass\n", True),  # relaxed decorators
        _since((3, 9), "@(a)\ndef f():\n    pass\n", True),
        _since((3, 9), "@a[1]\nclass C:\n    pass\n", True),
        ("@a.b(c)\ndef f():\n    pass\n", False),
        _since((3, 9), "with (a as b, c as d):\n    pass\n", True),  # parenthesized
        _since((3, 9), "async def f():\n    async with (a as b):\n        pass\n", True),
        ("with (a, b):\n    pass\n", False),  # a tuple
        ("with (a) as b:\n    pass\n", False),
        ("def f():\n    return 1, *a\n", True),  # unpacking on return/yield
        ("def f():\n    yield 1, *a\n", True),
        ("def f():\n    return (1, *a)\n", False),
        ("x: tuple = 1, 2\n", True),  # annotated assignment of a bare tuple
        ("x: tuple = (1, 2)\n", False),
        ("x: tuple = (1), (2)\n", True),
        _since((3, 11), "x: Tuple[*Ts]\n", True),  # variadic generics
        _since((3, 11), "def f(*args: *Ts):\n    pass\n", True),
        _since((3, 12), "def f[T](x: T) -> T:\n    return x\n", True),  # type parameters
        _since((3, 12), "class A[T]:\n    pass\n", True),
        _since((3, 12), "type X = int\n", True),
        ("def f(\n    a,\n    *args,\n):\n    pass\n", True),  # a comma after starred params
        ("def f(\n    *,\n    a,\n):\n    pass\n", True),
        ("def f(\n    a,\n    b,\n):\n    pass\n", False),
        ("def f(*a,): pass\n", True),
        ("f(\n    *args,\n)\n", False),  # a call's: 3.5+ (calls only, below)
        ("x = (\n    *a,\n)\n", False),
        ("async def f():\n    await g()\n", False),
    ],
)
def test_black_features_from_the_source(source, expected):
    assert targets_python_3_6(source, None) is expected


NONE, CALLS, BOTH = StarCommas(), StarCommas(calls=True), StarCommas(calls=True, defs=True)


#: Each measured with black 26.10.1: a comma after ``*args`` in an exploded call where every
#: target it infers has TRAILING_COMMA_IN_CALL (3.5+), in a ``def`` where TRAILING_COMMA_IN_DEF.
@pytest.mark.parametrize(
    "source, expected",
    [
        (PLAIN, NONE),
        ("f(\n    *args,\n)\n", CALLS),
        ("f(\n    **kw,\n)\n", CALLS),
        ("print(*a, sep='',)\n", CALLS),
        ("f(*a)(\n    b,\n)\n", NONE),  # the comma is not after a star's call
        ("f(g(*a),)\n", NONE),  # the star is in the inner call, the comma in the outer
        ("f(g(*a,))\n", CALLS),
        ("class A(\n    *bases,\n):\n    pass\n", CALLS),
        ("class A(B,):\n    pass\n", NONE),
        ("f(\n    a,\n    b,\n)\n", NONE),
        ("f = lambda *a,: 0\n", NONE),
        ("def f(\n    *args,\n):\n    pass\n", BOTH),
        ("x = f'{y}'\nf(\n    *args,\n)\n", BOTH),
    ],
)
def test_star_commas_from_the_source(source, expected):
    assert star_commas(source, None) == expected


def _project(tmp_path: Path, pyproject: str) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(pyproject)
    module = tmp_path / "src" / "lib" / "ops.py"
    module.parent.mkdir(parents=True)
    module.write_text(PLAIN)
    return module


@pytest.mark.parametrize(
    "pyproject, expected",
    [
        ('[tool.black]\ntarget-version = ["py38", "py39"]\n', True),
        ("[tool.black]\ntarget-version = [\n  'py35',\n  'py36',\n]\n", False),
        ('[project]\nname = "lib"\nrequires-python = ">=3.8"\n', True),
        ('[project]\nrequires-python = ">=3.5"\n', False),
        # black's setting wins over the metadata
        ('[project]\nrequires-python = ">=3.8"\n[tool.black]\ntarget-version = ["py35"]\n', False),
        # nothing said: the file's own source decides
        ("[tool.black]\nline-length = 100\n", False),
    ],
)
def test_from_the_configuration(tmp_path, pyproject, expected):
    assert targets_python_3_6(PLAIN, _project(tmp_path, pyproject)) is expected


@pytest.mark.parametrize(
    "pyproject, expected",
    [
        ('[tool.black]\ntarget-version = ["py38", "py39"]\n', BOTH),
        ("[tool.black]\ntarget-version = [\n  'py35',\n  'py36',\n]\n", CALLS),
        ('[tool.black]\ntarget-version = ["py34"]\n', NONE),
        ('[project]\nrequires-python = ">=3.5"\n', CALLS),
        ('[project]\nrequires-python = ">=3.7"\n', BOTH),
    ],
)
def test_star_commas_from_the_configuration(tmp_path, pyproject, expected):
    assert star_commas(PLAIN, _project(tmp_path, pyproject)) == expected


def test_the_source_decides_where_the_configuration_says_nothing(tmp_path):
    module = _project(tmp_path, "[tool.black]\nline-length = 100\n")
    assert targets_python_3_6("x = f'{y}'\n", module) is True


def test_the_search_stops_at_the_repository_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nrequires-python = ">=3.8"\n')
    repository = tmp_path / "repo"
    (repository / ".git").mkdir(parents=True)
    module = repository / "ops.py"
    module.write_text(PLAIN)
    assert targets_python_3_6(PLAIN, module) is False
