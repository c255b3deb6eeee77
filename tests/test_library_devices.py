"""Custom ops per device: ``register_kernel("cuda")``, per-device dispatch and opcheck on the
``device`` fixture's inputs (``cpu``, and ``cuda`` where present: visibly skipped otherwise)."""

from __future__ import annotations

from typing import List

import pytest
import torch

import compatfn.testing
from library_support import TIERS, fresh, make, ok_or_skipped


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


def _ones(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones(n, device="cpu")


def _by_device(op: object, registered: bool) -> List[str]:
    """What an op without tensor arguments gives for the CPU and the meta device, after a CPU
    kernel of its own where ``registered``."""
    if registered:
        op.register_kernel("cpu", lambda n, device: torch.zeros(n))  # type: ignore[attr-defined]
    found = []
    for device in ("cpu", "meta"):
        try:
            found.append(str(op(2, torch.device(device)).tolist()))  # type: ignore[operator]
        except RuntimeError as error:
            found.append(str(error).replace(getattr(op, "_name", ""), "NAME"))
    return found


#: What torch 2.13's own op gives ``_by_device`` (not registered, registered).
_TORCH_BY_DEVICE = {
    False: ["[1.0, 1.0]", "[1.0, 1.0]"],
    True: [
        "[0.0, 0.0]",
        "NAME does not have a kernel registered for meta. Please use register_kernel to do so.",
    ],
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("registered", [False, True])
def test_device_kernels_select_by_the_device_argument_as_torchs(tier, registered):
    """An op without tensor arguments, after a kernel for a named device type: a device without
    a kernel of its own is refused with torch's error, meta included (compatfn before: the fake
    kernel, or the kernel for every device); before that, the op's own kernel runs for every
    device. The torch tier side by side with torch's own op, compatfn's tiers as torch 2.13."""
    if not _has_meta():
        pytest.skip(f"torch {torch.__version__} has no meta device (control: torch itself)")
    expected = _TORCH_BY_DEVICE[registered]
    if tier == "torch":
        # The schema given: torch 2.4 cannot read this module's string annotations.
        control = torch.library.custom_op(
            f"{fresh('own')}::ones",
            _ones,
            mutates_args=(),
            schema="(SymInt n, Device device) -> Tensor",
        )
        expected = _by_device(control, registered)
    assert _by_device(make(tier, "ones")(_ones), registered) == expected


def _has_meta() -> bool:
    try:
        torch.device("meta")
    except RuntimeError:
        return False
    return True
