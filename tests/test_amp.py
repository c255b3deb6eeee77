"""``compatfn.custom_fwd`` / ``custom_bwd`` work on both Function styles: forward runs under the
requested autocast cast, backward under the autocast state forward ran under, the caller's tensors
untouched and no deprecation warnings; decorations a torch cannot honour fail at decoration.

Every case runs on the CPU and on CUDA (float16 and bfloat16 casts there), on the native path and
with ``legacy=True``. The autocast state a Function sees is read with torch's own API and shown by
its effect (the dtype of a matmul), never through compatfn."""

from __future__ import annotations

import warnings

import pytest
import torch
from packaging.version import Version

import compatfn

TORCH = Version(str(torch.__version__)).release[:2]
CPU_AUTOCAST = TORCH >= (1, 10)  # CPU autocast and torch.autocast: torch 1.10 (support table)
PATHS = [pytest.param({}, id="native"), pytest.param({"legacy": True}, id="legacy-forced")]


def autocast_state(device: str):
    """(autocast enabled, its dtype, the dtype a float32 matmul gets): torch's own API only."""
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4: device-generic
        enabled, dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    elif device == "cpu":
        enabled, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    else:  # torch < 1.10: CUDA autocast is float16 only
        enabled = torch.is_autocast_enabled()
        dtype = getattr(torch, "get_autocast_gpu_dtype", lambda: torch.float16)()
    ones = torch.ones(2, 2, device=device)
    return enabled, dtype, ones.mm(ones).dtype


def on(dtype: torch.dtype):
    """The state inside autocast with ``dtype``."""
    return (True, dtype, dtype)


def off(dtype: torch.dtype):
    """The state with autocast disabled (by ``cast_inputs``) inside autocast with ``dtype``."""
    return (False, dtype, torch.float32)


def autocast(device: str, dtype: torch.dtype):
    if hasattr(torch, "autocast"):
        return torch.autocast(device, dtype=dtype)
    return torch.cuda.amp.autocast()  # torch < 1.10: CUDA float16 only


def make_matmul(device: str, cast_inputs=None, log=None, options=None):
    log = [] if log is None else log

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

    return _decorate(MatMul, options), log


def _decorate(cls, options):
    cls = compatfn.function(cls, **(options or {}))
    if options:
        assert compatfn.mode(cls) == "legacy"
    return cls


def make_legacy_form_matmul(device: str, log, options=None):
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

    return _decorate(LegacyMatMul, options)


def need_autocast(device: str) -> None:
    if device == "cpu" and not CPU_AUTOCAST:
        pytest.skip(f"torch {torch.__version__} has no CPU autocast (torch >= 1.10)")


def inputs(device: str, a_dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4, 3, generator=gen).to(device, a_dtype).requires_grad_()
    b = torch.randn(3, 5, generator=gen).to(device).requires_grad_()
    return a, b


def expected_grads(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype):
    """The gradients of ``(a @ b).float().sum()`` computed in float64 with torch only, in the
    dtype autograd returns them (each input's own), and a tolerance for ``out_dtype``."""
    ones = torch.ones(a.shape[0], b.shape[1], dtype=torch.float64, device=a.device)
    ga = ones.mm(b.detach().double().t()).to(a.dtype)
    gb = a.detach().double().t().mm(ones).to(b.dtype)
    return ga, gb, (0.05 if out_dtype in (torch.float16, torch.bfloat16) else 1e-5)


def assert_grads(a, b, out_dtype) -> None:
    ga, gb, tol = expected_grads(a, b, out_dtype)
    assert a.grad.dtype == a.dtype and b.grad.dtype == b.dtype
    assert torch.allclose(a.grad.double(), ga.double(), rtol=tol, atol=tol), (a.grad, ga)
    assert torch.allclose(b.grad.double(), gb.double(), rtol=tol, atol=tol), (b.grad, gb)


@pytest.fixture(params=PATHS)
def options(request):
    """The native path (``{}``) or the forced legacy path (``{"legacy": True}``)."""
    return request.param


@pytest.fixture
def dev(device) -> str:
    return torch.device(device).type


