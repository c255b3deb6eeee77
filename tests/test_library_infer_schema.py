"""Schema inference, as torch's ``infer_schema``."""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from typing import Any, Dict, Optional, Sequence, Tuple

import pytest
import torch
from torch.types import Number

from compatfn import library
from compatfn.library import _schema_facts
from compatfn.library._infer_schema import infer_schema as compatfn_infer_schema
from library_support import TIERS, TORCH_MINOR, fresh, make


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


@pytest.mark.parametrize("tier", TIERS)
def test_a_given_schema_with_symint_as_torchs_inference_writes_it(tier):
    """``SymInt``, what torch 2.x's own inference writes for ``int``, in a ``schema=`` on every
    torch (1.8-1.12's parser does not know it: read as ``int``)."""

    def f(x: torch.Tensor, n: int, sizes: Sequence[int]) -> Tuple[int, torch.Tensor]:
        return n + len(sizes), x * n

    schema = "(Tensor x, SymInt n, SymInt[] sizes) -> (SymInt, Tensor)"
    op = make(tier, "symint", schema=schema)(f)
    count, out = op(torch.ones(2), 3, [1, 2])
    assert (count, out.tolist()) == (5, [3.0, 3.0])
    with pytest.raises(RuntimeError, match="Expected a value of type 'int' for argument 'n'"):
        op(torch.ones(2), 2.5, [1])


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("arrow", ["->", ")-> ", ") ->", ")  ->  "])
def test_a_given_schema_takes_any_spacing_around_its_arrow(tier, arrow):
    """torch's parser takes any spacing around the arrow (its own op, measured on 2.13); the
    older tiers raised ``ValueError: substring not found`` for ``(Tensor x)->Tensor``."""

    def f(x, s=2.0, *, n=1):
        return x * s * n, x * 3

    arguments = "(Tensor x, float s=2.0, *, int n=1"
    schema = arguments + (")" + arrow if arrow == "->" else arrow) + "(Tensor, Tensor)"
    op = make(tier, "spaced", schema=schema)(f)
    x = torch.ones(1, requires_grad=True)
    outs = [op(x), op(x, 3.0, n=2)]
    assert [[float(t) for t in out] for out in outs] == [[2.0, 3.0], [6.0, 3.0]]
    assert all(t.grad_fn is not None for out in outs for t in out)


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])  # torch's own words there
def test_an_unsupported_default_is_refused_in_torchs_words(tier):
    """As torch 2.13's infer_schema (compatfn's words before: without its last sentence)."""

    def f(x: torch.Tensor, dims: Sequence[float] = ()) -> torch.Tensor:
        return x

    words = (
        "infer_schema(func): Parameter dims has an unsupported default value type "
        "<class 'tuple'>. Please file an issue on GitHub so we can prioritize this. Got func "
    )
    with pytest.raises(ValueError) as caught:
        make(tier, "tuple_default")(f)
    assert str(caught.value).startswith(words)


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
    assert schema == expected.replace("SymInt", _schema_facts.int_type())
    if hasattr(getattr(torch, "library", None), "infer_schema"):  # torch >= 2.5: the same text
        assert schema == torch.library.infer_schema(f, mutates_args={"ys"})
    if library.HAS_LIBRARY:  # every torch with torch.library parses it
        torch._C.parse_schema("f" + schema)


def test_number_is_a_scalar():
    """``torch.types.Number`` is ``Scalar``, as torch's infer_schema (torch 1.8-2.3 before:
    "unsupported type")."""

    def f(x: torch.Tensor, n: Number, m: Optional[Number] = None, k: Number = 2) -> Number:
        return 1

    schema = library.infer_schema(f, mutates_args=())
    assert schema == "(Tensor x, Scalar n, Scalar? m=None, Scalar k=2) -> Scalar"
    if hasattr(getattr(torch, "library", None), "infer_schema"):
        # Evaluated annotations: torch 2.5-2.6 cannot resolve this module's string "Number".
        f.__annotations__ = typing.get_type_hints(f)
        assert schema == torch.library.infer_schema(f, mutates_args=())


_STRING_ANNOTATED = {  # string annotations (this module's __future__ import) torch reads too
    "one_tuple": ("(x: torch.Tensor) -> typing.Tuple[torch.Tensor]", ()),
    "unknown_mutation": ("(x: torch.Tensor, y: torch.Tensor) -> None", "unknown"),
    "pep604": (
        "(x: torch.Tensor, b: torch.Tensor | None = None, n: int | None = None) -> torch.Tensor",
        (),
    ),
    "unresolvable": ("(x: Tensor) -> torch.Tensor", ()),  # no Tensor in the module
}


