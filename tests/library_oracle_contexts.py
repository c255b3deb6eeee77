"""Calling the op of a case of ``compatfn.custom_op``'s differential oracle (``library_oracle``):
the arguments a case passes (on the meta device or as FakeTensors where its context says so), the
contexts a call runs under with what they see of the op, whether this torch can run a context,
and the normalising of what they record (namespaces, memory addresses, module paths).
"""

from __future__ import annotations

import contextlib
import importlib
import re
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from compatfn.library import HAS_META_DEVICE
from library_oracle_transforms import TRANSFORMS, transform_missing, transformed_call

# --------------------------------------------------------------------------- arguments


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
    if spec == "none_in_list":
        return [None]
    if spec == "tensor_and_none":
        return [_value("tensor", grad), None]
    if spec == "list_tensor":
        return [_value("tensor", grad)]
    if spec == "generator":
        return (t for t in _value("tensors2", grad))
    if spec == "int_vector":
        return torch.tensor([1, 2])
    if spec == "big_int":
        return 10**400
    if spec == "int64_overflow":
        return 2**63
    if spec == "bytes":
        return b"ab"
    if spec == "non_ascii":
        return "\u00e9t\u00e9"
    if spec == "surrogate":  # UTF-8 cannot encode it: torch refuses it
        return "\ud800"
    if isinstance(spec, str) and spec.startswith("dtype:"):
        return getattr(torch, spec[len("dtype:") :])
    if isinstance(spec, str) and spec.startswith("device:"):
        return torch.device(spec[len("device:") :])
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


def _tensors_replaced(
    positional: list, keywords: dict, convert: Callable[[Any], Any]
) -> Tuple[list, dict, List[Any]]:
    """The call's arguments with each tensor (in lists too) replaced by ``convert(tensor)``; the
    tensors in order."""
    tensors: List[Any] = []
    positional = _converted(positional, convert, tensors)
    names = list(keywords)
    values = _converted([keywords[n] for n in names], convert, tensors)
    return positional, dict(zip(names, values)), tensors


def _zero_arguments(positional: list, keywords: dict) -> Tuple[list, dict, List[Any]]:
    """The call's arguments with each tensor that requires no grad a ZeroTensor of its shape and
    dtype (torch >= 1.11); the tensors in order."""

    def convert(t: Any) -> Any:
        return t if t.requires_grad else torch._efficientzerotensor(t.shape, dtype=t.dtype)

    return _tensors_replaced(positional, keywords, convert)


def _inference_arguments(positional: list, keywords: dict) -> Tuple[list, dict, List[Any]]:
    """The call's arguments with each tensor an inference tensor of its values, requiring grad
    where it did (made in inference mode; the call runs outside it); the tensors in order."""

    def convert(t: Any) -> Any:
        with torch.inference_mode():
            return t.detach().clone().requires_grad_(t.requires_grad)

    return _tensors_replaced(positional, keywords, convert)


def _sparse_arguments(positional: list, keywords: dict) -> Tuple[list, dict, List[Any]]:
    """The call's arguments with each tensor that requires no grad a sparse COO tensor of its
    values (no storage); the tensors in order."""
    return _tensors_replaced(
        positional, keywords, lambda t: t if t.requires_grad else t.to_sparse()
    )


def _neg_view(value: Any) -> Any:
    """``value``, where a tensor, as a lazily negated view with its values (``-value`` viewed
    negated: gradients reach ``value``)."""
    if isinstance(value, torch.Tensor):
        return torch._neg_view(-value)
    return value


