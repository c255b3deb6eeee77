"""The fake kernel of an op with an operator (``_registration.register_fake_kernel``): under a
FakeTensorMode it gets FakeTensors on their own device and ``torch.library.get_ctx()`` (torch
>= 2.2, through torch's registry of fake kernels), as torch's own custom op's fake kernel does."""

from __future__ import annotations

import inspect
from typing import Any, List, Tuple

import pytest
import torch

from compatfn import core
from compatfn.library import _facts
from library_support import TIERS, compiles, fresh, make, reset_dynamo

#: The tiers with an operator, so with a fake kernel torch's FakeTensorMode calls.
OPERATOR_TIERS = [t for t in TIERS if t != "function"]


def _needs_fake_registry() -> None:
    if not hasattr(getattr(torch, "library", None), "get_ctx"):
        pytest.skip(
            f"torch {torch.__version__} has no torch.library.get_ctx (torch >= 2.2): the fake "
            "kernel is the operator's Meta kernel (documented)"
        )


def _skip_where_torchs_op_refuses_a_meta_kernel(tier: str) -> None:
    """torch 2.4-2.12's own op refuses ``register_kernel("meta")`` (its fake kernel holds the
    Meta key: "already a kernel registered from python"; measured on 2.4 and 2.12); the
    ``torch`` tier's op is torch's."""
    if tier != "torch":
        return
    # The schema given: torch 2.4 cannot read this module's string annotations.
    own = torch.library.custom_op(
        f"{fresh('own')}::probe", _times_two, mutates_args=(), schema="(Tensor x) -> Tensor"
    )
    try:
        own.register_kernel("meta", torch.empty_like)
    except RuntimeError as error:
        pytest.skip(f"torch {torch.__version__}'s own custom_op refuses it: {error}")


