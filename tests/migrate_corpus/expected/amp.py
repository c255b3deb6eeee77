"""AMP-decorated Functions with the usual hand-rolled version switches.

Models the patterns of fla's fla/utils.py (``autocast_custom_fwd``/``autocast_custom_bwd``: a
``functools.partial(torch.amp.custom_fwd, device_type="cuda")`` on torch >= 2.4, else
``torch.cuda.amp.custom_fwd``), DeepSpeed's deepspeed/runtime/zero/linear.py
(LinearFunctionForZeroStage3: a switched custom_fwd on a linear layer whose backward branches on
``ctx.needs_input_grad``) and Megatron-LM-style fused ops decorated with
``torch.cuda.amp.custom_fwd(cast_inputs=...)`` directly or through an alias. Written for
compatfn's tests.
"""

import functools

import compatfn
import torch

_RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
if _RELEASE >= (2, 4):
    autocast_custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")
    autocast_custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="cuda")
else:
    autocast_custom_fwd = torch.cuda.amp.custom_fwd
    autocast_custom_bwd = torch.cuda.amp.custom_bwd


@compatfn.function
class AmpLinear(torch.autograd.Function):
    @staticmethod
    @compatfn.custom_fwd(device_type="cuda")
    def forward(x, weight, bias=None):
        out = x @ weight.t()
        if bias is not None:
            out = out + bias
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias = inputs
        ctx.save_for_backward(x, weight, bias)

    @staticmethod
    @compatfn.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        x, weight, bias = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = grad @ weight
        if ctx.needs_input_grad[1]:
            grad_w = grad.t() @ x
        if bias is not None and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


@compatfn.function
class AmpCastScale(torch.autograd.Function):
    @staticmethod
    @compatfn.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(x, scale):
        return x * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, scale = inputs
        ctx.scale = scale

    @staticmethod
    @compatfn.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        return grad * ctx.scale, None


@compatfn.function
class AmpAliasSquare(torch.autograd.Function):
    @staticmethod
    @compatfn.custom_fwd(device_type="cuda")
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    @compatfn.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "AmpLinear": lambda: ((_randn(3, 4), _randn(5, 4), _randn(5)), ()),
    "AmpCastScale": lambda: ((_randn(6),), (1.5,)),
    "AmpAliasSquare": lambda: ((_randn(6),), ()),
}
REFUSED = {}
#: Classes to run again under CPU autocast (torch >= 1.10): name -> float32 inputs.
AUTOCAST = {
    "AmpLinear": lambda: (torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)),
    "AmpAliasSquare": lambda: (torch.randn(6),),
}
