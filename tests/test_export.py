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
from toy_functions import make_clip, make_hand_written_clip

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
    if mode == "strict":
        return export.export(module, (x,))
    return export.export(module, (x,), strict=False)


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
