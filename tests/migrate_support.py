"""Helpers shared by the ``tests/test_migrate*.py`` modules (imported as a top-level module):
the smallest legacy Function, what its migrated file starts with, and the command run as a user
(or pre-commit) runs it. Imports neither LibCST nor torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

#: A legacy Function: ``forward(ctx, x)`` saving its input.
LEGACY_SQUARE = """\
import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad
"""
#: The first lines of ``LEGACY_SQUARE`` once migrated.
MIGRATED_HEAD = "import compatfn\nimport torch\n\n\n@compatfn.function\nclass Square("
#: ``LEGACY_SQUARE`` with ctx handed to a helper, which the codemod refuses.
REFUSED_SQUARE = LEGACY_SQUARE.replace("ctx.save_for_backward(x)", "keep(ctx, x)")


def python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``cwd`` with this interpreter, output captured as text."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def migrate_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m compatfn migrate ARGS`` in ``cwd``."""
    return python("-m", "compatfn", "migrate", *args, cwd=cwd)


def run_entry(entry: Sequence[str], files: Sequence[str], cwd: Path) -> subprocess.CompletedProcess:
    """A hook's ``entry`` (``python ...``) followed by ``files``, as pre-commit runs it."""
    assert entry[0] == "python"  # language: python runs it in the hook's own environment
    return python(*entry[1:], *files, cwd=cwd)
