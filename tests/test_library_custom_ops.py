"""Calls and rules of the op object on every tier (``_custom_ops``, ``_fast_call``,
``_autograd``)."""

from __future__ import annotations

import contextlib
import inspect
import re
import subprocess
import sys
import warnings
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch

import compatfn
import compatfn.testing
from compatfn import library
from compatfn.library import _dispatch_state, _facts
from library_support import TIERS, TORCH_MINOR, fresh, make, side_by_side


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


_REPLACING = """
import torch, compatfn
def forwarding(*args, **kwargs):  # a wrapper put there before compatfn.library is imported
    return compatfn.custom_op(*args, **kwargs)
torch.library.custom_op = {replacement}
@torch.library.custom_op("cft_replaced::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2
print(twice(torch.ones(2)).tolist(), compatfn.library.TIER)
"""


@pytest.mark.parametrize("replacement", ["compatfn.custom_op", "forwarding"])
def test_a_program_may_put_compatfn_in_torch_library(replacement):
    """``torch.library.custom_op = compatfn.custom_op`` (compatfn used wherever torch's would be):
    the tier is this torch's and the torch tier calls torch's own function (before: endless
    recursion on torch >= 2.4, and a forwarding wrapper installed before ``compatfn.library``
    was imported made torch < 2.4 take the torch tier and fail)."""
    if not hasattr(torch, "library"):
        pytest.skip(f"torch {torch.__version__} has no torch.library to put a function in")
    code = _REPLACING.format(replacement=replacement)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("]")[-1].strip() == library.TIER
    assert out.stdout.startswith("[2.0, 2.0]")


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


