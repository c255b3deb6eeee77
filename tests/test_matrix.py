"""The support matrix (tools/matrix.py) and everything built from it stay in step.

tox.toml, README's support table, CI's test command and the nox session names all follow the
matrix; the report turns JUnit XML into the table with pytest's counts.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tools() -> Iterator[Tuple[ModuleType, ModuleType]]:
    """The ``tools`` package's matrix and report modules, imported from the checkout's root."""
    sys.path.insert(0, str(ROOT))
    try:
        yield importlib.import_module("tools.matrix"), importlib.import_module("tools.report")
    finally:
        sys.path.remove(str(ROOT))
        for name in ("tools", "tools.matrix", "tools.report"):
            sys.modules.pop(name, None)


def test_tox_toml_is_generated_from_the_matrix(tools: Tuple[ModuleType, ModuleType]) -> None:
    matrix, _ = tools
    assert (ROOT / "tox.toml").read_text() == matrix.render_tox(), (
        "tox.toml is stale: run `python -m tools.matrix tox > tox.toml`"
    )


def test_every_minor_from_1_8_to_the_newest_once(tools: Tuple[ModuleType, ModuleType]) -> None:
    matrix, _ = tools
    releases = [row.release for row in matrix.ROWS]
    assert releases[0][:2] == (1, 8)
    assert all(len(r) == 3 for r in releases), "pin exact releases"
    for older, newer in zip(releases, releases[1:]):
        next_minor = (older[0], older[1] + 1)
        next_major = (older[0] + 1, 0)
        assert newer[:2] in (next_minor, next_major), f"gap between {older} and {newer}"
    assert len({row.factor for row in matrix.ROWS}) == len(matrix.ROWS)


def test_default_subset_is_what_ci_promises(tools: Tuple[ModuleType, ModuleType]) -> None:
    matrix, _ = tools
    rows = matrix.ROWS
    assert {r.key for r in rows if r.default} == {rows[0].key, "1.13", "2.0", "2.1", rows[-1].key}
    assert [r.key for r in rows if r.legacy_default] == [rows[-1].key]
    assert [r.key for r in rows if not r.native] == ["1.8", "1.9", "1.10", "1.11", "1.12", "1.13"]


def test_support_table_lists_exactly_the_matrix(tools: Tuple[ModuleType, ModuleType]) -> None:
    matrix, report = tools
    table = report.table_in(ROOT / "docs" / "support.md")
    assert table, "docs/support.md lacks the generated support table: run `nox -s report`"
    torch_column = [
        line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")
    ]
    assert torch_column[1:] == [r.torch for r in matrix.ROWS]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"## Running the tests\n.*?```(?:console|sh)\n(.*?)```", readme, re.S)
    assert match, "README.md has no 'Running the tests' code block"
    commands = [line[2:] for line in match.group(1).splitlines() if line.startswith("$ ")]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands[-1] in ci_lines


def test_report_cells(tools: Tuple[ModuleType, ModuleType], tmp_path: Path) -> None:
    matrix, report = tools
    oldest, newest = matrix.ROWS[0], matrix.ROWS[-1]
    features = json.dumps({"setup_context": True, "apply_kwargs": False})
    (tmp_path / f"{matrix.session_name('tests', newest)}.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="10" failures="1" errors="0" skipped="2" '
        'time="3.5" timestamp="2026-11-30T10:00:00">'
        f"<properties><property name=\"features\" value='{features}'/></properties>"
        "</testsuite></testsuites>"
    )
    (tmp_path / f"{matrix.session_name('tests', oldest)}.xml").write_text(
        '<testsuites><testsuite tests="4" failures="0" errors="0" skipped="1"/></testsuites>'
    )
    legacy = matrix.session_name("tests", newest, legacy=True)
    report.write_error(tmp_path / f"{legacy}.xml", "boom")
    lines = {
        line.split("|")[1].strip(): line
        for line in report.render(tmp_path).splitlines()
        if line.startswith("| ")
    }
    assert lines["torch"].endswith("| setup_context | apply_kwargs | run on |")
    assert "**FAIL** (7 passed, 1 failed, 2 skipped)" in lines[newest.torch]
    assert "**error**: boom" in lines[newest.torch]
    assert "| yes | no | 2026-11-30 10:00 |" in lines[newest.torch]
    assert "pass (3 passed, 1 skipped)" in lines[oldest.torch]
    assert "n/a (always legacy)" in lines[oldest.torch]
    middle = matrix.ROWS[len(matrix.ROWS) // 2].torch
    assert lines[middle].count("not run") == 6  # CPU, CUDA, legacy, 2 flags, date


def test_report_counts_xfailed_and_xpassed_apart(
    tools: Tuple[ModuleType, ModuleType], tmp_path: Path
) -> None:
    _, report = tools
    path = tmp_path / "tests-x.xml"
    path.write_text(
        '<testsuites><testsuite tests="5" failures="2" errors="0" skipped="2">'
        '<testcase name="a"/>'
        '<testcase name="b"><skipped type="pytest.skip" message="no GPU"/></testcase>'
        '<testcase name="c"><skipped type="pytest.xfail" message="torch bug"/></testcase>'
        '<testcase name="d"><failure message="[XPASS(strict)] torch bug"/></testcase>'
        '<testcase name="e"><failure message="assert 1 == 2"/></testcase>'
        "</testsuite></testsuites>"
    )
    result = report.read_junit(path)
    assert result.counts() == "1 passed, 1 failed, 1 xpassed, 1 skipped, 1 xfailed"
    assert not result.ok


def _nox_reading(name: str) -> str:
    """How nox compares a ``-s`` value with session names: as a parsed expression (nox 2026.10.20,
    ``nox.manifest._normalize_arg``), or as the string itself where it does not parse."""
    try:
        return ast.dump(ast.parse(name))
    except SyntaxError:
        return name


def test_nox_selects_each_session_by_its_own_name_only(
    tools: Tuple[ModuleType, ModuleType],
) -> None:
    matrix, _ = tools
    names = [
        matrix.session_name(kind, row, legacy)
        for row in matrix.ROWS
        for kind in ("tests", "cuda", "bench")
        for legacy in (False, True)
    ]
    readings = [_nox_reading(name) for name in names]
    assert len(set(readings)) == len(names), "two session names read the same to nox -s"
    assert matrix.session_name("tests", matrix.row("2.1")) == "tests-2-1"
    assert _nox_reading("tests-2.1") == _nox_reading("tests-2.10")  # why names use no dots


def test_report_shows_feature_words_and_lists(tools: Tuple[ModuleType, ModuleType]) -> None:
    _, report = tools
    cells = [report._flag(v) for v in (True, False, "native", ["strict", "non-strict"], [])]
    assert cells == ["yes", "no", "native", "strict, non-strict", "unavailable"]
