"""``compatfn.testing.check_function`` catches each kind of bug it promises to catch, skips only
with a stated reason (a torch limitation only when a plain-torch Function proves it), and reads
dynamo's real messages right; ``saved_bytes`` counts each saved storage once."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import compatfn
from compatfn.testing import CHECKS, CheckReport, _DynamoFailure, check_function, saved_bytes

TORCH = compatfn.core.TORCH_VERSION
HAS_HOOKS = hasattr(getattr(torch.autograd, "graph", None), "saved_tensors_hooks")
FWD_AD = TORCH >= (1, 11)


def _x(device: torch.device, n: int = 6) -> torch.Tensor:
    return torch.linspace(0.3, 1.7, n, dtype=torch.float64, device=device).requires_grad_()


@compatfn.function
class Square(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * x * scale

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (x,) = ctx.saved_tensors
        return 2 * x * grad * ctx.scale, None

    @staticmethod
    def jvp(ctx: Any, x_t: torch.Tensor, scale_t: Any) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * x_t * ctx.scale


@compatfn.function
class WrongBackward(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * x

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * x * grad  # should be 2 * x * grad


@compatfn.function
class WrongJvp(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * x

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * grad

    @staticmethod
    def jvp(ctx: Any, x_t: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return x * x_t  # should be 2 * x * x_t


@compatfn.function
class OnceDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.exp()

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * y


@compatfn.function
class SneakyInplace(torch.autograd.Function):
    """Overwrites its input without mark_dirty: the classic silent bug."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        x.mul_(2)
        return y

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


_calls = itertools.count()


