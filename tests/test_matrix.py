"""compatfn.matrix: the table of torch releases, its filters, its renderings, its nox sessions, and
everything of compatfn's own built from it (tox.toml, the support table, the CI command).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List

import pytest

from compatfn import matrix

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tools() -> Iterator[SimpleNamespace]:
    """compatfn's own ``tools.sessions`` and ``tools.report``, imported from the checkout's root."""
    sys.path.insert(0, str(ROOT))
    try:
        yield SimpleNamespace(
            sessions=importlib.import_module("tools.sessions"),
            report=importlib.import_module("tools.report"),
        )
    finally:
        sys.path.remove(str(ROOT))
        for name in ("tools", "tools.sessions", "tools.report"):
            sys.modules.pop(name, None)


# --- the table -----------------------------------------------------------------------------------


def test_every_minor_from_1_8_to_the_newest_once() -> None:
    releases = [row.release for row in matrix.ROWS]
    assert releases[0][:2] == (1, 8)
    assert all(len(r) == 3 for r in releases), "pin exact releases"
    for older, newer in zip(releases, releases[1:]):
        next_minor = (older[0], older[1] + 1)
        next_major = (older[0] + 1, 0)
        assert newer[:2] in (next_minor, next_major), f"gap between {older} and {newer}"
    assert len({row.factor for row in matrix.ROWS}) == len(matrix.ROWS)


def test_rows_with_setup_context_are_the_2x_ones() -> None:
    assert [r.key for r in matrix.ROWS if not r.setup_context] == [
        "1.8",
        "1.9",
        "1.10",
        "1.11",
        "1.12",
        "1.13",
    ]


def test_companions_follow_the_release_lines() -> None:
    """torchvision 0.N+6 and torchaudio 0.N (2.N from torch 2.0) ship with torch 1.N / 2.N."""
    for r in matrix.ROWS:
        major, minor = r.release[:2]
        if r.torchvision is not None:
            assert r.torchvision.startswith(f"0.{minor + 1 if major == 1 else minor + 15}.")
        if r.torchaudio is not None:
            assert r.torchaudio.startswith(f"0.{minor}." if major == 1 else f"2.{minor}.")
    assert matrix.row("2.4").requirements("torchvision", "torchaudio")[-2:] == [
        "torchvision==0.19.1",
        "torchaudio==2.4.1",
    ]


def test_import_needs_no_torch_and_no_nox() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = sys.modules['nox'] = None  # importing them fails\n"
        "import compatfn.matrix\n"
        "from compatfn.__main__ import main\n"
        "sys.exit(main(['matrix', '--format', 'github']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["include"]


# --- filters -------------------------------------------------------------------------------------


def keys(rows: List[matrix.Row]) -> List[str]:
    return [r.key for r in rows]


def test_filters() -> None:
    assert matrix.rows() == list(matrix.ROWS)
    assert keys(matrix.rows(min_torch="2.13")) == ["2.13", "2.14", "2.15"]
    assert keys(matrix.rows(max_torch="1.9")) == ["1.8", "1.9"]
    assert keys(matrix.rows(min_torch="1.13", max_torch="2.1")) == ["1.13", "2.0", "2.1"]
    assert keys(matrix.rows(min_torch="2.4.1", max_torch="2.5.0")) == ["2.4"]  # 2.5.1 > 2.5.0
    assert keys(matrix.rows(only=["2.1", "1.8", "2.1"])) == ["1.8", "2.1"]
    assert keys(matrix.rows(ends=True)) == ["1.8", "2.15"]
    assert keys(matrix.rows(max_torch="1.8", ends=True)) == ["1.8"]
    assert matrix.row("2.12.1") is matrix.row("2.12")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: matrix.row("3.1"), "no torch 3.1 in the matrix; the table has torch 1.8 to"),
        (lambda: matrix.row("2.4.0"), "no torch 2.4.0 in the matrix"),
        (lambda: matrix.rows(only=["2"]), "'2' is not a torch release such as 2.4"),
        (lambda: matrix.rows(min_torch="2.4", max_torch="2.3"), "no torch release is left"),
        (lambda: matrix.row("1.13").requirements("torchvision"), "no torchvision release is"),
        (lambda: matrix.row("2.4").requirements("numpy"), "unknown companion 'numpy'"),
    ],
)
def test_bad_input_is_a_matrix_error(call: Any, message: str) -> None:
    with pytest.raises(matrix.MatrixError, match=re.escape(message)):
        call()


# --- session names -------------------------------------------------------------------------------


def _nox_reading(name: str) -> str:
    """How nox compares a ``-s`` value with session names: as a parsed expression (nox 2026.10.20,
    ``nox.manifest._normalize_arg``), or as the string itself where it does not parse."""
    try:
        return ast.dump(ast.parse(name))
    except SyntaxError:
        return name


def test_nox_selects_each_session_by_its_own_name_only() -> None:
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


# --- the nox integration -------------------------------------------------------------------------


class FakeNox:
    """What ``nox_sessions`` uses of nox: ``nox.session(**options)(function)``."""

    def __init__(self) -> None:
        self.sessions: Dict[str, Any] = {}

    def session(self, **options: Any) -> Any:
        def register(function: Any) -> Any:
            self.sessions[options["name"]] = SimpleNamespace(function=function, **options)
            return function

        return register


class FakeSession:
    def __init__(self, location: str = "") -> None:
        self.env: Dict[str, str] = {}
        self.installs: List[List[str]] = []
        self.virtualenv = SimpleNamespace(location=location)

    def install(self, *args: str) -> None:
        self.installs.append(list(args))


@pytest.fixture
def fake_nox(monkeypatch: pytest.MonkeyPatch) -> FakeNox:
    fake = FakeNox()
    monkeypatch.setitem(sys.modules, "nox", fake)
    monkeypatch.delenv(matrix.INDEX_ENV, raising=False)
    monkeypatch.delenv(matrix.DISCARD_ENV, raising=False)
    return fake


def test_nox_sessions_one_per_row_and_a_legacy_twin_on_2x(fake_nox: FakeNox) -> None:
    calls = []

    @matrix.nox_sessions(matrix.rows(max_torch="2.0"), tags=["torch"])
    def tests(session: Any, row: matrix.Row) -> None:
        calls.append((row.torch, dict(session.env), session.installs[:]))

    assert callable(tests)
    assert list(fake_nox.sessions)[-3:] == ["tests-1-13", "tests-2-0", "tests-2-0-legacy"]
    assert len(fake_nox.sessions) == 8
    twin = fake_nox.sessions["tests-2-0-legacy"]
    assert (twin.python, twin.tags) == ("3.11", ["torch"])
    assert twin.function.__doc__ == "tests on torch 2.0.1 (Python 3.11) with COMPATFN_LEGACY=1"
    twin.function(FakeSession())
    fake_nox.sessions["tests-1-8"].function(FakeSession())
    cpu = ["--index-url", matrix.CPU_INDEX]
    assert calls == [
        ("2.0.1", {"COMPATFN_LEGACY": "1"}, [["torch==2.0.1", *cpu], ["numpy<2", "setuptools<70"]]),
        ("1.8.1", {}, [["torch==1.8.1"], ["numpy<2", "setuptools<70"]]),  # no CPU index for 1.8
    ]


def test_nox_sessions_index_name_and_companions(
    fake_nox: FakeNox, monkeypatch: pytest.MonkeyPatch
) -> None:
    @matrix.nox_sessions([matrix.row("2.4")], legacy=False, companions=["torchvision"], name="t")
    def anything(session: Any, row: matrix.Row) -> None:
        pass

    assert list(fake_nox.sessions) == ["t-2-4"]
    for value, index in [("pypi", []), ("https://example.org/whl", ["--index-url"])]:
        monkeypatch.setenv(matrix.INDEX_ENV, value)
        session = FakeSession()
        fake_nox.sessions["t-2-4"].function(session)
        assert session.installs[0][:2] == ["torch==2.4.1", "torchvision==0.19.1"]
        assert session.installs[0][2:3] == index
        assert session.installs[1] == ["numpy", "setuptools"]
    with pytest.raises(
        matrix.MatrixError, match=re.escape("no torchaudio release is built for torch 1.13.1")
    ):
        matrix.nox_sessions(companions=["torchaudio"])  # when the noxfile loads, not in a session
    with pytest.raises(matrix.MatrixError, match="nox_sessions got no rows"):
        matrix.nox_sessions([])


@pytest.mark.parametrize("fails", [False, True])
def test_nox_sessions_discard_their_environment_when_asked(
    fake_nox: FakeNox, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fails: bool
) -> None:
    def tests(session: Any, row: matrix.Row) -> None:
        if fails:
            raise RuntimeError("the tests failed")

    kept, discarded = tmp_path / "kept", tmp_path / "discarded"
    for venv, discard in [(kept, None), (discarded, "1")]:
        venv.mkdir()
        (venv / "torch").write_text("a CUDA build")
        if discard:
            monkeypatch.setenv(matrix.DISCARD_ENV, discard)
        matrix.nox_sessions([matrix.row("1.8")], name=venv.name)(tests)  # read when defined
        raised = pytest.raises(RuntimeError) if fails else contextlib.nullcontext()
        with raised:  # a failing session still deletes its environment
            fake_nox.sessions[f"{venv.name}-1-8"].function(FakeSession(str(venv)))
    assert (kept / "torch").exists()
    assert not discarded.exists()


# --- compatfn's own files, built from the table --------------------------------------------------


def test_tox_toml_is_generated_from_the_matrix(tools: SimpleNamespace) -> None:
    assert (ROOT / "tox.toml").read_text() == tools.sessions.render_tox(), (
        "tox.toml is stale: run `python -m tools.sessions tox > tox.toml`"
    )


def test_default_subset_is_what_ci_promises(tools: SimpleNamespace) -> None:
    rows, default = matrix.ROWS, tools.sessions.default
    assert {r.key for r in rows if default(r)} == {
        rows[0].key,
        "1.12",
        "1.13",
        "2.1",
        "2.2",
        rows[-1].key,
    }
    assert [r.key for r in rows if default(r, legacy=True)] == [rows[-1].key]


def test_support_table_lists_exactly_the_matrix(tools: SimpleNamespace) -> None:
    table = tools.report.table_in(ROOT / "docs" / "support.md")
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


# --- the example downstream project --------------------------------------------------------------

EXAMPLE = ROOT / "examples" / "downstream"
#: The example project: what docs/downstream.md shows.
EXAMPLE_FILES = (
    "src/softclip/__init__.py",
    "pyproject.toml",
    "tests/test_softclip.py",
    "noxfile.py",
    ".github/workflows/tests.yml",
)


def test_ci_runs_the_example_projects_oldest_and_newest_rows() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    oldest, newest = (matrix.session_name("tests", r) for r in matrix.rows(ends=True))
    assert re.search(rf"cd examples/downstream && .*nox -s {oldest} {newest}\)", ci)


def test_the_docs_page_shows_the_example_projects_files() -> None:
    """docs/downstream.md shows each file of the example project, as it is."""
    page = (ROOT / "docs" / "downstream.md").read_text()
    for name in EXAMPLE_FILES:
        assert (EXAMPLE / name).read_text() in page, f"docs/downstream.md lacks {name} as it is"


def test_the_example_workflow_fans_out_the_github_matrix() -> None:
    workflow = (EXAMPLE / ".github" / "workflows" / "tests.yml").read_text()
    assert "compatfn matrix --format github" in workflow
    assert "fromJSON(" in workflow and "matrix.session" in workflow
