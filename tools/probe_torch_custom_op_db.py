"""torch's own custom-op test ops, made by ``compatfn.custom_op``, against torch's own.

torch ships the ops its own tests run through every subsystem
(``torch/testing/_internal/custom_op_db.py``: NumPy kernels with fake kernels, autograd
formulas and vmap rules, one of them returning ``(List[Tensor], int)``, backward formulas that call
other ops by ``torch.ops.<ns>.<name>``). This script executes that file with its
``torch.library.custom_op`` replaced by ``compatfn.custom_op`` (namespace ``_compatfn_probe``)
and calls each op on the file's sample inputs, in float32 and float64:

* where torch has its own ``custom_op`` (2.4+), side by side with torch's ops from the same file,
  eager (with and without grad, inference mode), under ``torch.func.vmap``, ``torch.compile``
  (aot_eager, fullgraph) and ``torch.library.opcheck``: outputs, gradients, node names and
  errors must be the same (``--tier registered`` or ``function`` runs compatfn's older tiers on
  this torch instead);
* ``record FILE`` (torch 2.4+) writes the samples and torch's own eager outcomes; ``compare FILE
  --db PATH`` runs compatfn's ops on any torch (1.8+) against them, the file given by ``--db``
  being that torch's ``custom_op_db.py`` (and its ``autograd_function_db.py`` beside it).

It needs NumPy, expecttest and PyYAML (torch's test helpers import them) and is not part of
compatfn's tests: it reads torch's own file, which this repository does not hold::

    python tools/probe_torch_custom_op_db.py          # side by side; exit 1 on a difference
    python tools/probe_torch_custom_op_db.py record /tmp/opdb.json
    python tools/probe_torch_custom_op_db.py compare /tmp/opdb.json --db .../custom_op_db.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

NAMESPACE = "_compatfn_probe"
EAGER = ["grad", "no_grad", "inference"]
TRANSFORMS = ["vmap", "compile", "opcheck"]


def _db_path() -> str:
    spec = importlib.util.find_spec("torch.testing._internal.custom_op_db")
    if spec is None or spec.origin is None:
        raise SystemExit(f"torch {torch.__version__} has no custom_op_db.py: give --db")
    return spec.origin


def _stub_test_helpers(db: str) -> None:
    """torch's test helpers the db imports, where this torch lacks them (its sample-input
    functions from the newer torch's ``autograd_function_db.py`` beside ``db``; on torch 1.8,
    which has no OpInfo module, stand-ins: the samples come from the recorded file)."""
    try:
        importlib.import_module("torch.testing._internal.opinfo.core")
    except ImportError:
        core = types.ModuleType("opinfo_core")
        core.OpInfo = lambda name, op=None, **kw: types.SimpleNamespace(  # type: ignore[attr-defined]
            name=name, op=op, supports_autograd=kw.get("supports_autograd", True)
        )
        core.SampleInput = object  # type: ignore[attr-defined]
        dtypes = types.ModuleType("common_dtype")
        dtypes.all_types_and = lambda *a: ()  # type: ignore[attr-defined]
        functions = types.ModuleType("autograd_function_db")
        for name in ["cube", "mul", "mul_scalar", "sort", "take"]:
            setattr(functions, f"sample_inputs_numpy_{name}", None)
        sys.modules.update(
            {
                "torch.testing._internal.opinfo": types.ModuleType("opinfo"),
                "torch.testing._internal.opinfo.core": core,
                "torch.testing._internal.common_dtype": dtypes,
                "torch.testing._internal.autograd_function_db": functions,
            }
        )
        if not hasattr(torch.testing, "make_tensor"):
            setattr(torch.testing, "make_tensor", None)  # noqa: B010 (torch 1.8 has none)
        return
    name = "torch.testing._internal.autograd_function_db"
    spec = importlib.util.spec_from_file_location(name, db.replace("custom_op_db", name[24:]))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def compatfn_db(db: str, make: Callable[..., Any], tier: str) -> Any:
    """The module of ``db``'s source with its ops made by ``make`` (compatfn's custom_op)."""
    source = Path(db).read_text().split("# ===")[0]  # the ops and their OpInfos
    source = source.replace("torch.library.custom_op(", "_make_(").replace("tuple[", "Tuple[")
    source = source.replace("_torch_testing", NAMESPACE)
    vmap = tier == "torch" and hasattr(torch.library, "register_vmap")  # torch 2.5+
    if not vmap:  # torch.func cannot vmap the older tiers' ops, nor torch 2.4's
        source = re.sub(r"^(\w+\.register_vmap\()", r"pass  # \1", source, flags=re.M)
    if tier == "function":  # no operator: the OpInfos hold the op objects
        source = re.sub(r"op=(\w+)\._opoverload", r"op=\1", source)
        source = re.sub(rf"op=torch\.ops\.{NAMESPACE}\.(\w+)", r"op=\1", source)
    module = types.ModuleType("compatfn_custom_op_db")
    # Importable, as a library's module is: where torch.compile stops its graph at an op of the
    # registered tier, dynamo traces the kernels and imports their module.
    sys.modules[module.__name__] = module
    module.__dict__["_make_"] = make
    exec(compile(source, db, "exec"), module.__dict__)
    return module


def _op_name(info: Any) -> str:
    if type(info.op).__name__ in ("OpOverload", "OpOverloadPacket"):
        return str(info.op).split(".")[1]
    return str(info.op._name)


def _encoded(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).split(".")[1]
        return {"tensor": value.detach().tolist(), "dtype": dtype, "grad": value.requires_grad}
    if isinstance(value, (list, tuple)):
        return {"items": [_encoded(v) for v in value], "tuple": isinstance(value, tuple)}
    if isinstance(value, dict):
        return {"dict": {k: _encoded(v) for k, v in value.items()}}
    return {"value": value}


def _decoded(data: Dict[str, Any]) -> Any:
    if "tensor" in data:
        t = torch.tensor(data["tensor"], dtype=getattr(torch, data["dtype"]))
        return t.requires_grad_(data["grad"])
    if "items" in data:
        items = [_decoded(v) for v in data["items"]]
        return tuple(items) if data["tuple"] else items
    if "dict" in data:
        return {k: _decoded(v) for k, v in data["dict"].items()}
    return data["value"]


def _described(value: Any) -> Any:
    """An output or gradient: type, shape, dtype, requires_grad, node name and a checksum."""
    if isinstance(value, torch.Tensor):
        node = type(value.grad_fn).__name__ if value.grad_fn is not None else None
        node = node and node.replace(NAMESPACE, "_torch_testing")
        total = value.detach().double().nan_to_num(0).sum().item() if value.numel() else 0.0
        shape = list(value.shape)
        return ["tensor", shape, str(value.dtype), value.requires_grad, round(total, 9), node]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_described(v) for v in value]]
    return ["value", repr(value)]


def _tensors(value: Any) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def outcome(op: Any, args: List[Any], kwargs: Dict[str, Any], context: str) -> Any:
    """What calling ``op`` on copies of the sample gives in ``context`` (its error's type and
    first line, namespaces normalised)."""
    args, kwargs = _decoded(_encoded(args)), _decoded(_encoded(kwargs))
    try:
        if context == "grad":
            out = op(*args, **kwargs)
            outs = [o for o in _tensors(out) if o.requires_grad]
            leaves = [t for t in _tensors([args, list(kwargs.values())]) if t.requires_grad]
            grads = None
            if outs and leaves:
                total = outs[0].sum()
                for i, o in enumerate(outs[1:], 2):
                    total = total + o.sum() * i
                grads = _described(list(torch.autograd.grad(total, leaves, allow_unused=True)))
            return ["ok", _described(out), grads]
        if context == "no_grad":
            with torch.no_grad():
                return ["ok", _described(op(*args, **kwargs))]
        if context == "inference":
            with torch.inference_mode():
                return ["ok", _described(op(*args, **kwargs))]
        if context == "vmap":
            floating = [isinstance(a, torch.Tensor) and a.is_floating_point() for a in args]
            batched = [torch.stack([a, a * 2]) if f else a for a, f in zip(args, floating)]
            dims = tuple(0 if f else None for f in floating)
            vmapped = torch.func.vmap(lambda *a: op(*a, **kwargs), in_dims=dims)
            return ["ok", _described(vmapped(*batched))]
        if context == "compile":
            torch._dynamo.reset()
            compiled = torch.compile(lambda *a: op(*a, **kwargs), backend="aot_eager")
            return ["ok", _described(compiled(*args))]
        if context == "opcheck":
            import compatfn

            compatfn.testing.opcheck(op, tuple(args), kwargs)
            return ["ok"]
    except Exception as error:
        first = str(error).splitlines()[0][:300] if str(error) else ""
        return ["error", type(error).__name__, first.replace(NAMESPACE, "_torch_testing")]
    raise ValueError(context)


def samples(db_module: Any) -> Dict[str, Any]:
    """Each op's sample inputs (float32 and float64), seeded, encoded."""
    found = {}
    for info in db_module.custom_op_db:
        for dtype in (torch.float32, torch.float64):
            torch.manual_seed(0)
            made = info.sample_inputs("cpu", dtype, requires_grad=info.supports_autograd)
            found[f"{_op_name(info)}/{dtype}"] = [
                [_encoded([s.input, *s.args]), _encoded(dict(s.kwargs))] for s in made
            ]
    return found


