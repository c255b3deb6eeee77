"""``python -m compatfn migrate``: the arguments and the dispatch, without importing LibCST (so
that ``--help`` and the missing-LibCST message work without it).

Example::

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    main(parser.parse_args(["migrate", "src/mylib", "--check"]))
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._rules import DESCRIPTION, EXIT_STATUS, RULES

#: Seconds ``--verify`` gives the test command on each tree unless told (0: no limit).
DEFAULT_VERIFY_TIMEOUT = 3600.0


def add_parser(sub: Any) -> None:
    """Add the ``migrate`` subcommand to ``sub`` (an argparse subparsers object)."""
    mig = sub.add_parser(
        "migrate",
        help="rewrite legacy forward(ctx, ...) Functions to the setup_context style",
        description=f"{DESCRIPTION}\n\n{RULES}\n{EXIT_STATUS}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mig.add_argument("paths", nargs="+", type=Path, metavar="PATH", help=".py files or folders")

    mode = mig.add_mutually_exclusive_group()
    mode.add_argument(
        "--diff", action="store_true", help="print a unified diff to stdout (the default)"
    )
    mode.add_argument("--write", action="store_true", help="rewrite the files in place")
    mode.add_argument(
        "--check", action="store_true", help="print the files that would change; exit 1 if any"
    )
    mig.add_argument(
        "--strict",
        action="store_true",
        help="also exit 1 when a class is refused (a CI or pre-commit check that every legacy "
        "Function is migrated)",
    )
    mig.add_argument(
        "--verify",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="last, after `--`, a test command: run it on a copy of this folder and on a migrated "
        "copy, record every call of every migrated Function in both, and report per class the "
        "calls seen, identical, different and the classes never exercised; exit 1 on a "
        "difference (files are left unchanged)",
    )
    mig.add_argument(
        "--verify-timeout",
        type=_seconds,
        default=DEFAULT_VERIFY_TIMEOUT,
        metavar="SECONDS",
        help="with --verify (and before it): stop the test command when it runs longer than "
        "this on either tree and exit 2 (default: 3600; 0: no limit)",
    )
    mig.add_argument(
        "--decorator",
        default="compatfn:function",
        metavar="MODULE:NAME",
        help="the decorator to add, e.g. mylib._autograd_compat:function for a vendored copy; "
        "custom_fwd/custom_bwd come from the same module (default: compatfn:function)",
    )


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more (argparse reports the error for anything else)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 for no limit)")
    return value


def main(args: argparse.Namespace) -> int:
    """Run the parsed ``migrate`` command; exit status 2 with one line if LibCST is missing."""
    try:
        from ._command import run
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "libcst":
            raise
        print(
            "error: compatfn migrate needs libcst: pip install 'compatfn[migrate]'",
            file=sys.stderr,
        )
        return 2
    if args.verify is not None:
        return _verify(args)
    mode = "write" if args.write else "check" if args.check else "diff"
    return run(args.paths, mode=mode, decorator=args.decorator, strict=args.strict)


def _verify(args: argparse.Namespace) -> int:
    """``--verify PATH... -- COMMAND...``."""
    from ._command import decorator_spec, python_files
    from ._verify import verify

    command = list(args.verify)
    command = command[1:] if command[:1] == ["--"] else command
    paths = list(args.paths)
    if not command:
        print("error: --verify needs a test command after it", file=sys.stderr)
        return 2
    if not paths:
        print("error: --verify needs a PATH to migrate before it", file=sys.stderr)
        return 2
    here = Path.cwd().resolve()
    for path in paths:
        if here not in (here / path).resolve().parents and (here / path).resolve() != here:
            print(
                f"error: {path} is outside the current folder, which --verify copies; run it "
                "from a folder that holds both the code and its tests",
                file=sys.stderr,
            )
            return 2
    try:
        decorator_spec(args.decorator)
        python_files(paths)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return verify(paths, command, args.decorator, args.verify_timeout)
