"""Functions migrate must refuse: it cannot prove a rewrite equivalent.

Models the patterns of bitsandbytes' bitsandbytes/autograd/_functions.py (MatMul8bitLt: an
early return for empty inputs with its own ctx handling; state objects handed to helpers) and
sparsemax/sparsemax.py (``ctx, x = helper(ctx, x)`` under an ``if``, the helper in another
file); the ctx attributes torch's CheckpointFunction builds in a loop now migrate (see
intermediates.py). Written for compatfn's tests; each class still works as written.
"""

import torch


def _remember(ctx, x):
    ctx.save_for_backward(x)


def _flatten(ctx, x):
    ctx.original_size = x.size()
    return ctx, x.reshape(x.size(0), -1)


class CtxToHelper(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        _remember(ctx, x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class CtxThroughHelperIf(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        ctx.needs_reshaping = x.dim() > 2
        ctx.dim = dim
        if ctx.needs_reshaping:
            ctx, x = _flatten(ctx, x)
        y = x.relu()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (y > 0), None


class EmptyEarlyReturn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if x.numel() == 0:
            ctx.empty = True
            return x.clone()
        ctx.empty = False
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        if ctx.empty:
            return grad.clone()
        (x,) = ctx.saved_tensors
        return 2 * x * grad


CASES = {}
#: class name -> the reason migrate gives (a substring of it).
REFUSED = {
    "CtxToHelper": "forward passes ctx to _remember()",
    "CtxThroughHelperIf": "forward passes ctx to _flatten()",
    "EmptyEarlyReturn": "forward returns from more than one place",
}
