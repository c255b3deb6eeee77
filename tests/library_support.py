"""Helpers shared by the ``tests/test_library_*.py`` modules (imported as a top-level module)."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

import compatfn
from compatfn import core, library
from compatfn.library import _custom_op

#: Every tier this torch can run: the older tiers are exercised on new torch too.
TIERS = [
    t
    for t, ok in (
        ("torch", library.HAS_TORCH_CUSTOM_OP),
        ("registered", library.HAS_LIBRARY),
        ("function", True),
    )
    if ok
]
TORCH_MINOR = core._TORCH_VERSION
#: A prefix of this process's own, so that namespaces never repeat across runs in one process.
_RUN = uuid.uuid4().hex[:6]
_names = itertools.count()


def compiles() -> Optional[str]:
    """``None`` where this torch compiles, else why not."""
    return core._dynamo_unsupported()


def fresh(tier: str) -> str:
    """A namespace no other test uses."""
    return f"cft_{_RUN}_{tier}{next(_names)}"


def make(
    tier: str,
    name: str,
    mutates_args: Any = (),
    device_types: Any = None,
    schema: Any = None,
    tags: Any = None,
    qualname: Optional[str] = None,
) -> Callable[[Callable], Any]:
    """A decorator defining ``fresh(tier)::name`` (or ``qualname``) on ``tier``."""
    qualname = qualname or f"{fresh(tier)}::{name}"
    return lambda fn: _custom_op(qualname, fn, mutates_args, device_types, schema, tier, tags)


def side_by_side(tier: str, name: str, mutates_args: Any = ()) -> List[Callable[[Callable], Any]]:
    """Decorators defining ``name`` on ``tier``, then, on the torch tier, with torch's own
    ``torch.library.custom_op`` too (the oracle, in a namespace of its own)."""
    decorators = [make(tier, name, mutates_args=mutates_args)]
    if tier == "torch":
        own = f"{fresh('own')}::{name}"
        decorators.append(torch.library.custom_op(own, mutates_args=mutates_args))
    return decorators


def ok_or_skipped(result: Dict[str, Any]) -> bool:
    """Every opcheck test passed or was skipped, and at least one ran."""
    values = list(result.values())
    return all(v == "SUCCESS" or str(v).startswith("SKIPPED: ") for v in values) and (
        "SUCCESS" in values
    )


def reset_dynamo() -> None:
    if compiles() is None:
        import torch._dynamo

        torch._dynamo.reset()


def count_op_nodes(fn: Callable, args: tuple, op: Any) -> int:
    """How many nodes of the graph dynamo captures for ``fn(*args)`` call ``op``'s overload."""
    graphs: list = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    reset_dynamo()
    try:
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    finally:
        reset_dynamo()
    namespace, name = op._qualname.split("::") if hasattr(op, "_qualname") else (None, None)
    target = getattr(getattr(torch.ops, namespace), name).default
    return sum(
        1
        for gm in graphs
        for node in gm.graph.nodes
        if node.op == "call_function" and (node.target is target or node.target is op)
    )


DOCS = Path(__file__).resolve().parents[1] / "docs" / "custom-ops.md"


def docs_blocks() -> List[str]:
    """The ```python blocks of docs/custom-ops.md."""
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)


def run_docs_blocks() -> Dict[str, Any]:
    """Run each block of docs/custom-ops.md on its own, with a namespace of its own for
    ``mylib``; the names they define, together."""
    names: Dict[str, Any] = {}
    for block in docs_blocks():
        namespace: Dict[str, Any] = {}
        source = block.replace("mylib::", f"{fresh('docs')}::")
        exec(compile(source, str(DOCS), "exec"), namespace)
        names.update(namespace)
    return names


def run_script(code: str, cwd: Path) -> Any:
    """What the last line ``code`` prints is, as JSON, run by this Python in a new process that
    imports the compatfn under test (wherever it starts); the test fails with its stderr if it
    fails. Tests simulate a changed torch this way."""
    env = dict(os.environ)
    here = str(Path(compatfn.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
