"""A smooth clamp to [-limit, limit], with its own backward, on every torch from 1.8."""

import torch

import compatfn


@compatfn.function
class SoftClip(torch.autograd.Function):
    @staticmethod
    def forward(x, limit=1.0):
        return limit * torch.tanh(x / limit)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, limit = inputs
        ctx.save_for_backward(output)
        ctx.limit = limit

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - (y / ctx.limit) ** 2), None


def soft_clip(x, limit=1.0):
    return SoftClip.apply(x, limit)
