"""Schema inference, as torch's ``infer_schema``."""

from __future__ import annotations

import typing
from typing import Optional, Sequence

import pytest
import torch
from torch.types import Number

from compatfn import library
from compatfn.library import _facts
from library_support import TIERS, make


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
    assert schema == expected.replace("SymInt", _facts.int_type())
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
