"""A decorated Function behaves the same on every torch: the path taken, full ``inputs`` with
defaults, keyword arguments, grad mode, every ctx feature, and backward (double backward,
``once_differentiable``, nesting, padded trailing gradients), with user exceptions unchanged.

Every test runs on whatever torch the session installed; ``COMPATFN_LEGACY=1`` sessions run the same
tests through the legacy adapter.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, List, Optional, Tuple

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.function import once_differentiable

import compatfn
from compatfn import core
from toy_functions import FORCED, expected_mode, make_clip, make_scale, make_square

NATIVE_TORCH = hasattr(torch.autograd.Function, "setup_context")  # torch >= 2.0
EXPECTED_MODE = expected_mode(FORCED, defaults=True)
# torch.testing.assert_close arrived in torch 1.9; 1.8 has assert_allclose.
assert_close = getattr(torch.testing, "assert_close", None) or torch.testing.assert_allclose


#: Where the toy Functions of this module have kinks: clip values and 0.
KINKS = (0.0, 0.25, 0.5, 0.7, 1.0)


def double(*shape: int, device: str = "cpu", seed: int = 0) -> torch.Tensor:
    """Seeded float64 values that require grad, at least 0.05 away from every kink (gradcheck's
    finite differences must not straddle one)."""
    x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    for kink in KINKS:
        x = torch.where((x - kink).abs() < 0.05, x + 0.11, x)
    return x.to(device).requires_grad_()


#: y = min(max(x, 0), clip), ``clip=1.0`` by default.
ClippedReLU = make_clip(name="ClippedReLU", none_for_clip=True)


# --- paths --------------------------------------------------------------------------------


def test_mode_follows_torch_and_environment():
    assert compatfn.mode(ClippedReLU) == EXPECTED_MODE


def test_legacy_true_forces_adapter_on_any_torch():
    @compatfn.function(legacy=True)
    class Forced(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 3

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 3

    assert compatfn.mode(Forced) == "legacy"
    x = double(4)
    Forced.apply(x).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 3))


def test_legacy_false_ignores_environment(monkeypatch):
    monkeypatch.setenv("COMPATFN_LEGACY", "1")

    @compatfn.function(legacy=False)
    class Plain(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.clone()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    assert compatfn.mode(Plain) == expected_mode()


@pytest.mark.parametrize("value, forced", [("1", True), ("0", False), ("", False)])
def test_environment_variable_read_at_decoration(monkeypatch, value, forced):
    monkeypatch.setenv("COMPATFN_LEGACY", value)

    @compatfn.function
    class Env(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.clone()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    monkeypatch.setenv("COMPATFN_LEGACY", "0" if forced else "1")  # no effect after decoration
    assert compatfn.mode(Env) == expected_mode(forced)
    assert torch.equal(Env.apply(torch.ones(2)), torch.ones(2))


def test_legacy_variant_agrees_with_class(device):
    x = double(7, device=device)
    legacy = compatfn.as_legacy(ClippedReLU)
    assert compatfn.mode(legacy) == "legacy"
    assert legacy.__name__ == "ClippedReLU"
    assert issubclass(legacy, ClippedReLU)
    y1, y2 = ClippedReLU.apply(x, 0.5), legacy.apply(x, clip=0.5)
    assert torch.equal(y1, y2)
    g1 = torch.autograd.grad(y1.sum(), x)[0]
    g2 = torch.autograd.grad(y2.sum(), x)[0]
    assert torch.equal(g1, g2)
    assert compatfn.as_legacy(ClippedReLU) is legacy  # cached


# --- inputs and output ----------------------------------------------------------------------


def recorder(forward_fn, log):
    @compatfn.function
    class Recorder(torch.autograd.Function):
        forward = staticmethod(forward_fn)

        @staticmethod
        def setup_context(ctx, inputs, output):
            log.append((inputs, output))

        @staticmethod
        def backward(ctx, *grads):
            return tuple(None for _ in ctx.needs_input_grad)

    return Recorder


def test_inputs_hold_defaults_and_output_is_unwrapped(device):
    log: list = []

    def forward(x, scale=2.0, shift=None):
        return x * scale

    fn = recorder(forward, log)
    x = double(3, device=device)
    y = fn.apply(x)
    inputs, output = log[-1]
    assert type(inputs) is tuple
    assert inputs[0] is x and inputs[1:] == (2.0, None)
    assert output is y or (isinstance(output, torch.Tensor) and output.data_ptr() == y.data_ptr())
    assert isinstance(output, torch.Tensor)  # a single tensor is not wrapped in a tuple

    fn.apply(x, shift="s", scale=3.0)
    assert log[-1][0][1:] == (3.0, "s")


def test_tuple_output_passed_as_returned():
    log: list = []

    def forward(x):
        return x * 2, x * 3

    fn = recorder(forward, log)
    fn.apply(double(2))
    output = log[-1][1]
    assert type(output) is tuple and len(output) == 2


def test_non_tensor_output_passed_through(device):
    log: list = []

    def forward(x):
        return x * 2, 7

    fn = recorder(forward, log)
    _, seven = fn.apply(double(2, device=device))  # torch 1.8 itself rejects non-tensor outputs
    assert seven == 7 and log[-1][1][1] == 7


@compatfn.function
class WithCount(torch.autograd.Function):
    """Returns (2x, a count, 3x): a non-tensor output between two tensors."""

    @staticmethod
    def forward(x):
        return x * 2, int(x.numel()), x * 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.count = output[1]

    @staticmethod
    def backward(ctx, grad_a, grad_count, grad_b):
        ctx.seen = (grad_a is None, grad_count, grad_b is None)
        return grad_a * 2 + grad_b * 3


@compatfn.function
class OnlyCount(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return [int(x.numel())]  # a list: autograd never tracks one

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        raise AssertionError("no tensor output: backward never runs")


def test_non_tensor_outputs_keep_their_places_on_every_torch(device):
    x = double(4, device=device)
    a, count, b = WithCount.apply(x)
    assert count == 4 and torch.equal(a, x * 2) and torch.equal(b, x * 3)
    (a.sum() + b.sum()).backward()
    assert torch.equal(x.grad, torch.full_like(x, 5))
    assert a.grad_fn.seen == (False, None, False)  # None for the int, as torch >= 1.9 passes
    assert gradcheck(lambda t: WithCount.apply(t)[2], (double(3, device=device),))
    assert OnlyCount.apply(x) == [4]
    log: list = []
    assert recorder(lambda t: (5,), log).apply(x) == (5,) and log[-1][1] == (5,)
    assert recorder(lambda t: None, log).apply(x) is None


@compatfn.function
class DirtyWithCount(torch.autograd.Function):
    """In place, with a non-tensor output: torch raises after forward for a leaf input."""

    @staticmethod
    def forward(x):
        return x.mul_(2), 1

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])

    @staticmethod
    def backward(ctx, grad, _):
        return grad * 2


def test_non_tensor_output_never_leaks_into_the_next_call(device):
    with pytest.raises(RuntimeError, match="leaf"):
        # torch refuses an in-place leaf after forward ran
        DirtyWithCount.apply(double(3, device=device))
    x = double(4, device=device)
    assert torch.equal(ClippedReLU.apply(x), x.clamp(0, 1))  # tensors only: nothing left over
    a, count, b = WithCount.apply(double(2, device=device))
    assert count == 2 and a.shape == (2,) and b.shape == (2,)
    leaf = double(2, device=device)
    x = leaf * 1
    y, one = DirtyWithCount.apply(x)
    assert one == 1 and y is x and y.device == leaf.device
    y.sum().backward()  # mark_dirty with a non-tensor output: the gradient flows through
    assert torch.equal(leaf.grad, torch.full_like(leaf, 2))


def test_non_tensor_outputs_are_thread_safe(device):
    errors: list = []

    def worker(n: int) -> None:
        try:
            for _ in range(200):
                x = double(n, device=device)
                a, count, b = WithCount.apply(x)
                assert count == n and a.shape == (n,) and b.shape == (n,)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(1, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_varargs_forward():
    log: list = []

    def forward(x, *rest):
        return x + sum(rest)

    fn = recorder(forward, log)
    x = double(2)
    fn.apply(x, 1.0, 2.0)
    assert log[-1][0][1:] == (1.0, 2.0)
    fn.apply(x)
    assert log[-1][0][1:] == ()


# --- keyword arguments ----------------------------------------------------------------------


def test_keyword_arguments_on_every_torch(device):
    x = double(8, device=device)
    assert torch.equal(ClippedReLU.apply(x, clip=0.25), x.clamp(0, 0.25))
    assert torch.equal(ClippedReLU.apply(x=x, clip=0.25), x.clamp(0, 0.25))
    assert torch.equal(ClippedReLU.apply(x), x.clamp(0, 1.0))
    assert gradcheck(lambda t: ClippedReLU.apply(t, clip=0.7), (double(6, device=device),))


def _reference(x, clip=1.0):  # ClippedReLU.forward's signature: Python's own errors for it
    return x


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((1.0, 2.0), {}),  # one too many: "takes from 1 to 2 positional arguments but 3 were given"
        ((), {"cilp": 1.0}),
        ((), {"x": 0.0}),
    ],
)
def test_binding_errors_use_pythons_wording(args, kwargs):
    x = double(2)
    with pytest.raises(TypeError) as expected:
        _reference(x, *args, **kwargs)
    with pytest.raises(TypeError) as error:
        ClippedReLU.apply(x, *args, **kwargs)
    assert str(error.value).startswith("ClippedReLU.apply() ")
    assert str(error.value).split("() ", 1)[1] == str(expected.value).split("() ", 1)[1]


def test_missing_argument_uses_pythons_wording():
    with pytest.raises(TypeError) as expected:
        _reference(clip=1.0)
    with pytest.raises(TypeError) as error:
        ClippedReLU.apply(clip=1.0)
    assert str(error.value) == "ClippedReLU.apply() " + str(expected.value).split("() ", 1)[1]
    assert "takes from 1 to 2 positional arguments but 3 were given" in _message(
        lambda: ClippedReLU.apply(double(2), 1.0, 2.0)
    )


def _message(call):
    with pytest.raises(TypeError) as error:
        call()
    return str(error.value)


# --- grad mode ------------------------------------------------------------------------------


def test_grad_mode_off_in_forward_and_setup_context():
    seen = []

    @compatfn.function
    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(x):
            seen.append(torch.is_grad_enabled())
            return x.clone()

        @staticmethod
        def setup_context(ctx, inputs, output):
            seen.append(torch.is_grad_enabled())

        @staticmethod
        def backward(ctx, grad):
            return grad

    Probe.apply(double(2))
    assert seen == [False, False]


# --- ctx features ---------------------------------------------------------------------------


@compatfn.function
class Exp(torch.autograd.Function):
    """Saves its output; backward and jvp read it."""

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        if hasattr(ctx, "save_for_forward"):
            ctx.save_for_forward(output)
        ctx.note = "kept"  # a non-tensor attribute

    @staticmethod
    def backward(ctx, grad):
        assert ctx.note == "kept"
        (y,) = ctx.saved_tensors
        return grad * y

    @staticmethod
    def jvp(ctx, tangent):
        (y,) = ctx.saved_tensors
        return tangent * y


def test_save_output_and_double_backward(device):
    x = double(5, device=device)
    assert gradcheck(Exp.apply, (x,))
    assert gradgradcheck(Exp.apply, (x,))


@pytest.mark.skipif(
    not compatfn.features()["forward_ad"], reason="this torch has no forward AD for Functions"
)
def test_save_for_forward_and_jvp(device):
    import torch.autograd.forward_ad as fwAD

    x = torch.randn(4, dtype=torch.float64, device=device)
    t = torch.randn(4, dtype=torch.float64, device=device)
    with fwAD.dual_level():
        if core.TORCH_VERSION < (1, 11):  # forward AD of Functions, but no save_for_forward
            with pytest.raises(RuntimeError, match=r"Exp: ctx.save_for_forward needs torch >= 1"):
                Exp.apply(fwAD.make_dual(x, t))
            return
        y = Exp.apply(fwAD.make_dual(x, t))
        tangent = fwAD.unpack_dual(y).tangent
    assert_close(tangent, t * x.exp())


def test_save_for_forward_is_accepted_everywhere():
    @compatfn.function
    class SavesForForward(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_forward(inputs[0])  # absent from torch < 1.11's ctx: compatfn accepts it
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    x = double(3)
    SavesForForward.apply(x).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2))


@compatfn.function
class InplaceDouble(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.mul_(2)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_mark_dirty(device):
    leaf = double(4, device=device)
    x = leaf.clone()
    y = InplaceDouble.apply(x)
    assert y is x
    assert x._version > 0
    y.sum().backward()
    assert torch.equal(leaf.grad, torch.full_like(leaf, 2))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        InplaceDouble.apply(double(2, device=device))


def test_mark_non_differentiable_and_materialize_grads():
    seen = []

    @compatfn.function
    class SortWithIndex(torch.autograd.Function):
        @staticmethod
        def forward(x):
            values, index = x.sort()
            return values, index

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, index = output
            ctx.mark_non_differentiable(index)
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(index)
            ctx.size = inputs[0].shape

        @staticmethod
        def backward(ctx, grad_values, grad_index):
            seen.append((grad_values is None, grad_index is None))
            (index,) = ctx.saved_tensors
            out = torch.zeros(ctx.size, dtype=grad_values.dtype)
            return out.scatter(0, index, grad_values)

    x = double(5)
    values, index = SortWithIndex.apply(x)
    assert not index.requires_grad and values.requires_grad
    values.sum().backward()
    assert seen == [(False, True)]  # not materialized: the unused index gradient stays None
    assert torch.equal(x.grad, torch.ones_like(x))


def test_needs_input_grad():
    seen = []

    @compatfn.function
    class Mul(torch.autograd.Function):
        @staticmethod
        def forward(a, b, scale=1.0):
            return a * b * scale

        @staticmethod
        def setup_context(ctx, inputs, output):
            a, b, scale = inputs
            ctx.save_for_backward(a, b)
            ctx.scale = scale

        @staticmethod
        def backward(ctx, grad):
            seen.append(tuple(ctx.needs_input_grad))
            a, b = ctx.saved_tensors
            grad_a = grad * b * ctx.scale if ctx.needs_input_grad[0] else None
            grad_b = grad * a * ctx.scale if ctx.needs_input_grad[1] else None
            return grad_a, grad_b, None

    a, b = double(3), torch.randn(3, dtype=torch.float64)
    Mul.apply(a, b, scale=2.0).sum().backward()
    assert seen == [(True, False, False)]
    assert torch.equal(a.grad, 2 * b)


# --- backward: double backward, once_differentiable, nesting, gradient count -------------------


@compatfn.function
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * Square.apply(x)  # another compatfn Function inside backward


Square = make_square()


def test_double_backward_through_nested_functions(device):
    x = double(4, device=device)
    assert gradcheck(Cube.apply, (x,))
    assert gradgradcheck(Cube.apply, (x,))
    (g,) = torch.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    assert_close(gg, 6 * x.detach())


def test_once_differentiable():
    @compatfn.function
    class Once(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    x = double(3)
    assert gradcheck(Once.apply, (x,))
    v = torch.ones(3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(Once.apply(x), x, grad_outputs=v, create_graph=True)
    with pytest.raises(RuntimeError, match=r"(?i)once_differentiable|twice"):
        g.sum().backward()


def test_missing_trailing_gradient_is_padded(device):
    short = make_scale(name="Short", none_for_factor=False)  # no gradient for ``factor``
    x = double(3, device=device)
    short.apply(x).sum().backward()  # torch >= 2.2 alone: "incorrect number of gradients"
    assert torch.equal(x.grad, torch.full_like(x, 2))
    x.grad = None
    short.apply(x, factor=torch.tensor(3.0, dtype=torch.float64, device=device)).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 3))


def test_missing_gradient_that_is_needed_raises_naming_parameter():
    short = make_scale(name="Short", none_for_factor=False)  # no gradient for ``factor``
    x, factor = double(3), torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Short\.backward returned 1 gradient.*'factor'"):
        short.apply(x, factor).sum().backward()


# --- user exceptions and gradient padding on every torch ------------------------------------------


class _Boom(TypeError):
    pass


def _raising(where):
    def fail(*_):
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise _Boom(f"boom in {where}") from inner

    @compatfn.function
    class Raising(torch.autograd.Function):
        @staticmethod
        def forward(x):
            if where == "forward":
                fail()
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            if where == "setup_context":
                fail()

        @staticmethod
        def backward(ctx, grad):
            if where == "backward":
                fail()
            return grad * 2

    return Raising


@pytest.mark.parametrize("where", ["forward", "setup_context", "backward"])
def test_user_exceptions_reach_the_caller_unchanged(where):
    cls = _raising(where)
    with pytest.raises(_Boom) as error:
        cls.apply(double(2)).sum().backward()
    assert str(error.value) == f"boom in {where}"
    assert isinstance(error.value.__cause__, KeyError)
    assert error.value.__context__ is error.value.__cause__
    assert error.value.__suppress_context__  # "raise ... from inner" as the user wrote it


@compatfn.function
class TwoInputs(torch.autograd.Function):
    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.y = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.y  # no gradient for y, which needs none


def test_missing_trailing_gradient_padded_without_defaults(device):
    x, y = double(3, device=device), torch.full((3,), 4.0, dtype=torch.float64, device=device)
    TwoInputs.apply(x, y).sum().backward()
    assert torch.equal(x.grad, y)
    with pytest.raises(RuntimeError, match=r"TwoInputs\.backward returned 1 gradient.*'y'"):
        TwoInputs.apply(x, y.requires_grad_()).sum().backward()


def _warning_places(op: Callable[..., Any]) -> List[Tuple[str, int]]:
    """Where ``warnings.warn(..., stacklevel=2)`` in forward, then backward, points, for a call
    of ``op`` (both Functions are called from the same line)."""
    x = torch.ones(2, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op(x, 2.0).sum().backward()
    return [(w.filename, w.lineno) for w in caught]


def _warning_classes(defaults: bool, legacy: Optional[bool]) -> Tuple[Any, Any]:
    """A hand-written legacy Function and a decorated class of the same math, each warning with
    ``stacklevel=2`` in forward and in backward (``defaults``: forward has one)."""

    class HandWritten(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor=2.0):
            warnings.warn("in forward", stacklevel=2)
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad):
            warnings.warn("in backward", stacklevel=2)
            return grad * ctx.factor, None

    class Decorated(torch.autograd.Function):
        @staticmethod
        def forward(x, factor):
            warnings.warn("in forward", stacklevel=2)
            return x * factor

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, factor = inputs
            ctx.factor = factor

        @staticmethod
        def backward(ctx, grad):
            warnings.warn("in backward", stacklevel=2)
            return grad * ctx.factor, None

    if defaults:
        Decorated.forward = staticmethod(_with_default(Decorated.forward))
    return HandWritten, compatfn.function(Decorated, legacy=legacy)


def _with_default(forward: Callable[..., Any]) -> Callable[..., Any]:
    forward.__defaults__ = (2.0,)
    return forward


@pytest.mark.parametrize("legacy", [None, True], ids=["default-path", "legacy-forced"])
@pytest.mark.parametrize("defaults", [False, True], ids=["no-default", "default"])
@pytest.mark.parametrize("how", ["apply", "functional"])
def test_a_warning_points_where_the_hand_written_functions_does(how, defaults, legacy):
    """``stacklevel=2`` in forward points at the caller of apply where torch's apply is C (1.x,
    2.15+) and at torch's Python apply on 2.0-2.14, in backward at torch's backward node: the same
    for a decorated class, whatever frames compatfn adds (NOTE: [the frames of a call])."""
    hand_written, decorated = _warning_classes(defaults, legacy)
    op = compatfn.functional(decorated) if how == "functional" else decorated.apply
    expected = _warning_places(hand_written.apply)
    assert len(expected) == 2, expected
    assert _warning_places(op) == expected
