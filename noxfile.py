"""Test compatfn against every supported torch release.

``nox`` runs the fast default subset (what CI runs); ``nox -l`` lists every session; ``nox -t cpu``
runs the whole table (``python -m tools.run_matrix`` does that in disk-friendly batches). The table
of releases is ``compatfn.matrix`` (the same data users' noxfiles read), which also names the
sessions: ``tests-X-Y``, ``tests-X-Y-legacy``, ``cuda-X-Y`` and ``bench-X-Y`` for torch X.Y (dashes,
never dots: nox reads ``-s`` values as Python expressions, see ``matrix.session_name``); which of
them run by default is ``tools/sessions.py``. Every test session installs the
wheel built from this checkout (never the source tree), checks that it imported the torch it asked
for, and writes JUnit XML to ``reports/junit/`` for ``nox -s report``.

Sessions come first, helpers after the banner below them.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

import nox

ROOT = Path(__file__).resolve().parent
# nox loads this file by its path, so the repository root is not importable on its own: add it, to
# import the project's tools as the package they are. Importing them puts this checkout's src/ in
# front of sys.path (tools/__init__.py), so ``compatfn.matrix`` below is this checkout's: the
# package's __init__ resolves its API lazily and the matrix is standard library only, so nothing
# here imports torch, which the Python running nox need not have.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import report, sessions  # noqa: E402

from compatfn import matrix  # noqa: E402  (this checkout's: see above)

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "uv|virtualenv"
# A missing interpreter is an error everywhere, not only on CI: never a silent skip.
nox.options.error_on_missing_interpreters = True

JUNIT_DIR = ROOT / "reports" / "junit"
#: ``COMPATFN_NOX_DISCARD=1`` (CI sets it): each session that installs torch deletes its environment
#: when it ends, passed or failed, so that a run holds one torch on disk at a time (a CUDA build of
#: torch takes 2-7 GB in an environment) instead of one per session. ``nox -r`` finds nothing to
#: reuse then.
DISCARD_ENVS = os.environ.get(matrix.DISCARD_ENV) == "1"
#: The test sessions run pytest on every core (pytest-xdist): most of a row's time is subprocesses
#: that import torch, which share nothing. ``nox -s tests-2-15 -- -n 0`` runs them in one process.
TEST_WORKERS_PACKAGE = "pytest-xdist"
TEST_WORKERS = ("-n", "auto")

SessionFunc = Callable[[nox.Session], None]


def _discarding(func: SessionFunc) -> SessionFunc:
    """Let session ``func`` delete its environment when it ends, where ``DISCARD_ENVS`` says so."""

    @functools.wraps(func)
    def run_then_discard(session: nox.Session) -> None:
        try:
            func(session)
        finally:
            if DISCARD_ENVS:
                shutil.rmtree(session.virtualenv.location, ignore_errors=True)

    return run_then_discard


# --- sessions ----------------------------------------------------------------------------------


def _tests_session(row: matrix.Row, *, legacy: bool) -> None:
    """Define ``tests-X-Y`` (or ``tests-X-Y-legacy``): the suite on one torch of the matrix."""
    forced = " with COMPATFN_LEGACY=1 forced" if legacy else ""

    @_discarding
    def tests(session: nox.Session) -> None:
        _run_tests(session, row, {"COMPATFN_LEGACY": "1"} if legacy else {})

    tests.__doc__ = f"Run the tests on torch {row.torch} (Python {row.python}){forced}."
    nox.session(
        name=matrix.session_name("tests", row, legacy=legacy),
        python=row.python,
        tags=["cpu", "legacy"] if legacy else ["cpu"],
        default=sessions.default(row, legacy=legacy),
    )(tests)


def _cuda_session(row: matrix.Row) -> None:
    """Define ``cuda-X-Y``: the CUDA-marked tests on one torch."""

    @_discarding
    def cuda(session: nox.Session) -> None:
        # COMPATFN_REQUIRE_CUDA makes tests/conftest.py stop the run when no GPU is usable.
        _run_tests(session, row, {"COMPATFN_REQUIRE_CUDA": "1"}, "-m", "cuda")

    cuda.__doc__ = f"Run the CUDA tests on torch {row.torch}; fails without a usable GPU."
    nox.session(
        name=matrix.session_name("cuda", row), python=row.python, tags=["cuda"], default=False
    )(cuda)


def _bench_session(row: matrix.Row) -> None:
    """Define ``bench-X-Y``: benchmarks/run.py on one torch."""

    @_discarding
    def bench(session: nox.Session) -> None:
        script = ROOT / "benchmarks" / "run.py"
        if not script.exists():
            session.error(f"{script.relative_to(ROOT)} does not exist: nothing to benchmark")
        _install(session, row)
        session.run("python", str(script), *session.posargs)

    bench.__doc__ = (
        f"Run benchmarks/run.py (compatfn vs plain torch, per call) on torch {row.torch}."
    )
    nox.session(
        name=matrix.session_name("bench", row), python=row.python, tags=["bench"], default=False
    )(bench)


for _row in matrix.ROWS:
    _tests_session(_row, legacy=False)
    if _row.setup_context:
        _tests_session(_row, legacy=True)
for _row in matrix.ROWS:
    _cuda_session(_row)
for _row in matrix.ROWS:
    if _row.key in sessions.BENCH:
        _bench_session(_row)


@nox.session(python=False, default=False)
def installed(session: nox.Session) -> None:
    """Run the whole suite (native, then COMPATFN_LEGACY=1) on the torch installed in the `python`
    on PATH, GPU included; results go to the folder given after --, by default
    reports/installed/local, where `nox -s report` reads them. Installs and downloads nothing."""
    args = session.posargs or [str(ROOT / "reports" / "installed" / "local")]
    session.run("python", "-m", "tools.check_installed", *args, external=True)


@nox.session(name="device-check", python=matrix.ROWS[-1].python, default=False)
@_discarding
def device_check(session: nox.Session) -> None:
    """Install the newest torch and run tools/device_check.sh (the check a machine with a GPU runs
    first) with it; arguments after -- go to the script, by default reports/installed/nox."""
    _install(session, matrix.ROWS[-1])
    args = session.posargs or [str(ROOT / "reports" / "installed" / "nox")]
    python = str(Path(session.bin) / "python")
    script = str(ROOT / "tools" / "device_check.sh")
    session.run("bash", script, *args, env={"PYTHON": python}, external=True)


@nox.session(python=sessions.LINT_PYTHON)
@_discarding
def lint(session: nox.Session) -> None:
    """Ruff (lint, format check) over the repository; mypy over src/ (with torch) and tools/;
    actionlint over .github/workflows (configured by .github/actionlint.yaml) and the example
    project's workflow."""
    session.install(*sessions.LINT_DEPS)
    session.run("ruff", "check", *session.posargs)
    session.run("ruff", "format", "--check", *session.posargs)
    session.run("mypy")
    session.run("mypy", "--strict", "tools")
    session.run("actionlint")
    session.run("actionlint", "examples/downstream/.github/workflows/tests.yml")


