"""Per-call overhead of ``@compatfn.function`` (issue 2, "Performance"), side by side.

Usage::

    python benchmarks/overhead.py            # µs per call, 1-element CPU tensor
    python benchmarks/overhead.py --quick --json overhead.json
    python benchmarks/overhead.py --before old/core.py --results   # before/after, side by side

``--before`` loads another copy of compatfn's ``core.py`` (e.g. ``git show main:src/compatfn/
core.py``) under its own name and measures its classes next to this checkout's, in the same
rounds; ``--results`` writes ``benchmarks/results/overhead-torch<X.Y.Z>.json`` (the docs'
Performance page renders it).

Phases: ``fwd`` (forward on an input that requires grad, as in training: the call records the
graph; the targets refer to it), ``fwd, no grad`` (the cheapest call, where the fixed per-call cost
weighs most; reported, no target) and ``fwd+bwd`` (with ``torch.autograd.grad``). Rows:

* native path (torch with ``setup_context``): the same setup_context-style class decorated vs
  undecorated, called positionally; the decorated one also with a keyword and with the default.
  Targets: torch 2.2+ decorated <= 0.5x undecorated (fwd+bwd <= 0.75x); 2.0/2.1 <= 1.03x.
* legacy path (torch 1.x, or ``@compatfn.function(legacy=True)`` on 2.x): the adapted class vs an
  equivalent hand-written ``forward(ctx, ...)`` Function called positionally. Targets: <= 1.10x
  positional, <= 1.30x keyword.

* custom operator (issue 11): ``compatfn.custom_op`` with ``register_autograd`` vs a
  hand-written legacy ``forward(ctx, ...)`` Function doing the same (``HandLegacy``), called
  positionally and with a keyword. Target on torch 1.x-2.3 (where compatfn builds the op):
  <= 1.2x. On torch >= 2.4 the op is torch's own ``CustomOpDef``: reported, no target.

All rows are measured in the same process, in alternating rounds of short blocks; the fastest
block of each row is kept (the estimate least disturbed by other load on a shared machine).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.utils.benchmark import Timer

import compatfn
from compatfn.core import APPLY_FILLS_DEFAULTS, HAS_SETUP_CONTEXT
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
    if HAS_SETUP_CONTEXT:
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


def _targets(kind: str, label: str, phase: str) -> Optional[float]:
    if phase == "fwd, no grad":
        return None
    if kind == "native" and label.startswith("compatfn (positional)"):
        if APPLY_FILLS_DEFAULTS:  # torch's own apply binds defaults per call: compatfn beats it
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


def measure(rounds: int, min_run_time: float, before: Any = None) -> List[Dict[str, Any]]:
    env: Dict[str, Any] = {
        "HandLegacy": HandLegacy,
        "hand_sliced": hand_sliced,
        "Inter": make_intermediates(),
        "grad": torch.autograd.grad,
    }
    if HAS_SETUP_CONTEXT:
        env["Plain"] = make_new()
        env["Native"] = compatfn.function(make_new())
    env["Legacy"] = compatfn.function(make_new(), legacy=True)
    env["Op"] = make_op()
    rows = _rows()
    if before is not None:
        env["InterBefore"] = make_intermediates(before.function)
        if HAS_SETUP_CONTEXT:
            env["NativeBefore"] = before.function(make_new())
        env["LegacyBefore"] = before.function(make_new(), legacy=True)
        rows = _before_rows(rows)
    x0 = torch.ones(1)
    xg = torch.ones(1, requires_grad=True)
    g = torch.ones(1)
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
    p.add_argument("--json", default=None, help="write the rows as JSON here")
    p.add_argument("--before", default=None, help="another core.py to measure side by side")
    p.add_argument(
        "--results", action="store_true", help="write benchmarks/results/overhead-torch<X.Y.Z>.json"
    )
    args = p.parse_args(argv)
    before = load_core(args.before) if args.before else None
    rounds, mrt = (1, 0.05) if args.quick else (args.rounds, args.min_run_time)
    torch.set_num_threads(1)
    print(
        f"per-call overhead: torch {torch.__version__}, compatfn {compatfn.__version__}, Python "
        f"{platform.python_version()}, 1-element CPU tensor, µs per call (best of {rounds})"
    )
    rows = measure(rounds, mrt, before)
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": str(torch.__version__), "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")
    if args.results:
        path = RESULTS / f"overhead-torch{_torch_release()}.json"
        path.parent.mkdir(exist_ok=True)
        table = results_table(rows, _command(args))
        path.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {path}")
    return 0


RESULTS = Path(__file__).resolve().parent / "results"


def _torch_release() -> str:
    """torch's release without a local part: ``2.4.1+cu121`` -> ``2.4.1``."""
    return str(torch.__version__).split("+")[0]


def _command(args: argparse.Namespace) -> str:
    """How this run was started, without local paths."""
    options = ["--quick"] * args.quick
    if not args.quick and args.rounds != 15:
        options.append(f"--rounds {args.rounds}")
    if args.before:
        options.append("--before <the previous core.py>")
    return " ".join(["python benchmarks/overhead.py", *options, "--results"])


def results_table(rows: List[Dict[str, Any]], command: str) -> Dict[str, Any]:
    """The rows in the shape the docs' Performance page renders: one line per call, µs and ratio
    (to the call's baseline) per phase."""
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    columns = ["call"] + [f"{phase} {what}" for phase in phases for what in ("µs", "ratio")]
    table: Dict[str, List[Any]] = {}
    for r in rows:
        line = table.setdefault(f"{r['label']} ({r['mode']})", [None] * (len(columns) - 1))
        i = phases.index(r["phase"]) * 2
        line[i : i + 2] = [round(r["us"], 3), round(r["ratio"], 3)]
    meta = {
        "benchmark": "overhead",
        "title": "Per-call cost of a decorated Function vs torch's own, 1-element CPU tensor",
        "command": command,
        "date": datetime.date.today().isoformat(),
        "torch": _torch_release(),
        "python": platform.python_version(),
        "device": "cpu",
    }
    return {"meta": meta, "columns": columns, "rows": [[k, *v] for k, v in table.items()]}


if __name__ == "__main__":
    sys.exit(main())
