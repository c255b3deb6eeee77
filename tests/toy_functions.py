"""Toy autograd Functions shared by the test modules: one definition each, built fresh per call.

Imported as ``from toy_functions import make_clip``: pytest puts ``tests/`` on ``sys.path``
(``pythonpath = ["tests"]`` in pyproject.toml, pytest >= 7), which works with
``--import-mode=importlib`` on every Python of the matrix. Only this folder is added, never
``src/``: the tests still import the installed compatfn.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, Optional, Tuple

import torch

import compatfn

#: Whether this session forces the legacy path (``COMPATFN_LEGACY=1``, the ``-legacy`` sessions).
FORCED = os.environ.get("COMPATFN_LEGACY", "").strip().lower() in ("1", "true", "yes", "on")


def expected_mode(forced: bool = False, *, defaults: bool = False) -> str:
    """What ``compatfn.mode`` must answer for a setup_context-style class on this torch, pinned
    per release: the legacy path on torch 1.x or when forced; the legacy form with a torch.func
    copy (``"dual"``) on 2.0-2.12, where dynamo mishandles the setup_context style, and on every
    2.x for a forward with ``defaults`` (dynamo leaves them out of setup_context's inputs); the
    class as written from 2.13 otherwise.

    Example::

        assert compatfn.mode(make_clip()) == expected_mode(FORCED, defaults=True)
    """
    match = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    assert match is not None, torch.__version__
    release = (int(match.group(1)), int(match.group(2)))
    if forced or release < (2, 0):
        return "legacy"
    return "dual" if release < (2, 13) or defaults else "native"


def make_clip(
    legacy: Optional[bool] = None,
    *,
    name: str = "Clip",
    none_for_clip: bool = False,
    decorated: bool = True,
) -> Any:
    """A decorated clipped ReLU ``x.clamp(0, clip)``, setup_context style, ``clip=1.0`` default.

    Saves the mask ``0 < x < clip``; backward returns ``grad * mask`` and, with
    ``none_for_clip``, an explicit ``None`` for ``clip`` (otherwise compatfn pads it).
    ``decorated=False`` returns the plain torch class.

    Example::

        make_clip(legacy=True).apply(torch.randn(4), clip=0.5)
    """

    class Clip(torch.autograd.Function):
        @staticmethod
        def forward(x, clip=1.0):  # type: ignore[no-untyped-def,override]
            return x.clamp(0, clip)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
            x, clip = inputs
            ctx.save_for_backward((x > 0) & (x < clip))

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            (mask,) = ctx.saved_tensors
            return (grad * mask, None) if none_for_clip else grad * mask

    Clip.__name__ = Clip.__qualname__ = name
    return compatfn.function(Clip, legacy=legacy) if decorated else Clip


def make_hand_written_clip() -> Any:
    """The same clipped ReLU hand-written in the legacy form, without compatfn: the control that
    shows what torch itself supports. A fresh class per call (dynamo keeps state per class).

    Example::

        make_hand_written_clip().apply(torch.randn(4), 0.5)
    """

    class HandWrittenClip(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, clip=1.0):  # type: ignore[no-untyped-def,override]
            ctx.save_for_backward((x > 0) & (x < clip))
            return x.clamp(0, clip)

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            (mask,) = ctx.saved_tensors
            return grad * mask, None

    return HandWrittenClip


#: One hand-written control, for tests that need no fresh class.
HandWrittenClip = make_hand_written_clip()


def make_scale(
    legacy: Optional[bool] = None,
    *,
    name: str = "Scale",
    factor: float = 2.0,
    none_for_factor: bool = True,
    decorate: Optional[Callable[..., Any]] = None,
) -> Any:
    """A decorated ``x * factor`` (default ``factor``), setup_context style, that keeps the factor
    on ctx; backward returns ``None`` for it unless ``none_for_factor=False`` (compatfn pads).
    ``decorate`` replaces ``compatfn.function`` (e.g. a vendored copy's ``function``).

    Example::

        make_scale(name="Short", none_for_factor=False).apply(torch.ones(2), 3.0)
    """

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(x, factor=factor):  # type: ignore[no-untyped-def,override]
            return x * factor

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
            ctx.factor = inputs[1]

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            return (grad * ctx.factor, None) if none_for_factor else grad * ctx.factor

    Scale.__name__ = Scale.__qualname__ = name
    if decorate is not None:
        return decorate(Scale)
    return compatfn.function(Scale, legacy=legacy)


def make_square(*, name: str = "Square", vmap_rule: bool = False) -> Any:
    """A decorated ``x * x`` that saves ``x``; ``vmap_rule`` sets ``generate_vmap_rule = True``.

    Example::

        make_square(vmap_rule=True).apply(torch.ones(2))
    """

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(x):  # type: ignore[no-untyped-def,override]
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    Square.__name__ = Square.__qualname__ = name
    if vmap_rule:
        Square.generate_vmap_rule = True
    return compatfn.function(Square)


def make_clip_scale(legacy: Optional[bool] = None, *, decorated: bool = True) -> Any:
    """A decorated ``x.clamp(0, clip) * scale`` with two defaults (``clip=1.0, scale=2.0``), for
    the calls that leave out, reorder or skip defaults; ``decorated=False`` returns the plain
    torch class.

    Example::

        make_clip_scale().apply(torch.randn(4), scale=3.0)  # clip left at its default
    """

    class ClipScale(torch.autograd.Function):
        @staticmethod
        def forward(x, clip=1.0, scale=2.0):  # type: ignore[no-untyped-def,override]
            return x.clamp(0, clip) * scale

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
            x, clip, scale = inputs
            ctx.save_for_backward((x > 0) & (x < clip))
            ctx.scale = scale

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            (mask,) = ctx.saved_tensors
            return grad * mask * ctx.scale, None, None

    return compatfn.function(ClipScale, legacy=legacy) if decorated else ClipScale


def make_hand_written_clip_scale() -> Any:
    """``make_clip_scale``'s math hand-written in the legacy form, without compatfn (a fresh
    class per call).

    Example::

        make_hand_written_clip_scale().apply(torch.randn(4), 0.5)
    """

    class HandWrittenClipScale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, clip=1.0, scale=2.0):  # type: ignore[no-untyped-def,override]
            ctx.save_for_backward((x > 0) & (x < clip))
            ctx.scale = scale
            return x.clamp(0, clip) * scale

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            (mask,) = ctx.saved_tensors
            return grad * mask * ctx.scale, None, None

    return HandWrittenClipScale


#: The ways users call a two-default Function, each with the ``(clip, scale)`` it means.
DEFAULT_CALLS: Dict[
    str, Tuple[Callable[[Any, torch.Tensor], torch.Tensor], Tuple[float, float]]
] = {
    "defaults-left-out": (lambda cls, t: cls.apply(t), (1.0, 2.0)),
    "one-default-left-out": (lambda cls, t: cls.apply(t, 0.5), (0.5, 2.0)),
    "keywords": (lambda cls, t: cls.apply(t, clip=0.5, scale=3.0), (0.5, 3.0)),
    "reordered-keywords": (lambda cls, t: cls.apply(t, scale=3.0, clip=0.5), (0.5, 3.0)),
    "keyword-skipping-a-default": (lambda cls, t: cls.apply(t, scale=3.0), (1.0, 3.0)),
}
