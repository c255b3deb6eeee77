"""The differential oracle of ``compatfn.custom_op``: generated op definitions, kernels and call
contexts, run on compatfn's op and on torch's own ``torch.library.custom_op`` (imported as a
top-level module by ``tests/test_library_differential.py``).

A *case* is a plain, JSON-able dict (so that a fixed set of cases and the outcomes torch's own op
gives them can be stored for rows without ``torch.library.custom_op``): ``params`` (name, type,
default), ``outputs`` (0-3 tensors), ``mutates``, ``kernel`` (what the kernel does), ``autograd``
/ ``fake`` (which ``register_*`` run), ``schema`` (given explicitly, possibly disagreeing with the
annotations), ``args`` (how each parameter is passed, and with which value), ``grad`` (the tensor
inputs that require grad) and ``context`` (what the call runs under). :func:`outcome` runs a case
on one op maker and returns everything observable, with the namespace normalised.

Regenerate the stored outcomes of torch's own op (read by the rows without it) with
``nox -s custom-op-oracle`` (on the torch ``tools/sessions.py`` names), or in an environment
with that torch::

    PYTHONPATH=src:tests python tests/library_oracle.py --record
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from hypothesis import strategies as st

from compatfn.library import HAS_META_DEVICE

#: Where the outcomes of torch's own op for the fixed set of cases are stored.
RECORDED = Path(__file__).parent / "data" / "custom_op_oracle.json"
RECORDED_CASES = 160
RECORD_SEED = 20261202

# --------------------------------------------------------------------------- strategies

#: type -> (annotation source, defaults to draw, values to pass)
SCALARS: Dict[str, Tuple[str, List[Any], List[Any]]] = {
    "float": ("float", [0.0, -0.0, 1.5], [2.0, -0.0, 0.0, 3, "np.float64(2.5)", "big_int"]),
    "int": ("int", [0, 2], [3, "int64_overflow", True, "np.int64(4)"]),
    "bool": ("bool", [False, True], [True, False, "np.bool_(True)"]),
    "str": ("str", ["a"], ["abc", "bytes"]),
    "Optional[float]": ("Optional[float]", [None], [None, 1.25]),
    "List[int]": ("List[int]", [], [[1, 2], (3,)]),
}
TENSOR_TYPES = ["Tensor", "Optional[Tensor]", "List[Tensor]"]
KERNELS = [
    "pure",
    "pure",
    "inplace_declared",
    "inplace_undeclared",
    "list_for_tuple",
    "return_input",
    "return_view",
    "capture_param",
    "capture_param_inplace",
    "return_param",
    "return_param_view",
    "return_nonleaf",
    "nested",
    "raising",
    "random",
    "autograd_grad",
    "return_none",
    "return_float",
    "one_tuple",
]
CONTEXTS = [
    "plain",
    "plain",
    "no_grad",
    "inference_mode",
    "enable_grad_in_inference",
    "anomaly",
    "saved_tensor_hooks",
    "checkpoint",
    "torch_function_mode",
    "forward_ad_level",
    "neg_views",
    "profiler",
    "thread",
]
#: Contexts drawn only where cases run side by side with torch's own op (torch >= 2.4): the
#: stored outcomes of the older rows do not have them. ``meta``: each tensor argument on the meta
#: device; ``fake_mode``: FakeTensors under their FakeTensorMode; ``dispatch_mode``: a
#: TorchDispatchMode sees the op (and a nested op).
SIDE_BY_SIDE_CONTEXTS = ["meta", "fake_mode", "dispatch_mode"]


@st.composite
def cases(draw: Any, contexts: List[str] = CONTEXTS) -> Dict[str, Any]:
    """A generated case (See the module docstring), its context one of ``contexts``."""
    params: List[Dict[str, Any]] = [{"name": "x", "type": "Tensor", "default": "none"}]
    extra = draw(st.lists(st.sampled_from(["Tensor", *TENSOR_TYPES[1:], *SCALARS]), max_size=3))
    for i, kind in enumerate(extra):
        default: Any = "none"
        if kind == "Optional[Tensor]":
            default = draw(st.sampled_from(["none", None]))
        elif kind in SCALARS and SCALARS[kind][1]:
            default = draw(st.sampled_from(["none", *SCALARS[kind][1]]))
        params.append({"name": f"a{i}", "type": kind, "default": default})
    # No parameter without a default after one with a default.
    seen_default = False
    for p in params:
        if p["default"] != "none":
            seen_default = True
        elif seen_default:
            p["default"] = _first_default(p["type"])
            if p["default"] == "none":
                params = params[: params.index(p)]
                break
    kernel = draw(st.sampled_from(KERNELS))
    tensor_names = [p["name"] for p in params if p["type"] == "Tensor"]
    mutates = sorted(draw(st.sets(st.sampled_from(tensor_names))))
    if kernel == "inplace_declared" and "x" not in mutates:
        mutates = ["x", *mutates]
    outputs = 0 if kernel == "inplace_declared" and draw(st.booleans()) else draw(st.integers(1, 3))
    if kernel in ("list_for_tuple", "one_tuple"):
        outputs = max(outputs, 2)
    args = []
    for p in params:
        how = draw(
            st.sampled_from(["pos", "kw", "left_out"] if p["default"] != "none" else ["pos", "kw"])
        )
        args.append({"how": how, "value": _draw_value(draw, p["type"])})
    return {
        "params": params,
        "outputs": outputs,
        "mutates": mutates,
        "kernel": kernel,
        "autograd": not mutates and draw(st.booleans()),
        "fake": draw(st.booleans()),
        "schema": draw(st.sampled_from(["none", "none", "given", "float_for_int"])),
        "args": args,
        "grad": sorted(draw(st.sets(st.sampled_from(tensor_names)))),
        "context": draw(st.sampled_from(contexts)),
    }


def _first_default(kind: str) -> Any:
    if kind == "Optional[Tensor]":
        return None
    return SCALARS[kind][1][0] if kind in SCALARS and SCALARS[kind][1] else "none"


def _draw_value(draw: Any, kind: str) -> Any:
    if kind == "Tensor":
        return "tensor"
    if kind == "Optional[Tensor]":
        return draw(st.sampled_from(["tensor", None]))
    if kind == "List[Tensor]":
        return draw(st.sampled_from(["tensors2", "tensors0"]))
    return draw(st.sampled_from(SCALARS[kind][2]))


# --------------------------------------------------------------------------- building an op

_TYPE_SOURCE = {
    "Tensor": "torch.Tensor",
    "Optional[Tensor]": "Optional[torch.Tensor]",
    "List[Tensor]": "List[torch.Tensor]",
    **{k: v[0] for k, v in SCALARS.items()},
}
_SCHEMA_TYPE = {
    "Tensor": "Tensor",
    "Optional[Tensor]": "Tensor?",
    "List[Tensor]": "Tensor[]",
    "float": "float",
    "int": "int",
    "bool": "bool",
    "str": "str",
    "Optional[float]": "float?",
    "List[int]": "int[]",
}


def _schema(case: Dict[str, Any]) -> Optional[str]:
    if case["schema"] == "none":
        return None
    parts = []
    for p in case["params"]:
        kind = _SCHEMA_TYPE[p["type"]]
        if case["schema"] == "float_for_int" and p["type"] == "int":
            kind = "float"
        if p["name"] in case["mutates"]:
            kind = f"Tensor(a{p['name']}!)"
        default = "" if p["default"] == "none" else "=" + _schema_default(p["default"], kind)
        parts.append(f"{kind} {p['name']}{default}")
    n = case["outputs"]
    returns = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"({', '.join(parts)}) -> {returns}"


def _schema_default(value: Any, kind: str) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return f'"{value}"'
    if kind == "float" and isinstance(value, int):
        return repr(float(value))
    return repr(value)


def _returns(n: int) -> str:
    if n == 0:
        return "None"
    if n == 1:
        return "torch.Tensor"
    return "Tuple[" + ", ".join(["torch.Tensor"] * n) + "]"


def _kernel_source(case: Dict[str, Any]) -> str:
    params = case["params"]
    sig = []
    for p in params:
        default = "" if p["default"] == "none" else f" = {_py_default(p['default'])}"
        sig.append(f"{p['name']}: {_TYPE_SOURCE[p['type']]}{default}")
    n = case["outputs"]
    body = [
        "state['calls'] += 1",
        "state['log'].append(_seen((" + ", ".join(p["name"] for p in params) + ",)))",
        "base = x.detach().clone() if False else x * 1",
    ]
    for p in params[1:]:
        body.append(f"base = _mix(base, {p['name']})")
    kernel = case["kernel"]
    outs = [f"(base + {i})" for i in range(n)]
    if kernel == "inplace_declared" or kernel == "inplace_undeclared":
        body.insert(2, "x.add_(1)")
        outs = [f"(base + {i}).clone()" for i in range(n)]
    elif kernel == "capture_param":
        outs = [f"(base * state['param'] + {i})" for i in range(n)]
    elif kernel == "capture_param_inplace":
        body.append("state['param'].add_(1)")
    elif kernel == "random":
        body.append("base = base + torch.rand_like(base)")
    elif kernel == "nested":
        body.append("base = state['inner'](base)")
    elif kernel == "autograd_grad":
        body.append("(g,) = torch.autograd.grad((state['param'] * 2).sum(), state['param'])")
        body.append("base = base + g")
    elif kernel == "raising":
        body.append("raise ValueError('the kernel refuses ' + str(tuple(x.shape)))")
    special = {
        "return_input": ["x"] * n,
        "return_view": ["x.view(-1)"] * n,
        "return_param": ["state['param']", *outs[1:]],
        "return_param_view": ["state['param'][:3]", *outs[1:]],
        "return_nonleaf": ["state['nonleaf']", *outs[1:]],
    }
    outs = special.get(kernel, outs)
    if n == 0 or kernel == "return_none":
        body.append("return None")
    elif kernel == "return_float":
        body.append(
            "return 1.0" if n == 1 else "return (1.0,) + tuple([" + ", ".join(outs[1:]) + "])"
        )
    elif kernel == "one_tuple":
        body.append(f"return ({outs[0]},)")
    elif kernel == "list_for_tuple":
        body.append("return [" + ", ".join(outs) + "]")
    elif n == 1:
        body.append(f"return {outs[0]}")
    else:
        body.append("return (" + ", ".join(outs) + ")")
    lines = [f"def kernel({', '.join(sig)}) -> {_returns(n)}:"] + [f"    {b}" for b in body]
    return "\n".join(lines) + "\n"


def _py_default(value: Any) -> str:
    if isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0:
        return "-0.0"
    return repr(value)


def _seen(values: tuple) -> List[str]:
    """What reached the kernel: each argument's type and value (a sign of zero included)."""
    seen = []
    for v in values:
        if isinstance(v, torch.Tensor):
            lazy = ",lazy" if getattr(v, "is_neg", lambda: False)() or _is_conj(v) else ""
            seen.append(f"Tensor({v.requires_grad},{v.grad_fn is not None}{lazy})")
        elif isinstance(v, float):
            seen.append(f"float({v!r},{math.copysign(1.0, v)})")
        elif isinstance(v, list):
            seen.append("list[" + ",".join(_seen(tuple(v))) + "]")
        else:
            seen.append(f"{type(v).__name__}({v!r})")
    seen.append(f"grad={torch.is_grad_enabled()}")
    inference = getattr(torch, "is_inference_mode_enabled", lambda: False)()
    seen.append(f"inference={inference}")
    return seen


