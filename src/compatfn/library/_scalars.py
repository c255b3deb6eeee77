"""How the dispatcher converts one argument of a scalar schema type (``float``, ``int``,
``bool``, ``str``, ``Device``, ``ScalarType``, ``Scalar``), for the calls of compatfn's tiers that
do not go through it (``_convert`` reads :data:`SCALARS`)."""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, Tuple

import torch

from compatfn.library._schema_facts import (
    DTYPE_OF_NUMBER,
    ENUM_NUMBERS,
)

__all__ = ["NUMBER_KIND", "SCALARS"]


#: The exact type :data:`SCALARS` gives a ``Scalar``: no value has it, so every number is
#: converted, and an argument equals a default only of its own kind (``_utils.elidable``).
NUMBER_KIND: type = object


def _is_number_tensor(value: Any) -> bool:
    """A tensor of one element, of any shape: the dispatcher takes it for a number."""
    return isinstance(value, torch.Tensor) and value.numel() == 1


_INT64 = range(-(2**63), 2**63)


def _to_float(value: Any) -> Any:
    """A float; None (torch's error) for an int beyond float's range (``10**400``)."""
    if isinstance(value, numbers.Real) or _is_number_tensor(value):
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def _to_int(value: Any) -> Any:
    """An int; None (torch's error) for one outside int64."""
    if isinstance(value, numbers.Integral) or _is_number_tensor(value):
        result = int(value)
        return result if result in _INT64 else None
    return None


def _is_numpy_bool(value: Any) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")


def _to_bool(value: Any) -> Any:
    if isinstance(value, numbers.Real) or _is_number_tensor(value) or _is_numpy_bool(value):
        return bool(value)
    return None


def _to_str(value: Any) -> Any:
    """A str; ``bytes`` decoded, as torch's argument parser takes them; not a str UTF-8 cannot
    encode (a lone surrogate such as U+D800: torch refuses it, measured on 2.4-2.15)."""
    if isinstance(value, str):
        return value if value.isascii() or _utf8_encodable(value) else None
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    return None


def _utf8_encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _to_device(value: Any) -> Any:
    if isinstance(value, (str, torch.device)):
        return torch.device(value)
    return None


# NOTE: [what the dispatcher takes for a number]
# A ``Scalar`` (``torch.types.Number``), measured on torch 2.13 and 2.15's own custom_op: a bool, an
# int (an int subclass as an int; from -2**63 to 2**64 - 1, beyond that Python's OverflowError),
# a float (a subclass, ``np.float64`` included, as a float), a complex (not a subclass), and a
# dtype, layout or quantization scheme (their c10 numbers, as ints). Nothing else: not numpy's
# other scalars, a Fraction, a Decimal or a tensor ("Cannot cast <value> to number"). torch 2.4
# refuses ints beyond int64.


def _to_number(value: Any) -> Any:
    """A ``Scalar`` as the dispatcher passes it; None for what it refuses (See NOTE: [what the
    dispatcher takes for a number])."""
    kind = type(value)
    if kind is bool or kind is float or kind is complex:
        return value
    if isinstance(value, int):
        if value < -(2**63):
            raise OverflowError("can't convert negative int to unsigned")
        if value >= 2**64:
            raise OverflowError("int too big to convert")
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (torch.dtype, torch.layout, torch.qscheme)):
        return ENUM_NUMBERS.get(value)
    return None


def _to_dtype(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, int):
        if value not in DTYPE_OF_NUMBER:
            raise RuntimeError("unsupported scalarType")
        return DTYPE_OF_NUMBER[value]
    return None


#: Schema base type -> (its Python type, the name torch's message uses, the converter that
#: returns None for a value of the wrong type).
SCALARS: Dict[str, Tuple[type, str, Callable[[Any], Any]]] = {
    "float": (float, "float", _to_float),
    "int": (int, "int", _to_int),
    "SymInt": (int, "int", _to_int),
    "bool": (bool, "bool", _to_bool),
    "str": (str, "str", _to_str),
    "Device": (torch.device, "Device", _to_device),
    "ScalarType": (torch.dtype, "int", _to_dtype),
    "Scalar": (NUMBER_KIND, "number", _to_number),
}
