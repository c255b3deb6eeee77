"""The conversion oracle of ``compatfn.custom_op``: every argument type of a schema against a pool
of values (plain ones, subclasses, numpy scalars, objects with ``__index__``/``__float__``/
``__bool__``, bytes, tensors, iterables of each of them), each called by position, by keyword
and with an input requiring grad, and what reaches the kernel (or the error) recorded from torch's
own ``torch.library.custom_op`` (imported as a top-level module by
``tests/test_library_conversion_oracle.py``). The domain is finite, so it is enumerated, not
sampled: every type with every value and every list built from the pool's scalars.

Regenerate the stored outcomes with ``nox -s custom-op-oracle`` (it records both oracles), or in
an environment with the torch ``tools/sessions.py`` names::

    PYTHONPATH=src:tests python tests/library_conversion_oracle.py --record
"""

from __future__ import annotations

import contextlib
import decimal
import enum
import fractions
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import torch

try:
    import numpy as np
except ImportError:  # pragma: no cover - the rows install numpy
    np = None

#: Where the outcomes of torch's own op are stored.
RECORDED = Path(__file__).parent / "data" / "conversion_oracle.json"

#: The schema types of the parameter ``a`` (after a tensor ``x``), each given in ``schema=``.
TYPES = [
    "int",
    "SymInt",
    "float",
    "bool",
    "str",
    "Scalar",
    "ScalarType",
    "Device",
    "int?",
    "float?",
    "bool?",
    "str?",
    "Scalar?",
    "ScalarType?",
    "Device?",
    "int[]",
    "SymInt[]",
    "float[]",
    "bool[]",
    "Scalar[]",
    "int[]?",
    "SymInt[]?",
    "float[]?",
    "int[2]",
    "int[3]?",
    "SymInt[2]",
    "float[2]",
    "bool[2]",
    "Scalar[2]",
    "complex",
    "complex?",
    "Tensor?",
    "Tensor[]",
    "Tensor?[]",
]
CALLS = ["pos", "kw", "grad"]


class Index:
    def __index__(self) -> int:
        return 4


class Integer:
    def __int__(self) -> int:
        return 5


class Floating:
    def __float__(self) -> float:
        return 2.5


class Truth:
    def __bool__(self) -> bool:
        return True


class Complexish:
    def __complex__(self) -> complex:
        return 1j


class IntSub(int):
    pass


class FloatSub(float):
    pass


class StrSub(str):
    pass


class Color(enum.IntEnum):
    RED = 1


#: The pool's scalars: name -> a maker of a fresh value.
SCALAR_VALUES: Dict[str, Callable[[], Any]] = {
    "none": lambda: None,
    "true": lambda: True,
    "false": lambda: False,
    "int": lambda: 3,
    "zero": lambda: 0,
    "neg_int": lambda: -2,
    "int64_max": lambda: 2**63 - 1,
    "int64_over": lambda: 2**63,
    "uint64_over": lambda: 2**64,
    "int64_under": lambda: -(2**63) - 1,
    "huge_int": lambda: 10**400,
    "float": lambda: 2.5,
    "neg_zero": lambda: -0.0,
    "integral_float": lambda: 3.0,
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "complex": lambda: 1 + 2j,
    "int_sub": lambda: IntSub(7),
    "float_sub": lambda: FloatSub(1.5),
    "int_enum": lambda: Color.RED,
    "index_obj": Index,
    "int_obj": Integer,
    "float_obj": Floating,
    "bool_obj": Truth,
    "complex_obj": Complexish,
    "fraction": lambda: fractions.Fraction(1, 2),
    "decimal": lambda: decimal.Decimal("1.5"),
    "str": lambda: "abc",
    "empty_str": lambda: "",
    "digit_str": lambda: "12",
    "device_str": lambda: "cpu",
    "bad_device_str": lambda: "nodevice",
    "non_ascii": lambda: "é",
    "surrogate": lambda: "\ud800",
    "str_sub": lambda: StrSub("s"),
    "bytes": lambda: b"ab",
    "bad_bytes": lambda: b"\xff",
    "bytearray": lambda: bytearray(b"ab"),
    "dtype": lambda: torch.float64,
    "device": lambda: torch.device("cpu"),
    "layout": lambda: torch.strided,
    "memory_format": lambda: torch.contiguous_format,
    "tensor0_int": lambda: torch.tensor(2),
    "tensor0_float": lambda: torch.tensor(1.5),
    "tensor0_bool": lambda: torch.tensor(True),
    "tensor1_float": lambda: torch.tensor([1.5]),
    "tensor2_float": lambda: torch.tensor([1.0, 2.0]),
    "tensor1d_int": lambda: torch.tensor([1, 2]),
    "tensor0_grad": lambda: torch.tensor(1.5, requires_grad=True),
    "object": object,
}
if np is not None:
    SCALAR_VALUES.update(
        {
            "np_int64": lambda: np.int64(4),
            "np_int32": lambda: np.int32(4),
            "np_float64": lambda: np.float64(2.5),
            "np_float32": lambda: np.float32(2.5),
            "np_bool": lambda: np.bool_(True),
            "np_str": lambda: np.str_("d"),
            "np_array": lambda: np.array([1, 2]),
            "np_array0": lambda: np.array(3),
        }
    )