def _is_conj(t: torch.Tensor) -> bool:
    return bool(getattr(t, "is_conj", lambda: False)())


def _mix(base: torch.Tensor, value: Any) -> torch.Tensor:
    """``base`` changed by an argument so that its value shows in the output."""
    if isinstance(value, torch.Tensor):
        return base + value
    if isinstance(value, list):
        for v in value:
            base = _mix(base, v)
        return base
    if value is None:
        return base - 1
    if isinstance(value, bool):
        return base + (3 if value else 5)
    if isinstance(value, float):
        return base + math.copysign(1.0, value) * (1 + abs(value))
    if isinstance(value, int):
        return base + value
    if isinstance(value, str):
        return base + len(value)
    return base


def build(case: Dict[str, Any], maker: Callable, qualname: str) -> Tuple[Any, Dict[str, Any]]:
    """The op of ``case`` made by ``maker(qualname, fn, mutates_args=, schema=)`` (compatfn's or
    torch's ``custom_op``), and the state its kernel reads and writes."""
    torch.manual_seed(0)
    param = torch.randn(3, requires_grad=True)
    state: Dict[str, Any] = {"calls": 0, "log": [], "setup": 0, "param": param}
    state["nonleaf"] = param * 2
    namespace: Dict[str, Any] = {
        "torch": torch,
        "Optional": Optional,
        "List": List,
        "Tuple": Tuple,
        "state": state,
        "_seen": _seen,
        "_mix": _mix,
        "__name__": __name__,  # torch's aliasing error names the kernel's module
    }
    # Real annotations (``dont_inherit``: not this module's ``from __future__ import annotations``).
    code = compile(_kernel_source(case), f"<kernel of {qualname}>", "exec", dont_inherit=True)
    exec(code, namespace)
    if case["kernel"] == "nested":
        inner_fn = _inner_kernel()
        state["inner"] = maker(qualname + "_inner", inner_fn, mutates_args=(), schema=None)
    op = maker(
        qualname, namespace["kernel"], mutates_args=tuple(case["mutates"]), schema=_schema(case)
    )
    if case["fake"]:
        n = case["outputs"]

        def fake(x: Any, *rest: Any, **kw: Any) -> Any:
            if n == 0:
                return None
            return torch.empty_like(x) if n == 1 else tuple(torch.empty_like(x) for _ in range(n))

        op.register_fake(fake)
    if case["autograd"]:
        op.register_autograd(_backward(case, state), setup_context=_setup_context(state))
    return op, state


