"""Arguments reach the kernel converted as torch's dispatcher converts them, on every tier
(``_convert``); torch 2.15's own custom_op is the oracle (the ``torch`` tier)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

import pytest
import torch
from torch.types import Number

from library_support import TIERS, fresh, make, side_by_side


def recording_op(tier: str, seen: Dict[str, Any]) -> Any:
    @make(tier, "conv")
    def conv(
        x: torch.Tensor,
        d: torch.device,
        s: float,
        ints: List[int],
        b: bool,
        i: int,
        o: Optional[float] = None,
    ) -> torch.Tensor:
        seen.update(d=d, s=s, ints=ints, b=b, i=i, o=o)
        return x.clone()

    return conv


@pytest.mark.parametrize("tier", TIERS)
def test_arguments_are_converted_as_the_dispatcher_does(tier):
    """torch 1.8-2.3 before: the kernel got "cpu" as a str, 1 as an int, a tuple as a tuple."""
    seen: Dict[str, Any] = {}
    op = recording_op(tier, seen)
    op(torch.ones(1), "cpu", 1, (1, 2), True, 3, o=2)
    assert seen == {"d": torch.device("cpu"), "s": 1.0, "ints": [1, 2], "b": True, "i": 3, "o": 2.0}
    assert type(seen["s"]) is float and type(seen["ints"]) is list and type(seen["o"]) is float
    op(torch.ones(1), torch.device("cpu"), torch.tensor(2.5), [4], 1, True)
    assert seen["s"] == 2.5 and type(seen["s"]) is float and seen["b"] is True
    assert seen["i"] == 1 and type(seen["i"]) is int


@pytest.mark.parametrize(
    "position, value, expected",
    [
        (
            2,
            "str",
            "Expected a value of type 'float' for argument 's' but instead found type 'str'",
        ),
        (5, 3.0, "Expected a value of type 'int' for argument 'i' but instead found type 'float'"),
        (3, [1.5], "Expected a value of type 'List[int]' for argument 'ints'"),
        (3, 4, "Expected a value of type 'List[int]' for argument 'ints'"),
    ],
)
@pytest.mark.parametrize("tier", TIERS)
def test_a_wrong_argument_type_raises_torchs_error(tier, position, value, expected):
    """torch 1.8-2.3 before: the kernel ran with the wrong value."""
    seen: Dict[str, Any] = {}
    op = recording_op(tier, seen)
    args: List[Any] = [torch.ones(1), "cpu", 1.0, [1], True, 3]
    args[position] = value
    with pytest.raises(RuntimeError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        op(*args)
    assert seen == {}


@pytest.mark.parametrize("tier", TIERS)
def test_numbers_dtypes_and_tensor_lists_convert_as_the_dispatcher_does(tier):
    """As torch 2.15's own op: a ``torch.types.Number`` parameter (torch 1.8-2.3 before: refused
    at definition), a one-element tensor for a float or int, an int for a dtype (refused before)
    and a tuple for a tensor list (passed as a tuple before)."""
    seen: Dict[str, Any] = {}

    @make(tier, "numbers")
    def numbers(
        x: torch.Tensor, n: Number, s: float, i: int, dt: torch.dtype, xs: List[torch.Tensor]
    ) -> torch.Tensor:
        seen.update(n=n, s=s, i=i, dt=dt, xs=xs)
        return x.clone()

    numbers(torch.ones(1), 2, torch.ones(1, 1), torch.ones(1), 5, (torch.ones(1),))
    assert seen["n"] == 2 and type(seen["n"]) is int and seen["s"] == 1.0 and seen["i"] == 1
    assert seen["dt"] is torch.float16 and type(seen["xs"]) is list
    with pytest.raises(RuntimeError, match="Expected a value of type 'number' for argument 'n'"):
        numbers(torch.ones(1), "2", 1.0, 1, torch.float32, [torch.ones(1)])


def _with_real_annotations(source: str) -> Any:
    """The function ``source`` defines, its annotations objects (torch 2.4's own op cannot read
    strings), named ``kernel``."""
    namespace: Dict[str, Any] = {"torch": torch}
    exec(compile(source, "<kernel>", "exec", dont_inherit=True), namespace)
    return namespace["kernel"]


# (annotation, default, given values): what reaches the kernel, recorded from torch 2.15's and
# 2.13's own custom_op (See NOTE: [arguments equal to their defaults]): an argument of the
# parameter's type equal to a default of another kind is not left out of the kernel's call.
DEFAULT_KINDS = [
    ("int", True, [(None, "True"), (1, "1"), (True, "1"), (2, "2")]),
    ("int", False, [(None, "False"), (0, "0"), (False, "0")]),
    ("float", True, [(None, "True"), (1.0, "1.0"), (1, "1.0"), (True, "1.0")]),
    ("float", 1, [(None, "1"), (1.0, "1"), (1, "1"), (True, "1"), (2.0, "2.0")]),
    ("bool", 1, [(None, "1"), (True, "True"), (1, "True")]),
    ("bool", 0, [(None, "0"), (False, "False"), (0, "False")]),
    ("float", 0.0, [(None, "0.0"), (-0.0, "0.0"), (0, "0.0"), (False, "0.0")]),
    ("int", 3, [(None, "3"), (3, "3"), (4, "4")]),
]


def _default_kind_op(decorate: Any, annotation: str, default: Any) -> Any:
    got: List[str] = []
    kernel = _with_real_annotations(
        f"def kernel(x: torch.Tensor, a: {annotation} = {default!r}) -> torch.Tensor:\n"
        "    got.append(repr(a))\n"
        "    return x.clone()\n"
    )
    kernel.__globals__["got"] = got
    return decorate(kernel), got


def _kernel_got(op: Any, got: List[str], value: Any, requires_grad: bool) -> str:
    x = torch.ones(1, requires_grad=requires_grad)
    got.clear()
    op(x) if value is None else op(x, value)
    return got[-1]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("annotation, default, calls", DEFAULT_KINDS)
def test_an_argument_equal_to_a_default_of_another_kind_reaches_the_kernel(
    tier, annotation, default, calls
):
    """``n: int = True`` given ``1``: the kernel gets ``1`` (compatfn before: ``True``, the
    default). Where torch has its own custom_op, it must agree with the recorded table."""
    op, got = _default_kind_op(make(tier, "kinds"), annotation, default)
    reference = None
    if tier == "torch":  # torch's own op, side by side
        own = torch.library.custom_op(f"{fresh('own')}::kinds", mutates_args=())
        reference = _default_kind_op(own, annotation, default)
    for value, expected in calls:
        for requires_grad in (False, True):
            assert _kernel_got(op, got, value, requires_grad) == expected, (value, requires_grad)
            if reference is not None:
                assert _kernel_got(*reference, value, requires_grad) == expected


_add_self = _with_real_annotations(
    "def kernel(x: torch.Tensor, self: torch.Tensor) -> torch.Tensor:\n    return x + self\n"
)
_mutate = _with_real_annotations(
    "def kernel(x: torch.Tensor, y: torch.Tensor) -> None:\n    y.add_(x)\n"
)


SELF_KEYWORD_CALLS = {
    "parameter named self": (_add_self, (), lambda op: op(torch.ones(2), self=torch.ones(2))),
    "given twice": (_add_self, (), lambda op: op(torch.ones(2), torch.ones(2), self=1)),
    "no such parameter": (_add_self, (), lambda op: op(x=torch.ones(2), y=1, self=1)),
    "an op that mutates": (_mutate, ("y",), lambda op: op(torch.ones(2), y=torch.ones(2), self=1)),
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", sorted(SELF_KEYWORD_CALLS))
def test_a_keyword_named_self_is_torchs_type_error(tier, case):
    """torch's op is called through ``CustomOpDef.__call__(self, *args, **kwargs)``: a keyword
    ``self`` is Python's TypeError there (compatfn before: the call bound it to a parameter named
    ``self``, or raised the dispatcher's error)."""
    fn, mutates, call = SELF_KEYWORD_CALLS[case]
    for decorate in side_by_side(tier, "selfish", mutates_args=mutates):
        with pytest.raises(TypeError) as info:
            call(decorate(fn))
        assert str(info.value) == "CustomOpDef.__call__() got multiple values for argument 'self'"


