"""Custom ops per device: ``register_kernel("cuda")``, per-device dispatch and opcheck on the
``device`` fixture's inputs (``cpu``, and ``cuda`` where present: visibly skipped otherwise)."""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List

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


def _other_backends() -> Dict[str, Callable[[], torch.Tensor]]:
    """CPU tensors of a backend other than dense, by the name of its dispatch key."""
    found: Dict[str, Callable[[], torch.Tensor]] = {
        "SparseCPU": lambda: torch.eye(2).to_sparse(),
        "MkldnnCPU": lambda: torch.eye(2).to_mkldnn(),
        "QuantizedCPU": lambda: torch.quantize_per_tensor(torch.eye(2), 0.1, 0, torch.quint8),
    }
    if hasattr(torch.Tensor, "to_sparse_csr"):
        found["SparseCsrCPU"] = lambda: torch.eye(2).to_sparse_csr()
    return found


def _which_kernel(op: Any, x: torch.Tensor, ran: List[str]) -> str:
    ran.clear()
    try:
        op(x)
    except NotImplementedError as e:
        return re.sub(r"'\w+::", "'NS::", str(e).split(". ")[0])
    return ",".join(ran)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("backend", sorted(_other_backends()))
@pytest.mark.parametrize("how", ["device_types", "register_kernel"])
def test_a_cpu_kernel_serves_dense_tensors_only_as_torchs(tier, backend, how):
    """A "cpu" kernel is the dispatcher's CPU key's: a sparse, mkldnn or quantized CPU tensor
    gets the kernel for every device, or torch's error where there is none (measured on 2.13
    with torch's own op; side by side on the torch tier). compatfn's tiers chose by device type
    before: the "cpu" kernel ran."""
    ran: List[str] = []

    def dense(x: torch.Tensor) -> torch.Tensor:
        ran.append("default")
        if x.is_quantized:
            return x.dequantize()
        return (x if x.layout is torch.strided else x.to_dense()).clone()

    def cpu(x: torch.Tensor) -> torch.Tensor:
        ran.append("cpu")
        return dense(x)

    for fn in (dense, cpu):  # real annotations: torch 2.4's own op cannot read strings
        fn.__annotations__ = {"x": torch.Tensor, "return": torch.Tensor}

    def define(maker: Callable) -> Any:
        if how == "device_types":
            return maker(cpu, device_types="cpu")
        op = maker(dense)
        op.register_kernel("cpu", cpu)
        return op

    ours = define(lambda fn, **kw: make(tier, "layouts", **kw)(fn))
    if tier == "torch":
        control = define(
            lambda fn, **kw: torch.library.custom_op(
                f"{fresh('own')}::layouts", fn, mutates_args=(), **kw
            )
        )
        expected = _which_kernel(control, _other_backends()[backend](), ran)
    elif how == "device_types":
        expected = f"Could not run 'NS::layouts' with arguments from the '{backend}' backend"
    else:
        expected = "default"
    assert _which_kernel(ours, _other_backends()[backend](), ran) == expected
    assert _which_kernel(ours, torch.eye(2), ran) == "cpu,default"


@pytest.mark.skipif(
    not hasattr(torch, "nested"), reason=f"torch {torch.__version__} has no nested tensors"
)
@pytest.mark.parametrize("tier", TIERS)
def test_a_nested_tensor_gets_torchs_error(tier):
    """No kernel of a custom op serves a nested tensor: torch's error, the kernel never runs
    (measured on 2.13; compatfn's tiers ran it before)."""
    ran: List[str] = []

    @make(tier, "nested")
    def nested(x: torch.Tensor) -> torch.Tensor:
        ran.append("kernel")
        return x.clone()

    x = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    expected = "Could not run 'NS::nested' with arguments from the 'NestedTensorCPU' backend"
    assert _which_kernel(nested, x, ran) == expected and ran == []