def _inner_kernel() -> Callable:
    """The op a nested kernel calls (real annotations: torch 2.4 cannot read string ones)."""
    source = "def inner(t: torch.Tensor) -> torch.Tensor:\n    return t * 3\n"
    namespace: Dict[str, Any] = {"torch": torch, "__name__": __name__}
    exec(compile(source, "<inner kernel>", "exec", dont_inherit=True), namespace)
    return namespace["inner"]  # type: ignore[no-any-return]


def _setup_context(state: Dict[str, Any]) -> Callable:
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        state["setup"] += 1
        ctx.lens = [len(v) if isinstance(v, list) else -1 for v in inputs]
        ctx.nones = [v is None for v in inputs]

    return setup_context


def _backward(case: Dict[str, Any], state: Dict[str, Any]) -> Callable:
    kinds = [p["type"] for p in case["params"]]

    def backward(ctx: Any, *grads: Any) -> Any:
        total = sum(g for g in grads if g is not None)
        result = []
        for kind, n, none in zip(kinds, ctx.lens, ctx.nones):
            if kind == "List[Tensor]":
                result.append([total * 2] * max(n, 0))
            elif kind in ("Tensor", "Optional[Tensor]") and not none:
                result.append(total * 2)
            else:
                result.append(None)
        return tuple(result)

    return backward