def normalise_namespace(text: str) -> str:
    return re.sub(r"\bcft_\w+::", "NS::", text)


def _listing_op(decorate: Any, seen: Dict[str, Any]) -> Any:
    kernel = _with_real_annotations(
        "from typing import List, Optional\n"
        "def kernel(x: torch.Tensor, ts: List[torch.Tensor], o: Optional[torch.Tensor] = None,\n"
        "           ints: Optional[List[int]] = None) -> torch.Tensor:\n"
        "    seen.update(ts=ts, o=o, ints=ints)\n"
        "    return x.clone()\n"
    )
    kernel.__globals__["seen"] = seen
    return decorate(kernel)


def _generator() -> Any:
    return (t for t in [torch.ones(1)])


# What each call hands the kernel (``ts``, ``ints``), or torch's error (its first line), recorded
# from torch 2.13's own custom_op (See NOTE: [what the dispatcher takes for a list]).
X = torch.ones(2)
LIST_ARGUMENTS = {
    "a tuple for Tensor[]": ((X, (X,)), ("ok", "list", None)),
    "a generator for Tensor[]": ((X, _generator), ("ok", "list", None)),
    "a tensor for Tensor[]": ((X, X), ("List[Tensor]", "ts", "Tensor")),
    "[None] for Tensor[]": ((X, [None]), ("List[Tensor]", "ts", "list")),
    "a list iterator for Tensor[]": (
        (X, lambda: iter([X])),
        ("List[Tensor]", "ts", "list_iterator"),
    ),
    "a dict for Tensor[]": ((X, {X: 1}), ("List[Tensor]", "ts", "dict")),
    "[x] for Tensor?": ((X, [X], [X]), ("Optional[Tensor]", "o", "list")),
    "an int vector for int[]": ((X, [X], None, torch.tensor([0, 1])), ("ok", "list", [0, 1])),
    "a float vector for int[]": (
        (X, [X], None, torch.tensor([0.0])),
        ("Optional[List[int]]", "ints", "Tensor"),
    ),
    "a 0-d int tensor for int[]": (
        (X, [X], None, torch.tensor(3)),
        ("Optional[List[int]]", "ints", "Tensor"),
    ),
    "a range for int[]": ((X, [X], None, range(2)), ("ok", "list", [0, 1])),
    "[1.5] for int[]": ((X, [X], None, [1.5]), ("Optional[List[int]]", "ints", "list")),
}