#: What torch 2.13's own op does with backward's gradients (``(*result, None)`` checked against
#: the arguments the dispatcher passed and its metadata), by what backward returns and whether
#: the call gives ``s`` and ``t`` (True) or leaves them out: the error's text after the node's
#: name, or the gradient of ``x`` (See NOTE: [needs_input_grad of a custom op]).
_GRADIENT_COUNTS = {
    ("one", False): 2.0,
    ("one", True): "returned an incorrect number of gradients (expected 4, got 2)",
    ("three", False): 2.0,
    ("three", True): 2.0,
    ("four", False): 2.0,
    ("four", True): 2.0,
    ("list", False): "expected Variable or None (got list)",
    ("list", True): "returned an incorrect number of gradients (expected 4, got 2)",
    ("none_for_s", False): 2.0,
    ("none_for_s", True): "returned an incorrect number of gradients (expected 4, got 3)",
    ("grad_for_s", False): "returned a gradient different than None at position 2, but "
    "the corresponding forward input was not a Variable",
    ("grad_for_s", True): "returned an incorrect number of gradients (expected 4, got 3)",
    ("grad_for_metadata", False): "returned an incorrect number of gradients (expected 2, got 4)",
    ("grad_for_metadata", True): "returned a gradient different than None at position 3, but "
    "the corresponding forward input was not a Variable",
    ("grad_for_metadata4", False): "returned an incorrect number of gradients (expected 2, got 5)",
    ("grad_for_metadata4", True): "returned a gradient different than None at position 4, but "
    "the corresponding forward input was not a Variable",
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("returned, given", sorted(_GRADIENT_COUNTS))
def test_backward_gradients_are_checked_as_torch_checks_them(tier, returned, given):
    """Counted on the short path too (a plain tensor and a float: the op's fastest call); the
    older tiers give torch 2.13's outcome, the torch tier torch's own op's (side by side)."""
    grads = {
        "one": lambda g: g * 2,
        "three": lambda g: (g * 2, None, None),
        "four": lambda g: (g * 2, None, None, None),
        "list": lambda g: [g * 2, None],
        "none_for_s": lambda g: (g * 2, None),
        "grad_for_s": lambda g: (g * 2, g),
        "grad_for_metadata": lambda g: (g * 2, None, g),
        "grad_for_metadata4": lambda g: (g * 2, None, None, g),
    }[returned]
    source = "def miscount(x: torch.Tensor, s: float = 2.0, t: int = 1) -> torch.Tensor:\n"
    source += "    return x * s * t\n"
    namespace = {"torch": torch}  # real annotations: torch 2.4 reads no string ones
    exec(compile(source, "<miscount>", "exec", dont_inherit=True), namespace)
    outcomes = []
    for decorator in side_by_side(tier, "miscount"):
        miscount = decorator(namespace["miscount"])
        miscount.register_autograd(lambda ctx, g: grads(g))
        x = torch.ones(2, requires_grad=True)
        try:
            y = miscount(x, 2.0, 3) if given else miscount(x)
            outcomes.append(torch.autograd.grad(y.sum(), x)[0][0].item())
        except RuntimeError as error:
            node = r"^function GeneratedBackwardFor_\w+_miscount_defaultBackward "
            outcomes.append(re.sub(r"cft_\w+?\.", "", re.sub(node, "", str(error))))
    if tier != "torch":
        assert outcomes == [_GRADIENT_COUNTS[returned, given]]
    else:
        assert outcomes[0] == outcomes[1]


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


@pytest.mark.parametrize("tier", TIERS)
def test_a_list_output_with_gradients(tier):
    """``-> List[Tensor]``: setup_context gets the list, backward one list of gradients, as in
    torch (compatfn's tiers before: the outputs had no grad_fn)."""

    @make(tier, "listed")
    def listed(x: torch.Tensor) -> List[torch.Tensor]:
        return [x * 2, x * 3]

    def setup_context(ctx, inputs, output):
        assert type(output) is list

    listed.register_autograd(
        lambda ctx, grads: 2 * grads[0] + 3 * grads[1], setup_context=setup_context
    )
    x = torch.randn(3, requires_grad=True)
    out = listed(x)
    assert type(out) is list and all(o.grad_fn is not None for o in out)
    (out[0] + out[1]).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 5.0))


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
    # torch's dispatcher's errors on every tier (compatfn's tiers before: Python's TypeError).
    declaration = re.escape(f"{affine._qualname}(Tensor x, Tensor w, float scale=2.")
    with pytest.raises(
        RuntimeError,
        match=rf"affine\(\) is missing value for argument 'w'\. Declaration: {declaration}",
    ):
        affine(x)
    with pytest.raises(RuntimeError, match=r"affine\(\) is missing value for argument 'x'"):
        affine(w=w, scale=1.0)
    with pytest.raises(
        RuntimeError, match=r"affine\(\) expected at most 3 argument\(s\) but received 4 argument"
    ):
        affine(x, w, 1.0, 2.0)
    with pytest.raises(
        RuntimeError, match=rf"Unknown keyword argument 'bogus' for operator '{affine._qualname}'"
    ):
        affine(x, w, bogus=1.0)
    # A parameter given by position and by keyword: the dispatcher's error, not Python's.
    with pytest.raises(
        RuntimeError, match=r"^Argument 'x' specified both as positional and keyword argument"
    ):
        affine(x, w, x=x)
    with pytest.raises(RuntimeError, match=r"^Argument 'w' specified both as positional and"):
        affine(x, w, w=w)
    with pytest.raises(RuntimeError, match=r"expected at most 3 argument\(s\) but received 4"):
        affine(x, w, 2.0, scale=2.0)


@pytest.mark.parametrize("tier", TIERS)
def test_a_wrong_call_of_a_keyword_only_parameter_gets_torch_error(tier):
    @make(tier, "keyed")
    def keyed(x: torch.Tensor, *, k: int, j: float = 1.5) -> torch.Tensor:
        return x * k * j

    assert torch.equal(keyed(torch.ones(1), k=2), torch.full((1,), 3.0))
    with pytest.raises(RuntimeError, match=r"keyed\(\) is missing value for argument 'k'"):
        keyed(torch.ones(1))
    with pytest.raises(RuntimeError, match=r"keyed\(\) takes 1 positional argument\(s\) but 2"):
        keyed(torch.ones(1), 2)


@pytest.mark.parametrize("tier", TIERS)
def test_a_required_scalar_or_list_left_out_gets_torch_error(tier):
    @make(tier, "needs_all")
    def needs_all(x: torch.Tensor, s: float, sizes: List[int]) -> torch.Tensor:
        return x * s * len(sizes)

    assert torch.equal(needs_all(torch.ones(1), 2, (1, 2)), torch.full((1,), 4.0))
    with pytest.raises(RuntimeError, match=r"needs_all\(\) is missing value for argument 's'"):
        needs_all(torch.ones(1), sizes=[1])
    with pytest.raises(RuntimeError, match=r"needs_all\(\) is missing value for argument 'sizes'"):
        needs_all(torch.ones(1), 2.0)


