"""Decorated Functions compile under ``torch.compile(fullgraph=True)`` wherever the README's
table says, with eager results, and ``features()["compile"]`` names the row of the running torch.

What compiles where (measured; see README "Using compatfn with AMP, torch.func and torch.compile"):

* torch >= 2.4: ``functional(Fn)``, ``torch.compile(Fn.apply)`` and direct ``Fn.apply(...)`` calls
  (``op = Fn.apply; op(x)`` in compiled code is such a direct call).
  Keywords in a direct ``Fn.apply(...)`` call inside compiled code need torch >= 2.13 (dynamo),
  on the native and on the forced legacy path.
* torch 2.1-2.3: ``functional(Fn)``, ``torch.compile(Fn.apply)`` and ``legacy=True`` classes; a
  direct ``Fn.apply(...)`` call of a setup_context-style class is rejected by dynamo (#118397).
* torch 2.0 on Python 3.11, torch 1.x: no torch.compile.
"""

from __future__ import annotations

import pytest

import compatfn
from compatfn import core
from toy_functions import make_clip

SUPPORT = compatfn.features()["compile"]
pytestmark = pytest.mark.skipif(
    SUPPORT == "unavailable", reason=core.dynamo_unsupported() or "no torch.compile"
)
# pytorch #118397: dynamo traces setup_context-style Functions from torch 2.4 on.
DIRECT_APPLY = core.COMPILES_SETUP_CONTEXT


def check(fn, backend="aot_eager"):
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(16, requires_grad=True)
    y = compiled(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    expected = x.detach().clamp(0, 0.5) * 2
    torch.testing.assert_close(y.detach(), expected)
    torch.testing.assert_close(g, ((x > 0) & (x < 0.5)).float() * 2)


def test_features_report_compile_support():
    measured = "native" if core.TORCH_VERSION >= (2, 4) else "functional"
    assert measured == SUPPORT


@pytest.mark.parametrize("legacy", [None, True])
def test_functional_with_keywords_compiles(legacy):
    clip = compatfn.functional(make_clip(legacy))
    check(lambda t: clip(t, clip=0.5) * 2)


@pytest.mark.parametrize("legacy", [None, True])
def test_compiling_apply_itself(legacy):
    """``torch.compile(Fn.apply)``: dynamo runs compatfn's apply, which must be traceable."""
    import torch._dynamo

    op = make_clip(legacy).apply
    calls = (lambda f, t: f(t, 0.5), lambda f, t: f(t, clip=0.5), lambda f, t: f(x=t, clip=0.5))
    for call in calls:
        torch._dynamo.reset()
        x = torch.randn(16, requires_grad=True)
        y = call(torch.compile(op, backend="aot_eager", fullgraph=True), x)
        torch.testing.assert_close(y, x.detach().clamp(0, 0.5))
        (g,) = torch.autograd.grad(y.sum(), x)
        torch.testing.assert_close(g, ((x > 0) & (x < 0.5)).float())


def test_direct_apply_call():
    fn = make_clip()
    if DIRECT_APPLY or compatfn.mode(fn) == "legacy":
        check(lambda t: fn.apply(t, 0.5) * 2)
    else:
        with pytest.raises(Exception, match="setup_context"):
            check(lambda t: fn.apply(t, 0.5) * 2)


@pytest.mark.skipif(core.TORCH_VERSION < (2, 13), reason="dynamo takes keywords to apply: 2.13+")
@pytest.mark.parametrize("legacy", [None, True], ids=["default-path", "legacy-forced"])
def test_direct_apply_call_with_keywords(legacy):
    """The legacy form's forward carries the user's parameter names, which dynamo binds."""
    fn = make_clip(legacy)
    check(lambda t: fn.apply(t, clip=0.5) * 2)
    check(lambda t: fn.apply(x=t, clip=0.5) * 2)


def test_inductor():
    clip = compatfn.functional(make_clip())
    check(lambda t: clip(t, clip=0.5) * 2, backend="inductor")


@pytest.mark.parametrize("legacy", [None, True], ids=["default-path", "legacy-forced"])
def test_inputs_without_grad(legacy):
    """torch 2.4-2.5 dynamo calls a setup_context-style forward with a ctx when no input requires
    grad (pytorch #133529): the paths compatfn runs under dynamo trace the legacy-form copy."""
    import torch._dynamo

    class HandWritten(torch.autograd.Function):  # the baseline: torch itself must compile it
        @staticmethod
        def forward(ctx, x, clip=1.0):
            return x.clamp(0, clip)

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    x = torch.randn(16)
    torch._dynamo.reset()
    try:
        torch.compile(HandWritten.apply, backend="aot_eager", fullgraph=True)(x, 0.5)
    except Exception as error:  # torch 2.2: "type object 'method' has no attribute 'forward'"
        pytest.skip(f"torch {torch.__version__} compiles no Function without grad: {error}")
    fn = make_clip(legacy)
    for compiled, call in (
        (compatfn.functional(fn), lambda f: f(x, clip=0.5)),
        (fn.apply, lambda f: f(x, 0.5)),
    ):
        torch._dynamo.reset()
        y = call(torch.compile(compiled, backend="aot_eager", fullgraph=True))
        torch.testing.assert_close(y, x.clamp(0, 0.5))
