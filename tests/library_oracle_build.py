"""Building the op of a case of ``compatfn.custom_op``'s differential oracle (``library_oracle``):
its schema and kernel source, the op made by compatfn's or torch's ``custom_op`` with the fake
kernel and autograd formula the case registers, and the state its kernel reads and writes.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from library_oracle_cases import SCALARS
from library_oracle_contexts import AUTOCAST_DTYPE

_TYPE_SOURCE = {
    "Tensor": "torch.Tensor",
    "Optional[Tensor]": "Optional[torch.Tensor]",
    "List[Tensor]": "List[torch.Tensor]",
    "List[Optional[Tensor]]": "List[Optional[torch.Tensor]]",
    **{k: v[0] for k, v in SCALARS.items()},
}
_SCHEMA_TYPE = {
    "Tensor": "Tensor",
    "Optional[Tensor]": "Tensor?",
    "List[Tensor]": "Tensor[]",
    "List[Optional[Tensor]]": "Tensor?[]",
    "float": "float",
    "int": "int",
    "bool": "bool",
    "str": "str",
    "Optional[float]": "float?",
    "List[int]": "int[]",
    "Optional[int]": "int?",
    "Optional[bool]": "bool?",
    "Optional[str]": "str?",
    "List[float]": "float[]",
    "List[bool]": "bool[]",
    "torch.dtype": "ScalarType",
    "torch.device": "Device",
    "Number": "Scalar",
    "Optional[List[int]]": "int[]?",
    "Sequence[int]": "int[]",
    "Sequence[float]": "float[]",
    "Optional[torch.dtype]": "ScalarType?",
    "Optional[torch.device]": "Device?",
    "List[Number]": "Scalar[]",
}


def _schema(case: Dict[str, Any]) -> Optional[str]:
    if case["schema"] == "none":
        return None
    parts = []
    for p in case["params"]:
        kind = _SCHEMA_TYPE[p["type"]]
        if case["schema"] == "float_for_int" and p["type"] == "int":
            kind = "float"
        if p["name"] in case["mutates"]:  # Tensor(ax!), Tensor(ax!)?, Tensor(ax!)[], ...
            kind = kind.replace("Tensor", f"Tensor(a{p['name']}!)", 1)
        value = p["default"]
        if case["schema"] == "other_defaults":
            value = _other_default(value)
        default = "" if value == "none" else "=" + _schema_default(value, kind)
        if p.get("kw_only"):
            parts.append("*")
        parts.append(f"{kind} {p['name']}{default}")
    kinds = [_RETURN_SCHEMA[k] for k in return_kinds(case)]
    returns = "()" if not kinds else kinds[0] if len(kinds) == 1 else f"({', '.join(kinds)})"
    return f"({', '.join(parts)}) -> {returns}"


#: Each of ``library_oracle_cases.RETURNS`` in a schema and as an annotation.
_RETURN_SCHEMA = {"Tensor": "Tensor", "Tensor[]": "Tensor[]", "int": "SymInt", "float": "float"}
_RETURN_SCHEMA["bool"] = "bool"
_RETURN_SOURCE = {"Tensor": "torch.Tensor", "Tensor[]": "List[torch.Tensor]", "int": "int"}
_RETURN_SOURCE.update(float="float", bool="bool")


def return_kinds(case: Dict[str, Any]) -> List[str]:
    """The op's return types: the case's ``returns``, else ``outputs`` tensors."""
    return list(case.get("returns") or ["Tensor"] * case["outputs"])


def _returned(kind: str, tensor: str, i: int) -> str:
    """The source of the kernel's ``i``-th return of type ``kind`` (``tensor``: its tensor)."""
    if kind == "Tensor[]":
        return f"[{tensor}, ({tensor}) * 2]"
    return {"Tensor": tensor, "int": str(i + 7), "float": f"{i + 0.5}", "bool": "True"}[kind]