@compatfn.function
class CallCounting(torch.autograd.Function):
    """A different result on every call: native and legacy paths cannot agree."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * float(next(_calls))

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


@compatfn.function
class SavesTwice(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(inputs[0], inputs[0], output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def test_good_function_report(device: torch.device) -> None:
    report = check_function(Square, _x(device), 1.5, checks=[c for c in CHECKS if c != "compile"])
    assert isinstance(report, CheckReport)
    assert report.ran[:3] == ["forward", "gradcheck", "gradgradcheck"]
    assert report.skipped["compile"] == "not requested (checks=...)"
    if FWD_AD:
        assert "forward_ad" in report.ran
    else:
        assert "1.11" in report.skipped["forward_ad"]
    mode = compatfn.mode(Square)
    # torch.func runs every class not on the legacy path; parity compares a native class with
    # its legacy twin (a dual class already takes the legacy form).
    if TORCH >= (2, 0) and mode != "legacy":
        assert "vmap" in report.ran
    else:
        assert report.skipped["vmap"]
    if mode == "native":
        assert "parity" in report.ran
    else:
        assert report.skipped["parity"]
    text = str(report)
    assert "Square" in text and "ran: forward, gradcheck" in text


def test_keyword_arguments_reach_the_function(device: torch.device) -> None:
    report = check_function(Square, _x(device), kwargs={"scale": 3.0}, checks=["gradcheck"])
    assert report.ran == ["gradcheck"]


def test_wrong_backward_is_caught(device: torch.device) -> None:
    with pytest.raises(
        AssertionError, match=r"check_function\(WrongBackward\) failed \[gradcheck\]"
    ):
        check_function(WrongBackward, _x(device))


@pytest.mark.skipif(not FWD_AD, reason=f"torch {torch.__version__}: no custom-Function forward AD")
def test_wrong_jvp_is_caught(device: torch.device) -> None:
    with pytest.raises(AssertionError, match=r"WrongJvp\) failed \[forward_ad\]"):
        check_function(WrongJvp, _x(device))


def test_jvp_functions_skip_compile_with_reason(device: torch.device) -> None:
    report = check_function(Square, _x(device), checks=["compile"])
    why = compatfn.core.dynamo_unsupported()
    jvp = "torch.compile (dynamo) does not trace Functions that define a custom jvp"
    assert report.ran == [] and report.skipped["compile"] == (why or jvp), str(report)


def test_once_differentiable_skips_gradgradcheck(device: torch.device) -> None:
    report = check_function(OnceDifferentiable, _x(device), checks=["gradcheck", "gradgradcheck"])
    assert report.ran == ["gradcheck"]
    assert "once_differentiable" in report.skipped["gradgradcheck"]


def test_inplace_without_mark_dirty_is_caught(device: torch.device) -> None:
    with pytest.raises(AssertionError, match=r"\[forward\].*modified in place"):
        check_function(SneakyInplace, _x(device))


def test_parity_failure_or_skip_reason(device: torch.device) -> None:
    if compatfn.mode(CallCounting) == "native":
        with pytest.raises(AssertionError, match=r"\[parity\].*native vs legacy"):
            check_function(CallCounting, _x(device), checks=["parity"])
    else:
        report = check_function(CallCounting, _x(device), checks=["parity"])
        assert "legacy path" in report.skipped["parity"]


def test_no_requires_grad_and_plain_callables(device: torch.device) -> None:
    report = check_function(Square, _x(device).detach(), checks=["gradcheck", "gradgradcheck"])
    assert report.ran == []
    assert "requires_grad" in report.skipped["gradcheck"]
    report = check_function(torch.sin, _x(device), checks=["gradcheck", "parity", "vmap"])
    assert report.ran == ["gradcheck"]
    assert report.skipped["parity"] == "not a Function class"
    assert report.skipped["vmap"]


def test_unknown_check_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown checks"):
        check_function(Square, _x(torch.device("cpu")), checks=["gradchek"])


def test_vmap_needs_a_rule(device: torch.device) -> None:
    report = check_function(WrongBackward, _x(device), checks=["vmap"])
    assert report.skipped["vmap"]
    if TORCH >= (2, 0):
        assert "generate_vmap_rule" in report.skipped["vmap"]
    else:
        assert "torch >= 2.0" in report.skipped["vmap"]


def test_saved_bytes_counts_each_storage_once(device: torch.device) -> None:
    x = torch.linspace(-1, 1, 100, device=device).requires_grad_()
    assert saved_bytes(SavesTwice, x) == 2 * 4 * 100  # x (twice: once) and the output
    assert saved_bytes(SavesTwice, x.detach()) == 0


def test_saved_bytes_builtin_ops(device: torch.device) -> None:
    x = torch.linspace(-1, 1, 100, device=device).requires_grad_()
    if HAS_HOOKS:
        assert saved_bytes(torch.relu, x) == 400
        assert saved_bytes(lambda t: t.sin().sin(), x) == 800  # both sins save their input
        assert saved_bytes(lambda t: t + 1, x) == 0
    else:
        with pytest.raises(RuntimeError, match=r"1\.10"):
            saved_bytes(torch.relu, x)


# --------------------------------------------------------------------------- compile limitations


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
FAKE_FAILURE = _DynamoFailure(
    "Unsupported", f"inline in skipfiles: FunctionCtx.{FEATURE}", (FEATURE,)
)


def _need_compile() -> None:
    why = compatfn.core.dynamo_unsupported()
    if why:
        pytest.skip(why)


@pytest.mark.usefixtures("fresh_dynamo")
def test_plain_probe_is_cached_and_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_compile()
    from compatfn import testing

    first = testing._plain_compile_failure(FEATURE, "aot_eager")
    if TORCH == (2, 1):  # measured: dynamo 2.1 refuses to inline FunctionCtx.set_materialize_grads
        assert first == FAKE_FAILURE
    elif TORCH >= (2, 2):
        assert first is None

    def no_compile(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the probe must be cached")

    monkeypatch.setattr(torch, "compile", no_compile)
    assert testing._plain_compile_failure(FEATURE, "aot_eager") == first


@pytest.mark.usefixtures("fresh_dynamo")
def test_compile_skip_is_reported_with_the_reason(device: torch.device) -> None:
    _need_compile()
    from compatfn import testing

    plain = testing._plain_compile_failure(FEATURE, "aot_eager")
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
    from compatfn import testing

    real = testing._plain_compile_failure(FEATURE, "aot_eager")
    monkeypatch.setitem(testing._PLAIN_PROBE_RESULTS, (FEATURE, "aot_eager"), None)
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
    from compatfn import testing

    monkeypatch.setitem(testing._PLAIN_PROBE_RESULTS, (FEATURE, "aot_eager"), FAKE_FAILURE)
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
    from compatfn import testing

    monkeypatch.setitem(testing._PLAIN_PROBE_RESULTS, (FEATURE, "aot_eager"), FAKE_FAILURE)
    with pytest.raises(AssertionError, match=r"DataDependentNoMaterialize\) failed \[compile\]"):
        check_function(DataDependentNoMaterialize, _x(device), checks=["compile"])


# --- the dynamo message parser, fed the real messages of the torch at hand ----------------------


def _compile_error(fn: Any) -> Any:
    """The exception compiling ``fn`` (fullgraph, fwd+bwd) raises on this torch, or None."""
    from compatfn import testing

    try:
        testing._compile_plain_probe(fn, "aot_eager")
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
    from compatfn import testing

    exc = _compile_error(testing._PLAIN_CTX_PROBES[feature])
    if exc is None:
        assert TORCH >= (2, 2)
        return
    assert TORCH < (2, 2), exc
    failure = testing._read_dynamo_failure(exc)
    assert failure.error == type(exc).__name__ == "Unsupported", failure
    assert failure.ctx_methods == (feature,), failure
    _assert_one_clean_line(failure)


@pytest.mark.usefixtures("fresh_dynamo")
def test_dynamo_message_parser_on_a_decorated_functions_message() -> None:
    """Compiling a decorated Function that calls ``ctx.set_materialize_grads`` from setup_context
    fails on 2.1 only; the parser finds the method in that message too."""
    _need_compile()
    from compatfn import testing

    exc = _compile_error(compatfn.as_legacy(NoMaterialize) if TORCH < (2, 4) else NoMaterialize)
    if exc is None:
        assert TORCH >= (2, 2)
        return
    failure = testing._read_dynamo_failure(exc)
    assert failure.ctx_methods == (FEATURE,), failure
    _assert_one_clean_line(failure)


@pytest.mark.usefixtures("fresh_dynamo")
def test_dynamo_message_parser_on_an_unrelated_failure() -> None:
    """A failure that names no ctx method (a data-dependent branch) is never read as one."""
    _need_compile()
    from compatfn import testing

    class Branchy(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return x * 3 if x.sum() > 0 else x * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return grad

    exc = _compile_error(Branchy)
    assert exc is not None, "fullgraph compiles a data-dependent branch on this torch"
    failure = testing._read_dynamo_failure(exc)
    assert failure.error == type(exc).__name__ and failure.ctx_methods == (), failure
    _assert_one_clean_line(failure)


def test_every_check_is_registered() -> None:
    from compatfn import testing

    assert sorted(testing._REGISTRY) == sorted(CHECKS)
