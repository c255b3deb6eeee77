"""Decoration leaves the user's class intact: same name, docs, signature, pickling and grad_fn;
bad classes fail at decoration with a message naming the fix; legacy-form classes keep working;
torch is never patched; calls are thread-safe and leak no memory; ``features()`` reports data."""

from __future__ import annotations

import copy
import gc
import inspect
import pickle
import re
import subprocess
import sys
import threading
import warnings
import weakref
from typing import Any, Tuple

import pytest
import torch

import compatfn
from compatfn import core
from toy_functions import FORCED, HandWrittenClip, expected_mode, make_scale

NATIVE_TORCH = hasattr(torch.autograd.Function, "setup_context")


@compatfn.function
class Scale(torch.autograd.Function):
    """Multiply by a constant."""

    @staticmethod
    def forward(x, factor=2.0):
        """Return x * factor."""
        return x * factor

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


# --- class hygiene --------------------------------------------------------------------------


def test_decorator_returns_the_same_class():
    assert Scale.__name__ == "Scale"
    assert Scale.__qualname__ == "Scale"
    assert Scale.__module__ == __name__
    assert Scale.__doc__ == "Multiply by a constant."
    assert issubclass(Scale, torch.autograd.Function)
    assert Scale.forward.__doc__ == "Return x * factor."


def test_grad_fn_name():
    y = Scale.apply(torch.ones(2, requires_grad=True))
    assert type(y.grad_fn).__name__ == "ScaleBackward"
    assert y.grad_fn.name() == "ScaleBackward"


def test_signature_shows_user_parameters():
    shown = list(inspect.signature(Scale.forward).parameters)
    if expected_mode(FORCED, defaults=True) == "native":
        assert shown == ["x", "factor"]
    else:  # the legacy form's adapter; the user's forward is kept as its __wrapped__
        assert shown == ["ctx", "x", "factor"]
        assert list(inspect.signature(Scale.forward.__wrapped__).parameters) == ["x", "factor"]
    assert "x, factor=2.0" in Scale.apply.__doc__


@pytest.mark.parametrize(
    "call",
    [
        lambda cls, x: cls.forward(x),
        lambda cls, x: cls.forward(x, 3.0),
        lambda cls, x: cls.forward(x, factor=3.0),
    ],
    ids=["defaults-left-out", "positional", "keyword"],
)
def test_forward_called_directly(call):
    """README's rule 5: where the class has the legacy form (every torch for a forward with
    defaults), a direct ``Fn.forward(...)`` is a TypeError that says to call ``Fn.apply``, never
    a call of the user's forward with shifted arguments."""
    x = torch.ones(2)
    assert compatfn.mode(Scale) != "native"
    match = r"Scale.forward was called directly.*Call Scale.apply"
    if core._DYNAMO_GUARDS_DEFAULTS_WRONGLY:  # required parameters have no sentinel default
        match += "|missing 1 required positional argument: 'x'"
    with pytest.raises(TypeError, match=match):
        call(Scale, x)
    assert torch.equal(Scale.apply(x), x * 2)  # the class still works


@compatfn.function
class Sum(torch.autograd.Function):
    """``x * 2 + sum(rest)``: a forward with ``*args``."""

    @staticmethod
    def forward(x, *rest):  # type: ignore[no-untyped-def,override]
        return x * 2 + sum(rest)

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
        ctx.n = len(inputs)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
        return (grad * 2,) + (grad,) * (ctx.n - 1)


