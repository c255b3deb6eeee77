"""ctx attributes read back in forward, in the values of other ctx statements too.

Models linear_operator/functions/_sqrt_inv_matmul.py (``ctx.representation_tree = tree`` then
``ctx.linear_op = ctx.representation_tree(*matrix_args)``, read back again in forward) and
chains of such reads. Written for compatfn's tests.
"""

import torch
from torch.autograd import Function


def _scale_by(factor):
    return lambda *tensors: sum(t.sum() for t in tensors) * factor


class Tree(Function):
    @staticmethod
    def forward(ctx, fn, x, *args):
        ctx.fn = fn
        ctx.scale = ctx.fn(*args)
        ctx.save_for_backward(x, *args)
        return x * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        x, *args = ctx.saved_tensors
        args = [a.detach().requires_grad_() for a in args]
        with torch.enable_grad():
            grads = torch.autograd.grad(ctx.fn(*args), args, (grad * x).sum())
        return (None, grad * ctx.scale, *grads)


class TreeAfterImport(Function):
    @staticmethod
    def forward(ctx, fn, x, *args):
        """Imports first, then sets ctx (linear_operator's RootDecomposition): the blank line
        after the import stays when the ctx statements leave forward (black requires it)."""
        import math

        ctx.fn = fn
        ctx.scale = ctx.fn(*args) * math.pi
        ctx.save_for_backward(x, *args)
        return x * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        x, *args = ctx.saved_tensors
        args = [a.detach().requires_grad_() for a in args]
        with torch.enable_grad():
            grads = torch.autograd.grad(ctx.fn(*args) * 3.141592653589793, args, (grad * x).sum())
        return (None, grad * ctx.scale, *grads)


class ChainedReads(Function):
    @staticmethod
    def forward(ctx, x, power):
        ctx.power = power
        ctx.shifted = x + ctx.power
        ctx.squared = ctx.shifted ** ctx.power
        ctx.save_for_backward(ctx.shifted)
        return ctx.squared * 3

    @staticmethod
    def backward(ctx, grad):
        (shifted,) = ctx.saved_tensors
        return grad * 3 * ctx.power * shifted ** (ctx.power - 1), None


class ReadBackAfterReassign(Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        scale = scale * 2
        ctx.doubled = x * ctx.scale
        ctx.save_for_backward(x)
        return ctx.doubled + scale

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class ReadBackInSave(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.y = x.exp()
        ctx.save_for_backward(ctx.y)
        out = ctx.y * 2
        return out

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