@pytest.mark.parametrize("tier", TIERS)
def test_none_for_a_tensor_reaches_the_kernel_as_torch_passes_it(tier):
    """torch's dispatcher takes None for a ``Tensor`` parameter (an undefined tensor, None in a
    Python kernel); compatfn's tiers raised. Both paths name the autograd node alike."""

    @make(tier, "maybe_scaled")
    def maybe_scaled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 if y is None else x * y

    maybe_scaled.register_autograd(
        lambda ctx, g: (g * 2, None), setup_context=lambda ctx, inputs, output: None
    )
    calls = [maybe_scaled]
    if maybe_scaled._opoverload is not None:
        calls.append(maybe_scaled._opoverload)
    names = set()
    for call in calls:
        assert torch.equal(call(torch.ones(2), None), torch.full((2,), 2.0))
        out = call(torch.ones(2, requires_grad=True), None)
        names.add(type(out.grad_fn).__name__)
        names.add(
            type(maybe_scaled(torch.ones(2, requires_grad=True), torch.ones(2)).grad_fn).__name__
        )
    assert len(names) == 1


@pytest.mark.parametrize("tier", TIERS)
def test_a_parameter_named_like_a_builtin(tier):
    """The generated call tests types with ``type``: a parameter of that name used to shadow it
    ("'int' object is not callable" on every tier)."""

    @make(tier, "builtin_names")
    def builtin_names(x: torch.Tensor, type: int = 1, len: float = 1.0) -> torch.Tensor:
        return x * type * len

    assert torch.equal(builtin_names(torch.ones(1), 3), torch.full((1,), 3.0))
    out = builtin_names(torch.ones(1, requires_grad=True), type=2, len=2.0)
    assert torch.equal(out.detach(), torch.full((1,), 4.0)) and out.requires_grad


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


_WRITTEN_CALLS = {  # a call, and what torch's own op hands the dispatcher: (by position, keywords)
    "positional": (lambda op, x: op(x, 3.0), (2, [])),
    "keyword": (lambda op, x: op(x, s=3.0), (1, ["s"])),
    "all_keywords": (lambda op, x: op(s=3.0, x=x), (0, ["s", "x"])),
    "tensor_by_keyword": (lambda op, x: op(x=x), (0, ["x"])),
    "default_left_out": (lambda op, x: op(x), (1, [])),
    "keyword_only": (lambda op, x: op(x, shift=1.0), (1, ["shift"])),
}


@pytest.mark.parametrize("call", list(_WRITTEN_CALLS))
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_a_traced_call_reaches_the_operator_as_written(tier, call):
    """A call through the dispatcher hands the operator what the caller wrote, as torch's own
    op does (``CustomOpDef.__call__``): a torch.fx graph records the keywords as keywords and no
    default the caller left out (the registered tier passed every argument by position)."""
    written, expected = _WRITTEN_CALLS[call]

    def recorded(op) -> Tuple[int, List[str]]:
        graph = torch.fx.symbolic_trace(lambda x: written(op, x)).graph
        (node,) = [n for n in graph.nodes if n.op == "call_function"]
        return len(node.args), sorted(node.kwargs)

    def shifted(x: torch.Tensor, s: float = 2.0, *, shift: float = 0.0) -> torch.Tensor:
        return x * s + shift

    assert recorded(make(tier, "shifted")(shifted)) == expected
    if library.HAS_TORCH_CUSTOM_OP:  # the expectation is torch's own op's
        control = torch.library.custom_op(
            f"{fresh('written')}::shifted",
            shifted,
            mutates_args=(),
            schema="(Tensor x, float s=2.0, *, float shift=0.0) -> Tensor",
        )
        assert recorded(control) == expected


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
    # torch's own messages: its custom op's (2.4+), its autograd Function's (compatfn's tiers)
    message = (
        "returned a non-None gradient for an input that was not passed"
        "|returned a gradient different than None at position"
        "|Expected the return from backward to be of the same structure as the inputs"
    )
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.grad(shifted([a, b]).sum(), (a, b))


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("tier", TIERS)
def test_register_autograd_on_a_mutating_op_is_refused(tier):
    """torch 1.8-2.3 before: accepted silently."""

    @make(tier, "bump_", mutates_args={"x"})
    def bump_(x: torch.Tensor) -> None:
        x.add_(1)

    with pytest.raises(RuntimeError, match="Cannot register autograd formula for non-functional"):
        bump_.register_autograd(lambda ctx, g: g)


