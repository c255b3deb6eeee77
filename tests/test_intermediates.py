"""``@function(intermediates=k)``: forward's intermediates reach setup_context, never the caller.

The promise, on every torch and path of the matrix: ``apply`` and ``functional(Fn)`` return the
public outputs only (one unwrapped), ``setup_context`` sees the whole tuple, backward receives
gradients for the public outputs only, intermediates of any type (tensor, int, seed, shape) work,
an intermediate nobody saved is freed after the call, and the results equal a hand-written
Function that computes the same. Also under torch.func (torch >= 2.0), torch.compile with
``fullgraph=True`` and torch.export where that torch has them, with the AMP decorators, and in
``check_function``. Values, gradients, freeing, AMP and compile run on the CPU and on CUDA.
Wrong ``k`` fails at decoration, a forward that cannot hold ``k`` intermediates at its first call,
naming the class.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import compatfn
from compatfn import core
from compatfn.testing import check_function


def make_softmax(vmap_rule=False, **options):
    """Softmax whose backward reuses forward's output and a statistic computed in forward."""

    class Softmax(torch.autograd.Function):
        generate_vmap_rule = vmap_rule

        @staticmethod
        def forward(x, dim=-1):
            shifted = x - x.amax(dim, keepdim=True)
            exp = shifted.exp()
            total = exp.sum(dim, keepdim=True)
            return exp / total, total, x.shape  # output, then two intermediates

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, dim = inputs
            y, total, shape = output
            assert isinstance(total, torch.Tensor) and tuple(shape) == tuple(y.shape)
            ctx.dim = dim
            ctx.save_for_backward(y)

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return y * (grad - (grad * y).sum(ctx.dim, keepdim=True))

    return compatfn.function(Softmax, intermediates=2, **options)


def make_split(**options):
    """Two public outputs, a non-tensor intermediate (a seed), a tensor intermediate."""

    class Split(torch.autograd.Function):
        @staticmethod
        def forward(x, scale=2.0):
            seed = 1234
            noise = torch.ones_like(x)
            return x * scale, x + 1, seed, noise

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, scale = inputs
            *_, seed, noise = output
            assert seed == 1234
            ctx.scale = scale
            ctx.save_for_backward(noise)

        @staticmethod
        def backward(ctx, grad_scaled, grad_shifted):
            (noise,) = ctx.saved_tensors
            return grad_scaled * ctx.scale + grad_shifted * noise

    return compatfn.function(Split, intermediates=2, **options)


def _close(actual, expected):
    assert torch.allclose(actual, expected), (actual, expected)  # torch 1.8: no assert_close


