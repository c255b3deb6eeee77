"""``compatfn matrix``: the support matrix (``compatfn.matrix``) for a CI configuration.

Standard library only, like the matrix itself: it never imports torch.

Example::

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    main(parser.parse_args(["matrix", "--format", "github", "--min-torch", "1.13"]))
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, Dict

from compatfn import matrix

FORMATS = ("github", "json", "tox", "requirements")

DESCRIPTION = """\
Print the torch releases compatfn supports (one row per minor release, pinned to its newest patch,
with the Python to run it on and the pins it needs), filtered, in a CI system's format:

  github        a GitHub Actions strategy.matrix, one entry per nox session of
                compatfn.matrix.nox_sessions: {"include": [{"session", "python", "torch", "pins",
                "legacy"}, ...]}, for fromJSON()
  json          the rows, with their torchvision and torchaudio releases
  tox           a tox.toml env_list and one [env.torchXY] table per row
  requirements  the requirements of one row (--torch X.Y), one per line, for pip install -r

Exit status: 0, or 2 with a one-line error (an unknown format, a torch outside the table, filters
that leave no row).
"""


def add_parser(sub: Any) -> None:
    """Add the ``matrix`` subcommand to ``sub`` (an argparse subparsers object)."""
    mat = sub.add_parser(
        "matrix",
        help="print the torch releases to test on, for GitHub Actions, tox or pip",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mat.add_argument("--format", default="json", help=f"{', '.join(FORMATS)} (default: json)")
    mat.add_argument("--min-torch", metavar="X.Y", help="the oldest torch to keep")
    mat.add_argument("--max-torch", metavar="X.Y", help="the newest torch to keep")
    mat.add_argument("--torch", action="append", metavar="X.Y", help="only this torch (repeatable)")
    mat.add_argument("--ends", action="store_true", help="only the oldest and the newest row left")
    mat.add_argument(
        "--no-legacy",
        action="store_true",
        help="github, tox: leave out the COMPATFN_LEGACY=1 twins of the torch 2.x rows",
    )
    mat.add_argument(
        "--name", default="tests", help="github: the nox sessions' name (default: tests)"
    )
    mat.add_argument(
        "--with",
        dest="companions",
        action="append",
        default=[],
        choices=("torchvision", "torchaudio"),
        help="requirements: also pin this companion (repeatable)",
    )


def render(args: argparse.Namespace) -> str:
    """The text ``compatfn matrix`` prints for ``args``; :class:`compatfn.matrix.MatrixError`
    for bad input."""
    if args.format not in FORMATS:
        raise matrix.MatrixError(f"unknown format {args.format!r}; one of {', '.join(FORMATS)}")
    rows = matrix.rows(args.min_torch, args.max_torch, args.torch, args.ends)
    legacy = not args.no_legacy
    if args.format == "github":
        return json.dumps(matrix.github_matrix(rows, args.name, legacy))
    if args.format == "json":
        return json.dumps([_as_dict(r) for r in rows], indent=2)
    if args.format == "tox":
        tables = matrix.tox_envs(rows, legacy)
        env_list = ", ".join(f'"{name}"' for name in tables)
        return "\n\n".join([f"env_list = [{env_list}]", *tables.values()])
    if len(rows) != 1:
        raise matrix.MatrixError(
            f"--format requirements needs one torch (--torch X.Y); {len(rows)} rows are left"
        )
    return "\n".join(rows[0].requirements(*args.companions))


def _as_dict(row: matrix.Row) -> Dict[str, Any]:
    fields: Dict[str, Any] = dataclasses.asdict(row)
    fields["pins"] = list(row.pins)
    extra: Dict[str, Any] = {"setup_context": row.setup_context, "cpu_wheels": row.cpu_wheels}
    return {"key": row.key, **fields, **extra}


def main(args: argparse.Namespace) -> int:
    """Print the parsed ``matrix`` command's output; exit status 2 with one line on bad input."""
    try:
        text = render(args)
    except matrix.MatrixError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(text)
    return 0
