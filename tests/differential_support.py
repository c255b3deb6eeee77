"""Running one generated Function in one context and comparing it with its oracle.

:func:`observe` calls a class the way a context says (grad, no-grad, checkpoint, ...) and records
what a user can see: each output (value, dtype, shape, requires_grad, whether it is a view), the
gradients of the inputs, the exception type, where the spec's warning points. :func:`assert_same`
compares two observations bit for bit. :func:`budget` is the per-row example budget
(``COMPATFN_HYPOTHESIS_PROFILE=nightly`` multiplies it).

Example::

    made = build(spec)
    assert_same(observe(made.decorated, call, args, "grad"),
                observe(made.hand_written, call, args, "grad"))
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
from hypothesis import HealthCheck, settings

from function_specs import WARNING
from spec_arguments import Arguments, Call, substitute

#: Multiplies every example budget: ``COMPATFN_HYPOTHESIS_PROFILE=nightly`` for manual runs.
NIGHTLY = os.environ.get("COMPATFN_HYPOTHESIS_PROFILE", "") == "nightly"


def budget(examples: int) -> settings:
    """hypothesis settings: derandomized, ``examples`` per row (20x in the nightly profile)."""
    return settings(
        max_examples=examples * (20 if NIGHTLY else 1),
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


#: Whether the place a forward's ``warnings.warn(..., stacklevel=2)`` points to is compared
#: (``test_warning_in_forward_points_where_hand_written_does`` is its shrunk case).
WARNING_PLACES_CHECKED = True


class Seen(NamedTuple):
    """What one call showed: ``values`` (described outputs and gradients), or ``error``;
    ``graphs``: how many graphs torch.compile made (None: not compiled, or not countable)."""

    values: Tuple[Any, ...]
    error: Optional[str]
    message: str
    warnings: Tuple[Tuple[str, int], ...]
    graphs: Optional[int] = None


#: What varies between two classes of the same math and between runs, in an error message: the
#: class names (``Decorated``, ``HandWrittenBackward``, the spec module), memory addresses,
#: source locations. Everything else -- the words, the numbers, the argument names -- is kept.
_VARYING = (
    (re.compile(r"\b\w*(?:Undecorated|Decorated|HandWritten|compatfn_spec_\d+_\d+)\w*\b"), "<Fn>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<address>"),
    (re.compile(r"(?:[\w.<>-]*/)+[\w.<>-]+\.py\b(?::\d+)?(?:, line \d+)?"), "<file>"),
    (re.compile(r"\bline \d+"), "line <n>"),
)


def message_class(error: Optional[str], message: str) -> str:
    """The stable class of an error: its type and the first line of its message with the
    Function's name, memory addresses and source locations normalised (``""`` when it ran).

    Example::

        >>> message_class("ValueError", "coef -1.5 < 0 in Decorated at 0x7f3a")
        'ValueError: coef -1.5 < 0 in <Fn> at <address>'
    """
    if error is None:
        return ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    text = lines[0] if lines else ""
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return f"{error}: {text}"


def describe(value: Any) -> Any:
    """A value as compared: tensors by dtype, shape, requires_grad, view-ness and content."""
    if isinstance(value, (tuple, list)):
        return tuple(describe(v) for v in value)
    if isinstance(value, torch.Tensor):
        plain = value.detach()
        meta = (plain.dtype, tuple(plain.shape), value.requires_grad, value._is_view())
        return ("tensor", meta, plain.clone())
    return ("value", type(value).__name__, value)


def same(a: Any, b: Any, exact: bool = True, views: bool = True) -> bool:
    """Whether two described values agree: bit for bit, or (``exact=False``) within float
    tolerances (a compiled kernel against eager); ``views=False``: whether a tensor is a view
    is not compared."""
    if (
        isinstance(a, tuple)
        and a[:1] == ("tensor",)
        and isinstance(b, tuple)
        and b[:1] == ("tensor",)
    ):
        if (a[1] if views else a[1][:3]) != (b[1] if views else b[1][:3]):
            return False
        if exact or not a[2].is_floating_point():
            return bool(torch.equal(a[2], b[2]))
        return bool(torch.allclose(a[2], b[2], rtol=1e-5, atol=1e-6))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y, exact, views) for x, y in zip(a, b))
    return bool(a == b)


def assert_same(
    got: Seen,
    expected: Seen,
    what: str,
    check_warnings: bool = True,
    exact: bool = True,
    views: bool = True,
) -> None:
    """``got`` (the decorated class) shows what ``expected`` (the oracle) does, bit for bit
    (``exact=False``: values within float tolerances; ``views=False``: a tensor may be a view in
    one and not in the other)."""
    assert got.error == expected.error, (
        f"{what}: decorated {got.error or 'ran'} ({got.message[:300]}) vs oracle "
        f"{expected.error or 'ran'} ({expected.message[:300]})"
    )
    assert message_class(got.error, got.message) == message_class(
        expected.error, expected.message
    ), f"{what}: decorated raised {got.message[:300]!r}\noracle raised {expected.message[:300]!r}"
    # As many graphs as the oracle; or one, where the oracle breaks its graph (or gives up).
    assert got.graphs == expected.graphs or (got.graphs == 1 and expected.graphs is not None), (
        f"{what}: torch.compile made {got.graphs} graph(s) of the decorated class, "
        f"{expected.graphs} of the oracle"
    )
    assert same(got.values, expected.values, exact, views), (
        f"{what}: {got.values!r}\n!=\n{expected.values!r}"
    )
    assert len(got.warnings) == len(expected.warnings), (
        f"{what}: warnings {got.warnings} vs {expected.warnings}"
    )
    if check_warnings and WARNING_PLACES_CHECKED:
        assert got.warnings == expected.warnings, (
            f"{what}: warnings {got.warnings} vs {expected.warnings}"
        )


# --------------------------------------------------------------------------- contexts


def leaves(arguments: Arguments) -> List[torch.Tensor]:
    return [
        t.detach().clone().requires_grad_(g) for t, g in zip(arguments.tensors, arguments.grads)
    ]


def used(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """What the call gets: clones of the leaves that require grad (in-place needs non-leaves)."""
    return [t.clone() if t.requires_grad else t for t in tensors]


def first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def weights(t: torch.Tensor) -> torch.Tensor:
    return torch.arange(t.numel(), dtype=t.dtype).remainder(3).sub(1.0).add(0.5).reshape(t.shape)


def grads_of(out: Any, wrt: List[torch.Tensor], create_graph: bool = False) -> Tuple[Any, ...]:
    """Gradients of ``sum(first output * weights)`` w.r.t. the leaves that require grad."""
    y = first(out)
    targets = [t for t in wrt if t.requires_grad]
    if not isinstance(y, torch.Tensor) or not y.requires_grad or not targets:
        return ()
    return tuple(
        torch.autograd.grad(
            (y * weights(y)).sum(), targets, allow_unused=True, create_graph=create_graph
        )
    )


def _eager(cls: Any, call: Call, ts: List[torch.Tensor]) -> Any:
    args, kwargs = substitute(call, used(ts))
    return cls.apply(*args, **kwargs)


def _with_grad(cls: Any, call: Call, ts: List[torch.Tensor]) -> Tuple[Any, ...]:
    out = _eager(cls, call, ts)
    return describe(out), describe(grads_of(out, ts))


def _under(
    manager: Callable[[], Any],
) -> Callable[[Any, Call, List[torch.Tensor]], Tuple[Any, ...]]:
    def run(cls: Any, call: Call, ts: List[torch.Tensor]) -> Tuple[Any, ...]:
        with manager():
            out = _eager(cls, call, ts)
            seen = describe(out)
        return seen, describe(grads_of(out, ts))

    return run


def _inside(
    manager: Callable[[], Any],
) -> Callable[[Any, Call, List[torch.Tensor]], Tuple[Any, ...]]:
    """Forward and backward inside ``manager``."""

    def run(cls: Any, call: Call, ts: List[torch.Tensor]) -> Tuple[Any, ...]:
        with manager():
            return _with_grad(cls, call, ts)

    return run


def _checkpointed(
    reentrant: Optional[bool],
) -> Callable[[Any, Call, List[torch.Tensor]], Tuple[Any, ...]]:
    from torch.utils.checkpoint import checkpoint

    options = {} if reentrant is None else {"use_reentrant": reentrant}

    def run(cls: Any, call: Call, ts: List[torch.Tensor]) -> Tuple[Any, ...]:
        def inner(*tensors: torch.Tensor) -> Any:
            args, kwargs = substitute(call, list(tensors))
            return cls.apply(*args, **kwargs)

        out = checkpoint(inner, *used(ts), **options)
        return describe(out), describe(grads_of(out, ts))

    return run


def _double_backward(cls: Any, call: Call, ts: List[torch.Tensor]) -> Tuple[Any, ...]:
    out = _eager(cls, call, ts)
    grads = grads_of(out, ts, create_graph=True)
    live = [g for g in grads if g is not None and g.requires_grad]
    targets = [t for t in ts if t.requires_grad]
    if not live:
        return describe(grads), ()
    total = sum((g * weights(g)).sum() for g in live)
    second = torch.autograd.grad(total, targets, allow_unused=True)
    return describe(grads), describe(second)


def _hooks() -> Any:
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)


def _anomaly() -> Any:
    return torch.autograd.detect_anomaly()


def _contexts() -> Dict[str, Callable[[Any, Call, List[torch.Tensor]], Tuple[Any, ...]]]:
    """The eager contexts this torch has."""
    found: Dict[str, Callable[[Any, Call, List[torch.Tensor]], Tuple[Any, ...]]] = {
        "grad": _with_grad,
        "no-grad": _under(torch.no_grad),
        "anomaly": _inside(_anomaly),
        "double-backward": _double_backward,
    }
    if hasattr(torch, "inference_mode"):
        found["inference-mode"] = _under(torch.inference_mode)
    if hasattr(torch, "autocast") and hasattr(torch, "is_autocast_cpu_enabled"):
        found["autocast-cpu"] = _under(lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    if hasattr(getattr(torch.autograd, "graph", None), "saved_tensors_hooks"):
        found["saved-tensors-hooks"] = _inside(_hooks)
    from torch.utils import checkpoint

    if "use_reentrant" in inspect.signature(checkpoint.checkpoint).parameters:
        found["checkpoint-reentrant"] = _checkpointed(True)
        found["checkpoint-non-reentrant"] = _checkpointed(False)
    else:
        found["checkpoint-reentrant"] = _checkpointed(None)
    return found


CONTEXTS = _contexts()


def observe(run: Callable[[], Tuple[Any, ...]], filename: str = "") -> Seen:
    """Run ``run``; record its values or its error, and where the spec's warnings point."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            values, error, message = run(), None, ""
        except Exception as exc:  # compared with the oracle's, never ignored
            values, error, message = (), type(exc).__name__, str(exc)
    spots = tuple(
        (os.path.basename(w.filename), w.lineno) for w in caught if str(w.message) == WARNING
    )
    return Seen(values, error, message, spots)


def in_context(cls: Any, call: Call, arguments: Arguments, context: str) -> Seen:
    ts = leaves(arguments)
    return observe(lambda: CONTEXTS[context](cls, call, ts))


@contextlib.contextmanager
def nothing() -> Any:
    yield
