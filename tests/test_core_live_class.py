"""A decorated class is used as it is at the call, as torch uses a hand-written Function: its node
belongs to it, later changes to its methods and attributes take effect, and ``Fn.apply`` is bound
to it on torch 1.x. Each case runs the same steps on an oracle (the same class undecorated where
this torch runs setup_context-style Functions, else a hand-written legacy Function) and on the
decorated class in every mode this torch has: native (no default), dual (a default), legacy
(forced)."""

from __future__ import annotations

import inspect
import io
import warnings
from typing import Any, Callable, Dict, List
from unittest import mock

import pytest
import torch

import compatfn
from compatfn import core
from toy_functions import FORCED

NATIVE_TORCH = hasattr(torch.autograd.Function, "setup_context")
HAS_TORCH_FUNC = hasattr(torch, "func") and NATIVE_TORCH


def _modern(default: bool) -> Any:
    """``x * ctx._forward_cls.scale`` in the setup_context style; ``default`` adds an unused
    parameter with a default (mode "dual" on torch 2.x)."""

    class Double(torch.autograd.Function):
        scale = 2.0

        if default:

            @staticmethod
            def forward(x, unused=None):  # type: ignore[no-untyped-def,override]
                return x * 2

        else:

            @staticmethod
            def forward(x):  # type: ignore[no-untyped-def,override]
                return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            scale = ctx._forward_cls.scale
            return (grad * scale, None) if default else grad * scale

    return Double


def _hand_written() -> Any:
    class Double(torch.autograd.Function):
        scale = 2.0

        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def,override]
            return x * 2

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def,override]
            return grad * ctx._forward_cls.scale

    return Double


def _oracle() -> Any:
    return _modern(default=False) if NATIVE_TORCH else _hand_written()


MAKERS: Dict[str, Callable[[], Any]] = {
    "no default": lambda: compatfn.function(_modern(default=False)),
    "default": lambda: compatfn.function(_modern(default=True)),
    "forced legacy": lambda: compatfn.function(_modern(default=False), legacy=True),
}


@pytest.fixture(params=sorted(MAKERS))
def decorated(request: pytest.FixtureRequest) -> Any:
    return MAKERS[request.param]()


def _grad(fn: Any) -> List[float]:
    x = torch.ones(2, requires_grad=True)
    fn.apply(x).sum().backward()
    return x.grad.tolist()  # type: ignore[union-attr]


def test_the_node_belongs_to_the_class(decorated: Any) -> None:
    for fn in (_oracle(), decorated):
        node = fn.apply(torch.ones(2, requires_grad=True)).grad_fn
        assert node._forward_cls is fn, compatfn.mode(decorated)
        assert isinstance(node, fn._backward_cls)
        assert type(node).__name__ == "DoubleBackward"


def test_a_patched_backward_runs(decorated: Any) -> None:
    def spy(ctx: Any, grad: torch.Tensor) -> Any:
        return (grad * 100,) + (None,) * (len(ctx.needs_input_grad) - 1)

    for fn in (_oracle(), decorated):
        with mock.patch.object(fn, "backward", staticmethod(spy)):
            assert _grad(fn) == [100.0, 100.0]
        assert _grad(fn) == [2.0, 2.0]  # and the class's own again after the patch


def test_a_class_attribute_changed_later_is_read(decorated: Any) -> None:
    for fn in (_oracle(), decorated):
        fn.scale = 5.0
        assert _grad(fn) == [5.0, 5.0]


@pytest.mark.skipif(not NATIVE_TORCH, reason="torch 1.x: forward takes ctx, no native class")
def test_a_patched_forward_runs_on_a_native_class() -> None:
    """Where the class keeps the setup_context style (mode "native"), ``Fn.forward`` is the user's
    and torch reads it at each call; elsewhere it is the legacy form (docs: semantics)."""
    decorated = MAKERS["no default"]()
    if compatfn.mode(decorated) != "native":
        pytest.skip(f"mode {compatfn.mode(decorated)} on this torch: Fn.forward is the legacy form")
    for fn in (_modern(default=False), decorated):
        with mock.patch.object(fn, "forward", staticmethod(lambda x: x * 7)):
            assert fn.apply(torch.ones(2)).tolist() == [7.0, 7.0]
        assert fn.apply(torch.ones(2)).tolist() == [2.0, 2.0]