# --------------------------------------------------------------------------- calling it


def _value(spec: Any, grad: bool) -> Any:
    # torch.tensor: a version counter at 0 on every torch (torch 1.8's full() leaves it at 1)
    if spec == "tensor":
        return torch.tensor([0.0, 1.0, 2.0]).requires_grad_(grad)
    if spec == "tensors2":
        return [
            torch.tensor([1.0] * 3).requires_grad_(grad),
            torch.tensor([2.0] * 3).requires_grad_(grad),
        ]
    if spec == "tensors0":
        return []
    if spec == "big_int":
        return 10**400
    if spec == "int64_overflow":
        return 2**63
    if spec == "bytes":
        return b"ab"
    if isinstance(spec, str) and spec.startswith("np."):
        import numpy as np  # noqa: F401 (used by eval)

        return eval(spec)
    return spec


def _arguments(case: Dict[str, Any]) -> Tuple[list, dict, List[Any]]:
    positional: List[Any] = []
    keywords: Dict[str, Any] = {}
    tensors: List[Any] = []
    in_order = True
    for p, a in zip(case["params"], case["args"]):
        value = _value(a["value"], p["name"] in case["grad"])
        if a["how"] == "left_out":
            in_order = False
            continue
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, list):
            tensors.extend(v for v in value if isinstance(v, torch.Tensor))
        if a["how"] == "pos" and in_order:
            positional.append(value)
        else:
            in_order = False
            keywords[p["name"]] = value
    return positional, keywords, tensors


