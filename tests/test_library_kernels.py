"""Running an op's kernels on every tier (``_kernels``): per device type, for meta tensors,
disabled, and unknown device types."""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Callable, List, Optional

import numpy as np
import pytest
import torch

from compatfn import library
from compatfn.library import _facts
from library_support import TIERS, fresh, make, side_by_side


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


# (definition, call) -> outcome, recorded from torch 2.13's own custom_op (See NOTE: [calls
# without tensors] in _kernels): the kernel that runs (its result's first value), or the error.
def _no_tensor_outcome(decorate, case: str) -> str:
    try:
        if case == "device kernels without a device argument":

            def plain(n: int) -> torch.Tensor:
                return torch.ones(n)

            op = decorate(plain, device_types="cpu")
            return str(op(2)[0].item())
        if case == "register_kernel without a device argument":

            def plain2(n: int) -> torch.Tensor:
                return torch.ones(n)

            op = decorate(plain2)
            op.register_kernel("cpu", lambda n: torch.ones(n) * 7)
            return str(op(2)[0].item())
        if case == "the device argument picks the kernel":

            def on(n: int, device: torch.device) -> torch.Tensor:
                return torch.ones(n)

            op = decorate(on)
            op.register_kernel("cpu", lambda n, device: torch.full((n,), 7.0))
            return str(op(2, "cpu")[0].item())
        if case == "an empty Tensor[] runs the default kernel":

            def listed(xs: List[torch.Tensor]) -> torch.Tensor:
                return torch.full((1,), 3.0)

            op = decorate(listed)
            op.register_kernel("cpu", lambda xs: torch.full((1,), 9.0))
            return f"{op([])[0].item()} {op([torch.ones(1)])[0].item()}"
        if case == "an empty Tensor[] and no default kernel":

            def only_cpu(xs: List[torch.Tensor], o: Optional[torch.Tensor] = None) -> torch.Tensor:
                return torch.full((1,), 3.0)

            op = decorate(only_cpu, device_types="cpu")
            return str(op([], None)[0].item())
        if case == "no kernel for the device":

            def only_cuda(x: torch.Tensor) -> torch.Tensor:
                return x.clone()

            op = decorate(only_cuda, device_types="cuda")
            return str(op(torch.ones(1))[0].item())
    except (ValueError, NotImplementedError) as e:
        return f"{type(e).__name__}: {str(e).split('.')[0]}"
    raise AssertionError(case)