@pytest.mark.parametrize("extra", [0, 1, 2, 3])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_forward_with_varargs_called_directly(extra, compiled):
    """Rule 5 for a forward with ``*args``, in compiled code too: on torch 2.6-2.14 the legacy
    form runs forward without ctx only for the call dynamo itself makes so (NOTE: [dynamo counts
    forward's parameters]): a direct ``Fn.forward(...)`` raises, whatever its count, except the
    one count dynamo's own call has inside compiled code (ctx, x and two more: indistinguishable
    from it), where it returns what ``apply`` returns. Eager: the TypeError naming rule 5."""
    if compatfn.mode(Sum) == "native":
        pytest.skip(f"Sum keeps the setup_context style on torch {torch.__version__}")
    if compiled and core._dynamo_unsupported() is not None:
        pytest.skip(core._dynamo_unsupported() or "")
    args = [torch.ones(2)] + [torch.full((2,), 10.0 * (i + 1)) for i in range(extra)]
    call = (lambda *t: Sum.forward(*t)) if not compiled else _compiled(lambda *t: Sum.forward(*t))
    if compiled and core._DYNAMO_COUNTS_PARAMETERS and len(args) == 3:
        assert torch.equal(call(*args), Sum.apply(*args))
        return
    if compiled:  # dynamo reports the TypeError in its words, which differ per release
        with pytest.raises((TypeError, RuntimeError)):  # dynamo's errors are RuntimeErrors
            call(*args)
        return
    match = r"Sum.forward was called directly"
    if core._DYNAMO_GUARDS_DEFAULTS_WRONGLY and not extra:  # x has no sentinel default there
        match += "|missing 1 required positional argument: 'x'"
    with pytest.raises(TypeError, match=match):
        call(*args)


def _compiled(fn: Any) -> Any:
    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(fn, backend="eager", fullgraph=True)


def test_pickled_by_reference():
    assert pickle.loads(pickle.dumps(Scale)) is Scale


def test_decorating_twice_is_harmless():
    again = compatfn.function(Scale)
    assert again is Scale
    x = torch.ones(3, requires_grad=True)
    Scale.apply(x).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2))


def test_decorating_twice_with_contradicting_mode_raises():
    if compatfn.mode(Scale) == "legacy":
        pytest.skip("Scale already runs on the legacy path here (torch 1.x or COMPATFN_LEGACY=1)")
    with pytest.raises(
        TypeError, match=f"Scale: already decorated in {expected_mode(defaults=True)} mode"
    ):
        compatfn.function(legacy=True)(Scale)


def test_legacy_form_class_is_kept_and_gains_keywords():
    @compatfn.function
    class OldStyle(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor=2.0, offset=0.0):
            ctx.factor = factor
            return x * factor + offset

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor  # one gradient, as torch accepts for apply(x)

    assert compatfn.mode(OldStyle) == "legacy"
    assert list(inspect.signature(OldStyle.forward).parameters) == ["ctx", "x", "factor", "offset"]
    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    OldStyle.apply(x).sum().backward()  # defaults are not added to the inputs of a legacy form
    assert torch.equal(x.grad, torch.full_like(x, 2))
    assert torch.equal(OldStyle.apply(x, offset=1.0, factor=3.0), x * 3 + 1)
    with pytest.raises(TypeError, match=r"OldStyle.apply\(\) got an unexpected keyword"):
        OldStyle.apply(x, scale=1.0)


def test_undecorated_subclass_behaves_as_torch_would():
    class Sub(Scale):
        pass

    x = torch.ones(1, requires_grad=True)
    assert torch.equal(Sub.apply(x, 3.0), torch.full((1,), 3.0))  # torch's own apply
    assert Sub.__dict__["apply"] is not Scale.__dict__["apply"]  # not bound to Scale's forward

    class Overrides(Scale):
        @staticmethod
        def forward(x, factor=2.0):
            return x * factor + 1

    if expected_mode(FORCED) != "legacy":  # the setup_context-style class its author wrote
        assert torch.equal(Overrides.apply(x, 3.0), torch.full((1,), 4.0))
    else:
        with pytest.raises(TypeError, match="Overrides subclasses a class decorated with @func"):
            Overrides.apply(x, 3.0)


def test_subclass_keeps_users_init_subclass():
    seen = []

    @compatfn.function
    class Base(torch.autograd.Function):
        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            seen.append(cls.__name__)

        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    class Child(Base):
        pass

    assert seen == ["Child"]
    assert torch.equal(Child.apply(torch.ones(1)), torch.full((1,), 2.0))


