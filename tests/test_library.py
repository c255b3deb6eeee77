"""``compatfn.custom_op`` behaves like ``torch.library.custom_op`` on every torch of the matrix.

The promise guarded here: an operator written once against ``compatfn.custom_op`` -- the README's
"Custom operators" examples and the reference ``relu_ops`` -- passes compatfn's ``opcheck`` and
gradcheck on the running torch, compiles with ``fullgraph=True`` where that torch compiles, shows
up in ``torch.ops`` wherever the tier registers it, and keeps torch's rules (schema inference,
``mutates_args``, no aliasing outputs, keyword arguments, defaults and keyword-only inputs in
setup_context, torch's message for a missing backward). Each tier this torch can run is tested,
not only the one ``custom_op`` picks, so the older tiers are also exercised on new torch.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch

import compatfn
import compatfn.testing
from compatfn import core, library

README = Path(__file__).resolve().parents[1] / "README.md"
TIERS = [
    t
    for t, ok in (
        ("torch", library.HAS_TORCH_CUSTOM_OP),
        ("registered", library.HAS_LIBRARY),
        ("function", True),
    )
    if ok
]
_names = itertools.count()
TORCH_MINOR = core.TORCH_VERSION


def compiles() -> Optional[str]:
    """``None`` where this torch compiles, else why not."""
    return core.dynamo_unsupported()


def fresh(tier: str) -> str:
    return f"cft_{tier}{next(_names)}"


def make(tier: str, name: str, mutates_args=(), device_types=None, schema=None):
    return lambda fn: library._custom_op(
        f"{fresh(tier)}::{name}", fn, mutates_args, device_types, schema, tier
    )


def readme_blocks() -> List[str]:
    text = README.read_text(encoding="utf-8")
    section = re.search(r"## Custom operators\n(.*?)\n## ", text, re.S)
    assert section, "README has no '## Custom operators' section"
    return re.findall(r"```python\n(.*?)```", section.group(1), re.S)


@pytest.fixture(scope="module")
def readme() -> dict:
    namespace: dict = {}
    source = "\n".join(readme_blocks()).replace("mylib::", "cft_readme::")
    exec(compile(source, "README.md", "exec"), namespace)
    return namespace


# --------------------------------------------------------------------------- tier and API


def test_tier_follows_feature_detection():
    """Measured: torch's own custom_op from 2.4; a real registration from 1.13 (1.12 has
    ``torch.library.Library`` but no below-autograd guard); compatfn.function below."""
    if TORCH_MINOR >= (2, 4):
        expected = "torch"
    elif TORCH_MINOR >= (1, 13):
        expected = "registered"
    else:
        expected = "function"
    assert expected == library.TIER
    assert compatfn.custom_op is library.custom_op


def test_importing_compatfn_imports_neither_torch_nor_library():
    code = "import sys, compatfn; print('torch' in sys.modules, 'compatfn.library' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_torch_tier_returns_torchs_own_object(readme):
    if library.TIER != "torch":
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (torch >= 2.4)")
    assert type(readme["numpy_mul"]) is torch.library.CustomOpDef


# --------------------------------------------------------------------------- README examples


def test_readme_numpy_op_opcheck_and_gradcheck(readme):
    op = readme["numpy_mul"]
    x = torch.randn(5, dtype=torch.double, requires_grad=True)
    y = torch.randn(5, dtype=torch.double, requires_grad=True)
    result = compatfn.testing.opcheck(op, (x, y), {"scale": 2.0})
    assert set(result) == set(library.DEFAULT_TEST_UTILS)
    assert all(v == "SUCCESS" or v.startswith("SKIPPED: ") for v in result.values()), result
    if compiles() is None:
        assert result["test_aot_dispatch_dynamic"] == "SUCCESS"
    assert torch.autograd.gradcheck(lambda a, b: op(a, b, scale=2.0), (x, y))
    assert torch.autograd.gradgradcheck(lambda a, b: op(a, b, 3.0), (x, y))
    assert torch.equal(op(x, y).detach(), (x * y).detach())


def test_readme_inplace_op_opcheck(readme):
    op = readme["numpy_clip_"]
    t = torch.linspace(-2, 2, 9)
    version = t._version
    assert op(t, -0.5, 0.5) is None
    assert torch.equal(t, torch.linspace(-2, 2, 9).clamp(-0.5, 0.5))
    assert t._version > version  # autograd sees the mutation
    result = compatfn.testing.opcheck(op, (torch.randn(8), -0.5, 0.5))
    assert all(v == "SUCCESS" or v.startswith("SKIPPED: ") for v in result.values()), result


def test_readme_ops_are_in_torch_ops_where_registered(readme):
    if library.TIER == "function":
        pytest.skip(f"torch {torch.__version__} has no torch.library: ops are not registered")
    packet = torch.ops.cft_readme.numpy_mul
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3)
    out = packet(x, y, scale=2.0)
    assert out.grad_fn is not None
    assert torch.allclose(out, x * y * 2.0)
    assert hasattr(torch.ops.cft_readme, "numpy_clip_")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_readme_numpy_op_compiles_fullgraph(readme, backend):
    why = compiles()
    if why:
        pytest.skip(why)
    op = readme["numpy_mul"]
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()

    def f(a, b):
        return op(a * 1.5, b, scale=2.0).sin()

    x = torch.randn(4, requires_grad=True)
    y = torch.randn(4)
    got = torch.compile(f, fullgraph=True, backend=backend)(x, y)
    (gx,) = torch.autograd.grad(got.sum(), x)
    x2 = x.detach().clone().requires_grad_()
    want = f(x2, y)
    want.sum().backward()
    assert torch.allclose(got, want) and torch.allclose(gx, x2.grad)
    dynamo.reset()


def test_readme_inplace_op_compiles_fullgraph(readme):
    why = compiles()
    if why:
        pytest.skip(why)
    if not library._has_auto_functionalize():
        pytest.skip(f"torch {torch.__version__} cannot compile mutating custom ops (torch >= 2.2)")
    op = readme["numpy_clip_"]
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()

    def f(a):
        b = a * 2
        op(b, -1.0, 1.0)
        return b + 1

    x = torch.randn(6)
    assert torch.equal(torch.compile(f, fullgraph=True, backend="aot_eager")(x), f(x))
    dynamo.reset()


EXPORT_MODES = core.features()["export"]


@pytest.mark.parametrize("mode", ["strict", "non-strict"])
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_export_sees_one_op(tier, mode):
    """torch.export keeps a registered op as one node of the graph (strict and non-strict, as
    far as this torch exports), with a parameter that requires grad feeding it."""
    if mode not in EXPORT_MODES:
        pytest.skip(f"torch {torch.__version__} has no {mode} torch.export")

    @make(tier, "npsin")
    def npsin(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return torch.from_numpy(np.sin(x.detach().numpy()) * scale)

    npsin.register_fake(lambda x, scale=1.0: torch.empty_like(x))

    class Module(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.full((3,), 0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return npsin(x * self.weight, scale=2.0) + 1

    x, module = torch.randn(3), Module()
    strict = {} if EXPORT_MODES == ("strict",) else {"strict": mode == "strict"}
    program = torch.export.export(module, (x,), **strict)
    namespace, name = npsin._qualname.split("::")
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert getattr(getattr(torch.ops, namespace), name).default in targets
    assert torch.allclose(program.module()(x), module(x))


# --------------------------------------------------------------------------- rules, per tier


@pytest.mark.parametrize("tier", TIERS)
def test_defaults_and_keywords_reach_setup_context(tier):
    seen = {}

    @make(tier, "scale")
    def scale(x: torch.Tensor, s: float = 2.0, *, shift: float = 0.0) -> torch.Tensor:
        return x * s + shift

    def setup_context(ctx, inputs, keyword_only_inputs, output):
        seen["inputs"] = inputs[1:]
        seen["kw"] = dict(keyword_only_inputs)
        ctx.s = inputs[1]

    scale.register_autograd(lambda ctx, g: (g * ctx.s, None), setup_context=setup_context)
    x = torch.ones(2, requires_grad=True)
    out = scale(x, shift=1.0)
    assert torch.equal(out.detach(), torch.full((2,), 3.0))
    assert tuple(seen["inputs"]) == (2.0,) and seen["kw"] == {"shift": 1.0}
    (g,) = torch.autograd.grad(out.sum(), x)
    assert torch.equal(g, torch.full((2,), 2.0))


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
def test_setup_context_runs_only_in_grad_mode(tier):
    """As torch 2.7+ (torch 2.4's own CustomOpDef still calls it): under ``torch.no_grad()`` the
    kernel runs without autograd, so setup_context is not called for an input needing grad."""
    calls: List[int] = []

    @make(tier, "counted")
    def counted(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    counted.register_autograd(
        lambda ctx, g: g * 2, setup_context=lambda ctx, inputs, output: calls.append(1)
    )
    x = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        out = counted(x)
    assert calls == [] and out.grad_fn is None and torch.equal(out, torch.full((2,), 2.0))
    assert counted(x).grad_fn is not None and calls == [1]


@pytest.mark.parametrize("tier", TIERS)
def test_backward_without_register_autograd_raises_torchs_message(tier):
    @make(tier, "noback")
    def noback(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    out = noback(torch.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        out.sum().backward()


@pytest.mark.parametrize("tier", TIERS)
def test_output_aliasing_an_input_is_an_error(tier):
    @make(tier, "alias")
    def alias(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(RuntimeError, match="may not alias any inputs"):
        alias(torch.ones(2))


@pytest.mark.parametrize("tier", TIERS)
def test_tuple_outputs_with_gradients(tier):
    @make(tier, "two")
    def two(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x * 3

    two.register_autograd(
        lambda ctx, g2, g3: 2 * g2 + 3 * g3, setup_context=lambda ctx, inputs, output: None
    )
    x = torch.randn(3, requires_grad=True)
    a, b = two(x)
    (a + b).sum().backward()
    assert torch.equal(a.detach(), x.detach() * 2) and torch.equal(b.detach(), x.detach() * 3)
    assert torch.equal(x.grad, torch.full((3,), 5.0))


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
def test_tuple_output_aliasing_an_input_is_an_error(tier):
    @make(tier, "alias_pair")
    def alias_pair(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x, x * 3

    alias_pair.register_autograd(
        lambda ctx, g1, g3: g1 + 3 * g3, setup_context=lambda ctx, inputs, output: None
    )
    for requires_grad in (False, True):
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            alias_pair(torch.ones(2, requires_grad=requires_grad))


ALIASES = {
    # What torch's own rule catches (outputs share storage with an input or with each other),
    # including aliases that are not autograd views.
    "detached view": lambda x: x[1:].detach(),
    "data": lambda x: x.data,
    "view": lambda x: x.view(-1),
}


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("tier", TIERS)
def test_every_storage_alias_of_an_input_is_an_error(tier, alias):
    make_alias = ALIASES[alias]

    @make(tier, "aliasing")
    def aliasing(x: torch.Tensor) -> torch.Tensor:
        return make_alias(x)

    aliasing.register_autograd(lambda ctx, g: g, setup_context=lambda ctx, inputs, output: None)
    for requires_grad in (False, True):
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            aliasing(torch.ones(4, requires_grad=requires_grad))


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("tier", TIERS)
def test_an_alias_of_any_tensor_argument_is_an_error(tier, alias):
    """Ops with several tensor arguments compare the output with each of them."""
    make_alias = ALIASES[alias]

    @make(tier, "aliasing_second")
    def aliasing_second(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        return make_alias(y)

    aliasing_second.register_autograd(
        lambda ctx, g: (None, g, None), setup_context=lambda ctx, inputs, output: None
    )
    for requires_grad in (False, True):
        x, y = torch.ones(4), torch.ones(4, requires_grad=requires_grad)
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            aliasing_second(x, y, 2.0)


@pytest.mark.parametrize("tier", TIERS)
def test_outputs_aliasing_each_other_is_an_error(tier):
    @make(tier, "twins")
    def twins(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y[1:]

    with pytest.raises(RuntimeError, match="may not alias any inputs"):
        twins(torch.ones(4))


@pytest.mark.parametrize("tier", TIERS)
def test_calls_bind_like_the_function(tier):
    """Keywords, defaults and wrong calls behave as calling the decorated function would."""

    @make(tier, "affine")
    def affine(x: torch.Tensor, w: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x * w * scale

    affine.register_autograd(
        lambda ctx, g: (g * ctx.w * ctx.scale, None, None),
        setup_context=lambda ctx, inputs, output: ctx.__dict__.update(w=inputs[1], scale=inputs[2]),
    )
    x, w = torch.full((2,), 3.0, requires_grad=True), torch.full((2,), 5.0)
    for call in (
        lambda: affine(x, w),
        lambda: affine(x, w, 2.0),
        lambda: affine(x, w=w),
        lambda: affine(w=w, x=x, scale=2.0),
    ):
        out = call()
        (g,) = torch.autograd.grad(out.sum(), x)
        assert torch.equal(out.detach(), torch.full((2,), 30.0)) and torch.equal(g, w * 2.0)
    # torch's own op raises the dispatcher's RuntimeError; compatfn's tiers Python's TypeError.
    wrong_call = RuntimeError if tier == "torch" else TypeError
    with pytest.raises(wrong_call, match="'w'"):
        affine(x)
    with pytest.raises(wrong_call):
        affine(x, w, 1.0, 2.0)
    with pytest.raises(wrong_call):
        affine(x, w, bogus=1.0)


@pytest.mark.parametrize("tier", TIERS)
def test_fx_proxies_and_wrong_argument_types(tier):
    """torch.fx traces a function calling the op; a non-tensor for a Tensor parameter raises
    torch's message (not an AttributeError from compatfn's short path)."""
    import torch.fx

    @make(tier, "triple")
    def triple(x: torch.Tensor, s: float = 3.0) -> torch.Tensor:
        return x * s

    def f(x):
        return triple(x) + 1

    traced = torch.fx.symbolic_trace(f)
    assert torch.equal(traced(torch.ones(2)), torch.full((2,), 4.0))
    with pytest.raises(RuntimeError, match="Expected a value of type 'Tensor' for argument 'x'"):
        triple(np.ones(2))


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
def test_parameters_named_like_compatfns_own(tier):
    """The op's call is generated with the op's parameter names; none may clash with its own."""

    @make(tier, "out")
    def out(self: torch.Tensor, out: torch.Tensor, apply: float = 1.0) -> torch.Tensor:
        return self * out * apply

    out.register_autograd(
        lambda ctx, g: (g * ctx.o, None, None),
        setup_context=lambda ctx, inputs, output: setattr(ctx, "o", inputs[1]),
    )
    a = torch.ones(2, requires_grad=True)
    result = out(a, torch.full((2,), 3.0), apply=2.0)
    assert torch.equal(result.detach(), torch.full((2,), 6.0))
    assert torch.equal(torch.autograd.grad(result.sum(), a)[0], torch.full((2,), 3.0))


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
def test_registering_after_calls_changes_the_next_call(tier):
    @make(tier, "later")
    def later(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    x = torch.zeros(1, requires_grad=True)
    later(x.detach())
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        later(x).sum().backward()
    later.register_autograd(lambda ctx, g: g * 7, setup_context=lambda ctx, inputs, output: None)
    assert torch.equal(torch.autograd.grad(later(x).sum(), x)[0], torch.full((1,), 7.0))
    later.register_kernel("cpu", lambda x: x + 2)
    assert torch.equal(later(x.detach()), torch.full((1,), 2.0))


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
    message = "There was no fake impl registered for" if tier != "torch" else ""
    for requires_grad in (False, True):
        with pytest.raises(RuntimeError, match=message):
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
def test_undeclared_mutation_fails_opcheck(tier):
    @make(tier, "sneaky")
    def sneaky(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x.clone()

    sneaky.register_fake(lambda x: torch.empty_like(x))
    result = compatfn.testing.opcheck(sneaky, (torch.zeros(3),), raise_exception=False)
    assert "not defined as mutable but was mutated" in str(result["test_schema"])


@pytest.mark.parametrize("tier", TIERS)
def test_tensor_lists_get_gradients(tier):
    """Also with trailing defaults left out: torch 2.4-2.13's own custom_op failed there in
    backward (CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS, routed around by compatfn)."""

    @make(tier, "total")
    def total(
        xs: Sequence[torch.Tensor], w: Optional[torch.Tensor] = None, scale: float = 1.0
    ) -> torch.Tensor:
        out = sum(x * scale for x in xs)
        return out if w is None else out * w

    def setup_context(ctx, inputs, output):
        xs, w, ctx.scale = inputs
        ctx.n = len(xs)
        ctx.save_for_backward(w)

    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        g = g * ctx.scale if w is None else g * w * ctx.scale
        return [g for _ in range(ctx.n)], None, None

    total.register_autograd(backward, setup_context=setup_context)
    total.register_fake(lambda xs, w=None, scale=1.0: torch.empty_like(xs[0]))
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    w = torch.full((3,), 5.0)
    for args, kwargs, expected in (
        (([a, b],), {}, 1.0),
        (([a, b], None), {}, 1.0),
        (([a, b], w), {}, 5.0),
        (([a, b],), {"scale": 2.0}, 2.0),
        (([a, b], None, 1.0), {}, 1.0),
    ):
        ga, gb = torch.autograd.grad(total(*args, **kwargs).sum(), (a, b))
        assert torch.equal(ga, torch.full((3,), expected)) and torch.equal(gb, ga)
        compatfn.testing.opcheck(total, args, kwargs)


@pytest.mark.parametrize("tier", TIERS)
def test_a_gradient_for_an_elided_default_is_not_dropped(tier):
    """Only None gradients of arguments autograd never saw are trimmed."""

    @make(tier, "shifted")
    def shifted(xs: Sequence[torch.Tensor], shift: float = 0.0) -> torch.Tensor:
        return sum(x + shift for x in xs)

    shifted.register_autograd(
        lambda ctx, g: ([g, g], torch.ones(())), setup_context=lambda ctx, inputs, output: None
    )
    a, b = torch.randn(2, requires_grad=True), torch.randn(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(shifted([a, b]).sum(), (a, b))


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
def test_kernel_per_device_type(tier):
    @make(tier, "which", device_types="cpu")
    def which(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    assert torch.equal(which(torch.zeros(1)), torch.ones(1))
    if library.HAS_META_DEVICE:
        with pytest.raises((NotImplementedError, RuntimeError)):
            which(torch.zeros(1, device="meta"))  # no fake kernel, no meta kernel


@pytest.mark.parametrize(
    "annotation, message",
    [("x", "must have a type annotation"), ("x: dict", "unsupported type")],
)
@pytest.mark.parametrize("tier", TIERS)
def test_schema_errors(tier, annotation, message):
    namespace: dict = {"torch": torch}
    exec(f"def f({annotation}) -> torch.Tensor:\n    return x\n", namespace)
    with pytest.raises(ValueError, match=message):
        make(tier, "bad")(namespace["f"])


def test_inferred_schema_matches_torch():
    def f(
        x: torch.Tensor,
        ys: Sequence[torch.Tensor],
        w: Optional[torch.Tensor] = None,
        n: int = 1,
        b: bool = True,
        s: str = "a",
        dt: Optional[torch.dtype] = None,
        *,
        alpha: float = 1.0,
    ) -> torch.Tensor:
        return x

    schema = library.infer_schema(f, mutates_args={"ys"})
    expected = (
        '(Tensor x, Tensor(a1!)[] ys, Tensor? w=None, SymInt n=1, bool b=True, str s="a", '
        "ScalarType? dt=None, *, float alpha=1.0) -> Tensor"
    )
    assert schema == expected.replace("SymInt", library._int_type())
    if hasattr(getattr(torch, "library", None), "infer_schema"):  # torch >= 2.5: the same text
        assert schema == torch.library.infer_schema(f, mutates_args={"ys"})
    if library.HAS_LIBRARY:  # every torch with torch.library parses it
        torch._C.parse_schema("f" + schema)


# --------------------------------------------------------------------------- reference ops


@pytest.mark.parametrize("name", ["clipped_relu_op", "mask_relu_op"])
def test_relu_ops(name):
    from compatfn import relu_ops

    op = getattr(relu_ops, name)
    x = torch.tensor([-1.5, -0.3, 0.2, 0.7, 1.4, 2.5], dtype=torch.double, requires_grad=True)
    result = compatfn.testing.opcheck(op, (x,))
    assert all(v == "SUCCESS" or v.startswith("SKIPPED: ") for v in result.values()), result
    report = compatfn.testing.check_function(op, x, checks=["forward", "gradcheck", "compile"])
    assert "gradcheck" in report.ran
    expected = x.clamp(0, 1.0) if name == "clipped_relu_op" else x.relu()
    assert torch.equal(op(x).detach(), expected.detach())
    if library.TIER != "function":
        assert hasattr(torch.ops.compatfn, name[: -len("_op")])
