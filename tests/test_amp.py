"""``compatfn.custom_fwd`` / ``custom_bwd`` work on both Function styles: forward runs under the
requested autocast cast, backward under the autocast state forward ran under, the caller's tensors
untouched and no deprecation warnings; decorations a torch cannot honour fail at decoration."""

from __future__ import annotations

import warnings

import pytest
import torch

import compatfn
from compatfn import core

CPU_AUTOCAST = hasattr(torch, "is_autocast_cpu_enabled")  # torch >= 1.10
AUTOCAST_DTYPES = {"cpu": [torch.bfloat16], "cuda": [torch.float16, torch.bfloat16]}


def autocast_state(device: str):
    is_enabled, get_dtype, _ = core._autocast_api(device)
    return is_enabled(), get_dtype()


def autocast(device: str, dtype: torch.dtype):
    if hasattr(torch, "autocast"):
        return torch.autocast(device, dtype=dtype)
    return torch.cuda.amp.autocast()  # torch < 1.10: CUDA float16 only


def make_matmul(device: str, cast_inputs=None, log=None):
    log = [] if log is None else log

    @compatfn.function
    class MatMul(torch.autograd.Function):
        @staticmethod
        @compatfn.custom_fwd(device_type=device, cast_inputs=cast_inputs)
        def forward(a, b):
            log.append(("forward", autocast_state(device), a.dtype, b.dtype))
            return a.mm(b)

        @staticmethod
        def setup_context(ctx, inputs, output):
            a, b = inputs
            log.append(("setup_context", a.dtype, b.dtype))
            ctx.save_for_backward(a, b)

        @staticmethod
        @compatfn.custom_bwd(device_type=device)
        def backward(ctx, grad):
            log.append(("backward", autocast_state(device)))
            a, b = ctx.saved_tensors
            return grad.mm(b.t()), a.t().mm(grad)

    return MatMul, log


def make_legacy_form_matmul(device: str, log):
    @compatfn.function
    class LegacyMatMul(torch.autograd.Function):
        @staticmethod
        @compatfn.custom_fwd(device_type=device)
        def forward(ctx, a, b):
            log.append(("forward", autocast_state(device)))
            ctx.save_for_backward(a, b)
            return a.mm(b)

        @staticmethod
        @compatfn.custom_bwd(device_type=device)
        def backward(ctx, grad):
            log.append(("backward", autocast_state(device)))
            a, b = ctx.saved_tensors
            return grad.mm(b.t()), a.t().mm(grad)

    return LegacyMatMul


def need_autocast(device: str) -> None:
    if device == "cpu" and not CPU_AUTOCAST:
        pytest.skip(f"torch {torch.__version__} has no CPU autocast (torch >= 1.10)")


def inputs(device: str):
    a = torch.randn(4, 3, device=device, requires_grad=True)
    b = torch.randn(3, 5, device=device, requires_grad=True)
    return a, b


@pytest.fixture
def dev(device) -> str:
    return torch.device(device).type


@pytest.fixture(params=["bfloat16", "float16"])
def dtype(request, dev):
    device = dev
    dtype = getattr(torch, request.param)
    if dtype not in AUTOCAST_DTYPES[device]:
        pytest.skip(f"{device} autocast is not tested with {request.param}")
    if device == "cuda" and dtype is torch.bfloat16 and not hasattr(torch, "autocast"):
        pytest.skip(f"torch {torch.__version__}: CUDA autocast is float16 only (bfloat16: 1.10)")
    return dtype


def test_backward_runs_under_forward_autocast_state(dev, dtype):
    device = dev
    need_autocast(device)
    fn, log = make_matmul(device)
    a, b = inputs(device)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    assert y.dtype == dtype
    y.float().sum().backward()
    assert log[0] == ("forward", (True, dtype), torch.float32, torch.float32)
    assert log[-1] == ("backward", (True, dtype))
    assert a.grad.dtype == torch.float32 and b.grad is not None
    for t in (a, b):  # compatfn never writes its bookkeeping onto the caller's tensors
        assert not hasattr(t, "_fwd_used_autocast") and not hasattr(t, "_dtype")


def test_outside_autocast_is_a_no_op(dev):
    device = dev
    need_autocast(device)
    fn, log = make_matmul(device, cast_inputs=torch.float32)
    a, b = inputs(device)
    y = fn.apply(a, b)
    y.sum().backward()
    assert y.dtype == torch.float32
    assert log[0][1][0] is False and log[-1][1][0] is False
    assert torch.allclose(a.grad, torch.ones(4, 5, device=device).mm(b.detach().t()))