@pytest.mark.skipif(not HAS_TORCH_FUNC, reason="torch.func needs torch >= 2.0")
@pytest.mark.parametrize("default", [False, True], ids=["no default", "default"])
def test_torch_func_reads_the_class_at_the_call(default: bool) -> None:
    """``generate_vmap_rule`` set after decoration, and a patched backward, take effect under
    torch.func (a dual class runs a copy there). (``ctx._forward_cls`` is torch.func's own class
    there: backward reads no class attribute.)"""

    def spy(ctx: Any, grad: torch.Tensor) -> Any:
        return (grad * 100, None) if default else grad * 100

    if FORCED:  # the documented refusal
        fn = compatfn.function(_modern(default))
        with pytest.raises(RuntimeError, match=r"runs on the legacy path .* torch\.func"):
            torch.func.vmap(fn.apply)(torch.ones(2, 3))
        return
    results = []
    for fn in (_modern(default), compatfn.function(_modern(default))):
        fn.generate_vmap_rule = True
        vmapped = torch.func.vmap(fn.apply)(torch.ones(2, 3)).sum().item()
        with mock.patch.object(fn, "backward", staticmethod(spy)):
            grad = torch.func.grad(lambda x, fn=fn: fn.apply(x).sum())(torch.ones(2)).tolist()
        results.append((vmapped, grad))
    assert results[0] == results[1] == (12.0, [100.0, 100.0])


@pytest.mark.skipif(core._HAS_SETUP_CONTEXT, reason="torch 2.x: see the test below")
def test_apply_is_bound_to_the_class(decorated: Any) -> None:
    for fn in (_oracle(), decorated):
        apply = fn.apply
        assert apply.__self__ is fn
        assert apply.__name__ == "apply"
        assert apply == fn.apply


@pytest.mark.skipif(not core._HAS_SETUP_CONTEXT, reason="torch 1.x: see the test above")
def test_apply_is_a_function_named_as_the_class(decorated: Any) -> None:
    """torch 2.x: ``Fn.apply`` is not bound (See NOTE: [apply is bound to the class]); it is
    named as the class, by which torch.jit.trace names the node."""
    assert not hasattr(decorated.apply, "__self__")
    assert decorated.apply.__name__ == decorated.__name__
    assert decorated.apply is decorated.apply


def _onnx_graph(fn: Any) -> bytes:
    class Module(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return fn.apply(x) + 1

    buffer = io.BytesIO()
    scripted = (
        {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter is deprecated on 2.9+
        torch.onnx.export(Module(), (torch.ones(2),), buffer, **scripted)
    return buffer.getvalue()


def _with_symbolic(fn: Any) -> Any:
    def symbolic(g: Any, x: Any, *rest: Any) -> Any:
        return g.op("Mul", x, g.op("Constant", value_t=torch.tensor(2.0)))

    fn.symbolic = staticmethod(symbolic)
    return fn


def test_onnx_export_uses_the_class_symbolic(decorated: Any) -> None:
    """The TorchScript-based exporter finds ``symbolic`` through ``Fn.apply.__self__`` (torch
    1.x; 2.x exporters find it otherwise)."""
    try:
        expected = _onnx_graph(_with_symbolic(_hand_written()))
    except Exception as error:  # e.g. "Module onnx is not installed!": nothing to compare with
        pytest.skip(f"torch {torch.__version__} exports no hand-written Function here: {error}")
    assert _onnx_graph(_with_symbolic(decorated)) == expected
