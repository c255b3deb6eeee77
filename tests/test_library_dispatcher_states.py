"""Calls the short path must leave to the operator: a profiler, a TorchFunctionMode, forward-mode
AD, lazily conjugated or negated views, torch.fx tracing, torch.func transforms. Each compares
with torch's own behaviour on the running torch: its custom_op (torch >= 2.4), or the operator a
registered op defines, called directly."""

# No ``from __future__ import annotations``: torch 2.4's own custom_op cannot read string
# annotations.

from typing import List, Optional

import pytest
import torch
import torch.fx

from compatfn.library import _facts
from library_support import TIERS, fresh, make

HAS_TORCH_OP = hasattr(getattr(torch, "library", None), "custom_op")
HAS_LAZY_CONJ = hasattr(torch.Tensor, "is_neg")
TorchFunctionMode = getattr(torch.overrides, "TorchFunctionMode", None)


def _double(x: torch.Tensor) -> torch.Tensor:
    _double.seen.append((x.is_conj(), x.is_neg()) if HAS_LAZY_CONJ else None)
    return x * 2


_double.seen = []


def _op(tier, fn=_double, name="double"):
    op = make(tier, name)(fn)
    op.register_autograd(lambda ctx, g: g * 2, setup_context=lambda ctx, inputs, output: None)
    return op


def _reference(tier, op):
    """What torch itself does with the same call: torch's own custom_op of the same function
    (torch tier), the registered operator called directly (registered tier); None where torch has
    no operator (function tier)."""
    if tier == "torch":
        theirs = torch.library.custom_op(f"{fresh('theirs')}::double", _double, mutates_args=())
        theirs.register_autograd(
            lambda ctx, g: g * 2, setup_context=lambda ctx, inputs, output: None
        )
        return theirs
    return op._opoverload if tier == "registered" else None


def _normalised(names, op):
    namespace = op._qualname.split("::")[0] if hasattr(op, "_qualname") else op._namespace
    return [n.replace(namespace, "NS") for n in names if namespace in n]


_PROFILERS = {"autograd": torch.autograd.profiler.profile}
if hasattr(torch.autograd, "profiler_legacy"):  # torch >= 1.9
    _PROFILERS["legacy"] = torch.autograd.profiler_legacy.profile


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("profiler", sorted(_PROFILERS))
def test_profiler_records_the_op_as_torch_does(tier, profiler):
    op = _op(tier)
    reference = _reference(tier, op)

    def profiled(fn, name):
        with _PROFILERS[profiler]() as prof:
            fn(torch.ones(2))
        return [e.name.replace(name, "NS") for e in prof.function_events if name in e.name]

    got = profiled(op, op._qualname.split("::")[0])
    if reference is None:  # no operator: a range named by the op
        assert got == ["NS::double"]
    else:
        namespace = str(reference).split(".")[-3] if tier == "registered" else None
        namespace = namespace or reference._qualname.split("::")[0]
        assert got == profiled(reference, namespace)
    if tier == "registered":
        assert got == ["NS::double"]


