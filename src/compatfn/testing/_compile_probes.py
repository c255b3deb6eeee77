"""Whether a failure to ``torch.compile`` a Function is a limitation of the running torch: the
plain-torch probes and the one function that reads dynamo's messages.

Example::

    >>> error = RuntimeError("inline in skipfiles: FunctionCtx.mark_dirty  | mark_dirty /p.py")
    >>> read_dynamo_failure(error).ctx_methods
    ('mark_dirty',)
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch

__all__ = [
    "DynamoFailure",
    "ctx_methods_in_source",
    "plain_compile_failure",
    "read_dynamo_failure",
    "torch_ctx_limitation",
]

# Some torch releases cannot compile a Function that uses a given ctx method at all (torch 2.1's
# dynamo refuses to inline ``FunctionCtx.set_materialize_grads`` and ``FunctionCtx.mark_dirty``:
# "Unsupported: inline in skipfiles"). check_function skips its compile check for that reason
# only when a minimal plain-torch Function -- legacy form, no compatfn -- using the same ctx
# method fails to compile with the same exception type naming the same method on the running
# torch. Anything else stays a failure, so a compatfn bug cannot hide behind a torch limitation.
# Only :func:`read_dynamo_failure` reads the text of dynamo's messages
# (tests/test_testing_compile_probes.py feeds it the real ones of the torch at hand).


class _PlainSetMaterializeGrads(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.set_materialize_grads(False)
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:  # type: ignore[override]
        return None if grad is None else grad * 2


class _PlainMarkDirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad * 2


class _PlainMarkNonDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        mask = x > 0
        ctx.mark_non_differentiable(mask)
        return x * 2, mask

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: Any) -> torch.Tensor:  # type: ignore[override]
        return grad * 2


#: ctx method -> a minimal plain-torch (legacy-form) Function whose forward uses it.
_PLAIN_CTX_PROBES: Dict[str, Any] = {
    "set_materialize_grads": _PlainSetMaterializeGrads,
    "mark_dirty": _PlainMarkDirty,
    "mark_non_differentiable": _PlainMarkNonDifferentiable,
}


class DynamoFailure(NamedTuple):
    """What check_function needs to know about an exception raised while compiling."""

    error: str
    """The exception's type name, e.g. ``"Unsupported"``."""
    headline: str
    """The first line of its message, without dynamo's preamble and source paths."""
    ctx_methods: Tuple[str, ...]
    """The ctx methods of :data:`_PLAIN_CTX_PROBES` that the headline names."""


_CTX_METHOD_RE = re.compile(r"\b(" + "|".join(_PLAIN_CTX_PROBES) + r")\b")


_CTX_CALL_RE = re.compile(r"\.(" + "|".join(_PLAIN_CTX_PROBES) + r")\s*\(")


def ctx_methods_in_source(cls: Any) -> Tuple[str, ...]:
    """The ctx methods of :data:`_PLAIN_CTX_PROBES` called in the source of ``cls`` and of its
    user-written bases (none where the source cannot be read). For failures whose message names
    no ctx method (torch 2.2 exports no in-place Function: ``tree_unflatten``).

    Example::

        >>> ctx_methods_in_source(_PlainMarkDirty)
        ('mark_dirty',)
    """
    found: Dict[str, None] = {}
    for klass in getattr(cls, "__mro__", ()):
        if klass.__module__.startswith("torch.") or klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        found.update(dict.fromkeys(_CTX_CALL_RE.findall(source)))
    return tuple(found)


def read_dynamo_failure(exc: BaseException) -> DynamoFailure:
    """Read an exception raised while compiling: the only code that parses dynamo's message text.

    Handles the wrapped form of torch 2.1-2.3 (``speculate_subgraph: ... The reason was: <cause>``)
    and the source location dynamo appends (``inline in skipfiles: FunctionCtx.x  | x /path``).

    Example::

        >>> error = RuntimeError("inline in skipfiles: FunctionCtx.mark_dirty  | mark_dirty /p.py")
        >>> read_dynamo_failure(error).ctx_methods
        ('mark_dirty',)
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    text = text.split("The reason was: ")[-1]
    headline = text.split(" | ")[0].strip()
    methods = tuple(dict.fromkeys(_CTX_METHOD_RE.findall(headline)))
    return DynamoFailure(type(exc).__name__, headline, methods)


#: (ctx method, backend) -> None if the plain probe compiled and ran, else how it failed. Filled on
#: first use; one probe per process and backend.
_PLAIN_PROBE_RESULTS: Dict[Tuple[str, str], Optional[DynamoFailure]] = {}


def plain_compile_failure(feature: str, backend: str) -> Optional[DynamoFailure]:
    """Compile (``fullgraph=True``) and run fwd+bwd of the plain-torch probe for ``feature``.

    Returns ``None`` when it works, else how it failed. Cached per (feature, backend).
    """
    key = (feature, backend)
    if key not in _PLAIN_PROBE_RESULTS:
        try:
            _compile_plain_probe(_PLAIN_CTX_PROBES[feature], backend)
            _PLAIN_PROBE_RESULTS[key] = None
        except Exception as exc:
            _PLAIN_PROBE_RESULTS[key] = read_dynamo_failure(exc)
    return _PLAIN_PROBE_RESULTS[key]


def _compile_plain_probe(probe: Any, backend: str) -> None:
    """Compile ``probe.apply`` with ``fullgraph=True`` and run forward and backward once."""

    def call(x: torch.Tensor) -> Any:
        return probe.apply(x)

    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    try:
        leaf = torch.tensor([-1.0, 2.0], dtype=torch.float64, requires_grad=True)
        out = torch.compile(call, fullgraph=True, backend=backend)(leaf.clone())
        first = out[0] if isinstance(out, (tuple, list)) else out
        torch.autograd.grad(first.sum(), leaf)
    finally:
        dynamo.reset()


def torch_ctx_limitation(exc: BaseException, backend: str) -> Optional[str]:
    """A skip reason if ``exc`` (from compiling a Function) is a limitation of this torch.

    That is: its message names a ctx method, and the plain-torch probe using that method fails
    to compile here with the same exception type and a message naming the same method.
    """
    ours = read_dynamo_failure(exc)
    for feature in ours.ctx_methods:
        plain = plain_compile_failure(feature, backend)
        if plain is None:
            continue  # the plain Function compiles: not a torch limitation
        if plain.error == ours.error and feature in plain.ctx_methods:
            return (
                f"torch {torch.__version__} cannot torch.compile (fullgraph=True, "
                f"backend={backend!r}) any autograd.Function that calls ctx.{feature}, not "
                f"even a plain legacy-form one without compatfn ({plain.error}: {plain.headline})"
            )
    return None
