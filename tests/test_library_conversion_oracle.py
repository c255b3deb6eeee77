"""The conversion oracle (``library_conversion_oracle``): every schema argument type against a
pool of values, called by position, by keyword and with an input requiring grad, on compatfn's
own tiers, compared with what torch 2.13's own ``torch.library.custom_op`` did (recorded in
``tests/data/conversion_oracle.json``). On the ``torch`` tier the op is torch's own: there the
conversion is torch's, whatever its version."""

from __future__ import annotations

import functools
import re
from typing import Any, Dict, List, Tuple

import pytest
import torch

import library_conversion_oracle as oracle
from compatfn.library import _custom_op
from library_support import TIERS

OWN_TIERS = [t for t in TIERS if t != "torch"]

#: Where torch 2.13's own op does something compatfn's tiers do not copy, by (type, value):
#: torch's error for a ScalarType number outside c10's names a layout it made of the number;
#: torch fails an internal assertion for a bool tensor in a SymInt[] (compatfn raises torch's
#: "Expected a value of type" error); for bytes that are not UTF-8 given for a device, torch's
#: UnicodeDecodeError is about its own message holding them. Both are errors of the same type.
KNOWN = {
    ("Device", "bad_bytes"),
    ("Device?", "bad_bytes"),
    ("ScalarType", "neg_int"),
    ("ScalarType", "int64_max"),
    ("ScalarType?", "neg_int"),
    ("ScalarType?", "int64_max"),
    ("SymInt[]", "list:tensor0_bool"),
    ("SymInt[]?", "list:tensor0_bool"),
    ("SymInt[2]", "list:tensor0_bool"),
}

_DECLARATION = re.compile(r"\nDeclaration: [^\n]*")


@functools.lru_cache(maxsize=None)
def _prints_schemas_as_torch_2_13() -> bool:
    """Whether this torch prints ``SymInt`` and ``ScalarType`` arguments by those names (torch
    1.8 prints both as ``int``): else the Declaration lines of errors are left out of the
    comparison (See library_conversion_oracle.environment_free)."""
    schema = "f(SymInt a, ScalarType b) -> Tensor"
    try:
        printed = str(torch._C.parse_schema(schema))
    except RuntimeError:  # no SymInt (torch < 1.13)
        return False
    return printed.endswith("(SymInt a, ScalarType b) -> Tensor")


def _comparable(outcome: Any) -> Any:
    if outcome[0] == "error" and not _prints_schemas_as_torch_2_13():
        return [*outcome[:2], _DECLARATION.sub("", outcome[2])]
    return outcome


@pytest.fixture(scope="module")
def recorded() -> Dict[str, Dict[str, Any]]:
    return oracle.recorded()[1]


def _differences(tier: str, recorded: Dict[str, Dict[str, Any]]) -> List[Tuple[str, str]]:
    def define(qualname: str, kernel: Any, schema: str) -> Any:
        return _custom_op(qualname, kernel, (), None, schema, tier, None)

    found = []
    ours = oracle.outcomes(define, f"cfconv_{tier}")
    pool = oracle.values()
    for schema_type, cases in recorded.items():
        for key, expected in cases.items():
            if key.partition("|")[0] not in pool:  # numpy's values, without numpy
                continue
            got = ours[schema_type].get(key)
            if got is not None and _comparable(got) == _comparable(expected):
                continue
            name = key.partition("|")[0]
            if (schema_type, name) in KNOWN and got and got[:2] == expected[:2]:
                continue
            found.append((f"{schema_type} {key}", f"torch: {expected}\n    ours:  {got}"))
    return found


@pytest.mark.parametrize("tier", OWN_TIERS)
def test_every_argument_converts_as_torchs_own_op(tier, recorded):
    differences = _differences(tier, recorded)
    shown = "\n".join(f"{case}:\n    {detail}" for case, detail in differences[:10])
    assert not differences, f"{len(differences)} differences, the first:\n{shown}"


def test_the_recorded_pool_is_the_pool(recorded):
    """The stored outcomes cover every type and value of the pool, in every call style."""
    keys = {f"{name}|{style}" for name in oracle.values() for style in oracle.CALLS}
    assert set(recorded) == set(oracle.TYPES)
    for schema_type, cases in recorded.items():
        assert keys <= set(cases), schema_type


def test_numpy_values_are_in_the_pool():
    """With numpy installed, its scalars and arrays are compared too (without it, no caller can
    pass them, and the comparison leaves them out)."""
    pytest.importorskip("numpy")
    assert {"np_int64", "np_bool", "np_array0"} <= set(oracle.values())


@pytest.mark.parametrize("tier", OWN_TIERS)
def test_an_empty_list_reaches_the_kernel_with_an_input_requiring_grad(tier):
    """Regression (found by a hostile probe): compatfn's autograd call spliced every empty list
    into its inputs as a tensor list, so a kernel lost an ``int[]`` given ``[]``."""
    got: List[Any] = []

    def kernel(x: torch.Tensor, n: List[int], k: int) -> torch.Tensor:
        got.append((n, k))
        return x.clone()

    op = _custom_op(f"cfconv_regression_{tier}::f", kernel, (), None, None, tier, None)
    op(torch.ones(2, requires_grad=True), [], 1)
    assert got == [([], 1)]
