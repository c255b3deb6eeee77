"""Shared fixtures and the checks that make a nox/tox session trustworthy.

* ``device``: every test that takes it runs on ``cpu`` and on ``cuda``; the CUDA case carries the
  ``cuda`` marker and is skipped, with the reason shown, where torch sees no GPU.
* The session header names the torch, compatfn and ``COMPATFN_LEGACY`` in use.
* Environment variables set by the noxfile (and tox.toml) turn into hard checks before any test
  runs: ``COMPATFN_EXPECT_TORCH`` (the torch release requested), ``COMPATFN_EXPECT_INSTALLED=1``
  (compatfn imported from site-packages, not from the checkout) and ``COMPATFN_REQUIRE_CUDA=1``
  (a usable GPU).
* The torch, Python and ``compatfn.features()`` of the run are written into the JUnit XML as
  testsuite properties, from which ``nox -s report`` builds README's support table.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Iterator, List

import pytest
import torch
from packaging.version import Version

import compatfn

CUDA = torch.cuda.is_available()
NO_CUDA_REASON = (
    f"CUDA not available: torch {torch.__version__} (built with CUDA {torch.version.cuda}) "
    f"sees {torch.cuda.device_count() if torch.version.cuda else 0} GPU(s)"
)


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


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    if CUDA:
        return
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request: pytest.FixtureRequest) -> torch.device:
    """The device to run on: ``cpu``, and ``cuda`` where present (visibly skipped otherwise)."""
    return torch.device(request.param)


@pytest.fixture(scope="session", autouse=True)
def _record_environment(record_testsuite_property) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Write what this run tested into the JUnit XML (read by ``nox -s report``)."""
    record_testsuite_property("torch", str(torch.__version__))
    record_testsuite_property("python", "{}.{}.{}".format(*sys.version_info[:3]))
    record_testsuite_property("cuda", str(CUDA))
    record_testsuite_property("compatfn_legacy", os.environ.get("COMPATFN_LEGACY", ""))
    try:
        features = json.dumps(compatfn.features(), sort_keys=False, default=str)
    except Exception as exc:  # report it in the table instead of failing every test here
        features = json.dumps({"features() error": repr(exc)})
    record_testsuite_property("features", features)
    yield
