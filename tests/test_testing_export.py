"""check_function's ``export`` check: ``torch.export`` (strict, and non-strict where torch has
it) of a module calling ``Fn.apply`` in each call style, compared with eager; a failure is a
skip only where a plain-torch control fails the same way (``compatfn.testing._export``)."""

from __future__ import annotations

import pytest
import torch

import compatfn
from compatfn.relu import ClippedReLU
from compatfn.testing import check_function
from compatfn.testing._export import export_modes, export_unsupported

WHY_NOT = export_unsupported() or compatfn.core._dynamo_unsupported()
needs_export = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _x() -> torch.Tensor:
    return torch.tensor([-1.5, -0.25, 0.25, 0.75, 1.5, 3.0], dtype=torch.double, requires_grad=True)


@pytest.mark.skipif(WHY_NOT is None, reason="this torch exports")
def test_a_torch_without_export_skips_visibly():
    report = check_function(ClippedReLU, _x(), 2.0, checks=["export"])
    assert report.ran == [] and report.skipped["export"] == WHY_NOT, str(report)


@needs_export
def test_readme_clipped_relu_exports_in_every_mode_and_call_style():
    report = check_function(ClippedReLU, _x(), 2.0, checks=["export"])
    assert report.ran == ["export"], str(report)
    modes = [label for label, _ in export_modes()]
    for label in ("strict", "non-strict"):
        skipped = report.skipped.get(f"export ({label})", "")
        proven = "a plain legacy-form Function with the same signature" in skipped  # torch 2.2
        assert (label in modes) == (not skipped or proven), str(report)
    # A call style may be skipped only with the plain control's proof (torch 2.1 strict export
    # fails a plain Function too when a default it reads is left out).
    skipped = report.skipped.get("export (call styles)", "")
    assert skipped == "" or "a plain legacy-form Function with the same signature" in skipped


@compatfn.function
class ClipToMax(torch.autograd.Function):
    """Correct in eager; its forward reads a tensor's value into Python (``float(...)``), which
    torch.export cannot trace, where a plain Function of the same signature exports."""

    @staticmethod
    def forward(x):  # type: ignore[no-untyped-def,override]
        return x.clamp(0, float(x.max()) / 2)

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
        (x,) = inputs
        ctx.save_for_backward((x > 0) & (x < float(x.max()) / 2))

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
        (mask,) = ctx.saved_tensors
        return grad * mask


@needs_export
def test_a_class_that_does_not_export_fails_the_check():
    """A failure the plain control does not share is a failure, not a skip."""
    with pytest.raises(AssertionError, match=r"failed \[export\].*torch\.export \((non-)?strict\)"):
        check_function(ClipToMax, _x(), checks=["export"])


@needs_export
def test_a_wrong_exported_result_fails_the_check(monkeypatch):
    """The exported program's result is compared with eager's."""
    from compatfn.testing import _export

    real = _export._run_exported
    monkeypatch.setattr(_export, "_run_exported", lambda *a: real(*a) + 1)
    # (the first mode that exports: torch 2.2 cannot export this class strictly with a default
    # left out, which the plain control proves a torch limit)
    with pytest.raises(AssertionError, match=r"failed \[export\].*exported \((non-)?strict\)"):
        check_function(ClippedReLU, _x(), 2.0, checks=["export"])


@needs_export
def test_an_in_place_function_exports_or_is_proven_a_torch_limit():
    """An in-place Function (``ctx.mark_dirty``): torch 2.2 exports none, hand-written included,
    with messages that name no ctx method; the skip needs the plain ``mark_dirty`` probe's proof,
    found through the ctx methods the class's source calls."""
    from compatfn.relu import InplaceReLU

    report = check_function(InplaceReLU, _x().detach() * 1, checks=["export"])
    assert "export" in report.ran or "export" in report.skipped, str(report)
    for label, _ in export_modes():
        skipped = report.skipped.get(f"export ({label})", "")
        assert skipped == "" or "calls ctx.mark_dirty" in skipped, str(report)


def test_ctx_methods_are_read_from_the_source_of_the_class_and_its_bases():
    from compatfn.relu import InplaceReLU, MaskReLU
    from compatfn.testing._compile_probes import ctx_methods_in_source

    assert ctx_methods_in_source(InplaceReLU) == ("mark_dirty",)
    assert "set_materialize_grads" in ctx_methods_in_source(MaskReLU)
    assert ctx_methods_in_source(ClipToMax) == ()

    class Sub(InplaceReLU):  # type: ignore[misc,valid-type]
        pass

    assert ctx_methods_in_source(Sub) == ("mark_dirty",)


@needs_export
def test_the_source_of_the_class_is_read_only_after_an_export_fails(monkeypatch):
    """A class that exports never has its source read (a class built at run time has none)."""
    from compatfn.testing import _checks

    def unreadable(cls):
        raise AssertionError(f"the source of {cls.__name__} was read")

    monkeypatch.setattr(_checks, "ctx_methods_in_source", unreadable)
    report = check_function(ClippedReLU, _x(), 2.0, checks=["export"])
    assert report.ran == ["export"], str(report)