def test_cast_inputs_disables_autocast_in_forward_and_backward(dev, dtype):
    device = dev
    need_autocast(device)
    fn, log = make_matmul(device, cast_inputs=torch.float32)
    a = torch.randn(4, 3, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(3, 5, device=device, requires_grad=True)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    assert y.dtype == torch.float32  # inputs cast to float32, forward ran without autocast
    y.sum().backward()
    forward, setup, backward = log
    assert forward == ("forward", (False, dtype), torch.float32, torch.float32)
    assert setup == ("setup_context", torch.float32, torch.float32)  # sees what forward saw
    assert backward == ("backward", (False, dtype))
    assert a.grad.dtype == dtype  # autograd returns the gradient in the input's dtype


def test_legacy_form_class(dev, dtype):
    device = dev
    need_autocast(device)
    log: list = []
    fn = make_legacy_form_matmul(device, log)
    a, b = inputs(device)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    y.float().sum().backward()
    assert log == [("forward", (True, dtype)), ("backward", (True, dtype))]
    assert not hasattr(a, "_fwd_used_autocast")


def test_no_deprecation_warnings(dev):
    device = dev
    need_autocast(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn, _ = make_matmul(device)
        legacy = make_legacy_form_matmul(device, [])
        a, b = inputs(device)
        fn.apply(a, b).sum().backward()
        legacy.apply(a, b).sum().backward()
    amp = [w for w in caught if "amp" in str(w.message) or "custom_" in str(w.message)]
    assert amp == []


def test_custom_bwd_without_custom_fwd_is_rejected():
    device = "cuda" if not CPU_AUTOCAST else "cpu"
    with pytest.raises(TypeError, match=r"Unpaired: backward uses custom_bwd.*forward has nothing"):

        @compatfn.function
        class Unpaired(torch.autograd.Function):
            @staticmethod
            def forward(x):
                return x * 2

            @staticmethod
            def setup_context(ctx, inputs, output):
                pass

            @staticmethod
            @compatfn.custom_bwd(device_type=device)
            def backward(ctx, grad):
                return grad * 2


@pytest.mark.skipif(CPU_AUTOCAST, reason="this torch has CPU autocast (torch >= 1.10)")
def test_cpu_autocast_request_on_old_torch_is_a_clear_error():
    with pytest.raises(ValueError, match=r"device_type='cpu' needs torch >= 1\.10"):
        compatfn.custom_fwd(device_type="cpu")(lambda x: x)


@pytest.mark.skipif(
    hasattr(torch, "get_autocast_dtype"), reason="device-generic autocast (torch >= 2.4)"
)
def test_other_devices_need_device_generic_autocast():
    with pytest.raises(ValueError, match=r"device_type='xpu' needs torch >= 2\.4"):
        compatfn.custom_fwd(device_type="xpu")(lambda x: x)


def _named_matmul(device: str, cast_inputs, log):
    """A setup_context-style forward whose first parameter merely looks like ctx."""

    @compatfn.function
    class Named(torch.autograd.Function):
        @staticmethod
        @compatfn.custom_fwd(device_type=device, cast_inputs=cast_inputs)
        def forward(context, ctx_w):
            log.append(("forward", autocast_state(device), context.dtype))
            return context.mm(ctx_w)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        @compatfn.custom_bwd(device_type=device)
        def backward(ctx, grad):
            log.append(("backward", autocast_state(device)))
            a, b = ctx.saved_tensors
            return grad.mm(b.t()), a.t().mm(grad)

    return Named


@pytest.mark.parametrize("cast", [None, torch.float32], ids=["no-cast", "cast-float32"])
def test_style_comes_from_the_class_not_parameter_names(dev, dtype, cast):
    """pytorch #132388: never write autocast state onto the caller's first tensor."""
    device = dev
    need_autocast(device)
    log: list = []
    fn = _named_matmul(device, cast, log)
    a, b = inputs(device)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    y.float().sum().backward()
    assert y.dtype == (cast or dtype)
    assert log[0] == ("forward", (cast is None, dtype), cast or torch.float32)
    assert log[-1] == ("backward", (cast is None, dtype))
    for t in (a, b):
        assert not hasattr(t, "_fwd_used_autocast") and not hasattr(t, "_dtype")


def test_ctxless_custom_fwd_in_an_undecorated_class_is_a_clear_error():
    device = "cpu" if CPU_AUTOCAST else "cuda"

    class Undecorated(torch.autograd.Function):
        @staticmethod
        @compatfn.custom_fwd(device_type=device)
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    if not hasattr(torch.autograd.Function, "setup_context"):  # torch 1.x: torch's own error
        return
    x = torch.ones(2)
    with pytest.raises(TypeError, match=r"forward is decorated with custom_fwd but was not call"):
        Undecorated.apply(x)
    assert not hasattr(x, "_dtype")
