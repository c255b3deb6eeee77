"""A direct ``Fn.apply(...)`` of a decorated class compiles (``fullgraph=True``) wherever a
hand-written legacy Function of the same math does, with equal values and gradients.

Every case first compiles the control, ``HandWrittenClip`` (a fresh copy each time: dynamo keeps
state per class), called the same way: where the control compiles, the decorated class must
compile and agree with it; where it does not, torch's limit must be the decorated class's only
one: it fails with the same kind of error (or compiles). Measured limits of the control: keyword
arguments to ``apply`` with an input requiring grad (before torch 2.11; on 2.1 a decorated class
compiles them), and any Function without grad on torch 2.2 ("'FunctionMeta' has no
attribute 'forward'"). On ``COMPATFN_LEGACY=1`` sessions the default path is the legacy one.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple

import pytest
import torch

import compatfn
from compatfn import core
from toy_functions import (
    DEFAULT_CALLS,
    make_clip,
    make_clip_scale,
    make_hand_written_clip,
    make_hand_written_clip_scale,
    make_square,
)

WHY_NOT = core._dynamo_unsupported()
pytestmark = [
    pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or ""),
    # Dynamo's caches are process-wide: every test starts and ends with a clean slate.
    pytest.mark.usefixtures("fresh_dynamo"),
]

PATHS = [pytest.param(None, id="default-path"), pytest.param(True, id="legacy-forced")]
CALLS = {
    "positional": lambda cls, t: cls.apply(t, 0.5) * 2,
    "keywords": lambda cls, t: cls.apply(t, clip=0.5) * 2,
    "all-keywords": lambda cls, t: cls.apply(x=t, clip=0.5) * 2,
}


def _compiled_run(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, backend: str
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(output, gradient of its sum or None) of ``torch.compile(fn, fullgraph=True)(x)``."""
    import torch._dynamo

    torch._dynamo.reset()
    y = torch.compile(fn, backend=backend, fullgraph=True)(x)
    grad = torch.autograd.grad(y.sum(), x)[0] if x.requires_grad else None
    return y.detach(), grad


def failure_kind(error: BaseException) -> str:
    """The kind of a compile failure: the exception's class, and the one a backend raised."""
    inner = getattr(error, "inner_exception", None) or error.__cause__
    kind = type(error).__name__
    return f"{kind}({type(inner).__name__})" if kind == "BackendCompilerFailed" else kind


def _outcome(run: Callable[[], Any]) -> Tuple[Any, Optional[str]]:
    try:
        return run(), None
    except Exception as error:  # the kind is compared below, never ignored
        return None, failure_kind(error)


def _input(grad: bool, device: str = "cpu") -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    # Away from the kinks at 0 and 0.5, so that gradients compare exactly.
    x = torch.rand(16, generator=generator) * 2 - 1
    x = torch.where((x.abs() < 0.05) | ((x - 0.5).abs() < 0.05), x + 0.2, x)
    return x.to(device).requires_grad_(grad)


@functools.lru_cache(maxsize=None)
def _control(call: str, grad: bool, backend: str, device: str = "cpu") -> Tuple[Any, Optional[str]]:
    """The hand-written control, compiled once per case (it is the same for both paths)."""
    control = make_hand_written_clip()
    return _outcome(
        lambda: _compiled_run(lambda t: CALLS[call](control, t), _input(grad, device), backend)
    )


def check_like_control(
    cls: Any, call: str, grad: bool, backend: str = "aot_eager", device: str = "cpu"
) -> None:
    """``cls`` compiles where the control does, with the control's values and gradient; where
    the control fails, ``cls`` fails the same way or compiles correctly."""
    expected, control_failure = _control(call, grad, backend, device)
    x = _input(grad, device)
    got, failure = _outcome(lambda: _compiled_run(lambda t: CALLS[call](cls, t), x, backend))
    if failure is None:
        y, g = got
        torch.testing.assert_close(y, x.detach().clamp(0, 0.5) * 2)
        if grad:
            torch.testing.assert_close(g, ((x > 0) & (x < 0.5)).to(x.dtype) * 2)
        if expected is not None:
            torch.testing.assert_close(y, expected[0])
            torch.testing.assert_close(g, expected[1])
        return
    assert control_failure == failure, (
        f"{cls.__name__} failed to compile ({failure}) where the hand-written control "
        + ("compiles" if control_failure is None else f"fails differently ({control_failure})")
    )


