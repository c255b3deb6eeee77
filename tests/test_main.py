"""``python -m compatfn``'s report leaves out torch's NumPy warning and keeps every other one."""

from __future__ import annotations

import warnings
from typing import Any, Dict

import pytest

from compatfn import __main__ as cli
from compatfn import core


def test_report_drops_only_the_numpy_warning(monkeypatch: pytest.MonkeyPatch):
    features = core.features()

    def warning_features() -> Dict[str, Any]:
        # What torch raises at import where NumPy is missing, and one warning that must stay.
        numpy = "Failed to initialize NumPy: No module named 'numpy'"
        warnings.warn(numpy, UserWarning, stacklevel=1)
        warnings.warn("some other warning from torch", UserWarning, stacklevel=1)
        return features

    monkeypatch.setattr(core, "features", warning_features)
    monkeypatch.setattr(cli, "selfcheck", lambda: [])
    assert cli.report()["warnings"] == ["UserWarning: some other warning from torch"]
