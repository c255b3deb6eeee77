"""ctx attributes from argument metadata, ``once_differentiable``, ``mark_non_differentiable``,
``set_materialize_grads`` and non-tensor outputs.

Models the patterns of mmcv's mmcv/ops/roi_align.py (RoIAlignFunction: the input's shape and
arguments kept as ctx attributes, a ``@once_differentiable`` backward), pytorch3d's
pytorch3d/ops/knn.py (_knn_points: integer indices returned and marked non-differentiable) and
torch_scatter-style functions that return a count next to a tensor. Written for compatfn's tests.
"""

import compatfn
import torch
from torch.autograd import Function as F
from torch.autograd.function import once_differentiable


@compatfn.function
class CropPad(F):
    @staticmethod
    def forward(x, size):
        out = x.new_zeros(x.shape[:-1] + (size,))
        keep = min(size, x.shape[-1])
        out[..., :keep] = x[..., :keep]
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, size = inputs
        ctx.input_shape = x.shape
        ctx.size = size
        ctx.dtype = x.dtype

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        grad_x = grad.new_zeros(ctx.input_shape, dtype=ctx.dtype)
        keep = min(ctx.size, ctx.input_shape[-1])
        grad_x[..., :keep] = grad[..., :keep]
        return grad_x, None


@compatfn.function
class TopKValues(F):
    @staticmethod
    def forward(x, k, dim=-1):
        values, indices = x.topk(k, dim=dim)
        return values, indices

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _, dim = inputs
        _, indices = output
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.dim = dim
        ctx.shape = x.shape

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad = grad_values.new_zeros(ctx.shape)
        return grad.scatter(ctx.dim, indices, grad_values), None, None


@compatfn.function
class PositivePart(F):
    @staticmethod
    def forward(x):
        y = x.clamp(min=0)
        count = int((x > 0).sum())
        return y, count

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad, grad_count):
        (x,) = ctx.saved_tensors
        return grad * (x > 0)


@compatfn.function(intermediates=1)
class SplitHalves(F):
    @staticmethod
    def forward(x):
        half = x.shape[-1] // 2
        return x[..., :half] * 2, x[..., half:] * 3, half

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        _, _, half = output
        ctx.set_materialize_grads(False)
        ctx.half = half
        ctx.rest = x.shape[-1] - half

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        if grad_a is None and grad_b is None:
            return None
        if grad_a is None:  # not materialized: this output got no gradient
            grad_a = grad_b.new_zeros(grad_b.shape[:-1] + (ctx.half,))
        if grad_b is None:
            grad_b = grad_a.new_zeros(grad_a.shape[:-1] + (ctx.rest,))
        return torch.cat([grad_a * 2, grad_b * 3], dim=-1)


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "CropPad": lambda: ((_randn(3, 5),), (7,)),
    "TopKValues": lambda: ((_randn(3, 6),), (2,)),
    "PositivePart": lambda: ((_randn(7),), ()),
    "SplitHalves": lambda: ((_randn(2, 6),), ()),
}
REFUSED = {}
#: Classes whose original cannot run on torch 1.8 (non-tensor outputs), with the reason.
ORIGINAL_NEEDS_1_9 = {"PositivePart": "a legacy Function cannot return a Python int on torch 1.8"}
