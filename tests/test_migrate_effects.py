"""compatfn.migrate._effects: a ctx value computed again in setup_context only where forward's
later calls cannot have changed what it reads (See NOTE: [calls forward makes]). Each case is
migrated and run against the original: outputs and gradients bit for bit."""

from __future__ import annotations

import textwrap
from typing import Any, Callable, Dict, Optional

import pytest
import torch

pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from compatfn.migrate import migrate_source

# Module-level helpers of the cases: a Triton-style launcher writing into its output buffer,
# helpers changing their argument, module state and a counter.
_PRELUDE = """
import itertools

import torch


class _Grid:
    def __getitem__(self, grid):
        def launch(x, out, k):
            out.copy_(x * k)

        return launch


_kernel = _Grid()
_STATE = {"scale": 2.0}
_COUNTER = itertools.count()


def _scale(t, k):
    t.mul_(k)


def _scale_all(ts, k):
    for t in ts:
        t.mul_(k)


def _bump():
    _STATE["scale"] += 1.0
"""


def run(source: str, name: str, *inputs: torch.Tensor, within: Optional[Callable] = None) -> Any:
    namespace: Dict[str, Any] = {"__name__": "effects_case"}
    exec(compile(source, "<case>", "exec"), namespace)
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    with within() if within is not None else _nothing():
        out = namespace[name].apply(*leaves)
    grads = torch.autograd.grad(out.float().sum(), leaves)
    return out.detach(), grads


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def migrated_alike(forward: str, backward: str, name: str = "Case", **kw: Any) -> str:
    """Migrate a class with ``forward``'s and ``backward``'s bodies; assert it migrated and
    behaves as the original (outputs and gradients bit for bit); the new source."""
    return _compare(_module(forward, backward, name), name, **kw)


def _compare(source: str, name: str, within: Optional[Callable] = None, inputs: Any = None) -> str:
    result = migrate_source(source, "case.py")
    assert result.migrated == [name], result.refusals
    inputs = inputs or (torch.arange(1.0, 5.0),)
    (out_a, grads_a), (out_b, grads_b) = (
        run(text, name, *inputs, within=within) for text in (source, result.new_source)
    )
    assert torch.equal(out_a, out_b) and out_a.dtype == out_b.dtype
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(grads_a, grads_b))
    return result.new_source


@pytest.mark.parametrize(
    "change",
    [
        "_kernel[(1,)](x, y, 3.0)",  # a kernel launch writing into y
        "_scale(y, 3.0)",  # a helper changing its argument
        "_scale(t=y, k=3.0)",
        "_scale_all([y], 3.0)",  # inside a list
        "torch._foreach_mul_([y], 3.0)",
        "list(map(lambda t: t.mul_(3.0), [y]))",
        "getattr(y, 'mul_')(3.0)",
        "y.__setitem__(0, 5.0)",
    ],
)
def test_a_value_read_before_a_call_that_may_change_it_is_kept_from_then(change):
    # The codemod computed ctx.total again in setup_context, after the change (a Triton launch
    # into y gave another count): a silently different gradient.
    new = migrated_alike(
        f"""
        y = torch.zeros_like(x) + x
        ctx.total = float((y != 0).sum() + y.sum())
        {change}
        return y
        """,
        "return g * ctx.total",
    )
    assert "total = float(" in new.split("def setup_context")[0]


def test_module_state_a_later_call_changes_is_read_in_forward():
    migrated_alike(
        """
        ctx.scale = _STATE["scale"]
        _bump()
        return x * 2
        """,
        "return g * ctx.scale",
    )


def test_a_value_with_an_effect_is_computed_once_in_forward():
    # next() moved to setup_context ran after forward's own next(): another id.
    new = migrated_alike(
        """
        ctx.call_id = next(_COUNTER)
        y = x * next(_COUNTER)
        return y
        """,
        "return g * ctx.call_id",
    )
    assert "next(_COUNTER)" not in new.split("def setup_context")[1]