@pytest.mark.skipif(
    not _schema_facts.infers_from_string_annotations(),
    reason=f"torch {torch.__version__}'s own inference misreads string annotations",
)
@pytest.mark.parametrize("case", list(_STRING_ANNOTATED))
def test_string_annotations_give_torchs_own_schema_and_errors(case):
    """Where torch's inference reads string annotations, the op's schema (or error) is what
    torch's own custom_op gives: compatfn's inference wrote ``-> Tensor`` for a one-element
    tuple, refused ``X | None`` and ``mutates_args="unknown"``, took ``Tensor`` unimported."""
    import sys

    signature, mutates = _STRING_ANNOTATED[case]
    if case == "pep604" and sys.version_info < (3, 10):
        pytest.skip("X | None needs Python 3.10")
    namespace: dict = {"torch": torch, "typing": typing}
    exec(f"from __future__ import annotations\ndef f{signature}:\n    pass\n", namespace)
    outcomes = []
    for define in (library.custom_op, torch.library.custom_op):
        name = f"{fresh('strings')}::f"
        try:
            op = define(name, namespace["f"], mutates_args=mutates)
            outcomes.append(str(op._opoverload._schema).split("::f", 1)[1])
        except ValueError as error:
            outcomes.append(f"ValueError: {error}")
    assert outcomes[0] == outcomes[1]


def test_infer_schema_takes_torchs_arguments():
    """torch's ``infer_schema(fn, /, *, mutates_args, op_name=None, tags=())`` (compatfn before:
    ``mutates_args`` by position, no ``op_name`` or ``tags``); torch's own side by side where it
    has them."""

    def scale(x: torch.Tensor, s: float = 2.0) -> torch.Tensor:
        return x * s

    def add_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.add_(y)

    scale.__annotations__ = {"x": torch.Tensor, "s": float, "return": torch.Tensor}
    add_.__annotations__ = {"x": torch.Tensor, "y": torch.Tensor, "return": torch.Tensor}
    with pytest.raises(TypeError):
        library.infer_schema(scale, ())  # type: ignore[misc]
    ours = [
        library.infer_schema(scale, mutates_args=()),
        library.infer_schema(scale, mutates_args=(), op_name="scale"),
        library.infer_schema(scale, mutates_args=(), op_name="ns::scale", tags=()),
    ]
    assert ours == [
        "(Tensor x, float s=2.0) -> Tensor",
        "scale(Tensor x, float s=2.0) -> Tensor",
        "ns::scale(Tensor x, float s=2.0) -> Tensor",
    ]
    own = getattr(getattr(torch, "library", None), "infer_schema", None)
    if own is None or "tags" not in inspect.signature(own).parameters:
        if hasattr(torch, "Tag") and hasattr(torch.Tag, "inplace"):
            with pytest.raises(NotImplementedError, match="write the schema"):
                library.infer_schema(add_, mutates_args=("x",), tags=torch.Tag.inplace)
        return
    assert ours[1] == own(scale, mutates_args=(), op_name="scale")
    assert library.infer_schema(add_, mutates_args=("x",), tags=torch.Tag.inplace) == own(
        add_, mutates_args=("x",), tags=torch.Tag.inplace
    )


#: Return annotations -> what torch 2.13's infer_schema gives (the schema, or its error up to
#: "The valid types"): only Tensor, List[Tensor], int, float, bool and Number, or a tuple of them.
_RETURNS = {
    "torch.Tensor": "(Tensor x) -> Tensor",
    "List[torch.Tensor]": "(Tensor x) -> Tensor[]",
    "Sequence[torch.Tensor]": "Return has unsupported type typing.Sequence[torch.Tensor].",
    "float": "(Tensor x) -> float",
    "List[int]": "Return has unsupported type typing.List[int].",
    "List[float]": "Return has unsupported type typing.List[float].",
    "Tuple[torch.Tensor]": "(Tensor x) -> ((Tensor))",
    "Tuple[torch.Tensor, float]": "(Tensor x) -> (Tensor, float)",
    "Tuple[torch.Tensor, ...]": "Return has unsupported type typing.Tuple[torch.Tensor, ...].",
    "Tuple[Tuple[torch.Tensor]]": (
        "Return has unsupported type typing.Tuple[typing.Tuple[torch.Tensor]]."
    ),
    "dict": "Return has unsupported type <class 'dict'>.",
}


def _inferred(infer: Any, annotation: str) -> str:
    scope: Dict[str, Any] = {"torch": torch}
    source = (
        f"from typing import List, Sequence, Tuple\ndef f(x: torch.Tensor) -> {annotation}: ..."
    )
    exec(compile(source, "<f>", "exec", dont_inherit=True), scope)
    try:
        return infer(scope["f"], mutates_args=())
    except ValueError as error:
        return str(error).split(": ", 1)[1].split(" The valid types")[0].split(" Got func")[0]