@nox.session(name="report", python=False, default=False)
def report_(session: nox.Session) -> None:
    """Turn reports/junit/*.xml into the support table; write it to docs/support.md and
    reports/. A row with no report keeps its cells from the table the page holds."""
    table = report.render(JUNIT_DIR, previous=report.table_in(SUPPORT_PAGE))
    out = ROOT / "reports" / "support-table.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)
    report.embed(SUPPORT_PAGE, table)
    session.log(f"wrote {out.relative_to(ROOT)} and the support table in docs/support.md")


@nox.session(python=sessions.LINT_PYTHON, default=False)
@_discarding
def docs(session: nox.Session) -> None:
    """Build the documentation into docs/_build/html (warnings are errors) and run every example
    of README.md and docs/*.md on the newest torch (tests/test_docs.py)."""
    row = matrix.ROWS[-1]
    _install(session, row, "-r", str(ROOT / "docs" / "requirements.txt"))
    out = ROOT / "docs" / "_build" / "html"
    session.run("sphinx-build", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out))
    session.log(f"built {out.relative_to(ROOT)}/index.html")
    # Every example in a brand-new interpreter (the tests sessions fork them from one that has
    # imported torch: see tests/test_docs.py).
    env = {
        "COMPATFN_EXPECT_TORCH": row.torch,
        "COMPATFN_EXPECT_INSTALLED": "1",
        "COMPATFN_DOCS_FRESH": "1",
    }
    session.run("pytest", "-q", "tests/test_docs.py", *session.posargs, env=env)


