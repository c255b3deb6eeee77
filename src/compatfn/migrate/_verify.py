"""``migrate --verify -- COMMAND``: run the user's own test command on a copy of the original tree
and on a migrated copy, record every call of every migrated Function in both (inputs, outputs,
the gradients its backward returns; see :mod:`._recorder`) and report, class by class, how many
calls each run made, how many were identical, which differed, and which classes the tests never
called.

Example::

    verify(["src/mylib"], ["python", "-m", "pytest", "-q", "tests"])  # 0: identical, 1: not
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._cli import DEFAULT_VERIFY_TIMEOUT
from ._command import python_files
from ._layout import line_length_for
from ._rewrite import DEFAULT_DECORATOR, migrate_source

IGNORED = shutil.ignore_patterns(
    ".git", ".nox", ".tox", ".venv", "venv", "__pycache__", "*.egg-info", "build", "dist"
)


def _copy(root: Path, target: Path) -> None:
    shutil.copytree(root, target, ignore=IGNORED, symlinks=True)


def _migrate_copy(copy: Path, paths: Sequence[Path], decorator: str) -> Dict[str, List[str]]:
    """Migrate the files of ``paths`` inside ``copy``; {file: migrated class names}. Refusals
    and notes go to stderr as ``migrate`` prints them, with paths relative to ``copy``."""
    migrated: Dict[str, List[str]] = {}
    lengths: Dict[Path, Optional[int]] = {}
    for path in python_files([copy / p for p in paths]):
        length = line_length_for(path, lengths)
        name = path.relative_to(copy).as_posix()
        result = migrate_source(path.read_bytes(), name, decorator, length)
        for line in [*result.refusals, *result.notes]:
            print(line, file=sys.stderr)
        if result.migrated:
            path.write_bytes(result.new_bytes())
            migrated[name] = list(result.migrated)
    return migrated


class CommandFailed(Exception):
    """The test command could not be started or ran past the time limit: a one-line message."""


def _end(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` and what it started (its process group on POSIX) and reap it."""
    try:
        if os.name == "posix":
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except OSError:
        pass  # already gone
    process.wait()


def _run(
    copy: Path,
    command: Sequence[str],
    classes: Dict[str, List[str]],
    out: Path,
    timeout: float = DEFAULT_VERIFY_TIMEOUT,
) -> int:
    """Run ``command`` in ``copy`` with the recorder first on PYTHONPATH; its exit status.
    Raises :class:`CommandFailed` when it cannot start or runs past ``timeout`` seconds (0: no
    limit), after killing it and the processes it started."""
    hook = out / "hook"
    hook.mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("_recorder.py"), hook / "sitecustomize.py")
    path = [str(hook), str(copy)] + ([str(copy / "src")] if (copy / "src").is_dir() else [])
    old = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path + ([old] if old else [])),
        "COMPATFN_VERIFY_CLASSES": json.dumps({str(copy / f): n for f, n in classes.items()}),
        "COMPATFN_VERIFY_OUT": str(out),
    }
    try:
        process = subprocess.Popen(
            list(command), cwd=copy, env=env, start_new_session=os.name == "posix"
        )
    except OSError as error:
        raise CommandFailed(
            f"cannot run the test command {command[0]!r}: {error.strerror or error}"
        ) from None
    try:
        return process.wait(timeout=timeout or None)
    except subprocess.TimeoutExpired:
        _end(process)
        raise CommandFailed(
            f"the test command ran past --verify-timeout {timeout:g} s on the {copy.parent.name} "
            "tree and was stopped; give it more time (--verify-timeout SECONDS, 0 for no "
            "limit) or a smaller test command"
        ) from None
    except BaseException:  # Ctrl-C: its process group does not get the terminal's signal
        _end(process)
        raise


def _load_calls(out: Path) -> Dict[str, List[Dict[str, Any]]]:
    import torch

    calls: Dict[str, List[Dict[str, Any]]] = {}
    files = sorted(out.glob("calls-*.pt"), key=lambda p: p.stat().st_mtime)
    for file in files:
        for key, entries in torch.load(file).items():
            calls.setdefault(key, []).extend(entries)
    return calls


def _same(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.layout == b.layout
        ):
            return False
        if a.layout != torch.strided:  # sparse: eq and isnan take dense tensors only
            a, b = a.to_dense(), b.to_dense()
        return bool((a.eq(b) | (a.isnan() & b.isnan())).all())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def compare_calls(
    original: List[Dict[str, Any]], migrated: List[Dict[str, Any]]
) -> Tuple[int, List[str]]:
    """(identical calls, a line per difference) for one class's calls, in call order."""
    problems: List[str] = []
    if len(original) != len(migrated):
        problems.append(f"{len(original)} calls on the original, {len(migrated)} migrated")
    identical = 0
    for index, (a, b) in enumerate(zip(original, migrated)):
        if not _same(a["inputs"], b["inputs"]):
            problems.append(f"call {index + 1}: different inputs (is the test seeded?)")
        elif not _same(a.get("outputs"), b.get("outputs")):
            problems.append(f"call {index + 1}: different outputs")
        elif not _same(a["grads"], b["grads"]):
            problems.append(f"call {index + 1}: different gradients")
        else:
            identical += 1
    return identical, problems


