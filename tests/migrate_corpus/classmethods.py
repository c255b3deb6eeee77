"""Classmethod Functions: ``cls`` helpers, ``super().forward(ctx, ...)`` chains, a loss family.

Models the patterns of entmax/activations.py (SparsemaxFunction: a classmethod forward that never
uses cls, an intermediate support size), entmax/root_finding.py (EntmaxBisectFunction and its
SparsemaxBisectFunction subclass: cls helpers overridden in a subclass that chains
``super().forward(ctx, ...)``, an argument expanded to the input's shape) and entmax/losses.py
(_GenericLossFunction: a backward that reads a class attribute through cls, subclasses that only
chain). Written for compatfn's tests.
"""

import torch
from torch.autograd import Function


class ShiftedSoftplus(Function):
    @classmethod
    def forward(cls, ctx, x, beta=1.0):
        ctx.beta = beta
        shifted = x - x.max(dim=-1, keepdim=True)[0]
        slope = torch.sigmoid(beta * shifted)  # the derivative, kept for backward
        ctx.save_for_backward(slope)
        return torch.nn.functional.softplus(shifted, beta=beta)

    @classmethod
    def backward(cls, ctx, grad):
        (slope,) = ctx.saved_tensors
        direct = grad * slope
        return direct - (direct.sum(-1, keepdim=True)) * (slope == slope.max(-1, keepdim=True)[0]), None


class PowerNormalize(Function):
    @classmethod
    def _power(cls, x, p):
        return x.abs() ** p

    @classmethod
    def forward(cls, ctx, x, p=3.0, dim=-1):
        if not isinstance(p, torch.Tensor):
            p = torch.tensor(p, dtype=x.dtype, device=x.device)
        shape = list(x.shape)
        shape[dim] = 1
        p = p.expand(*shape)  # an expanded parameter: backward needs it
        powered = cls._power(x, p)
        total = powered.sum(dim=dim, keepdim=True)
        ctx.dim = dim
        ctx.p = p
        ctx.save_for_backward(x, total)
        return powered / total

    @classmethod
    def backward(cls, ctx, grad):
        x, total = ctx.saved_tensors
        p = ctx.p
        d_pow = p * x.abs() ** (p - 1) * torch.sign(x)
        y = cls._power(x, p) / total
        inner = (grad * y).sum(dim=ctx.dim, keepdim=True)
        return d_pow * (grad - inner) / total, None, None


class SquareNormalize(PowerNormalize):
    @classmethod
    def _power(cls, x, p):
        return x * x

    @classmethod
    def forward(cls, ctx, x, dim=-1):
        return super().forward(ctx, x, p=2.0, dim=dim)

    @classmethod
    def backward(cls, ctx, grad):
        x, total = ctx.saved_tensors
        y = x * x / total
        inner = (grad * y).sum(dim=ctx.dim, keepdim=True)
        return 2 * x * (grad - inner) / total, None


class _MarginLoss(Function):
    extra_args = 0

    @classmethod
    def forward(cls, ctx, scores, target, margin, options):
        probabilities = cls.project(scores, **options)
        loss = cls.potential(scores, **options) - (scores * target).sum(dim=1) + margin
        residual = probabilities - target  # only forward can compute it cheaply
        ctx.save_for_backward(residual)
        return loss

    @classmethod
    def backward(cls, ctx, grad):
        (residual,) = ctx.saved_tensors
        return (grad.unsqueeze(1) * residual,) + (None,) * (1 + cls.extra_args)


class SoftmaxMarginLoss(_MarginLoss):
    extra_args = 1

    @classmethod
    def project(cls, scores, temperature):
        return torch.softmax(scores / temperature, dim=1)

    @classmethod
    def potential(cls, scores, temperature):
        return temperature * torch.logsumexp(scores / temperature, dim=1)

    @classmethod
    def forward(cls, ctx, scores, target, temperature=1.0):
        return super().forward(ctx, scores, target, 1.0, dict(temperature=temperature))


class SigmoidMarginLoss(_MarginLoss):
    extra_args = 2

    @classmethod
    def project(cls, scores, shift):
        return torch.sigmoid(scores - shift)

    @classmethod
    def potential(cls, scores, shift):
        return torch.nn.functional.softplus(scores - shift).sum(dim=1)

    @classmethod
    def forward(cls, ctx, scores, target, margin=0.5, shift=0.0):
        return super().forward(ctx, scores, target, margin, dict(shift=shift))


def _scores():
    return torch.randn(4, 5, dtype=torch.float64, requires_grad=True)


def _target():
    return torch.eye(5, dtype=torch.float64)[torch.tensor([0, 2, 4, 1])]


#: class name -> (inputs, extra positional arguments); inputs are float64 and require grad.
CASES = {
    "ShiftedSoftplus": lambda: ((torch.randn(3, 4, dtype=torch.float64, requires_grad=True),), (0.7,)),
    "PowerNormalize": lambda: ((torch.rand(3, 4, dtype=torch.float64).add(0.5).requires_grad_(),), (3.0, 1)),
    "SquareNormalize": lambda: ((torch.rand(3, 4, dtype=torch.float64).add(0.5).requires_grad_(),), ()),
    "SoftmaxMarginLoss": lambda: ((_scores(),), (_target(), 0.5)),
    "SigmoidMarginLoss": lambda: ((_scores(),), (_target(), 0.25, 0.1)),
}
REFUSED = {}
#: Migrated classes the tests do not call directly.
NOT_CALLED = {"_MarginLoss": "a base class: its subclasses are called"}
