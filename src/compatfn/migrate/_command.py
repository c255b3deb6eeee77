"""The ``migrate`` command: find the files, migrate each on its own, report, write atomically.

Example::

    run(["src/mylib"], mode="check", strict=True)  # exit status 1 if a file would change or a
                                                   # class is refused
"""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import libcst as cst

from ._layout import line_length_for
from ._rewrite import DEFAULT_DECORATOR, Result, migrate_source

#: Stack and recursion depth for one file: LibCST recurses once per nesting level of an
#: expression, and ``1 + 1 + ...`` with a few hundred terms exceeds Python's default limit.
DEEP_STACK_BYTES = 512 * 1024 * 1024
DEEP_RECURSION = 200_000


def python_files(paths: Sequence[Union[str, Path]]) -> List[Path]:
    """The ``.py`` files named or found (recursively, sorted) in the folders named."""
    files: List[Path] = []
    for entry in map(Path, paths):
        if entry.is_dir():
            files += sorted(p for p in entry.rglob("*.py") if p.is_file())
        elif entry.is_file():
            files.append(entry)
        else:
            raise FileNotFoundError(f"{entry} does not exist")
    return files


def decorator_spec(decorator: str) -> str:
    """``decorator`` if it reads ``MODULE:NAME``; raises ``ValueError`` otherwise."""
    module, colon, name = decorator.partition(":")
    if (
        not colon
        or not name.isidentifier()
        or not all(part.isidentifier() for part in module.split("."))
    ):
        raise ValueError(
            f"--decorator {decorator!r} is not MODULE:NAME, e.g. mylib._autograd_compat:function"
        )
    return decorator


def on_deep_stack(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a thread with a large stack and recursion limit; re-raises."""
    outcome: List[Any] = [None, None]

    def target() -> None:
        try:
            outcome[0] = function(*args)
        except BaseException as error:  # handed to the caller's thread
            outcome[1] = error

    old_stack = threading.stack_size(DEEP_STACK_BYTES)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, DEEP_RECURSION))
    try:
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(old_stack)
        sys.setrecursionlimit(old_limit)
    if outcome[1] is not None:
        raise outcome[1]
    return outcome[0]


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` in one step (a temporary file beside it, then a rename), so
    that a failure leaves the old file whole; the file's permission bits are kept. A symbolic
    link is followed: the file it points to is rewritten, the link stays a link."""
    path = Path(os.path.realpath(path))
    if not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    mode = path.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _migrate_file(path: Path, decorator: str, line_length: int) -> Union[Result, str]:
    """The result for one file, or the one-line error that stopped it."""
    try:
        source = path.read_bytes()
    except OSError as error:
        return f"error: cannot read {path}: {error.strerror or error}"
    try:
        result: Result = on_deep_stack(
            migrate_source, source, path.as_posix(), decorator, line_length
        )
    except cst.ParserSyntaxError as error:
        return f"error: {path}: cannot parse: {str(error).splitlines()[0]}"
    except (UnicodeDecodeError, SyntaxError, LookupError) as error:
        return f"error: cannot read {path}: {error}"
    except (RecursionError, MemoryError):
        return f"error: {path}: nested too deeply for migrate; file left unchanged"
    except Exception as error:  # never a traceback, never an aborted run
        return f"error: {path}: migrate failed ({type(error).__name__}: {error}); please report it"
    return result


def _report(result: Result, mode: str) -> Optional[str]:
    """Write, print the diff or the check line for one changed file; an error line or None."""
    if mode == "write":
        try:
            write_atomically(Path(result.path), result.new_bytes())
        except OSError as error:
            return f"error: cannot write {result.path}: {error.strerror or error}"
    elif mode == "check":
        _emit(f"would migrate {result.path}: {', '.join(result.migrated)}\n")
    else:
        _emit(result.diff())
    return None


def _emit(text: str) -> None:
    """Write ``text`` to stdout, escaping what its encoding cannot show (a file name that is not
    UTF-8, a character the console lacks) rather than stopping with UnicodeEncodeError."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))


def run(
    paths: Sequence[Union[str, Path]],
    mode: str = "diff",
    decorator: str = DEFAULT_DECORATOR,
    strict: bool = False,
) -> int:
    """The ``migrate`` command: ``mode`` is ``diff``, ``write`` or ``check``; returns the exit
    status (see :data:`compatfn.migrate.rules.EXIT_STATUS`).

    Diffs go to stdout, refusals (``path:line: Class: reason``), notes on migrated classes
    (``path:line: Class: note: ...``) and errors to stderr, and a last
    line to stderr counts migrated and refused classes. Each file is handled on its own: one that
    fails is reported and the others go on.

    Example::

        run(["src/mylib"], mode="check")
    """
    try:
        decorator_spec(decorator)
        files = python_files(paths)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    unreadable = unwritable = False
    migrated = refused = changed = 0
    lengths: Dict[Path, Optional[int]] = {}
    for path in files:
        result = _migrate_file(path, decorator, line_length_for(path, lengths))
        if isinstance(result, str):
            print(result, file=sys.stderr)
            unreadable = True
            continue
        for refusal in [*result.refusals, *result.notes]:
            print(refusal, file=sys.stderr)
        migrated += len(result.migrated)
        refused += len(result.refusals)
        if result.changed:
            changed += 1
            problem = _report(result, mode)
            if problem:
                print(problem, file=sys.stderr)
                unwritable = True
    verb = {"write": "migrated", "check": "would migrate", "diff": "would migrate"}[mode]
    print(f"{verb} {migrated} class(es) in {changed} file(s); refused {refused}", file=sys.stderr)
    if unreadable:
        return 2
    failed = unwritable or (mode == "check" and changed) or (strict and refused)
    return 1 if failed else 0
