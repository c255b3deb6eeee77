"""``compatfn.library._scalars`` and the list reading of ``_convert``: what reaches a kernel for a
``torch.types.Number`` (``Scalar``) and for the lists torch reads itself (``SymInt[]``,
``Scalar[]``), recorded from torch 2.13's own custom_op (See NOTE: [what the dispatcher takes for
a number] and NOTE: [what the dispatcher takes for a list]). The torch tier is torch's own op:
there each row holds where torch 2.4 and 2.13 agree."""

from __future__ import annotations

import fractions
from typing import Any, List

import pytest
import torch
from torch.types import Number

from library_support import TIERS, make

np = pytest.importorskip("numpy")

#: torch 2.13's own op: (value given for a Number, what its kernel gets: a repr, or the start of
#: the error's last line, or an error type).
NUMBERS = [
    (True, "True"),
    (3, "3"),
    (2.5, "2.5"),
    (1 + 2j, "(1+2j)"),
    (np.float64(1.5), "1.5"),  # a float subclass: a float
    (np.int64(3), "Cast error details: Cannot cast 3 to number"),
    (np.bool_(True), "Cast error details: Cannot cast True to number"),
    (np.complex128(1j), "Cast error details: Cannot cast 1j to number"),
    (fractions.Fraction(1, 2), "Cast error details: Cannot cast 1/2 to number"),
    (torch.tensor(2.0), "Cast error details: Cannot cast tensor(2.) to number"),
    ("abc", "Cast error details: Cannot cast abc to number"),
    (torch.float64, "7"),  # its c10 number
    (torch.sparse_coo, "1"),
    (-(2**63), "-9223372036854775808"),
]
#: torch 2.13 only (torch 2.4 refuses ints beyond int64 with a RuntimeError).
BIG_INTS = [
    (2**64 - 1, "18446744073709551615"),
    (2**64, OverflowError),
    (-(2**63) - 1, OverflowError),
]
OLDER_TIERS = [t for t in TIERS if t != "torch"]


def _kernel_gets(tier: str, annotation: Any, value: Any) -> Any:
    got: List[Any] = []

    def kernel(x: torch.Tensor, a: Any) -> torch.Tensor:
        got.append(a)
        return x.clone()

    # Objects, not this module's strings (``from __future__ import annotations``).
    kernel.__annotations__ = {"x": torch.Tensor, "a": annotation, "return": torch.Tensor}
    scalar = make(tier, "scalar")(kernel)
    try:
        scalar(torch.ones(1), value)
    except RuntimeError as exc:
        return str(exc).splitlines()[-1]
    except OverflowError:
        return OverflowError
    return repr(got[0]) if annotation is Number else got[0]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("value, expected", NUMBERS)
def test_a_number_reaches_the_kernel_as_torch_hands_it(tier: str, value: Any, expected: Any):
    assert _kernel_gets(tier, Number, value) == expected


@pytest.mark.parametrize("tier", OLDER_TIERS)
@pytest.mark.parametrize("value, expected", BIG_INTS)
def test_an_int_beyond_int64_for_a_number_is_taken_as_torch_213_takes_it(
    tier: str, value: Any, expected: Any
):
    assert _kernel_gets(tier, Number, value) == expected


#: (annotation, value (a function making it, for a generator), what torch 2.13's kernel gets or
#: the last line of its error).
LISTS = [
    (List[int], {1: 2}, [1]),  # a dict's keys
    (List[int], {3}, [3]),
    (List[int], b"ab", [97, 98]),
    (List[int], lambda: (i for i in (1, 2)), []),  # read twice: empty the second time
    (List[int], 3, " Python error details: TypeError: 'int' object is not iterable"),
    (List[Number], lambda: (i for i in (1, 2.5)), [1, 2.5]),
    (List[Number], "ab", "Cast error details: Cannot cast a to number"),
    (List[Number], 3, " Python error details: TypeError: 'int' object is not iterable"),
    (List[Number], torch.tensor([1, 2]), "Cast error details: Cannot cast tensor(1) to number"),
]
_NO_VECTOR = "Cast error details: Unable to cast Python instance of type <class '{}'> to C++ type"
#: torch 2.13 only (pybind11 3; torch 2.4's takes sequences only): a ``float[]`` or ``bool[]``.
VECTORS = [
    (List[float], {1, 2}, [1.0, 2.0]),
    (List[float], lambda: (i for i in (1, 2)), [1.0, 2.0]),
    (List[float], lambda: map(float, [3]), [3.0]),
    (List[bool], {1: 2}.keys(), [True]),
    (List[float], {1: 2}, _NO_VECTOR.format("dict")),
    (List[float], lambda: iter([1.0]), _NO_VECTOR.format("list_iterator")),
    (List[float], b"ab", _NO_VECTOR.format("bytes")),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("annotation, value, expected", LISTS)
def test_a_list_torch_reads_itself_is_any_iterable(
    tier: str, annotation: Any, value: Any, expected: Any
):
    value = value() if callable(value) else value
    assert _kernel_gets(tier, annotation, value) == expected


@pytest.mark.parametrize("tier", OLDER_TIERS)
@pytest.mark.parametrize("annotation, value, expected", VECTORS)
def test_a_float_or_bool_list_is_what_pybind11_3_takes(
    tier: str, annotation: Any, value: Any, expected: Any
):
    value = value() if callable(value) else value
    got = _kernel_gets(tier, annotation, value)
    assert got == expected or (isinstance(got, str) and got.startswith(expected))
