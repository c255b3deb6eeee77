"""compatfn.migrate's layout with black itself as the oracle: a module that black formatted at a
line length, migrated at that line length, is a module black leaves as it is, so a project that
runs ``black --check`` still passes after migrating. The corpus (``tests/migrate_corpus``) at
several lengths with trailing comments added, and hypothesis-written legacy Functions
(``tests/migrate_generated.py``) at drawn lengths.

black 26.10.1 needs Python 3.10+. nox installs it in each test session whose Python has it
(``tools/sessions.py``, ``LAYOUT_ORACLE``) and sets ``COMPATFN_EXPECT_BLACK``, under which a
missing black fails; elsewhere these tests skip, saying so.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BLACK_VERSION = "26.10.1"
if os.environ.get("COMPATFN_EXPECT_BLACK") and sys.version_info >= (3, 10):
    import black  # the session promised it: a missing black is a failure here
else:
    black = pytest.importorskip(
        "black", reason=f"black {BLACK_VERSION} (the layout oracle) is not installed"
    )
pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from compatfn.migrate import migrate_source  # noqa: E402
from migrate_generated import legacy_modules  # noqa: E402

CORPUS = sorted((Path(__file__).parent / "migrate_corpus").glob("*.py"))
#: Lines that get a trailing comment: black keeps it last, and so must migrate's own wraps.
COMMENTED = re.compile(r"^\s*(return |ctx\.save_for_backward\()[^#]*[^(\[,\s]$")
NIGHTLY = os.environ.get("COMPATFN_HYPOTHESIS_PROFILE") == "nightly"


def _mode(limit: int) -> Any:
    assert black.__version__ == BLACK_VERSION, f"the layout follows black {BLACK_VERSION}"
    return black.Mode(line_length=limit)


def _with_comments(source: str) -> str:
    return "".join(
        line[:-1] + "  # note\n" if COMMENTED.match(line[:-1]) else line
        for line in source.splitlines(keepends=True)
    )


def _assert_black_keeps(source: str, limit: int, name: str) -> None:
    result = migrate_source(source, name, line_length=limit)
    new = result.new_source
    assert black.format_str(new, mode=_mode(limit)) == new, f"{name} at {limit}:\n{new}"


@pytest.mark.parametrize("limit", [40, 50, 60, 79, 88])
@pytest.mark.parametrize("path", CORPUS, ids=[path.stem for path in CORPUS])
def test_the_migrated_corpus_is_as_black_would_write_it(path: Path, limit: int):
    mode = _mode(limit)
    source = black.format_str(
        _with_comments(black.format_str(path.read_text(), mode=mode)), mode=mode
    )
    _assert_black_keeps(source, limit, path.name)


@settings(
    max_examples=300 if NIGHTLY else 15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(legacy_modules(), st.integers(min_value=30, max_value=100))
def test_a_migrated_generated_function_is_as_black_would_write_it(spec: Any, limit: int):
    source = black.format_str(
        _with_comments(black.format_str(spec.source, mode=_mode(limit))), mode=_mode(limit)
    )
    _assert_black_keeps(source, limit, "generated.py")
