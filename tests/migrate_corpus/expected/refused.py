"""Functions migrate must refuse: it cannot prove a rewrite equivalent.

Models the patterns of bitsandbytes' bitsandbytes/autograd/_functions.py (MatMul8bitLt: an
early return for empty inputs with its own ctx handling; state objects handed to helpers; the
ctx attributes CheckpointFunction builds in a loop now migrate, see intermediates.py),
and of Functions that read ctx.needs_input_grad in forward or save under a data-dependent
condition. Written for compatfn's tests; each class still works as written.
"""

import torch


def _remember(ctx, x):
    ctx.save_for_backward(x)


class ReadsNeedsInputGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        scale = 2.0 if ctx.needs_input_grad[0] else 1.0
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0


class CtxToHelper(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        _remember(ctx, x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class DataConditionalSave(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        if y.sum() > 10:
            ctx.save_for_backward(y)
        else:
            ctx.save_for_backward(x.exp())
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


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
    "ReadsNeedsInputGrad": "forward reads ctx.needs_input_grad back, which forward does not set",
    "CtxToHelper": "forward passes ctx to _remember()",
    "DataConditionalSave": "ctx under a condition on y, a value forward computes",
    "EmptyEarlyReturn": "forward returns from more than one place",
}
