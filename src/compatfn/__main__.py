"""Command line: ``python -m compatfn`` (report and self-check) and ``python -m compatfn vendor``.

Examples::

    python -m compatfn          # report for the installed torch; exit 1 if a check fails
    python -m compatfn --json   # the same, as JSON
    python -m compatfn vendor mypkg/_autograd_compat.py  # write the vendorable core
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

import compatfn
from compatfn import core

HEADER = """\
# Vendored from compatfn {version} (module compatfn.core); BSD-3-Clause, see
# the compatfn project for the full license text. Do not edit: regenerate with
#     python -m compatfn vendor {dest}
# Public API: function, mode, as_legacy, functional, features (see the docstrings below).
"""


def _devices() -> List[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _selfcheck_cases() -> List[tuple]:
    """(Function, keyword arguments) of the reference suite, one keyword call included."""
    from compatfn import relu

    return [
        (relu.ReLU, {}),
        (relu.ClippedReLU, {"clip": 1.0}),
        (relu.MaskReLU, {}),
        (relu.InplaceReLU, {}),
        (relu.BitReLU, {}),
    ]


def _input(device: str) -> torch.Tensor:
    # Values away from the kinks (0 and clip), where the derivative is defined.
    base = torch.tensor([-1.5, -0.25, 0.25, 0.75, 1.5, 3.0], dtype=torch.float64)
    return base.to(device).requires_grad_()


def _check(cls: Any, kwargs: Dict[str, Any], device: str) -> None:
    def call(x: torch.Tensor) -> Any:
        return cls.apply(x * 1, **kwargs)  # x * 1: in-place Functions must not get a leaf

    if not torch.autograd.gradcheck(call, (_input(device),)):
        raise AssertionError("gradcheck returned False")
    if not torch.autograd.gradgradcheck(call, (_input(device),)):
        raise AssertionError("gradgradcheck returned False")
    if core.mode(cls) == "native":  # the legacy adapter must agree exactly
        results = []
        for klass in (cls, core.as_legacy(cls)):
            x = _input(device)
            y = klass.apply(x * 1, **kwargs)
            results.append((y.detach(), torch.autograd.grad(y.sum(), x)[0]))
        (y1, g1), (y2, g2) = results
        if not (torch.equal(y1, y2) and torch.equal(g1, g2)):
            raise AssertionError("the native path and the legacy adapter disagree")


def selfcheck() -> List[Dict[str, Any]]:
    """Run the reference Functions through gradcheck, gradgradcheck and native/legacy parity."""
    results = []
    for device in _devices():
        for cls, kwargs in _selfcheck_cases():
            start = time.perf_counter()
            try:
                _check(cls, kwargs, device)
                error = None
            except Exception as caught:
                error = "".join(traceback.format_exception_only(type(caught), caught)).strip()
            call = ", ".join(["x"] + [f"{k}={v!r}" for k, v in kwargs.items()])
            results.append(
                {
                    "check": f"{cls.__name__}.apply({call})",
                    "device": device,
                    "ok": error is None,
                    "error": error,
                    "seconds": round(time.perf_counter() - start, 3),
                }
            )
    return results


def report() -> Dict[str, Any]:
    """Everything ``python -m compatfn`` prints, as a dict."""
    from compatfn import relu

    return {
        "compatfn": compatfn.__version__,
        "torch": str(torch.__version__),
        "torch_path": str(Path(torch.__file__).parent),
        "python": sys.version.split()[0],
        "cuda": torch.cuda.is_available(),
        "path": core.mode(relu.ReLU),
        "legacy_forced": os.environ.get(core.LEGACY_ENV, "") not in ("", "0"),
        "features": compatfn.features(),
        "selfcheck": selfcheck(),
    }


def _print_report(data: Dict[str, Any]) -> None:
    forced = " (forced by COMPATFN_LEGACY)" if data["legacy_forced"] else ""
    print(f"compatfn {data['compatfn']} on torch {data['torch']} (Python {data['python']})")
    print(f"torch from {data['torch_path']}; CUDA {'available' if data['cuda'] else 'absent'}")
    print(f"path taken: {data['path']}{forced}")
    print("\nfeatures of this torch:")
    width = max(len(k) for k in data["features"])
    for key, value in data["features"].items():
        print(f"  {key:<{width}}  {value}")
    print("\nself-check:")
    for row in data["selfcheck"]:
        status = "ok  " if row["ok"] else "FAIL"
        print(f"  {status} {row['check']} [{row['device']}] {row['seconds']:.2f}s")
        if row["error"]:
            print(f"       {row['error']}")
    failed = sum(not row["ok"] for row in data["selfcheck"])
    print(f"\n{len(data['selfcheck']) - failed} passed, {failed} failed")


def vendor(dest: Path, force: bool = False) -> Path:
    """Write the vendorable core module (``compatfn.core``) to ``dest`` with a header."""
    if dest.exists() and not force:
        raise FileExistsError(f"{dest} exists; pass --force to overwrite it")
    if dest.suffix != ".py":
        raise ValueError(f"{dest} is not a .py file")
    source = Path(core.__file__).read_text(encoding="utf-8")
    dest.write_text(
        HEADER.format(version=compatfn.__version__, dest=dest.as_posix()) + source,
        encoding="utf-8",
    )
    return dest


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compatfn",
        description="Report what the installed torch offers for custom autograd Functions and "
        "self-check compatfn's reference Functions on it.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    sub = parser.add_subparsers(dest="command")
    vend = sub.add_parser("vendor", help="write the vendorable core module to DEST")
    vend.add_argument("dest", type=Path, help="the .py file to write, e.g. mypkg/_compat.py")
    vend.add_argument("--force", action="store_true", help="overwrite DEST if it exists")
    args = parser.parse_args(argv)

    if args.command == "vendor":
        try:
            written = vendor(args.dest, force=args.force)
        except (FileExistsError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"wrote {written}")
        return 0

    data = report()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_report(data)
    return 0 if all(row["ok"] for row in data["selfcheck"]) else 1


if __name__ == "__main__":
    sys.exit(main())