@pytest.mark.parametrize("legacy", PATHS)
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no-grad"])
@pytest.mark.parametrize("call", ["positional", "keywords"])
def test_direct_apply_compiles_like_hand_written(call, grad, legacy):
    check_like_control(make_clip(legacy), call, grad)


@pytest.mark.parametrize("legacy", PATHS)
def test_direct_apply_with_every_argument_a_keyword(legacy):
    check_like_control(make_clip(legacy), "all-keywords", True)


@functools.lru_cache(maxsize=None)
def _default_call_control(call: str, grad: bool, backend: str) -> Tuple[Any, Optional[str]]:
    control = make_hand_written_clip_scale()
    run = DEFAULT_CALLS[call][0]
    return _outcome(lambda: _compiled_run(lambda t: run(control, t), _input(grad), backend))


def check_default_call_like_control(cls: Any, call: str, grad: bool, backend: str) -> None:
    """A call of the two-default class that leaves out, reorders or skips defaults compiles
    wherever the hand-written control called the same way does, with forward's math (defaults
    filled in) and the control's values and gradient; where the control fails, ``cls`` fails the
    same way or compiles correctly."""
    run, (clip, scale) = DEFAULT_CALLS[call]
    expected, control_failure = _default_call_control(call, grad, backend)
    x = _input(grad)
    got, failure = _outcome(lambda: _compiled_run(lambda t: run(cls, t), x, backend))
    if failure is None:
        y, g = got
        torch.testing.assert_close(y, x.detach().clamp(0, clip) * scale, rtol=0, atol=0)
        if grad:
            mask = ((x > 0) & (x < clip)).to(x.dtype)
            torch.testing.assert_close(g, mask * scale, rtol=0, atol=0)
        if expected is not None:
            assert torch.equal(y, expected[0])
            assert grad is False or torch.equal(g, expected[1])
        return
    assert control_failure == failure, (
        f"{call} with{'' if grad else 'out'} grad: {cls.__name__} failed to compile ({failure}) "
        "where the hand-written control "
        + ("compiles" if control_failure is None else f"fails differently ({control_failure})")
    )


@pytest.mark.parametrize("legacy", PATHS)
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no-grad"])
@pytest.mark.parametrize("call", sorted(DEFAULT_CALLS))
def test_calls_leaving_out_defaults_compile_like_hand_written(call, grad, legacy):
    check_default_call_like_control(make_clip_scale(legacy), call, grad, "aot_eager")


@pytest.mark.parametrize(
    "backend, grad",
    [("eager", True), ("eager", False), ("inductor", True)],
    ids=["eager-grad", "eager-no-grad", "inductor-grad"],
)
def test_defaults_left_out_with_each_backend(backend, grad):
    """README's call, ``Fn.apply(x)`` with its defaults left out, with the other backends (the
    default path; the ``-legacy`` sessions run the forced one)."""
    check_default_call_like_control(make_clip_scale(), "defaults-left-out", grad, backend)


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no-grad"])
def test_inductor(grad, device):
    """The default path with inductor (the forced one runs in the ``-legacy`` sessions)."""
    check_like_control(make_clip(), "positional", grad, "inductor", device.type)


#: torch 2.1-2.15 rows measured: does the control compile (keywords with grad, positional without)?
CONTROL_COMPILES = {
    (2, 1): (False, True),
    (2, 2): (False, False),
    (2, 3): (False, True),
    (2, 4): (False, True),
    (2, 5): (False, True),
    (2, 6): (False, True),
    (2, 7): (False, True),
    (2, 8): (False, True),
    (2, 9): (False, True),
    (2, 10): (False, True),
    (2, 11): (True, True),
    (2, 12): (True, True),
    (2, 13): (True, True),
    (2, 14): (True, True),
    (2, 15): (True, True),
}