@pytest.mark.skipif(TorchFunctionMode is None, reason="no TorchFunctionMode before torch 1.13")
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_a_torch_function_mode_sees_the_operator(tier):
    class Seen(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.funcs.append(str(func).split(".", 1)[-1])
            return func(*args, **(kwargs or {}))

    op = _op(tier)
    reference = _reference(tier, op)
    x = torch.ones(2)
    seen = []
    for fn in (op, reference):
        mode = Seen()
        mode.funcs = []
        with mode:
            fn(x)
        seen.append(mode.funcs)
    assert seen[0] == seen[1] == ["double.default"]


@pytest.mark.skipif(not HAS_LAZY_CONJ, reason="no lazy conjugate views before torch 1.10")
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("view", ["conj", "neg", "imag_of_conj"])
@pytest.mark.parametrize("grad", [False, True])
def test_lazy_views_are_materialized_before_the_kernel(tier, view, grad):
    op = _op(tier)
    if view == "neg":
        base = torch.tensor([1.0, 2.0], requires_grad=grad)
        x = torch._neg_view(base)
    else:
        base = torch.tensor([1 + 2j, 3 - 1j], requires_grad=grad)
        x = base.conj() if view == "conj" else base.conj().imag  # the latter: real, negated
    assert x.is_conj() or x.is_neg()
    _double.seen.clear()
    out = op(x)
    assert _double.seen == [(False, False)]
    assert torch.equal(out.detach(), (x * 2).detach())
    if grad:
        (g,) = torch.autograd.grad(out.abs().sum() if view == "conj" else out.sum(), base)
        (expected,) = torch.autograd.grad(
            (x * 2).abs().sum() if view == "conj" else (x * 2).sum(), base
        )
        assert torch.allclose(g, expected)


def _lazy_view_candidates() -> List[torch.Tensor]:
    """Real and complex tensors, lazily conjugated, negated, both, or neither, as torch's public
    operations make them."""
    z = torch.tensor([[1 + 2j, 3 - 1j], [0.5j, -2 + 0j]])
    r = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    made = [r, z, z.conj(), z.conj().conj(), z.conj().imag, z.conj().real, z.imag, r.conj()]
    made += [torch._neg_view(r), torch._neg_view(z), torch._neg_view(z.conj())]
    made += [z.conj().imag.t(), z.conj()[0], z.conj().imag.view(4), torch._neg_view(r)[1:]]
    made += [r.to(torch.float64).conj(), z.to(torch.complex128).conj(), z.conj().imag.double()]
    if hasattr(torch, "_efficientzerotensor"):  # torch >= 1.11
        made += [torch._efficientzerotensor((2, 2)), torch._efficientzerotensor(2).t()]
    return made


@pytest.mark.skipif(not HAS_LAZY_CONJ, reason="no lazy conjugate views before torch 1.10")
def test_the_lazy_view_test_asks_is_conj_only_of_complex_tensors():
    # See NOTE: [lazy views of real tensors]: the generated test must agree with torch's own
    # is_conj() and is_neg(), and no real tensor carries the conjugate bit.
    from compatfn.library._storage import (
        fallback_source,
    )

    source = fallback_source("t")
    candidates = _lazy_view_candidates()
    assert {bool(t.is_conj()) for t in candidates} == {False, True}
    for t in candidates:
        zero = hasattr(t, "_is_zerotensor") and t._is_zerotensor()
        assert eval(source, {"t": t}) == (t.is_conj() or t.is_neg() or zero), (t.dtype, t)
        assert t.dtype.is_complex or not t.is_conj()


HAS_ZERO_TENSOR = hasattr(torch.Tensor, "_is_zerotensor")


def _zero_tensor_ops(tier, seen, mutates_args=()):
    """The op on ``tier`` and, on the torch tier, torch's own op of the same kernel."""

    def zeros(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append((x._is_zerotensor(), x.stride(), y._is_zerotensor()))
        if mutates_args:
            y.add_(x)
        return x * 2 + y

    ops = [make(tier, "zeros", mutates_args=mutates_args)(zeros)]
    if tier == "torch":
        own = torch.library.custom_op(f"{fresh('own')}::zeros", mutates_args=mutates_args)
        ops.append(own(zeros))
    return ops


@pytest.mark.skipif(not HAS_ZERO_TENSOR, reason="no ZeroTensor before torch 1.11")
@pytest.mark.parametrize("tier", TIERS)
def test_a_zero_tensor_is_materialized_before_the_kernel(tier):
    """torch's ZeroTensor fallback hands the kernel zeros expanded to the shape, and refuses a
    ZeroTensor the op mutates (compatfn before: the kernel got the ZeroTensor, and returned one)."""
    seen: List[tuple] = []
    for op in _zero_tensor_ops(tier, seen):
        seen.clear()
        out = op(torch._efficientzerotensor((2, 3)), torch.ones(2, 3))
        assert seen == [(False, (0, 0), False)]
        assert not out._is_zerotensor() and torch.equal(out, torch.ones(2, 3))
    for op in _zero_tensor_ops(tier, seen, mutates_args=("y",)):
        with pytest.raises(RuntimeError, match=r"^ZeroTensors are immutable"):
            op(torch.ones(2, 3), torch._efficientzerotensor((2, 3)))


@pytest.mark.skipif(not HAS_LAZY_CONJ, reason="no lazy conjugate views before torch 1.10")
def test_a_mutated_lazy_view_is_refused_where_there_is_no_operator():
    def bump(x: torch.Tensor) -> None:
        x.add_(1)

    op = make("function", "bump", mutates_args=("x",))(bump)
    with pytest.raises(RuntimeError, match=r"::bump: argument 'x' is a lazily conjugated"):
        op(torch._neg_view(torch.ones(2)))


class _Calls(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, y):
        return self.op(y) + 1


def _fx_double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


#: An op defined at the module's top level, by its own name: torch 1.8's fx calls a node's
#: target by module and name.
fx_double = make("function", "fx_double")(_fx_double)


@pytest.mark.parametrize("tier", TIERS)
def test_fx_records_one_node(tier):
    op = fx_double if tier == "function" else _op(tier)
    module = torch.fx.symbolic_trace(_Calls(op))
    calls = [n.target for n in module.graph.nodes if n.op in ("call_function", "call_method")]
    expected = op if tier == "function" else op._opoverload
    assert calls[0] is expected and len(calls) == 2
    assert torch.equal(module(torch.ones(2)), torch.full((2,), 3.0))


def _cat(xs: List[torch.Tensor], y: Optional[torch.Tensor] = None) -> torch.Tensor:
    return torch.cat(xs) if y is None else torch.cat(xs) + y.sum()


class _CallsCat(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, a, b, c):
        return self.op([a, b], c)


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_fx_records_one_node_for_proxies_in_lists_and_optional_tensors(tier):
    op = make(tier, "cat")(_cat)
    module = torch.fx.symbolic_trace(_CallsCat(op))
    calls = [n.target for n in module.graph.nodes if n.op in ("call_function", "call_method")]
    assert calls == [op._opoverload]
    assert torch.equal(module(torch.ones(1), torch.ones(1), torch.ones(2)), torch.full((2,), 3.0))


def test_fx_without_an_importable_op_where_fx_imports_targets():
    """Where torch.fx's code imports a node's target by module and name (torch 1.8), an op it
    cannot import is traced through (its kernel's operations); elsewhere it is one node."""
    op = _op("function")
    module = torch.fx.symbolic_trace(_Calls(op))
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert (op in targets) == _facts.fx_calls_any_target()
    assert torch.equal(module(torch.ones(2)), torch.full((2,), 3.0))


@pytest.mark.skipif(
    not hasattr(torch, "func") or "registered" not in TIERS,
    reason="torch.func and the registered tier",
)
def test_torch_func_grad_names_the_op():
    """torch < 2.4 cannot run the autograd Function of an operator's Autograd kernel inside
    torch.func transforms (an assertion or a missing kernel, naming no op)."""
    op = _op("registered")
    with pytest.raises(RuntimeError, match=r"::double: torch .* inside torch.func transforms"):
        torch.func.grad(lambda y: op(y).sum())(torch.ones(2))
    # What does not differentiate still works.
    assert torch.equal(torch.func.vmap(op)(torch.ones(2, 3)), torch.full((2, 3), 2.0))


@pytest.mark.skipif(not hasattr(torch.autograd, "forward_ad"), reason="no forward AD")
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_forward_ad_as_the_operator(tier, requires_grad):
    import torch.autograd.forward_ad as fwAD

    op = _op(tier)
    results = []
    for fn in (op, _reference(tier, op)):
        try:
            with fwAD.dual_level():
                dual = fwAD.make_dual(torch.ones(2, requires_grad=requires_grad), torch.ones(2))
                tangent = fwAD.unpack_dual(fn(dual)).tangent
            results.append(None if tangent is None else tangent.tolist())
        except Exception as e:
            results.append((type(e).__name__, str(e).split("\n")[0]))
    assert results[0] == results[1]