@pytest.fixture(
    params=[
        pytest.param(("cpu", torch.bfloat16), id="cpu-bfloat16"),
        pytest.param(("cuda", torch.float16), id="cuda-float16", marks=pytest.mark.cuda),
        pytest.param(("cuda", torch.bfloat16), id="cuda-bfloat16", marks=pytest.mark.cuda),
    ]
)
def amp(request):
    """(device type, autocast dtype): CPU bfloat16, CUDA float16 and bfloat16."""
    device, dtype = request.param
    if device == "cuda" and dtype is torch.bfloat16 and not hasattr(torch, "autocast"):
        pytest.skip(f"torch {torch.__version__}: CUDA autocast is float16 only (bfloat16: 1.10)")
    return device, dtype


def test_backward_runs_under_forward_autocast_state(amp, options):
    device, dtype = amp
    need_autocast(device)
    fn, log = make_matmul(device, options=options)
    a, b = inputs(device)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    assert y.dtype == dtype
    y.float().sum().backward()
    assert log[0] == ("forward", on(dtype), torch.float32, torch.float32)
    assert log[-1] == ("backward", on(dtype))
    assert_grads(a, b, dtype)
    for t in (a, b):  # compatfn never writes its bookkeeping onto the caller's tensors
        assert not hasattr(t, "_fwd_used_autocast") and not hasattr(t, "_dtype")


def test_outside_autocast_is_a_no_op(dev, options):
    device = dev
    need_autocast(device)
    fn, log = make_matmul(device, cast_inputs=torch.float32, options=options)
    a, b = inputs(device)
    y = fn.apply(a, b)
    y.sum().backward()
    assert y.dtype == torch.float32
    assert log[0][1][::2] == (False, torch.float32) and log[-1][1][::2] == (False, torch.float32)
    assert_grads(a, b, torch.float32)


def test_cast_inputs_disables_autocast_in_forward_and_backward(amp, options):
    device, dtype = amp
    need_autocast(device)
    fn, log = make_matmul(device, cast_inputs=torch.float32, options=options)
    a, b = inputs(device, a_dtype=dtype)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    assert y.dtype == torch.float32  # inputs cast to float32, forward ran without autocast
    y.sum().backward()
    forward, setup, backward = log
    assert forward == ("forward", off(dtype), torch.float32, torch.float32)
    assert setup == ("setup_context", torch.float32, torch.float32)  # sees what forward saw
    assert backward == ("backward", off(dtype))
    assert_grads(a, b, dtype)  # autograd returns each gradient in its input's dtype


def test_legacy_form_class(amp, options):
    device, dtype = amp
    need_autocast(device)
    log: list = []
    fn = make_legacy_form_matmul(device, log, options)
    a, b = inputs(device)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    y.float().sum().backward()
    assert log == [("forward", on(dtype)), ("backward", on(dtype))]
    assert not hasattr(a, "_fwd_used_autocast")
    assert_grads(a, b, dtype)


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


def _named_matmul(device: str, cast_inputs, log, options=None):
    """A setup_context-style forward whose first parameter merely looks like ctx."""

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

    return _decorate(Named, options)


@pytest.mark.parametrize("cast", [None, torch.float32], ids=["no-cast", "cast-float32"])
def test_style_comes_from_the_class_not_parameter_names(amp, cast, options):
    """pytorch #132388: never write autocast state onto the caller's first tensor."""
    device, dtype = amp
    need_autocast(device)
    log: list = []
    fn = _named_matmul(device, cast, log, options)
    a, b = inputs(device)
    with autocast(device, dtype):
        y = fn.apply(a, b)
    y.float().sum().backward()
    assert y.dtype == (cast or dtype)
    state = on(dtype) if cast is None else off(dtype)
    assert log[0] == ("forward", state, cast or torch.float32)
    assert log[-1] == ("backward", state)
    assert_grads(a, b, dtype)
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

    x = torch.ones(2)
    if TORCH < (2, 0):  # no setup_context: torch calls forward(ctx, x), Python refuses the ctx
        message = r"forward\(\) takes 1 positional argument but 2 were given"
    else:
        message = r"forward is decorated with custom_fwd but was not call"
    with pytest.raises(TypeError, match=message):
        Undecorated.apply(x)
    assert not hasattr(x, "_dtype")