def test_a_closure_value_a_helper_rebinds_is_read_in_forward():
    source = f"""{_PRELUDE}

def make():
    scale = 2.0

    def set_scale(v):
        nonlocal scale
        scale = v

    class Case(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.scale = scale
            set_scale(20.0)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * ctx.scale

    return Case


Case = make()
"""
    _compare(source, "Case")


def test_metadata_and_identity_are_still_read_in_setup_context():
    # A kernel writing y's values leaves its shape and which object it is: no intermediate.
    new = migrated_alike(
        """
        y = torch.zeros_like(x)
        ctx.shape = y.shape
        ctx.size = y.size(0)
        ctx.none = y is None
        ctx.held = [y, x]
        _kernel[(1,)](x, y, 3.0)
        return y
        """,
        "return g * ctx.size + (ctx.held[0] * 0).sum()",
    )
    assert "intermediates" not in new
    assert "ctx.shape = y.shape" in new.split("def setup_context")[1]


def test_a_condition_a_later_call_may_change_is_recorded_in_forward():
    new = migrated_alike(
        """
        y = x.clone()
        if y.sum() > 0:
            ctx.sign = 1.0
        else:
            ctx.sign = -1.0
        _scale(y, -3.0)
        return y
        """,
        "return g * ctx.sign",
    )
    assert "branch_taken" in new


@pytest.mark.skipif(
    not hasattr(getattr(torch, "amp", None), "custom_fwd"),
    reason=f"torch {torch.__version__} has no torch.amp.custom_fwd(device_type=...) (torch >= 2.4)",
)
def test_a_value_computed_under_custom_fwd_cast_inputs_is_computed_in_forward():
    # forward runs with autocast off; setup_context under the caller's autocast: torch.mm
    # computed there gave a bfloat16 product where the original saved a float32 one.
    source = """
import torch
from torch.amp import custom_bwd, custom_fwd


class Case(torch.autograd.Function):
    @staticmethod
    @custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, x, w):
        ctx.save_for_backward(torch.mm(x, w))
        ctx.autocast_on = torch.is_autocast_enabled("cpu")
        return torch.mm(x, w)

    @staticmethod
    @custom_bwd(device_type="cpu")
    def backward(ctx, g):
        (xw,) = ctx.saved_tensors
        s = xw.double().sum() * (2.0 if ctx.autocast_on else 1.0)
        return torch.ones(2, 3) * s, torch.ones(3, 2) * s
"""
    x = torch.arange(6.0).reshape(2, 3) / 7
    w = torch.arange(6.0).reshape(3, 2) / 5
    _compare(
        source, "Case", within=lambda: torch.autocast("cpu", dtype=torch.bfloat16), inputs=(x, w)
    )


def test_a_value_a_later_call_in_its_block_may_change_is_refused_with_a_fix_that_works():
    # In a split if, setup_context ran the ctx statement after the whole block: after the call.
    refused = """
        y = x * 2
        if x.sum() > 0:
            ctx.save_for_backward(y * 2)
            _scale(y, 3.0)
        return y
        """
    result = migrate_source(_module(refused), "case.py")
    assert result.migrated == [] and "hands to a call later" in result.refusals[0].reason
    migrated_alike(
        """
        y = x * 2
        if x.sum() > 0:
            doubled = y * 2
            ctx.save_for_backward(doubled)
            _scale(y, 3.0)
        return y
        """,
        "return g * ctx.saved_tensors[0].sum()",
    )


def _module(forward: str, backward: str = "return g", name: str = "Case") -> str:
    """The prelude and a legacy Function ``name`` with these bodies (indented as written)."""
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    back = textwrap.indent(textwrap.dedent(backward).strip(), " " * 8)
    return (
        f"{_PRELUDE}\n\nclass {name}(torch.autograd.Function):\n"
        f"    @staticmethod\n    def forward(ctx, x):\n{body}\n\n"
        f"    @staticmethod\n    def backward(ctx, g):\n{back}\n"
    )
