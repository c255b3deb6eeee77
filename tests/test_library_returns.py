"""A kernel's non-tensor output converted to the schema's returns as torch converts it
(``_returns``; See NOTE: [non-tensor returns]), on every tier, against torch's own custom_op:
side by side on the torch tier, else the outcomes recorded from torch 2.13
(``tests/data/custom_op_returns.json``; regenerate with ``python tests/test_library_returns.py
--record`` on the newest torch)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch

from library_support import TIERS, fresh, make

_RECORDED = Path(__file__).parent / "data" / "custom_op_returns.json"
_ANNOTATIONS = [
    "int",
    "float",
    "bool",
    "torch.types.Number",
    "None",
    "Tuple[torch.Tensor, int]",
    "Tuple[torch.Tensor]",
    "Tuple[List[torch.Tensor], int]",
    "Tuple[torch.Tensor, List[torch.Tensor]]",
]


def _values() -> Dict[str, Any]:
    """What the kernels return: numbers, numpy scalars, tensors, None and other objects."""
    import numpy as np

    t = torch.tensor
    return {
        "1": 1,
        "True": True,
        "1.5": 1.5,
        "2.0": 2.0,
        "2**70": 2**70,
        "None": None,
        "'a'": "a",
        "'5'": "5",
        "tensor(3)": t(3),
        "tensor(1.5)": t(1.5),
        "tensor(True)": t(True),
        "ones(2)": torch.ones(2),
        "np.int64(4)": np.int64(4),
        "np.float64(2.5)": np.float64(2.5),
        "1j": 1j,
        "[1]": [1],
        "(ones(1), 2.0)": (torch.ones(1), 2.0),
        "[ones(1), True]": [torch.ones(1), True],
        "((ones(1), ones(1)), 2)": ((torch.ones(1), torch.ones(1)), 2),
        "([ones(1), None], 2)": ([torch.ones(1), None], 2),
        "(ones(1), [ones(1)])": (torch.ones(1), [torch.ones(1)]),
        "(ones(1), (ones(1),))": (torch.ones(1), (torch.ones(1),)),
        "(set(), 2)": (set(), 2),
        "(range(0), 2)": (range(0), 2),
        # sequences of another length than the returns (See NOTE: [two or more returns,
        # converted twice] in _returns)
        "[ones(1)]": [torch.ones(1)],
        "[[ones(1), ones(1)]]": [[torch.ones(1), torch.ones(1)]],
        "[[ones(1), 2]]": [[torch.ones(1), 2]],
        "[[ones(1)]]": [[torch.ones(1)]],
        "[[]]": [[]],
        "[]": [],
        # (a longer sequence, [ones(1), 2, 3] for (Tensor, int), crashes torch 2.13: no oracle)
    }


def _outcomes(define: Callable[[str, Callable], Any]) -> Dict[str, str]:
    """``annotation | value`` -> what a call of the op returning it gives (its type and value, or
    the error's type and first line, namespace normalised)."""
    found = {}
    for annotation in _ANNOTATIONS:
        for label, value in _values().items():
            scope: Dict[str, Any] = {"torch": torch, "value": value}
            source = (
                "from typing import List, Tuple\n"
                f"def kernel(x: torch.Tensor) -> {annotation}:\n    return value\n"
            )
            # Real annotations: not this module's ``from __future__ import annotations``.
            exec(compile(source, "<kernel>", "exec", dont_inherit=True), scope)
            name = fresh("returns")
            try:
                out = define(f"{name}::op", scope["kernel"])(torch.ones(1))
                result = f"{type(out).__name__}: {out!r}"
            except Exception as error:
                first = str(error).splitlines()[0] if str(error) else ""
                result = f"{type(error).__name__}: {first}".replace(name, "NS")
            found[f"{annotation} | {label}"] = result
    return found


def _torch_own(qualname: str, fn: Callable) -> Any:
    return torch.library.custom_op(qualname, fn, mutates_args=())


def _expected(tier: str) -> Dict[str, str]:
    """The torch tier's oracle is this torch's own op; compatfn's own tiers answer as torch 2.13
    does on every torch (torch 2.15's own op hands on what a ``-> None`` kernel returns)."""
    if tier == "torch":
        return _outcomes(_torch_own)
    return json.loads(_RECORDED.read_text())["outcomes"]


@pytest.mark.parametrize("tier", TIERS)
def test_non_tensor_returns_convert_as_torchs(tier):
    """int, float, bool, Scalar, nothing, a (Tensor, int) tuple and tuples with a tensor list:
    each value converted as torch converts it, or torch's error (compatfn's tiers before: the
    value as returned)."""
    pytest.importorskip("numpy")
    got = _outcomes(lambda qualname, fn: make(tier, "op", qualname=qualname)(fn))
    expected = _expected(tier)
    different = {k: (got[k], expected[k]) for k in expected if got.get(k) != expected[k]}
    assert not different, json.dumps(different, indent=1)


#: What a kernel may return for the tensor list of ``Tuple[List[Tensor], int]``: whether torch
#: 2.13's own op takes it (as a list) or refuses it.
_LIST_RETURNS = {
    "a generator": ("(t for t in [x * 2])", True),
    "a map": ("map(lambda t: t * 2, [x])", True),
    "an iterator over a list": ("iter([x * 2])", False),
    "a dict": ("{x: x}", False),
    "a string": ("'ab'", False),
    "a tensor": ("x * 2", False),
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("returns", ["Tensor[]", "(Tensor[])"])
def test_a_tensor_list_return_written_in_parentheses_records_gradients(tier, returns):
    """``schema=`` may write a lone list return in parentheses, which torch reads as the list
    (its own op returns a list whose tensors record the gradient, measured on 2.13); compatfn's
    tiers before: the list's tensors came back without a grad_fn."""

    def kernel(x):
        return [x * 2, x * 3]

    def backward(ctx, grads):  # one list of gradients for the list, as torch gives it
        return grads[0] * 2 + grads[1] * 3

    op = make(tier, "listed", schema=f"(Tensor x) -> {returns}")(kernel)
    op.register_autograd(backward)
    x = torch.ones(2, requires_grad=True)
    out = op(x)
    assert type(out) is list and all(t.grad_fn is not None for t in out)
    (out[0] + out[1]).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [5.0, 5.0]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("what", sorted(_LIST_RETURNS))
def test_a_tensor_list_among_returns_takes_what_torch_takes(tier, what):
    """compatfn's tiers before: any value as it was returned."""
    body, taken = _LIST_RETURNS[what]
    scope: Dict[str, Any] = {"torch": torch}
    source = (
        "from typing import List, Tuple\n"
        "def kernel(x: torch.Tensor) -> Tuple[List[torch.Tensor], int]:\n"
        f"    return {body}, 3\n"
    )
    exec(compile(source, "<kernel>", "exec", dont_inherit=True), scope)
    op = make(tier, "list_return")(scope["kernel"])
    if (
        tier == "torch"
    ):  # the running torch's own op (torch 2.4 takes neither a generator nor a map)
        own = torch.library.custom_op(f"{fresh('own')}::list_return", mutates_args=())
        try:
            own(scope["kernel"])(torch.ones(1))
        except RuntimeError:
            taken = False
        else:
            taken = True
    if not taken:
        with pytest.raises(RuntimeError, match="Unable to cast Python instance of type"):
            op(torch.ones(1))
        return
    tensors, count = op(torch.ones(1))
    assert type(tensors) is list and tensors[0].tolist() == [2.0] and count == 3


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    payload = {"torch": torch.__version__, "outcomes": _outcomes(_torch_own)}
    _RECORDED.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"{_RECORDED}: {len(payload['outcomes'])} outcomes from torch {torch.__version__}")


_RETURNED: Dict[str, Any] = {}


def _list_returning(x: torch.Tensor) -> List[torch.Tensor]:
    return _RETURNED["list"](x)


def _pair_returning(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    return _RETURNED["pair"](x)


_PYBIND = "Unable to cast Python instance of type <class '{}'> to C++ type"


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize(
    "kind, returned, expected",
    [
        ("list", lambda x: x * 2, (RuntimeError, _PYBIND.format("torch.Tensor"))),
        ("list", lambda x: 3, (RuntimeError, _PYBIND.format("int"))),
        ("list", lambda x: [1], (RuntimeError, _PYBIND.format("list"))),
        ("list", lambda x: (x * 2, 2), (RuntimeError, _PYBIND.format("tuple"))),
        ("list", lambda x: (t for t in [x * 2, x * 3]), 2),
        ("pair", lambda x: (x * 2, 2, 2.5), (RuntimeError, "Unable to cast 2 to Tensor")),
        ("pair", lambda x: (), (TypeError, "'NoneType' is not an instance of 'sequence'")),
        ("pair", lambda x: [], (TypeError, "'NoneType' is not an instance of 'sequence'")),
    ],
)
def test_returns_convert_as_torch_2_13s_own_op(tier, grad, kind, returned, expected):
    """A ``Tensor[]`` return alone, and a tuple of two with the wrong length, as torch 2.13's own
    op hands them on (recorded there; compatfn's tiers handed them on unchecked; found by
    hostile probes)."""
    _RETURNED[kind] = returned
    op = make(tier, f"returns_{kind}")(_list_returning if kind == "list" else _pair_returning)
    x = torch.ones(2, requires_grad=grad)
    if isinstance(expected, int):
        out = op(x)
        assert type(out) is list and len(out) == expected
        return
    error, message = expected
    with pytest.raises(error, match=re.escape(message)):
        op(x)