def _times_two(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _nonzero_op(tier: str, seen: List[Tuple[str, str]]) -> Any:
    """``torch.nonzero`` as an op whose fake kernel asks for a data-dependent size."""

    @make(tier, "nonzero_rows")
    def nonzero_rows(x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x)

    def fake(x: torch.Tensor) -> torch.Tensor:
        seen.append((type(x).__name__, x.device.type))
        rows = torch.library.get_ctx().new_dynamic_size()
        return x.new_empty(rows, x.dim(), dtype=torch.long)

    nonzero_rows.register_fake(fake)
    return nonzero_rows


def _fake_mode() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    if "shape_env" not in inspect.signature(FakeTensorMode).parameters:  # torch 1.13
        return FakeTensorMode()
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return FakeTensorMode(shape_env=ShapeEnv())


@pytest.mark.parametrize("tier", OPERATOR_TIERS)
def test_a_fake_kernel_gets_a_context_for_data_dependent_sizes(tier):
    """Under a FakeTensorMode the fake kernel sees FakeTensors on the CPU and makes an unbacked
    size; with meta tensors ``get_ctx()`` raises torch's error (the registered tier before:
    meta tensors under the mode and ``get_ctx()`` None, an AttributeError in the kernel)."""
    _needs_fake_registry()
    seen: List[Tuple[str, str]] = []
    op = _nonzero_op(tier, seen)
    x = torch.tensor([0.0, 1.0, 2.0, 0.0])
    with _fake_mode() as mode:
        out = op(mode.from_tensor(x))
    assert seen == [("FakeTensor", "cpu")]
    assert isinstance(out.shape[0], torch.SymInt) and out.shape[1] == 1
    assert out.dtype == torch.long
    with pytest.raises(RuntimeError, match=r"get_ctx|data-dependent"):
        op(torch.empty(4, device="meta"))
    assert torch.equal(op(x), torch.tensor([[1], [2]]))


@pytest.mark.parametrize("tier", OPERATOR_TIERS)
def test_an_op_with_a_data_dependent_size_compiles(tier):
    """fullgraph, with dynamo capturing data-dependent output shapes: the compiled call gives
    the eager one's result."""
    _needs_fake_registry()
    why = compiles()
    if why:
        pytest.skip(why)
    op = _nonzero_op(tier, [])
    reset_dynamo()
    x = torch.tensor([3.0, 0.0, 5.0])
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(lambda t: op(t) * 2, backend="aot_eager", fullgraph=True)
        assert torch.equal(compiled(x), op(x) * 2)


def _kernel_under_dynamo(maker: Any) -> List[bool]:
    """Whether the kernel of ``torch.nonzero`` as an op made by ``maker(fn)`` ran while dynamo
    compiled, in a compiled call that stops its graph at the op (data-dependent sizes are not
    captured): the call runs eagerly."""
    compiling: List[bool] = []

    def nonzero_seen(x: torch.Tensor) -> torch.Tensor:
        compiling.append(core._is_compiling())
        return torch.nonzero(x)

    op = maker(nonzero_seen)
    op.register_fake(
        lambda x: x.new_empty(torch.library.get_ctx().new_dynamic_size(), 1, dtype=torch.long)
    )
    reset_dynamo()
    x = torch.tensor([3.0, 0.0, 5.0])
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        compiled = torch.compile(lambda t: op(t) * 2, backend="aot_eager")
        assert torch.equal(compiled(x), torch.tensor([[0], [4]]))
    return compiling


@pytest.mark.parametrize("tier", OPERATOR_TIERS)
def test_a_graph_break_at_an_op_runs_its_kernels_without_dynamo(tier):
    """The kernel of a call that dynamo leaves out of its graph runs without dynamo, as torch
    2.13's own op runs it (before: dynamo took the operator's kernels for frames to compile;
    torch 2.2: its AssertionError, 2.3: the kernel ran while dynamo compiled it). The ``torch``
    tier's op is torch's own: side by side with it (torch 2.4's own op runs the kernel while
    dynamo compiles, measured)."""
    _needs_fake_registry()
    why = compiles()
    if why:
        pytest.skip(why)
    ours = _kernel_under_dynamo(lambda fn: make(tier, "nonzero_seen")(fn))
    if tier != "torch":
        assert ours == [False]
        return
    own = _kernel_under_dynamo(
        lambda fn: torch.library.custom_op(
            f"{fresh('own')}::nonzero_seen", fn, mutates_args=(), schema="(Tensor x) -> Tensor"
        )
    )
    assert ours == own


@pytest.mark.parametrize("tier", OPERATOR_TIERS)
def test_a_fake_kernel_makes_its_output_on_the_device_it_is_given(tier):
    """A fake kernel making its output with ``torch.empty(shape, device=device)`` under a
    FakeTensorMode: a FakeTensor on that device (the registered tier's Meta kernel before: a real
    tensor, refused by torch's check "tensor's device must be `meta`")."""
    _needs_fake_registry()

    @make(tier, "moved")
    def moved(x: torch.Tensor, device: torch.device) -> torch.Tensor:
        return x.to(device) * 1

    moved.register_fake(lambda x, device: torch.empty(x.shape, device=device))
    with _fake_mode() as mode:
        out = moved(mode.from_tensor(torch.ones(3)), torch.device("cpu"))
    assert type(out).__name__ == "FakeTensor"
    assert out.shape == (3,) and out.device.type == "cpu"


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("order", ["meta kernel first", "fake first"])
def test_meta_tensors_get_the_meta_kernel_and_fake_tensors_the_fake_one(tier, order):
    """As torch's own op (the ``torch`` tier's row): a kernel registered for ``"meta"`` runs for
    meta tensors, registered before or after the fake kernel, which runs for FakeTensors
    (before: the fake kernel for both; the meta kernel's registration after the fake one was
    refused by torch's registry). Where the fake kernel is the Meta kernel (torch < 2.2) the
    FakeTensors reach the meta kernel; the ``function`` tier has no operator for a FakeTensorMode
    to hand them to (both documented)."""
    if not _facts.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device")
    _skip_where_torchs_op_refuses_a_meta_kernel(tier)
    calls: List[str] = []

    @make(tier, "twice")
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def meta(x: torch.Tensor) -> torch.Tensor:
        calls.append("meta")
        return torch.empty_like(x)

    def fake(x: torch.Tensor) -> torch.Tensor:
        calls.append("fake")
        return torch.empty_like(x)

    if order == "meta kernel first":
        twice.register_kernel("meta", meta)
    twice.register_fake(fake)
    if order == "fake first":
        twice.register_kernel("meta", meta)
    assert twice(torch.empty(2, device="meta")).shape == (2,)
    assert torch.equal(twice(torch.ones(2)), torch.full((2,), 2.0))
    assert calls == ["meta"]
    if tier == "function":
        return
    with _fake_mode() as mode:
        assert twice(mode.from_tensor(torch.ones(2))).shape == (2,)
    has_registry = hasattr(getattr(torch, "library", None), "get_ctx")
    assert calls == ["meta", "fake" if has_registry else "meta"]


@pytest.mark.parametrize("tier", OPERATOR_TIERS)
def test_a_meta_kernel_alone_is_no_fake_kernel(tier):
    """As torch's own op: with a kernel for ``"meta"`` and no fake kernel, a FakeTensorMode
    raises torch's error (torch >= 2.2; older torch runs the meta kernel, documented)."""
    _needs_fake_registry()
    _skip_where_torchs_op_refuses_a_meta_kernel(tier)

    @make(tier, "meta_only")
    def meta_only(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    meta_only.register_kernel("meta", lambda x: torch.empty_like(x))
    assert meta_only(torch.empty(2, device="meta")).device.type == "meta"
    mode = _fake_mode()
    with pytest.raises(RuntimeError, match="There was no fake impl registered for"), mode:
        meta_only(mode.from_tensor(torch.ones(2)))