@pytest.mark.skipif(
    core._TORCH_VERSION not in CONTROL_COMPILES, reason="no measurement of this torch to pin"
)
def test_control_of_the_known_limits():
    """The limits the module docstring names are torch's: pinned per measured release, so that
    the comparison above cannot silently turn into a skip."""
    keywords_with_grad = _control("keywords", True, "aot_eager")[1]
    without_grad = _control("positional", False, "aot_eager")[1]
    measured = (keywords_with_grad is None, without_grad is None)
    assert measured == CONTROL_COMPILES[core._TORCH_VERSION], (keywords_with_grad, without_grad)


@pytest.mark.parametrize("legacy", PATHS)
def test_functional_with_keywords_compiles(legacy):
    clip = compatfn.functional(make_clip(legacy))
    x = _input(True)
    y, g = _compiled_run(lambda t: clip(t, clip=0.5) * 2, x, "aot_eager")
    torch.testing.assert_close(y, x.detach().clamp(0, 0.5) * 2)
    torch.testing.assert_close(g, ((x > 0) & (x < 0.5)).to(x.dtype) * 2)


@pytest.mark.parametrize("legacy", PATHS)
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no-grad"])
def test_compiling_apply_itself(legacy, grad):
    """``torch.compile(Fn.apply)``: dynamo runs compatfn's apply, which must be traceable, with
    keywords too (it binds them itself); compared with ``torch.compile(Control.apply)``."""
    import torch._dynamo

    control = make_hand_written_clip()

    def run(op: Any, call: Callable[..., Any]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        torch._dynamo.reset()
        x = _input(grad)
        y = call(torch.compile(op, backend="aot_eager", fullgraph=True), x) * 2
        return y.detach(), (torch.autograd.grad(y.sum(), x)[0] if grad else None)

    expected, control_failure = _outcome(lambda: run(control.apply, lambda f, t: f(t, 0.5)))
    op = make_clip(legacy).apply
    calls = (lambda f, t: f(t, 0.5), lambda f, t: f(t, clip=0.5), lambda f, t: f(x=t, clip=0.5))
    for call in calls:
        got, failure = _outcome(functools.partial(run, op, call))
        if control_failure is not None:  # torch 2.2 without grad: torch's limit
            assert failure == control_failure
            continue
        assert failure is None, failure
        torch.testing.assert_close(got[0], expected[0])
        if grad:
            torch.testing.assert_close(got[1], expected[1])


@pytest.mark.parametrize("legacy", PATHS)
def test_compiling_apply_itself_compiles_the_function_as_for_the_control(legacy):
    """``torch.compile(Fn.apply)`` with grad: the output comes from the node the control's does
    (a compiled graph's where dynamo compiles the control's apply, else the Function's own):
    what core hands dynamo (NOTE: [what dynamo traces]) must not leave it uncompiled where the
    control is compiled."""
    import torch._dynamo

    def node(cls: Any) -> str:
        torch._dynamo.reset()
        y = torch.compile(cls.apply, backend="aot_eager")(_input(True), 0.5)
        return type(y.grad_fn).__name__.replace(cls.__name__, "<Fn>")

    assert node(make_clip(legacy)) == node(make_hand_written_clip())


def test_features_report_compile_support():
    """``features()["compile"]`` names what torch does with setup_context-style classes written
    without compatfn: dynamo rejects them before torch 2.4 (pytorch #118397)."""
    expected = "native" if core._TORCH_VERSION >= (2, 4) else "functional"
    assert compatfn.features()["compile"] == expected


def test_mode_names_the_form_dynamo_sees():
    """Where dynamo mishandles the setup_context style (torch 2.0-2.12), the decorated class
    itself has the legacy form: mode ``"dual"``; on every 2.x a forward with defaults too, since
    dynamo leaves them out of setup_context's inputs (a class without defaults is as written from
    torch 2.13)."""
    with_defaults, without = make_clip(), make_square()
    if core._env_forces_legacy() or not core._HAS_SETUP_CONTEXT:
        assert compatfn.mode(with_defaults) == compatfn.mode(without) == "legacy"
    else:
        assert compatfn.mode(with_defaults) == "dual"
        assert compatfn.mode(without) == ("dual" if core._TORCH_VERSION < (2, 13) else "native")