#: What each context needs from torch.
_CONTEXT_NEEDS = {
    "inference_mode": ("inference_mode", torch),
    "enable_grad_in_inference": ("inference_mode", torch),
    "saved_tensor_hooks": ("graph", torch.autograd),
    "checkpoint": ("graph", torch.autograd),  # use_reentrant=False: torch >= 1.11
    "torch_function_mode": ("TorchFunctionMode", torch.overrides),  # torch >= 1.13
    "forward_ad_level": ("forward_ad", torch.autograd),
    "neg_views": ("_neg_view", torch),  # torch >= 1.10
}


#: ``checkpoint(..., use_reentrant=False)`` is torch >= 1.11 (1.10 has saved-tensor hooks but
#: refuses the keyword: "Unexpected keyword arguments: use_reentrant").
_TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
_NO_USE_REENTRANT = _TORCH < (1, 11)


def _importable(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def context_missing(name: str) -> Optional[str]:
    """Why this torch cannot run the context ``name``, or None."""
    if name == "meta" and not HAS_META_DEVICE:
        return f"torch {torch.__version__} has no meta device (context meta)"
    if name == "fake_mode" and not _importable("torch._subclasses.fake_tensor", "FakeTensorMode"):
        return f"torch {torch.__version__} has no FakeTensorMode (context fake_mode)"
    if name == "dispatch_mode" and _TORCH[:2] < (2, 0):  # 1.12-1.13: another mode API
        return f"torch {torch.__version__} has no TorchDispatchMode as 2.0 has (context {name})"
    attribute, owner = _CONTEXT_NEEDS.get(name, ("__name__", torch))
    if name == "checkpoint" and _NO_USE_REENTRANT:
        return f"torch {torch.__version__} has no non-reentrant checkpoint (torch >= 1.11)"
    if hasattr(owner, attribute):
        return None
    return f"torch {torch.__version__} has no {owner.__name__}.{attribute} (context {name})"


@contextlib.contextmanager
def _context(name: str, events: List[str]) -> Any:
    if name == "no_grad":
        with torch.no_grad():
            yield None
    elif name == "inference_mode":
        with torch.inference_mode():
            yield None
    elif name == "enable_grad_in_inference":
        with torch.inference_mode(), torch.enable_grad():
            yield None
    elif name == "anomaly":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autograd.detect_anomaly():
                yield None
    elif name == "saved_tensor_hooks":

        def pack(t: Any) -> Any:
            events.append("pack")
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield None
    elif name == "torch_function_mode":

        class Seen(torch.overrides.TorchFunctionMode):  # type: ignore[misc,name-defined]
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kw: Any = None):
                if _NAMESPACE.search(str(func)):  # the op (and a nested op)
                    events.append(normalise(str(func)))
                return func(*args, **(kw or {}))

        with Seen():
            yield None
    elif name == "dispatch_mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Dispatched(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kw: Any = None):
                if _NAMESPACE.search(str(func)):  # the op (and a nested op)
                    events.append(normalise(str(func)))
                return func(*args, **(kw or {}))

        with Dispatched():
            yield None
    elif name == "profiler":  # the names of the events of the op (and of a nested op)
        with torch.autograd.profiler.profile() as prof:
            yield None
        names = [e.name for e in prof.function_events if _NAMESPACE.search(e.name)]
        events.extend(normalise(n) for n in names)
    elif name == "forward_ad_level":
        import torch.autograd.forward_ad as fwAD

        with fwAD.dual_level():
            yield None
    else:
        yield None


