"""The hooks of ``.pre-commit-hooks.yaml``, run as pre-commit runs them: the ``entry`` split into
words, followed by the staged Python files, from the repository root; a failing exit status
blocks the commit."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from migrate_support import LEGACY_SQUARE as LEGACY
from migrate_support import REFUSED_SQUARE as REFUSED
from migrate_support import migrate_cli, run_entry

HOOKS = Path(__file__).resolve().parent.parent / ".pre-commit-hooks.yaml"


def hooks() -> Dict[str, Dict[str, str]]:
    """id -> {key: value} for the simple ``key: value`` lines of the hooks file."""
    found: Dict[str, Dict[str, str]] = {}
    current: Dict[str, str] = {}
    for line in HOOKS.read_text().splitlines():
        match = re.match(r"^(- )?\s*(\w+): (.*)$", line)
        if match:
            if match.group(1):
                current = {}
            current[match.group(2)] = match.group(3)
            if match.group(2) == "id":
                found[match.group(3)] = current
    return found


def run_hook(hook_id: str, files: List[str], cwd: Path) -> subprocess.CompletedProcess:
    return run_entry(shlex.split(hooks()[hook_id]["entry"]), files, cwd)


def test_the_hooks_file_names_both_hooks():
    assert set(hooks()) == {"compatfn-migrate", "compatfn-migrate-strict"}
    for hook in hooks().values():
        assert hook["language"] == "python" and hook["types"] == "[python]"
        assert hook["additional_dependencies"] == '["libcst>=1.1"]'


def test_hooks_block_a_legacy_function_and_pass_once_migrated(tmp_path):
    (tmp_path / "ops.py").write_text(LEGACY)
    for hook_id in hooks():
        result = run_hook(hook_id, ["ops.py"], tmp_path)
        assert result.returncode == 1, result.stderr
        assert result.stdout == "would migrate ops.py: Square\n"
    write = migrate_cli("--write", "ops.py", cwd=tmp_path)
    assert write.returncode == 0, write.stderr
    for hook_id in hooks():
        assert run_hook(hook_id, ["ops.py"], tmp_path).returncode == 0


def test_only_the_strict_hook_blocks_a_refused_function(tmp_path):
    (tmp_path / "refused.py").write_text(REFUSED)
    plain = run_hook("compatfn-migrate", ["refused.py"], tmp_path)
    assert plain.returncode == 0
    assert "refused.py:7: Square: forward passes ctx to keep()" in plain.stderr
    strict = run_hook("compatfn-migrate-strict", ["refused.py"], tmp_path)
    assert strict.returncode == 1
