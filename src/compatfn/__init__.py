"""compatfn: write a ``torch.autograd.Function`` once, setup_context style; run it everywhere.

Example::

    import torch
    import compatfn

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

The submodules ``compatfn.testing`` (check your Functions in your own tests), ``compatfn.relu``
(reference Functions), ``compatfn.relu_ops`` (reference operators), ``compatfn.library`` and
``compatfn.core`` are attributes of the package, imported on first use.
"""

import functools as _functools
import importlib as _importlib
from typing import TYPE_CHECKING, Any, Dict, List

from compatfn import _exports

__version__ = "0.1.0"

# The public API is ``__version__`` and the ``__all__`` of the modules in
# ``_exports.PUBLIC_MODULES`` (core's, _features' and library's), read from their source.
# ``__all__``, the names and the submodules are resolved on first use (PEP 562), so that
# ``import compatfn`` and commands that need no torch, such as ``python -m compatfn vendor``,
# never import it.

#: Submodules reachable as attributes (``compatfn.testing``) without an import statement.
_SUBMODULES = ("core", "library", "migrate", "relu", "relu_ops", "testing")

if TYPE_CHECKING:  # for type checkers, which cannot run the code below; a test keeps it in step
    from compatfn._features import features as features
    from compatfn.core import as_legacy as as_legacy
    from compatfn.core import custom_bwd as custom_bwd
    from compatfn.core import custom_fwd as custom_fwd
    from compatfn.core import function as function
    from compatfn.core import functional as functional
    from compatfn.core import mode as mode
    from compatfn.library import custom_op as custom_op


@_functools.lru_cache(maxsize=None)
def _origins() -> Dict[str, str]:
    """Each public name -> the submodule that defines it, e.g. ``{"function": "core", ...}``."""
    return _exports.public_names(__name__)


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return ["__version__", *_origins()]
    module = _origins().get(name)
    if module is not None:
        return getattr(_importlib.import_module(f"{__name__}.{module}"), name)
    if name in _SUBMODULES or name in _exports.PUBLIC_MODULES:
        return _importlib.import_module(f"{__name__}.{name}")  # also sets compatfn.<name>
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    """The public API, the submodules and the module's own dunders; no helper imports."""
    hooks = {"__builtins__", "__dir__", "__getattr__"}
    dunders = {n for n in globals() if n.startswith("__") and n.endswith("__") and n not in hooks}
    return sorted(dunders | {"__all__", *_origins(), *_SUBMODULES})
