"""ctx calls inside ``with`` blocks, as real libraries write them.

Models torchdiffeq/_impl/adjoint.py (under ``with torch.no_grad():`` forward solves, then saves
in an ``if`` on an input that only unpacks the result), Functions that recompute under ``torch.enable_grad()`` or
``torch.set_grad_enabled(...)``, kernels that pin the device of their input with
``torch.cuda.device_of`` and matmuls that switch autocast off; and the blocks that stay refused:
``torch.random.fork_rng()`` (or any context manager migrate does not know), a computed value
passed to a ctx call inside the block, a saved name assigned again in the block. Written for
compatfn's tests.
"""

import compatfn
import torch


@compatfn.function(intermediates=1)
class NoGradScale(torch.autograd.Function):
    @staticmethod
    def forward(x, scale):
        with torch.no_grad():
            y = x * scale
            half_scale = scale / 2
        return y, half_scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _ = inputs
        _, half_scale = output
        ctx.save_for_backward(x)
        ctx.half_scale = half_scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.half_scale * 2 + 0 * x, None


@compatfn.function(intermediates=3)
class EnableGradRecompute(torch.autograd.Function):
    @staticmethod
    def forward(x):
        with torch.enable_grad():
            inner = x.detach().requires_grad_()
            y = torch.tanh(inner)
            grad_was_on = torch.is_grad_enabled()
        return y.detach(), inner, y, grad_was_on

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, inner, y, grad_was_on = output
        ctx.save_for_backward(inner, y)
        ctx.grad_was_on = grad_was_on

    @staticmethod
    def backward(ctx, grad):
        inner, y = ctx.saved_tensors
        assert ctx.grad_was_on
        with torch.enable_grad():
            (dx,) = torch.autograd.grad(y, inner, grad, retain_graph=True)
        return dx


@compatfn.function
class GradModeOff(torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        with torch.set_grad_enabled(False):
            prod = a * b
        return prod

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b = inputs
        ctx.save_for_backward(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b, grad * a


@compatfn.function
class DeviceGuard(torch.autograd.Function):
    @staticmethod
    def forward(x):
        with torch.cuda.device_of(x):
            out = x.exp()
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        out = output
        ctx.save_for_backward(out)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out


@compatfn.function(intermediates=1)
class AutocastOff(torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        with torch.cuda.amp.autocast(enabled=False):
            out = a @ b
            out_dtype = out.dtype
        return out, out_dtype

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b = inputs
        _, out_dtype = output
        ctx.save_for_backward(a, b)
        ctx.out_dtype = out_dtype

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad = grad.to(ctx.out_dtype)
        return grad @ b.transpose(-1, -2), a.transpose(-1, -2) @ grad


@compatfn.function(intermediates=2)
class NoGradTailBranch(torch.autograd.Function):
    @staticmethod
    def forward(x, flag, *weights):
        with torch.no_grad():
            result = (x.exp(), x.sin()) if flag is not None else x.exp() * 2

        extra = None
        if flag is None:
            y = result
        else:
            y, extra = result
        return result, y, extra

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, flag = inputs[:2]
        weights = inputs[2:]
        _, y, extra = output
        if flag is None:
            ctx.save_for_backward(x, y, *weights)
        else:
            ctx.save_for_backward(x, y, extra, *weights)

    @staticmethod
    def backward(ctx, *grads):
        if len(grads) == 1:
            x, y = ctx.saved_tensors[:2]
            return grads[0] * y, None, None
        x, y, extra = ctx.saved_tensors[:3]
        return grads[0] * y + grads[1] * x.cos(), None, None


class ForkRngSave(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        with torch.random.fork_rng():
            noise = torch.rand_like(x)
            ctx.save_for_backward(noise)
        return x + noise

    @staticmethod
    def backward(ctx, grad):
        return grad


class ComputedInWith(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        with torch.no_grad():
            ctx.save_for_backward(x.exp())
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class ReassignedInWith(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        with torch.no_grad():
            y = x * 2
            ctx.save_for_backward(y)
            y = y + 1
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "NoGradScale": lambda: ((_f64(4),), (3.0,)),
    "EnableGradRecompute": lambda: ((_f64(5),), ()),
    "GradModeOff": lambda: ((_f64(3), _f64(3)), ()),
    "DeviceGuard": lambda: ((_f64(2, 3),), ()),
    "AutocastOff": lambda: ((_f64(2, 3), _f64(3, 4)), ()),
    # forward returns the name of a tuple of two tensors (one output per element)
    "NoGradTailBranch": lambda: ((_f64(3),), (True, torch.ones(1))),
}
REFUSED = {
    "ForkRngSave": "forward uses ctx inside a with block other than grad mode, a device guard",
    "ComputedInWith": "forward passes a computed value to a ctx call inside a with block",
    "ReassignedInWith": "forward saves y inside a with block and assigns it again",
}