def test_decorated_subclass_gets_its_own_binding():
    @compatfn.function
    class Shifted(Scale):
        @staticmethod
        def forward(x, factor=2.0, shift=1.0):
            return x * factor + shift

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.factor = inputs[1]

    assert torch.equal(Shifted.apply(torch.zeros(1), shift=5.0), torch.full((1,), 5.0))
    assert torch.equal(Scale.apply(torch.ones(1)), torch.full((1,), 2.0))


# --- decoration errors ----------------------------------------------------------------------


def _bad(**namespace):
    base = {
        "forward": staticmethod(lambda x: x),
        "setup_context": staticmethod(lambda ctx, inputs, output: None),
        "backward": staticmethod(lambda ctx, grad: grad),
    }
    base.update(namespace)
    return type("Bad", (torch.autograd.Function,), {k: v for k, v in base.items() if v})


def _legacy_forward(ctx, x):
    return x


def _kwonly(x, *, scale=1.0):
    return x


def _varkw(x, **options):
    return x


class _NotAFunction:
    pass


@pytest.mark.parametrize(
    "target, pattern",
    [
        (lambda x: x, "got the function <lambda>"),
        (_NotAFunction, "_NotAFunction: @function needs a torch.autograd.Function subclass"),
        (_bad(forward=staticmethod(_legacy_forward)), "forward takes ctx but setup_context"),
        (_bad(backward=None), "Bad: no backward"),
        (_bad(forward=lambda x: x), "Bad: forward must be a @staticmethod, found a function"),
        (_bad(setup_context=classmethod(lambda c, a, b, d: 0)), "setup_context is a @classmethod"),
        (_bad(backward=lambda ctx, g: g), "backward must be a @staticmethod"),
        (_bad(forward=staticmethod(_kwonly)), "keyword-only parameter 'scale'"),
        (_bad(forward=staticmethod(_varkw)), r"keyword-only parameter '\*\*options'"),
        (_bad(setup_context=staticmethod(lambda ctx: 0)), r"accept \(ctx, inputs, output\)"),
        (_bad(setup_context=None), "forward's first parameter is 'x', not ctx, and there is no"),
    ],
)
def test_decoration_errors_name_class_and_fix(target, pattern):
    with pytest.raises(TypeError, match=pattern) as error:
        compatfn.function(target)
    # the problem, then a sentence saying how to fix it
    sentences = re.split(r"(?<=\.) (?=[A-Z`])", str(error.value))
    assert len(sentences) >= 2 and sentences[-1].endswith("."), sentences


def test_torch_custom_fwd_on_ctxless_forward_is_rejected():
    decorate = getattr(getattr(torch, "amp", None), "custom_fwd", None)
    if decorate is None:
        decorate = torch.cuda.amp.custom_fwd  # torch < 2.4
        kwargs: dict = {}
    else:
        kwargs = {"device_type": "cpu"}
    forward = decorate(**kwargs)(lambda x: x) if kwargs else decorate(lambda x: x)
    with pytest.raises(TypeError, match=r"Bad: forward is decorated with torch's custom_fwd"):
        compatfn.function(_bad(forward=staticmethod(forward)))


# --- no patching, thread safety, memory ------------------------------------------------------


