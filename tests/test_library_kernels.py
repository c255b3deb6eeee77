"""Running an op's kernels on every tier (``_kernels``): per device type, for meta tensors,
disabled, and unknown device types."""

from __future__ import annotations

from typing import List

import numpy as np
import pytest
import torch

from compatfn import library
from library_support import TIERS, fresh, make


@pytest.mark.parametrize("tier", TIERS)
def test_register_kernel_without_device_types_replaces_the_default(tier):
    """``register_kernel(None, fn)`` is the kernel for every device without its own, as in
    torch; backward works without a setup_context."""

    @make(tier, "default")
    def default(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    default.register_autograd(lambda ctx, g: g * 3)
    default.register_kernel(None, lambda x: x + 2)
    x = torch.zeros(2, requires_grad=True)
    assert torch.equal(default(x.detach()), torch.full((2,), 2.0))
    out = default(x)
    assert torch.equal(out.detach(), torch.full((2,), 2.0))
    assert torch.equal(torch.autograd.grad(out.sum(), x)[0], torch.full((2,), 3.0))


@pytest.mark.parametrize("tier", TIERS)
def test_meta_tensors_need_a_fake_kernel(tier):
    """As on torch >= 2.4: the kernel never runs for meta tensors; without a fake kernel the call
    raises torch's error, once one is registered it runs (also after earlier calls)."""
    if not library.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device")
    ran: List[str] = []

    @make(tier, "plus")
    def plus(x: torch.Tensor) -> torch.Tensor:
        ran.append("kernel")
        return x + 1

    plus.register_autograd(lambda ctx, g: g)
    meta = torch.empty(3, device="meta")
    assert torch.equal(plus(torch.zeros(1)), torch.ones(1)) and ran == ["kernel"]
    for requires_grad in (False, True):
        with pytest.raises(RuntimeError, match="There was no fake impl registered for"):
            plus(meta.clone().requires_grad_(requires_grad))

    @plus.register_fake
    def _(x):
        ran.append("fake")
        return torch.empty_like(x)

    del ran[:]
    for requires_grad in (False, True):
        out = plus(meta.clone().requires_grad_(requires_grad))
        assert out.device.type == "meta" and out.shape == (3,)
    assert ran == ["fake", "fake"]
    assert torch.equal(plus(torch.zeros(1)), torch.ones(1)) and ran[-1] == "kernel"


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
def test_a_kernel_for_meta_tensors(tier):
    """``register_kernel("meta", fn)`` serves meta tensors where no fake kernel is registered (as
    on torch 2.15; torch 2.7's own CustomOpDef refuses it, so torch's tier is not asked)."""
    if not library.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device")

    @make(tier, "meta_kernel")
    def meta_kernel(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    meta_kernel.register_kernel("meta", lambda x: x.new_empty((*x.shape, 2)))
    assert meta_kernel(torch.empty(3, device="meta")).shape == (3, 2)
    assert torch.equal(meta_kernel(torch.zeros(1)), torch.ones(1))


@pytest.mark.parametrize("tier", TIERS)
def test_fake_kernel_runs_for_meta_tensors(tier):
    if not library.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device")

    @make(tier, "npcos")
    def npcos(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.cos(x.numpy()))

    npcos.register_fake(lambda x: x.new_empty(x.shape))
    out = npcos(torch.empty(2, 3, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 3)


@pytest.mark.parametrize("tier", TIERS)
def test_the_missing_fake_kernel_error_is_torchs(tier):
    """torch's message word for word: the op's repr and the name of the function it was made
    from (hypothesis-free probe against torch 2.13's own op: ``<compatfn.CustomOp(...)>`` and
    the op's name before)."""
    if not library.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device")

    @make(tier, "named")
    def kernel_fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    expected = (
        f"There was no fake impl registered for <CustomOpDef({kernel_fn._qualname})>. This is "
        "necessary for torch.compile/export/fx tracing to work. Please use "
        "`kernel_fn.register_fake` to add an fake impl."
    )
    with pytest.raises(RuntimeError) as raised:
        kernel_fn(torch.zeros(1, device="meta"))
    assert str(raised.value).split("\n")[0] == expected
    assert repr(kernel_fn) == f"<CustomOpDef({kernel_fn._qualname})>"


@pytest.mark.parametrize("tier", TIERS)
def test_an_op_that_only_mutates_needs_no_fake_kernel(tier):
    """torch >= 2.5's own op: an op that mutates an argument and returns nothing has a trivial
    fake impl (None), so meta tensors (and FakeTensor, torch.compile's AOT backends) run without
    ``register_fake``; the kernel does not run and the argument's version goes up once. An op
    that returns something still raises."""
    if not library.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device")
    ran: List[str] = []

    @make(tier, "scale_", mutates_args=("x",))
    def scale_(x: torch.Tensor, s: float = 2.0) -> None:
        ran.append("kernel")
        x.mul_(s)

    meta = torch.ones(3, device="meta")
    before = meta._version
    if tier == "torch" and not _torch_has_trivial_fake():  # torch 2.4: the torch tier is its op
        with pytest.raises(RuntimeError, match="There was no fake impl registered for"):
            scale_(meta)
        return
    assert scale_(meta) is None and ran == []
    assert meta._version == before + 1
    cpu = torch.ones(3)
    assert scale_(cpu) is None and ran == ["kernel"] and torch.equal(cpu, torch.full((3,), 2.0))


def _torch_has_trivial_fake() -> bool:
    """Whether torch's own custom_op runs a mutating op returning nothing on meta tensors."""

    # The schema given: torch 2.4 cannot read this module's string annotations.
    @torch.library.custom_op(
        f"{fresh('control')}::scale_", mutates_args=("x",), schema="(Tensor(a0!) x) -> ()"
    )
    def scale_(x: torch.Tensor) -> None:
        x.mul_(2)

    try:
        scale_(torch.ones(1, device="meta"))
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("tier", TIERS)
def test_kernel_per_device_type(tier):
    @make(tier, "which", device_types="cpu")
    def which(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    assert torch.equal(which(torch.zeros(1)), torch.ones(1))
    if library.HAS_META_DEVICE:
        with pytest.raises(RuntimeError, match="There was no fake impl registered for"):
            which(torch.zeros(1, device="meta"))  # no fake kernel, no meta kernel


@pytest.mark.parametrize("tier", TIERS)
def test_an_unknown_device_type_is_refused(tier):
    """torch's own error for "gpu" (torch 1.13-2.3 before: "could not parse dispatch key")."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        make(tier, "gpu", device_types="gpu")(f)
    op = make(tier, "dev")(f)
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        op.register_kernel("gpu", f)


@pytest.mark.parametrize("tier", TIERS)
def test_set_kernel_enabled(tier):
    """Inside the block the function the op was made from runs, as in torch (compatfn's tiers
    before: no such method)."""

    @make(tier, "switch")
    def op(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    op.register_kernel("cpu", lambda x: x * 3)
    if tier == "torch" and not hasattr(_torch_custom_op_def(), "set_kernel_enabled"):
        assert not hasattr(op, "set_kernel_enabled")  # torch 2.4's own object: torch 2.5+
        return
    with op.set_kernel_enabled("cpu", False):
        assert op(torch.ones(1)).item() == 2.0
    assert op(torch.ones(1)).item() == 3.0


def _torch_custom_op_def() -> type:
    from torch._library.custom_ops import CustomOpDef

    return CustomOpDef