#: Another default of a dtype or device default (a spec, as ``library_oracle_contexts`` reads).
_OTHER_SPEC = {"dtype:float32": "dtype:float64", "device:cpu": "device:cuda"}


def _other_default(value: Any) -> Any:
    """Another default of the same type (the schema's, not the kernel's)."""
    if value in _OTHER_SPEC:
        return _OTHER_SPEC[value]
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str) and value != "none":
        return value + "b"
    return value


def _schema_default(value: Any, kind: str) -> str:
    if value is None:
        return "None"
    if isinstance(value, str) and value.startswith("dtype:"):
        return value[len("dtype:") :]
    if isinstance(value, str) and value.startswith("device:"):
        return f'"{value[len("device:") :]}"'
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return f'"{value}"'
    if kind == "float" and isinstance(value, int):
        return repr(float(value))
    return repr(value)


def _returns(kinds: List[str]) -> str:
    if not kinds:
        return "None"
    if len(kinds) == 1:
        return _RETURN_SOURCE[kinds[0]]
    return "Tuple[" + ", ".join(_RETURN_SOURCE[k] for k in kinds) + "]"


def _kernel_source(case: Dict[str, Any]) -> str:
    params = case["params"]
    sig = []
    for p in params:
        default = "" if p["default"] == "none" else f" = {_py_default(p['default'])}"
        if p.get("kw_only"):
            sig.append("*")
        sig.append(f"{p['name']}: {_TYPE_SOURCE[p['type']]}{default}")
    n = case["outputs"]
    body = [
        "state['calls'] += 1",
        "state['log'].append(_seen((" + ", ".join(p["name"] for p in params) + ",)))",
        "base = _base(x)",
    ]
    for p in params[1:]:
        body.append(f"base = _mix(base, {p['name']})")
    kernel = case["kernel"]
    outs = [f"(base + {i})" for i in range(n)]
    if kernel == "inplace_declared" or kernel == "inplace_undeclared":
        body.insert(2, "_add_one(x)")
        # and every other argument it declares, whatever its tensor type
        body[3:3] = [f"_add_one({p['name']})" for p in params[1:] if p["name"] in case["mutates"]]
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
        body.append("raise ValueError('the kernel refuses ' + str(tuple(base.shape)))")
    special = {
        "return_input": ["x"] * n,
        "return_view": ["x.view(-1)"] * n,
        "return_param": ["state['param']", *outs[1:]],
        "return_param_view": ["state['param'][:3]", *outs[1:]],
        "return_nonleaf": ["state['nonleaf']", *outs[1:]],
    }
    outs = special.get(kernel, outs)
    if case.get("returns"):
        outs = [_returned(k, out, i) for i, (k, out) in enumerate(zip(case["returns"], outs))]
    if n == 0 or kernel == "return_none":
        body.append("return None")
    elif kernel == "return_float":
        body.append(
            "return 1.0" if n == 1 else "return (1.0,) + tuple([" + ", ".join(outs[1:]) + "])"
        )
    elif kernel == "one_tuple":
        body.append(f"return ({outs[0]},)")
    elif kernel == "one_tensor":  # a bare tensor, whatever the outputs
        body.append(f"return {outs[0]}")
    elif kernel == "list_for_tuple":
        body.append("return [" + ", ".join(outs) + "]")
    elif n == 1:
        body.append(f"return {outs[0]}")
    else:
        body.append("return (" + ", ".join(outs) + ")")
    lines = [f"def kernel({', '.join(sig)}) -> {_returns(return_kinds(case))}:"] + [
        f"    {b}" for b in body
    ]
    return "\n".join(lines) + "\n"


def _py_default(value: Any) -> str:
    if isinstance(value, str) and value.startswith("dtype:"):
        return "torch." + value[len("dtype:") :]
    if isinstance(value, str) and value.startswith("device:"):
        return f"torch.device({value[len('device:') :]!r})"
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


