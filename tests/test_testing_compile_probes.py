"""The torch.compile probes of ``compatfn.testing`` (``_compile_probes``): check_function skips its
compile check for a torch limitation only when a plain-torch Function proves it, never hides a
failure of ours behind it, and reads dynamo's real messages right."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import compatfn
from compatfn.testing import _compile_probes as probes
from compatfn.testing import check_function

TORCH = compatfn.core._TORCH_VERSION


def _x(device: torch.device) -> torch.Tensor:
    return torch.linspace(0.3, 1.7, 6, dtype=torch.float64, device=device).requires_grad_()


@compatfn.function
class NoMaterialize(torch.autograd.Function):
    """Uses ctx.set_materialize_grads, which torch 2.1's dynamo cannot trace at all."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return None if grad is None else grad * 3


@compatfn.function
class DataDependentNoMaterialize(torch.autograd.Function):
    """Fails to compile (fullgraph) for its own reason: a data-dependent branch in forward."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 3
        return x * 2

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return None if grad is None else grad * 3


FEATURE = "set_materialize_grads"
FAKE_FAILURE = probes.DynamoFailure(
    "Unsupported", f"inline in skipfiles: FunctionCtx.{FEATURE}", (FEATURE,)
)


def _need_compile() -> None:
    why = compatfn.core._dynamo_unsupported()
    if why:
        pytest.skip(why)


@pytest.mark.usefixtures("fresh_dynamo")
def test_plain_probe_is_cached_and_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_compile()

    first = probes.plain_compile_failure(FEATURE, "aot_eager")
    if TORCH == (2, 1):  # measured: dynamo 2.1 refuses to inline FunctionCtx.set_materialize_grads
        assert first == FAKE_FAILURE
    elif TORCH >= (2, 2):
        assert first is None

    def no_compile(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the probe must be cached")

    monkeypatch.setattr(torch, "compile", no_compile)
    assert probes.plain_compile_failure(FEATURE, "aot_eager") == first


@pytest.mark.usefixtures("fresh_dynamo")
def test_compile_skip_is_reported_with_the_reason(device: torch.device) -> None:
    _need_compile()

    plain = probes.plain_compile_failure(FEATURE, "aot_eager")
    report = check_function(NoMaterialize, _x(device), checks=["compile"])
    if plain is None:  # torch 2.2+: the plain Function compiles, so must ours
        assert report.ran == ["compile"], str(report)
        assert "compile" not in report.skipped
    else:  # torch 2.1
        assert report.ran == [], str(report)
        reason = report.skipped["compile"]
        assert f"torch {torch.__version__}" in reason and f"ctx.{FEATURE}" in reason, reason
        assert "not even a plain legacy-form one without compatfn" in reason, reason
    if TORCH >= (2, 4):
        assert report.ran == ["compile"], str(report)


@pytest.mark.usefixtures("fresh_dynamo")
def test_compile_failure_is_not_hidden_when_the_plain_function_compiles(
    device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pretend the plain-torch reproduction compiles: a failure of ours must then stay a failure."""
    _need_compile()

    real = probes.plain_compile_failure(FEATURE, "aot_eager")
    monkeypatch.setitem(probes._PLAIN_PROBE_RESULTS, (FEATURE, "aot_eager"), None)
    if real is None:  # our Function compiles on this torch anyway
        assert check_function(NoMaterialize, _x(device), checks=["compile"]).ran == ["compile"]
    else:
        with pytest.raises(AssertionError, match=rf"NoMaterialize\) failed \[compile\].*{FEATURE}"):
            check_function(NoMaterialize, _x(device), checks=["compile"])


@pytest.mark.usefixtures("fresh_dynamo")
def test_plain_probe_failure_never_turns_a_pass_into_a_skip(
    device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pretend the plain-torch reproduction fails: the probe is only consulted on a failure."""
    _need_compile()

    monkeypatch.setitem(probes._PLAIN_PROBE_RESULTS, (FEATURE, "aot_eager"), FAKE_FAILURE)
    report = check_function(NoMaterialize, _x(device), checks=["compile"])
    if TORCH >= (2, 2):  # compiles here: the check ran
        assert report.ran == ["compile"], str(report)
    else:
        assert f"ctx.{FEATURE}" in report.skipped["compile"]


@pytest.mark.usefixtures("fresh_dynamo")
def test_unrelated_compile_failure_is_not_hidden(
    device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Function using set_materialize_grads that fails to compile for another reason fails."""
    _need_compile()

    monkeypatch.setitem(probes._PLAIN_PROBE_RESULTS, (FEATURE, "aot_eager"), FAKE_FAILURE)
    with pytest.raises(AssertionError, match=r"DataDependentNoMaterialize\) failed \[compile\]"):
        check_function(DataDependentNoMaterialize, _x(device), checks=["compile"])


# --- the dynamo message parser, fed the real messages of the torch at hand ----------------------


def _compile_error(fn: Any) -> Any:
    """The exception compiling ``fn`` (fullgraph, fwd+bwd) raises on this torch, or None."""

    try:
        probes._compile_plain_probe(fn, "aot_eager")
    except Exception as exc:
        return exc
    return None


def _assert_one_clean_line(failure: Any) -> None:
    headline = failure.headline
    assert headline and "\n" not in headline, failure
    assert " | " not in headline and "The reason was: " not in headline, failure


@pytest.mark.parametrize(
    "feature", ["set_materialize_grads", "mark_dirty", "mark_non_differentiable"]
)
@pytest.mark.usefixtures("fresh_dynamo")
def test_dynamo_message_parser_on_the_ctx_limitation_messages(feature: str) -> None:
    """Where this torch cannot compile a plain Function using ``ctx.<feature>`` (2.1, measured:
    ``speculate_subgraph: ... The reason was: inline in skipfiles: FunctionCtx.<feature>  |
    <path>``), the parser names that method in dynamo's real message; 2.2+ compile all three."""
    _need_compile()

    exc = _compile_error(probes._PLAIN_CTX_PROBES[feature])
    if exc is None:
        assert TORCH >= (2, 2)
        return
    assert TORCH < (2, 2), exc
    failure = probes.read_dynamo_failure(exc)
    assert failure.error == type(exc).__name__ == "Unsupported", failure
    assert failure.ctx_methods == (feature,), failure
    _assert_one_clean_line(failure)


@pytest.mark.usefixtures("fresh_dynamo")
def test_dynamo_message_parser_on_a_decorated_functions_message() -> None:
    """Compiling a decorated Function that calls ``ctx.set_materialize_grads`` from setup_context
    fails on 2.1 only; the parser finds the method in that message too."""
    _need_compile()

    exc = _compile_error(compatfn.as_legacy(NoMaterialize) if TORCH < (2, 4) else NoMaterialize)
    if exc is None:
        assert TORCH >= (2, 2)
        return
    failure = probes.read_dynamo_failure(exc)
    assert failure.ctx_methods == (FEATURE,), failure
    _assert_one_clean_line(failure)


@pytest.mark.usefixtures("fresh_dynamo")
def test_dynamo_message_parser_on_an_unrelated_failure() -> None:
    """A failure that names no ctx method (a data-dependent branch) is never read as one."""
    _need_compile()

    class Branchy(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return x * 3 if x.sum() > 0 else x * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return grad

    exc = _compile_error(Branchy)
    assert exc is not None, "fullgraph compiles a data-dependent branch on this torch"
    failure = probes.read_dynamo_failure(exc)
    assert failure.error == type(exc).__name__ and failure.ctx_methods == (), failure
    _assert_one_clean_line(failure)