#: Containers: name -> a maker of a fresh container of the given items.
CONTAINERS: Dict[str, Callable[[List[Any]], Any]] = {
    "list": list,
    "tuple": tuple,
    "generator": lambda items: (i for i in items),
    "iterator": iter,
    "set": lambda items: set(items),
    "dict_keys": lambda items: dict.fromkeys(items).keys(),
    "map": lambda items: map(lambda i: i, items),
    "range": lambda items: range(len(items)),
}
#: The items of the containers: one or two of the pool's scalars.
_HASHABLE_SKIPPED = ("tensor", "np_array", "bytearray")


def values() -> Dict[str, Callable[[], Any]]:
    """Every value of the pool by name: the scalars, an empty list, every scalar in a list, and
    each container of a few fixed items."""
    found = dict(SCALAR_VALUES)
    found["list:"] = lambda: []
    found["tuple:"] = lambda: ()
    for name, make in SCALAR_VALUES.items():
        found[f"list:{name}"] = lambda make=make: [make()]
    for container, build in CONTAINERS.items():
        for items in ("int,int", "float,int", "tensor0_float,tensor0_float", "true,false"):
            makers = [SCALAR_VALUES[i] for i in items.split(",")]
            found[f"{container}:{items}"] = lambda build=build, makers=makers: build(
                [m() for m in makers]
            )
    found["list:tensor1_float,none"] = lambda: [torch.tensor([1.5]), None]
    found["tuple:tensor1_float"] = lambda: (torch.tensor([1.5]),)
    return found


def describe(value: Any) -> Any:
    """A JSON-able description of what a kernel got: type and value, lists item by item."""
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [describe(v) for v in value]]
    if isinstance(value, torch.Tensor):
        return ["Tensor", str(value.dtype), list(value.shape), value.tolist()]
    if isinstance(value, float):
        return [type(value).__name__, repr(value)]
    text = repr(value)
    if " at 0x" in text:
        text = "<object>"
    return [type(value).__name__, text]


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
#: The end of pybind11's cast errors (the same in every one of them).
_PYBIND_DETAILS = " (#define PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug mode for details)"


def normalise(message: str, namespace: str, value: Any) -> str:
    """An error message without the namespace, object addresses, the value's repr (numpy's
    differs between its versions) and a Python traceback (its paths)."""
    message = message.split("\n\nAt:\n")[0].replace(namespace, "ns")
    message = message.replace(_PYBIND_DETAILS, " <pybind11>")
    message = re.sub(r"ns::conv\d+", "ns::op", message)
    with contextlib.suppress(Exception):  # a value whose repr fails
        message = message.replace(f"Value: {value!r}\n", "Value: <repr>\n")
    return environment_free(_ADDRESS.sub(" at 0x?", message))


def environment_free(message: str) -> str:
    """``message`` without what depends on the versions installed beside compatfn, not on it:
    numpy 2's scalar reprs (``np.int64(4)``) and type name ``numpy.bool`` (numpy 1: ``4``,
    ``numpy.bool_``), ``str()`` of an IntEnum member (Python 3.11 changed it), the device types a
    torch knows, torch 1.8's declaration printer (``-> (Tensor)``)."""
    message = re.sub(r"np\.\w+\(([^()]*)\)", r"\1", message).replace("numpy.bool_", "numpy.bool")
    message = re.sub(
        r"Expected one of .*? device type", "Expected one of <devices> device type", message
    )
    message = message.replace("'bool_'", "'bool'")  # numpy 1's np.bool_
    message = message.replace("cast Color.RED ", "cast 1 ")  # str() of an IntEnum before 3.11
    message = message.replace("np.True_", "True").replace("np.False_", "False")
    return message.replace("-> (Tensor)", "-> Tensor")


