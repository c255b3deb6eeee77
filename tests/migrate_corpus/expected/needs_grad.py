"""``ctx.needs_input_grad`` branches and saves that depend on which inputs need a gradient.

Models the patterns of PyTorch's "Extending torch.autograd" LinearFunction example (optional
bias, backward branching on ``ctx.needs_input_grad``) and of DeepSpeed's
deepspeed/runtime/zero/linear.py (saving only what the gradients that are needed use).
Written for compatfn's tests.
"""

import compatfn
import torch
from torch import autograd


@compatfn.function
class SelectiveMatmul(autograd.Function):
    @staticmethod
    def forward(x, w):
        return x @ w

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w = inputs
        if ctx.needs_input_grad[0] and ctx.needs_input_grad[1]:
            ctx.save_for_backward(x, w)
        elif ctx.needs_input_grad[1]:
            ctx.save_for_backward(x, None)
        else:
            ctx.save_for_backward(None, w)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad_x = grad @ w.t() if ctx.needs_input_grad[0] else None
        grad_w = x.t() @ grad if ctx.needs_input_grad[1] else None
        return grad_x, grad_w


@compatfn.function
class OptionalBias(autograd.Function):
    @staticmethod
    def forward(x, bias=None):
        return x * 2 if bias is None else x * 2 + bias

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, bias = inputs
        ctx.has_bias = bias is not None
        ctx.requires = x.requires_grad

    @staticmethod
    def backward(ctx, grad):
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[1] else None
        return grad * 2, grad_bias


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "SelectiveMatmul": lambda: ((_randn(3, 4), _randn(4, 2)), ()),
    "OptionalBias": lambda: ((_randn(3, 4), _randn(4)), ()),
}
REFUSED = {}
