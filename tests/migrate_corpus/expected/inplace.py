"""In-place Functions with ``mark_dirty``.

Models the pattern of PyTorch's own in-place Functions (torch/autograd/_functions in the 1.x
releases, InplaceFunction users such as apex's fused in-place activations): the input is changed
in place, marked dirty and returned; a mask computed before the change is kept for backward.
Written for compatfn's tests.
"""

import compatfn
import torch.autograd as ag


@compatfn.function
class InplaceScale(ag.Function):
    @staticmethod
    def forward(x, factor):
        x.mul_(factor)
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, factor = inputs
        ctx.mark_dirty(x)
        ctx.factor = factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


@compatfn.function(intermediates=1)
class InplaceLeakyClamp(ag.Function):
    @staticmethod
    def forward(x, slope=0.1):
        negative = x < 0  # computed before x changes: an intermediate
        x[negative] = x[negative] * slope
        return x, negative

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, slope = inputs
        _, negative = output
        ctx.mark_dirty(x)
        ctx.save_for_backward(negative)
        ctx.slope = slope

    @staticmethod
    def backward(ctx, grad):
        (negative,) = ctx.saved_tensors
        return grad * (1 - negative.to(grad.dtype) * (1 - ctx.slope)), None


def _leaf_copy():
    import torch

    return torch.randn(6, dtype=torch.float64, requires_grad=True)


#: In-place classes get a non-leaf input (``x * 1``): see tests/test_migrate.py.
CASES = {
    "InplaceScale": lambda: ((_leaf_copy(),), (2.5,)),
    "InplaceLeakyClamp": lambda: ((_leaf_copy(),), (0.2,)),
}
REFUSED = {}
INPLACE = {"InplaceScale", "InplaceLeakyClamp"}
