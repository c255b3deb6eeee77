"""Command line: ``python -m compatfn`` (report and self-check), ``python -m compatfn vendor``,
``python -m compatfn migrate`` and ``python -m compatfn matrix``.

Examples::

    python -m compatfn          # report for the installed torch; exit 1 if a check fails
    python -m compatfn --json   # the same, as JSON
    python -m compatfn vendor mypkg/_autograd_compat.py  # write the vendorable core
    python -m compatfn migrate src/mypkg --write  # legacy Functions -> setup_context style
    python -m compatfn matrix --format github  # the torch releases to test on, for CI

Exit status: 0 success, 1 a failed self-check, a file that cannot be written or a stdout closed
early (``| head``), 2 a usage error (bad arguments, an existing destination without ``--force``, a
bad ``COMPATFN_LEGACY``, bad ``matrix`` filters). ``vendor`` and ``matrix`` never import torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import compatfn
from compatfn import _exports
from compatfn import _matrix_cli as matrix_cli
from compatfn.migrate import _cli as migrate_cli

HEADER = """\
{about}
#     python -m compatfn vendor {dest} --force
{api}
{env}
#
{license}
"""


class UsageError(Exception):
    """A mistake in how the command was called: reported in one line, exit status 2."""


def _comment(text: str) -> str:
    """``text`` as comment lines of at most 79 characters."""
    return "\n".join("# " + line for line in textwrap.wrap(text, 77))


def _license_comment() -> str:
    text = Path(__file__).with_name("LICENSE").read_text(encoding="utf-8")
    return "\n".join(f"# {line}".rstrip() for line in text.strip().splitlines())


def vendor(dest: Path, force: bool = False) -> Path:
    """Write the vendorable core module (``compatfn.core``) to ``dest`` with a header.

    Missing parent folders are created. Raises :class:`UsageError` for a destination that is a
    folder, not a ``.py`` file, or exists without ``force``; ``OSError`` if it cannot be written.

    Example::

        vendor(Path("src/mylib/_autograd_compat.py"))
    """
    if dest.is_dir():
        raise UsageError(
            f"{dest} is a folder; name the .py file to write, e.g. {dest / '_autograd_compat.py'}"
        )
    if dest.suffix != ".py":
        raise UsageError(f"{dest} is not a .py file; name a module, e.g. _autograd_compat.py")
    if dest.exists() and not force:
        raise UsageError(f"{dest} exists; pass --force to overwrite it")
    source = _exports.module_source("compatfn.core")  # read, not imported: no torch
    header = HEADER.format(
        dest=dest.as_posix(),
        about=_comment(
            f"Vendored from compatfn {compatfn.__version__}, module compatfn.core. Do not edit; "
            "regenerate:"
        ),
        api=_comment(
            f"Public API: {', '.join(_exports.names_in_all(source))} (see the docstrings below)."
        ),
        env=_comment(
            "Every copy reads the environment variable COMPATFN_LEGACY (1 forces the legacy path)."
        ),
        license=_license_comment(),
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(header + source, encoding="utf-8")
    return dest


# --- report and self-check ---------------------------------------------------------------------


def _selfcheck_cases() -> List[Tuple[str, Any, Dict[str, Any]]]:
    """(label, Function or operator, keyword arguments) of the reference suites: the Functions of
    :mod:`compatfn.relu` and the ``compatfn.custom_op`` operators of :mod:`compatfn.relu_ops`."""
    from compatfn import relu, relu_ops

    return [
        ("ReLU", relu.ReLU, {}),
        ("ClippedReLU", relu.ClippedReLU, {"clip": 1.0}),
        ("MaskReLU", relu.MaskReLU, {}),
        ("InplaceReLU", relu.InplaceReLU, {}),
        ("BitReLU", relu.BitReLU, {}),
        ("clipped_relu_op", relu_ops.clipped_relu_op, {"clip": 1.0}),
        ("mask_relu_op", relu_ops.mask_relu_op, {}),
    ]


#: What the self-check runs of :func:`compatfn.testing.check_function`: the numerical checks and
#: native-vs-legacy parity (no torch.compile or vmap: the report stays fast). Operators get the
#: numerical checks and the :func:`compatfn.testing.opcheck` tests in :data:`SELFCHECK_OPCHECKS`.
SELFCHECKS = ("forward", "gradcheck", "gradgradcheck", "parity")
SELFCHECK_OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


def _input(device: str) -> Any:
    import torch

    # Values away from the kinks (0 and clip), where the derivative is defined.
    base = torch.tensor([-1.5, -0.25, 0.25, 0.75, 1.5, 3.0], dtype=torch.float64)
    return base.to(device).requires_grad_()


def _check(target: Any, kwargs: Dict[str, Any], device: str) -> None:
    """Run the self-checks on a Function class or an operator; raises on the first failure."""
    import torch

    from compatfn.testing import check_function, opcheck

    if isinstance(target, type) and issubclass(target, torch.autograd.Function):
        check_function(target, _input(device), kwargs=kwargs, checks=SELFCHECKS)
        return
    opcheck(target, (_input(device),), kwargs, test_utils=SELFCHECK_OPCHECKS)
    check_function(target, _input(device), kwargs=kwargs, checks=SELFCHECKS[:3])


def selfcheck() -> List[Dict[str, Any]]:
    """Run the reference Functions through gradcheck, gradgradcheck and native/legacy parity
    (:func:`compatfn.testing.check_function`), and the reference operators through
    :func:`compatfn.testing.opcheck` and gradcheck, on CPU and, where present, CUDA."""
    import torch

    results = []
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    for device in devices:
        for label, target, kwargs in _selfcheck_cases():
            start = time.perf_counter()
            try:
                _check(target, kwargs, device)
                error = None
            except Exception as caught:
                error = "".join(traceback.format_exception_only(type(caught), caught)).strip()
            call = ", ".join(["x"] + [f"{k}={v!r}" for k, v in kwargs.items()])
            name = f"{label}.apply({call})" if isinstance(target, type) else f"{label}({call})"
            results.append(
                {
                    "check": name,
                    "device": device,
                    "ok": error is None,
                    "error": error,
                    "seconds": round(time.perf_counter() - start, 3),
                }
            )
    return results


def report() -> Dict[str, Any]:
    """Everything ``python -m compatfn`` prints, as a dict.

    Warnings raised while torch is imported and probed (deprecations inside torch) are collected
    under ``"warnings"``, one line each, instead of being printed. torch's "Failed to initialize
    NumPy" warning is dropped: compatfn never uses NumPy, and torch runs without it.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=NUMPY_WARNING)
        import torch

        from compatfn import _features, core, library, relu

        features = _features.features()
        data = {
            "compatfn": compatfn.__version__,
            "torch": str(torch.__version__),
            "torch_path": str(Path(torch.__file__).parent),
            "python": sys.version.split()[0],
            "cuda": torch.cuda.is_available(),
            "path": core.mode(relu.ReLU),
            "legacy_forced": core._env_forces_legacy(),
            "custom_op": library.TIER,
            "features": features,
            "feature_notes": feature_notes(features),
            "selfcheck": selfcheck(),
        }
    data["custom_op_note"] = library.custom_op_note()  # once selfcheck defined its ops
    lines = (f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught)
    data["warnings"] = list(dict.fromkeys(lines))  # once each, in order
    return data


