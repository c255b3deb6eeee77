"""``python -m compatfn``'s report leaves out torch's NumPy warning and keeps every other one;
``compatfn matrix`` prints the support matrix for CI, and bad input in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from compatfn import __main__ as cli
from compatfn import _features, matrix


def test_report_drops_only_the_numpy_warning(monkeypatch: pytest.MonkeyPatch):
    features = _features.features()

    def warning_features() -> Dict[str, Any]:
        # What torch raises at import where NumPy is missing, and one warning that must stay.
        numpy = "Failed to initialize NumPy: No module named 'numpy'"
        warnings.warn(numpy, UserWarning, stacklevel=1)
        warnings.warn("some other warning from torch", UserWarning, stacklevel=1)
        return features

    monkeypatch.setattr(_features, "features", warning_features)
    monkeypatch.setattr(cli, "selfcheck", lambda: [])
    assert cli.report()["warnings"] == ["UserWarning: some other warning from torch"]


# --- compatfn matrix ---------------------------------------------------------------------------


def _matrix(capsys: pytest.CaptureFixture[str], *args: str) -> Tuple[int, str, str]:
    status = cli.main(["matrix", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_matrix_github_is_one_entry_per_nox_session(capsys: pytest.CaptureFixture[str]):
    status, out, err = _matrix(capsys, "--format", "github")
    assert (status, err) == (0, "")
    include = json.loads(out)["include"]  # what fromJSON() reads: one JSON document
    expected = [
        (matrix.session_name("tests", r, legacy), r.python, r.torch, " ".join(r.pins), legacy)
        for r in matrix.ROWS
        for legacy in ((False, True) if r.setup_context else (False,))
    ]
    assert [tuple(e.values()) for e in include] == expected
    assert set(include[0]) == {"session", "python", "torch", "pins", "legacy"}


def test_matrix_filters_and_formats(capsys: pytest.CaptureFixture[str]):
    _, out, _ = _matrix(capsys, "--format", "github", "--ends", "--no-legacy", "--name", "t")
    assert [e["session"] for e in json.loads(out)["include"]] == ["t-1-8", "t-2-15"]
    _, out, _ = _matrix(capsys, "--min-torch", "2.13", "--max-torch", "2.14")
    rows = json.loads(out)
    assert [(r["torch"], r["python"], r["setup_context"]) for r in rows] == [
        ("2.13.0", "3.12", True),
        ("2.14.1", "3.13", True),
    ]
    _, out, _ = _matrix(
        capsys, "--format", "requirements", "--torch", "1.8", "--with", "torchvision"
    )
    assert out.splitlines() == ["torch==1.8.1", "numpy<2", "setuptools<70", "torchvision==0.9.1"]
    _, out, _ = _matrix(capsys, "--format", "tox", "--torch", "2.0")
    assert out.startswith('env_list = ["torch20", "torch20-legacy"]\n\n[env.torch20]\n')
    assert out.rstrip().endswith('set_env = { COMPATFN_LEGACY = "1" }')


def test_matrix_tox_is_toml_tox_reads(capsys: pytest.CaptureFixture[str]):
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    _, out, _ = _matrix(capsys, "--format", "tox", "--min-torch", "2.14")
    parsed = tomllib.loads(out)
    assert parsed["env_list"] == ["torch214", "torch214-legacy", "torch215", "torch215-legacy"]
    assert parsed["env"]["torch215-legacy"]["set_env"] == {"COMPATFN_LEGACY": "1"}
    assert parsed["env"]["torch214"]["deps"] == matrix.row("2.14").requirements()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "yaml"], "error: unknown format 'yaml'; one of github, json, tox"),
        (["--torch", "3.1"], "error: no torch 3.1 in the matrix; the table has torch 1.8 to"),
        (["--torch", "latest"], "error: 'latest' is not a torch release such as 2.4"),
        (["--min-torch", "2.4", "--max-torch", "2.3"], "error: no torch release is left by"),
        (["--format", "requirements"], "error: --format requirements needs one torch"),
        (["--format", "requirements", "--torch", "1.13", "--with", "torchaudio"], "no torchaudio"),
    ],
)
def test_matrix_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: List[str], message: str
):
    status, out, err = _matrix(capsys, *args)
    assert (status, out) == (2, "")
    assert message in err and err.count("\n") == 1, err


def test_matrix_into_a_closed_pipe_is_not_a_traceback():
    """The installed ``compatfn`` command, like ``python -m compatfn``, exits 1 quietly when its
    reader has gone (``compatfn matrix | head``)."""
    command = Path(sys.executable).with_name("compatfn")
    if not command.exists():
        pytest.skip(f"no compatfn command next to {sys.executable} (not installed there)")
    proc = subprocess.Popen(
        [str(command), "matrix"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    proc.stdout.close()  # type: ignore[union-attr]  (before the command has started writing)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err
