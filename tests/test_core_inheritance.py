"""Class shapes users write: decorated subclasses of decorated classes override any subset of the
methods and get the same result on the native and the legacy path; classmethod legacy forms keep
working and gain keyword arguments; user metaclasses and ``__slots__`` never see compatfn's
internal legacy-form copy."""

from __future__ import annotations

import pytest
import torch

import compatfn
from toy_functions import FORCED, expected_mode, make_scale

NATIVE_TORCH = hasattr(torch.autograd.Function, "setup_context")
# legacy=None: the path this torch (and COMPATFN_LEGACY) picks; True: the legacy path forced.
PATHS = [None, True]


def _x() -> torch.Tensor:
    return torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)


def _run(cls):
    """(output, gradient of output.sum()) of ``cls.apply(x)`` and of ``cls.apply(x, factor=3)``."""
    results = []
    for kwargs in ({}, {"factor": 3.0}):
        x = _x()
        y = cls.apply(x, **kwargs)
        (grad,) = torch.autograd.grad(y.sum(), x)
        results.append((y.detach().tolist(), grad.tolist()))
    return results


def _family(legacy):
    """A decorated base and decorated subclasses, each overriding a different subset."""

    Base = make_scale(legacy, name="Base")

    @compatfn.function(legacy=legacy)
    class OnlyBackward(Base):
        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor * 10, None

    @compatfn.function(legacy=legacy)
    class OnlySetupContext(Base):
        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.factor = inputs[1] + 1

    @compatfn.function(legacy=legacy)
    class OnlyForward(Base):
        @staticmethod
        def forward(x, factor=2.0):
            return x * factor + 1

    @compatfn.function(legacy=legacy)
    class ForwardAndSetupContext(Base):
        @staticmethod
        def forward(x, factor=2.0, shift=0.5):
            return x * factor + shift

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.factor = inputs[1] * 2

    @compatfn.function(legacy=legacy)
    class Grandchild(OnlyBackward):  # OnlyBackward's backward, its own forward
        @staticmethod
        def forward(x, factor=2.0):
            return x * factor - 1

    return {
        "Base": Base,
        "OnlyBackward": OnlyBackward,
        "OnlySetupContext": OnlySetupContext,
        "OnlyForward": OnlyForward,
        "ForwardAndSetupContext": ForwardAndSetupContext,
        "Grandchild": Grandchild,
    }


EXPECTED = {  # [(y, dy/dx) for apply(x), (y, dy/dx) for apply(x, factor=3)], x = [1, 2]
    "Base": [([2.0, 4.0], [2.0, 2.0]), ([3.0, 6.0], [3.0, 3.0])],
    "OnlyBackward": [([2.0, 4.0], [20.0, 20.0]), ([3.0, 6.0], [30.0, 30.0])],
    "OnlySetupContext": [([2.0, 4.0], [3.0, 3.0]), ([3.0, 6.0], [4.0, 4.0])],
    "OnlyForward": [([3.0, 5.0], [2.0, 2.0]), ([4.0, 7.0], [3.0, 3.0])],
    "ForwardAndSetupContext": [([2.5, 4.5], [4.0, 4.0]), ([3.5, 6.5], [6.0, 6.0])],
    "Grandchild": [([1.0, 3.0], [20.0, 20.0]), ([2.0, 5.0], [30.0, 30.0])],
}