def _in_a_thread(call: Callable[[], Any]) -> Any:
    """``call()`` run in a new thread; its result, or its exception raised here."""
    done: Dict[str, Any] = {}

    def run() -> None:
        try:
            done["result"] = call()
        except BaseException as e:  # handed to the caller
            done["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in done:
        raise done["error"]
    return done["result"]


def _neg_view(value: Any) -> Any:
    """``value``, where a tensor, as a lazily negated view with its values (``-value`` viewed
    negated: gradients reach ``value``)."""
    if isinstance(value, torch.Tensor):
        return torch._neg_view(-value)
    return value


_NAMESPACE = re.compile(r"cft\w*?_(torch|ours)\d+")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_MODULE = re.compile(r"<module [^>]*>")


def normalise(text: str) -> str:
    """``text`` with the test's namespaces, memory addresses and module paths replaced."""
    return _MODULE.sub("<module>", _ADDRESS.sub("0x?", _NAMESPACE.sub("NS", text)))


def _error(e: BaseException) -> List[str]:
    message = normalise(str(e)).split("\n")[0]
    return [type(e).__name__, message]


def _is_inference(t: torch.Tensor) -> bool:
    if hasattr(t, "is_inference"):
        return bool(t.is_inference())
    try:  # torch 1.9 makes inference tensors but has no is_inference(): they have no version
        _ = t._version
    except RuntimeError:
        return True
    return False


def _abstract(t: torch.Tensor) -> bool:
    """A tensor without data: on the meta device, or a FakeTensor."""
    return bool(t.is_meta) or type(t).__name__ == "FakeTensor"


def _converted(values: List[Any], convert: Callable[[Any], Any], into: List[Any]) -> List[Any]:
    """``values`` with each tensor (in lists too) replaced by ``convert(tensor)``, appended to
    ``into`` in order."""

    def one(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            into.append(convert(value))
            return into[-1]
        if isinstance(value, list):
            return [one(v) for v in value]
        return value

    return [one(v) for v in values]


def _abstract_arguments(
    context: str, positional: list, keywords: dict
) -> Tuple[list, dict, List[Any], Any]:
    """The call's arguments on the meta device or as FakeTensors (with the FakeTensorMode to
    call under), each a leaf requiring grad as its original does; the new tensors in order."""
    mode: Any = contextlib.nullcontext()
    if context == "fake_mode":
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode()

        def convert(t: Any) -> Any:
            return mode.from_tensor(t.detach()).requires_grad_(t.requires_grad)

    else:

        def convert(t: Any) -> Any:
            return t.detach().to("meta").requires_grad_(t.requires_grad)

    tensors: List[Any] = []
    positional = _converted(positional, convert, tensors)
    names = list(keywords)
    values = _converted([keywords[n] for n in names], convert, tensors)
    return positional, dict(zip(names, values)), tensors, mode


def _describe(value: Any, inputs: List[Any]) -> Any:
    if isinstance(value, torch.Tensor):
        same = [i for i, t in enumerate(inputs) if t is value]
        node = type(value.grad_fn).__name__ if value.grad_fn is not None else None
        return {
            "values": list(value.shape) if _abstract(value) else value.detach().tolist(),
            "requires_grad": value.requires_grad,
            "node": normalise(node) if node else None,
            "is_input": same[0] if same else None,
            "inference": _is_inference(value),
        }
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [_describe(v, inputs) for v in value]}
    return repr(value)


def outcome(case: Dict[str, Any], maker: Callable, qualname: str) -> Dict[str, Any]:
    """Everything observable when ``case`` runs on the op ``maker`` makes (See the module
    docstring)."""
    result: Dict[str, Any] = {}
    try:
        op, state = build(case, maker, qualname)
    except Exception as e:
        return {"define_error": _error(e)}
    positional, keywords, tensors = _arguments(case)
    if case["context"] == "neg_views":  # each tensor argument a lazily negated view
        positional = [_neg_view(v) for v in positional]
        keywords = {k: _neg_view(v) for k, v in keywords.items()}
    mode: Any = contextlib.nullcontext()
    if case["context"] in ("meta", "fake_mode"):
        positional, keywords, tensors, mode = _abstract_arguments(
            case["context"], positional, keywords
        )
    # Versions counted from here: torch 1.9's to("meta") leaves a new tensor's at 1.
    start = [t._version for t in tensors if not _is_inference(t)]
    events: List[str] = []
    torch.manual_seed(1)
    output: Any = None
    try:
        with _context(case["context"], events), mode:
            if case["context"] == "checkpoint":
                from torch.utils.checkpoint import checkpoint

                output = checkpoint(lambda *a: op(*a, **keywords), *positional, use_reentrant=False)
            elif case["context"] == "thread":  # a thread of its own: grad mode as it starts there
                output = _in_a_thread(lambda: op(*positional, **keywords))
            else:
                output = op(*positional, **keywords)
        result["output"] = _describe(output, tensors)
    except Exception as e:
        result["error"] = _error(e)
    result["rng"] = torch.rand(1).item()
    result["calls"] = state["calls"]
    result["setup"] = state["setup"]
    result["log"] = state["log"]
    result["events"] = events
    versions = [t._version for t in tensors if not _is_inference(t)]
    result["versions"] = [v - s for v, s in zip(versions, start)]
    result["inputs"] = [list(t.shape) if _abstract(t) else t.detach().tolist() for t in tensors]
    result["param"] = state["param"].detach().tolist()
    with mode:  # FakeTensors backpropagate under their mode
        result["backward"] = _backward_outcome(output, tensors, state)
    return result


def _backward_outcome(output: Any, tensors: List[Any], state: Dict[str, Any]) -> Any:
    outs = list(output) if isinstance(output, (tuple, list)) else [output]
    outs = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        return None
    leaves = [t for t in tensors if t.requires_grad] + [state["param"]]
    try:
        grads = torch.autograd.grad(
            sum(o.sum() for o in outs), leaves, allow_unused=True, retain_graph=False
        )
    except Exception as e:
        return {"error": _error(e)}
    return [None if g is None else list(g.shape) if _abstract(g) else g.tolist() for g in grads]


# --------------------------------------------------------------------------- regressions


def case(kernel: str = "pure", outputs: int = 1, **fields: Any) -> Dict[str, Any]:
    """An explicit case: one tensor ``x`` passed by position unless ``params``/``args`` say
    otherwise, plain context, nothing registered."""
    result: Dict[str, Any] = {
        "params": [{"name": "x", "type": "Tensor", "default": "none"}],
        "outputs": outputs,
        "mutates": [],
        "kernel": kernel,
        "autograd": False,
        "fake": False,
        "schema": "none",
        "args": [{"how": "pos", "value": "tensor"}],
        "grad": [],
        "context": "plain",
    }
    result.update(fields)
    return result


def _with_scalar(kind: str, default: Any, value: Any, **fields: Any) -> Dict[str, Any]:
    return case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": kind, "default": default},
        ],
        args=[{"how": "pos", "value": "tensor"}, {"how": "pos", "value": value}],
        **fields,
    )