def make_kernel(got: List[Any]) -> Callable:
    def kernel(x: torch.Tensor, a: Any) -> torch.Tensor:
        got.append(a)
        return x.clone()

    return kernel


def register_autograd(op: Any, got: List[Any]) -> None:
    """A formula whose setup_context records the argument it gets (after the kernel's)."""

    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
        got.append(inputs[1])

    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        return grad, None

    op.register_autograd(backward, setup_context=setup_context)


def call(op: Any, style: str, value: Any, got: List[Any], namespace: str) -> Any:
    """What ``op`` called in ``style`` with ``value`` gives: ``["ok", calls, what the kernel (and
    setup_context, with an input requiring grad) got]`` or ``["error", type, message]``."""
    got.clear()
    x = torch.ones(2, requires_grad=style == "grad")
    try:
        if style == "kw":
            op(x, a=value)
        else:
            op(x, value)
    except Exception as exc:  # every error is an outcome
        return ["error", type(exc).__name__, normalise(str(exc), namespace, value)]
    return ["ok", len(got), [describe(v) for v in got]]


def outcomes(
    define: Callable[[str, Callable, str], Any], namespace: str
) -> Dict[str, Dict[str, Any]]:
    """``{type: {"value|style": outcome}}`` for every type, value and call style, each op
    defined by ``define(qualname, kernel, schema)``; a type the definition refuses maps to the
    error."""
    pool = values()
    found: Dict[str, Dict[str, Any]] = {}
    for i, schema_type in enumerate(TYPES):
        got: List[Any] = []
        schema = f"(Tensor x, {schema_type} a) -> Tensor"
        try:
            op = define(f"{namespace}::conv{i}", make_kernel(got), schema)
            register_autograd(op, got)
        except Exception as exc:
            found[schema_type] = {"definition": ["error", type(exc).__name__, str(exc)]}
            continue
        found[schema_type] = {
            f"{name}|{style}": call(op, style, make(), got, namespace)
            for name, make in pool.items()
            for style in CALLS
        }
    return found


def torch_op(qualname: str, kernel: Callable, schema: str) -> Any:
    return torch.library.custom_op(qualname, kernel, mutates_args=(), schema=schema)


def record() -> Path:
    """Record torch's own op's outcomes into :data:`RECORDED`: each distinct message once, and
    the outcome of a call by keyword or with grad only where it is not the positional call's."""
    messages: Dict[str, int] = {}
    stored: Dict[str, Dict[str, Any]] = {}
    for schema_type, cases in outcomes(torch_op, "cfconv").items():
        stored[schema_type] = {}
        for key, found in cases.items():
            name, _, style = key.partition("|")
            if style not in ("", "pos") and found == cases.get(f"{name}|pos"):
                continue
            if found[0] == "error":
                found = [*found[:2], messages.setdefault(found[2], len(messages))]
            stored[schema_type][key] = found
    data = {"torch": torch.__version__, "messages": list(messages), "outcomes": stored}
    RECORDED.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
    return RECORDED


def recorded() -> Tuple[str, Dict[str, Dict[str, Any]]]:
    """The stored outcomes: (torch version, ``{type: {"value|style": outcome}}``)."""
    data = json.loads(RECORDED.read_text())
    messages = data["messages"]
    found: Dict[str, Dict[str, Any]] = {}
    for schema_type, stored in data["outcomes"].items():
        cases = found[schema_type] = {}
        for key, outcome in stored.items():
            if outcome[0] == "error" and isinstance(outcome[2], int):
                outcome = [*outcome[:2], messages[outcome[2]]]
            cases[key] = outcome
        for key, outcome in list(cases.items()):
            name, _, style = key.partition("|")
            if style == "pos":
                for other in CALLS[1:]:
                    cases.setdefault(f"{name}|{other}", outcome)
    return data["torch"], found


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: library_conversion_oracle.py --record")
    import library_conversion_oracle  # its classes named by the module's name, not __main__

    print(
        f"recorded torch {torch.__version__}'s outcomes into {library_conversion_oracle.record()}"
    )