@pytest.mark.parametrize("legacy", PATHS, ids=["default-path", "legacy-forced"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_subclass_overriding_any_subset(legacy, name):
    cls = _family(legacy)[name]
    assert compatfn.mode(cls) == expected_mode(bool(legacy) or FORCED, defaults=True)
    assert _run(cls) == EXPECTED[name]


def test_decorating_a_subclass_leaves_the_base_alone():
    family = _family(True)
    before = _run(family["Base"])
    compatfn.function(legacy=True)(type("Late", (family["OnlyForward"],), {}))
    assert _run(family["Base"]) == before == EXPECTED["Base"]


@pytest.mark.skipif(not NATIVE_TORCH, reason="one path only on torch 1.x (no setup_context)")
def test_native_subclass_of_legacy_forced_base_is_native():
    family = _family(True)

    @compatfn.function(legacy=False)
    class Native(family["OnlyForward"]):
        pass

    assert compatfn.mode(Native) == expected_mode(defaults=True)
    assert _run(Native) == EXPECTED["OnlyForward"]


@pytest.mark.skipif(
    not compatfn.features()["forward_ad"] or compatfn.core.TORCH_VERSION < (1, 11),
    reason="forward AD with ctx.save_for_forward needs torch >= 1.11",
)
@pytest.mark.parametrize("legacy", PATHS, ids=["default-path", "legacy-forced"])
def test_subclass_overriding_jvp(legacy):
    import torch.autograd.forward_ad as fwAD

    base = _family(legacy)["Base"]

    @compatfn.function(legacy=legacy)
    class WithJvp(base):
        @staticmethod
        def jvp(ctx, tangent, _):
            return tangent * ctx.factor * 100

    x = torch.ones(2, dtype=torch.float64)
    with fwAD.dual_level():
        y = WithJvp.apply(fwAD.make_dual(x, torch.ones(2, dtype=torch.float64)))
        assert fwAD.unpack_dual(y).tangent.tolist() == [200.0, 200.0]


@pytest.mark.parametrize("legacy", PATHS, ids=["default-path", "legacy-forced"])
def test_undecorated_subclass_overriding_backward_uses_torchs_apply(legacy):
    base = _family(legacy)["Base"]

    class Undecorated(base):  # torch's own apply: positional arguments, every input given
        @staticmethod
        def backward(ctx, grad):
            return grad * 7, None

    x = _x()
    Undecorated.apply(x, 2.0).sum().backward()
    assert x.grad.tolist() == [7.0, 7.0]


@pytest.mark.parametrize("legacy", PATHS, ids=["default-path", "legacy-forced"])
def test_undecorated_subclass_overriding_only_setup_context(legacy):
    """Native and dual bases: the subclass is the setup_context-style class its author wrote,
    run by torch's apply; on the legacy path its apply refuses, naming the fix."""
    base = _family(legacy)["Base"]

    class Undecorated(base):
        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.factor = inputs[1] + 1

    x = _x()
    if expected_mode(bool(legacy) or FORCED) == "legacy":
        with pytest.raises(TypeError, match=r"Undecorated subclasses a class decorated with "):
            Undecorated.apply(x, 2.0)
        return
    y = Undecorated.apply(x, 2.0)
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert (y.tolist(), grad.tolist()) == ([2.0, 4.0], [3.0, 3.0])


# --- classmethods ------------------------------------------------------------------------------


class _Sparsemax(torch.autograd.Function):
    """Legacy form with classmethods and a cls helper, as sparsemax/entmax implementations do."""

    @classmethod
    def _scale(cls, alpha):
        return alpha * 2

    @classmethod
    def forward(cls, ctx, x, alpha=1.5):
        ctx.scale = cls._scale(alpha)
        return x * ctx.scale

    @classmethod
    def backward(cls, ctx, grad):
        return grad * ctx.scale, None


def test_classmethod_legacy_form_works_undecorated_as_in_torch():
    x = _x()
    _Sparsemax.apply(x).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_classmethod_legacy_form_gains_keyword_arguments():
    decorated = compatfn.function(type("Sparsemax", (_Sparsemax,), {}))
    assert compatfn.mode(decorated) == "legacy"
    x = _x()
    y = decorated.apply(x, alpha=2.0)
    y.sum().backward()
    assert y.tolist() == [4.0, 8.0] and x.grad.tolist() == [4.0, 4.0]
    with pytest.raises(TypeError, match=r"Sparsemax\.apply\(\) got an unexpected keyword"):
        decorated.apply(x, beta=1.0)


def test_classmethod_setup_context_style_is_refused_with_the_reason():
    with pytest.raises(TypeError, match=r"Cm: forward is a @classmethod; the setup_context style"):

        @compatfn.function
        class Cm(torch.autograd.Function):
            @classmethod
            def forward(cls, x):
                return x

            @staticmethod
            def setup_context(ctx, inputs, output):
                pass

            @staticmethod
            def backward(ctx, grad):
                return grad


# --- metaclasses and __slots__ -----------------------------------------------------------------


def test_user_metaclass_never_sees_the_internal_copy():
    registry: dict = {}

    class Registering(type(torch.autograd.Function)):
        def __init__(cls, name, bases, namespace):
            super().__init__(name, bases, namespace)
            registry.setdefault(name, []).append(cls)

    @compatfn.function
    class Registered(torch.autograd.Function, metaclass=Registering):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    y = Registered.apply(_x())
    assert registry == {"Registered": [Registered]}
    assert y.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("legacy", PATHS, ids=["default-path", "legacy-forced"])
def test_slots_are_allowed(legacy):
    @compatfn.function(legacy=legacy)
    class Slotted(torch.autograd.Function):
        __slots__ = ("a",)

        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    x = _x()
    Slotted.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
