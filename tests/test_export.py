"""``torch.export.export`` (strict and non-strict) of modules that call decorated Functions.

The promise: wherever this torch exports a hand-written legacy Function of the same math (the
control, called positionally: plain ``Function.apply`` takes no keywords before torch 2.13), it
exports the decorated one too, with equal results, whether the module names the class at the call
site (``Fn.apply(x, 0.5)``), holds ``Fn.apply`` or ``functional(Fn)``, positionally or with
keywords, with or without an input requiring grad. Where the decorated class does not export,
the control fails the same way: called positionally, or, for a keyword call, called with the same
keywords (a limit of dynamo's for every Function).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, Tuple

import pytest
import torch

import compatfn
from toy_functions import (
    DEFAULT_CALLS,
    make_clip,
    make_clip_scale,
    make_hand_written_clip,
    make_hand_written_clip_scale,
)

export = getattr(torch, "export", None)
pytestmark = [
    pytest.mark.skipif(
        export is None or not hasattr(export, "export"), reason="torch.export needs torch >= 2.1"
    ),
    pytest.mark.usefixtures("fresh_dynamo"),  # dynamo's caches are process-wide
]
#: Whether this torch's export takes ``strict=`` (non-strict export: torch >= 2.2).
NON_STRICT = export is not None and "strict" in inspect.signature(export.export).parameters
MODES = [
    "strict",
    pytest.param(
        "non-strict",
        marks=pytest.mark.skipif(
            not NON_STRICT,
            reason=(f"torch {torch.__version__} has no non-strict export (torch >= 2.2)"),
        ),
    ),
]
PATHS = [pytest.param(None, id="default-path"), pytest.param(True, id="legacy-forced")]


class Calls(torch.nn.Module):
    """Calls ``cls.apply`` (``how="direct"``), an ``apply`` it holds (``"held"``) or
    ``functional(cls)``; with ``weighted``, on ``x * weight``, a parameter (so the Function's
    input requires grad)."""

    def __init__(self, cls: Any, how: str, keywords: bool, weighted: bool) -> None:
        super().__init__()
        self.cls, self.how, self.keywords = cls, how, keywords
        self.op = compatfn.functional(cls) if how == "functional" else cls.apply
        self.weight = torch.nn.Parameter(torch.full((8,), 1.5)) if weighted else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is not None:
            x = x * self.weight
        if self.how == "direct":
            y = self.cls.apply(x, clip=0.5) if self.keywords else self.cls.apply(x, 0.5)
        else:
            y = self.op(x, clip=0.5) if self.keywords else self.op(x, 0.5)
        return y * 2


def _export(module: torch.nn.Module, x: torch.Tensor, mode: str) -> Any:
    if not NON_STRICT:  # torch 2.1: strict is the only mode, and export takes no strict=
        return export.export(module, (x,))
    # Always spelled out: the default changed (non-strict from torch 2.8 on, measured).
    return export.export(module, (x,), strict=mode == "strict")


def failure_kind(error: BaseException) -> str:
    return type(error).__name__


def _outcome(run: Callable[[], Any]) -> Tuple[Any, Optional[str]]:
    try:
        return run(), None
    except Exception as error:  # compared below, never ignored
        return None, failure_kind(error)


def _sample() -> torch.Tensor:
    return torch.randn(8, generator=torch.Generator().manual_seed(0))


@functools.lru_cache(maxsize=None)
def _control(mode: str, keywords: bool, weighted: bool) -> Optional[str]:
    """How the hand-written control fails to export (None: it exports, with eager results)."""
    module = Calls(make_hand_written_clip(), "direct", keywords, weighted)
    program, failure = _outcome(lambda: _export(module, _sample(), mode))
    if program is not None:
        assert torch.equal(program.module()(_sample()), module(_sample()))
    return failure


def check_like_control(cls: Any, how: str, mode: str, keywords: bool, weighted: bool) -> None:
    module = Calls(cls, how, keywords, weighted)
    program, failure = _outcome(lambda: _export(module, _sample(), mode))
    if failure is None:
        for sample in (_sample(), torch.randn(8)):
            assert torch.equal(program.module()(sample), module(sample))
        return
    allowed = {_control(mode, False, weighted)}
    if keywords:
        allowed.add(_control(mode, True, weighted))
    assert failure in allowed, (
        f"{cls.__name__} ({how}) failed to export ({failure}) where the hand-written control "
        f"called the same way does not fail so ({allowed})"
    )


CASES = [
    pytest.param(keywords, weighted, id=f"{k_id}-{w_id}")
    for keywords, k_id in ((False, "positional"), (True, "keywords"))
    for weighted, w_id in ((False, "input"), (True, "parameter"))
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("legacy", PATHS)
@pytest.mark.parametrize("keywords, weighted", CASES)
def test_class_named_at_the_call_site_exports(keywords, weighted, legacy, mode):
    check_like_control(make_clip(legacy), "direct", mode, keywords, weighted)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["held", "functional"])
@pytest.mark.parametrize("keywords", [False, True], ids=["positional", "keywords"])
def test_held_apply_and_functional_export(keywords, how, mode):
    """The default path (``-legacy`` sessions run the forced one)."""
    check_like_control(make_clip(), how, mode, keywords, True)


def test_control_exports_positionally():
    """The control itself exports on every torch with torch.export when its input requires grad
    (so that the comparisons above are never vacuous), and keyword calls are what torch 2.13
    added to plain ``Function.apply`` (non-strict export runs ``apply`` for real)."""
    assert _control("strict", False, True) is None
    if NON_STRICT:
        assert _control("non-strict", False, True) is None
        keywords = _control("non-strict", True, True)
        assert (keywords is None) == (compatfn.core.TORCH_VERSION >= (2, 13)), keywords


class CallsWithDefaults(torch.nn.Module):
    """Calls the two-default class as ``call`` names (defaults left out, reordered keywords ...)
    on ``linear(x)``; with ``weighted``, the linear layer has parameters requiring grad (so
    dynamo takes the Function's grad path), else it is a fixed scaling."""

    def __init__(self, cls: Any, call: str, weighted: bool) -> None:
        super().__init__()
        self.cls, self.run = cls, DEFAULT_CALLS[call][0]
        self.linear = torch.nn.Linear(8, 8)
        with torch.no_grad():
            self.linear.weight.copy_(torch.eye(8) * 1.5)
            self.linear.bias.zero_()
        self.linear.requires_grad_(weighted)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(self.cls, self.linear(x)) * 2


@functools.lru_cache(maxsize=None)
def _default_call_control(mode: str, call: str, weighted: bool) -> Optional[str]:
    """How the hand-written control fails to export (None: it exports, with forward's math;
    its eager call is no reference: plain ``apply`` takes no keywords before torch 2.13)."""
    module = CallsWithDefaults(make_hand_written_clip_scale(), call, weighted)
    program, failure = _outcome(lambda: _export(module, _sample(), mode))
    if program is not None:
        assert torch.equal(program.module()(_sample()), _default_call_math(module, call))
    return failure


def _default_call_math(module: CallsWithDefaults, call: str, sample: Any = None) -> Any:
    """What ``module`` computes for ``sample`` (by default ``_sample()``), defaults filled in."""
    clip, scale = DEFAULT_CALLS[call][1]
    with torch.no_grad():
        return module.linear(_sample() if sample is None else sample).clamp(0, clip) * scale * 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("legacy", PATHS)
@pytest.mark.parametrize("weighted", [True, False], ids=["parameter", "input"])
@pytest.mark.parametrize("call", sorted(DEFAULT_CALLS))
def test_calls_leaving_out_defaults_export_like_hand_written(call, weighted, legacy, mode):
    """README's ``Fn.apply(x)`` with its defaults left out, and keywords reordered or skipping a
    default: exported wherever the hand-written control called the same way is, with forward's
    math (defaults filled in); otherwise the same failure."""
    module = CallsWithDefaults(make_clip_scale(legacy), call, weighted)
    program, failure = _outcome(lambda: _export(module, _sample(), mode))
    control = _default_call_control(mode, call, weighted)
    if failure is None:
        for sample in (_sample(), torch.randn(8)):
            assert torch.equal(program.module()(sample), _default_call_math(module, call, sample))
        return
    assert failure == control, (
        f"{call}: the decorated class failed to export ({failure}) where the hand-written "
        f"control {'exports' if control is None else f'fails differently ({control})'}"
    )
