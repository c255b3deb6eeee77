"""The ways a user calls a Function, for the ``compile`` check of
:func:`~compatfn.testing.check_function`: as given, every parameter after the first by keyword,
the defaults left out, a keyword that skips a default; and the plain-torch control that proves a
failing call style is a limit of torch rather than of the Function.

Example::

    >>> [style.label for style in call_styles(case)]  # forward(x, clip=1.0), called (x, 2.0)
    ['as given', 'with the defaults left out', 'with keywords']
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

__all__ = ["CallStyle", "call_styles", "direct_apply", "plain_control", "plain_style_failure"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class CallStyle(NamedTuple):
    """One way to call: ``wrap(target)`` takes the check's positional inputs and calls ``target``
    in this style (``kwargs`` are the check's own keyword arguments, kept)."""

    label: str
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]]


#: Where a parameter's value comes from: ("pos", index into the inputs) or ("kw", name).
_Source = Tuple[str, Any]


def _sources(
    signature: inspect.Signature, n_inputs: int, kwargs: Dict[str, Any]
) -> Optional[Dict[str, _Source]]:
    """Each given parameter's source, or None where the call cannot be restyled (``*args``
    filled, a keyword-only or positional-only parameter, a call that does not bind)."""
    params = list(signature.parameters.values())
    if any(p.kind not in _POSITIONAL for p in params):
        return None
    if n_inputs > len(params) or any(k not in signature.parameters for k in kwargs):
        return None
    sources: Dict[str, _Source] = {p.name: ("pos", i) for i, p in enumerate(params[:n_inputs])}
    if any(k in sources for k in kwargs):
        return None
    sources.update((k, ("kw", k)) for k in kwargs)
    return sources


def _styled(
    positional: Sequence[_Source], keywords: Dict[str, _Source], kwargs: Dict[str, Any]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def value(source: _Source, inputs: Sequence[Any]) -> Any:
        kind, key = source
        return inputs[key] if kind == "pos" else kwargs[key]

    def wrap(target: Callable[..., Any]) -> Callable[..., Any]:
        def call(*inputs: Any) -> Any:
            args = [value(s, inputs) for s in positional]
            return target(*args, **{name: value(s, inputs) for name, s in keywords.items()})

        return call

    return wrap


def call_styles(
    signature: Optional[inspect.Signature], n_inputs: int, kwargs: Dict[str, Any]
) -> List[CallStyle]:
    """The call as given, and the other styles forward's ``signature`` allows for it: the
    defaulted parameters left out; every parameter after the first by keyword; the first given
    default left out and the later ones by keyword (a keyword that skips a default)."""

    def as_given(target: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *inputs: target(*inputs, **kwargs)

    styles = [CallStyle("as given", as_given)]
    sources = _sources(signature, n_inputs, kwargs) if signature is not None else None
    if signature is None or sources is None or not sources:
        return styles
    params = [p for p in signature.parameters.values() if p.name in sources]
    required = [p for p in params if p.default is inspect.Parameter.empty]
    defaulted = [p for p in params if p.default is not inspect.Parameter.empty]
    if defaulted:
        kept = [sources[p.name] for p in required]
        styles.append(CallStyle("with the defaults left out", _styled(kept, {}, kwargs)))
    first, later = params[0], params[1:]
    if later:
        keywords = {p.name: sources[p.name] for p in later}
        styles.append(CallStyle("with keywords", _styled([sources[first.name]], keywords, kwargs)))
    if len(defaulted) > 1:
        keywords = {p.name: sources[p.name] for p in defaulted[1:]}
        label = f"with {defaulted[0].name} left out and later defaults by keyword"
        styles.append(
            CallStyle(label, _styled([sources[p.name] for p in required], keywords, kwargs))
        )
    return styles


def direct_apply(cls: Any) -> Callable[..., Any]:
    """``cls.apply(...)`` looked up where it is called, as in a user's compiled code: dynamo
    intercepts the attribute of the class there (a bound ``apply`` it would merely call)."""

    def apply(*args: Any, **kwargs: Any) -> Any:
        return cls.apply(*args, **kwargs)

    return apply


def plain_control(signature: inspect.Signature, inputs: Sequence[Any]) -> Any:
    """A plain-torch Function, legacy form, no compatfn, with forward's parameters and defaults:
    forward reads each parameter and returns its first tensor argument times one. Torch's own
    limits on a call style show on it; the Function's math does not."""
    params = list(signature.parameters.values())
    names = [p.name for p in params]
    text = ", ".join(
        n if p.default is inspect.Parameter.empty else f"{n}=_defaults[{n!r}]"
        for n, p in zip(names, params)
    )
    first = next((i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)), 0)
    namespace: Dict[str, Any] = {
        "_defaults": {p.name: p.default for p in params},
        "_Tensor": torch.Tensor,
    }
    # Each parameter is read as forward's math reads it: dynamo guards on the values it reads
    # (torch 2.1 fails on a default it reads when no input requires grad).
    reads = "".join(
        f"    if not (isinstance({n}, _Tensor) or {n} == {n} or {n} != {n}):\n"
        f"        raise AssertionError({n!r})\n"
        for n in names
    )
    source = (
        f"def forward(ctx, {text}):\n"
        f"{reads}"
        f"    return {names[first]} * 1\n"
        f"def backward(ctx, grad):\n"
        f"    return (None,) * {first} + (grad,) + (None,) * {len(names) - first - 1}\n"
    )
    exec(compile(source, "<check_function's plain control>", "exec"), namespace)
    return type(
        "PlainControl",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(namespace["forward"]),
            "backward": staticmethod(namespace["backward"]),
        },
    )


def plain_style_failure(
    control: Any, style: CallStyle, inputs: Sequence[Any], backend: str
) -> Optional[BaseException]:
    """Compile (``fullgraph=True``) ``control.apply`` called in ``style`` and run forward and
    backward on copies of ``inputs``; the exception, or None when it works."""
    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    copies = [
        v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
        for v in inputs
    ]
    try:
        out = torch.compile(style.wrap(control.apply), fullgraph=True, backend=backend)(
            *[v.clone() if isinstance(v, torch.Tensor) and v.requires_grad else v for v in copies]
        )
        first = out[0] if isinstance(out, (tuple, list)) else out
        wrt = [v for v in copies if isinstance(v, torch.Tensor) and v.requires_grad]
        if wrt and isinstance(first, torch.Tensor) and first.requires_grad:
            torch.autograd.grad(first.sum(), wrt, allow_unused=True)
    except Exception as exc:  # returned: the caller compares it with the Function's own failure
        return exc
    finally:
        dynamo.reset()
    return None
