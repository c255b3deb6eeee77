"""compatfn's probes give, on each torch release, the answer that release has (so that a wrong
probe fails here instead of silently skipping the tests it decides), and a probe that breaks
reports ``"error: <why>"`` instead of an answer.

The expected values come from the support table's feature columns (every release of the matrix,
measured) and the measured facts named beside each entry; they are written as the first release
where the answer is True, independent of compatfn's code.
"""

from __future__ import annotations

import sys

import pytest
import torch
from packaging.version import Version

import compatfn
from compatfn import _features, core, library
from compatfn.library import _facts as library_facts

TORCH = Version(str(torch.__version__)).release[:2]
PYTHON = sys.version_info[:2]

#: features() entry -> the first torch release where it is True (support table, every row).
FIRST_TRUE = {
    "setup_context": (2, 0),
    "apply_kwargs": (2, 13),
    "default_binding": (2, 2),
    "forward_ad": (1, 10),  # torch 1.9 runs forward AD through forward's ops, never jvp
    "torch_func": (2, 0),
    "amp_device_generic": (2, 4),
    "cpu_autocast": (1, 10),
}

#: The newest Python whose bytecode dynamo reads, per torch release (torch's own support:
#: 2.0 up to 3.10, 2.1-2.3 up to 3.11, 2.4-2.5 up to 3.12, later releases up to 3.13 or newer).
DYNAMO_PYTHON = {(2, 0): (3, 10), (2, 1): (3, 11), (2, 2): (3, 11), (2, 3): (3, 11)}
DYNAMO_PYTHON.update({(2, 4): (3, 12), (2, 5): (3, 12)})


@pytest.mark.parametrize("name", sorted(FIRST_TRUE))
def test_each_feature_probe_answers_what_this_torch_has(name: str) -> None:
    assert compatfn.features()[name] is (FIRST_TRUE[name] <= TORCH), name


def test_export_modes() -> None:
    expected = ("strict", "non-strict") if TORCH >= (2, 2) else ("strict",)
    assert compatfn.features()["export"] == (expected if TORCH >= (2, 1) else ())


def test_compile_is_available_where_torch_compiles_on_this_python() -> None:
    """The ``compile`` entry decides skips of every compile test: "unavailable" exactly where
    torch has no torch.compile (< 2.0) or dynamo does not support this Python."""
    available = TORCH >= (2, 0) and DYNAMO_PYTHON.get(TORCH, PYTHON) >= PYTHON
    assert (compatfn.features()["compile"] != "unavailable") is available


def test_module_level_probes() -> None:
    assert core.HAS_TORCH_FUNC is (TORCH >= (2, 0))
    # The meta device: not on torch 1.8 (measured), there from 1.13 (measured) and on every 2.x.
    assert library.HAS_META_DEVICE is (TORCH >= (1, 9))
    # torch.compile functionalizes mutating custom ops from 2.2; 2.1 raises (measured).
    assert library_facts.has_auto_functionalize() is (TORCH >= (2, 2))


PROBES = [("apply_kwargs", "_probe_kwargs"), ("forward_ad", "_probe_forward_ad")]
if TORCH >= (2, 0):  # default_binding is False without setup_context, nothing probed
    PROBES.append(("default_binding", "_probe_defaults"))


@pytest.mark.parametrize("name, probe", PROBES)
def test_a_failing_probe_reports_error_and_why(name: str, probe: str, monkeypatch) -> None:
    def broken() -> bool:
        raise RuntimeError("the probe broke")

    monkeypatch.setattr(_features, probe, broken)
    features = compatfn.features()
    assert features[name] == "error: RuntimeError: the probe broke"
    others = {k: v for k, v in features.items() if k != name}
    assert not any(str(v).startswith("error") for v in others.values()), others