#: The start of the warning torch raises at import where NumPy is not installed: harmless for
#: compatfn, which never uses NumPy, so the report leaves it out (a regular expression).
NUMPY_WARNING = "Failed to initialize NumPy"


#: What ``compatfn.custom_op`` gives on each tier (``compatfn.library.TIER``; the docs' "Custom
#: operators" page has the table).
CUSTOM_OP_NOTES = {
    "torch": "torch's own torch.library.custom_op, with a fast eager call",
    "registered": "a real operator under torch.ops.<namespace>.<name>, registered by compatfn",
    "function": "built on compatfn.function; no operator registration on this torch",
}


#: What each ``features()["compile"]`` value means (the docs' torch.compile table, in short).
COMPILE_NOTES = {
    "native": "Fn.apply, functional(Fn) and torch.compile(Fn.apply) of decorated classes compile "
    "with fullgraph=True wherever a hand-written Function does",
    "functional": "dynamo rejects setup_context-style classes written without compatfn "
    "(pytorch #118397); decorated classes take the legacy form here (mode 'dual'), so Fn.apply, "
    "functional(Fn) and torch.compile(Fn.apply) compile wherever a hand-written Function does",
}


def feature_notes(features: Dict[str, Any]) -> Dict[str, str]:
    """The explanations the report prints next to ``compile`` and ``export``.

    Example::

        >>> feature_notes({"compile": "native", "export": ("strict",)})["export"]
        'torch 2.1 has strict export only (non-strict from torch 2.2)'
    """
    from compatfn import core

    compile_ = features.get("compile")
    notes = {
        "compile": COMPILE_NOTES.get(str(compile_))
        or core._dynamo_unsupported()
        or "torch.compile needs torch >= 2.0",
    }
    export = tuple(features.get("export", ()))
    if not export:
        notes["export"] = "torch.export needs torch >= 2.1"
    elif "non-strict" not in export:
        notes["export"] = "torch 2.1 has strict export only (non-strict from torch 2.2)"
    return notes


