"""compatfn: write a ``torch.autograd.Function`` once, setup_context style; run it everywhere.

Example::

    import torch, compatfn

    @compatfn.function
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    Square.apply(torch.ones(3, requires_grad=True))  # torch 1.8 ... newest
"""

from compatfn.core import (
    as_legacy,
    custom_bwd,
    custom_fwd,
    features,
    function,
    functional,
    mode,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "as_legacy",
    "custom_bwd",
    "custom_fwd",
    "features",
    "function",
    "functional",
    "mode",
]