def _list_outcome(decorate: Any, args: tuple) -> tuple:
    """("ok", the type of ``ts`` the kernel got, ``ints``) or the error's (type shown, argument,
    type found)."""
    seen: Dict[str, Any] = {}
    op = _listing_op(decorate, seen)
    try:
        op(*[a() if callable(a) else a for a in args])
    except RuntimeError as e:
        found = re.match(
            r".*Expected a value of type '(.*)' for argument '(\w+)' but instead found type "
            r"'(\w+)'\.",
            str(e).split("\n")[0],
        )
        assert found, e
        return found.groups()
    return ("ok", type(seen["ts"]).__name__, seen["ints"])


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", sorted(LIST_ARGUMENTS))
def test_list_and_optional_tensor_arguments_are_taken_as_the_dispatcher_takes_them(tier, case):
    """torch 1.8-2.3 before: a tensor for ``Tensor[]`` reached the kernel as its slices, ``[None]``
    and ``[x]`` for ``Tensor?`` reached it as they were, a generator and an int vector were
    refused. The older tiers follow the table (torch 2.13's); on the torch tier, torch's own op
    runs side by side and must agree (torch 2.4's takes a float vector and refuses a generator)."""
    args, expected = LIST_ARGUMENTS[case]
    got = _list_outcome(make(tier, "listing"), args)
    if tier == "torch":
        own = torch.library.custom_op(f"{fresh('own')}::listing", mutates_args=())
        assert got == _list_outcome(own, args)
    else:
        assert got == expected


