"""``compatfn.testing.check_function`` catches each kind of bug it promises to catch and skips only
with a stated reason; ``saved_bytes`` counts each saved storage once. (The compile probes, which
prove a torch limitation, are tested in test_testing_compile_probes.py.)"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import compatfn
from compatfn.testing import CHECKS, CheckReport, check_function, saved_bytes
from compatfn.testing._checks import REGISTRY
from toy_functions import make_clip

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


def test_every_check_is_registered() -> None:
    assert sorted(REGISTRY) == sorted(CHECKS)


def test_an_undecorated_class_is_a_type_error_on_every_torch():
    """The documented error, before any check runs: on torch 1.x the forward check would fail
    first with torch's own "forward() takes 1 positional argument" otherwise."""
    plain = make_clip(decorated=False)
    x = torch.randn(4, dtype=torch.double, requires_grad=True)
    with pytest.raises(TypeError, match="Clip is not decorated with @function; decorate the"):
        check_function(plain, x)
