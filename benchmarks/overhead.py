"""Per-call overhead of ``@compatfn.function``, side by side with plain torch.

Usage::

    python benchmarks/overhead.py            # µs per call, 1-element CPU tensor
    python benchmarks/overhead.py --quick    # one short round (a smoke test)
    python benchmarks/overhead.py --quick --device cuda   # the same on a 1-element CUDA tensor
    python benchmarks/overhead.py --before old/core.py    # before/after, side by side

Writes benchmarks/results/overhead-torch<X.Y.Z>-<device>.json, which the docs' Performance page
renders (see benchmarks/results_json.py). ``--before`` loads another copy of compatfn's ``core.py``
(e.g. ``git show main:src/compatfn/core.py``) under its own name and measures its classes next to
this checkout's, in the same rounds.

Phases: ``fwd`` (forward on an input that requires grad, as in training: the call records the
graph; the targets refer to it), ``fwd, no grad`` (the cheapest call, where the fixed per-call cost
weighs most; reported, no target) and ``fwd+bwd`` (with ``torch.autograd.grad``). Rows:

* native path (torch with ``setup_context``): the same setup_context-style class decorated vs
  undecorated, called positionally; the decorated one also with a keyword and with the default.
  Targets: torch 2.2+ decorated <= 0.5x undecorated (fwd+bwd <= 0.75x); 2.0/2.1 <= 1.03x.
* legacy path (torch 1.x, or ``@compatfn.function(legacy=True)`` on 2.x): the adapted class vs an
  equivalent hand-written ``forward(ctx, ...)`` Function called positionally. Targets: <= 1.10x
  positional, <= 1.30x keyword.

* custom operator: ``compatfn.custom_op`` with ``register_autograd`` vs a
  hand-written legacy ``forward(ctx, ...)`` Function doing the same (``HandLegacy``), called
  positionally and with a keyword. Target on torch 1.x-2.3 (where compatfn builds the op):
  <= 1.2x. On torch >= 2.4 the op is torch's own ``CustomOpDef``: reported, no target.

All rows are measured in the same process, in alternating rounds of short blocks; the fastest
block of each row is kept (the estimate least disturbed by other load on a shared machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
from typing import Any, Dict, List, Optional, Tuple

import results_json  # next to this script
import torch
from torch.utils.benchmark import Timer

import compatfn
from compatfn.core import _APPLY_FILLS_DEFAULTS, _HAS_SETUP_CONTEXT
from compatfn.library import HAS_TORCH_CUSTOM_OP


def make_new() -> type:
    """A fresh, undecorated setup_context-style class (one per call: decorating one is safe)."""

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
            return x * scale

        @staticmethod
        def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
            ctx.scale = inputs[1] if len(inputs) > 1 else 2.0  # undecorated 2.0/2.1: no default

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
            return grad * ctx.scale, None

    return Scale


class HandLegacy(torch.autograd.Function):
    """The same Function, hand-written in the legacy style (the 1.x baseline)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:  # type: ignore[override]
        ctx.scale = scale
        return x * scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:  # type: ignore[override]
        return grad * ctx.scale, None