def _base(x: Any) -> torch.Tensor:
    """What the kernel's outputs are made from: ``x * 1``; for a list of tensors their sum (or
    zeros, as for None: a factory-like kernel)."""
    if isinstance(x, torch.Tensor):
        return x * 1
    return _mix(torch.zeros(3), x)


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
    if isinstance(value, int):  # as a float: torch 1.8-2.0 cannot add an int beyond int64
        return base + float(value)
    if isinstance(value, str):
        return base + len(value)
    if isinstance(value, (torch.dtype, torch.device)):
        return base + len(str(value))
    return base


def _add_one(value: Any) -> None:
    """A declared mutation of an argument of any tensor type: each tensor in it, in place."""
    if isinstance(value, torch.Tensor):
        value.add_(1)
    elif isinstance(value, list):
        for v in value:
            _add_one(v)


def build(case: Dict[str, Any], maker: Callable, qualname: str) -> Tuple[Any, Dict[str, Any]]:
    """The op of ``case`` made by ``maker(qualname, fn, mutates_args=, schema=)`` (compatfn's or
    torch's ``custom_op``), and the state its kernel reads and writes."""
    torch.manual_seed(0)
    param = torch.randn(3, requires_grad=True)
    state: Dict[str, Any] = {"calls": 0, "log": [], "setup": 0, "param": param, "needs": []}
    state["nonleaf"] = param * 2
    namespace: Dict[str, Any] = {
        "torch": torch,
        "Optional": Optional,
        "List": List,
        "Sequence": Sequence,
        "Tuple": Tuple,
        "state": state,
        "_seen": _seen,
        "_mix": _mix,
        "_base": _base,
        "_add_one": _add_one,
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
    register = _registration(op, qualname, case.get("via", "op"))
    if case.get("cpu_kernel"):
        kernel = namespace["kernel"]

        def cpu_kernel(*args: Any, **kwargs: Any) -> Any:  # what the dispatcher passes it
            state["log"].append(f"cpu kernel: {len(args)} positional, keywords {sorted(kwargs)}")
            return kernel(*args, **kwargs)

        register("register_kernel", "cpu", cpu_kernel)
    meta_kernel = case.get("meta_kernel", "none")  # absent from cases recorded before it
    if meta_kernel == "before_fake":
        register("register_kernel", "meta", _abstract_kernel("meta kernel", case, state))
    if case["fake"]:
        register("register_fake", _abstract_kernel("fake", case, state))
    if meta_kernel == "after_fake":
        register("register_kernel", "meta", _abstract_kernel("meta kernel", case, state))
    if case.get("autocast"):
        register("register_autocast", "cpu", AUTOCAST_DTYPE)
    if case["autograd"]:
        register(
            "register_autograd",
            _backward(case, state),
            setup_context=_setup_context(state, case.get("setup", "plain")),
        )
    return op, state


def _abstract_kernel(name: str, case: Dict[str, Any], state: Dict[str, Any]) -> Any:
    """A fake kernel (or one registered for ``"meta"``) logging its call as ``name``."""
    kinds = return_kinds(case)

    def abstract(x: Any, *rest: Any, **kw: Any) -> Any:
        state["log"].append(f"{name}: {1 + len(rest)} positional, keywords {sorted(kw)}")
        outs = [_fake_returned(kind, x, i) for i, kind in enumerate(kinds)]
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    return abstract


def _fake_returned(kind: str, x: torch.Tensor, i: int) -> Any:
    """The fake kernel's ``i``-th return of type ``kind``, for an input like ``x``."""
    if kind == "Tensor":
        return torch.empty_like(x)
    if kind == "Tensor[]":
        return [torch.empty_like(x), torch.empty_like(x)]
    return {"int": i + 7, "float": i + 0.5, "bool": True}[kind]


def _registration(op: Any, qualname: str, via: str) -> Callable:
    """How the case registers its rules (``cpu_kernel``: a kernel for the CPU that logs its calls
    and runs the op's): through the op, a copy of it (``copy.copy``), or by name with
    torch.library's functions (torch >= 2.4)."""
    if via == "name":
        return lambda method, *args, **kwargs: getattr(torch.library, method)(
            qualname, *args, **kwargs
        )
    target = copy.copy(op) if via == "copy" else op
    return lambda method, *args, **kwargs: getattr(target, method)(*args, **kwargs)


def _inner_kernel() -> Callable:
    """The op a nested kernel calls (real annotations: torch 2.4 cannot read string ones)."""
    source = "def inner(t: torch.Tensor) -> torch.Tensor:\n    return t * 3\n"
    namespace: Dict[str, Any] = {"torch": torch, "__name__": __name__}
    exec(compile(source, "<inner kernel>", "exec", dont_inherit=True), namespace)
    return namespace["inner"]  # type: ignore[no-any-return]


#: The parameters of each ``SETUP_SIGNATURES`` entry's setup_context (its body reads ``ctx``,
#: ``inputs`` and ``output``).
_SETUP_PARAMETERS = {
    "plain": "ctx, inputs, output, keyword_only_inputs=None",
    "reordered": "ctx, output, inputs, keyword_only_inputs=None",
    "keyword_only": "*, output, inputs, ctx, keyword_only_inputs=None",
    "kwargs": "**kwargs",
}


def tensors_of(values: Any) -> List[torch.Tensor]:
    """The tensors in ``values``, lists of them included (None and other values left out)."""
    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (tuple, list)):
        return [t for v in values for t in tensors_of(v)]
    return []