def _randn(*shape, device="cpu", dtype=torch.float64, seed=0, grad=True):
    """Seeded values, the same on every device (softmax has no kinks)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(device, dtype).requires_grad_(grad)


PATHS = [pytest.param({}, id="default-path"), pytest.param({"legacy": True}, id="legacy-forced")]


@pytest.mark.parametrize("options", PATHS)
def test_apply_returns_the_public_outputs(options, device):
    softmax, split = make_softmax(**options), make_split(**options)
    x = _randn(3, 5, device=device)
    y = softmax.apply(x)
    assert isinstance(y, torch.Tensor)
    _close(y, torch.softmax(x, -1))
    _close(compatfn.functional(softmax)(x, dim=0), torch.softmax(x, 0))
    scaled, shifted = split.apply(x, scale=3.0)
    _close(scaled, x * 3)
    _close(shifted, x + 1)
    assert isinstance(split.apply(x), tuple) and len(split.apply(x)) == 2


@pytest.mark.parametrize("options", PATHS)
def test_gradients_equal_torch_and_pass_gradcheck(options, device):
    softmax, split = make_softmax(**options), make_split(**options)
    x = _randn(3, 5, device=device)
    w = torch.arange(5.0, dtype=torch.float64, device=device)
    (ours,) = torch.autograd.grad((softmax.apply(x, 0) * w).sum(), x)
    (theirs,) = torch.autograd.grad((torch.softmax(x, 0) * w).sum(), x)
    _close(ours, theirs)
    assert torch.autograd.gradcheck(softmax.apply, (x,))
    assert torch.autograd.gradcheck(lambda t: split.apply(t, 1.5), (x,))
    assert torch.autograd.gradgradcheck(lambda t: split.apply(t, 1.5), (x,))


def test_an_unsaved_intermediate_is_freed(device):
    seen = []

    @compatfn.function(intermediates=1)
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(x):
            scratch = x * 10
            seen.append(weakref.ref(scratch))
            return x * 2, scratch

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass  # the intermediate is not kept

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    cuda = device.type == "cuda"
    x = _randn(1024, device=device, dtype=torch.float32)
    before = torch.cuda.memory_allocated(device) if cuda else 0
    y = Keep.apply(x)
    gc.collect()
    assert seen[0]() is None
    if cuda:  # only the output is left on the device: x * 10 went with the call
        assert torch.cuda.memory_allocated(device) - before == y.element_size() * 1024
    y.sum().backward()
    _close(x.grad, torch.full((1024,), 2.0, device=device))


def test_the_legacy_variant_agrees(device):
    softmax = make_softmax()
    x = _randn(4, 6, device=device)
    legacy = compatfn.as_legacy(softmax)
    assert compatfn.mode(legacy) == "legacy"
    assert torch.equal(legacy.apply(x, 1), softmax.apply(x, 1))


def test_a_decorated_subclass_inherits_k():
    base = make_split()

    @compatfn.function
    class Scaled(base):
        @staticmethod
        def forward(x, scale=4.0):
            return x * scale, x + 1, 1234, torch.ones_like(x)

    scaled, _ = Scaled.apply(torch.ones(2))
    assert torch.equal(scaled, torch.full((2,), 4.0))


@pytest.mark.parametrize("bad", [-1, 1.0, "2", True])
def test_a_wrong_k_fails_at_decoration(bad):
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x, x

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(TypeError, match=r"Fn: intermediates must be a non-negative int"):
        compatfn.function(Fn, intermediates=bad)


def test_a_legacy_form_class_takes_no_intermediates():
    class Old(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(TypeError, match="Old: intermediates= needs the setup_context style"):
        compatfn.function(Old, intermediates=1)


def test_redecoration_with_another_k_fails():
    split = make_split()
    assert compatfn.function(split, intermediates=2) is split
    with pytest.raises(TypeError, match="already decorated with intermediates=2"):
        compatfn.function(split, intermediates=1)


@pytest.mark.parametrize("options", PATHS)
@pytest.mark.parametrize("returned", ["tensor", "short-tuple"])
def test_a_forward_that_cannot_hold_k_fails_at_its_first_call(options, returned):
    @compatfn.function(intermediates=2, **options)
    class Short(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2 if returned == "tensor" else (x, x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(TypeError, match=r"Short\.forward returned .* intermediates=2"):
        Short.apply(torch.ones(2, requires_grad=True))


def test_check_function_accepts_it():
    x = _randn(3, 4)
    softmax = make_softmax()
    report = check_function(softmax, x, 1)
    expected = {"forward", "gradcheck", "gradgradcheck"}
    if compatfn.mode(softmax) == "native":
        expected.add("parity")  # the native path against the legacy one
    assert expected <= set(report.ran), str(report)


# --- composition ---------------------------------------------------------------------------------


AMP_DTYPE = {"cpu": torch.bfloat16, "cuda": torch.float16}


def test_amp_decorators(device):
    dev = device.type
    if dev == "cpu" and not compatfn.features()["cpu_autocast"]:  # pinned in test_features
        pytest.skip(f"torch {torch.__version__} has no CPU autocast (torch >= 1.10)")
    low = AMP_DTYPE[dev]

    @compatfn.function(intermediates=1)
    class Matmul(torch.autograd.Function):
        @staticmethod
        @compatfn.custom_fwd(device_type=dev, cast_inputs=torch.float32)
        def forward(a, b):
            return a @ b, a.dtype

        @staticmethod
        def setup_context(ctx, inputs, output):
            a, b = inputs
            _, dtype = output
            assert dtype is torch.float32  # forward saw the cast inputs
            ctx.save_for_backward(a, b)

        @staticmethod
        @compatfn.custom_bwd(device_type=dev)
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            return grad @ b.t(), a.t() @ grad

    a = _randn(3, 4, device=device, dtype=low, seed=1)
    b = _randn(4, 2, device=device, dtype=low, seed=2)
    autocast = torch.autocast(dev, dtype=low) if hasattr(torch, "autocast") else None
    with autocast or torch.cuda.amp.autocast():  # torch < 1.10: CUDA float16 only
        out = Matmul.apply(a, b)
    assert out.dtype is torch.float32
    out.sum().backward()
    ones = torch.ones(3, 2, dtype=torch.float32, device=device)
    assert a.grad.dtype == low and b.grad.dtype == low
    want_a, want_b = ones @ b.detach().float().t(), a.detach().float().t() @ ones
    assert torch.allclose(a.grad.float(), want_a, rtol=1e-2, atol=1e-2), (a.grad, want_a)
    assert torch.allclose(b.grad.float(), want_b, rtol=1e-2, atol=1e-2), (b.grad, want_b)


needs_func = pytest.mark.skipif(
    not core._HAS_TORCH_FUNC, reason=f"torch {torch.__version__} has no torch.func (torch >= 2.0)"
)


@needs_func
def test_torch_func_with_generate_vmap_rule():
    if compatfn.mode(make_softmax()) == "legacy":
        pytest.skip("the legacy path is refused under torch.func (tested in test_func)")
    core._prepare_torch_func()
    softmax = make_softmax(vmap_rule=True)
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    out = torch.func.vmap(softmax.apply)(x)
    _close(out, torch.softmax(x, -1))
    grad = torch.func.grad(lambda t: (softmax.apply(t) * torch.arange(5.0)).sum())(x[0, 0])
    expected = torch.func.grad(lambda t: (torch.softmax(t, -1) * torch.arange(5.0)).sum())(x[0, 0])
    _close(grad, expected)


def _double(x):
    return x * 2, x.shape[-1]


@needs_func
def test_torch_func_with_a_vmap_staticmethod_that_sees_every_output():
    """``Double.forward`` is the legacy-form adapter once decorated (see README): the vmap
    staticmethod calls the forward function by its own name."""
    core._prepare_torch_func()
    seen = []

    @compatfn.function(intermediates=1)
    class Double(torch.autograd.Function):
        forward = staticmethod(_double)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

        @staticmethod
        def vmap(info, in_dims, x):
            out = _double(x)
            seen.append(len(out))
            return out, (in_dims[0], None)

    if compatfn.mode(Double) == "legacy":
        pytest.skip("the legacy path is refused under torch.func (tested in test_func)")
    x = torch.randn(3, 4)
    _close(torch.func.vmap(Double.apply)(x), x * 2)
    assert seen == [2]


@compatfn.function(intermediates=1)
class NestedOutputs(torch.autograd.Function):
    """Its outputs as one tuple before the intermediate, as migrate writes ``return (y, *ys)``."""

    @staticmethod
    def forward(x):
        return (x * 2, x * 3), x.sum()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        return grad_a * 2 + grad_b * 3


def test_outputs_inside_a_tuple_reach_torch_as_that_tuple():
    x = torch.randn(3, requires_grad=True)
    a, b = NestedOutputs.apply(x)
    assert a.grad_fn is not None and b.grad_fn is a.grad_fn
    (a.sum() + b.sum()).backward()
    assert torch.equal(x.grad, torch.full((3,), 5.0))


@needs_func
def test_outputs_inside_a_tuple_are_refused_under_torch_func():
    # torch.func would differentiate nothing inside the tuple: zero gradients, silently.
    if compatfn.mode(NestedOutputs) == "legacy":
        pytest.skip("the legacy path is refused under torch.func (tested in test_func)")
    core._prepare_torch_func()
    with pytest.raises(TypeError, match=r"NestedOutputs\.forward returned its outputs inside a"):
        torch.func.grad(lambda t: sum(o.sum() for o in NestedOutputs.apply(t)))(torch.randn(3))


def _compiles():
    return compatfn.features()["compile"] != "unavailable"


@pytest.mark.skipif(not _compiles(), reason="torch.compile is unavailable here")
@pytest.mark.parametrize("options", PATHS)
@pytest.mark.parametrize("call", ["direct", "functional", "compiled-apply"])
@pytest.mark.usefixtures("fresh_dynamo")
def test_compile_fullgraph(options, call, device):
    softmax = make_softmax(**options)  # every call form compiles: the class has the legacy form
    if call == "compiled-apply":
        compiled = torch.compile(softmax.apply, backend="aot_eager", fullgraph=True)
    else:
        op = softmax.apply if call == "direct" else compatfn.functional(softmax)
        compiled = torch.compile(lambda t: op(t) * 2, backend="aot_eager", fullgraph=True)
    x = _randn(3, 5, device=device)
    y = compiled(x)
    expected = torch.softmax(x, -1) * (1 if call == "compiled-apply" else 2)
    _close(y, expected)
    w = torch.arange(5.0, dtype=torch.float64, device=device)
    (grad,) = torch.autograd.grad((y * w).sum(), x)
    (want,) = torch.autograd.grad((expected * w).sum(), x)
    _close(grad, want)


@pytest.mark.skipif(
    not hasattr(torch, "export") or not hasattr(torch.export, "export"),
    reason=f"torch {torch.__version__} has no torch.export (torch >= 2.1)",
)
@pytest.mark.parametrize("options", PATHS)
def test_export(options):
    class HandWritten(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim=-1):
            return x.softmax(dim)

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    class Baseline(torch.nn.Module):
        def forward(self, x):
            return HandWritten.apply(x) * 2

    try:
        torch.export.export(Baseline(), (torch.randn(3, 5),))
    except Exception as error:  # torch 2.1: a default argument breaks dynamo's guards
        pytest.skip(f"torch {torch.__version__} does not export a hand-written Function: {error}")
    softmax = make_softmax(**options)

    class Model(torch.nn.Module):
        def forward(self, x):
            return softmax.apply(x) * 2

    x = torch.randn(3, 5)
    program = torch.export.export(Model(), (x,))
    _close(program.module()(x), torch.softmax(x, -1) * 2)
