"""Shared fixtures and the checks that make a nox/tox session trustworthy.

* ``device``: every test that takes it runs on ``cpu`` and on ``cuda``; the CUDA case carries the
  ``cuda`` marker and is skipped, with the reason shown, where torch sees no GPU.
* The session header names the torch, compatfn and ``COMPATFN_LEGACY`` in use.
* Environment variables set by the noxfile (and tox.toml) turn into hard checks before any test
  runs: ``COMPATFN_EXPECT_TORCH`` (the torch release requested), ``COMPATFN_EXPECT_INSTALLED=1``
  (compatfn imported from site-packages, not from the checkout) and ``COMPATFN_REQUIRE_CUDA=1``
  (a usable GPU).
* The torch, Python, GPU and ``compatfn.features()`` of the run are written into the JUnit XML
  as testsuite properties, from which ``nox -s report`` builds the support table.
* A test module that imports a missing optional dependency (hypothesis, libcst) at its top is
  skipped as a whole, with the reason shown, instead of failing collection: the suite also runs
  against an installed torch that lacks them (``python -m tools.check_installed``).
* hypothesis runs derandomized (the ``compatfn`` profile): every run draws the same examples.
  ``--hypothesis-profile=explore`` draws new ones.
* ``fresh_dynamo``: a test that compiles starts and ends with a reset torch._dynamo.
* ``COMPATFN_TEST_DEADLINE`` (seconds since the epoch, set by ``tools/check_installed.py
  --deadline``): the CUDA tests run first and tests that would start after it are skipped,
  visibly, so that a time-boxed run on a lent GPU machine still writes its JUnit XML.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import FrozenSet, Iterator, List, Optional, Tuple

import pytest
import torch
from packaging.version import Version

import compatfn

CUDA = torch.cuda.is_available()
_DEADLINE = float(os.environ.get("COMPATFN_TEST_DEADLINE") or "inf")
NO_CUDA_REASON = (
    f"CUDA not available: torch {torch.__version__} (built with CUDA {torch.version.cuda}) "
    f"sees {torch.cuda.device_count() if torch.version.cuda else 0} GPU(s)"
)


#: Optional test dependencies: a module importing one that is missing is skipped, visibly.
OPTIONAL = {"hypothesis": "pip install hypothesis", "libcst": "pip install 'compatfn[migrate]'"}
MISSING = frozenset(name for name in OPTIONAL if importlib.util.find_spec(name) is None)

if "hypothesis" not in MISSING:
    from hypothesis import settings

    # Reproducible: the same examples on every run and machine, nothing read from or written to
    # an example database.
    settings.register_profile("compatfn", derandomize=True, database=None)
    settings.register_profile("explore", derandomize=False)
    settings.load_profile("compatfn")


def _path(module: object) -> Path:
    return Path(str(getattr(module, "__file__", ""))).resolve().parent


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def pytest_report_header(config: pytest.Config) -> List[str]:
    legacy = os.environ.get("COMPATFN_LEGACY")
    return [
        f"torch {torch.__version__} from {_path(torch)}; "
        f"CUDA {'available' if CUDA else 'not available'} (built with {torch.version.cuda})",
        f"compatfn {compatfn.__version__} from {_path(compatfn)}",
        f"COMPATFN_LEGACY={legacy if legacy is not None else '<unset>'}",
    ]


def pytest_configure(config: pytest.Config) -> None:
    expected = os.environ.get("COMPATFN_EXPECT_TORCH")
    if expected and Version(str(torch.__version__)).public != Version(expected).public:
        raise pytest.UsageError(
            f"expected torch {expected} but imported torch {torch.__version__} from {_path(torch)}"
        )
    if _flag("COMPATFN_EXPECT_INSTALLED"):
        site = Path(sysconfig.get_paths()["purelib"]).resolve()
        if site not in _path(compatfn).parents:
            raise pytest.UsageError(
                f"compatfn was imported from {_path(compatfn)}, not from this environment's "
                f"site-packages ({site}): the tests must run against the installed wheel"
            )
    if _flag("COMPATFN_REQUIRE_CUDA") and not CUDA:
        raise pytest.UsageError(f"COMPATFN_REQUIRE_CUDA is set but {NO_CUDA_REASON}")


def _top_level_imports(path: Path) -> FrozenSet[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return frozenset(names)


class _SkippedModule(pytest.Module):
    """A test module whose optional dependency is missing: one visible skip instead of it."""

    missing: str = ""

    def collect(self):  # type: ignore[no-untyped-def]
        raise pytest.skip.Exception(
            f"{self.missing} is not installed ({OPTIONAL[self.missing]}): {self.path.name} not run"
        )


def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> Optional[pytest.Module]:
    missing = sorted(MISSING & _top_level_imports(module_path)) if MISSING else []
    if not missing:
        return None
    module = _SkippedModule.from_parent(parent, path=module_path)
    module.missing = missing[0]
    return module


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    if float("inf") != _DEADLINE:  # time-boxed: the CUDA tests first, the rest in their order
        items.sort(key=lambda item: item.get_closest_marker("cuda") is None)
    if CUDA:
        return
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if time.time() > _DEADLINE:
        pytest.skip("the time box of this run (COMPATFN_TEST_DEADLINE) was spent before it began")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request: pytest.FixtureRequest) -> torch.device:
    """The device to run on: ``cpu``, and ``cuda`` where present (visibly skipped otherwise)."""
    return torch.device(request.param)


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Reset torch._dynamo before and after the test, also when it fails (nothing to reset on
    torch 1.x, which has no dynamo)."""
    reset = getattr(_dynamo(), "reset", lambda: None)
    reset()
    try:
        yield
    finally:
        reset()


def _dynamo() -> object:
    try:
        return importlib.import_module("torch._dynamo")
    except ImportError:  # torch 1.x
        return None


def _environment() -> List[Tuple[str, str]]:
    """What this run tests, as JUnit XML testsuite properties (read by ``nox -s report``)."""
    try:
        features = json.dumps(compatfn.features(), sort_keys=False, default=str)
    except Exception as exc:  # report it in the table instead of failing the run here
        features = json.dumps({"features() error": repr(exc)})
    return [
        ("torch", str(torch.__version__)),
        ("python", "{}.{}.{}".format(*sys.version_info[:3])),
        ("cuda", str(CUDA)),
        ("device", torch.cuda.get_device_name(0) if CUDA else "cpu"),
        ("compatfn_legacy", os.environ.get("COMPATFN_LEGACY", "")),
        ("features", features),
    ]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Write what this run tests into the JUnit XML, from the process that writes the XML (under
    pytest-xdist the controller: a worker's ``record_testsuite_property`` never reaches it)."""
    if hasattr(session.config, "workerinput"):
        return
    try:  # pytest's own key, what record_testsuite_property writes through (pytest >= 7)
        from _pytest.junitxml import xml_key
    except ImportError:  # the report then says the run's torch is unknown
        return
    xml = session.config.stash.get(xml_key, None)
    for name, value in _environment() if xml is not None else ():
        xml.add_global_property(name, value)
