"""``torch.export.export`` (strict and non-strict) of modules that call decorated Functions.

The promise: wherever this torch exports a hand-written legacy Function of the same math (the
baseline, tried first in each test), it exports the decorated one too, with equal results,
keyword arguments included, through ``Fn.apply`` held by the module and through ``functional(Fn)``;
a class named at the call site exports wherever torch exports its style.
(Unlike torch.compile on torch 2.1-2.3, export traces without autograd, so dynamo's rejection of
setup_context-style Functions there, pytorch #118397, does not apply.)
"""

from __future__ import annotations

import inspect

import pytest
import torch

import compatfn
from toy_functions import HandWrittenClip, make_clip

export = getattr(torch, "export", None)
pytestmark = pytest.mark.skipif(
    export is None or not hasattr(export, "export"), reason="torch.export needs torch >= 2.1"
)
# Modes this torch's export has: strict (dynamo) always; non-strict where export takes strict=.
MODES = ["strict", "non-strict"]


#: The same math in the setup_context style, without compatfn.
UndecoratedNoCtx = make_clip(name="UndecoratedNoCtx", none_for_clip=True, decorated=False)


class Calls(torch.nn.Module):
    """Calls ``op``; with ``weighted``, on ``x * weight``, a parameter (the input requires grad)."""

    def __init__(self, op, keywords: bool, weighted: bool = False) -> None:
        super().__init__()
        self.op, self.keywords = op, keywords
        self.weight = torch.nn.Parameter(torch.full((8,), 1.5)) if weighted else None

    def forward(self, x):
        if self.weight is not None:
            x = x * self.weight
        y = self.op(x, clip=0.5) if self.keywords else self.op(x, 0.5)
        return y * 2


def _export(module: torch.nn.Module, x: torch.Tensor, mode: str):
    if mode == "strict":
        return export.export(module, (x,))
    if "strict" not in inspect.signature(export.export).parameters:
        pytest.skip(f"torch {torch.__version__} has no non-strict export")
    return export.export(module, (x,), strict=False)


class Direct(torch.nn.Module):
    """Names the class at the call site, ``Fn.apply(x, 0.5)``: dynamo intercepts the call."""

    def __init__(self, cls) -> None:
        super().__init__()
        self.cls = cls

    def forward(self, x):
        return self.cls.apply(x, 0.5) * 2


def _baseline_exports(keywords: bool, mode: str, weighted: bool) -> None:
    try:
        _export(Calls(HandWrittenClip.apply, keywords, weighted), torch.randn(8), mode)
    except Exception as error:  # torch itself cannot: nothing is promised here
        pytest.skip(f"torch {torch.__version__} does not export the hand-written Function: {error}")


def _check(op, keywords: bool, mode: str, weighted: bool) -> None:
    _check_module(Calls(op, keywords, weighted), mode)


def _check_module(module: torch.nn.Module, mode: str) -> None:
    x = torch.randn(8)
    program = _export(module, x, mode)
    for sample in (x, torch.randn(8)):
        assert torch.equal(program.module()(sample), module(sample))


CASES = [
    pytest.param(mode, keywords, legacy, weighted, id=f"{mode}-{k_id}-{l_id}-{w_id}")
    for mode in MODES
    for keywords, k_id in ((False, "positional"), (True, "keywords"))
    for legacy, l_id in ((None, "default-path"), (True, "legacy-forced"))
    for weighted, w_id in ((False, "input"), (True, "parameter"))
]


@pytest.mark.parametrize("mode, keywords, legacy, weighted", CASES)
def test_direct_apply_exports(mode, keywords, legacy, weighted):
    _baseline_exports(keywords, mode, weighted)
    _check(make_clip(legacy).apply, keywords, mode, weighted)


@pytest.mark.parametrize("mode, keywords, legacy, weighted", CASES)
def test_functional_exports(mode, keywords, legacy, weighted):
    _baseline_exports(False, mode, weighted)  # functional binds keywords itself
    _check(compatfn.functional(make_clip(legacy)), keywords, mode, weighted)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("legacy", [None, True], ids=["default-path", "legacy-forced"])
def test_class_named_at_the_call_site_exports_as_torch_does(mode, legacy):
    """Dynamo intercepts ``Fn.apply`` before compatfn runs: the decorated class exports wherever
    torch exports its style (torch 2.4-2.5 reject a setup_context-style class whose inputs need no
    grad, pytorch #133529; a legacy-form class, as with ``legacy=True``, always exports)."""
    _baseline_exports(False, mode, False)
    fn = make_clip(legacy)
    try:
        _export(Direct(UndecoratedNoCtx), torch.randn(8), mode)
        torch_exports_the_style = True
    except Exception:
        torch_exports_the_style = False
    if torch_exports_the_style or compatfn.mode(fn) == "legacy":
        _check_module(Direct(fn), mode)
    else:
        with pytest.raises(Exception, match="too many positional arguments"):
            _check_module(Direct(fn), mode)