@pytest.mark.parametrize("annotation", sorted(_RETURNS))
def test_return_annotations_as_torchs(annotation):
    """Returns torch 2.13 refuses (a list of numbers, a Sequence, a tuple with ``...``) are
    refused with its error (compatfn before: accepted, or 'unsupported type Ellipsis'); a
    one-element tuple returns ``((Tensor))``."""
    assert _inferred(compatfn_infer_schema, annotation) == _RETURNS[annotation]
    if hasattr(getattr(torch, "library", None), "infer_schema"):  # torch's own, side by side
        expected = _RETURNS[annotation]
        if annotation == "Tuple[torch.Tensor]" and TORCH_MINOR < (2, 8):
            # torch 2.5-2.7's own inference writes one Tensor (measured on 2.5; their op then
            # fails at call, "Unable to cast (tensor(...),) to Tensor"); fixed in 2.8.
            # Upstream: https://github.com/pytorch/pytorch/pull/155447
            expected = "(Tensor x) -> (Tensor)"
        assert _inferred(torch.library.infer_schema, annotation) == expected


def test_tuple_parameter_hint_as_torchs():
    """torch's hint for a tuple parameter: use a list."""

    def f(x: torch.Tensor, y: Tuple[int, int]) -> torch.Tensor: ...

    with pytest.raises(ValueError, match=r"Tuple\[int, int\]\. We do not support Tuple inputs"):
        compatfn_infer_schema(f, mutates_args=())


@pytest.mark.skipif(sys.version_info < (3, 10), reason="X | Y annotations need Python 3.10")
def test_unions_written_with_a_bar_are_optional_types():
    """``int | None`` as ``Optional[int]``, as torch 2.13's infer_schema reads it (compatfn
    refused it; found by a hostile probe)."""
    scope = {"torch": torch}
    exec(
        "def f(x: torch.Tensor, y: int | None, z: None | float = None,\n"
        "      w: list[torch.Tensor | None] = None, v: torch.Tensor | None = None)"
        " -> torch.Tensor: ...",
        scope,
    )
    expected = "(Tensor x, SymInt? y, float? z=None, Tensor?[] w=None, Tensor? v=None) -> Tensor"
    schema = compatfn_infer_schema(scope["f"], mutates_args=())
    assert schema == expected.replace("SymInt", _schema_facts.int_type())


def _optional_tensor_list(x: torch.Tensor, y: Optional[typing.List[torch.Tensor]]) -> torch.Tensor:
    return x


def _optional_number_list(x: torch.Tensor, y: Optional[typing.List[Number]]) -> torch.Tensor:
    return x


def _none_type_return(x: torch.Tensor) -> type(None):  # type: ignore[valid-type]
    return None


@pytest.mark.parametrize(
    "fn, refused",
    [
        (_optional_tensor_list, "Parameter y has unsupported type"),
        (_optional_number_list, "Parameter y has unsupported type"),
        (_none_type_return, "Return has unsupported type <class 'NoneType'>"),
    ],
)
def test_what_torch_2_13_refuses_is_refused(fn, refused):
    """torch 2.13 takes an Optional list of ints, floats or bools only, and ``None`` (not
    ``type(None)``) for no return (compatfn took them; found by a hostile probe)."""
    with pytest.raises(ValueError, match=refused):
        compatfn_infer_schema(fn, mutates_args=())


class _CallableKernel:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _scaled(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize(
    "kernel", [functools.partial(_scaled, s=2.0), _CallableKernel()], ids=["partial", "callable"]
)
def test_a_kernel_without_globals_is_refused_as_torch_refuses_it(tier, kernel):
    """torch's ``infer_schema`` reads the kernel's ``__globals__`` first: a partial or a callable
    object raises its AttributeError (torch 2.13, measured; compatfn's tiers took them before);
    with an explicit ``schema=`` it is a kernel like any other."""
    with pytest.raises(AttributeError, match="object has no attribute '__globals__'"):
        make(tier, "no_globals")(kernel)
    with pytest.raises(AttributeError, match="__globals__"):
        compatfn_infer_schema(kernel, mutates_args=())
    op = make(tier, "no_globals", schema="(Tensor x) -> Tensor")(kernel)
    assert torch.equal(op(torch.ones(1)), torch.full((1,), 2.0))


@pytest.mark.parametrize("tier", TIERS)
def test_a_builtin_kernel_with_a_schema(tier):
    """A kernel Python has no signature for (``torch.sin``) with an explicit ``schema=``, as
    torch's own op takes it (compatfn's tiers raised ValueError before)."""
    op = make(tier, "builtin", schema="(Tensor x) -> Tensor")(torch.sin)
    x = torch.ones(2, requires_grad=True)
    assert torch.equal(op(x.detach()), torch.sin(x.detach()))
    assert torch.equal(op(x), torch.sin(x.detach()))