def _setup_context(state: Dict[str, Any], signature: str) -> Callable:
    """The registered setup_context, its parameters declared as ``signature`` says; it logs
    what it was given."""
    source = (
        f"def setup_context({_SETUP_PARAMETERS[signature]}):\n"
        + ("    ctx, inputs = kwargs['ctx'], kwargs['inputs']\n" if signature == "kwargs" else "")
        + "    state['setup'] += 1\n"
        "    state['log'].append(f'setup: {type(inputs).__name__} of {len(inputs)}, '\n"
        "                        f'{type(output).__name__}')\n"
        "    state['needs'].append(['setup', flags(ctx.needs_input_grad)])\n"
        "    ctx.lens = [len(v) if isinstance(v, list) else -1 for v in inputs]\n"
        "    ctx.nones = [v is None for v in inputs]\n"
    )
    namespace: Dict[str, Any] = {"state": state, "flags": _flags}
    exec(compile(source, f"<setup_context, {signature}>", "exec", dont_inherit=True), namespace)
    return namespace["setup_context"]  # type: ignore[no-any-return]


def _flags(needs_input_grad: Any) -> Any:
    """``ctx.needs_input_grad`` as JSON (a list input's entries are a list of their own)."""
    return [_flags(v) if isinstance(v, (list, tuple)) else v for v in needs_input_grad]


def _backward(case: Dict[str, Any], state: Dict[str, Any]) -> Callable:
    """The registered backward: a gradient for each tensor given, None for anything else; fewer,
    more or a bare tensor where ``case["autograd"]`` says so (``one_fewer``, ``one_more``,
    ``single``)."""
    kinds = [p["type"] for p in case["params"] if not p.get("kw_only")]
    returns = case["autograd"]

    def backward(ctx: Any, *grads: Any) -> Any:
        state["needs"].append(["backward", _flags(ctx.needs_input_grad)])
        total = sum(tensors_of(grads))
        result: List[Any] = []
        for kind, n, none in zip(kinds, ctx.lens, ctx.nones):
            if kind in ("List[Tensor]", "List[Optional[Tensor]]"):
                result.append([total * 2] * max(n, 0))
            elif kind in ("Tensor", "Optional[Tensor]") and not none:
                result.append(total * 2)
            else:
                result.append(None)
        if returns == "single":
            return result[0]
        if returns == "one_fewer":
            return tuple(result[:-1])
        if returns == "one_more":
            return (*result, total)
        return tuple(result)

    return backward
