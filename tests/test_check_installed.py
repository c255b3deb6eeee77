"""The check against an installed torch (``tools/check_installed.py``, ``tools/device_check.sh``)
and the parts of the suite it relies on: compatfn staged from this checkout in front of whatever
is installed, the torch and GPU found reported, a missing optional dependency and a spent time box
shown as skips, and the support table's CUDA column filled from a GPU check's folder.

``bash tools/device_check.sh OUT --quick`` itself runs in CI (see the CI script)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest
import torch

from compatfn import matrix

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("report", "check_installed")


@pytest.fixture(scope="module")
def tools() -> Iterator[SimpleNamespace]:
    """The ``tools`` modules, imported from the checkout's root."""
    sys.path.insert(0, str(ROOT))
    try:
        yield SimpleNamespace(
            **{name: importlib.import_module(f"tools.{name}") for name in MODULES}
        )
    finally:
        sys.path.remove(str(ROOT))
        for name in ("tools", *(f"tools.{name}" for name in MODULES)):
            sys.modules.pop(name, None)


def _pytest(*args: str, code: str = "", **env: str) -> subprocess.CompletedProcess:
    """pytest on this suite in a fresh interpreter, ``code`` run first (to hide a module)."""
    script = f"import sys, pytest\n{code}\nsys.exit(pytest.main({list(args)!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, **env},
    )


def test_staged_compatfn_comes_first_and_the_torch_found_is_this_one(tools, tmp_path):
    check = tools.check_installed
    how = check.stage(tmp_path)
    assert how in ("pip", "uv", "copy")
    if how != "copy":  # pip or uv installed the wheel's contents, metadata included
        assert list(tmp_path.glob("compatfn-*.dist-info"))
    assert (tmp_path / "compatfn" / "py.typed").exists()
    found = check.probe(tmp_path)
    assert Path(found["compatfn_path"]).parent == (tmp_path / "compatfn").resolve()
    assert found["torch"] == str(torch.__version__)
    assert found["cuda"] is torch.cuda.is_available()
    cuda = torch.cuda.is_available()
    assert found["device"] == (torch.cuda.get_device_name(0) if cuda else "cpu")
    lines = check.describe(found)
    assert lines[1].startswith(f"torch  {torch.__version__} from ")
    assert ("GPU: none usable" in lines[2]) is not cuda


def test_the_forced_path_is_set_and_cleared(tools, tmp_path, monkeypatch):
    check = tools.check_installed
    monkeypatch.setenv("COMPATFN_LEGACY", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    native = check.environment(tmp_path, legacy=False)
    assert "COMPATFN_LEGACY" not in native
    assert native["PYTHONPATH"] == os.pathsep.join([str(tmp_path), "/elsewhere"])
    assert check.environment(tmp_path, legacy=True, deadline=12.0)["COMPATFN_LEGACY"] == "1"
    assert check.environment(tmp_path, legacy=True, deadline=12.0)["COMPATFN_TEST_DEADLINE"] == "12"


def test_a_missing_optional_dependency_and_a_spent_time_box_are_visible_skips():
    # Entry-point plugins off: hypothesis' own pytest plugin would import it.
    done = _pytest(
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "tests/test_binding.py",
        "tests/test_report.py::test_report_shows_feature_words_and_lists",
        code="sys.modules['hypothesis'] = None  # import hypothesis fails as if not installed",
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        COMPATFN_TEST_DEADLINE="1",  # 1970: spent before any test starts
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "hypothesis is not installed (pip install hypothesis): test_binding.py not run" in out
    assert "time box of this run (COMPATFN_TEST_DEADLINE) was spent before it began" in out
    assert "2 skipped" in out and "passed" not in out and "error" not in out.lower()


def test_device_check_usage_errors():
    for args in ([], ["out", "--slow"], ["a", "b", "c"]):
        done = subprocess.run(
            ["bash", str(ROOT / "tools" / "device_check.sh"), *args],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2, args
        assert done.stderr == "usage: bash tools/device_check.sh OUTDIR [--quick]\n"


def _junit(path: Path, tests: int, skipped: int, device: str) -> str:
    path.write_text(
        f'<testsuites><testsuite tests="{tests}" failures="0" errors="0" skipped="{skipped}" '
        'timestamp="2026-12-01T10:00:00"><properties>'
        f'<property name="device" value="{device}"/></properties></testsuite></testsuites>'
    )
    return path.name


def _check(folder: Path, torch_version: str, device: str, runs: dict) -> None:
    folder.mkdir(parents=True)
    records = [
        {"name": name, "junit": _junit(folder / f"junit-{name}.xml", *counts, device)}
        for name, counts in runs.items()
    ]
    check = {"torch": torch_version, "device": device, "cuda": device != "cpu", "runs": records}
    (folder / "check.json").write_text(json.dumps(check))


def test_report_fills_the_cuda_column_from_a_gpu_check(tools, tmp_path):
    report = tools.report
    row = matrix.ROWS[-2]
    installed = tmp_path / "installed"
    _check(installed / "gpu", f"{row.key}.0+cu128", "NVIDIA H200", {"native": (10, 2)})
    _check(installed / "cpu", f"{matrix.ROWS[-1].torch}", "cpu", {"native": (5, 1)})
    _check(installed / "new", "9.1.0+cu130", "NVIDIA B200", {"native": (3, 0), "legacy": (3, 1)})
    with open(installed / "gpu" / "check.json", "r+") as f:  # a legacy run that wrote no XML
        data = json.load(f)
        data["runs"].append({"name": "legacy", "junit": None})
        f.seek(0)
        json.dump(data, f)
    table = report.render(tmp_path / "junit", installed)
    lines = {line.split("|")[1].strip(): line for line in table.splitlines() if "|" in line}
    cuda = lines[row.torch].split("|")[4].strip()
    assert cuda == (
        "pass (8 passed, 2 skipped); legacy forced: **error**: pytest wrote no JUnit XML "
        f"on NVIDIA H200, torch {row.key}.0+cu128"
    )
    assert lines[matrix.ROWS[-1].torch].split("|")[4].strip() == "not run"  # no GPU: no cell
    assert (
        "Outside the matrix, torch 9.1: CUDA pass (3 passed); legacy forced: pass (2 passed, "
        "1 skipped) on NVIDIA B200, torch 9.1.0+cu130." in table
    )


def test_report_counts_the_tests_a_time_box_cut_off(tools, tmp_path):
    path = tmp_path / "junit-native.xml"
    path.write_text(
        '<testsuites><testsuite tests="3" failures="0" errors="0" skipped="2">'
        '<testcase name="a"/>'
        '<testcase name="b"><skipped type="pytest.skip" message="CUDA not available"/></testcase>'
        '<testcase name="c"><skipped type="pytest.skip" message="the time box of this run '
        '(COMPATFN_TEST_DEADLINE) was spent before it began"/></testcase>'
        "</testsuite></testsuites>"
    )
    result = tools.report.read_junit(path)
    assert result.counts() == "1 passed, 2 skipped, 1 of them past the time box"


def test_report_reads_a_check_installed_folder(tools, tmp_path):
    """The folder layout ``tools/check_installed.py`` writes is the one the report reads."""
    check = tools.check_installed
    assert "check.json" in (check.__doc__ or "") and "junit-native.xml" in (check.__doc__ or "")
    folder = tmp_path / "run"
    _check(folder, "2.13.0+cu126", "NVIDIA H200", {"native": (4, 0), "legacy": (4, 0)})
    found = tools.report.read_installed(folder)
    assert found.key == "2.13" and found.cuda and set(found.runs) == {"native", "legacy"}
