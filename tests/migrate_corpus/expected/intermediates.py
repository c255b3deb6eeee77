"""Values forward computes and ctx keeps: softmax statistics, a seed, an RNG state, an expanded
parameter.

Models the patterns of flash-attention's flash_attn/flash_attn_interface.py (FlashAttnFunc: the
log-sum-exp of the softmax and the RNG state saved in forward, a softmax scale read from the
query's shape), torch/utils/checkpoint.py (CheckpointFunction: ``torch.get_rng_state()`` kept on
ctx before forward draws random numbers, under ``if preserve_rng_state:`` with the CUDA states
under ``if torch.cuda._initialized:``, as memcnn's InvertibleCheckpointFunction copies it),
revlib's reversible Function (the CUDA states under an input flag, tested with hasattr in
backward), torchsde's adjoint (``return (ys, *extra_solver_state)``, no extra state for most
solvers), memcnn's ``outputs = tuple(...)`` returned, torch's CheckpointFunction again (ctx
attributes built in a loop over the arguments, a generator's tuple returned), and fla's fused dropout kernels (a seed
drawn in forward). Written for compatfn's tests.
"""

import compatfn
import torch
from torch.autograd import Function
from torch.utils.checkpoint import get_device_states, set_device_states


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


@compatfn.function(intermediates=4)
class CheckpointedDropout(Function):
    @staticmethod
    def forward(x, p, preserve_rng_state):
        fwd_cpu_state = None
        fwd_gpu_devices = None
        fwd_gpu_states = None
        cuda_initialized = False
        if preserve_rng_state:
            fwd_cpu_state = torch.get_rng_state()  # before the dropout below draws
            if torch.cuda._initialized:
                cuda_initialized = True
                fwd_gpu_devices, fwd_gpu_states = get_device_states(x)
        return (
            torch.nn.functional.dropout(x * 2, p),
            fwd_cpu_state,
            cuda_initialized,
            fwd_gpu_devices,
            fwd_gpu_states,
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, p, preserve_rng_state = inputs
        _, fwd_cpu_state, cuda_initialized, fwd_gpu_devices, fwd_gpu_states = output
        ctx.p = p
        ctx.preserve_rng_state = preserve_rng_state
        if preserve_rng_state:
            ctx.fwd_cpu_state = fwd_cpu_state
            # CUDA's states only if CUDA is already initialized (never initialized by accident)
            ctx.had_cuda_in_fwd = False
            if cuda_initialized:
                ctx.had_cuda_in_fwd = True
                ctx.fwd_gpu_devices, ctx.fwd_gpu_states = (
                    fwd_gpu_devices,
                    fwd_gpu_states,
                )
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        devices = ctx.fwd_gpu_devices if ctx.preserve_rng_state and ctx.had_cuda_in_fwd else []
        with torch.random.fork_rng(devices=devices, enabled=ctx.preserve_rng_state):
            if ctx.preserve_rng_state:  # replay forward's mask
                torch.set_rng_state(ctx.fwd_cpu_state)
                if ctx.had_cuda_in_fwd:
                    set_device_states(ctx.fwd_gpu_devices, ctx.fwd_gpu_states)
            scaled_mask = torch.nn.functional.dropout(torch.ones_like(x), ctx.p)
        return grad * 2 * scaled_mask, None, None


@compatfn.function(intermediates=3)
class ReversibleNoise(Function):
    @staticmethod
    def forward(x, sigma, cuda):
        forward_rng_state = torch.get_rng_state()
        cuda_devices = None
        cuda_states = None
        if cuda:
            cuda_devices, cuda_states = get_device_states(x)
        return (
            x * (1 + sigma * torch.randn_like(x)),
            forward_rng_state,
            cuda_devices,
            cuda_states,
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, sigma, cuda = inputs
        _, forward_rng_state, cuda_devices, cuda_states = output
        ctx.sigma = sigma
        ctx.forward_rng_state = forward_rng_state
        if cuda:
            ctx.cuda_devices, ctx.cuda_states = cuda_devices, cuda_states

    @staticmethod
    def backward(ctx, grad):
        current = torch.get_rng_state()
        torch.set_rng_state(ctx.forward_rng_state)
        if hasattr(ctx, "cuda_states"):  # set only when forward was asked to keep them
            set_device_states(ctx.cuda_devices, ctx.cuda_states)
        noise = torch.randn_like(grad)
        torch.set_rng_state(current)
        return grad * (1 + ctx.sigma * noise), None, None


@compatfn.function(intermediates=3)
class PermutedRowsNoise(Function):
    @staticmethod
    def forward(x, keep_state):
        state = None
        order = None
        condition = False
        if keep_state:
            state = torch.get_rng_state()
            if x.dim() > 1:  # a condition on a computed value: forward evaluates it
                condition = True
                order = torch.randperm(x.shape[0])
        noise = torch.randn_like(x)  # drawn after the permutation
        return x * (1 + noise), state, condition, order

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, keep_state = inputs
        _, state, condition, order = output
        if keep_state:
            ctx.state = state
            if condition:  # a condition on a computed value: forward evaluates it
                ctx.order = order
            else:
                ctx.order = None

    @staticmethod
    def backward(ctx, grad):
        current = torch.get_rng_state()
        torch.set_rng_state(ctx.state)
        if ctx.order is not None:
            torch.randperm(grad.shape[0])  # the draw forward made before its noise
        noise = torch.randn_like(grad)
        torch.set_rng_state(current)
        return grad * (1 + noise), None


@compatfn.function(intermediates=1)
class SolverWithExtraState(Function):
    @staticmethod
    def forward(y0, extra_count):
        ys = y0.exp()
        extra = tuple(ys * (i + 2) for i in range(extra_count))
        return (ys, *extra), ys  # a tuple of one tensor when there is no extra state

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, ys = output
        ctx.save_for_backward(ys)

    @staticmethod
    def backward(ctx, grad_ys, *grad_extra):
        (ys,) = ctx.saved_tensors
        scale = grad_ys + sum((g * (i + 2) for i, g in enumerate(grad_extra)), torch.zeros(()))
        return ys * scale, None


@compatfn.function(intermediates=1)
class TupleOfParts(Function):
    @staticmethod
    def forward(x, parts):
        x2 = x * 2
        outputs = tuple([x2.sin() * (i + 1) for i in range(parts)])
        return outputs, x2

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, x2 = output
        ctx.save_for_backward(x2)

    @staticmethod
    def backward(ctx, *grads):
        (x2,) = ctx.saved_tensors
        return 2 * x2.cos() * sum(g * (i + 1) for i, g in enumerate(grads)), None


@compatfn.function(intermediates=1)
class TensorIndicesLoop(torch.autograd.Function):
    @staticmethod
    def forward(scale, first, second):
        tensor_indices = []
        args = (first, second)
        for index, arg in enumerate(args):
            if torch.is_tensor(arg):
                tensor_indices.append(index)
        return tuple(a * scale for a in args), tensor_indices

    @staticmethod
    def setup_context(ctx, inputs, output):
        scale, _, _ = inputs
        _, tensor_indices = output
        ctx.scale = scale
        ctx.tensor_indices = tensor_indices

    @staticmethod
    def backward(ctx, grad_first, grad_second):
        grads = (grad_first * ctx.scale, grad_second * ctx.scale)
        return (None, *(g if i in ctx.tensor_indices else None for i, g in enumerate(grads)))


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "AttentionWithStats": lambda: ((_randn(2, 3, 4), _randn(2, 5, 4), _randn(2, 5, 4)), ()),
    "SeededDropout": lambda: ((_randn(4, 6),), (0.3,)),
    "NoisyIdentity": lambda: ((_randn(5),), (0.2,)),
    "ExpandedBias": lambda: ((_randn(3, 4),), (torch.randn(4, dtype=torch.float64),)),
    "CheckpointedDropout": lambda: ((_randn(4, 6),), (0.4, True)),
    "ReversibleNoise": lambda: ((_randn(5),), (0.3, False)),
    "PermutedRowsNoise": lambda: ((_randn(3, 4),), (True,)),
    "SolverWithExtraState": lambda: ((_randn(4),), (0,)),
    "TupleOfParts": lambda: ((_randn(4),), (1,)),
    "TensorIndicesLoop": lambda: ((_randn(3), _randn(2)), ()),
}
LEADING = {"TensorIndicesLoop": (3.0,)}  # non-tensor inputs before the tensors
REFUSED = {}
