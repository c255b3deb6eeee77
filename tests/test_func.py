"""Decorated Functions work under torch.func (vmap, grad, jacrev, jvp) exactly as undecorated
ones, keyword arguments included; where they cannot (legacy path, torch 1.13), the error says so."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import compatfn
from compatfn import core
from toy_functions import FORCED, expected_mode

HAS_FUNC = compatfn.features()["torch_func"]


def make_scale(decorate: bool, vmap_rule: str):
    """y = x * x * scale, with a generated vmap rule or a hand-written vmap staticmethod."""

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(x, scale=1.0):
            return x * x * scale

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, scale = inputs
            ctx.save_for_backward(x)
            ctx.save_for_forward(x)
            ctx.scale = scale

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad * ctx.scale, None

        @staticmethod
        def jvp(ctx, tangent, _):
            (x,) = ctx.saved_tensors
            return 2 * x * tangent * ctx.scale

    if vmap_rule == "generate":
        Scale.generate_vmap_rule = True
    else:

        def vmap(info, in_dims, x, scale=1.0):
            return Scale.apply(x, scale), in_dims[0]

        Scale.vmap = staticmethod(vmap)
    return compatfn.function(Scale) if decorate else Scale


TRANSFORMS = {
    "vmap": lambda f, x: torch.func.vmap(f)(x),
    "grad": lambda f, x: torch.func.grad(lambda t: f(t).sum())(x),
    "jacrev": lambda f, x: torch.func.jacrev(f)(x),
    "jvp": lambda f, x: torch.func.jvp(f, (x,), (torch.ones_like(x),))[1],
    "vmap-grad": lambda f, x: torch.func.vmap(torch.func.grad(lambda t: f(t).sum()))(x),
}


@pytest.mark.skipif(not HAS_FUNC, reason=f"torch {torch.__version__} has no torch.func")
@pytest.mark.parametrize("vmap_rule", ["generate", "staticmethod"])
@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_transforms_match_undecorated(transform, vmap_rule):
    decorated = make_scale(True, vmap_rule)
    if expected_mode(FORCED) == "legacy":
        with pytest.raises(RuntimeError, match=r"runs on the legacy path .* torch\.func"):
            TRANSFORMS[transform](decorated.apply, torch.randn(3, 4))
        return
    plain = make_scale(False, vmap_rule)
    x = torch.randn(3, 4, dtype=torch.float64)
    run = TRANSFORMS[transform]
    expected = run(lambda t: plain.apply(t, 2.0), x)
    assert torch.equal(run(lambda t: decorated.apply(t, 2.0), x), expected)
    assert torch.equal(run(lambda t: decorated.apply(t, scale=2.0), x), expected)
    if transform == "grad":
        assert torch.allclose(expected, 4 * x)


@pytest.mark.skipif(not HAS_FUNC, reason=f"torch {torch.__version__} has no torch.func")
def test_first_transform_in_fresh_process():
    """torch 2.3.x fails the first transform of a process unless dynamo was imported (#128607).
    ``legacy=False``: the transform runs in the ``-legacy`` sessions too."""
    code = textwrap.dedent(
        """
        import os, torch, compatfn

        @compatfn.function(legacy=False)
        class Sq(torch.autograd.Function):
            generate_vmap_rule = True

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

        assert compatfn.mode(Sq) != "legacy", compatfn.mode(Sq)
        print(torch.func.vmap(Sq.apply)(torch.ones(2, 3)).sum().item())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "6.0"


@pytest.mark.skipif(HAS_FUNC, reason="this torch has torch.func (torch >= 2.0)")
def test_transforms_on_torch_1x_raise_a_clear_error():
    decorated = make_scale(True, "generate")
    functorch_bundled = hasattr(torch._C, "_are_functorch_transforms_active")  # torch 1.13
    if not functorch_bundled:
        pytest.skip(f"torch {torch.__version__} has no transforms at all (neither functorch)")
    import functorch

    with pytest.raises(RuntimeError, match=r"from torch 2\.0 on \(torch\.func\)"):
        functorch.vmap(decorated.apply)(torch.randn(3, 4))
    assert core._TORCH_VERSION < (2, 0)


needs_func = pytest.mark.skipif(not HAS_FUNC, reason=f"torch {torch.__version__} has no torch.func")


def _exp_with_intermediate():
    """exp(x), returning exp(x) again as an intermediate that setup_context saves."""

    @compatfn.function(intermediates=1, legacy=False)
    class Exp(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            y = x.exp()
            return y, y.detach()

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, saved = output
            ctx.save_for_backward(saved)
            ctx.save_for_forward(saved)

        @staticmethod
        def backward(ctx, grad):  # one gradient: the intermediate's never reaches backward
            (saved,) = ctx.saved_tensors
            return grad * saved

        @staticmethod
        def jvp(ctx, tangent):
            (saved,) = ctx.saved_tensors
            return tangent * saved

    return Exp


@needs_func
@pytest.mark.parametrize("transform", ["jacrev", "jvp", "vmap", "grad"])
def test_intermediates_under_torch_func(transform):
    """Transforms see the public output only; the intermediate gets no gradient (backward and
    jvp take and give the public output's alone)."""
    core._prepare_torch_func()
    exp = _exp_with_intermediate()
    assert compatfn.mode(exp) == "dual"
    x = torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    run = TRANSFORMS[transform]
    torch.testing.assert_close(run(exp.apply, x), run(torch.exp, x))


@needs_func
def test_decorated_subclass_overriding_vmap():
    """The subclass's own vmap runs under vmap, on every path torch.func supports."""
    core._prepare_torch_func()
    seen = []
    base = make_scale(True, "generate")

    @compatfn.function(legacy=False)
    class Sub(base):
        generate_vmap_rule = False

        @staticmethod
        def vmap(info, in_dims, x, scale=1.0):
            seen.append(in_dims)
            return Sub.apply(x.movedim(in_dims[0], 0), scale), 0

    x = torch.randn(3, 4, dtype=torch.float64)
    out = torch.func.vmap(lambda t: Sub.apply(t, 2.0))(x)
    torch.testing.assert_close(out, x * x * 2)
    assert seen == [(0, None)]