#: Shrunk failures of the generated cases, each kept as an explicit case (name -> case).
REGRESSIONS: Dict[str, Dict[str, Any]] = {
    "a list for a tuple runs the kernel once": case("list_for_tuple", 2),
    "a list for a tuple, input requiring grad": case(
        "list_for_tuple", 2, grad=["x"], autograd=True
    ),
    "a 1-tuple for two outputs runs the kernel once": case("one_tuple", 2),
    "None for two outputs runs the kernel once": case("return_none", 2),
    "None for a tensor runs the kernel once": case("return_none", 1),
    "a float for a tensor": case("return_float", 1),
    "an input returned, setup_context not run": case(
        "return_input", 1, grad=["x"], autograd=True, context="saved_tensor_hooks"
    ),
    "a view of an input returned": case("return_view", 1, context="anomaly"),
    "autograd.grad in the kernel finds no graph": case("autograd_grad"),
    "a captured leaf changed in place": case("capture_param_inplace"),
    "a captured non-leaf returned keeps its grad_fn": case("return_nonleaf"),
    "a view of a captured leaf returned": case("return_param_view"),
    "enable_grad inside inference_mode records nothing": case(
        "capture_param", grad=["x"], autograd=True, context="enable_grad_in_inference"
    ),
    "inference_mode": case("capture_param", grad=["x"], autograd=True, context="inference_mode"),
    "explicit schema wins over annotations": _with_scalar("int", "none", 3, schema="float_for_int"),
    "an int outside int64": _with_scalar("int", "none", "int64_overflow"),
    "-0.0 for a 0.0 default": _with_scalar("float", 0.0, -0.0),
    "-0.0 for a 0.0 default, with grad": _with_scalar(
        "float", 0.0, -0.0, grad=["x"], autograd=True
    ),
    "10**400 for a float": _with_scalar("float", "none", "big_int"),
    "bytes for a str": _with_scalar("str", "none", "bytes"),
    "np.bool_ for a bool": _with_scalar("bool", "none", "np.bool_(True)"),
    "np.int64 for an int": _with_scalar("int", "none", "np.int64(4)"),
    "a declared mutation bumps the version once": case(
        "inplace_declared", 0, mutates=["x"], context="checkpoint"
    ),
    "a declared mutation with a raising kernel": case("raising", 2, mutates=["x"]),
    "a TorchFunctionMode sees the op": case(context="torch_function_mode"),
    "a TorchFunctionMode, input requiring grad": case(
        "nested", grad=["x"], autograd=True, context="torch_function_mode"
    ),
    "a lazily negated view is materialized": case(context="neg_views"),
    "a lazily negated view requiring grad": case(grad=["x"], autograd=True, context="neg_views"),
    "inside a forward AD level": case("capture_param", grad=["x"], context="forward_ad_level"),
    "None for an empty tensor list, a tensor after it": case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": "List[Tensor]", "default": "none"},
            {"name": "a1", "type": "Optional[Tensor]", "default": "none"},
        ],
        args=[
            {"how": "pos", "value": "tensor"},
            {"how": "pos", "value": "tensors0"},
            {"how": "pos", "value": "tensor"},
        ],
        grad=["x"],
        autograd=True,
    ),
    "the profiler, input requiring grad": case(grad=["x"], autograd=True, context="profiler"),
    "in a thread of its own": case("capture_param", grad=["x"], autograd=True, context="thread"),
    "a declared mutation of a meta tensor, no fake kernel": case(mutates=["x"], context="meta"),
    "a declared mutation under FakeTensorMode": case(mutates=["x"], fake=True, context="fake_mode"),
    "an op that only mutates needs no fake kernel": case(
        "inplace_declared", 0, mutates=["x"], context="meta"
    ),
    "a TorchDispatchMode sees the op": case(grad=["x"], autograd=True, context="dispatch_mode"),
}

# --------------------------------------------------------------------------- the stored set


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
