"""``compatfn migrate PATH --verify COMMAND``: the user's test command runs on a copy of the
original tree and on a migrated copy; every call of every migrated Function is recorded in both
and compared class by class (calls, identical, different, never exercised); exit 1 on a
difference."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("libcst")
from compatfn.migrate._verify import compare_calls, report
from migrate_support import LEGACY_SQUARE, REFUSED_SQUARE, migrate_cli


def _call(x: float, grad: float) -> dict:
    return {
        "inputs": [torch.tensor([x]), {}],
        "outputs": torch.tensor([x * x]),
        "grads": (torch.tensor([grad]),),
    }


def test_identical_calls_are_counted():
    assert compare_calls([_call(1.0, 2.0)] * 2, [_call(1.0, 2.0)] * 2) == (2, [])


def test_sparse_inputs_are_compared_by_value():
    def sparse(value: float) -> dict:
        call = _call(1.0, 2.0)
        tensor = torch.sparse_coo_tensor([[0, 2]], [value, 2.0], (3,))
        return {**call, "inputs": [tensor, {}]}

    assert compare_calls([sparse(1.0)], [sparse(1.0)]) == (1, [])
    assert compare_calls([sparse(1.0)], [sparse(5.0)])[1] == [
        "call 1: different inputs (is the test seeded?)"
    ]
    dense = {**_call(1.0, 2.0), "inputs": [torch.tensor([1.0, 0.0, 2.0]), {}]}
    assert compare_calls([sparse(1.0)], [dense])[0] == 0  # a layout of its own


@pytest.mark.parametrize(
    "migrated, problem",
    [
        ([_call(1.0, 2.5)], "call 1: different gradients"),
        ([{**_call(1.0, 2.0), "outputs": torch.tensor([0.0])}], "call 1: different outputs"),
        ([_call(3.0, 2.0)], "call 1: different inputs (is the test seeded?)"),
        ([], "1 calls on the original, 0 migrated"),
    ],
)
def test_a_difference_is_named(migrated, problem):
    identical, problems = compare_calls([_call(1.0, 2.0)], migrated)
    assert identical == 0 and problems[0] == problem


def test_report_names_classes_never_exercised_and_fails_on_a_difference(capsys):
    classes = {"lib/ops.py": ["Square", "Cube"]}
    calls = {"lib.ops:Square": [_call(1.0, 2.0)]}
    assert report(classes, calls, calls, 0, 0) == 0
    out = capsys.readouterr().out
    assert "lib/ops.py: lib.ops.Square: 1 calls, 1 identical: identical" in out
    assert "lib/ops.py: Cube: never exercised" in out
    other = {"lib.ops:Square": [_call(1.0, 3.0)]}
    assert report(classes, calls, other, 0, 0) == 1
    assert "DIFFERENT (call 1: different gradients)" in capsys.readouterr().out
    assert report(classes, calls, calls, 0, 1) == 1  # the tests themselves disagree


def test_report_keeps_classes_of_the_same_name_in_different_files_apart(capsys):
    """Two files each define ``F``; only ``pkg.a.F`` is called: ``pkg/b.py``'s ``F`` is never
    exercised (it was reported with a's calls, as identical)."""
    classes = {"src/pkg/a.py": ["F"], "src/pkg/b.py": ["F"], "pkg/__init__.py": ["G"]}
    calls = {"pkg.a:F": [_call(1.0, 2.0)], "pkg:G": [_call(1.0, 2.0)]}
    assert report(classes, calls, calls, 0, 0) == 0
    out = capsys.readouterr().out
    assert "src/pkg/a.py: pkg.a.F: 1 calls, 1 identical: identical" in out
    assert "src/pkg/b.py: F: never exercised" in out
    assert "pkg/__init__.py: pkg.G: 1 calls" in out


def test_report_fails_when_nothing_was_compared(capsys):
    """Tests that call no migrated class (or do not run) prove nothing: exit status 1."""
    assert report({"lib/ops.py": ["Square"]}, {}, {}, 2, 2) == 1
    assert "nothing was compared (it failed on both: does it run?)" in capsys.readouterr().err


def _project(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "ops.py").write_text(LEGACY_SQUARE)
    seed = "torch.manual_seed(0)\n"
    # torch 1.8 itself can hang at interpreter exit after a backward (its autograd engine's C++
    # destructor; measured: 4 of 6 plain runs of this script): once the script has run through,
    # leave after every Python exit handler (the recorder's save included) and before that.
    leave = (
        "import atexit, os, sys\n"
        "finished = []\n"
        "atexit.register(lambda: finished and (sys.stdout.flush(), os._exit(0)))\n"
    )
    (tmp_path / "check.py").write_text(
        leave
        + textwrap.dedent(
            """
            import torch
            from lib.ops import Square
            """
        )
        + seed
        + "x = torch.randn(3, dtype=torch.float64, requires_grad=True)\n"
        + "Square.apply(x).sum().backward()\nSquare.apply(x * 2).sum().backward()\n"
        + "finished.append(True)\n"
    )
    return tmp_path


def test_verify_runs_the_command_on_both_trees_and_compares_every_call(tmp_path):
    import sys

    cwd = _project(tmp_path)
    done = migrate_cli("lib", "--verify", sys.executable, "check.py", cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert "lib/ops.py: lib.ops.Square: 2 calls, 2 identical: identical" in done.stdout
    assert (cwd / "lib" / "ops.py").read_text() == LEGACY_SQUARE  # the tree is left as it was


def test_verify_records_calls_through_a_module_level_alias_of_apply(tmp_path):
    """``square = Square.apply`` at module level (flash-attn's ``flash_attn_func``) took the
    apply from before the recorder wrapped it: the calls went unrecorded ("never exercised",
    exit 0) even where the migrated class differed."""
    import sys

    cwd = _project(tmp_path)
    ops = cwd / "lib" / "ops.py"
    ops.write_text(ops.read_text() + "\n\nsquare = Square.apply\n")
    check = cwd / "check.py"
    check.write_text(
        check.read_text()
        .replace("from lib.ops import Square", "from lib.ops import Square, square")
        .replace("Square.apply(x * 2)", "square(x * 2)")
    )
    done = migrate_cli("lib", "--verify", sys.executable, "check.py", cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert "lib/ops.py: lib.ops.Square: 2 calls, 2 identical: identical" in done.stdout


FACTORIES = """\
import torch


def make(scale):
    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * scale

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad * scale

    class Shifted(torch.autograd.Function):  # a second class of the same factory
        @staticmethod
        def forward(ctx, x):
            return x + scale

        @staticmethod
        def backward(ctx, grad):
            return grad

    return lambda x: Shifted.apply(Scaled.apply(x))


class Holder:
    class Inner(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 3

        @staticmethod
        def backward(ctx, grad):
            return grad * 3

    @staticmethod
    def build():
        def deeper():
            class Deep(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x + 1

                @staticmethod
                def backward(ctx, grad):
                    return grad

            return Deep

        return deeper()
"""


def test_verify_records_classes_defined_in_functions_and_classes(tmp_path):
    """A class defined in a factory function (or deeper, in a function the factory defines) or
    nested in a class is recorded as a module-level one is (torch-struct defines its Functions
    in factories, two in one of them); the test's own profiler keeps running."""
    import sys

    cwd = _project(tmp_path)
    (cwd / "lib" / "factories.py").write_text(FACTORIES)
    script = (
        (cwd / "check.py")
        .read_text()
        .replace(
            "finished.append(True)\n",
            "from lib.factories import Holder, make\n"
            "import sys\n"
            "seen = []\n"
            "sys.setprofile(lambda frame, event, arg: seen.append(event))\n"
            "make(2.0)(x).sum().backward()\n"
            "make(3.0)(x).sum().backward()\n"
            "Holder.Inner.apply(x).sum().backward()\n"
            "Holder.build().apply(x).sum().backward()\n"
            "sys.setprofile(None)\n"
            "assert seen, 'the test profiler was replaced'\n"
            "finished.append(True)\n",
        )
    )
    (cwd / "check.py").write_text(script)
    done = migrate_cli("lib", "--verify", sys.executable, "check.py", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "lib/factories.py: lib.factories.make.<locals>.Scaled: 2 calls, 2 identical" in out
    assert "lib/factories.py: lib.factories.make.<locals>.Shifted: 2 calls, 2 identical" in out
    assert "lib/factories.py: lib.factories.Holder.Inner: 1 calls, 1 identical" in out
    assert "lib.factories.Holder.build.<locals>.deeper.<locals>.Deep: 1 calls, 1 identical" in out
    assert "never exercised" not in out


def test_verify_prints_what_migrate_refused_and_noted(tmp_path):
    """The refusals (and notes) ``migrate`` prints go to stderr under --verify too, with the
    file's path in the user's tree, not in verify's copies."""
    import sys

    cwd = _project(tmp_path)
    (cwd / "lib" / "other.py").write_text(REFUSED_SQUARE)
    done = migrate_cli("lib", "--verify", sys.executable, "check.py", cwd=cwd)
    assert done.returncode == 0, done.stderr
    refusal = [line for line in done.stderr.splitlines() if ": Square: " in line]
    assert len(refusal) == 1 and refusal[0].startswith("lib/other.py:"), done.stderr
    assert "compatfn-verify-" not in done.stderr


SLEEPER = """\
import pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
pathlib.Path(sys.argv[1]).write_text(str(child.pid))
time.sleep(120)
"""


def _gone(pid: int, within: float = 10.0) -> bool:
    import os
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as stat:  # reaped by init soon: a zombie counts as gone
            if stat.read().split(") ", 1)[1].startswith("Z"):
                return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see a process gone")
def test_a_test_command_past_verify_timeout_is_stopped_with_what_it_started(
    tmp_path, monkeypatch, capsys
):
    import sys
    import time

    from compatfn.migrate._verify import verify

    (tmp_path / "project").mkdir()
    cwd = _project(tmp_path / "project")
    (cwd / "sleeper.py").write_text(SLEEPER)
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.chdir(cwd)
    start = time.monotonic()
    status = verify([Path("lib")], [sys.executable, "sleeper.py", str(pid_file)], timeout=3)
    assert status == 2 and time.monotonic() - start < 60
    err = capsys.readouterr().err
    assert "error: the test command ran past --verify-timeout 3 s on the original tree" in err
    assert "Traceback" not in err
    assert _gone(int(pid_file.read_text()))  # the process it started is stopped too


def test_verify_timeout_and_a_command_that_cannot_start_are_one_line_errors(tmp_path):
    import sys

    cwd = _project(tmp_path)
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    done = migrate_cli("lib", "--verify-timeout", "2", "--verify", *sleep, cwd=cwd)
    assert done.returncode == 2
    assert "ran past --verify-timeout 2 s on the original tree and was stopped" in done.stderr
    assert "Traceback" not in done.stderr
    done = migrate_cli("lib", "--verify", "no-such-test-command-here", cwd=cwd)
    assert done.returncode == 2
    assert "error: cannot run the test command 'no-such-test-command-here'" in done.stderr
    assert "Traceback" not in done.stderr
    done = migrate_cli("lib", "--verify-timeout", "-1", "--verify", *sleep, cwd=cwd)
    assert done.returncode == 2 and "is not a number of seconds" in done.stderr


def test_a_test_command_run_from_a_relative_virtual_environment_is_found(tmp_path, capsys):
    import os
    import stat
    import sys

    from compatfn.migrate._verify import verify

    cwd = _project(tmp_path)
    program = cwd / ".venv" / "bin" / "python"  # left out of the copies the command runs in
    program.parent.mkdir(parents=True)
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        status = verify([Path("lib")], [os.path.join(".venv", "bin", "python"), "check.py"])
    finally:
        os.chdir(old)
    out = capsys.readouterr().out
    assert status == 0 and "lib.ops.Square: 2 calls, 2 identical: identical" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuchdir"], "error: nosuchdir does not exist"),
        (["../elsewhere"], "error: ../elsewhere is outside the current folder"),
        (["lib", "--decorator", "foo"], "error: --decorator 'foo' is not MODULE:NAME"),
    ],
)
def test_user_mistakes_under_verify_are_one_line_errors(tmp_path, args, message):
    """They were tracebacks from the copy or the migration (without --verify: one line)."""
    import sys

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "project").mkdir()
    cwd = _project(tmp_path / "project")
    done = migrate_cli(*args, "--verify", sys.executable, "check.py", cwd=cwd)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and "Traceback" not in done.stderr
