"""Values forward computes and ctx keeps: softmax statistics, a seed, an RNG state, an expanded
parameter.

Models the patterns of flash-attention's flash_attn/flash_attn_interface.py (FlashAttnFunc: the
log-sum-exp of the softmax and the RNG state saved in forward, a softmax scale read from the
query's shape), torch/utils/checkpoint.py (CheckpointFunction: ``torch.get_rng_state()`` kept on
ctx before forward draws random numbers) and fla's fused dropout kernels (a seed drawn in forward).
Written for compatfn's tests.
"""

import compatfn
import torch
from torch.autograd import Function


@compatfn.function(intermediates=2)
class AttentionWithStats(Function):
    @staticmethod
    def forward(q, k, v, scale=None):
        if scale is None:
            scale = q.shape[-1] ** -0.5
        scores = q @ k.transpose(-2, -1) * scale
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # softmax statistics
        out = torch.exp(scores - lse) @ v
        return out, scale, lse

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, _ = inputs
        out, scale, lse = output
        ctx.scale = scale
        ctx.save_for_backward(q, k, v, out, lse)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        probs = torch.exp(q @ k.transpose(-2, -1) * ctx.scale - lse)
        grad_v = probs.transpose(-2, -1) @ grad_out
        grad_probs = grad_out @ v.transpose(-2, -1)
        grad_scores = probs * (grad_probs - (grad_out * out).sum(-1, keepdim=True)) * ctx.scale
        return grad_scores @ k, grad_scores.transpose(-2, -1) @ q, grad_v, None


@compatfn.function(intermediates=1)
class SeededDropout(Function):
    @staticmethod
    def forward(x, p):
        seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        generator = torch.Generator().manual_seed(seed)
        keep = torch.rand(x.shape, generator=generator, dtype=x.dtype) >= p
        return x * keep / (1 - p), seed

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, p = inputs
        _, seed = output
        ctx.seed = seed  # a Python int: backward regenerates the mask
        ctx.p = p

    @staticmethod
    def backward(ctx, grad):
        generator = torch.Generator().manual_seed(ctx.seed)
        keep = torch.rand(grad.shape, generator=generator, dtype=grad.dtype) >= ctx.p
        return grad * keep / (1 - ctx.p), None


@compatfn.function(intermediates=1)
class NoisyIdentity(Function):
    @staticmethod
    def forward(x, sigma=0.1):
        rng_state = torch.get_rng_state()  # before forward draws: backward replays it
        noise = torch.randn_like(x) * sigma
        return x + noise, rng_state

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, sigma = inputs
        _, rng_state = output
        ctx.rng_state = rng_state  # before forward draws: backward replays it
        ctx.sigma = sigma

    @staticmethod
    def backward(ctx, grad):
        current = torch.get_rng_state()
        torch.set_rng_state(ctx.rng_state)
        replay = torch.randn_like(grad)
        torch.set_rng_state(current)
        return grad + 0 * replay, None


@compatfn.function(intermediates=1)
class ExpandedBias(Function):
    @staticmethod
    def forward(x, bias):
        full = bias.expand_as(x)  # an expanded view of a parameter
        return x * torch.tanh(full), full

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, bias = inputs
        _, full = output
        ctx.save_for_backward(full)
        ctx.bias_shape = bias.shape

    @staticmethod
    def backward(ctx, grad):
        (full,) = ctx.saved_tensors
        t = torch.tanh(full)
        grad_bias = (grad * 0).sum_to_size(ctx.bias_shape)
        return grad * t, grad_bias


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "AttentionWithStats": lambda: ((_randn(2, 3, 4), _randn(2, 5, 4), _randn(2, 5, 4)), ()),
    "SeededDropout": lambda: ((_randn(4, 6),), (0.3,)),
    "NoisyIdentity": lambda: ((_randn(5),), (0.2,)),
    "ExpandedBias": lambda: ((_randn(3, 4),), (torch.randn(4, dtype=torch.float64),)),
}
REFUSED = {}
