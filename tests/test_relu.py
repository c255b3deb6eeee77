"""The reference ReLU suite (compatfn.relu) keeps its documented semantics on every torch:
values and gradients (exact zeros, NaN and inf handling, kinks), every dtype and shape, the memory
each Function saves, and check_function's verdict on each."""

from __future__ import annotations

import contextlib
import gc
import math
import re
import weakref
from typing import Callable, Dict, List, Tuple

import pytest
import torch

import compatfn
import compatfn.relu as R
from compatfn.testing import check_function, saved_bytes
from compatfn.testing._compile_probes import plain_compile_failure

CLIP = 2.0
HAS_HOOKS = hasattr(getattr(torch.autograd, "graph", None), "saved_tensors_hooks")
TORCH = compatfn.core._TORCH_VERSION


def _call_inplace(x: torch.Tensor) -> torch.Tensor:
    return R.inplace_relu(x.clone())  # never on the caller's tensor (a leaf in most tests)


# name -> (callable on x, Function class, extra positional args, "clipped?")
CASES: Dict[str, Tuple[Callable[[torch.Tensor], torch.Tensor], type, tuple, bool]] = {
    "ReLU": (R.relu, R.ReLU, (), False),
    "ClippedReLU": (lambda x: R.clipped_relu(x, CLIP), R.ClippedReLU, (CLIP,), True),
    "MaskReLU": (R.mask_relu, R.MaskReLU, (), False),
    "InplaceReLU": (_call_inplace, R.InplaceReLU, (), False),
    "BitReLU": (R.bit_relu, R.BitReLU, (), False),
}
NAMES = list(CASES)