_ORACLE_ROW = matrix.row(sessions.CUSTOM_OP_ORACLE)


@nox.session(name="custom-op-oracle", python=_ORACLE_ROW.python, default=False)
@_discarding
def custom_op_oracle(session: nox.Session) -> None:
    """Record what torch's own custom_op gives the differential oracle's fixed cases and the
    conversion oracle's pool (on the torch of ``tools/sessions.py``'s CUSTOM_OP_ORACLE) into
    tests/data/custom_op_oracle.json and tests/data/conversion_oracle.json, which compatfn's own
    tiers compare with."""
    _install(session, _ORACLE_ROW)
    session.run("python", str(ROOT / "tests" / "library_oracle.py"), "--record")
    session.run("python", str(ROOT / "tests" / "library_conversion_oracle.py"), "--record")


@nox.session(python=sessions.LINT_PYTHON, default=False)
@_discarding
def build(session: nox.Session) -> None:
    """Build the sdist and the wheel into dist/ and check them: twine check --strict,
    check-wheel-contents, the tests inside the sdist, and the wheel installed into a fresh
    environment (the newest torch, no NumPy) running `python -m compatfn`."""
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install(*BUILD_TOOLS)
    session.run("uv", "build", "-q", "-o", str(dist), str(ROOT), external=True)  # wheel from sdist
    (sdist,), (wheel,) = dist.glob("compatfn-*.tar.gz"), dist.glob("compatfn-*.whl")
    session.run("twine", "check", "--strict", str(sdist), str(wheel))
    session.run("check-wheel-contents", "--config", str(ROOT / "pyproject.toml"), str(wheel))
    _check_sdist_contents(session, sdist)
    fresh = Path(tempfile.mkdtemp(prefix="compatfn-fresh-"))
    atexit.register(shutil.rmtree, fresh, ignore_errors=True)
    python = str(fresh / "bin" / "python")
    session.run("uv", "venv", "-q", "-p", str(session.python), str(fresh), external=True)
    torch = f"torch=={matrix.ROWS[-1].torch}"
    session.run("uv", "pip", "install", "-q", "-p", python, torch, str(wheel), external=True)
    report_text = str(session.run(python, "-m", "compatfn", external=True, silent=True))
    print(report_text)
    if "NumPy" in report_text:
        session.error("python -m compatfn mentions NumPy on an install without it")
    _run_sdist_tests(session, sdist, python, fresh)
    session.log(f"built and checked {sdist.name} and {wheel.name} in dist/")


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------

#: Where ``nox -s report`` writes the support table (between the markers of tools/report.py).
SUPPORT_PAGE = ROOT / "docs" / "support.md"
#: What ``nox -s build`` checks the distributions with.
BUILD_TOOLS = ("twine==7.0.0", "check-wheel-contents==0.6.3")
#: What the sdist must carry besides the package: its tests pass from an unpacked sdist.
SDIST_MUST_HOLD = (
    "tests/conftest.py",
    "tests/test_docs.py",
    "tests/migrate_corpus",
    "docs/index.md",
    "README.md",
    "CHANGELOG.md",
    "tox.toml",
    "tools/sessions.py",
    "examples/downstream",
    ".ci/run",
)


