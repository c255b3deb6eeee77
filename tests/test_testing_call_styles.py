"""check_function's ``compile`` check calls a Function the ways users do (as given, keywords,
defaults left out, a keyword skipping a default, each through a direct ``Fn.apply`` in compiled
code), and only a plain-torch control with the same signature failing the same way makes a
failure a skip (``compatfn.testing._call_styles``)."""

from __future__ import annotations

import inspect
from typing import Any, List, Tuple

import pytest
import torch

import compatfn
from compatfn.relu import ClippedReLU
from compatfn.testing import check_function
from compatfn.testing._call_styles import call_styles, plain_control, plain_style_failure

WHY_NOT = compatfn.core._dynamo_unsupported()
needs_compile = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def forward(x, clip=1.0, beta=2):  # type: ignore[no-untyped-def]
    return x


SIGNATURE = inspect.signature(forward)


def _record(style_wrap: Any, inputs: Tuple[Any, ...]) -> Tuple[Tuple[Any, ...], dict]:
    seen: List[Tuple[Tuple[Any, ...], dict]] = []
    style_wrap(lambda *a, **k: seen.append((a, k)))(*inputs)
    return seen[0]


def test_each_call_style_calls_as_its_label_says():
    styles = {s.label: s.wrap for s in call_styles(SIGNATURE, 2, {"beta": 3})}
    inputs = ("x", 0.5)
    assert list(styles)[:2] == ["as given", "with the defaults left out"]  # the natural call first
    assert {label: _record(wrap, inputs) for label, wrap in styles.items()} == {
        "as given": (("x", 0.5), {"beta": 3}),
        "with the defaults left out": (("x",), {}),
        "with keywords": (("x",), {"clip": 0.5, "beta": 3}),
        "with clip left out and later defaults by keyword": (("x",), {"beta": 3}),
    }


@pytest.mark.parametrize(
    "signature, n_inputs, kwargs",
    [
        (inspect.signature(lambda x, *rest: x), 3, {}),  # *args filled
        (inspect.signature(lambda x, *, clip=1.0: x), 1, {}),  # keyword-only
        (SIGNATURE, 4, {}),  # does not bind
        (None, 1, {}),  # not a decorated class
    ],
)
def test_calls_that_cannot_be_restyled_run_as_given(signature, n_inputs, kwargs):
    assert [s.label for s in call_styles(signature, n_inputs, kwargs)] == ["as given"]


def test_plain_control_has_the_signature_and_passes_the_first_tensor_through():
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    control = plain_control(SIGNATURE, ("not a tensor", x))
    assert str(inspect.signature(control.forward)) == "(ctx, x, clip=1.0, beta=2)"
    assert control.__mro__[1] is torch.autograd.Function
    y = control.apply(1, x)  # the first tensor argument, here clip, times one
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(y, x) and torch.equal(grad, torch.ones(2))


@needs_compile
@pytest.mark.usefixtures("fresh_dynamo")
def test_readme_clipped_relu_compiles_called_every_way():
    """README's class, called ``apply(x)`` in compiled code: failed before the core gave
    classes with defaults the legacy form on torch 2.13+ (dynamo omits defaults from
    setup_context's inputs); check_function reported it as passing then."""
    x = torch.tensor([-1.5, -0.25, 0.25, 0.75, 1.5, 3.0], dtype=torch.double, requires_grad=True)
    report = check_function(ClippedReLU, x, 2.0, checks=["compile"])
    assert report.ran == ["compile"], str(report)
    # Keywords with grad are a torch limit on some rows (2.4-2.6), proven by the control.
    skipped = report.skipped.get("compile (call styles)", "")
    assert "left out" not in skipped, str(report)


@compatfn.function
class BreaksWithoutClip(torch.autograd.Function):
    """Correct, but breaks dynamo's graph when ``clip`` is left at its default."""

    @staticmethod
    def forward(x, clip=None):  # type: ignore[no-untyped-def,override]
        if clip is None:
            torch._dynamo.graph_break()
            clip = 1.0
        return x.clamp(0, clip)

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
        x, clip = inputs
        ctx.save_for_backward((x > 0) & (x < (1.0 if clip is None else clip)))

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
        (mask,) = ctx.saved_tensors
        return grad * mask, None


@needs_compile
@pytest.mark.usefixtures("fresh_dynamo")
def test_a_class_failing_only_with_the_default_left_out_fails_the_check():
    """Called with every argument (all the check did before), it compiles; called the natural
    way it does not, where a plain Function of the same signature does: a failure, not a skip."""
    x = torch.tensor([-1.5, -0.25, 0.25, 0.75, 1.5, 3.0], dtype=torch.double, requires_grad=True)
    left_out = r"failed \[compile\].*called with the defaults left out"
    with pytest.raises(AssertionError, match=left_out):
        check_function(BreaksWithoutClip, x, 2.0, checks=["compile"])


@needs_compile
@pytest.mark.usefixtures("fresh_dynamo")
def test_a_call_style_torch_cannot_compile_is_a_skip_proven_by_the_control():
    """Keywords to ``apply`` with grad: where the plain control fails too (e.g. torch 2.4-2.6),
    the style is reported as skipped with that proof; elsewhere it runs."""
    x = torch.tensor([-1.5, 0.25, 0.75, 3.0], dtype=torch.double, requires_grad=True)
    report = check_function(ClippedReLU, x, kwargs={"clip": 2.0}, checks=["compile"])
    why = report.skipped.get("compile") or report.skipped.get("compile (call styles)")
    styles = call_styles(inspect.signature(compatfn.functional(ClippedReLU)), 1, {"clip": 2.0})
    control = plain_control(inspect.signature(compatfn.functional(ClippedReLU)), (x,))
    failing = [s.label for s in styles if plain_style_failure(control, s, (x,), "aot_eager")]
    if why is None:
        assert report.ran == ["compile"], str(report)
    else:
        assert "a plain legacy-form Function with the same signature" in why, why
        assert any(label in why for label in failing), (why, failing)
