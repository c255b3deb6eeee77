"""``--decorator mylib._compat:function``: code migrated for a vendored copy of compatfn runs
through that copy (``python -m compatfn vendor``), never through the installed package."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from migrate_support import migrate_cli
from migrate_support import python as _run

CORPUS = Path(__file__).resolve().parent / "migrate_corpus"

RUN = """\
import sys

import torch

import mylib.intermediates as ops
import mylib.real_patterns as real
import mylib.with_blocks as blocks

assert "compatfn" not in sys.modules, "the installed compatfn was imported"
for module, name in [
    (ops, "AttentionWithStats"),
    (real, "VectorSolve"),
    (real, "TreeMatmul"),
    (blocks, "NoGradScale"),
    (blocks, "EnableGradRecompute"),
]:
    cls = getattr(module, name)
    assert "setup_context" in vars(cls)
    inputs, extra = module.CASES[name]()
    lead = getattr(module, "LEADING", {}).get(name, ())
    def call(*xs):
        out = cls.apply(*lead, *xs, *extra)
        return out[0] if isinstance(out, tuple) else out
    assert torch.autograd.gradcheck(call, inputs)
print("ok")
"""


def test_migrated_classes_run_through_the_vendored_copy(tmp_path):
    package = tmp_path / "mylib"
    package.mkdir()
    (package / "__init__.py").write_text("")
    vendored = _run("-m", "compatfn", "vendor", "mylib/_compat.py", cwd=tmp_path)
    assert vendored.returncode == 0, vendored.stderr
    for stem in ("intermediates", "real_patterns", "with_blocks"):
        (package / f"{stem}.py").write_text((CORPUS / f"{stem}.py").read_text())
    migrated = migrate_cli(
        "--write", "--decorator", "mylib._compat:function", "mylib", cwd=tmp_path
    )
    assert migrated.returncode == 0, migrated.stderr
    source = (package / "intermediates.py").read_text()
    assert "from mylib import _compat\n" in source
    assert "import compatfn" not in source and "@compatfn" not in source
    assert "@_compat.function(intermediates=" in source
    run = _run("-c", RUN, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "ok\n"