NO_TENSOR_CASES = {
    "device kernels without a device argument": "ValueError: Functions without tensor inputs are "
    "required to have a `device: torch",
    "register_kernel without a device argument": "ValueError: Functions without tensor inputs are "
    "required to have a `device: torch",
    "the device argument picks the kernel": "7.0",
    "an empty Tensor[] runs the default kernel": "3.0 9.0",
    "an empty Tensor[] and no default kernel": "NotImplementedError: There were no tensor "
    "arguments to this function (e",
    "no kernel for the device": "NotImplementedError: Could not run 'NS::only_cuda' with "
    "arguments from the 'CPU' backend",
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", sorted(NO_TENSOR_CASES))
def test_calls_without_tensors_and_devices_without_kernels_are_torchs(tier, case):
    """torch 1.8-2.3 before: device kernels of an op without tensor arguments were accepted, a
    call without tensors ran the "cpu" kernel, and a device without a kernel raised compatfn's
    own message. On the torch tier, torch's own op runs side by side."""

    def decorate(fn, device_types=None):
        return make(tier, fn.__name__, device_types=device_types)(fn)

    got = re.sub(r"cft_\w+::", "NS::", _no_tensor_outcome(decorate, case))
    if tier == "torch":

        def own(fn, device_types=None):
            fn.__annotations__ = typing.get_type_hints(fn)  # torch 2.4 reads no strings
            name = f"{fresh('own')}::{fn.__name__}"
            return torch.library.custom_op(name, mutates_args=(), device_types=device_types)(fn)

        assert got == re.sub(r"cft_\w+::", "NS::", _no_tensor_outcome(own, case))
    else:  # torch 2.4 differs from the table (torch 2.13's): the torch tier is torch's own op
        assert got == NO_TENSOR_CASES[case]


@pytest.mark.parametrize("tier", TIERS)
def test_set_kernel_enabled_after_a_registration_for_several_devices(tier, caplog):
    """torch's kernels of ``register_kernel(("cpu", "cuda"), fn)`` read whether the *last* device
    is disabled (See NOTE: [kernels of several devices]); torch logs its warnings (compatfn
    before: the "cpu" kernel was disabled, nothing logged)."""
    if tier == "torch" and not hasattr(torch.library.CustomOpDef, "set_kernel_enabled"):
        pytest.skip(f"torch {torch.__version__}'s own op has no set_kernel_enabled (torch >= 2.5)")
    results, logged = [], []
    for decorate in side_by_side(tier, "several"):

        @decorate
        def several(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        several.register_kernel(("cpu", "cuda"), lambda x: x * 10)
        x = torch.ones(1)
        caplog.clear()
        with several.set_kernel_enabled("cpu", False):
            in_cpu_off = several(x).item()
        with several.set_kernel_enabled("cuda", False):
            in_cuda_off = several(x).item()
        with several.set_kernel_enabled("xla", True):
            pass
        results.append((in_cpu_off, in_cuda_off))
        # torch 2.4-2.13 write "kernel for  %s" (two spaces) in one of them
        logged.append([r.getMessage().replace("for  ", "for ") for r in caplog.records])
    if tier == "torch":  # torch's own op, side by side
        assert results[1] == results[0] and logged[1] == logged[0]
        return
    assert results[0] == (10.0, 2.0)
    assert logged[0] == [
        "Attempted to enable kernel for xla but no kernel was registered for this device type.",
        "Attempted to enable kernel for xla but it was already enabled.",
    ]


def _fake_output_outcome(make_op: Callable[[Callable], Any], returned: str) -> str:
    """What a call with a meta tensor gives for an op whose fake kernel returns ``returned``:
    the returned type's name, or the RuntimeError's first words."""

    def fake_output(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    fake_output.__annotations__ = {"x": torch.Tensor, "return": torch.Tensor}  # torch 2.4
    op = make_op(fake_output)
    outputs = {"tuple": lambda x: (torch.empty_like(x),), "list": lambda x: [x.new_empty(3)]}
    op.register_fake(outputs.get(returned, lambda x: 1.0))
    try:
        return type(op(torch.ones(3, device="meta"))).__name__
    except RuntimeError as e:
        return str(e).split(" (")[0].split(" [")[0]


@pytest.mark.skipif(
    not library.HAS_META_DEVICE, reason=f"torch {torch.__version__} has no meta device"
)
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("returned", ["tuple", "list", "float"])
def test_a_fake_kernels_output_is_converted_as_torchs(tier, returned):
    """A fake kernel's output for meta tensors is converted to what the schema returns, with
    torch's error for what it cannot be (measured on 2.13: "Unable to cast"; side by side on the
    torch tier: torch 2.15's own op hands it back); compatfn's tiers handed it back as it was."""
    found = _fake_output_outcome(make(tier, "fake_output"), returned)
    if tier == "torch":
        own = f"{fresh('own')}::fake_output"
        control = lambda fn: torch.library.custom_op(own, fn, mutates_args=())  # noqa: E731
        assert found == _fake_output_outcome(control, returned)
    else:
        assert found.startswith("Unable to cast"), found


#: What torch 2.13's own op hands the kernel, setup_context and backward for
#: ``f(x, d: torch.device = "cpu", *, e: torch.device = "cpu")`` called with an input requiring
#: grad and these arguments (measured): a value equal to the default is left out of the
#: kernel's call (it gets its own str), and setup_context gets the schema's default, a device.
_DEVICE_DEFAULT_CASES = [
    ((), {}, ("'cpu'", "'cpu'"), "device(type='cpu')", (True,)),
    (("cpu",), {"e": "cpu"}, ("'cpu'", "'cpu'"), "device(type='cpu')", (True,)),
    ((torch.device("cpu"),), {}, ("'cpu'", "'cpu'"), "device(type='cpu')", (True,)),
    (
        ("cpu:0",),
        {"e": "cpu:0"},
        ("device(type='cpu', index=0)", "device(type='cpu', index=0)"),
        "device(type='cpu', index=0)",
        (True, False),
    ),
    (("cuda",), {}, ("device(type='cuda')", "'cpu'"), "device(type='cuda')", (True, False)),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", range(len(_DEVICE_DEFAULT_CASES)))
def test_a_device_parameter_with_a_str_default(tier, case):
    """A ``torch.device`` parameter with a str default is left out of the kernel's call when
    the argument equals it, as torch's dispatcher leaves it out (compatfn's tiers before: the
    kernel got ``torch.device("cpu")``, and ``ctx.needs_input_grad`` an entry for it)."""
    args, kwargs, kernel_saw, setup_saw, needs = _DEVICE_DEFAULT_CASES[case]

    def kernel(x, d="cpu", *, e="cpu"):  # type: ignore[no-untyped-def]
        return (repr(d), repr(e)), x.clone()

    annotations = {"x": torch.Tensor, "d": torch.device, "e": torch.device}
    runs = _device_default_runs(tier, kernel, annotations, args, kwargs)
    for seen in runs:
        assert seen[:2] == [kernel_saw, setup_saw]
        if _facts.NEEDS_INPUT_GRAD_WRITABLE:  # else as setup_context saw it (custom-ops.md)
            assert seen[2] == needs


def _device_default_runs(
    tier: str, kernel: Callable, annotations: dict, args: tuple, kwargs: dict
) -> List[List[Any]]:
    """What the kernel (returning what it saw and its output), setup_context (the second
    argument) and backward (``ctx.needs_input_grad``) saw in one call with an input requiring
    grad, for compatfn's op on ``tier`` and, on the torch tier, torch's own; where torch 2.4
    refuses the str default, both refuse it (and nothing ran)."""
    runs: List[List[Any]] = []
    refused = []
    for make_op in side_by_side(tier, "device_default"):
        seen: List[Any] = []

        def recorded(*a: Any, **k: Any) -> torch.Tensor:
            what, out = kernel(*a, **k)
            seen.append(what)  # noqa: B023 (called before the loop moves on)
            return out  # type: ignore[no-any-return]

        # the kernel's signature with objects as annotations (torch 2.4's own op refuses this
        # module's string annotations)
        signature = inspect.signature(kernel)
        parameters = [
            p.replace(annotation=annotations[p.name]) for p in signature.parameters.values()
        ]
        recorded.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=parameters, return_annotation=torch.Tensor
        )
        recorded.__annotations__ = {**annotations, "return": torch.Tensor}

        def setup_context(ctx: Any, inputs: Any, output: Any, **keyword_only: Any) -> None:
            seen.append(repr(inputs[1]))  # noqa: B023

        def backward(ctx: Any, grad: torch.Tensor) -> Any:
            seen.append(tuple(ctx.needs_input_grad))  # noqa: B023
            return grad, None

        try:
            op = make_op(recorded)
        except ValueError as error:  # torch 2.4 takes no str default: the torch tier neither
            refused.append(str(error))
            continue
        op.register_autograd(backward, setup_context=setup_context)
        op(torch.ones(1, requires_grad=True), *args, **kwargs).sum().backward()
        runs.append(seen)
    if refused:  # then by torch's own op as by compatfn's
        assert len(refused) == 2 and all("unsupported default" in r for r in refused)
    return runs


#: What torch 2.13's own op hands the kernel ``k(x, c=2j)`` of ``(Tensor x, complex c=1j)``,
#: its setup_context and backward, with an input requiring grad (measured): an argument equal
#: to the schema's default is left out (the kernel gets its own), anything else converted.
_COMPLEX_DEFAULT_CASES = [
    ((), "2j", (1j,), (True,)),
    ((1j,), "2j", (1j,), (True,)),
    ((3j,), "3j", (3j,), (True, False)),
    ((1,), "(1+0j)", (1 + 0j,), (True, False)),
    ((True,), "(1+0j)", (1 + 0j,), (True, False)),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", range(len(_COMPLEX_DEFAULT_CASES)))
def test_a_complex_argument_equal_to_its_default_is_left_out(tier, case):
    """A ``complex`` in an explicit schema: converted as torch converts it, and left out of the
    kernel's call where it equals its default (compatfn's tiers before: passed as given)."""
    args, kernel_saw, setup_saw, needs = _COMPLEX_DEFAULT_CASES[case]
    seen: List[Any] = []

    def kernel(x, c=2j):  # type: ignore[no-untyped-def]
        seen.append(repr(c))
        return x.clone()

    define = make(tier, "complex_default", schema="(Tensor x, complex c=1j) -> Tensor")
    if not _parses_complex_defaults():  # torch 1.8: its parser's error, naming the op
        with pytest.raises(RuntimeError, match="complex_default"):
            define(kernel)
        return
    op = define(kernel)

    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        seen.append(tuple(inputs[1:]))

    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        seen.append(tuple(ctx.needs_input_grad))
        return grad, None

    op.register_autograd(backward, setup_context=setup_context)
    op(torch.ones(1, requires_grad=True), *args).sum().backward()
    assert seen[:2] == [kernel_saw, setup_saw]
    if _facts.NEEDS_INPUT_GRAD_WRITABLE:  # else as setup_context saw it (custom-ops.md)
        assert seen[2] == needs
    seen.clear()
    op(torch.ones(1), *args)
    assert seen[0] == kernel_saw


def _parses_complex_defaults() -> bool:
    try:
        torch._C.parse_schema("f(complex c=1j) -> Tensor")
    except RuntimeError:
        return False
    return True


#: The same with ``d: Optional[torch.device] = "cuda:1"`` (torch 2.13, measured): the schema
#: keeps that default a str, so setup_context gets the str for an argument left out, and no
#: argument given equals it (a given "cuda:1" is a device).
_OPTIONAL_DEVICE_DEFAULT_CASES = [
    ((), "'cuda:1'", "'cuda:1'", (True,)),
    (("cuda:1",), "device(type='cuda', index=1)", "device(type='cuda', index=1)", (True, False)),
    ((None,), "None", "None", (True, False)),
    (("cuda",), "device(type='cuda')", "device(type='cuda')", (True, False)),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", range(len(_OPTIONAL_DEVICE_DEFAULT_CASES)))
def test_an_optional_device_parameter_with_a_str_default(tier, case):
    """compatfn's tiers before: a given "cuda:1" was left out as equal to the default, and
    setup_context got a device for an argument left out."""
    args, kernel_saw, setup_saw, needs = _OPTIONAL_DEVICE_DEFAULT_CASES[case]

    def kernel(x, d="cuda:1"):  # type: ignore[no-untyped-def]
        return repr(d), x.clone()

    annotations = {"x": torch.Tensor, "d": Optional[torch.device]}
    for seen in _device_default_runs(tier, kernel, annotations, args, {}):
        assert seen[:2] == [kernel_saw, setup_saw]
        if _facts.NEEDS_INPUT_GRAD_WRITABLE:  # else as setup_context saw it (custom-ops.md)
            assert seen[2] == needs
