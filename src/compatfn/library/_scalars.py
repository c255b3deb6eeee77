"""How the dispatcher converts one argument of a scalar schema type (``float``, ``int``,
``bool``, ``str``, ``Device``, ``ScalarType``, ``Scalar``), for the calls of compatfn's tiers that
do not go through it (``_convert`` reads :data:`SCALARS`)."""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, Tuple

import torch

from compatfn.library._schema_facts import (
    DTYPE_OF_NUMBER,
    ENUM_NUMBERS,
)

__all__ = ["LIST_ITEMS", "NUMBER_KIND", "SCALARS", "in_int64", "utf8_encodable"]


#: The exact type :data:`SCALARS` gives a ``Scalar``: no value has it, so every number is
#: converted, and an argument equals a default only of its own kind (``_utils.elidable``).
NUMBER_KIND: type = type("Number", (), {"__module__": __name__})


# NOTE: [what the dispatcher takes for a scalar]
# torch converts an ``int``, ``float``, ``bool`` or ``str`` argument with pybind11's casters
# (``toIValue``; the items of a ``float[]``, ``bool[]`` or written ``int[]`` too), measured on
# torch 2.13's own custom_op against a pool of values (``tests/library_conversion_oracle.py``):
# - ``int``: not a float (a subclass included); an int or an object with ``__index__``; else,
#   for an object with ``__int__``, ``__index__`` or ``__float__`` (or a complex), ``int(value)``
#   (a Decimal, a Fraction, numpy's float32 and bool, a one-element tensor); within int64. A dtype,
#   layout or memory format gives its c10 number.
# - ``float``: ``float(value)`` for an object with ``__float__`` or ``__index__``, within float's
#   range (not a str).
# - ``bool``: True, False, None (False) and any object whose type has ``__bool__`` returning a
#   bool (numbers, numpy scalars, a one-element tensor, a range; not a str, bytes or a list).
# - ``str``: a str (a subclass as a plain str) UTF-8 can encode, bytes or a bytearray decoded.
# - ``complex``: ``complex(value)`` for an object with ``__complex__``, ``__float__`` or
#   ``__index__`` (a one-element tensor, numpy's scalars, a Decimal; not one with ``__int__``
#   alone, not a str), within float's range.


def _number_check(value: Any) -> bool:
    """CPython's ``PyNumber_Check``: what pybind11 retries with ``int()`` or ``float()``."""
    kind = type(value)
    return (
        hasattr(kind, "__index__")
        or hasattr(kind, "__int__")
        or hasattr(kind, "__float__")
        or isinstance(value, complex)
    )


_INT64_MIN, _INT64_END = -(2**63), 2**63


def in_int64(value: int) -> bool:
    """Whether the int ``value`` fits c10's int64 (comparisons, not ``in range(...)``: that is a
    linear scan for an int subclass on Python 3.8)."""
    return _INT64_MIN <= value < _INT64_END


#: c10's MemoryFormat numbers: an ``int`` argument takes a memory format as its number (torch
#: 2.13, measured), a ``Scalar`` does not.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/c10/core/MemoryFormat.h
_MEMORY_FORMAT_NUMBERS = {
    getattr(torch, name): number
    for number, name in enumerate(
        ("contiguous_format", "preserve_format", "channels_last", "channels_last_3d")
    )
    if hasattr(torch, name)
}
_INT_NUMBERS = {**ENUM_NUMBERS, **_MEMORY_FORMAT_NUMBERS}
_ENUMS = (torch.dtype, torch.layout, torch.qscheme, torch.memory_format)


def _to_float(value: Any) -> Any:
    """A float as pybind11 casts one; None (torch's error) otherwise (See NOTE: [what the
    dispatcher takes for a scalar])."""
    if type(value) is float:
        return value
    kind = type(value)
    if not (hasattr(kind, "__float__") or hasattr(kind, "__index__")):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None


def _to_int(value: Any) -> Any:
    """An ``int`` argument: a dtype, layout or memory format its c10 number, else
    ``_to_symint`` (See NOTE: [what the dispatcher takes for a scalar])."""
    if isinstance(value, _ENUMS):
        return _INT_NUMBERS.get(value)
    return _to_symint(value)