def test_import_has_no_side_effects():
    code = (
        "import torch, torch.autograd.function as F\n"
        "before = {k: v for k, v in vars(torch.autograd.Function).items()}\n"
        "before_fn = dict(vars(F))\n"
        "import compatfn, compatfn.core\n"
        "after = dict(vars(torch.autograd.Function))\n"
        "assert before == after, set(before) ^ set(after)\n"
        "assert before_fn == dict(vars(F))\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_torch_is_not_patched_by_decoration():
    before = dict(vars(torch.autograd.Function))

    @compatfn.function
    class Local(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.clone()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    Local.apply(torch.ones(1, requires_grad=True)).sum().backward()
    assert dict(vars(torch.autograd.Function)) == before


def test_thread_safe():
    errors = []

    def work(seed):
        try:
            gen = torch.Generator().manual_seed(seed)
            for _ in range(50):
                x = torch.randn(16, generator=gen, dtype=torch.float64, requires_grad=True)
                factor = float(seed % 5 + 1)
                y = Scale.apply(x, factor=factor) if seed % 2 else Scale.apply(x, factor)
                (g,) = torch.autograd.grad(y.sum(), x)
                assert torch.equal(g, torch.full_like(x, factor))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@compatfn.function
class SaveInput(torch.autograd.Function):
    @staticmethod
    def forward(x, factor=1.0):
        return x * factor

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.extra = inputs[0] * 1  # a tensor kept as a plain attribute

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.extra / x.clamp(min=1)


def test_no_reference_cycle_keeps_saved_tensors_alive():
    gc.collect()
    gc.disable()
    try:
        x = torch.ones(1000, requires_grad=True)
        y = SaveInput.apply(x, factor=2.0)
        ref = weakref.ref(y.grad_fn)
        y.sum().backward()
        del y
        assert ref() is None  # freed by reference counting alone, no cycle
    finally:
        gc.enable()


# --- features ------------------------------------------------------------------------------


def test_features_detected():
    found = compatfn.features()
    assert found["torch"] == str(torch.__version__)
    assert found["setup_context"] is NATIVE_TORCH
    expected_keys = {
        "setup_context",
        "apply_kwargs",
        "default_binding",
        "forward_ad",
        "torch_func",
        "compile",
        "export",
        "amp_device_generic",
        "cpu_autocast",
    }
    assert expected_keys <= set(found)
    # Cross-check each detection against a direct observation on this torch.
    assert found["default_binding"] is (core._TORCH_VERSION >= (2, 2))
    assert found["apply_kwargs"] is (core._TORCH_VERSION >= (2, 13))
    assert found["torch_func"] is (core._TORCH_VERSION >= (2, 0))
    assert found["amp_device_generic"] is (core._TORCH_VERSION >= (2, 4))
    # Measured: no torch.compile before 2.0 nor on torch 2.0 with Python 3.11; torch 2.1-2.3
    # compile only the legacy form (pytorch #118397); 2.4+ the setup_context style too.
    release, python = core._TORCH_VERSION, sys.version_info[:2]
    if release < (2, 0) or (release == (2, 0) and python >= (3, 11)):
        assert found["compile"] == "unavailable"
    else:
        assert found["compile"] == ("functional" if release < (2, 4) else "native")
    # Measured: torch.export from 2.1, its strict= parameter (non-strict export) from 2.2.
    expected_export = ("strict",) if release == (2, 1) else ("strict", "non-strict")
    if release < (2, 1):
        expected_export = ()
    assert found["export"] == expected_export


# --- pickling, builtins, re-decoration, environment ----------------------------------------------


def test_apply_and_functional_pickle_and_copy_by_reference():
    op = compatfn.functional(Scale)
    assert compatfn.functional(Scale) is op
    for obj in (Scale.apply, op):  # apply bound to Scale (torch 1.x), as torch's own: equal copies
        same = (lambda a, b: a == b) if obj is Scale.apply else (lambda a, b: a is b)
        assert same(pickle.loads(pickle.dumps(obj)), obj)
        assert same(copy.deepcopy(obj), obj) and same(copy.copy(obj), obj)
    x = torch.ones(2)
    assert torch.equal(pickle.loads(pickle.dumps(op))(x, factor=3.0), torch.full((2,), 3.0))


@pytest.mark.parametrize("setup_context", [True, False], ids=["setup_context", "legacy-form"])
def test_builtin_forward_fails_at_decoration_naming_the_class(setup_context):
    namespace = {
        "forward": staticmethod(torch.sin),
        "backward": staticmethod(lambda ctx, grad: grad),
    }
    if setup_context:
        namespace["setup_context"] = staticmethod(lambda ctx, inputs, output: None)
    cls = type("Sine", (torch.autograd.Function,), namespace)
    with pytest.raises(TypeError, match=r"^Sine: the signature of forward .* cannot be read"):
        compatfn.function(cls)


def test_redecorating_with_the_same_legacy_choice_is_harmless():
    @compatfn.function(legacy=True)
    class Forced(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    assert compatfn.function(legacy=True)(Forced) is Forced
    assert compatfn.function(Forced) is Forced
    if compatfn.mode(Scale) == "legacy":  # torch 1.x or COMPATFN_LEGACY=1: legacy=True agrees
        assert compatfn.function(legacy=True)(Scale) is Scale
    assert torch.equal(Forced.apply(torch.ones(1)), torch.full((1,), 2.0))


@pytest.mark.parametrize(
    "value, forced",
    [
        ("1", True),
        ("true", True),
        (" Yes ", True),
        ("ON", True),
        ("", False),
        ("0", False),
        ("false", False),
        (" No", False),
        ("OFF ", False),
    ],
)
def test_legacy_environment_values(monkeypatch, value, forced):
    monkeypatch.setenv("COMPATFN_LEGACY", value)
    assert core._env_forces_legacy() is forced
    cls = compatfn.function(_bad())
    assert compatfn.mode(cls) == expected_mode(forced)


@pytest.mark.parametrize("value", ["2", "legacy", "nein", "1 0"])
def test_legacy_environment_rejects_other_values(monkeypatch, value):
    monkeypatch.setenv("COMPATFN_LEGACY", value)
    with pytest.raises(ValueError, match=r"COMPATFN_LEGACY=.* is not understood: .*1, true, yes"):
        compatfn.function(_bad())


# --- TorchScript ---------------------------------------------------------------------------------


def _calling(cls):
    class Calls(torch.nn.Module):
        def forward(self, x):  # no type comment: torch 1.8's TorchScript parses those
            return cls.apply(x, 2.0)

    return Calls()


def test_jit_trace_works():
    module = _calling(make_scale())
    x = torch.randn(3)
    with warnings.catch_warnings():  # torch 2.15 deprecates torch.jit
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, x)
    assert torch.equal(traced(x), x * 2.0)


#: Whether torch.jit.script compiles a module calling a hand-written Function (as a call into
#: Python), measured: torch 1.8, 2.14 and 2.15 do not, 2.1-2.13 do.
SCRIPTS_HAND_WRITTEN = {
    (1, 8): False,
    (2, 1): True,
    (2, 4): True,
    (2, 11): True,
    (2, 12): True,
    (2, 13): True,
    (2, 14): False,
    (2, 15): False,
}
#: Where torch.jit.script refuses a hand-written Function's builtin ``apply`` but calls a decorated
#: class's ``apply`` (a Python function) from the scripted code, as 2.1-2.13 do for both: measured.
SCRIPTS_DECORATED_ALONE = {(2, 14)}


def _scripted(module: torch.nn.Module) -> Tuple[Any, str]:
    """(the scripted module, "") or (None, why torch.jit.script refused it)."""
    with warnings.catch_warnings():  # torch 2.15 deprecates torch.jit
        warnings.simplefilter("ignore")
        try:
            return torch.jit.script(module), ""
        except Exception as error:  # torch's own message differs per release
            return None, f"{type(error).__name__}: {error}"


def test_jit_script_works_wherever_it_works_for_a_hand_written_function():
    """torch.jit.script calls a hand-written Function's apply in Python (torch 2.1-2.13) or
    refuses it (torch 1.8, 2.14, 2.15): a decorated one scripts wherever the control does, with
    the same results (on 2.14 also where it does not); where it fails, the error never points
    into compatfn's source."""
    _, control = _scripted(_calling(HandWrittenClip))
    expected = SCRIPTS_HAND_WRITTEN.get(core._TORCH_VERSION)
    if expected is not None:
        assert (control == "") is expected, control
    scripted, failure = _scripted(_calling(Scale))
    if control == "" or core._TORCH_VERSION in SCRIPTS_DECORATED_ALONE:
        assert failure == "", failure
        x = torch.randn(3, requires_grad=True)
        y = scripted(x)
        torch.testing.assert_close(y, Scale.apply(x, 2.0))
        (grad,) = torch.autograd.grad(y.sum(), x)
        torch.testing.assert_close(grad, torch.full_like(x, 2.0))
    else:
        assert failure and "core.py" not in failure, failure
