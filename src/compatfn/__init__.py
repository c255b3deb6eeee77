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

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public API is compatfn.core's ``__all__``, imported on first use (PEP 562) so that commands
# which need no torch, such as ``python -m compatfn vendor``, never import it.
__all__ = [
    "__version__",
    "as_legacy",
    "custom_bwd",
    "custom_fwd",
    "custom_op",
    "features",
    "function",
    "functional",
    "mode",
]

if TYPE_CHECKING:
    from compatfn.core import (
        as_legacy,
        custom_bwd,
        custom_fwd,
        features,
        function,
        functional,
        mode,
    )
    from compatfn.library import custom_op


def __getattr__(name: str) -> Any:
    if name == "custom_op":  # compatfn.library: torch.library.custom_op on every torch
        return importlib.import_module("compatfn.library").custom_op
    if name in __all__ or name == "core":
        core = importlib.import_module("compatfn.core")  # also sets compatfn.core
        return core if name == "core" else getattr(core, name)
    raise AttributeError(f"module 'compatfn' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
