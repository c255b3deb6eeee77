"""``compatfn.features()``: what the running torch offers for custom Functions, as data (the
first part of ``python -m compatfn``'s report). Part of the package, not of the vendorable core:
its probes define throwaway Functions, which a vendoring user does not need.

Example::

    >>> features()["setup_context"]  # torch >= 2.0
    True
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from typing import Any, Callable, Dict, Tuple, Union

import torch

from compatfn.core import (
    COMPILES_SETUP_CONTEXT,
    HAS_CPU_AUTOCAST,
    HAS_DEVICE_GENERIC_AMP,
    HAS_SETUP_CONTEXT,
    HAS_TORCH_FUNC,
    dynamo_unsupported,
)

__all__ = ["features"]

_Function = torch.autograd.Function


def _probe(fn: Callable[[], bool]) -> Union[bool, str]:
    """Run one feature probe: its answer, or ``"error: <why>"`` when it fails unexpectedly.

    Warnings torch raises while probed (deprecations of its own internals) are not the caller's
    concern and never turn into errors, under ``python -W error`` either.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(fn())
    except Exception as error:
        return f"error: {type(error).__name__}: {error}"


def _probe_kwargs() -> bool:
    class Probe(_Function):
        @staticmethod
        def forward(ctx: Any, x: Any, scale: float = 1.0) -> Any:
            return x * scale

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    try:
        Probe.apply(torch.ones(1), scale=2.0)
    except TypeError as error:  # torch < 2.13: "apply() takes no keyword arguments"
        if "keyword" in str(error):
            return False
        raise
    return True


def _probe_defaults() -> bool:
    seen = []

    class Probe(_Function):
        @staticmethod
        def forward(x: Any, scale: float = 1.0) -> Any:
            return x * scale

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            seen.append(len(inputs))

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    Probe.apply(torch.ones(1))
    return seen == [2]


def _probe_forward_ad() -> bool:
    if importlib.util.find_spec("torch.autograd.forward_ad") is None:  # torch 1.8
        return False
    import torch.autograd.forward_ad as fwAD

    class Probe(_Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad * 2

        @staticmethod
        def jvp(ctx: Any, tangent: Any) -> Any:
            return tangent * 3  # not forward's derivative: proves that jvp itself ran

    # torch 1.9 has forward AD but runs it through forward's ops, never calling jvp.
    with fwAD.dual_level():
        out = Probe.apply(fwAD.make_dual(torch.ones(1), torch.ones(1)))
        tangent = fwAD.unpack_dual(out).tangent
        return tangent is not None and float(tangent) == 3.0


def _compile_support() -> str:
    """``"native"``, ``"functional"`` or ``"unavailable"``: see ``features()``."""
    if dynamo_unsupported() is not None:
        return "unavailable"
    return "native" if COMPILES_SETUP_CONTEXT else "functional"


def _export_modes() -> Tuple[str, ...]:
    """The torch.export modes this torch has: strict from 2.1, non-strict (``strict=``) from 2.2."""
    export = getattr(getattr(torch, "export", None), "export", None)
    if export is None:
        return ()
    if "strict" in inspect.signature(export).parameters:
        return ("strict", "non-strict")
    return ("strict",)


def features() -> Dict[str, Any]:
    """Report what the running torch offers for custom Functions, as data.

    Example::

        >>> features()["setup_context"]
        True

    ``torch`` is the version string; ``setup_context``, ``torch_func``, ``amp_device_generic`` and
    ``cpu_autocast`` are booleans; the probed ``apply_kwargs``, ``default_binding`` and
    ``forward_ad`` are True, False, or ``"error: <why>"`` when the probe failed unexpectedly;
    ``compile`` is ``"native"`` (dynamo traces setup_context-style classes, torch >= 2.4),
    ``"functional"`` (it rejects them; decorated classes compile anyway, see ``mode``) or
    ``"unavailable"``; ``export`` is the tuple of torch.export modes, e.g.
    ``("strict", "non-strict")``. The command-line report explains each entry.
    """
    return {
        "torch": str(torch.__version__),
        "setup_context": HAS_SETUP_CONTEXT,
        "apply_kwargs": _probe(_probe_kwargs),
        "default_binding": HAS_SETUP_CONTEXT and _probe(_probe_defaults),
        "forward_ad": _probe(_probe_forward_ad),
        "torch_func": HAS_TORCH_FUNC,
        "compile": _compile_support(),
        "export": _export_modes(),
        "amp_device_generic": HAS_DEVICE_GENERIC_AMP,
        "cpu_autocast": HAS_CPU_AUTOCAST,
    }
