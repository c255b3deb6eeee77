"""The outcome of a case of ``compatfn.custom_op``'s differential oracle (``library_oracle``):
everything observable when it runs on one op maker (outputs, errors, kernel and setup_context
calls, what reached the kernel, random state, version counters, events, gradients), described as
plain, JSON-able values with the namespace normalised.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import torch

from library_oracle_build import build, tensors_of
from library_oracle_contexts import call, call_arguments, context, normalise


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
    """A tensor without data: on the meta device, a FakeTensor or a ZeroTensor (its shape is
    recorded, and that it is one)."""
    zero = getattr(t, "_is_zerotensor", lambda: False)()
    return bool(t.is_meta) or type(t).__name__ == "FakeTensor" or zero


def _values(t: torch.Tensor) -> Any:
    """What a tensor holds: its shape where it has no data (``_abstract``), its layout and dense
    values where it is not strided (sparse), else its values."""
    if _abstract(t):
        return list(t.shape)
    if t.layout is not torch.strided:
        return {str(t.layout): t.detach().to_dense().tolist()}
    return t.detach().tolist()


def _describe(value: Any, inputs: List[Any]) -> Any:
    if isinstance(value, torch.Tensor):
        same = [i for i, t in enumerate(inputs) if t is value]
        node = type(value.grad_fn).__name__ if value.grad_fn is not None else None
        return {
            "values": _values(value),
            "dtype": str(value.dtype),
            "requires_grad": value.requires_grad,
            "node": normalise(node) if node else None,
            "is_input": same[0] if same else None,
            "inference": _is_inference(value),
        }
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [_describe(v, inputs) for v in value]}
    return repr(value)


def outcome(case: Dict[str, Any], maker: Callable, qualname: str) -> Dict[str, Any]:
    """Everything observable when ``case`` runs on the op ``maker`` makes (See
    ``library_oracle``'s docstring)."""
    result: Dict[str, Any] = {}
    try:
        op, state = build(case, maker, qualname)
    except Exception as e:
        return {"define_error": _error(e)}
    positional, keywords, tensors, mode = call_arguments(case)
    # Versions counted from here: torch 1.9's to("meta") leaves a new tensor's at 1.
    start = [t._version for t in tensors if not _is_inference(t)]
    events: List[str] = []
    torch.manual_seed(1)
    output: Any = None
    try:
        with context(case["context"], events), mode:
            output = call(op, case["context"], positional, keywords, events)
        result["output"] = _describe(output, tensors)
    except Exception as e:
        result["error"] = _error(e)
    result["rng"] = torch.rand(1).item()
    result["calls"] = state["calls"]
    result["setup"] = state["setup"]
    result["log"] = state["log"]
    result["needs"] = state["needs"]
    result["events"] = events
    versions = [t._version for t in tensors if not _is_inference(t)]
    result["versions"] = [v - s for v, s in zip(versions, start)]
    result["inputs"] = [_values(t) for t in tensors]
    result["param"] = state["param"].detach().tolist()
    with mode:  # FakeTensors backpropagate under their mode
        result["backward"] = _backward_outcome(output, tensors, state)
    return result


def _backward_outcome(output: Any, tensors: List[Any], state: Dict[str, Any]) -> Any:
    outs = [o for o in tensors_of(output) if o.requires_grad]
    if not outs:
        return None
    leaves = [t for t in tensors if t.requires_grad] + [state["param"]]
    try:
        grads = torch.autograd.grad(
            sum(o.sum() for o in outs), leaves, allow_unused=True, retain_graph=False
        )
    except Exception as e:
        return {"error": _error(e)}
    return [None if g is None else [_values(g), str(g.dtype)] for g in grads]
