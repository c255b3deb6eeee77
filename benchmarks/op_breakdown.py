"""Where the per-call cost of a ``compatfn.custom_op`` goes on torch < 2.4 (issue 11), side by side.

Usage::

    python benchmarks/op_breakdown.py               # µs per forward call, input requires grad
    python benchmarks/op_breakdown.py --callgrind   # instructions per call (needs valgrind)

Measures the op of ``benchmarks/overhead.py`` (``x * scale`` with setup_context and backward)
against its baseline, the hand-written legacy Function ``HandLegacy``, and against copies of the
op's generated call with one kind of check taken out: the dispatcher probes (tracing, dispatch
modes, transforms; registered tier only), the meta-tensor test, torch's aliasing test, and all of
them. The copies exist only here, to tell what each check costs: compatfn never runs them. "op's
call, as a function" calls the generated call directly, without the op object's ``__call__``.

Timing alternates the rows in rounds and keeps each row's fastest block, as overhead.py does.
``--callgrind`` runs the rows under valgrind's callgrind and counts instructions instead: the same
counts on a busy or idle machine, but blind to cache misses, so time ratios come out higher.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from typing import Any, Dict, List, Optional

import torch
from torch.utils.benchmark import Timer

import compatfn
from compatfn.library import HAS_TORCH_CUSTOM_OP, TIER

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import callgrind
from overhead import HandLegacy, make_op


def _without(source: str, probes: bool = False, meta: bool = False, alias: bool = False) -> str:
    """``source`` of the generated call without the dispatcher probes, the meta test and/or the
    aliasing test of its short path."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"(\s*)if (.*):$", line)
        if not match or " is Tensor" not in match.group(2):
            continue
        tests = _top_level_terms(match.group(2))
        if tests[0].startswith("type(out)"):  # the aliasing line: the type test, then aliasing
            kept = tests[:1] if alias else tests
        else:
            kept = [
                t
                for t in tests
                if not (probes and t.startswith("not (")) and not (meta and ".is_meta" in t)
            ]
        lines[i] = f"{match.group(1)}if {' and '.join(kept)}:"
    return "\n".join(lines) + "\n"


def _top_level_terms(test: str) -> List[str]:
    """The terms of ``test`` joined by ``and`` outside any parentheses."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(test):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and test.startswith(" and ", i):
            terms.append(test[start:i])
            start = i + len(" and ")
    return [*terms, test[start:]]


#: The copies of the op's call: label, and what :func:`_without` takes out.
COPIES = (
    ("op's call without dispatcher probes", {"probes": True}),
    ("op's call without the meta test", {"meta": True}),
    ("op's call without the aliasing test", {"alias": True}),
    ("op's call without all three", {"probes": True, "meta": True, "alias": True}),
)


def rows(op: Any) -> Dict[str, str]:
    """Label -> the statement that calls it on ``x`` (names from :func:`namespace`): the
    baseline, the op, its call as a function, and the copies of the call."""
    source = inspect.getsource(type(op).__call__)
    out = {
        "hand-written legacy (baseline)": "HandLegacy.apply(x, 2.0)",
        "compatfn.custom_op": "op(x, 2.0)",
        "op's call, as a function": "call(op, x, 2.0)",
    }
    for i, (label, taken_out) in enumerate(COPIES):
        if _without(source, **taken_out) != source:  # else nothing to take out on this torch
            out[label] = f"copy{i}(op, x, 2.0)"
    return out


def namespace(op: Any) -> Dict[str, Any]:
    """The names the statements of :func:`rows` use."""
    call = type(op).__call__
    source = inspect.getsource(call)
    defined = re.search(r"def (\w+)\(", source)  # the generated def's name, not __name__
    name = defined.group(1) if defined else call.__name__
    names: Dict[str, Any] = {"HandLegacy": HandLegacy, "op": op, "call": call}
    names["x"] = torch.ones(1, requires_grad=True)
    for i, (label, taken_out) in enumerate(COPIES):
        scope = dict(call.__globals__)
        exec(compile(_without(source, **taken_out), f"<{label}>", "exec"), scope)
        names[f"copy{i}"] = scope[name]
    return names


def time_rows(op: Any, rounds: int) -> Dict[str, float]:
    statements, names = rows(op), namespace(op)
    best = {label: float("inf") for label in statements}
    for _ in range(rounds):
        for label, statement in statements.items():
            timer = Timer(statement, globals=names)
            best[label] = min(best[label], min(timer.timeit(2000).mean for _ in range(3)))
    return {label: t * 1e6 for label, t in best.items()}


def count_rows(n: int) -> Dict[str, float]:
    """Instructions per call of each row, from a callgrind run of this script."""
    labels = list(rows(make_op()))
    counts = callgrind.count([os.path.abspath(__file__), "--worker"], len(labels), n)
    return dict(zip(labels, counts))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=25, help="alternating rounds (best kept)")
    p.add_argument("--callgrind", action="store_true", help="count instructions with callgrind")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.worker:
        op = make_op()
        names = namespace(op)
        callgrind.worker([(statement, names) for statement in rows(op).values()], args.worker)
        return 0
    if HAS_TORCH_CUSTOM_OP:
        print(f"torch {torch.__version__}: custom_op is torch's own here; nothing to break down")
        return 0
    unit = "instructions" if args.callgrind else "µs"
    results = count_rows(1000) if args.callgrind else time_rows(make_op(), args.rounds)
    base = results["hand-written legacy (baseline)"]
    print(
        f"custom_op forward, input requires grad: torch {torch.__version__} (tier {TIER}), "
        f"compatfn {compatfn.__version__}, Python {sys.version.split()[0]}; {unit} per call"
    )
    for label, value in results.items():
        print(f"{label:40} {value:10.2f} {value / base:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
