"""Per-call cost of ``compatfn.custom_op`` against a hand-written legacy Function, side by side.

Usage::

    python benchmarks/custom_op.py                 # prints the table
    python benchmarks/custom_op.py --write  # also benchmarks/results/custom_op-torch<X>-cpu.json
    python benchmarks/custom_op.py --callgrind --write  # instructions per call (needs valgrind)

One operator, ``x * scale`` with its backward, on a 1-element CPU tensor, made four ways: a
hand-written legacy ``forward(ctx, x, scale)`` Function (the baseline, ratio 1.0), the op that
``compatfn.custom_op`` gives on this torch (called positionally and with a keyword), compatfn's
``registered`` tier where this torch has ``torch.library`` (on torch >= 2.4 it is not what
``custom_op`` picks: shown for comparison) and torch's own ``torch.library.custom_op`` (torch >=
2.4). Phases: forward on an input that requires grad (``fwd``), forward and
``torch.autograd.grad`` (``fwd+bwd``), forward under ``torch.no_grad()`` (``no grad``). All rows
run in one process in alternating rounds of short blocks; the fastest block of each is kept.
``--callgrind`` counts instructions per call instead (``callgrind.py``; written as
``custom_op_instructions-torch<X>-cpu.json``): the same counts on a busy or an idle machine.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import callgrind  # next to this script
import results_json
import torch
from overhead import HandLegacy  # next to this script: the same baseline
from torch.utils.benchmark import Timer

from compatfn import library


def make_op(tier: str, namespace: str) -> Any:
    """``namespace::scale`` on ``tier`` (``"default"``: what ``compatfn.custom_op`` picks)."""

    def scale(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x * scale

    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
        ctx.scale = inputs[1]

    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        return grad * ctx.scale, None

    name = f"{namespace}::scale"
    if tier == "default":
        op = library.custom_op(name, scale, mutates_args=())
    elif tier == "torch.library":
        # The schema given: torch 2.4 cannot read this module's string annotations.
        op = torch.library.custom_op(  # type: ignore[attr-defined]
            name, scale, mutates_args=(), schema="(Tensor x, float scale=2.0) -> Tensor"
        )
    else:
        op = library._custom_op(name, scale, (), None, None, tier)
    op.register_autograd(backward, setup_context=setup_context)
    return op


def calls() -> List[Tuple[str, Callable[..., Any], bool]]:
    """(label, callable, called with a keyword) for every row, the baseline first."""
    rows: List[Tuple[str, Callable[..., Any], bool]] = [
        ("hand-written Function", HandLegacy.apply, False)
    ]
    op = make_op("default", "cfbench_default")
    rows += [(f"compatfn.custom_op ({library.TIER})", op, False)]
    rows += [(f"compatfn.custom_op ({library.TIER}), keyword", op, True)]
    if library.TIER == "torch" and library.HAS_LIBRARY:
        rows += [("compatfn registered tier", make_op("registered", "cfbench_registered"), False)]
    if library.HAS_TORCH_CUSTOM_OP:
        rows += [("torch.library.custom_op", make_op("torch.library", "cfbench_torch"), False)]
    return rows


PHASES = {
    "fwd": "f(xg, 2.0)",
    "fwd+bwd": "torch.autograd.grad(f(xg, 2.0), xg)",
    "no grad": "f(x0, 2.0)",
}
KEYWORD_PHASES = {
    "fwd": "f(xg, scale=2.0)",
    "fwd+bwd": "torch.autograd.grad(f(xg, scale=2.0), xg)",
    "no grad": "f(x0, scale=2.0)",
}


def statements() -> List[Tuple[str, str, str, Dict[str, Any]]]:
    """(row, phase, statement, names) of every measurement, in one fixed order."""
    names = {"x0": torch.ones(1), "xg": torch.ones(1, requires_grad=True), "torch": torch}
    found = []
    for label, fn, keyword in calls():
        for phase in PHASES:
            stmt = (KEYWORD_PHASES if keyword else PHASES)[phase]
            if phase == "no grad":
                stmt = f"with torch.no_grad(): {stmt}"
            found.append((label, phase, stmt, {**names, "f": fn}))
    return found


def measure(rounds: int, min_run_time: float) -> Dict[Tuple[str, str], float]:
    """Best µs per call of each (row, phase)."""
    best: Dict[Tuple[str, str], float] = {}
    measured = statements()
    for _ in range(rounds):
        for label, phase, stmt, names in measured:
            timer = Timer(stmt, globals=names)
            # The fastest block, as the docstring says: the least disturbed on a shared machine.
            us = min(timer.blocked_autorange(min_run_time=min_run_time).times) * 1e6
            key = (label, phase)
            best[key] = min(best.get(key, us), us)
    return best


def count(n: int) -> Dict[Tuple[str, str], float]:
    """Instructions per call of each (row, phase), from a callgrind run of this script."""
    keys = [(label, phase) for label, phase, _, _ in statements()]
    counts = callgrind.count([os.path.abspath(__file__), "--worker"], len(keys), n)
    return dict(zip(keys, counts))


def table(best: Dict[Tuple[str, str], float], unit: str = "µs") -> Dict[str, Any]:
    """The results in the benchmark JSON schema (the docs' Performance page renders it)."""
    labels = list(dict.fromkeys(label for label, _ in best))
    columns = ["call"]
    for phase in PHASES:
        columns += [f"{phase} {unit}", f"{phase} ratio"]
    rows: List[List[Any]] = []
    for label in labels:
        row: List[Any] = [label]
        for phase in PHASES:
            value = best[(label, phase)]
            ratio = value / best[(labels[0], phase)]
            row += [round(value) if unit != "µs" else round(value, 2), round(ratio, 3)]
        rows.append(row)
    return {"columns": columns, "rows": rows}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (best kept)")
    parser.add_argument("--min-run-time", type=float, default=0.05, help="seconds per block")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/...json")
    parser.add_argument("--callgrind", action="store_true", help="count instructions per call")
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.worker:
        callgrind.worker([(stmt, names) for _, _, stmt, names in statements()], args.worker)
        return 0
    if args.callgrind:
        result = table(count(2000), unit="instructions")
    else:
        result = table(measure(args.rounds, args.min_run_time))
    widths = [max(len(str(r[i])) for r in [result["columns"], *result["rows"]]) for i in range(7)]
    for row in [result["columns"], *result["rows"]]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)))
    if args.write:
        what = "instructions" if args.callgrind else "time"
        path = results_json.write(
            "custom_op_instructions" if args.callgrind else "custom_op",
            f"compatfn.custom_op per call vs a hand-written Function (1-element CPU, {what})",
            results_json.command("custom_op.py", argv),
            result["columns"],
            result["rows"],
            "cpu",
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
