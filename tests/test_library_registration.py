"""Operators in torch's dispatcher: ``torch.ops``, torch.compile and torch.export see one op."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compatfn import core, library
from compatfn.library import _facts
from library_support import (
    TIERS,
    compiles,
    make,
    run_docs_blocks,
)


@pytest.fixture(scope="module")
def docs() -> dict:
    return run_docs_blocks()


def test_torch_tier_returns_torchs_own_object(docs):
    if library.TIER != "torch":
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (torch >= 2.4)")
    assert type(docs["mul_scaled"]) is torch.library.CustomOpDef


def test_docs_ops_are_in_torch_ops_where_registered(docs):
    if library.TIER == "function":
        pytest.skip(f"torch {torch.__version__} has no torch.library: ops are not registered")
    namespace = docs["mul_scaled"]._qualname.split("::")[0]
    packet = getattr(torch.ops, namespace).mul_scaled
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3)
    out = packet(x, y, scale=2.0)
    assert out.grad_fn is not None
    assert torch.allclose(out, x * y * 2.0)
    clip_namespace = docs["clip_"]._qualname.split("::")[0]
    assert hasattr(getattr(torch.ops, clip_namespace), "clip_")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_docs_mul_op_compiles_fullgraph(docs, backend):
    why = compiles()
    if why:
        pytest.skip(why)
    op = docs["mul_scaled"]
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()

    def f(a, b):
        return op(a * 1.5, b, scale=2.0).sin()

    x = torch.randn(4, requires_grad=True)
    y = torch.randn(4)
    got = torch.compile(f, fullgraph=True, backend=backend)(x, y)
    (gx,) = torch.autograd.grad(got.sum(), x)
    x2 = x.detach().clone().requires_grad_()
    want = f(x2, y)
    want.sum().backward()
    assert torch.allclose(got, want) and torch.allclose(gx, x2.grad)
    dynamo.reset()


def test_docs_inplace_op_compiles_fullgraph(docs):
    why = compiles()
    if why:
        pytest.skip(why)
    if not _facts.has_auto_functionalize():
        pytest.skip(f"torch {torch.__version__} cannot compile mutating custom ops (torch >= 2.2)")
    op = docs["clip_"]
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()

    def f(a):
        b = a * 2
        op(b, -1.0, 1.0)
        return b + 1

    x = torch.randn(6)
    assert torch.equal(torch.compile(f, fullgraph=True, backend="aot_eager")(x), f(x))
    dynamo.reset()


EXPORT_MODES = core.features()["export"]


@pytest.mark.parametrize("mode", ["strict", "non-strict"])
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_export_sees_one_op(tier, mode):
    """torch.export keeps a registered op as one node of the graph (strict and non-strict, as
    far as this torch exports), with a parameter that requires grad feeding it."""
    if mode not in EXPORT_MODES:
        pytest.skip(f"torch {torch.__version__} has no {mode} torch.export")

    @make(tier, "npsin")
    def npsin(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return torch.from_numpy(np.sin(x.detach().numpy()) * scale)

    npsin.register_fake(lambda x, scale=1.0: torch.empty_like(x))

    class Module(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.full((3,), 0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return npsin(x * self.weight, scale=2.0) + 1

    x, module = torch.randn(3), Module()
    strict = {} if EXPORT_MODES == ("strict",) else {"strict": mode == "strict"}
    program = torch.export.export(module, (x,), **strict)
    namespace, name = npsin._qualname.split("::")
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert getattr(getattr(torch.ops, namespace), name).default in targets
    assert torch.allclose(program.module()(x), module(x))
