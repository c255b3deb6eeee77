"""``opcheck`` on every torch: passing ops pass, broken ops fail."""

from __future__ import annotations

import pytest
import torch

import compatfn
import compatfn.testing
from compatfn import library
from library_support import (
    TIERS,
    compiles,
    make,
    ok_or_skipped,
    run_docs_blocks,
)


@pytest.fixture(scope="module")
def docs() -> dict:
    return run_docs_blocks()


def test_docs_mul_op_opcheck_and_gradcheck(docs):
    op = docs["mul_scaled"]
    x = torch.randn(5, dtype=torch.double, requires_grad=True)
    y = torch.randn(5, dtype=torch.double, requires_grad=True)
    result = compatfn.testing.opcheck(op, (x, y), {"scale": 2.0})
    assert set(result) == set(library.DEFAULT_TEST_UTILS)
    assert ok_or_skipped(result), result
    if compiles() is None:
        assert result["test_aot_dispatch_dynamic"] == "SUCCESS"
    assert torch.autograd.gradcheck(lambda a, b: op(a, b, scale=2.0), (x, y))
    assert torch.autograd.gradgradcheck(lambda a, b: op(a, b, 3.0), (x, y))
    assert torch.equal(op(x, y).detach(), (x * y).detach())


def test_docs_inplace_op_opcheck(docs):
    op = docs["clip_"]
    t = torch.linspace(-2, 2, 9)
    version = t._version
    assert op(t, -0.5, 0.5) is None
    assert torch.equal(t, torch.linspace(-2, 2, 9).clamp(-0.5, 0.5))
    assert t._version > version  # autograd sees the mutation
    result = compatfn.testing.opcheck(op, (torch.randn(8), -0.5, 0.5))
    assert ok_or_skipped(result), result


@pytest.mark.parametrize("tier", TIERS)
def test_undeclared_mutation_fails_opcheck(tier):
    @make(tier, "sneaky")
    def sneaky(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x.clone()

    sneaky.register_fake(lambda x: torch.empty_like(x))
    result = compatfn.testing.opcheck(sneaky, (torch.zeros(3),), raise_exception=False)
    assert "not defined as mutable but was mutated" in str(result["test_schema"])


@pytest.mark.parametrize("name", ["clipped_relu_op", "mask_relu_op"])
def test_relu_ops(name):
    from compatfn import relu_ops

    op = getattr(relu_ops, name)
    x = torch.tensor([-1.5, -0.3, 0.2, 0.7, 1.4, 2.5], dtype=torch.double, requires_grad=True)
    result = compatfn.testing.opcheck(op, (x,))
    assert ok_or_skipped(result), result
    report = compatfn.testing.check_function(op, x, checks=["forward", "gradcheck", "compile"])
    assert "gradcheck" in report.ran
    expected = x.clamp(0, 1.0) if name == "clipped_relu_op" else x.relu()
    assert torch.equal(op(x).detach(), expected.detach())
    if library.TIER != "function":
        assert hasattr(torch.ops.compatfn, name[: -len("_op")])
