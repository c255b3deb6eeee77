"""Where torch's Autograd kernel does not run, the kernel runs as called: a call whose tensors are
all inference tensors (one requiring grad included), and a call with no tensor at all. The
dispatcher picks kernels by the inputs' dispatch keys, and neither has an Autograd key: no
autograd Function, no setup_context, and the kernel's own ops record a graph where grad mode is
on (measured on torch 2.13's own custom_op; found by hostile probes)."""

# No ``from __future__ import annotations``: torch 2.4's own custom_op cannot read string
# annotations.

from typing import Any, List, Optional

import pytest
import torch

from library_support import TIERS, make

HAS_INFERENCE_MODE = hasattr(torch, "inference_mode")


def _scaled_by_parameter(tier: str, name: str, kernel: Any) -> Any:
    """``kernel`` as an op on ``tier`` with a formula whose setup_context counts its calls."""
    op = make(tier, name)(kernel)
    op.setup_calls = []
    op.register_autograd(
        lambda ctx, *grads: (None,) * len(grads),
        setup_context=lambda ctx, inputs, output: op.setup_calls.append(1),
    )
    return op


@pytest.mark.skipif(not HAS_INFERENCE_MODE, reason="torch 1.8 has no inference tensors")
@pytest.mark.parametrize("tier", TIERS)
def test_an_inference_tensor_requiring_grad_skips_autograd(tier):
    weight = torch.ones(2, requires_grad=True)
    grad_modes: List[bool] = []

    def scale(x: torch.Tensor) -> torch.Tensor:
        grad_modes.append(torch.is_grad_enabled())
        return x + weight  # saves no inference tensor for backward

    op = _scaled_by_parameter(tier, "inference_scale", scale)
    with torch.inference_mode():
        x = torch.ones(2, requires_grad=True)
    out = op(x)
    assert grad_modes == [True]
    assert op.setup_calls == []
    assert type(out.grad_fn).__name__ == "AddBackward0"


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("form", ["scalars", "optional_none", "empty_list"])
def test_a_call_without_tensors_runs_the_kernel_as_called(tier, form):
    weight = torch.ones(2, requires_grad=True)

    def scalars(s: float) -> torch.Tensor:
        return weight * s

    def optional_none(t: Optional[torch.Tensor], s: float) -> torch.Tensor:
        return weight * s

    def empty_list(ts: List[torch.Tensor], s: float) -> torch.Tensor:
        return weight * s

    kernel = {"scalars": scalars, "optional_none": optional_none, "empty_list": empty_list}[form]
    op = _scaled_by_parameter(tier, f"no_tensor_{form}", kernel)
    args = {"scalars": (2.0,), "optional_none": (None, 2.0), "empty_list": ([], 2.0)}[form]
    out = op(*args)
    assert op.setup_calls == []
    assert type(out.grad_fn).__name__ == "MulBackward0"
    out.sum().backward()
    assert weight.grad.tolist() == [2.0, 2.0]