def _expected(x: torch.Tensor, clipped: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """Reference value and "gradient passes" mask, computed in float64 on the CPU."""
    d = x.detach().double().cpu()
    if clipped:
        value = d.clamp(0, CLIP)
        keep = (d > 0) & (d < CLIP)
    else:
        value = torch.where(d > 0, d, torch.zeros_like(d))
        value = torch.where(torch.isnan(d), d, value)
        keep = (d > 0) | torch.isnan(d)
    return value, keep


def _assert_identical(got: torch.Tensor, expect: torch.Tensor) -> None:
    got = got.detach().double().cpu()
    assert got.shape == expect.shape
    same = (got == expect) | (torch.isnan(got) & torch.isnan(expect))
    assert bool(same.all()), f"\n got    {got}\n expect {expect}"


def _special_values(device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    inf, nan = math.inf, math.nan
    values = [-3.0, -1e-30, -0.0, 0.0, 1e-30, 0.5, 1.0, CLIP, 2.5, inf, -inf, nan]
    return torch.tensor(values, dtype=dtype, device=device)


@pytest.mark.parametrize("name", NAMES)
def test_values_and_gradients_at_kinks_exactly(name: str, device: torch.device) -> None:
    fn, _, _, clipped = CASES[name]
    x = _special_values(device).requires_grad_()
    # Incoming gradients include inf and NaN: where the gradient is blocked it must be exactly 0.
    g = torch.tensor(
        [1.0, 2.0, math.inf, math.nan, 3.0, -4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], device=device
    )
    y = fn(x)
    (gx,) = torch.autograd.grad(y, x, g)
    value, keep = _expected(x, clipped)
    _assert_identical(y, value)
    _assert_identical(gx, torch.where(keep, g.double().cpu(), torch.zeros(12, dtype=torch.double)))
    # The kinks themselves: x == 0 (and x == C) give gradient 0.
    zero_idx = [2, 3] + ([7] if clipped else [])
    assert gx[zero_idx].eq(0).all()


def test_zero_sign_is_the_same_on_every_torch(device: torch.device) -> None:
    y = R.relu(torch.tensor([-0.0], device=device))
    assert math.copysign(1.0, float(y)) == 1.0  # +0.0 (torch.relu gives -0.0 on torch >= 1.13)


def _shapes(device: torch.device) -> List[Tuple[str, torch.Tensor]]:
    base = torch.linspace(-3.3, 3.1, 3 * 5 * 9, device=device).reshape(3, 5, 9)
    return [
        ("0-d", torch.tensor(-0.7, device=device)),
        ("0-d positive", torch.tensor(0.7, device=device)),
        ("empty", torch.empty(0, device=device)),
        ("empty 2-d", torch.empty(3, 0, device=device)),
        ("1", torch.tensor([1.5], device=device)),
        ("odd", torch.linspace(-1.1, 2.9, 13, device=device)),
        ("multiple of 8", torch.linspace(-1.1, 2.9, 64, device=device)),
        ("3-d", base),
        ("transposed", base.transpose(0, 2)),
        ("strided", base[:, ::2, 1::3]),
        ("expanded", torch.linspace(-1, 1, 5, device=device).expand(4, 5)),
    ]


@pytest.mark.parametrize("name", NAMES)
def test_any_shape_and_layout(name: str, device: torch.device) -> None:
    fn, _, _, clipped = CASES[name]
    for label, t in _shapes(device):
        x = t.clone() if label != "expanded" else t  # keep the layouts under test
        x = x.detach().requires_grad_() if label != "expanded" else x.requires_grad_()
        y = fn(x)
        value, keep = _expected(x, clipped)
        assert y.shape == x.shape, label
        _assert_identical(y, value)
        g = torch.arange(y.numel(), dtype=y.dtype, device=device).reshape(y.shape) + 1
        (gx,) = torch.autograd.grad(y, x, g)
        _assert_identical(gx, torch.where(keep, g.double().cpu(), torch.zeros_like(value)))
        # a non-contiguous, expanded incoming gradient
        (gx2,) = torch.autograd.grad(fn(x), x, torch.ones((), device=device).expand(y.shape))
        _assert_identical(gx2, keep.double())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", NAMES)
def test_dtypes(name: str, dtype: torch.dtype, device: torch.device) -> None:
    fn, _, _, clipped = CASES[name]
    x = (torch.linspace(-4, 4, 41) + 0.05).to(device=device, dtype=dtype)  # no Half linspace on 1.8
    x = torch.cat([x, _special_values(device, dtype)]).requires_grad_()
    y = fn(x)
    assert y.dtype == dtype
    value, keep = _expected(x, clipped)  # x is exact in float64, so is the reference
    _assert_identical(y, value.to(dtype).double())
    g = torch.linspace(-2, 2, x.numel()).to(device=device, dtype=dtype)
    (gx,) = torch.autograd.grad(y, x, g)
    assert gx.dtype == dtype
    _assert_identical(gx, torch.where(keep, g.double().cpu(), torch.zeros_like(value)))


def _kink_free(device: torch.device, n: int = 11) -> torch.Tensor:
    """float64 values at least 0.1 away from 0 and CLIP (for finite differences)."""
    values = [-2.9, -1.7, -0.6, -0.15, 0.2, 0.7, 1.3, 1.85, 2.3, 3.1, 0.45, -0.35, 1.1]
    x = torch.tensor(values[:n], dtype=torch.float64, device=device)
    assert ((x.abs() >= 0.1) & ((x - CLIP).abs() >= 0.1)).all()
    return x.requires_grad_()


class _HandWrittenInplaceReLU(torch.autograd.Function):
    """The control: InplaceReLU's math as a hand-written legacy Function, no compatfn."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def,override]
        x.relu_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def,override]
        (y,) = ctx.saved_tensors
        return g * (y > 0)


def _compiled_inplace_gradient(apply: Callable[..., torch.Tensor], device: torch.device) -> list:
    """The gradient of ``apply`` compiled (aot_eager, fullgraph) at [-1, 2]: [0, 1] when right.

    torch 2.13 and 2.15 compile in-place mark_dirty Functions wrongly, hand-written ones too
    (aot_eager returns the identity gradient; pytorch #184113, #180642).
    """
    leaf = torch.tensor([-1.0, 2.0], device=device, requires_grad=True)
    out = torch.compile(lambda x: apply(x), fullgraph=True, backend="aot_eager")(leaf.clone())
    (g,) = torch.autograd.grad(out, leaf, torch.ones(2, device=device))
    return g.tolist()


def _compile_skip_reason() -> str:
    return compatfn.core._dynamo_unsupported() or ""


# The ctx method each Function uses that some torch cannot compile at all (torch 2.1: dynamo
# refuses to inline FunctionCtx.set_materialize_grads / mark_dirty, also without compatfn).
CTX_FEATURE = {"MaskReLU": "set_materialize_grads", "InplaceReLU": "mark_dirty"}


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("name", NAMES)
def test_check_function(name: str, device: torch.device) -> None:
    _, cls, extra, _ = CASES[name]
    x = _kink_free(device)
    checks = None
    if name == "InplaceReLU":  # compile: see test_compile_runs_or_skips_for_a_proven_limitation
        checks = [c for c in compatfn.testing.CHECKS if c != "compile"]
    report = check_function(cls, x, *extra, checks=checks)
    assert {"forward", "gradcheck", "gradgradcheck"} <= set(report.ran), str(report)
    assert all(reason for reason in report.skipped.values()), str(report)
    if TORCH < (2, 0):
        assert "vmap" in report.skipped and "compile" in report.skipped
    if (
        name in ("ReLU", "ClippedReLU", "MaskReLU")
        and TORCH >= (2, 0)
        and compatfn.mode(cls) == "native"
    ):
        assert "vmap" in report.ran, str(report)
    if checks is None and not _compile_skip_reason():
        # Where torch.compile works, the compile check runs; the only skip allowed is a torch
        # limitation that the plain-torch probe reproduces (named, with the torch version).
        if name not in CTX_FEATURE or TORCH >= (2, 4):
            assert "compile" in report.ran, str(report)
        elif "compile" not in report.ran:
            why = report.skipped["compile"]
            assert f"ctx.{CTX_FEATURE[name]}" in why and str(torch.__version__) in why, why
            assert plain_compile_failure(CTX_FEATURE[name], "aot_eager")


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("name", sorted(CTX_FEATURE))
def test_compile_runs_or_skips_for_a_proven_limitation(name: str, device: torch.device) -> None:
    """MaskReLU / InplaceReLU compile where torch can; a skip needs the plain-torch reproduction."""
    why = _compile_skip_reason()
    if why:
        pytest.skip(why)
    _, cls, extra, _ = CASES[name]
    feature = CTX_FEATURE[name]
    plain = plain_compile_failure(feature, "aot_eager")
    if TORCH == (2, 1):  # measured: dynamo 2.1 cannot inline these FunctionCtx methods
        assert plain is not None and plain.error == "Unsupported", plain
        assert plain.ctx_methods == (feature,), plain
    if TORCH >= (2, 2):  # measured on 2.2, 2.3, 2.4, 2.13, 2.15
        assert plain is None, plain
    try:
        report = check_function(cls, _kink_free(device), *extra, checks=["compile"])
    except AssertionError as error:
        # Only the failure torch has without compatfn: wrong compiled gradients (not an error
        # raised, not wrong outputs), and exactly the hand-written control's wrong gradients.
        if name != "InplaceReLU" or not re.search(r"gradients(\[\d+\])? differ", str(error)):
            raise
        control = _compiled_inplace_gradient(_HandWrittenInplaceReLU.apply, device)
        if control == [0.0, 1.0]:
            raise  # torch compiles the control right: the failure is compatfn's
        assert _compiled_inplace_gradient(cls.apply, device) == control, str(error)
        pytest.xfail(
            f"torch {torch.__version__} compiles in-place mark_dirty Functions with wrong "
            f"gradients even without compatfn ({control} for [0, 1]; pytorch #184113, #180642)"
        )
    if plain is None:
        assert report.ran == ["compile"], str(report)
    else:
        assert report.ran == [], str(report)
        reason = report.skipped["compile"]
        assert f"ctx.{feature}" in reason, reason
        assert f"torch {torch.__version__}" in reason, reason
        assert "plain legacy-form" in reason and plain.headline in reason, reason


@pytest.mark.parametrize("name", NAMES)
def test_double_backward_is_the_same_masking(name: str, device: torch.device) -> None:
    fn, _, _, clipped = CASES[name]
    x = _kink_free(device)
    g = torch.linspace(-1, 1, x.numel(), dtype=torch.float64, device=device).requires_grad_()
    (gx,) = torch.autograd.grad(fn(x), x, g, create_graph=True)
    v = torch.arange(x.numel(), dtype=torch.float64, device=device)
    gg, gxx = torch.autograd.grad(gx, (g, x), v, allow_unused=True)
    _, keep = _expected(x, clipped)
    _assert_identical(gg, torch.where(keep, v.cpu(), torch.zeros_like(v.cpu())))
    assert gxx is None or bool((gxx == 0).all())  # second derivative w.r.t. x: 0 (a.e.)


def test_clipped_relu_arguments(device: torch.device) -> None:
    x = torch.tensor([-1.0, 0.5, 1.5, 3.0], device=device, requires_grad=True)
    assert R.clipped_relu(x).tolist() == [0.0, 0.5, 1.0, 1.0]  # default clip=1.0
    assert R.clipped_relu(x, clip=2.0).tolist() == [0.0, 0.5, 1.5, 2.0]
    assert R.ClippedReLU.apply(x, 2.0).tolist() == [0.0, 0.5, 1.5, 2.0]
    (g,) = torch.autograd.grad(R.clipped_relu(x).sum(), x)  # backward with the default filled in
    assert g.tolist() == [0.0, 1.0, 0.0, 0.0]
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="clip"):
            R.clipped_relu(x, bad)
        with pytest.raises(ValueError, match="clip"):
            R.ClippedReLUModule(bad)


def test_inplace_relu_semantics(device: torch.device) -> None:
    values = [-1.0, 2.0, -3.0, 4.0, 5.0, -6.0]
    with pytest.raises(RuntimeError, match="leaf"):
        # Like every custom in-place Function, autograd raises after forward ran.
        R.inplace_relu(torch.tensor(values, device=device, requires_grad=True))
    leaf = torch.tensor(values, device=device, requires_grad=True)
    # on a non-leaf: same object back, version bumped, gradient through the original graph
    x = leaf * 1
    version = x._version
    y = R.inplace_relu(x)
    assert y is x and x._version > version
    (g,) = torch.autograd.grad(y, leaf, torch.ones(6, device=device))
    assert g.tolist() == [0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    # on a view of a non-leaf: the base sees the change, gradients flow through the view
    base = leaf * 1
    view = base[1::2]
    out = R.inplace_relu(view)
    assert base.tolist() == [-1.0, 2.0, -3.0, 4.0, 5.0, 0.0]
    assert out is view
    (g,) = torch.autograd.grad(base, leaf, torch.ones(6, device=device))
    assert g.tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    # without autograd: plain in-place op
    t = torch.tensor([-2.0, 3.0], device=device)
    out = R.inplace_relu(t)  # a new Tensor object on torch < 2.0 / legacy (pytorch #90209)
    assert out.data_ptr() == t.data_ptr() and t.tolist() == [0.0, 3.0]
    with torch.no_grad():
        z = leaf * 1
        R.inplace_relu(z)
    assert z.tolist() == [0.0, 2.0, 0.0, 4.0, 5.0, 0.0]


class _DropGrad(torch.autograd.Function):
    """Passes x through but gives it no gradient: upstream nodes receive an undefined grad."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def,override]
        return x.clone()

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def,override]
        return None


def test_mask_relu_handles_undefined_gradients(device: torch.device) -> None:
    x = torch.tensor([-1.0, 2.0], device=device, requires_grad=True)
    y = R.mask_relu(x)
    out = _DropGrad.apply(y) + (x * 0).sum()  # keeps x's graph alive through another path
    out.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [0.0, 0.0]


def _randn(n: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """Seeded values (the same on every device), requiring grad."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen).to(device).requires_grad_()


def test_saved_bytes_ratios(device: torch.device) -> None:
    """What each Function keeps alive, as ratios of numel (odd size: packing rounds up)."""
    n = 10007
    x = _randn(n, device)
    fp32 = 4 * n
    assert saved_bytes(R.ReLU, x) == fp32
    assert saved_bytes(R.ClippedReLU, x, CLIP) == n  # bool mask: 1 byte/element
    assert saved_bytes(R.MaskReLU, x) == n
    assert saved_bytes(R.BitReLU, x) <= n / 8 + 8  # 1 bit/element + rounding to a byte
    assert saved_bytes(R.BitReLU, x) == (n + 7) // 8
    assert saved_bytes(R.InplaceReLU, x * 1) == fp32  # the output (= the overwritten input)
    assert saved_bytes(R.BitReLU, torch.randn(0, device=device, requires_grad=True)) == 0
    assert saved_bytes(R.ReLU, x.detach()) == 0  # nothing requires grad, nothing is saved


def test_saved_bytes_vs_torch(device: torch.device) -> None:
    if not HAS_HOOKS:
        pytest.skip(
            f"torch {torch.__version__} has no saved_tensors_hooks (torch >= 1.10): the "
            "bytes torch.relu saves cannot be measured"
        )
    n = 1 << 16
    x = _randn(n, device)
    ref = saved_bytes(torch.relu, x)
    assert ref == 4 * n
    assert saved_bytes(R.MaskReLU, x) / ref <= 0.25
    assert saved_bytes(R.BitReLU, x) / ref <= 0.04
    assert saved_bytes(R.ClippedReLU, x) / saved_bytes(lambda t: t.clamp(0, CLIP), x) <= 0.25


@pytest.mark.parametrize("name", NAMES)
def test_saved_tensors_are_freed_after_backward(name: str, device: torch.device) -> None:
    """Nothing a Function saved outlives its backward and its output; on CUDA the allocator is
    back where it started, and held at least the saved bytes until then."""
    cuda = device.type == "cuda"
    if not HAS_HOOKS and not cuda:
        pytest.skip(f"torch {torch.__version__} has no saved_tensors_hooks (torch >= 1.10)")
    fn, cls, extra, _ = CASES[name]
    x = _randn(4099, device, seed=1)
    g = _randn(4099, device, seed=2).detach()
    expected = saved_bytes(cls, x * 1 if name == "InplaceReLU" else x, *extra) if HAS_HOOKS else 0
    before = torch.cuda.memory_allocated(device) if cuda else 0
    saved: List[weakref.ref] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(weakref.ref(t))
        return t

    hooks = HAS_HOOKS and torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    with hooks or contextlib.nullcontext():  # torch < 1.10: the allocator's count only
        y = fn(x)
    assert saved or not HAS_HOOKS, f"{name} saved nothing"
    if cuda:
        assert torch.cuda.memory_allocated(device) - before >= expected
    (gx,) = torch.autograd.grad(y, x, g)
    assert gx.shape == x.shape
    del y, gx
    gc.collect()
    alive = [ref() for ref in saved if ref() is not None]
    assert not alive, f"{name}: {len(alive)} saved tensor(s) outlive backward"
    if cuda:
        assert torch.cuda.memory_allocated(device) == before


def test_modules(device: torch.device) -> None:
    x = torch.linspace(-2, 3, 11, device=device)
    for module, fn in [
        (R.ReLUModule(), R.relu),
        (R.ClippedReLUModule(), R.clipped_relu),
        (R.MaskReLUModule(), R.mask_relu),
        (R.BitReLUModule(), R.bit_relu),
    ]:
        assert torch.equal(module(x), fn(x))
    assert R.ClippedReLUModule(clip=3.0)(x).max() == 3.0
    assert "clip=3.0" in repr(R.ClippedReLUModule(clip=3.0))
    t = x.clone()
    assert R.InplaceReLUModule()(t).data_ptr() == t.data_ptr()
    assert t.min() == 0


def test_wrappers_expose_forward_signature_and_docs() -> None:
    import inspect

    assert list(inspect.signature(R.clipped_relu).parameters) == ["x", "clip"]
    assert inspect.signature(R.clipped_relu).parameters["clip"].default == 1.0
    for wrapper in (R.relu, R.clipped_relu, R.mask_relu, R.inplace_relu, R.bit_relu):
        assert wrapper.__doc__ and "Example" in wrapper.__doc__


def test_package_imports_only_torch_and_stdlib() -> None:
    """compatfn.relu and compatfn.testing, every module of them: standard library and torch."""
    import ast
    import sys
    from pathlib import Path

    for package in (R, compatfn.testing):
        for path in sorted(Path(str(package.__file__)).parent.glob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
            stdlib = getattr(sys, "stdlib_module_names", None)
            for name in names - {"torch", "compatfn", "__future__"}:
                assert stdlib is None or name in stdlib, f"{path} imports {name}"
