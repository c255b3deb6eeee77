"""``opcheck`` on every torch: passing ops pass, broken ops fail."""

from __future__ import annotations

import inspect
import itertools
from typing import Any, Callable

import pytest
import torch

import compatfn
import compatfn.testing
from compatfn import library
from library_support import (
    TIERS,
    TORCH_MINOR,
    compiles,
    fresh,
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


def opcheck_errors() -> tuple:
    """What a failed opcheck raises: torch's OpCheckError (torch >= 2.4, for registered ops),
    compatfn's (its own opcheck)."""
    if library.HAS_TORCH_OPCHECK:
        from torch.testing._internal.optests.generate_tests import OpCheckError

        return (OpCheckError, library.OpCheckError)
    return (library.OpCheckError,)


@pytest.mark.parametrize("tier", TIERS)
def test_a_wrong_fake_kernel_fails_opcheck(tier):
    if not library.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device: no fake kernel runs")

    @make(tier, "bad_fake")
    def bad_fake(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    bad_fake.register_fake(lambda x: x.new_empty((x.shape[0] + 1,)))
    result = compatfn.testing.opcheck(
        bad_fake, (torch.randn(3),), test_utils="test_faketensor", raise_exception=False
    )
    assert isinstance(result["test_faketensor"], Exception), result
    with pytest.raises(opcheck_errors(), match="test_faketensor failed"):
        compatfn.testing.opcheck(bad_fake, (torch.randn(3),), test_utils="test_faketensor")


#: (the fake kernel's output, torch 2.13's message after the op's name), recorded from torch
#: 2.13's own opcheck (``MetadataMismatchError``).
FAKE_MISMATCHES = {
    "shape": (
        lambda x: x.new_empty((4,)),
        "mismatched tensor metadata: Shapes torch.Size([3]) and torch.Size([4]) are not equal!",
    ),
    "dtype": (
        lambda x: x.new_empty((3,), dtype=torch.float64),
        "mismatched tensor metadata: Dtypes torch.float32 and torch.float64 are not equal!",
    ),
    "strides": (
        lambda x: x.new_empty_strided((3,), (2,)),
        "mismatched tensor metadata: Stride mismatch! Strides are (1,) and (2,) (mismatched at 0)!",
    ),
    "storage offset": (lambda x: x.new_empty((4,))[1:], "mismatched storage offset"),
}
#: The first torch whose own opcheck is known to report these on the CPU (measured: strides
#: passed by 2.12, reported by 2.13; a storage offset passed by 2.4, reported by 2.12); before,
#: compatfn's op gets what torch's own gets (also passing).
_REPORTED_SINCE = {"strides": (2, 13), "storage offset": (2, 12)}


def _fake_mismatch_error(make_op: Callable[[Callable], Any], fake: Callable, check: Any) -> Any:
    """(type name, message with the op's namespace as ``NS``) of the test_faketensor of
    ``check`` (an opcheck) for ``x * 2`` with the fake kernel ``fake``, the op made by
    ``make_op``."""

    def mismatched(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    op = make_op(mismatched)
    op.register_fake(fake)
    result = check(op, (torch.ones(3),), test_utils="test_faketensor", raise_exception=False)
    error = result["test_faketensor"]
    namespace = op._qualname.split("::")[0]
    return type(error).__name__, str(error).replace(f"{namespace}.", "NS.")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("what", sorted(FAKE_MISMATCHES))
def test_a_fake_kernel_mismatch_is_torchs_metadata_mismatch_error(tier, what):
    """compatfn before (torch 1.13-2.3): an AssertionError with its own words. Where torch has
    its own custom_op, an op with an operator gets what torch's own op gets from torch's opcheck
    (torch 2.4 and 2.5 raise a RuntimeError, measured); else the newest torch's error."""
    if not library.HAS_META_DEVICE:
        pytest.skip(f"torch {torch.__version__} has no meta device: no fake kernel runs")
    fake, expected = FAKE_MISMATCHES[what]
    found = _fake_mismatch_error(make(tier, "mismatched"), fake, compatfn.testing.opcheck)
    if tier != "function" and library.HAS_TORCH_CUSTOM_OP:
        # The schema given: torch 2.4 cannot read this module's string annotations.
        schema = "(Tensor x) -> Tensor"
        own = torch.library.custom_op(f"{fresh('own')}::mismatched", mutates_args=(), schema=schema)
        assert found == _fake_mismatch_error(own, fake, torch.library.opcheck)
        if _REPORTED_SINCE.get(what, (2, 4)) <= TORCH_MINOR:
            assert found[0].endswith("Error"), found  # reported, not passed
        return
    assert found == (
        "MetadataMismatchError",
        "When comparing the output of NS.mismatched.default on FakeTensor and concrete "
        f"Tensors, found {expected}",
    )


def _aot_check(tier: str, step: float, **tolerances: float) -> Any:
    """opcheck's ``test_aot_dispatch_dynamic`` of an op whose kernel returns something else on
    every call (``step`` more each time): compiled and eager differ by that much."""
    if tier == "function" or compiles() is not None:
        pytest.skip("no torch.compile of the op here (function tier or this torch)")
    calls = itertools.count()

    @make(tier, "drifting")
    def drifting(x: torch.Tensor) -> torch.Tensor:
        return x + next(calls) * step

    drifting.register_fake(lambda x: torch.empty_like(x))
    result = compatfn.testing.opcheck(
        drifting,
        (torch.ones(3),),
        test_utils="test_aot_dispatch_dynamic",
        raise_exception=False,
        **tolerances,
    )
    return result["test_aot_dispatch_dynamic"]


@pytest.mark.parametrize("tier", TIERS)
def test_compiled_results_different_from_eager_fail_opcheck(tier):
    assert isinstance(_aot_check(tier, 1.0), Exception)


@pytest.mark.parametrize("tier", TIERS)
def test_compiled_and_eager_runs_start_from_one_seed(tier):
    """An op drawing random numbers passes ``test_aot_dispatch_dynamic``: each run starts from
    the same seed, as in torch's opcheck (compatfn's own reported a difference)."""
    if tier == "function" or compiles() is not None:
        pytest.skip("no torch.compile of the op here (function tier or this torch)")

    @make(tier, "noisy")
    def noisy(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(x.shape)

    noisy.register_fake(lambda x: torch.empty_like(x))
    args = (torch.ones(3),)
    result = compatfn.testing.opcheck(noisy, args, test_utils="test_aot_dispatch_dynamic")
    assert result == {"test_aot_dispatch_dynamic": "SUCCESS"}


@pytest.mark.parametrize("tier", TIERS)
def test_an_error_while_compiling_is_the_ops_own(tier):
    """A fake kernel's error in ``test_aot_dispatch_dynamic`` is reported as it was raised, as
    torch's opcheck reports it (compatfn's own reported dynamo's exception around it)."""
    if tier == "function" or compiles() is not None:
        pytest.skip("no torch.compile of the op here (function tier or this torch)")

    @make(tier, "fake_raises")
    def fake_raises(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def refuse(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("refused by the fake kernel")

    fake_raises.register_fake(refuse)
    result = compatfn.testing.opcheck(
        fake_raises, (torch.ones(3),), test_utils="test_aot_dispatch_dynamic", raise_exception=False
    )
    error = result["test_aot_dispatch_dynamic"]
    assert type(error) is ValueError and str(error) == "refused by the fake kernel"


def _torch_opcheck_takes_tolerances() -> bool:
    opcheck = getattr(getattr(torch, "library", None), "opcheck", None)
    return opcheck is None or "atol" in inspect.signature(opcheck).parameters


@pytest.mark.parametrize("tier", TIERS)
def test_opcheck_tolerances(tier):
    """``atol``/``rtol`` as torch's opcheck takes them (torch 2.4's has none: its TypeError)."""
    assert isinstance(_aot_check(tier, 1e-4), Exception)
    if not library.HAS_TORCH_OPCHECK:  # compatfn's own opcheck compares with them
        assert _aot_check(tier, 1e-4, atol=0.1, rtol=0.0) == "SUCCESS"
    elif _torch_opcheck_takes_tolerances():  # handed to torch's (which reads them its way)
        _aot_check(tier, 1e-4, atol=0.1, rtol=0.0)
    else:
        with pytest.raises(TypeError, match="atol"):
            _aot_check(tier, 1e-4, atol=0.1, rtol=0.0)


@pytest.mark.parametrize("tier", TIERS)
def test_a_given_schema(tier):
    """``schema=`` replaces inference (an unannotated function), and opcheck passes."""

    def scale(x, s=2.0):
        return x * s

    op = make(tier, "given", schema="(Tensor x, float s=2.0) -> Tensor")(scale)
    op.register_fake(lambda x, s=2.0: torch.empty_like(x))
    op.register_autograd(
        lambda ctx, g: (g * ctx.s, None),
        setup_context=lambda ctx, inputs, output: setattr(ctx, "s", inputs[1]),
    )
    x = torch.randn(3, requires_grad=True)
    assert torch.equal(op(x, s=3).detach(), x.detach() * 3)
    result = compatfn.testing.opcheck(op, (x,), {"s": 3.0})
    assert ok_or_skipped(result), result


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_an_op_of_data_dependent_output_size_passes(tier):
    """A fake kernel making a data-dependent size (``get_ctx().new_dynamic_size()``) passes every
    test, as with torch 2.13's opcheck (before, on torch 2.2 and 2.3: test_faketensor's
    FakeTensorMode had no shape environment, and dynamo did not capture such an op)."""
    if not hasattr(torch.library, "get_ctx"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.get_ctx (torch >= 2.2)")
    why = compiles()
    if why:
        pytest.skip(why)

    @make(tier, "nonzero_rows")
    def nonzero_rows(x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x)

    nonzero_rows.register_fake(
        lambda x: x.new_empty(torch.library.get_ctx().new_dynamic_size(), x.dim(), dtype=torch.long)
    )
    result = compatfn.testing.opcheck(nonzero_rows, (torch.tensor([1.0, 0.0, 2.0]),))
    assert all(v == "SUCCESS" for v in result.values()), result
