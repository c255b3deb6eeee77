"""core's dynamo facts, measured on the installed torch: each names where dynamo mishandles a
setup_context-style Function written WITHOUT compatfn that a hand-written legacy Function of the
same math compiles. The facts decide at decoration what a decorated class is
(``_CLASS_TAKES_LEGACY_FORM``); this test fails on any release where a fact's version range is
wrong, in either direction.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import pytest
import torch

import compatfn
from compatfn import core
from toy_functions import (
    DEFAULT_CALLS,
    make_clip,
    make_clip_scale,
    make_hand_written_clip,
    make_hand_written_clip_scale,
)

WHY_NOT = core._dynamo_unsupported()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

CALLS = {
    "positional": lambda cls, t: cls.apply(t, 0.5) * 2,
    "keywords": lambda cls, t: cls.apply(t, clip=0.5) * 2,
    # Calls of a forward with two defaults (``x, clip=1.0, scale=2.0``).
    **{call: run for call, (run, _) in DEFAULT_CALLS.items()},
    "varargs": lambda cls, t: cls.apply(t) * 2,
}
#: Where dynamo also fails a call that leaves out defaults without grad (measured: "Observed
#: exception" on 2.6-2.14, on 2.0-2.5 hidden by _DYNAMO_PASSES_CTX_WITHOUT_GRAD; 2.15 compiles it).
OMITS_DEFAULTS_WITHOUT_GRAD = core._HAS_SETUP_CONTEXT and core._TORCH_VERSION < (2, 15)

#: (call, grad) -> the facts that say dynamo mishandles an undecorated setup_context class there.
CASES = {
    ("positional", True): lambda: core._DYNAMO_REJECTS_SETUP_CONTEXT,
    ("positional", False): lambda: core._DYNAMO_PASSES_CTX_WITHOUT_GRAD,
    ("keywords", False): lambda: (
        core._DYNAMO_PASSES_CTX_WITHOUT_GRAD or core._DYNAMO_PASSES_CTX_WITH_KEYWORDS
    ),
    # Defaults (pytorch #130051): with grad on every 2.x, the decorated class's legacy form.
    ("defaults-left-out", True): lambda: (
        core._DYNAMO_REJECTS_SETUP_CONTEXT or core._DYNAMO_OMITS_DEFAULTS
    ),
    ("defaults-left-out", False): lambda: (
        core._DYNAMO_PASSES_CTX_WITHOUT_GRAD or OMITS_DEFAULTS_WITHOUT_GRAD
    ),
    ("one-default-left-out", True): lambda: (
        core._DYNAMO_REJECTS_SETUP_CONTEXT or core._DYNAMO_OMITS_DEFAULTS
    ),
    ("keyword-skipping-a-default", True): lambda: (
        core._DYNAMO_REJECTS_SETUP_CONTEXT or core._DYNAMO_OMITS_DEFAULTS
    ),
    ("reordered-keywords", False): lambda: (
        core._DYNAMO_PASSES_CTX_WITHOUT_GRAD or core._DYNAMO_PASSES_CTX_WITH_KEYWORDS
    ),
    # ``forward(x, *rest)`` called ``apply(x)``: the decorated class's legacy form where it fails.
    ("varargs", False): lambda: (
        core._DYNAMO_PASSES_CTX_WITHOUT_GRAD or core._DYNAMO_MISHANDLES_VARARGS
    ),
}
#: The facts that decide for every class, and the one that decides for classes with defaults.
CLASS_FACTS = {("positional", True), ("positional", False), ("keywords", False)}


def _doubling_with_varargs() -> Tuple[Any, Any]:
    """``x * 2`` with a ``*rest`` parameter: setup_context style (undecorated), and hand-written."""

    class Undecorated(torch.autograd.Function):
        @staticmethod
        def forward(x, *rest):  # type: ignore[no-untyped-def,override]
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            return grad * 2

    class HandWritten(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *rest):  # type: ignore[no-untyped-def,override]
            return x * 2

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            return grad * 2

    return Undecorated, HandWritten


def _compile_error(cls: Any, call: str, grad: bool) -> Optional[str]:
    """The error of ``torch.compile(fullgraph=True)`` on a call of ``cls``, or None."""
    import torch._dynamo

    torch._dynamo.reset()
    x = torch.linspace(-1, 1, 8).requires_grad_(grad)
    run: Callable[[torch.Tensor], torch.Tensor] = lambda t: CALLS[call](cls, t)  # noqa: E731
    try:
        y = torch.compile(run, backend="aot_eager", fullgraph=True)(x)
        if grad:
            y.sum().backward()
    except Exception as error:  # reported in the assertion below
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    finally:
        torch._dynamo.reset()
    return None


@pytest.mark.parametrize(("call", "grad"), list(CASES), ids=lambda v: str(v))
def test_dynamo_fact_matches_this_torch(call: str, grad: bool) -> None:
    fact = CASES[(call, grad)]()
    two_defaults = call in DEFAULT_CALLS
    undecorated_cls = (
        make_clip_scale(decorated=False) if two_defaults else make_clip(decorated=False)
    )
    control_cls = make_hand_written_clip_scale() if two_defaults else make_hand_written_clip()
    if call == "varargs":
        undecorated_cls, control_cls = _doubling_with_varargs()
    undecorated = _compile_error(undecorated_cls, call, grad)
    control = _compile_error(control_cls, call, grad)
    if control is not None:
        # torch's limit for every Function (2.2 without grad): the fact cannot be observed here,
        # but the undecorated class must not compile where the control does not.
        assert undecorated is not None, f"control fails ({control}), undecorated compiles"
        return
    assert (undecorated is not None) == fact, (
        f"torch {torch.__version__}: fact says dynamo "
        f"{'mishandles' if fact else 'handles'} a setup_context-style class called "
        f"{call} {'with' if grad else 'without'} grad; measured: {undecorated or 'it compiles'}"
    )


def test_the_class_takes_the_legacy_form_exactly_where_a_fact_holds() -> None:
    every_class = any(CASES[case]() for case in CLASS_FACTS)
    assert every_class == core._CLASS_TAKES_LEGACY_FORM
    with_defaults = any(fact() for case, fact in CASES.items() if case[0] in DEFAULT_CALLS)
    with_varargs = CASES[("varargs", False)]()
    assert with_varargs == (core._CLASS_TAKES_LEGACY_FORM or core._DYNAMO_MISHANDLES_VARARGS)
    assert with_defaults == (core._CLASS_TAKES_LEGACY_FORM or core._DYNAMO_OMITS_DEFAULTS)


def test_dynamo_counts_parameters_fact() -> None:
    """core's ``_DYNAMO_COUNTS_PARAMETERS``: a hand-written ``forward(ctx, x, *rest)`` called
    without grad with three arguments (as many as its parameters, ctx included) gets them one
    parameter early in compiled code (``x`` is the second argument: other values, no error),
    exactly where the fact holds; the decorated class computes what eager does on every row."""
    import torch._dynamo

    undecorated, hand_written = _doubling_with_varargs()
    decorated = compatfn.function(undecorated)
    a, b, c = torch.tensor([1.0]), torch.tensor([10.0]), torch.tensor([100.0])
    results = {}
    for cls in (hand_written, decorated):
        torch._dynamo.reset()
        run = torch.compile(lambda *t, cls=cls: cls.apply(*t), backend="eager", fullgraph=True)
        results[cls] = run(a, b, c)
    torch._dynamo.reset()
    assert torch.equal(results[decorated], a * 2)
    shifted = torch.equal(results[hand_written], b * 2)
    assert shifted == core._DYNAMO_COUNTS_PARAMETERS, (
        f"torch {torch.__version__}: fact says dynamo "
        f"{'passes' if core._DYNAMO_COUNTS_PARAMETERS else 'does not pass'} such a call no ctx; "
        f"measured: the hand-written Function returned {results[hand_written]} (eager: {a * 2})"
    )