def _print_report(data: Dict[str, Any]) -> None:
    forced = " (forced by COMPATFN_LEGACY)" if data["legacy_forced"] else ""
    print(f"compatfn {data['compatfn']} on torch {data['torch']} (Python {data['python']})")
    print(f"torch from {data['torch_path']}; CUDA {'available' if data['cuda'] else 'absent'}")
    print(f"path taken: {data['path']}{forced}")
    print(f"custom_op tier: {data['custom_op']} ({CUSTOM_OP_NOTES[data['custom_op']]})")
    if data.get("custom_op_note"):
        print(f"custom_op calls: {data['custom_op_note']}")
    for line in data["warnings"]:
        print(f"torch warned: {line}")
    print("\nfeatures of this torch:")
    width = max(len(k) for k in data["features"])
    for key, value in data["features"].items():
        shown = ", ".join(value) or "unavailable" if isinstance(value, (tuple, list)) else value
        note = data["feature_notes"].get(key)
        print(f"  {key:<{width}}  {shown}: {note}" if note else f"  {key:<{width}}  {shown}")
    print("\nself-check:")
    for row in data["selfcheck"]:
        status = "ok  " if row["ok"] else "FAIL"
        print(f"  {status} {row['check']} [{row['device']}] {row['seconds']:.2f}s")
        if row["error"]:
            print(f"       {row['error']}")
    failed = sum(not row["ok"] for row in data["selfcheck"])
    print(f"\n{len(data['selfcheck']) - failed} passed, {failed} failed")


def _parser() -> argparse.ArgumentParser:
    console_script = Path(sys.argv[0]).name == "compatfn"  # installed as the `compatfn` command
    parser = argparse.ArgumentParser(
        prog="compatfn" if console_script else "python -m compatfn",
        description="Report what the installed torch offers for custom autograd Functions and "
        "self-check compatfn's reference Functions on it.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    sub = parser.add_subparsers(dest="command")
    vend = sub.add_parser(
        "vendor",
        help="write the vendorable core module to DEST",
        description="Write compatfn's core (one module: standard library and torch only) to "
        "DEST, with a header naming its version, public API and license. Missing folders are "
        "created. Does not import torch.",
    )
    vend.add_argument("dest", type=Path, help="the .py file to write, e.g. mypkg/_compat.py")
    vend.add_argument("--force", action="store_true", help="overwrite DEST if it exists")
    migrate_cli.add_parser(sub)
    matrix_cli.add_parser(sub)
    return parser


def _vendor_command(dest: Path, force: bool) -> int:
    try:
        print(f"wrote {vendor(dest, force=force)}")
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot write {dest}: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


def _report_command(as_json: bool) -> int:
    try:
        data = report()
    except ImportError as error:  # torch itself cannot be imported here
        print(f"error: torch cannot be imported: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        if "COMPATFN_LEGACY" not in str(error):
            raise
        print(f"error: {error}", file=sys.stderr)  # a bad COMPATFN_LEGACY value
        return 2
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        _print_report(data)
    return 0 if all(row["ok"] for row in data["selfcheck"]) else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "vendor":
        return _vendor_command(args.dest, args.force)
    if args.command == "migrate":
        return migrate_cli.main(args)
    if args.command == "matrix":
        return matrix_cli.main(args)
    return _report_command(args.json)


def _exit_quietly_on_closed_pipe() -> int:
    """Exit status 1 without a traceback when stdout's reader has gone (``... | head``).

    Python's documented recipe (the ``signal`` module's "Note on SIGPIPE"): point stdout at
    devnull so that the interpreter's final flush does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def console() -> int:
    """The ``compatfn`` command and ``python -m compatfn``: :func:`main`, quiet on a closed pipe."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        status = _exit_quietly_on_closed_pipe()
    return status


if __name__ == "__main__":
    sys.exit(console())
