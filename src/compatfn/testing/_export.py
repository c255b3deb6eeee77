"""The ``export`` check of :func:`~compatfn.testing.check_function`: ``torch.export.export``,
strict and non-strict where this torch has them, of a module calling the Function in each call
style of :mod:`~compatfn.testing._call_styles`, compared with eager; and the plain-torch controls
that prove a failure is a limit of torch rather than of the Function.

Example::

    >>> [mode for mode, _ in export_modes()]  # torch 2.15
    ['strict', 'non-strict']
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from compatfn.testing._call_styles import CallStyle, direct_apply, plain_control
from compatfn.testing._compile_probes import _PLAIN_CTX_PROBES, read_dynamo_failure

__all__ = ["export_modes", "export_unsupported", "exported_matches_eager"]

#: ``torch.export.export`` (torch >= 2.1), or None.
_EXPORT: Optional[Callable[..., Any]] = getattr(getattr(torch, "export", None), "export", None)
#: Whether it takes ``strict=`` (non-strict export).
_HAS_STRICT = _EXPORT is not None and "strict" in inspect.signature(_EXPORT).parameters


def export_unsupported() -> Optional[str]:
    """``None`` where this torch has ``torch.export.export``, else why not."""
    if _EXPORT is None:
        return f"torch {torch.__version__} has no torch.export (needs torch >= 2.1)"
    return None


def export_modes() -> List[Tuple[str, Dict[str, Any]]]:
    """``(label, options)`` for each mode this torch exports in: strict, and non-strict where
    ``torch.export.export`` takes ``strict=`` (before, it is always strict)."""
    if not _HAS_STRICT:
        return [("strict", {})]
    return [("strict", {"strict": True}), ("non-strict", {"strict": False})]


def _reset_dynamo() -> None:
    importlib.import_module("torch._dynamo").reset()


class _Calls(torch.nn.Module):
    """Takes the tensor inputs and calls ``target`` in ``style`` with the other inputs fixed."""

    def __init__(self, target: Callable[..., Any], style: CallStyle, inputs: Sequence[Any]):
        super().__init__()
        self.call = style.wrap(target)
        self.inputs = list(inputs)
        self.at = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]

    def forward(self, *tensors: torch.Tensor) -> Any:
        values = list(self.inputs)
        for i, t in zip(self.at, tensors):
            values[i] = t
        return self.call(*values)


def _no_grad_copies(inputs: Sequence[Any]) -> List[Any]:
    return [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in inputs]


def _run_exported(
    target: Callable[..., Any], style: CallStyle, inputs: Sequence[Any], options: Dict[str, Any]
) -> Any:
    """Export a module calling ``target`` in ``style`` and run the exported program."""
    module = _Calls(target, style, _no_grad_copies(inputs))
    tensors = tuple(v for v in _no_grad_copies(inputs) if isinstance(v, torch.Tensor))
    _reset_dynamo()
    try:
        program = _EXPORT(module, tensors, **options)  # type: ignore[misc]
        return program.module()(*_no_grad_copies(tensors))
    finally:
        _reset_dynamo()


def _failure(
    target: Callable[..., Any], style: CallStyle, inputs: Sequence[Any], options: Dict[str, Any]
) -> Optional[BaseException]:
    try:
        _run_exported(target, style, inputs, options)
    except Exception as exc:  # returned: compared with the Function's own failure
        return exc
    return None


def _as_given(target: Callable[..., Any]) -> Callable[..., Any]:
    return target


def torch_limitation(
    exc: BaseException,
    signature: Optional[inspect.Signature],
    style: CallStyle,
    inputs: Sequence[Any],
    mode: Tuple[str, Dict[str, Any]],
    ctx_methods: Callable[[], Sequence[str]] = tuple,
) -> Optional[str]:
    """A skip reason if a plain-torch legacy Function (no compatfn) fails to export the same
    way (the same exception type): one with forward's signature called in ``style``, or one
    using a ctx method the message names or the Function calls (``ctx_methods()``, read only
    here, after a failure); None (a failure) otherwise."""
    label, options = mode
    why = f"torch {torch.__version__} cannot torch.export ({label}) a plain legacy-form Function"
    if signature is not None:
        control = plain_control(signature, inputs)
        plain = _failure(direct_apply(control), style, inputs, options)
        if plain is not None and type(plain) is type(exc):
            headline = read_dynamo_failure(plain).headline
            return f"{why} with the same signature called {style.label} ({headline})"
    named = read_dynamo_failure(exc).ctx_methods
    for method in dict.fromkeys((*named, *ctx_methods())):
        probe = _PLAIN_CTX_PROBES[method]
        given = CallStyle("as given", _as_given)
        plain = _failure(direct_apply(probe), given, (torch.tensor([-1.0, 2.0]),), options)
        if plain is not None and type(plain) is type(exc):
            return f"{why} that calls ctx.{method} ({read_dynamo_failure(plain).headline})"
    return None


def exported_matches_eager(
    target: Callable[..., Any],
    style: CallStyle,
    inputs: Sequence[Any],
    mode: Tuple[str, Dict[str, Any]],
    signature: Optional[inspect.Signature],
    compare: Callable[[str, Any, Any], None],
    fail: Callable[[str], AssertionError],
    ctx_methods: Callable[[], Sequence[str]] = tuple,
) -> Optional[str]:
    """Export ``target`` called in ``style`` in ``mode`` and ``compare(what, got, expected)``
    its result with eager's. Returns a skip reason where a plain-torch control proves the
    failure a limit of torch (:func:`torch_limitation`, given a function returning the ctx
    methods the Function calls); raises ``fail(detail)`` for any other
    failure to export."""
    called = f"torch.export ({mode[0]}) called {style.label}"
    try:
        got = _run_exported(target, style, inputs, mode[1])
    except Exception as exc:
        why = torch_limitation(exc, signature, style, inputs, mode, ctx_methods)
        if why is None:
            raise fail(f"{called}: {type(exc).__name__}: {exc}") from exc
        return why
    expected = style.wrap(target)(*_no_grad_copies(inputs))
    compare(f"exported ({mode[0]}) called {style.label}: outputs", got, expected)
    return None