@pytest.mark.parametrize("tier", TIERS)
def test_a_dtype_parameter_with_a_default(tier):
    """torch 1.13-2.3 before: "invalid numeric default value" at definition. (torch 2.4.1's own
    custom_op refuses a dtype default of annotations written as objects: these are strings, which
    compatfn infers itself there.)"""

    @make(tier, "cast")
    def cast(x: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return x.to(dtype)

    assert cast(torch.ones(1)).dtype == torch.float64
    assert cast(torch.ones(1), torch.float16).dtype == torch.float16
    if tier != "function":
        namespace, name = cast._qualname.split("::")
        assert getattr(getattr(torch.ops, namespace), name)(torch.ones(1)).dtype == torch.float64


@pytest.mark.parametrize("tier", TIERS)
def test_register_vmap(tier):
    """torch >= 2.5 vmaps with the registered rule; compatfn's tiers say that torch cannot."""

    @make(tier, "vmapped")
    def vmapped(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    if tier != "torch":
        with pytest.raises(NotImplementedError, match=r"register_vmap needs torch >= 2\.5"):
            vmapped.register_vmap(lambda info, dims, x: (x * 2, dims[0]))
        return
    if not hasattr(vmapped, "register_vmap"):
        pytest.skip(f"torch {torch.__version__}'s CustomOpDef has no register_vmap (2.5+)")
    calls: List[int] = []

    def rule(info, in_dims, x):
        calls.append(1)
        return x * 2, in_dims[0]

    vmapped.register_vmap(rule)
    out = torch.func.vmap(vmapped)(torch.ones(3, 2))
    assert torch.equal(out, torch.full((3, 2), 2.0)) and calls == [1]


@pytest.mark.parametrize("tier", TIERS)
def test_a_given_schema_is_checked_at_definition(tier):
    """torch's errors (torch 1.8-2.3 before: "substring not found", or an op whose schema
    mutates what ``mutates_args`` does not name)."""

    def f(x, y):
        x.add_(y)

    with pytest.raises(RuntimeError, match=r"expected \) but found 'arrow'"):
        make(tier, "bad", schema="(Tensor x -> Tensor")(f)
    with pytest.raises(ValueError, match=r"The schema suggests that the op mutates \{'x'\}"):
        make(tier, "undeclared", schema="(Tensor(a!) x, Tensor y) -> ()")(f)
    op = make(tier, "declared", mutates_args={"x"}, schema="(Tensor(a!) x, Tensor y) -> ()")(f)
    x = torch.zeros(2)
    op(x, torch.ones(2))
    assert x.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("tier", TIERS)
def test_a_view_schema(tier):
    """A schema that returns a view of an input: torch's own op returns the view from
    ``VIEW_OPS_SINCE`` on and refuses its output by the aliasing rule before (measured on 2.4,
    2.9, 2.10, 2.13); the older tiers refuse the schema at definition, naming the op (before:
    the aliasing error at each call)."""
    define = make(tier, "view", schema="(Tensor(a) x) -> Tensor(a)")
    if tier != "torch":
        with pytest.raises(NotImplementedError, match=r"::view: the schema .* returns a view"):
            define(lambda x: x.view(-1))
        return
    op = define(lambda x: x.view(-1))
    x = torch.ones(2, 3, requires_grad=True)
    since = tuple(int(n) for n in _facts.VIEW_OPS_SINCE.split("."))
    if since > TORCH_MINOR:  # torch's own op refuses the output
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            op(x)
        return
    y = op(x)
    assert y._base is x and type(y.grad_fn).__name__.startswith("GeneratedBackwardFor_")


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
def test_register_torch_dispatch_is_refused_before_torch_2_5(tier):
    """An error naming the op (before: AttributeError)."""

    @make(tier, "td")
    def op(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with pytest.raises(NotImplementedError, match=r"register_torch_dispatch needs torch >= 2\.5"):
        op.register_torch_dispatch(object, lambda *args: None)


@pytest.mark.parametrize("tier", TIERS)
def test_no_graph_from_a_captured_parameter(tier):
    """No input requires grad: the kernel runs below autograd in torch, so a parameter it
    captures records no graph (compatfn's tiers before: the output required grad)."""
    weight = torch.nn.Parameter(torch.ones(2))

    @make(tier, "captures")
    def captures(x: torch.Tensor) -> torch.Tensor:
        return x * weight

    @make(tier, "captures_two")
    def captures_two(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x * weight, x + weight

    out = captures(torch.ones(2))
    assert not out.requires_grad and out.grad_fn is None
    assert not any(o.requires_grad for o in captures_two(torch.ones(2)))


@pytest.mark.parametrize("tier", TIERS)
def test_a_tensor_list_output_is_a_list_in_every_grad_state(tier):
    """torch's operator hands a ``Tensor[]`` return to Python as a list, the kernel's tuple too
    (compatfn's tiers before: the tuple, when no input required grad)."""

    @make(tier, "listed")
    def listed(x: torch.Tensor) -> List[torch.Tensor]:
        return (x * 1, x * 2)

    calls = [
        lambda: listed(torch.ones(1)),
        lambda: listed(torch.ones(1, requires_grad=True)),
    ]
    for call in calls:
        assert type(call()) is list
        with torch.no_grad():
            assert type(call()) is list
    if hasattr(torch, "inference_mode"):
        with torch.inference_mode():
            assert type(listed(torch.ones(1))) is list


@pytest.mark.parametrize("tier", TIERS)
def test_setup_context_runs_below_autograd(tier):
    """torch's Autograd kernel runs setup_context below autograd too, so ``enable_grad()`` inside
    it records no graph (compatfn's tiers before: a graph). torch 1.8-1.12 have no guard in
    Python (documented): there it does."""
    seen: List[bool] = []

    @make(tier, "setup_below")
    def setup_below(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def setup_context(ctx, inputs, output):
        with torch.enable_grad():
            seen.append((inputs[0] * 3).requires_grad or (output * 3).requires_grad)

    setup_below.register_autograd(lambda ctx, g: g * 2, setup_context=setup_context)
    calls = [setup_below]
    if setup_below._opoverload is not None:  # the operator itself: torch's behaviour
        calls.append(setup_below._opoverload)
    for call in calls:
        x = torch.ones(2, requires_grad=True)
        call(x).sum().backward()
        assert torch.equal(x.grad, torch.full((2,), 2.0))
    assert seen == [_dispatch_state.BelowAutograd is None] * len(calls)


@pytest.mark.parametrize("tier", TIERS)
def test_a_captured_tensor_returned_as_it_is_comes_back_as_it_is(tier):
    """torch's operator returns what its kernel returns below autograd as it is, a captured
    parameter requiring grad included (compatfn's op objects before: a detached copy)."""
    weight = torch.nn.Parameter(torch.ones(2))

    @make(tier, "returns_weight")
    def returns_weight(x: torch.Tensor) -> torch.Tensor:
        return weight

    calls = [returns_weight]
    if returns_weight._opoverload is not None:  # the operator itself: torch's behaviour
        calls.append(returns_weight._opoverload)
    for call in calls:
        for grad_mode in (True, False):
            with torch.set_grad_enabled(grad_mode):
                assert call(torch.ones(2)) is weight


@pytest.mark.parametrize("tier", TIERS)
def test_jit_trace_records_the_op_once_whatever_the_grad_mode(tier):
    """torch.jit.trace checks its trace by running it again under no_grad: the op must be one
    node both times (See NOTE: [tracing without a dispatcher] for the function tier)."""

    @make(tier, "scale")
    def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * w

    scale.register_autograd(lambda ctx, g: (g * ctx.w, g * ctx.x), setup_context=_save_x_w)
    traced = torch.jit.trace(_Scaled(scale), (torch.ones(2),))  # check_trace=True
    kinds = [n.kind() for n in traced.graph.nodes() if n.kind() not in _BOOKKEEPING]
    op_node = "prim::PythonOp" if scale._opoverload is None else scale._qualname
    assert kinds == [op_node, "aten::add"]
    assert torch.equal(traced(torch.full((2,), 2.0)).detach(), torch.full((2,), 7.0))


_BOOKKEEPING = ("prim::Constant", "prim::GetAttr")


def _save_x_w(ctx, inputs, output):
    ctx.x, ctx.w = inputs


class _Scaled(torch.nn.Module):
    def __init__(self, op) -> None:
        super().__init__()
        self.op = op
        self.w = torch.nn.Parameter(torch.full((2,), 3.0))

    def forward(self, x):
        return self.op(x, self.w) + 1


# name -> torch's error at definition (type, first line), recorded from torch 2.13's own op.
OPERATOR_NAMES = {
    "noNs": ("ValueError", "not enough values to unpack (expected 2, got 1)"),
    "a::b::c": ("ValueError", "too many values to unpack (expected 2)"),
    "NS::": ("RuntimeError", "expected ident but found '(' here:"),
    "NS::1x": ("RuntimeError", "expected ident but found 'number' here:"),
    "NS::x-y": ("RuntimeError", "expected eof but found '-' here:"),
    "NS::if": ("RuntimeError", "expected ident but found 'if' here:"),
    "NS::x.": ("RuntimeError", "expected ident but found '(' here:"),
    "NS::x.default": ("RuntimeError", "default is not a legal overload name for aten operators"),
    "NS::x.ov": None,
    "prim::x": (
        "ValueError",
        "prim is a reserved namespace. Please try creating a library with another name.",
    ),
}


def _definition_error(decorate: Callable) -> Optional[Tuple[str, str]]:
    def kernel(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    kernel.__annotations__ = {"x": torch.Tensor, "return": torch.Tensor}
    try:
        decorate(kernel)
    except (ValueError, RuntimeError) as e:
        return type(e).__name__, str(e).split("\n")[0]
    return None


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name", sorted(OPERATOR_NAMES))
def test_operator_names_torch_refuses_are_refused_with_torchs_error(tier, name):
    """compatfn before: its own messages, and ``x.default`` defined on torch 1.8-1.12."""
    qualname = name.replace("NS", fresh(tier))
    got = _definition_error(make(tier, "", qualname=qualname))
    if tier == "torch":  # torch's own op, side by side
        own = name.replace("NS", fresh("own"))
        assert got == _definition_error(torch.library.custom_op(own, mutates_args=()))
    else:  # torch 2.4's own message for "prim" is a tuple's repr: the table is torch 2.13's
        assert got == OPERATOR_NAMES[name]


@pytest.mark.parametrize("tier", TIERS)
def test_keyword_only_tensor_parameters_are_refused_at_definition(tier):
    """torch refuses ``*, y: Optional[Tensor]`` (compatfn on torch 1.8-2.3 before: accepted)."""
    messages = []
    for decorate in side_by_side(tier, "kw"):

        def kw(x: torch.Tensor, *, y: Optional[torch.Tensor] = None) -> torch.Tensor:
            return x.clone()

        kw.__annotations__ = {
            "x": torch.Tensor,
            "y": Optional[torch.Tensor],
            "return": torch.Tensor,
        }
        with pytest.raises(NotImplementedError) as info:
            decorate(kw)
        messages.append(str(info.value))
    assert messages[0] == (
        "custom_op with kwarg-only Tensor args. Please make your tensors not kwarg-only. "
        "Got: kw(Tensor x, *, Tensor? y=None) -> Tensor"
    )
    assert messages[1:] in ([], messages[:1])


@pytest.mark.parametrize("tier", TIERS)
def test_register_autograd_takes_what_torch_takes_and_the_op_has_no_name(tier):
    """torch's ``register_autograd`` stores what it is given (compatfn before: a TypeError for a
    non-callable); torch's op object has no ``__name__`` (compatfn's had; the function tier keeps
    one: torch 1.8-1.12's fx calls an op by its module and name)."""

    @make(tier, "named")
    def named(x: torch.Tensor) -> torch.Tensor:
        """The kernel's docstring."""
        return x.clone()

    assert named.register_autograd(5) is None
    assert named.register_autograd(lambda ctx, g: g, setup_context=3) is None
    if tier != "function":
        assert not hasattr(named, "__name__") and not hasattr(named, "__qualname__")
    assert named.__doc__ != "The kernel's docstring."


def _schema_calls(decorate: Callable) -> List[str]:
    """What the kernels of ops with an explicit ``schema=`` get, or torch's error."""
    seen: List[str] = []

    def defaults(x, n=1, f=1.0, s="z", dt=None, ints=None):
        seen.append(repr((n, f, s, dt, ints)))
        return x * 1

    def renamed(x, m):
        seen.append(repr(m))
        return x * 1

    def required(x, n=7):
        seen.append(repr(n))
        return x * 1

    def lacking(x, n):
        seen.append(repr(n))
        return x * 1

    schema = "(Tensor x, int n=4, float f=0.5, str s='q', ScalarType? dt=None, int[] ints=[1,2])"
    ops = [
        decorate("defaults", schema + " -> Tensor")(defaults),
        decorate("renamed", "(Tensor x, int n) -> Tensor")(renamed),
        decorate("required", "(Tensor x, int n) -> Tensor")(required),
        decorate("lacking", "(Tensor x, int n=4) -> Tensor")(lacking),
    ]
    x = torch.ones(1)
    calls = [
        lambda: ops[0](x),
        lambda: ops[0](x, 4),
        lambda: ops[0](x, 2, 0.5),
        lambda: ops[0](x, 4, 0.5, "q", None, [1, 2]),
        lambda: ops[0](x, 4, 0.5, "q", None, [3]),
        lambda: ops[1](x, n=3),
        lambda: ops[2](x),
        lambda: ops[3](x),
        lambda: ops[3](x, 2),
        lambda: ops[3](x.requires_grad_()),
    ]
    for call in calls:
        try:
            call()
        except RuntimeError as e:
            seen.append(re.sub(r"cft_\w+::", "NS::", str(e).split("\n")[0]))
        except TypeError as e:  # Python's, for the kernel's call: named by its __qualname__
            seen.append(str(e).split("<locals>.")[-1])
    return seen


#: Recorded from torch 2.13's own custom_op: an argument equal to the schema's default is left
#: out of the kernel's call (the kernel's own default applies); calls bind by the schema's names.
SCHEMA_CALLS = [
    "(1, 1.0, 'z', None, None)",
    "(1, 1.0, 'z', None, None)",
    "(2, 1.0, 'z', None, None)",
    "(1, 1.0, 'z', None, None)",
    "(4, 0.5, 'q', None, [3])",
    "3",
    "NS::required() is missing value for argument 'n'. Declaration: NS::required(Tensor x, int n) "
    "-> Tensor",
    "lacking() missing 1 required positional argument: 'n'",
    "2",
    "lacking() missing 1 required positional argument: 'n'",
]


@pytest.mark.parametrize("tier", TIERS)
def test_an_explicit_schema_binds_calls_and_leaves_out_its_defaults(tier):
    """compatfn before: calls bound by the kernel's signature (its defaults, its names), so the
    kernel got ``n=4`` where torch's gets its own ``n=1``, ``n=3`` was refused, and ``required(x)``
    ran with the kernel's default; a kernel without the schema's default got the schema's
    (torch's kernel call leaves the argument out: Python's TypeError)."""

    def decorate_with(maker: Callable, prefix: str) -> Callable:
        def decorate(name: str, schema: str) -> Callable:
            return maker(f"{fresh(prefix)}::{name}", mutates_args=(), schema=schema)

        return decorate

    ours = _schema_calls(decorate_with(lambda q, **kw: make(tier, "", qualname=q, **kw), tier))
    if tier == "torch":  # torch's own op, side by side
        assert ours == _schema_calls(decorate_with(torch.library.custom_op, "own"))
    else:
        assert ours == SCHEMA_CALLS


@pytest.mark.parametrize("tier", TIERS)
def test_needs_input_grad_names_each_argument_as_torchs(tier):
    """compatfn before, on the older tiers: an op with an optional tensor (the general path) saw
    compatfn's own entry first in ``ctx.needs_input_grad``, so a backward gated on it dropped
    the first input's gradient. The entries are torch's: one per argument passed (a default
    left out has none)."""
    source = (
        "def linear(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor] = None)"
        " -> torch.Tensor:\n    out = x @ w.t()\n    return out if bias is None else out + bias\n"
    )
    namespace = {"torch": torch, "Optional": Optional}  # real annotations, for torch 2.4
    exec(compile(source, "<linear>", "exec", dont_inherit=True), namespace)
    seen: List[tuple] = []

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        seen.append(tuple(ctx.needs_input_grad))
        flags = ctx.needs_input_grad
        bias = g.sum(0) if len(flags) > 2 else None  # torch refuses one for a bias left out
        return (g @ w if flags[0] else None, g.t() @ x if flags[1] else None, bias)

    outcomes = []
    for decorator in side_by_side(tier, "linear"):
        op = decorator(namespace["linear"])
        op.register_autograd(backward, setup_context=setup_context)
        x, w = torch.ones(3, 4, requires_grad=True), torch.ones(5, 4)
        op(x, w).sum().backward()
        outcomes.append((seen.pop(), x.grad.tolist()))
    assert outcomes[0] == ((True, False), torch.full((3, 4), 5.0).tolist())
    assert all(o == outcomes[0] for o in outcomes)


@pytest.mark.parametrize("tier", TIERS)
def test_torchscript_calls_the_op_from_python(tier):
    """``torch.jit.script`` of functions calling the op object: TorchScript reads the op's
    signature, ``(*args, **kwargs)`` as torch's op answers it, and calls it from Python (the
    function's own signature, shown before, failed TorchScript's internal assertion for an op
    with a default)."""

    @make(tier, "scripted")
    def scripted(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x * scale

    def with_scale(x: torch.Tensor) -> torch.Tensor:
        return scripted(x, 3.0)

    def with_default(x: torch.Tensor) -> torch.Tensor:
        return scripted(x)

    assert str(inspect.signature(scripted)) == "(*args, **kwargs)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.15 warns that TorchScript is deprecated
        results = [torch.jit.script(f)(torch.ones(2)).tolist() for f in (with_scale, with_default)]
    assert results == [[3.0, 3.0], [2.0, 2.0]]


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_a_torch_function_subclass_sees_only_the_op(tier):
    """A tensor subclass's ``__torch_function__`` sees the op's call and nothing before it, as
    with torch's own op (the registered tier asked ``is_conj``/``is_neg``/``_is_zerotensor``
    first, through it). The ``function`` tier has no operator: documented."""
    seen: List[str] = []

    class Strict(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(getattr(func, "__name__", str(func)))
            with torch._C.DisableTorchFunction():
                return func(*args, **(kwargs or {}))

    @make(tier, "strict")
    def strict(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    strict(torch.ones(2).as_subclass(Strict))
    assert seen == ["strict.default"]


def _named(requires_grad: bool = False) -> torch.Tensor:
    with warnings.catch_warnings():  # torch's one warning that named tensors are a prototype
        warnings.simplefilter("ignore")
        return torch.ones(2, names=("n",), requires_grad=requires_grad)


@pytest.mark.skipif(
    not _facts.HAS_NAMED_TENSORS, reason="this torch makes no named tensors (2.13 removed them)"
)
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("context", ["plain", "requires_grad", "no_grad", "in_a_list"])
def test_a_named_tensor_gets_the_error_of_torchs_operators(tier, context):
    """torch's operators refuse a named tensor (torch 1.8-2.12; its own ``aten::add`` on this
    torch is the oracle) before any kernel runs; the older tiers ran the kernel with it."""
    with pytest.raises(RuntimeError) as oracle:
        torch.ops.aten.add(_named(), _named())
    ran = []

    @make(tier, "named")
    def one(x: torch.Tensor, s: float = 2.0) -> torch.Tensor:
        ran.append(x)
        return x * s

    @make(tier, "named_list")
    def listed(xs: List[torch.Tensor]) -> torch.Tensor:
        ran.append(xs)
        return xs[0] * 2

    x = _named(requires_grad=context == "requires_grad")
    grad_mode = torch.no_grad() if context == "no_grad" else contextlib.nullcontext()
    with grad_mode, pytest.raises(RuntimeError) as caught:
        listed([torch.ones(2), x]) if context == "in_a_list" else one(x)
    assert str(caught.value) == str(oracle.value)
    assert ran == []
