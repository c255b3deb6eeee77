"""The support table (tools/report.py): JUnit XML into cells with pytest's counts."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

from compatfn import matrix

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report() -> Iterator[ModuleType]:
    """``tools.report``, imported from the checkout's root."""
    sys.path.insert(0, str(ROOT))
    try:
        yield importlib.import_module("tools.report")
    finally:
        sys.path.remove(str(ROOT))
        for name in ("tools", "tools.report"):
            sys.modules.pop(name, None)


def test_report_cells(report: ModuleType, tmp_path: Path) -> None:
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


def test_a_row_without_a_report_keeps_its_previous_cells(
    report: ModuleType, tmp_path: Path
) -> None:
    oldest, newest = matrix.ROWS[0], matrix.ROWS[-1]
    features = json.dumps({"setup_context": True})
    (tmp_path / f"{matrix.session_name('tests', newest)}.xml").write_text(
        '<testsuites><testsuite tests="3" failures="0" errors="0" skipped="0" '
        'timestamp="2026-12-06T02:00:00">'
        f"<properties><property name=\"features\" value='{features}'/></properties>"
        "</testsuite></testsuites>"
    )
    previous = (
        "| torch | Python | CPU | CUDA | legacy forced | setup_context | run on |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {oldest.torch} | {oldest.python} | pass (9 passed) | not run | n/a (always legacy) "
        "| no | 2026-12-01 10:00 |\n"
        f"| {newest.torch} | {newest.python} | **FAIL** (1 failed) | not run | not run | yes "
        "| 2026-12-01 11:00 |\n"
    )
    lines = {
        line.split("|")[1].strip(): line
        for line in report.render(tmp_path, previous=previous).splitlines()
        if line.startswith("| ")
    }
    assert lines["torch"].endswith("| setup_context | run on |")
    assert lines[oldest.torch] == previous.splitlines()[2]  # kept as it was, date included
    assert "pass (3 passed)" in lines[newest.torch]  # the new report wins
    assert lines[newest.torch].endswith("| yes | 2026-12-06 02:00 |")
    middle = matrix.ROWS[len(matrix.ROWS) // 2].torch
    assert lines[middle].count("not run") == 5  # in neither: CPU, CUDA, legacy, flag, date


def test_report_counts_xfailed_and_xpassed_apart(report: ModuleType, tmp_path: Path) -> None:
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


def test_report_shows_feature_words_and_lists(report: ModuleType) -> None:
    cells = [report._flag(v) for v in (True, False, "native", ["strict", "non-strict"], [])]
    assert cells == ["yes", "no", "native", "strict, non-strict", "unavailable"]
