"""The transform contexts of ``compatfn.custom_op``'s differential oracle (``library_oracle``):
the op's call traced, compiled, exported or transformed (``torch.compile``, ``torch.export``
strict and non-strict, ``make_fx``, ``torch.fx.symbolic_trace``, ``torch.jit.trace``,
``torch.func.vmap`` and ``torch.func.grad``), then run. What a tracer records of the op (the
graph's calls of it) goes to the case's events.

Each transform gets the call's top-level tensor arguments as its inputs (positional and keyword;
tensors in lists and every other argument are constants of the traced function), so gradients
still reach the case's leaves.
"""

from __future__ import annotations

import importlib
import re
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

#: The transform contexts, with the torch attribute each needs (module, name).
TRANSFORMS: Dict[str, Tuple[str, str]] = {
    "compile": ("torch", "compile"),
    "export": ("torch.export", "export"),
    "export_strict": ("torch.export", "export"),
    "make_fx": ("torch.fx.experimental.proxy_tensor", "make_fx"),
    "symbolic_trace": ("torch.fx", "symbolic_trace"),
    "jit_trace": ("torch.jit", "trace"),
    "vmap": ("torch.func", "vmap"),
    "func_grad": ("torch.func", "grad"),
}

_NAMESPACE = re.compile(r"cft\w*?_(torch|ours)\d+")


def _as_tensor_function(
    op: Callable, positional: list, keywords: dict
) -> Tuple[Callable[..., Any], List[torch.Tensor]]:
    """``(f, tensors)``: ``f(*tensors)`` calls ``op`` as the case does, with its top-level
    tensor arguments (positional, then keyword) taken from ``f``'s parameters, which have a
    fixed count (torch.fx and torch.jit trace no ``*args``)."""
    slots = [i for i, v in enumerate(positional) if isinstance(v, torch.Tensor)]
    names = [k for k, v in keywords.items() if isinstance(v, torch.Tensor)]
    tensors = [positional[i] for i in slots] + [keywords[k] for k in names]

    def call(*ts: Any) -> Any:
        pos, kw = list(positional), dict(keywords)
        for i, t in zip(slots, ts):
            pos[i] = t
        for k, t in zip(names, ts[len(slots) :]):
            kw[k] = t
        return op(*pos, **kw)

    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    scope: Dict[str, Any] = {"call": call, "__name__": __name__}  # torch.jit reads the module
    exec(f"def f({params}):\n    return call({params})\n", scope)
    return scope["f"], tensors


def _recorded(events: List[str], targets: List[str]) -> None:
    """The op's calls among a graph's call targets, into ``events``."""
    events.extend(_NAMESPACE.sub("NS", t) for t in targets if _NAMESPACE.search(t))


def _fx_targets(graph: Any) -> List[str]:
    """Each call's target, with how many arguments it got by position and which by name."""
    return [
        f"{n.target}/{len(n.args)}/{','.join(sorted(n.kwargs))}"
        for n in graph.nodes
        if n.op == "call_function"
    ]


def _total(output: Any) -> torch.Tensor:
    """The sum of every tensor output, those in lists included (torch.func.grad needs one
    scalar); a declared non-tensor return (an int) adds nothing."""
    if isinstance(output, (tuple, list)):
        return sum(_total(o) for o in output if not isinstance(o, (int, float, bool)))
    return output.sum()  # anything else fails as the op's own call would


def _exported(f: Callable, tensors: List[torch.Tensor], strict: bool) -> Any:
    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    scope: Dict[str, Any] = {"f": f, "Module": torch.nn.Module, "__name__": __name__}
    exec(
        f"class Call(Module):\n    def forward(self, {params}):\n        return f({params})\n",
        scope,
    )
    return torch.export.export(scope["Call"](), tuple(tensors), strict=strict)


def _export(f: Callable, tensors: List[torch.Tensor]) -> Tuple[Callable, List[str]]:
    program = _exported(f, tensors, strict=False)
    return program.module(), _fx_targets(program.graph)


def _export_strict(f: Callable, tensors: List[torch.Tensor]) -> Tuple[Callable, List[str]]:
    program = _exported(f, tensors, strict=True)
    return program.module(), _fx_targets(program.graph)


def _make_fx(f: Callable, tensors: List[torch.Tensor]) -> Tuple[Callable, List[str]]:
    from torch.fx.experimental.proxy_tensor import make_fx

    module = make_fx(f)(*tensors)
    return module, _fx_targets(module.graph)


def _symbolic_trace(f: Callable, tensors: List[torch.Tensor]) -> Tuple[Callable, List[str]]:
    module = torch.fx.symbolic_trace(f)
    return module, _fx_targets(module.graph)


def _jit_trace(f: Callable, tensors: List[torch.Tensor]) -> Tuple[Callable, List[str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's TracerWarnings
        traced = torch.jit.trace(f, tuple(tensors), check_trace=False)
    return traced, [n.kind() for n in traced.graph.nodes()]


#: Tracers: the traced callable and its graph's call targets.
_TRACERS: Dict[str, Callable[[Callable, List[torch.Tensor]], Tuple[Callable, List[str]]]] = {
    "export": _export,
    "export_strict": _export_strict,
    "make_fx": _make_fx,
    "symbolic_trace": _symbolic_trace,
    "jit_trace": _jit_trace,
}


def transformed_call(
    name: str, op: Callable, positional: list, keywords: dict, events: List[str]
) -> Any:
    """``op`` called as the case does, through the transform ``name``."""
    f, tensors = _as_tensor_function(op, positional, keywords)
    if name == "compile":
        importlib.import_module(
            "torch._dynamo"
        ).reset()  # each case compiles afresh (no recompile limit)
        return torch.compile(f, backend="aot_eager", fullgraph=True)(*tensors)
    if name in _TRACERS:
        # The random state as the traced code leaves it (a tracer draws numbers of its own).
        with torch.random.fork_rng():
            traced, targets = _TRACERS[name](f, tensors)
        _recorded(events, targets)
        return traced(*tensors)
    if name == "vmap":  # two copies of each tensor argument stacked
        return torch.func.vmap(f)(*(torch.stack([t, t]) for t in tensors))
    if name == "func_grad":  # the gradient of the outputs' sum by the first tensor argument
        return torch.func.grad(lambda *ts: _total(f(*ts)))(*tensors)
    raise AssertionError(f"no transform context {name}")


def transform_missing(name: str) -> Optional[str]:
    """Why this torch cannot run the transform context ``name``, or None."""
    module, attribute = TRANSFORMS[name]
    try:
        owner = __import__(module, fromlist=[attribute])
    except ImportError:
        owner = None
    if owner is None or not hasattr(owner, attribute):
        return f"torch {torch.__version__} has no {module}.{attribute} (context {name})"
    return None
