"""compatfn.migrate._command: each file on its own, nothing half-written, bytes kept as they were,
and exit statuses a CI can rely on (``--check``, ``--strict``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from compatfn.migrate import _command as command
from migrate_support import LEGACY_SQUARE as LEGACY
from migrate_support import MIGRATED_HEAD, REFUSED_SQUARE
from migrate_support import migrate_cli as cli

DEEP = "TOTAL = " + " + ".join(["1"] * 500) + "\n"


@pytest.mark.parametrize(
    "name, data",
    [
        ("crlf", LEGACY.replace("\n", "\r\n").encode()),
        ("bom", b"\xef\xbb\xbf" + LEGACY.encode()),
        ("latin1", ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + LEGACY).encode("latin-1")),
    ],
)
def test_write_keeps_line_endings_encoding_and_bom(tmp_path, name, data):
    # Hostile probe 5: CRLF files came back with LF line endings.
    path = tmp_path / f"{name}.py"
    path.write_bytes(data)
    result = cli("--write", path.name, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    new = path.read_bytes()
    if name == "crlf":
        assert b"\r\n" in new and b"\n" not in new.replace(b"\r\n", b"")
        assert new.decode().replace("\r\n", "\n").startswith(MIGRATED_HEAD)
    elif name == "bom":
        assert new.startswith(b"\xef\xbb\xbf" + MIGRATED_HEAD.encode())
    else:
        text = new.decode("latin-1")
        assert "# caf\xe9\n" in text and "@compatfn.function\nclass Square(" in text
    assert cli("--check", path.name, cwd=tmp_path).returncode == 0  # a second run: no change


def test_a_long_expression_is_migrated_without_recursion_error(tmp_path):
    # Hostile probe 6: a ~500-term sum anywhere in a file raised RecursionError (traceback).
    (tmp_path / "deep.py").write_text(DEEP + LEGACY)
    result = cli("--write", "deep.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    text = (tmp_path / "deep.py").read_text()
    assert text.startswith(DEEP) and "import compatfn\nimport torch\n" in text
    assert "@compatfn.function\nclass Square(" in text


@pytest.mark.parametrize("mode", ["--write", "--check"])
def test_a_failing_file_is_reported_and_the_run_goes_on(tmp_path, mode):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a_broken.py").write_text("def (:\n")
    (tmp_path / "pkg" / "b_ok.py").write_text(LEGACY)
    result = cli(mode, "pkg", cwd=tmp_path)
    assert result.returncode == 2
    assert re.search(r"^error: pkg/a_broken\.py: cannot parse: ", result.stderr, re.M)
    assert "Traceback" not in result.stderr
    if mode == "--write":
        assert (tmp_path / "pkg" / "b_ok.py").read_text().startswith(MIGRATED_HEAD)
    else:
        assert result.stdout == "would migrate pkg/b_ok.py: Square\n"


def test_an_unwritable_file_is_reported_whole_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    # Hostile probe 7: --write onto a file that cannot be written raised PermissionError and
    # aborted the run.
    for stem in ("a", "b"):
        (tmp_path / f"{stem}.py").write_text(LEGACY)
    replace = os.replace

    def failing_replace(src, dst):
        if Path(dst).name == "a.py":
            raise PermissionError(13, "Permission denied")
        replace(src, dst)

    monkeypatch.setattr(command.os, "replace", failing_replace)
    status = command.run([tmp_path], mode="write")
    err = capsys.readouterr().err
    assert status == 1
    assert f"error: cannot write {(tmp_path / 'a.py').as_posix()}: Permission denied" in err
    assert (tmp_path / "a.py").read_text() == LEGACY  # untouched, not half-written
    assert (tmp_path / "b.py").read_text().startswith(MIGRATED_HEAD)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py"]  # no temporary left


def test_write_keeps_the_permission_bits(tmp_path):
    path = tmp_path / "ops.py"
    path.write_text(LEGACY)
    path.chmod(0o640)
    assert cli("--write", "ops.py", cwd=tmp_path).returncode == 0
    assert path.stat().st_mode & 0o777 == 0o640


def test_check_fails_on_changes_and_strict_also_on_refusals(tmp_path):
    # A tree where every Function is refused: --check is green (nothing would change), --strict
    # is red (what a CI that wants everything migrated checks).
    (tmp_path / "refused.py").write_text(REFUSED_SQUARE)
    check = cli("--check", ".", cwd=tmp_path)
    assert check.returncode == 0 and check.stdout == ""
    assert "refused.py:7: Square: forward passes ctx to keep()" in check.stderr
    strict = cli("--check", "--strict", ".", cwd=tmp_path)
    assert strict.returncode == 1
    (tmp_path / "legacy.py").write_text(LEGACY)
    check = cli("--check", ".", cwd=tmp_path)
    assert check.returncode == 1 and check.stdout == "would migrate legacy.py: Square\n"
    assert cli("--strict", "legacy.py", cwd=tmp_path).returncode == 0  # a diff, no refusal


def test_help_shows_the_rules_and_exit_statuses(tmp_path):
    from compatfn.migrate._rules import EXIT_STATUS, RULES

    result = cli("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert RULES in result.stdout and EXIT_STATUS in result.stdout
    for phrase in ("Refused", "intermediates", "custom_fwd", "super().forward", "--strict"):
        assert phrase in result.stdout


def test_write_through_a_symbolic_link_rewrites_its_target(tmp_path):
    # Hostile probe: --write replaced the link by a migrated copy and left its target legacy.
    target = tmp_path / "real.py"
    target.write_text(LEGACY)
    (tmp_path / "pkg").mkdir()
    link = tmp_path / "pkg" / "ops.py"
    link.symlink_to(target)
    result = cli("--write", "pkg", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink()
    assert target.read_text().startswith(MIGRATED_HEAD)


def test_a_file_libcst_cannot_write_back_as_it_is_is_left_unchanged(tmp_path):
    # Hostile probe: LibCST drops a form feed that starts a line inside a class body, so the
    # migrated file silently lost it; now the file is kept and its classes refused, with the line.
    data = LEGACY.replace(
        "    @staticmethod\n    def backward", "\x0c    @staticmethod\n    def backward"
    )
    path = tmp_path / "ff.py"
    path.write_text(data)
    result = cli("--write", "--strict", path.name, cwd=tmp_path)
    assert result.returncode == 1
    assert path.read_text() == data
    line = data.split("\n").index("\x0c    @staticmethod") + 1
    assert f"ff.py:{line}: Square: LibCST would not write line {line} of this file back" in (
        result.stderr
    )


def test_a_diff_the_console_cannot_show_is_escaped_not_a_traceback(tmp_path):
    # Hostile probe: a character stdout's encoding lacks (here a comment's é on an ASCII
    # console; a file name that is not UTF-8 on any console) stopped the run with a
    # UnicodeEncodeError traceback.
    import subprocess
    import sys

    (tmp_path / "ops.py").write_text(LEGACY.replace("return x * x", "return x * x  # é"))
    result = subprocess.run(
        [sys.executable, "-m", "compatfn", "migrate", "ops.py"],
        cwd=tmp_path,
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii:strict", "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"+@compatfn.function" in result.stdout and b"# \\xe9" in result.stdout


def test_a_note_on_a_migrated_class_goes_to_stderr_with_its_place(tmp_path, capsys):
    path = tmp_path / "ops.py"
    path.write_text(LEGACY.replace("return x * x", "return x"))
    assert command.run([path], mode="check") == 1
    err = capsys.readouterr().err
    assert f"{path.as_posix()}:4: Square: note: forward returns its input x as it is" in err
    assert "migrate 1 class(es) in 1 file(s); refused 0" in err