def _run_sdist_tests(session: nox.Session, sdist: Path, python: str, where: Path) -> None:
    """Unpack the sdist and run its packaging tests against the installed wheel (the whole
    suite runs from an sdist the same way; the torch rows' sessions cover it)."""
    with tarfile.open(sdist) as archive:
        # Our own archive, just built; the "data" filter where Python has it (3.8.17+, 3.11.4+).
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(where / "sdist", **safe)  # type: ignore[arg-type]
    (tree,) = (where / "sdist").iterdir()
    session.run("uv", "pip", "install", "-q", "-p", python, "pytest>=7", external=True)
    env = {"COMPATFN_EXPECT_INSTALLED": "1"}
    with session.chdir(tree):
        session.run(
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_vendor.py",
            external=True,
            env=env,
        )


def _check_sdist_contents(session: nox.Session, sdist: Path) -> None:
    """Fail unless the sdist holds the tests and what they read (README, docs, the matrix)."""
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    top = names[0].split("/")[0]
    missing = [
        item
        for item in SDIST_MUST_HOLD
        if not any(n == f"{top}/{item}" or n.startswith(f"{top}/{item}/") for n in names)
    ]
    if missing:
        session.error(f"{sdist.name} lacks {', '.join(missing)}: see MANIFEST.in")


_wheel: Path | None = None


def _build_wheel(session: nox.Session) -> Path:
    """Build compatfn's wheel once per nox run (into a temporary folder) and return its path."""
    global _wheel
    if _wheel is None or not _wheel.exists():
        out = Path(tempfile.mkdtemp(prefix="compatfn-wheel-"))
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        if session.venv_backend == "uv":
            session.run_install("uv", "build", "--wheel", "-o", str(out), str(ROOT), external=True)
        else:
            session.install("build")
            session.run_install("python", "-m", "build", "--wheel", "-o", str(out), str(ROOT))
        (_wheel,) = out.glob("compatfn-*.whl")
    return _wheel


def _install(session: nox.Session, row: matrix.Row, *extra: str) -> None:
    """Install the row's torch, the built wheel with its test and migrate extras and ``extra``,
    in one go."""
    wheel = _build_wheel(session)
    session.install(
        f"torch=={row.torch}",
        *row.pins,
        f"compatfn[{sessions.TEST_EXTRA},{sessions.MIGRATE_EXTRA}] @ {wheel.as_uri()}",
        *extra,
    )
    # A reused venv (-r) already holds a compatfn 0.1.0: replace it with this build.
    session.install("--no-deps", "--force-reinstall", str(wheel))


def _run_tests(session: nox.Session, row: matrix.Row, env: dict[str, str], *args: str) -> None:
    """Install ``row``, run pytest against it and print a one-line summary, pass or fail.

    The JUnit XML goes to ``reports/junit/<session>.xml``; a session that fails before pytest
    writes one (install error, wrong torch, no GPU) leaves an XML that records the error, so the
    report never shows an older result for it.
    """
    started = time.monotonic()
    JUNIT_DIR.mkdir(parents=True, exist_ok=True)
    junit = JUNIT_DIR / f"{session.name}.xml"
    junit.unlink(missing_ok=True)
    oracle = sessions.layout_oracle(row)
    env = {
        "COMPATFN_EXPECT_TORCH": row.torch,
        "COMPATFN_EXPECT_INSTALLED": "1",
        **({"COMPATFN_EXPECT_BLACK": "1"} if oracle else {}),
        **env,
    }
    pytest_started = None
    try:
        _install(session, row, *oracle, TEST_WORKERS_PACKAGE)
        pytest_started = time.monotonic()
        pytest = (
            "pytest",
            f"--junitxml={junit}",
            "--durations=5",
            *TEST_WORKERS,
            *args,
            *session.posargs,
        )
        session.run(*pytest, env=env)
    except BaseException:
        if not junit.exists():
            report.write_error(
                junit, "the session failed before pytest reported any test (see its log)"
            )
        raise
    finally:
        end = time.monotonic()
        if junit.exists():
            result = report.read_junit(junit)
            pytest_s = f"pytest {end - pytest_started:.1f} s, " if pytest_started else ""
            session.log(
                f"SUMMARY {session.name}: {result.one_line()}; "
                f"{pytest_s}session {end - started:.0f} s"
            )