def verify(
    paths: Sequence[Path],
    command: Sequence[str],
    decorator: str = DEFAULT_DECORATOR,
    timeout: float = DEFAULT_VERIFY_TIMEOUT,
) -> int:
    """The ``--verify`` command; exit status 0 when every call was identical, 1 otherwise (no
    call of a migrated class at all included), 2
    when the test command cannot start or runs past ``timeout`` seconds on a tree (0: none)."""
    try:
        return _verify(paths, command, decorator, timeout)
    except CommandFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _absolute(command: Sequence[str], root: Path) -> List[str]:
    """``command`` with a relative path to its program (``.venv/bin/python``) made absolute:
    it runs in the copies, which leave virtual environments out."""
    program = command[0]
    relative = any(sep and sep in program for sep in (os.sep, os.altsep))
    if relative and not os.path.isabs(program) and (root / program).exists():
        return [os.path.abspath(root / program), *command[1:]]  # a venv's link kept a link
    return list(command)


def _verify(paths: Sequence[Path], command: Sequence[str], decorator: str, timeout: float) -> int:
    root = Path.cwd()
    command = _absolute(command, root)
    with tempfile.TemporaryDirectory(prefix="compatfn-verify-") as scratch:
        base = Path(scratch)
        original, migrated = base / "original" / root.name, base / "migrated" / root.name
        _copy(root, original)
        _copy(root, migrated)
        relative = [Path(os.path.relpath(Path(p).resolve(), root)) for p in paths]
        classes = _migrate_copy(migrated, relative, decorator)
        if not classes:
            print("verify: nothing to migrate, nothing to compare", file=sys.stderr)
            return 0
        print(f"verify: running {' '.join(command)} on the original tree", file=sys.stderr)
        status_o = _run(original, command, classes, base / "calls-original", timeout)
        print(f"verify: running {' '.join(command)} on the migrated tree", file=sys.stderr)
        status_m = _run(migrated, command, classes, base / "calls-migrated", timeout)
        calls_o = _load_calls(base / "calls-original")
        calls_m = _load_calls(base / "calls-migrated")
    return report(classes, calls_o, calls_m, status_o, status_m)


def _recorded_from(key: str, name: str, file: str) -> bool:
    """Whether the calls recorded as ``key`` (``module:qualname``) are those of class ``name``
    of ``file`` (a path relative to the copy): the qualname ends with ``name`` (a class nested
    in a class or defined in a function included) and the module is the file's dotted path or a
    tail of it (``src/pkg/ops.py`` is ``pkg.ops``), or ``__main__`` (a script run directly).

    Example::

        >>> _recorded_from("pkg.ops:Square", "Square", "src/pkg/ops.py")
        True
        >>> _recorded_from("pkg.ops:make.<locals>.Square", "Square", "src/pkg/ops.py")
        True
        >>> _recorded_from("pkg.other:Square", "Square", "src/pkg/ops.py")
        False
    """
    module, _, qualname = key.rpartition(":")
    if qualname.rsplit(".", 1)[-1] != name:
        return False
    dotted = file[: -len(".py")].replace("/", ".") if file.endswith(".py") else file
    if dotted.endswith(".__init__"):
        dotted = dotted[: -len(".__init__")]
    return module in ("__main__", dotted) or dotted.endswith(f".{module}")


def _shown(key: str) -> str:
    """A recorded key as the report shows it: ``pkg.ops.Square``."""
    return key.replace(":", ".", 1)


def report(
    classes: Dict[str, List[str]],
    calls_o: Dict[str, List[Dict[str, Any]]],
    calls_m: Dict[str, List[Dict[str, Any]]],
    status_o: int,
    status_m: int,
) -> int:
    """Print the per-class table; 1 if a call differed, the test command's status did, or no
    migrated class was called at all (nothing was proven)."""
    failed = status_o != status_m
    print(f"test command exit status: original {status_o}, migrated {status_m}")
    seen = set(calls_o) | set(calls_m)
    if not seen:  # a check that checked nothing does not pass
        print(
            "verify: the test command called no migrated class on either tree: nothing was "
            "compared" + (" (it failed on both: does it run?)" if status_o and status_m else ""),
            file=sys.stderr,
        )
        failed = True
    for file, names in sorted(classes.items()):
        for name in dict.fromkeys(names):
            keys = sorted(k for k in seen if _recorded_from(k, name, file))
            if not keys:
                print(f"{file}: {name}: never exercised")
                continue
            for key in keys:
                identical, problems = compare_calls(calls_o.get(key, []), calls_m.get(key, []))
                count = len(calls_m.get(key, []))
                verdict = "identical" if not problems else f"DIFFERENT ({'; '.join(problems[:3])})"
                print(f"{file}: {_shown(key)}: {count} calls, {identical} identical: {verdict}")
                failed = failed or bool(problems)
    return 1 if failed else 0
