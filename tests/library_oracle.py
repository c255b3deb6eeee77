"""The differential oracle of ``compatfn.custom_op``: generated op definitions, kernels and call
contexts, run on compatfn's op and on torch's own ``torch.library.custom_op`` (imported as a
top-level module by ``tests/test_library_differential.py``). This module holds the stored set
(the fixed cases, recording torch's outcomes for them) and re-exports the rest, one concern a
module: the cases (``library_oracle_cases``), building an op (``library_oracle_build``), calling
it (``library_oracle_contexts``) and its outcome (``library_oracle_outcome``).

A *case* is a plain, JSON-able dict (so that a fixed set of cases and the outcomes torch's own op
gives them can be stored for rows without ``torch.library.custom_op``): ``params`` (name, type,
default), ``outputs`` (0-3 tensors; with ``returns``, the op's return types in order:
``Tensor``, ``Tensor[]``, ``int``, ``float``, ``bool``), ``mutates``, ``kernel`` (what the
kernel does), ``autograd`` / ``fake`` / ``autocast`` (which ``register_*`` run; ``autograd`` also
what backward returns; ``autocast`` a CPU rule to bfloat16), ``meta_kernel`` (a kernel
registered for ``"meta"``, before or after the fake kernel, or none), ``schema``
(given explicitly, possibly disagreeing with the annotations), ``args`` (how each parameter is
passed, and with which value), ``grad`` (the tensor inputs that require grad) and ``context``
(what the call runs under). :func:`outcome` runs a case on one op maker and returns everything
observable (``ctx.needs_input_grad`` as setup_context and backward see it included), with the
namespace normalised.

Regenerate the stored outcomes of torch's own op (read by the rows without it) with
``nox -s custom-op-oracle`` (on the torch ``tools/sessions.py`` names), or in an environment
with that torch::

    PYTHONPATH=src:tests python tests/library_oracle.py --record

For a larger manual run on the older rows, ``COMPATFN_ORACLE_CASES`` sets how many generated cases
are recorded and ``COMPATFN_ORACLE_FILE`` where the outcomes are written and read (the stored set,
about 230 cases: ``tests/data/custom_op_oracle.json``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

import torch

from library_oracle_build import build
from library_oracle_cases import (
    CONTEXTS,
    KERNELS,
    REGRESSIONS,
    SCALARS,
    SIDE_BY_SIDE_CONTEXTS,
    TENSOR_TYPES,
    TRANSFORM_REGRESSIONS,
    case,
    cases,
)
from library_oracle_contexts import context_missing, normalise
from library_oracle_outcome import outcome

__all__ = [
    "CONTEXTS",
    "KERNELS",
    "RECORDED",
    "RECORDED_CASES",
    "REGRESSIONS",
    "SCALARS",
    "SIDE_BY_SIDE_CONTEXTS",
    "TENSOR_TYPES",
    "TRANSFORM_REGRESSIONS",
    "build",
    "case",
    "cases",
    "context_missing",
    "fixed_cases",
    "normalise",
    "outcome",
    "record",
]

#: Where the outcomes of torch's own op for the fixed set of cases are stored (or, for a manual
#: run, the file ``COMPATFN_ORACLE_FILE`` names).
RECORDED = Path(
    os.environ.get("COMPATFN_ORACLE_FILE")
    or Path(__file__).parent / "data" / "custom_op_oracle.json"
)
#: How many generated cases are recorded (``COMPATFN_ORACLE_CASES`` for a manual run).
RECORDED_CASES = int(os.environ.get("COMPATFN_ORACLE_CASES") or 160)


def fixed_cases(count: int = RECORDED_CASES) -> List[Dict[str, Any]]:
    """A fixed set of generated cases (the same on every torch and machine)."""
    from hypothesis import HealthCheck, given, settings

    found: List[Dict[str, Any]] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases())
    def collect(case: Dict[str, Any]) -> None:
        if case not in found:
            found.append(case)

    collect()
    return found


def record() -> None:
    """Store the outcomes torch's own op gives the fixed set (run on the newest torch)."""
    rows = []
    named = [(name, c) for name, c in REGRESSIONS.items()]
    named += [(f"generated {i}", c) for i, c in enumerate(fixed_cases())]
    for i, (name, c) in enumerate(named):
        expected = outcome(c, torch.library.custom_op, f"cft_torch{i}::op")
        rows.append({"name": name, "case": c, "torch": expected})
    RECORDED.parent.mkdir(exist_ok=True)
    payload = {"torch": torch.__version__, "rows": rows}
    RECORDED.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"{RECORDED}: {len(rows)} cases from torch {torch.__version__}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        record()
    else:
        sys.exit(__doc__)