def call_arguments(case: Dict[str, Any]) -> Tuple[list, dict, List[Any], Any]:
    """The positional and keyword arguments of ``case``'s call, its tensor arguments in order
    (lists' included) and the mode to call under (a FakeTensorMode, or a null context)."""
    positional, keywords, tensors = _arguments(case)
    if case["context"] == "neg_views":  # each tensor argument a lazily negated view
        positional = [_neg_view(v) for v in positional]
        keywords = {k: _neg_view(v) for k, v in keywords.items()}
    if case["context"] == "zero_tensors":
        positional, keywords, tensors = _zero_arguments(positional, keywords)
    if case["context"] == "inference_tensors":
        positional, keywords, tensors = _inference_arguments(positional, keywords)
    if case["context"] == "sparse":  # each tensor argument that requires no grad, sparse
        positional, keywords, tensors = _sparse_arguments(positional, keywords)
    mode: Any = contextlib.nullcontext()
    if case["context"] in ("meta", "fake_mode"):
        positional, keywords, tensors, mode = _abstract_arguments(
            case["context"], positional, keywords
        )
    return positional, keywords, tensors, mode


# --------------------------------------------------------------------------- contexts

#: What a case's autocast rule casts to (``register_autocast("cpu", ...)``) and the autocast
#: context runs under.
AUTOCAST_DTYPE = torch.bfloat16

#: What each context needs from torch.
_CONTEXT_NEEDS = {
    "inference_mode": ("inference_mode", torch),
    "enable_grad_in_inference": ("inference_mode", torch),
    "inference_tensors": ("inference_mode", torch),
    "saved_tensor_hooks": ("graph", torch.autograd),
    "checkpoint": ("graph", torch.autograd),  # use_reentrant=False: torch >= 1.11
    "torch_function_mode": ("TorchFunctionMode", torch.overrides),  # torch >= 1.13
    "forward_ad_level": ("forward_ad", torch.autograd),
    "neg_views": ("_neg_view", torch),  # torch >= 1.10
    "zero_tensors": ("_efficientzerotensor", torch),  # torch >= 1.11
    "autocast": ("autocast", torch),  # torch >= 1.10 (CPU autocast)
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
    if name in TRANSFORMS:
        return transform_missing(name)
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
def context(name: str, events: List[str]) -> Any:
    """Run under the context ``name`` (a case's ``context``); what it sees of the op goes to
    ``events``."""
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
                return _called_and_seen(events, func, args, kw)

        with Seen():
            yield None
    elif name == "dispatch_mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Dispatched(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kw: Any = None):
                return _called_and_seen(events, func, args, kw)

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
    elif name == "autocast":
        with torch.autocast("cpu", dtype=AUTOCAST_DTYPE):
            yield None
    else:
        yield None


def _called_and_seen(events: List[str], func: Any, args: Any, kw: Any) -> Any:
    """``func(*args, **kw)`` for a mode, its name recorded in ``events`` where it is the op (or a
    nested op)."""
    if _NAMESPACE.search(str(func)):
        events.append(normalise(str(func)))
    return func(*args, **(kw or {}))


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


def call(op: Callable, name: str, positional: list, keywords: dict, events: List[str]) -> Any:
    """``op`` called as the context ``name`` calls it: checkpointed, in a thread of its own,
    through a transform (``library_oracle_transforms``; what it records goes to ``events``), or
    directly."""
    if name in TRANSFORMS:
        return transformed_call(name, op, positional, keywords, events)
    if name == "checkpoint":
        from torch.utils.checkpoint import checkpoint

        return checkpoint(lambda *a: op(*a, **keywords), *positional, use_reentrant=False)
    if name == "thread":  # a thread of its own: grad mode as it starts there
        return _in_a_thread(lambda: op(*positional, **keywords))
    return op(*positional, **keywords)


# --------------------------------------------------------------------------- normalising

_NAMESPACE = re.compile(r"cft\w*?_(torch|ours)\d+")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_MODULE = re.compile(r"<module [^>]*>")


#: Where torch's build asserts: the source path and line differ between builds of a release.
_ASSERTED_AT = re.compile(r'INTERNAL ASSERT FAILED at "[^"]*":\d+')


def normalise(text: str) -> str:
    """``text`` with the test's namespaces, memory addresses, module paths and torch's source
    locations replaced."""
    text = _ASSERTED_AT.sub('INTERNAL ASSERT FAILED at "<source>":?', text)
    return _MODULE.sub("<module>", _ADDRESS.sub("0x?", _NAMESPACE.sub("NS", text)))
