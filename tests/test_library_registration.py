"""Operators in torch's dispatcher: ``torch.ops``, torch.compile and torch.export see one op."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import pytest
import torch

import compatfn
from compatfn import library
from compatfn.library import _facts, _registration
from library_support import (
    TIERS,
    compiles,
    count_op_nodes,
    fresh,
    make,
    reset_dynamo,
    run_docs_blocks,
)


@pytest.fixture(scope="module")
def docs() -> dict:
    return run_docs_blocks()


def test_torch_tier_returns_torchs_own_object(docs):
    """A subclass of torch's CustomOpDef (its call: ``_torch_call``); torch's registry of ops by
    name keeps torch's own object, which shares the op's state."""
    if library.TIER != "torch":
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (torch >= 2.4)")
    op = docs["mul_scaled"]
    assert isinstance(op, torch.library.CustomOpDef)
    assert torch.library.CustomOpDef in type(op).__mro__
    assert torch._library.custom_ops.OPDEFS[op._qualname].__dict__ is op.__dict__


def test_docs_ops_are_in_torch_ops_where_registered(docs):
    if library.TIER == "function":
        pytest.skip(f"torch {torch.__version__} has no torch.library: ops are not registered")
    namespace = docs["mul_scaled"]._qualname.split("::")[0]
    packet = getattr(torch.ops, namespace).mul_scaled
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3)
    out = packet(x, y, scale=2.0)
    assert out.grad_fn is not None
    assert torch.allclose(out, x * y * 2.0)
    clip_namespace = docs["clip_"]._qualname.split("::")[0]
    assert hasattr(getattr(torch.ops, clip_namespace), "clip_")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_docs_mul_op_compiles_fullgraph(docs, backend):
    why = compiles()
    if why:
        pytest.skip(why)
    op = docs["mul_scaled"]

    def f(a, b):
        return op(a * 1.5, b, scale=2.0).sin()

    x = torch.randn(4, requires_grad=True)
    y = torch.randn(4)
    reset_dynamo()
    try:
        got = torch.compile(f, fullgraph=True, backend=backend)(x, y)
        (gx,) = torch.autograd.grad(got.sum(), x)
    finally:
        reset_dynamo()
    x2 = x.detach().clone().requires_grad_()
    want = f(x2, y)
    want.sum().backward()
    assert torch.allclose(got, want) and torch.allclose(gx, x2.grad)


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_compiled_graph_has_one_node_of_the_op(tier):
    """dynamo keeps a registered op as one opaque node (not traced into its kernel)."""
    why = compiles()
    if why:
        pytest.skip(why)

    @make(tier, "opaque")
    def opaque(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x.sin().cos() * scale

    opaque.register_fake(lambda x, scale=1.0: torch.empty_like(x))

    def f(a):
        return opaque(a + 1, scale=2.0) * 3

    assert count_op_nodes(f, (torch.randn(3),), opaque) == 1


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
@pytest.mark.parametrize("given", [True, False])
def test_a_keyword_only_parameter_compiles_fullgraph(tier, given):
    """An op with a keyword-only parameter, given or left out, compiles as torch's own op does
    (dynamo 2.1 could not trace how the registered tier handed its arguments to the operator)."""
    why = compiles()
    if why:
        pytest.skip(why)

    @make(tier, "keyword_only")
    def keyword_only(x: torch.Tensor, *, scale: float = 2.0) -> torch.Tensor:
        return x * scale

    keyword_only.register_fake(lambda x, *, scale=2.0: torch.empty_like(x))
    kwargs = {"scale": 3.0} if given else {}
    reset_dynamo()
    got = torch.compile(lambda a: keyword_only(a, **kwargs), fullgraph=True, backend="aot_eager")
    assert got(torch.ones(2)).tolist() == [3.0 if given else 2.0] * 2


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "function"])
def test_a_symbolic_int_argument_compiles_and_exports(tier):
    """A dynamic dimension given for an ``int`` parameter, under ``torch.compile(dynamic=True)``
    and strict ``torch.export`` with an unbounded dimension, as torch's own op takes it (the
    registered tier's int64 range test could not be traced by dynamo 2.1 and made a guard strict
    export refuses)."""
    why = compiles()
    if why:
        pytest.skip(why)

    @make(tier, "sym_int")
    def sym_int(x: torch.Tensor, n: int) -> torch.Tensor:
        return x.new_zeros(n)

    sym_int.register_fake(lambda x, n: x.new_empty(n))
    reset_dynamo()
    compiled = torch.compile(lambda x: sym_int(x, x.shape[0] * 2), fullgraph=True, dynamic=True)
    assert compiled(torch.ones(3)).shape == (6,)
    if not hasattr(torch.export, "Dim"):
        return  # torch 2.1's export API: compile only

    class Module(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sym_int(x, x.shape[0] * 2)

    dynamic = {"x": {0: torch.export.Dim("n", min=2)}}
    strict = (
        {"strict": True} if "strict" in inspect.signature(torch.export.export).parameters else {}
    )
    exported = torch.export.export(Module(), (torch.ones(4),), dynamic_shapes=dynamic, **strict)
    assert exported.module()(torch.ones(7)).shape == (14,)


def test_docs_inplace_op_compiles_fullgraph(docs):
    why = compiles()
    if why:
        pytest.skip(why)
    if not _facts.has_auto_functionalize():
        pytest.skip(f"torch {torch.__version__} cannot compile mutating custom ops (torch >= 2.2)")
    op = docs["clip_"]

    def f(a):
        b = a * 2
        op(b, -1.0, 1.0)
        return b + 1

    x = torch.randn(6)
    reset_dynamo()
    try:
        got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    finally:
        reset_dynamo()
    assert torch.equal(got, f(x))


EXPORT_MODES = compatfn.features()["export"]


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


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "name, error, message",
    [
        ("my-ns::op", RuntimeError, "expected eof but found '-'|namespace 'my-ns' is not valid"),
        ("ns.sub::op", RuntimeError, "expected eof but found ':'|namespace 'ns.sub' is not valid"),
        ("{ns}::op name", RuntimeError, "found 'ident'|name 'op name' is not valid"),
        ("{ns}::1op", RuntimeError, "found 'number'|name '1op' is not valid"),
        ("{ns}::class", RuntimeError, "found 'class'|name 'class' is not valid"),
        ("prim::{ns}", ValueError, "prim.*is a reserved namespace"),
        ("{ns}", ValueError, "not enough values to unpack|Expected `qualname` to be of the form"),
        ("{ns}::op.", RuntimeError, "expected ident but found|overload name '' is not valid"),
        ("{ns}::", RuntimeError, "expected ident but found|name '' is not valid"),
    ],
)
@pytest.mark.parametrize("tier", TIERS)
def test_invalid_names_are_refused_at_definition(tier, name, error, message):
    """As torch 2.15's own custom_op (the ``torch`` tier); torch 1.8 before accepted them all,
    1.13-2.3 the first two. Nothing is left defined."""
    qualname = name.format(ns=fresh(tier))
    with pytest.raises(error, match=message):
        make(tier, "", qualname=qualname)(_plus_one)
    assert qualname not in library.OPS


@pytest.mark.parametrize("tier", TIERS)
def test_an_overload_name(tier):
    """torch 1.13-2.3 before: a crash at definition."""
    namespace = fresh(tier)

    @make(tier, "", qualname=f"{namespace}::op.over")
    def op(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    assert torch.equal(op(torch.zeros(1)), torch.ones(1))
    if tier != "function":
        packet = getattr(torch.ops, namespace).op
        assert torch.equal(packet.over(torch.zeros(1)), torch.ones(1))


# --------------------------------------------------------------------------- redefinition


@pytest.mark.parametrize("tier", TIERS)
def test_defining_a_name_again_replaces_the_op(tier):
    """Re-running a notebook cell: the newest definition wins, older op objects and torch.ops
    follow (torch >= 2.4). torch 1.13-2.3 before: an error; 1.8: the old object kept its kernel."""
    qualname = f"{fresh(tier)}::again"
    ops = [make(tier, "", qualname=qualname)(_adding(add)) for add in (1.0, 2.0, 3.0)]
    for op in ops:
        assert torch.equal(op(torch.zeros(1)), torch.full((1,), 3.0))
    if tier != "function":
        namespace, name = qualname.split("::")
        assert torch.equal(
            getattr(getattr(torch.ops, namespace), name)(torch.zeros(1)), torch.full((1,), 3.0)
        )


@pytest.mark.parametrize("tier", TIERS)
def test_older_op_objects_stay_safe_after_many_redefinitions(tier):
    """torch's own custom_op (2.4+) leaves older op objects on a destroyed operator: calling one
    read freed memory (wrong kernel, bad_alloc or a segfault). Each older object follows the
    newest definition, registrations made through it included."""
    qualname = f"{fresh(tier)}::often"
    ops = []
    for round_ in range(40):
        ops.append(make(tier, "", qualname=qualname)(_adding(float(round_))))
        for op in ops[-5:]:
            assert torch.equal(op(torch.zeros(1)), torch.full((1,), float(round_)))
    ops[0].register_kernel("cpu", lambda x, scale=1.0: x - 1)
    assert torch.equal(ops[-1](torch.zeros(1)), torch.full((1,), -1.0))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("how", ["short", "keyword_only", "profiled"])
def test_a_graph_recorded_before_a_redefinition_keeps_its_formula(tier, how):
    """Re-running a notebook cell: torch keeps the formula that recorded a graph."""
    qualname = f"{fresh(tier)}::again"
    x = torch.ones(2, requires_grad=True)
    outputs = []
    for factor in (2.0, 5.0):
        if how != "keyword_only":

            def fn(x: torch.Tensor) -> torch.Tensor:
                return x.clone()

        else:

            def fn(x: torch.Tensor, *, k: float = 1.0) -> torch.Tensor:
                return x.clone()

        op = make(tier, "", qualname=qualname)(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op.register_autograd(
                lambda ctx, g, factor=factor: g * factor,
                setup_context=lambda ctx, inputs, output, **kw: None,
            )
        if how == "profiled":  # through the operator, where there is one
            with torch.autograd.profiler.profile():
                outputs.append(op(x))
        else:
            outputs.append(op(x))
    grads = [torch.autograd.grad(out.sum(), x)[0].tolist() for out in outputs]
    assert grads == [[2.0, 2.0], [5.0, 5.0]]


@pytest.mark.parametrize("tier", [t for t in TIERS if t == "registered"])
def test_defining_a_name_again_with_another_schema(tier):
    """torch < 2.4 cannot remove an operator: an error at definition that says so."""
    qualname = f"{fresh(tier)}::changed"
    make(tier, "", qualname=qualname)(_plus_one)

    def plus(x: torch.Tensor, y: float) -> torch.Tensor:
        return x + y

    with pytest.raises(RuntimeError, match="cannot remove an operator"):
        make(tier, "", qualname=qualname)(plus)
    assert torch.equal(library.OPS[qualname](torch.zeros(1)), torch.ones(1))


@pytest.mark.parametrize("tier", TIERS)
def test_an_op_in_a_namespace_another_library_defines(tier):
    """``aten::`` and a namespace a ``"DEF"`` Library owns: torch's own op adds to them; where
    torch.library has no ``"FRAGMENT"`` kind (torch < 2.1, one defining library per namespace)
    the registered tier raises an error naming the op (before: torch's C++ error, "Only a single
    TORCH_LIBRARY can be used to register the namespace")."""
    namespaces = ["aten"]
    fragments = False
    if hasattr(torch, "library"):  # torch >= 1.10
        namespaces.append(fresh(tier))
        owner = torch.library.Library(namespaces[-1], "DEF")  # noqa: F841 (kept alive)
        try:
            torch.library.Library(fresh(tier), "FRAGMENT")
            fragments = True
        except ValueError:
            pass
    for namespace in namespaces:
        define = make(tier, "", qualname=f"{namespace}::{fresh(tier)}_plus_one")
        if tier == "registered" and not fragments:
            with pytest.raises(
                RuntimeError,
                match=rf"torch .* cannot add an operator to the "
                rf"namespace '{namespace}', which another library defines",
            ):
                define(_plus_one)
        else:
            assert torch.equal(define(_plus_one)(torch.zeros(1)), torch.ones(1))


def _plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _adding(add: float) -> Any:
    def again(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * scale + add

    return again


# --------------------------------------------------------------------------- tags


@pytest.mark.parametrize("tier", TIERS)
def test_tags(tier):
    """``tags=`` reaches the operator where torch can attach tags (torch >= 2.1), else an error at
    definition that says so."""
    if not hasattr(torch, "Tag"):
        with pytest.raises(RuntimeError, match="cannot attach tags"):
            make(tier, "tagged", tags=("pointwise",))(_plus_one)
        return
    tag = getattr(torch.Tag, "pointwise", None) or next(iter(torch.Tag.__members__.values()))
    cannot = tier == "function" or not _registration._define_takes_tags()
    if cannot or (tier == "torch" and not _facts.TORCH_CUSTOM_OP_TAKES_TAGS):
        with pytest.raises(RuntimeError, match="cannot attach tags"):
            make(tier, "tagged", tags=(tag,))(_plus_one)
        return
    op = make(tier, "tagged", tags=(tag,))(_plus_one)
    assert tag in op._opoverload.tags
    assert torch.equal(op(torch.zeros(1)), torch.ones(1))


# --------------------------------------------------------------------------- ops by name


def _register_and_check(target: Any, op: Any, **keywords: Any) -> None:
    """Register a kernel (x * 3), a fake kernel and a backward (g * 5) for ``op`` through
    ``target`` (its name or an op object) with compatfn.library's functions; check ``op`` uses
    them."""
    library.register_kernel(target, "cpu", lambda x: x * 3, **keywords)
    library.register_fake(target, lambda x: torch.empty_like(x), **keywords)
    library.register_autograd(target, lambda ctx, g: g * 5, **keywords)
    x = torch.ones(2, requires_grad=True)
    out = op(x)
    assert torch.equal(out.detach(), torch.full((2,), 3.0))
    assert torch.equal(torch.autograd.grad(out.sum(), x)[0], torch.full((2,), 5.0))
    if library.HAS_META_DEVICE:
        assert op(torch.empty(4, device="meta")).shape == (4,)


@pytest.mark.parametrize("tier", TIERS)
def test_registration_by_name(tier):
    """``register_kernel``/``register_fake``/``register_autograd`` by ``"ns::op"`` for an op
    compatfn defined, on every tier."""
    qualname = f"{fresh(tier)}::named"

    @make(tier, "", qualname=qualname)
    def named(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    _register_and_check(qualname, named)
    # An op nobody defined: torch's error where torch has the function, compatfn's before.
    with pytest.raises(RuntimeError, match=r"operator \w+::unknown does not exist"):
        library.register_fake(f"{fresh(tier)}::unknown", lambda x: x)
    if named._opoverload is not None:  # an OpOverload, as torch's functions take it
        library.register_kernel(named._opoverload, "cpu", lambda x: x * 4)
        assert torch.equal(named(torch.ones(1)), torch.full((1,), 4.0))


def _op_objects(tier: str) -> list:
    """An op made on ``tier``, and where torch has its own custom_op, one made by torch."""
    ops = [make(tier, "objects")(_double)]
    if library.HAS_TORCH_CUSTOM_OP:
        ops.append(torch.library.custom_op(f"{fresh('own')}::objects", mutates_args=())(_double))
    return ops


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


_double.__annotations__ = {"x": torch.Tensor, "return": torch.Tensor}  # torch 2.4 reads no str


@pytest.mark.parametrize("tier", TIERS)
def test_registration_through_an_op_object(tier):
    """The register functions take an op object, compatfn's or torch's own, as torch's do
    (compatfn before: ``AttributeError`` reading ``CustomOpDef._schema``), and torch's ``lib=``
    keyword (ignored for custom ops, as torch ignores it)."""
    for op in _op_objects(tier):
        # torch < 2.4 has no FRAGMENT library; compatfn ignores ``lib`` for its ops anyway.
        lib: Any = object()
        if library.HAS_TORCH_CUSTOM_OP:
            lib = torch.library.Library(op._namespace, "FRAGMENT")
        _register_and_check(op, op, lib=lib)


@pytest.mark.parametrize(
    "function", ["register_kernel", "register_fake", "register_autograd", "register_vmap"]
)
def test_an_op_of_another_type_is_torchs_value_error(function):
    args = ("cpu", lambda x: x) if function == "register_kernel" else (lambda x: x,)
    expected = f"{function}(123): got unexpected type for op: <class 'int'>"
    with pytest.raises(ValueError) as info:
        getattr(library, function)(123, *args)
    assert str(info.value) == expected
    if hasattr(getattr(torch, "library", None), function):  # torch 2.4 writes {type(op)}
        with pytest.raises(ValueError, match=rf"^{function}\((123|op)\): got unexpected type"):
            getattr(torch.library, function)(123, *args)


@pytest.mark.parametrize("tier", TIERS)
def test_register_torch_dispatch_by_name_and_object(tier):
    """As torch's function (torch >= 2.5), by name or op object; compatfn's own tiers: the op
    method's error."""
    op = make(tier, "dispatched")(_double)
    if tier != "torch":
        for target in (op, op._qualname):
            with pytest.raises(NotImplementedError, match="register_torch_dispatch needs torch"):
                library.register_torch_dispatch(target, object, lambda *args: None)
        return
    if not hasattr(torch.library, "register_torch_dispatch"):
        pytest.skip("torch 2.4's CustomOpDef has no register_torch_dispatch (documented)")
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    for i, target in enumerate((op, op._qualname)):
        library.register_torch_dispatch(target, Mode, lambda mode, f, types, a, k, i=i: a[0] * i)
        with Mode():
            assert torch.equal(op(torch.ones(2)), torch.full((2,), float(i)))


def test_an_operator_is_handed_to_torchs_function():
    """An ``OpOverload`` of an op compatfn did not make goes to torch's own function (compatfn
    before: ``AttributeError``, the operator has no ``register_autocast`` method)."""
    if not hasattr(getattr(torch, "library", None), "register_autocast"):  # torch >= 2.5
        pytest.skip(f"torch {torch.__version__} has no torch.library.register_autocast")
    own = torch.library.custom_op(f"{fresh('own')}::casted", mutates_args=())(_double)
    library.register_autocast(own._opoverload, "cpu", torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert own(torch.ones(2)).dtype == torch.float64


def test_register_autocast_takes_its_arguments_by_position_only():
    with pytest.raises(TypeError):
        library.register_autocast("ns::op", device_type="cpu", cast_inputs=torch.float16)


@pytest.mark.parametrize("tier", TIERS)
def test_a_failed_definition_leaves_nothing_behind(tier):
    """A definition that fails (here: ``mutates_args`` names no parameter) registers nothing:
    the same name can then be defined correctly."""
    qualname = f"{fresh(tier)}::retry"
    with pytest.raises(ValueError, match="in mutates_args were not found"):
        make(tier, "", mutates_args={"nope"}, qualname=qualname)(_plus_one)
    op = make(tier, "", qualname=qualname)(_plus_one)
    assert torch.equal(op(torch.zeros(1)), torch.ones(1))


@pytest.mark.parametrize("tier", [t for t in TIERS if t == "registered"])
@pytest.mark.parametrize(
    "tags",
    [
        None,
        "pointwise",
        ("pointwise", "pointwise"),
        "generator",
        ("pt2_compliant_tag", "pointwise"),
    ],
)
def test_the_operator_has_the_tags_torchs_own_op_gives_it(tier, tags):
    """As torch's own custom_op: ``pt2_compliant_tag`` first (where torch has it), then the
    op's own tags, each once; one tag or any iterable of them (compatfn's tiers before: the
    tags as given, without ``pt2_compliant_tag``; a generator refused). The torch tier's are
    torch's own (2.4 adds ``needs_fixed_stride_order``)."""
    if tags is not None and not _registration._define_takes_tags():
        pytest.skip(f"torch {torch.__version__} attaches no tags to an operator (refused)")
    given: Any = tags
    if tags == "generator":
        given = (getattr(torch.Tag, name) for name in ("pointwise", "pointwise"))
    elif isinstance(tags, str):
        given = getattr(torch.Tag, tags)
    elif tags is not None:
        given = tuple(getattr(torch.Tag, name) for name in tags)
    qualname = f"{fresh(tier)}::tagged"

    @make(tier, "tagged", qualname=qualname, tags=given)
    def tagged(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    namespace, name = qualname.split("::")
    found = getattr(getattr(torch.ops, namespace), name).default.tags
    pt2_tag = getattr(getattr(torch, "Tag", None), "pt2_compliant_tag", None)
    pt2 = [] if pt2_tag is None or not _registration._define_takes_tags() else [pt2_tag]
    expected = pt2 + ([] if tags is None else [torch.Tag.pointwise])
    assert found == expected