def outcomes(ops: Any, stored: Dict[str, Any], contexts: List[str]) -> Dict[str, Any]:
    """``{op/dtype/sample/context: outcome}`` of the ops of module ``ops`` (by name)."""
    result = {}
    for key, cases in stored.items():
        name = key.split("/")[0]
        for i, (args, kwargs) in enumerate(cases):
            for context in contexts:
                op = getattr(ops, name)
                result[f"{key}/{i}/{context}"] = outcome(
                    op, _decoded(args), _decoded(kwargs), context
                )
    return result


def _maker(tier: str) -> Callable[..., Any]:
    import compatfn
    from compatfn.library import _custom_op

    def make(name: str, fn: Optional[Callable[..., Any]] = None, /, **options: Any) -> Any:
        if tier == "auto":
            return compatfn.custom_op(name, fn, **options)
        args = (options["mutates_args"], options.get("device_types"), options.get("schema"))
        if fn is None:
            return lambda f: _custom_op(name, f, *args, tier)
        return _custom_op(name, fn, *args, tier)

    return make


def _differences(expected: Dict[str, Any], got: Dict[str, Any]) -> int:
    count = 0
    for key, want in expected.items():
        if got.get(key) != want:
            count += 1
            print(f"DIFFERENT {key}\n  torch:    {want}\n  compatfn: {got.get(key)}")
    print(f"{len(expected)} outcomes, {count} different (torch {torch.__version__})")
    return count


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", nargs="?", choices=["side-by-side", "record", "compare"])
    parser.add_argument("file", nargs="?", help="the recorded outcomes (record, compare)")
    parser.add_argument("--db", help="torch's custom_op_db.py (default: this torch's)")
    parser.add_argument("--tier", default="auto", choices=["auto", "registered", "function"])
    options = parser.parse_args(argv)
    db = options.db or _db_path()
    _stub_test_helpers(db)
    from compatfn.library import TIER

    tier = TIER if options.tier == "auto" else options.tier
    ours = compatfn_db(db, _maker(options.tier), tier)
    eager = [c for c in EAGER if c != "inference" or hasattr(torch, "inference_mode")]
    if options.action == "compare":
        recorded = json.loads(Path(options.file).read_text())
        got = outcomes(ours, recorded["samples"], eager)
        expected = {k: v for k, v in recorded["outcomes"].items() if k.rsplit("/", 1)[1] in eager}
        return 1 if _differences(expected, got) else 0
    torchs = importlib.import_module("torch.testing._internal.custom_op_db")

    stored = samples(torchs)
    if options.action == "record":
        payload = {"torch": torch.__version__, "samples": stored}
        payload["outcomes"] = outcomes(torchs, stored, EAGER)
        Path(options.file).write_text(json.dumps(payload) + "\n")
        print(f"{options.file}: {len(payload['outcomes'])} outcomes of torch {torch.__version__}")
        return 0
    # What each tier can do on this torch: vmap needs the torch tier, compile an operator.
    contexts = EAGER + {"torch": TRANSFORMS, "registered": TRANSFORMS[1:]}.get(tier, ["opcheck"])
    return (
        1
        if _differences(outcomes(torchs, stored, contexts), outcomes(ours, stored, contexts))
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