def _to_symint(value: Any) -> Any:
    """An int as pybind11 casts one (a ``SymInt`` argument, an item of an ``int[]``); None
    (torch's error) otherwise (See NOTE: [what the dispatcher takes for a scalar])."""
    if type(value) is int:
        return value if in_int64(value) else None
    if isinstance(value, float):
        return None
    try:
        result = operator.index(value)
    except TypeError:
        if not _number_check(value):
            return None
        try:
            result = int(value)
        except (TypeError, ValueError, OverflowError, RuntimeError):
            return None
    except Exception:  # an __index__ that raises something else
        return None
    result = int(result)  # an int subclass's value (a bool as 0 or 1)
    return result if in_int64(result) else None


def _to_bool(value: Any) -> Any:
    """A bool as pybind11 casts one (See NOTE: [what the dispatcher takes for a scalar])."""
    if value is True or value is False:
        return value
    if value is None:
        return False
    if isinstance(value, str) or not hasattr(type(value), "__bool__"):
        return None
    try:
        return bool(value)
    except Exception:  # a tensor of several elements; __bool__ returning another type
        return None


def _to_str(value: Any) -> Any:
    """A plain str; ``bytes`` and ``bytearray`` decoded (Python's error where they are not
    UTF-8, as torch 2.13 raises it), as torch's argument parser takes them; not a str UTF-8
    cannot encode (a lone surrogate such as U+D800: torch refuses it, measured on 2.4-2.15)."""
    if type(value) is str:
        return value if value.isascii() or utf8_encodable(value) else None
    if isinstance(value, str):
        return _to_str("".join((value,)))  # a plain str of a subclass's characters
    if isinstance(value, (bytes, bytearray)):  # not UTF-8: Python's UnicodeDecodeError, as torch's
        return bytes(value).decode()
    return None


def utf8_encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _to_complex(value: Any) -> Any:
    """A complex as pybind11 casts one (See NOTE: [what the dispatcher takes for a scalar])."""
    kind = type(value)
    if kind is complex:
        return value
    if not any(hasattr(kind, name) for name in ("__complex__", "__float__", "__index__")):
        return None
    try:
        return complex(value)
    except Exception:  # beyond float's range; a tensor or an array of several elements
        return None


def _to_device(value: Any) -> Any:
    """A device: a ``torch.device``, else what ``_to_str`` takes, parsed."""
    if isinstance(value, torch.device):
        return value
    text = _to_str(value)
    return None if text is None else torch.device(text)


def _symint_item(value: Any) -> Any:
    """An item of a ``SymInt[]``, which torch reads itself: a tensor only with one element of an
    integer dtype (not bool), else as ``_to_symint``."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype.is_complex:
            return None
        if value.dtype is torch.bool:
            return None
        return int(value)
    return _to_symint(value)


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
    value = None if isinstance(value, _ENUMS) else _to_symint(value)
    if value is not None:
        if value not in DTYPE_OF_NUMBER:
            raise RuntimeError("unsupported scalarType")
        return DTYPE_OF_NUMBER[value]
    return None


#: Schema base type -> (its Python type, the name torch's message uses, the converter that
#: returns None for a value of the wrong type).
SCALARS: Dict[str, Tuple[type, str, Callable[[Any], Any]]] = {
    "float": (float, "float", _to_float),
    "int": (int, "int", _to_int),
    "SymInt": (int, "int", _to_symint),
    "bool": (bool, "bool", _to_bool),
    "str": (str, "str", _to_str),
    "Device": (torch.device, "Device", _to_device),
    "ScalarType": (torch.dtype, "int", _to_dtype),
    "Scalar": (NUMBER_KIND, "number", _to_number),
    "complex": (complex, "complex", _to_complex),
}

#: Schema base type -> the converter of each item of a list of it (``int[]``, ``SymInt[]``: no
#: dtype, layout or memory format numbers there).
LIST_ITEMS: Dict[str, Callable[[Any], Any]] = {
    **{base: convert for base, (_, _, convert) in SCALARS.items()},
    "int": _to_symint,
    "SymInt": _symint_item,
}