class HandWithScratch(torch.autograd.Function):
    """A hand-written legacy Function that returns an intermediate its caller slices off."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float = 2.0) -> Any:  # type: ignore[override]
        ctx.scale = scale
        scratch = x * 0
        ctx.mark_non_differentiable(scratch)
        return x * scale, scratch

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: Any) -> Tuple[torch.Tensor, None]:  # type: ignore[override]
        return grad * ctx.scale, None


def hand_sliced(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    return HandWithScratch.apply(x, scale)[0]  # type: ignore[no-any-return]


def make_intermediates(function: Any = compatfn.function) -> type:
    """The same Function with ``intermediates=1``: the scratch value reaches setup_context."""

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(x: torch.Tensor, scale: float = 2.0) -> Any:
            return x * scale, x * 0

        @staticmethod
        def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
            ctx.scale = inputs[1]

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
            return grad * ctx.scale, None

    return function(Scale, intermediates=1)  # type: ignore[no-any-return]


#: Where ``--before`` measures the other core's classes: (this row's label, statement's class).
BEFORE = {
    "compatfn (positional)": "Native",
    "compatfn (keyword)": "Native",
    "compatfn (default)": "Native",
    "compatfn legacy (positional)": "Legacy",
    "compatfn legacy (keyword)": "Legacy",
    "compatfn intermediates=1 (positional)": "Inter",
}


def _before_rows(rows: List[Tuple[str, str, str, str]]) -> List[Tuple[str, str, str, str]]:
    """Each compatfn row again, on the classes of the ``--before`` core (``<Name>Before``)."""
    out = []
    for kind, label, stmt, base in rows:
        out.append((kind, label, stmt, base))
        name = BEFORE.get(label)
        if name is not None:
            out.append((kind, f"{label} [before]", stmt.replace(name, name + "Before"), base))
    return out


def load_core(path: str) -> Any:
    """Another copy of compatfn's ``core.py``, imported under its own name (core is vendorable)."""
    spec = importlib.util.spec_from_file_location("overhead_core_before", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows() -> List[Tuple[str, str, str, str]]:
    """(kind, label, statement, baseline label)."""
    rows: List[Tuple[str, str, str, str]] = []
    if _HAS_SETUP_CONTEXT:
        rows += [
            (
                "native",
                "undecorated (positional)",
                "Plain.apply(x, 2.0)",
                "undecorated (positional)",
            ),
            ("native", "compatfn (positional)", "Native.apply(x, 2.0)", "undecorated (positional)"),
            (
                "native",
                "compatfn (keyword)",
                "Native.apply(x, scale=2.0)",
                "undecorated (positional)",
            ),
            ("native", "compatfn (default)", "Native.apply(x)", "undecorated (positional)"),
        ]
    rows += [
        (
            "legacy",
            "hand-written legacy (positional)",
            "HandLegacy.apply(x, 2.0)",
            "hand-written legacy (positional)",
        ),
        (
            "legacy",
            "compatfn legacy (positional)",
            "Legacy.apply(x, 2.0)",
            "hand-written legacy (positional)",
        ),
        (
            "legacy",
            "compatfn legacy (keyword)",
            "Legacy.apply(x, scale=2.0)",
            "hand-written legacy (positional)",
        ),
        (
            "legacy",
            "compatfn legacy (default)",
            "Legacy.apply(x)",
            "hand-written legacy (positional)",
        ),
    ]
    rows += [
        (
            "intermediates",
            "hand-written, sliced (positional)",
            "hand_sliced(x, 2.0)",
            "hand-written, sliced (positional)",
        ),
        (
            "intermediates",
            "compatfn intermediates=1 (positional)",
            "Inter.apply(x, 2.0)",
            "hand-written, sliced (positional)",
        ),
    ]
    rows += [
        ("op", "custom_op (positional)", "Op(x, 2.0)", "hand-written legacy (positional)"),
        ("op", "custom_op (keyword)", "Op(x, scale=2.0)", "hand-written legacy (positional)"),
    ]
    return rows


def make_op() -> Any:
    """The same computation as ``HandLegacy``, as a ``compatfn.custom_op``."""

    @compatfn.custom_op("compatfn_bench::scale", mutates_args=())
    def scale(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x * scale

    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
        ctx.scale = inputs[1]

    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        return grad * ctx.scale, None

    scale.register_autograd(backward, setup_context=setup_context)
    return scale


def PHASES(stmt: str, x0: torch.Tensor, xg: torch.Tensor) -> List[Tuple[str, str, torch.Tensor]]:
    """The measured calls: forward as in training (the input requires grad, so the call records
    the graph: the baseline the targets refer to), forward on an input without grad (the
    cheapest call, where fixed per-call costs weigh most), and forward+backward."""
    return [
        ("fwd", stmt, xg),
        ("fwd, no grad", stmt, x0),
        ("fwd+bwd", f"grad({stmt}, x, g)", xg),
    ]


_PHASE_NAMES = ("fwd", "fwd, no grad", "fwd+bwd")


def _targets(kind: str, label: str, phase: str) -> Optional[float]:
    if phase == "fwd, no grad":
        return None
    if kind == "native" and label.startswith("compatfn (positional)"):
        if _APPLY_FILLS_DEFAULTS:  # torch's own apply binds defaults per call: compatfn beats it
            return 0.5 if phase == "fwd" else 0.75
        return 1.03
    if kind == "legacy" and label.startswith("compatfn legacy (positional)"):
        return 1.10
    if kind == "legacy" and label.startswith("compatfn legacy (keyword)"):
        return 1.30
    if kind == "intermediates" and label.startswith("compatfn"):
        return 1.10
    if kind == "op" and label == "custom_op (positional)" and not HAS_TORCH_CUSTOM_OP:
        return 1.2
    return None


def measure(
    rounds: int, min_run_time: float, device: str = "cpu", before: Any = None
) -> List[Dict[str, Any]]:
    env: Dict[str, Any] = {
        "HandLegacy": HandLegacy,
        "hand_sliced": hand_sliced,
        "Inter": make_intermediates(),
        "grad": torch.autograd.grad,
    }
    if _HAS_SETUP_CONTEXT:
        env["Plain"] = make_new()
        env["Native"] = compatfn.function(make_new())
    env["Legacy"] = compatfn.function(make_new(), legacy=True)
    env["Op"] = make_op()
    rows = _rows()
    if before is not None:
        env["InterBefore"] = make_intermediates(before.function)
        if _HAS_SETUP_CONTEXT:
            env["NativeBefore"] = before.function(make_new())
        env["LegacyBefore"] = before.function(make_new(), legacy=True)
        rows = _before_rows(rows)
    x0 = torch.ones(1, device=device)
    xg = torch.ones(1, device=device, requires_grad=True)
    g = torch.ones(1, device=device)
    best: Dict[Tuple[str, str], float] = {}
    for _ in range(rounds):
        for _kind, label, stmt, _ in rows:
            for phase, s, x in PHASES(stmt, x0, xg):
                timer = Timer(s, globals={**env, "x": x, "g": g})
                # Short blocks, the fastest kept: on a shared machine the minimum is the estimate
                # least disturbed by other work (a median over long blocks drifts with the load).
                number = max(1, int(min_run_time / 3e-5))
                t = min(timer.timeit(number).mean for _ in range(3))
                key = (label, phase)
                best[key] = min(best.get(key, float("inf")), t)
    out = []
    for kind, label, stmt, base in rows:
        for phase, _, _ in PHASES(stmt, x0, xg):
            t = best[(label, phase)]
            out.append(
                {
                    "kind": kind,
                    "label": label,
                    "call": stmt,
                    "phase": phase,
                    "us": t * 1e6,
                    "ratio": t / best[(base, phase)],
                    "baseline": base,
                    "target": _targets(kind, label, phase),
                    "mode": _mode(kind, label, env, before),
                }
            )
    return out


def _mode(kind: str, label: str, env: Dict[str, Any], before: Any) -> str:
    if label.startswith(("undecorated", "hand-written")):
        return "torch"
    if kind == "op":
        from compatfn.library import TIER

        return "op:" + TIER
    name = {"intermediates": "Inter", "native": "Native"}.get(kind, "Legacy")
    if label.endswith("[before]"):
        return str(before.mode(env[name + "Before"]))
    return compatfn.mode(env[name])


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one short round")
    p.add_argument("--rounds", type=int, default=15, help="alternating rounds (best kept)")
    p.add_argument("--min-run-time", type=float, default=0.06, help="seconds per timed block")
    p.add_argument(
        "--results",
        default=results_json.RESULTS,
        help="folder for the JSON result (default: benchmarks/results; '' writes none)",
    )
    p.add_argument("--device", default="cpu", help="where the 1-element tensor lives (cpu, cuda)")
    p.add_argument("--before", default=None, help="another core.py to measure side by side")
    args = p.parse_args(argv)
    before = load_core(args.before) if args.before else None
    rounds, mrt = (1, 0.05) if args.quick else (args.rounds, args.min_run_time)
    torch.set_num_threads(1)
    print(
        f"per-call overhead: torch {torch.__version__}, compatfn {compatfn.__version__}, Python "
        f"{platform.python_version()}, 1-element {args.device} tensor, µs per call "
        f"(best of {rounds})"
    )
    rows = measure(rounds, mrt, args.device, before)
    print(f"{'path':14} {'call':34} {'phase':12} {'µs':>8} {'ratio':>6}  target")
    for r in rows:
        target = (
            ""
            if r["target"] is None
            else (f"<= {r['target']}x: {'ok' if r['ratio'] <= r['target'] else 'MISSED'}")
        )
        print(
            f"{r['mode']:14} {r['label']:34} {r['phase']:12} {r['us']:8.2f} {r['ratio']:6.2f}  "
            f"{target}"
        )
    if args.results:
        path = results_json.write(
            "overhead",
            f"Per-call cost of a decorated Function (1-element {args.device} tensor)",
            results_json.command("overhead.py", argv),
            COLUMNS,
            table_rows(rows),
            args.device,
            note=NOTE.format(rounds=rounds),
            results=args.results,
        )
        print(f"wrote {path}")
    return 0


#: The columns of the JSON result: per phase the time and the ratio to the group's baseline.
COLUMNS = ["call", *(f"{phase} {unit}" for phase in _PHASE_NAMES for unit in ("µs", "ratio"))]
NOTE = (
    "Each ratio compares a call with the first row of its group, measured side by side in the "
    "same process (best of {rounds} alternating rounds, 1 thread): native rows against the "
    "undecorated class, legacy and custom_op rows against a hand-written legacy Function, "
    "intermediates against a hand-written Function whose caller slices off the extra output. "
    "Read the ratios; absolute times depend on the machine."
)


def table_rows(rows: List[Dict[str, Any]]) -> List[List[Any]]:
    """One row per call (``path: label``), the phases side by side."""
    table: Dict[str, List[Any]] = {}
    for r in rows:
        group = r["mode"] if r["kind"] == "op" else r["kind"]  # op rows name compatfn's tier
        label = f"{group}: {r['label']}"
        cells = table.setdefault(label, [label] + [None] * (len(COLUMNS) - 1))
        at = 1 + 2 * _PHASE_NAMES.index(r["phase"])
        cells[at : at + 2] = [round(r["us"], 2), round(r["ratio"], 3)]
    return list(table.values())


if __name__ == "__main__":
    sys.exit(main())
