"""ctx attributes read back in forward, in the values of other ctx statements too.

Models linear_operator/functions/_sqrt_inv_matmul.py (``ctx.representation_tree = tree`` then
``ctx.linear_op = ctx.representation_tree(*matrix_args)``, read back again in forward) and
chains of such reads. Written for compatfn's tests.
"""

import compatfn
import torch
from torch.autograd import Function


def _scale_by(factor):
    return lambda *tensors: sum(t.sum() for t in tensors) * factor


@compatfn.function(intermediates=1)
class Tree(Function):
    @staticmethod
    def forward(fn, x, *args):
        scale = fn(*args)
        return x * scale, scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        fn, x = inputs[:2]
        args = inputs[2:]
        _, scale = output
        ctx.fn = fn
        ctx.scale = scale
        ctx.save_for_backward(x, *args)

    @staticmethod
    def backward(ctx, grad):
        x, *args = ctx.saved_tensors
        args = [a.detach().requires_grad_() for a in args]
        with torch.enable_grad():
            grads = torch.autograd.grad(ctx.fn(*args), args, (grad * x).sum())
        return (None, grad * ctx.scale, *grads)


@compatfn.function(intermediates=1)
class TreeAfterImport(Function):
    @staticmethod
    def forward(fn, x, *args):
        """Imports first, then sets ctx (linear_operator's RootDecomposition): the blank line
        after the import stays when the ctx statements leave forward (black requires it)."""
        import math

        scale = fn(*args) * math.pi
        return x * scale, scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        fn, x = inputs[:2]
        args = inputs[2:]
        _, scale = output
        ctx.fn = fn
        ctx.scale = scale
        ctx.save_for_backward(x, *args)

    @staticmethod
    def backward(ctx, grad):
        x, *args = ctx.saved_tensors
        args = [a.detach().requires_grad_() for a in args]
        with torch.enable_grad():
            grads = torch.autograd.grad(ctx.fn(*args) * 3.141592653589793, args, (grad * x).sum())
        return (None, grad * ctx.scale, *grads)


@compatfn.function(intermediates=2)
class ChainedReads(Function):
    @staticmethod
    def forward(x, power):
        shifted = x + power
        squared = shifted ** power
        return squared * 3, shifted, squared

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, power = inputs
        _, shifted, squared = output
        ctx.power = power
        ctx.shifted = shifted
        ctx.squared = squared
        ctx.save_for_backward(shifted)

    @staticmethod
    def backward(ctx, grad):
        (shifted,) = ctx.saved_tensors
        return grad * 3 * ctx.power * shifted ** (ctx.power - 1), None


@compatfn.function(intermediates=2)
class ReadBackAfterReassign(Function):
    @staticmethod
    def forward(x, scale):
        scale_ = scale
        scale = scale * 2
        doubled = x * scale_
        return doubled + scale, scale_, doubled

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _ = inputs
        _, scale_, doubled = output
        ctx.scale = scale_
        ctx.doubled = doubled
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


@compatfn.function(intermediates=1)
class ReadBackInSave(Function):
    @staticmethod
    def forward(x):
        y = x.exp()
        out = y * 2
        return out, y

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, y = output
        ctx.y = y
        ctx.save_for_backward(y)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * 2 * y


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "Tree": lambda: ((_f64(3), _f64(2)), ()),
    "TreeAfterImport": lambda: ((_f64(3), _f64(2)), ()),
    "ChainedReads": lambda: ((_f64(4),), (2,)),
    "ReadBackAfterReassign": lambda: ((_f64(3),), (1.5,)),
    "ReadBackInSave": lambda: ((_f64(3),), ()),
}
#: Functions whose first arguments are not tensors (they come after the tensors in CASES).
LEADING = {"Tree": (_scale_by(0.5),), "TreeAfterImport": (_scale_by(0.5),)}
REFUSED = {}