@pytest.mark.parametrize("tier", TIERS)
def test_a_wrong_argument_type_error_has_torchs_detail_lines(tier):
    """torch's message goes on after its first line with the position, the value, the
    declaration and pybind11's cast error (compatfn before: the first line alone)."""
    messages = []
    for decorate in side_by_side(tier, "detailed"):
        op = _listing_op(decorate, {})
        for args in ((X, [X], None, [1.5]), (X, [X], [X]), (2.5, [X])):
            with pytest.raises(RuntimeError) as info:
                op(*args)
            messages.append(normalise_namespace(str(info.value)))
    declaration = messages[0].split("\n")[3]
    assert messages[:3] == [
        "NS::detailed() Expected a value of type 'Optional[List[int]]' for argument 'ints' but "
        "instead found type 'list'.\nPosition: 3\nValue: [1.5]\n" + declaration + "\nCast error "
        "details: Unable to cast Python instance of type <class 'float'> to C++ type '?' "
        "(#define PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug mode for details)",
        "NS::detailed() Expected a value of type 'Optional[Tensor]' for argument 'o' but instead "
        "found type 'list'.\nPosition: 2\nValue: [tensor([1., 1.])]\n" + declaration + "\nCast "
        "error details: Unable to cast [tensor([1., 1.])] to Tensor",
        "NS::detailed() Expected a value of type 'Tensor' for argument 'x' but instead found type "
        "'float'.\nPosition: 0\nValue: 2.5\n" + declaration + "\nCast error details: Unable to "
        "cast 2.5 to Tensor",
    ]
    assert declaration.startswith("Declaration: NS::detailed(Tensor x, Tensor[] ts, Tensor? o=None")
    if tier == "torch":  # torch's own op, side by side
        assert messages[3:] == messages[:3]


#: A schema's float defaults as torch 2.13 prints them (``str(torch._C.parse_schema(...))``).
_FLOATS_WRITTEN = (
    "(Tensor x, float a=1.0, float e=1e-05, float big=1e+20, float neg=-2.0, float h=0.1, "
    'str s="1.0", int n=2, float[] l=[1.0, 2.5], float m=123456789012345678.0, float nz=-0.0) '
    "-> Tensor"
)
_FLOATS_PRINTED = (
    "(Tensor x, float a=1., float e=1.0000000000000001e-05, float big=1e+20, float neg=-2., float "
    'h=0.10000000000000001, str s="1.0", int n=2, float[] l=[1., 2.5], float m=123456789012345680.,'
    " float nz=0.) -> Tensor"
)


def test_wrong_call_messages_print_float_defaults_as_torch():
    """The function tier's wrong-call messages (no operator to word them) print the schema's
    float defaults as torch does (before: as Python writes them, ``1.0`` for torch's ``1.``)."""
    from compatfn.library._call_errors import floats_as_torch_prints

    assert floats_as_torch_prints(_FLOATS_WRITTEN) == _FLOATS_PRINTED

    def scaled(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
        return x * alpha

    op = make("function", "scaled")(scaled)
    with pytest.raises(
        RuntimeError, match=r"Declaration: \S+::scaled\(.*float alpha=1\.\) -> Tensor"
    ):
        op(torch.ones(1))
