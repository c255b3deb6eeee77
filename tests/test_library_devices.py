"""Custom ops per device: ``register_kernel("cuda")``, per-device dispatch and opcheck on the
``device`` fixture's inputs (``cpu``, and ``cuda`` where present: visibly skipped otherwise)."""

from __future__ import annotations

from typing import List

import pytest
import torch

import compatfn.testing
from library_support import TIERS, make, ok_or_skipped


@pytest.mark.parametrize("tier", TIERS)
def test_kernel_per_device(tier, device):
    """Each device runs its own kernel, on the inputs' device, forward and backward."""
    ran: List[str] = []

    @make(tier, "per_device", device_types="cpu")
    def per_device(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        ran.append("cpu")
        return x * scale

    @per_device.register_kernel("cuda")
    def _(x, scale=2.0):
        ran.append("cuda")
        return x * scale

    per_device.register_fake(lambda x, scale=2.0: torch.empty_like(x))
    per_device.register_autograd(
        lambda ctx, g: (g * ctx.scale, None),
        setup_context=lambda ctx, inputs, output: setattr(ctx, "scale", inputs[1]),
    )
    x = torch.ones(3, device=device, requires_grad=True)
    out = per_device(x, scale=3.0)
    assert out.device == x.device and ran == [device.type]
    assert torch.equal(out.detach(), torch.full((3,), 3.0, device=device))
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert torch.equal(grad, torch.full((3,), 3.0, device=device))


@pytest.mark.parametrize("tier", TIERS)
def test_opcheck_on_the_device(tier, device):
    @make(tier, "device_sin")
    def device_sin(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    device_sin.register_fake(lambda x: torch.empty_like(x))
    device_sin.register_autograd(
        lambda ctx, g: g * ctx.x.cos(),
        setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]),
    )
    x = torch.randn(4, device=device, dtype=torch.double, requires_grad=True)
    result = compatfn.testing.opcheck(device_sin, (x,))
    assert ok_or_skipped(result), result
    assert torch.autograd.gradcheck(device_sin, (x,))
