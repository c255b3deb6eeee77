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

import functools
import importlib
from typing import TYPE_CHECKING, Any, Dict, List

from compatfn import _exports

__version__ = "0.1.0"

# The public API is ``__version__`` and the ``__all__`` of the modules in
# ``_exports.PUBLIC_MODULES`` (core's and library's), read from their source. ``__all__`` and
# the names are resolved on first use (PEP 562), so that ``import compatfn`` and commands that need
# no torch, such as ``python -m compatfn vendor``, never import it.

if TYPE_CHECKING:  # for type checkers, which cannot run the code below; a test keeps it in step
    from compatfn.core import as_legacy as as_legacy
    from compatfn.core import custom_bwd as custom_bwd
    from compatfn.core import custom_fwd as custom_fwd
    from compatfn.core import features as features
    from compatfn.core import function as function
    from compatfn.core import functional as functional
    from compatfn.core import mode as mode
    from compatfn.library import custom_op as custom_op


@functools.lru_cache(maxsize=None)
def _origins() -> Dict[str, str]:
    """Each public name -> the submodule that defines it, e.g. ``{"function": "core", ...}``."""
    return _exports.public_names(__name__)


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return ["__version__", *_origins()]
    module = _origins().get(name)
    if module is not None:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    if name in _exports.PUBLIC_MODULES:
        return importlib.import_module(f"{__name__}.{name}")  # also sets compatfn.<name>
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | {"__all__", "__version__", *_origins()})
