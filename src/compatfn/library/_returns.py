"""A kernel's non-tensor output converted as torch's Python kernel converts it to the schema's
returns (``int``, ``float``, ``bool``, ``Scalar``, a tensor list among several returns,
nothing), with torch's errors."""

from __future__ import annotations

import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from compatfn.library._scalars import in_int64

__all__ = [
    "as_tensor",
    "as_tensor_list",
    "converted_returns",
    "is_sequence",
    "list_return_positions",
    "return_types",
    "returned_items",
    "scalar_return_types",
    "tensor_return_count",
    "type_name",
]

# NOTE: [non-tensor returns]
# torch hands a Python kernel's output to C++ by the schema's return types (measured on torch
# 2.13 for each type and for ints, bools, floats, numpy scalars, 0-dim and larger tensors,
# strings, None, complex numbers and lists): ``int``/``SymInt`` takes anything ``int()`` takes
# but a float or a string (a 0-dim tensor gives its value truncated); ``float`` anything
# ``float()`` takes but a string; ``bool`` True, False, None (False) and anything whose type
# defines ``__bool__``; ``Scalar`` a bool, an int, a float or a complex as they are; a
# one-element tuple (``((Tensor))``) any iterable of one item; ``Tensor[]`` among several returns
# what ``as_tensor_list`` takes, as a list. Anything else raises pybind11's
# RuntimeError (``Scalar``: torch's "Cannot cast ... to number"). A kernel of an op returning
# nothing must return None. Two or more returns take a sequence, each item by its type.
# compatfn's tiers convert the same way; tensors alone are ``_kernels.as_returned``'s.

# NOTE: [two or more returns, converted twice]
# torch 2.13's own op converts a Python kernel's output for two or more returns twice: once when
# the backend kernel returns (each item of a sequence by its return's type, as many items as the
# sequence has) and again when its Autograd/ADInplaceOrView layer returns what Python got back
# from that stack (no value: None, one: the value, more: a tuple). So a sequence of the right
# length comes through once converted, and a one-item sequence is converted by the first type
# and then must itself be a sequence: ``[t]`` for ``(Tensor, int)`` raises "Object of type
# 'Tensor' is not an instance of 'sequence'", ``[[]]`` for ``(Tensor[], int)`` returns None,
# ``[]`` raises for NoneType (measured on 2.13 for each, under no-grad and inference mode too).

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


def _cast_error(value: Any) -> RuntimeError:
    return RuntimeError(
        f"Unable to cast Python instance of type {type(value)} to C++ type '?' (#define "
        "PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug mode for details)"
    )


def type_name(value: Any) -> str:
    """The name torch's messages give ``value``'s type (CPython's ``tp_name``: a class defined
    in Python by its name, a C type by its module and name unless a builtin: ``numpy.int64``)."""
    kind = type(value)
    if kind.__flags__ & _HEAP_TYPE or kind.__module__ == "builtins":
        return kind.__name__
    return f"{kind.__module__}.{kind.__name__}"


def is_sequence(value: Any) -> bool:
    """What pybind11 takes for a ``sequence`` (``PySequence_Check``): not a dict or a tensor; the
    type's own methods (an enum member's class has ``__len__`` from its metaclass only)."""
    if isinstance(value, (dict, torch.Tensor)):
        return False
    return _type_has(type(value), "__getitem__") and _type_has(type(value), "__len__")


def _type_has(kind: type, name: str) -> bool:
    """Whether ``kind`` or a class it derives from defines ``name`` (not its metaclass)."""
    return any(name in vars(k) for k in kind.__mro__)


def _as_int(value: Any) -> int:
    if not isinstance(value, (float, str, bytes, bytearray)):
        try:
            result = int(value)
        except Exception:
            pass
        else:
            if in_int64(result):
                return result
    raise _cast_error(value)


def _as_float(value: Any) -> float:
    if not isinstance(value, (str, bytes, bytearray)):
        try:
            return float(value)
        except Exception:
            pass
    raise _cast_error(value)


def _as_bool(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if hasattr(type(value), "__bool__"):
        try:
            return bool(value)
        except Exception:
            pass
    raise _cast_error(value)


def _as_number(value: Any) -> Any:
    if isinstance(value, bool):  # first: a bool is an int
        return value
    if isinstance(value, int):
        if not in_int64(value):
            raise OverflowError("int too big to convert")
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, complex):
        return complex(value)
    raise RuntimeError(f"Cannot cast {value!s} to number")


def as_tensor(value: Any) -> Any:
    """A returned tensor (or None) as it is; torch's error for anything else."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    raise RuntimeError(f"Unable to cast {value!s} to Tensor")


def as_tensor_list(value: Any) -> List[torch.Tensor]:
    """A returned ``Tensor[]`` as a list, where pybind11 takes ``value`` for one (measured on
    2.13: a sequence but a string or a tensor, a set, a generator, a ``map``; not a dict nor an
    iterator such as ``iter(list)``), every item a tensor; torch's error for anything else."""
    iterable = isinstance(value, (set, frozenset, types.GeneratorType, map))
    if iterable or (is_sequence(value) and not isinstance(value, (str, bytes, bytearray))):
        items = list(value)
        if all(isinstance(v, torch.Tensor) for v in items):
            return items
    raise _cast_error(value)


_CONVERTERS: Dict[str, Callable[[Any], Any]] = {
    "int": _as_int,
    "SymInt": _as_int,
    "float": _as_float,
    "bool": _as_bool,
    "Scalar": _as_number,
    "Tensor": as_tensor,
    "Tensor[]": as_tensor_list,
}


def return_types(schema: str) -> Tuple[Tuple[str, ...], bool]:
    """Each return type of ``schema`` as written, and whether the returns are a one-element
    tuple (``((T))``, See NOTE: [non-tensor returns]). The one reader of a schema's returns.

    Example::

        >>> return_types("(Tensor x) -> (Tensor[], SymInt)")
        (('Tensor[]', 'SymInt'), False)
        >>> return_types("(Tensor x) -> ((Tensor))")
        (('Tensor',), True)
    """
    returns = schema.rsplit("->", 1)[1].strip()
    if returns.startswith("(("):
        return (returns[2:-2].strip(),), True
    inner = returns[1:-1] if returns.startswith("(") else returns
    return tuple(r.strip() for r in inner.split(",") if r.strip()), False


def tensor_return_count(schema: str) -> int:
    """How many tensors ``schema`` returns when it returns one Tensor or a tuple of them, else
    0 (nothing, a list, anything else among them).

    Example::

        >>> tensor_return_count("(Tensor x) -> (Tensor, Tensor)")
        2
    """
    types, one_tuple = return_types(schema)
    return 0 if one_tuple or any(t != "Tensor" for t in types) else len(types)


def list_return_positions(schema: str) -> Tuple[int, ...]:
    """Which of two or more returns of ``schema`` are tensor lists (See NOTE: [tensor lists
    among several returns] in _autograd).

    Example::

        >>> list_return_positions("(Tensor x) -> (Tensor[], SymInt)")
        (0,)
    """
    types, one_tuple = return_types(schema)
    if one_tuple or len(types) < 2:
        return ()
    return tuple(i for i, t in enumerate(types) if t == "Tensor[]")


def scalar_return_types(schema: str) -> Optional[List[str]]:
    """The return types of ``schema`` where it returns nothing or something other than tensors
    (See NOTE: [non-tensor returns]), else None (tensors alone, a tensor list alone).

    Example::

        >>> scalar_return_types("(Tensor x) -> (Tensor, SymInt)")
        ['Tensor', 'SymInt']
    """
    types, one_tuple = return_types(schema)
    if one_tuple:
        return [f"({types[0]})"] if types[0] in _CONVERTERS else None
    if any(t not in _CONVERTERS for t in types):
        return None
    if types and (all(t == "Tensor" for t in types) or types == ("Tensor[]",)):
        return None
    return list(types)


def converted_returns(qualname: str, types: List[str], output: Any) -> Any:
    """``output`` as torch hands on the kernel's result for returns of ``types`` (from
    :func:`scalar_return_types`), or torch's error."""
    if not types:
        if output is not None:
            raise RuntimeError(
                f"Expected PythonKernelHolder for {qualname} to return None but it returned "
                "something else instead."
            )
        return None
    if len(types) == 1 and types[0].startswith("("):
        return _one_tuple(types[0][1:-1], output)
    if len(types) == 1:
        return _CONVERTERS[types[0]](output)
    return returned_items(types, output)


def _one_tuple(inner: str, output: Any) -> tuple:
    """The kernel's ``output`` for a one-element tuple return (``((Tensor))``) as torch takes
    it: any iterable of one item (measured on 2.13), that item converted."""
    items = tuple(output)  # Python's TypeError for what is not iterable, as torch's
    if len(items) != 1:
        raise RuntimeError(
            f"Object {output!s} had a different number of elements than type Tuple[{inner}]"
        )
    return (_CONVERTERS[inner](items[0]),)


def returned_items(types: List[str], output: Any) -> Any:
    """A kernel's ``output`` for two or more returns of ``types``, as torch hands it on: converted
    twice (See NOTE: [two or more returns, converted twice]), with torch's errors.

    Example::

        >>> returned_items(["Tensor", "int"], [torch.ones(1), 2.0])
        Traceback (most recent call last):
        RuntimeError: Unable to cast Python instance of type <class 'float'> to C++ type '?' ...
    """
    once = _pushed(types, output)
    if type(once) is tuple and len(once) == len(types):  # a second conversion changes nothing
        return once
    return _pushed(types, once)


def _pushed(types: List[str], output: Any) -> Any:
    """One conversion of ``output`` for returns of ``types``: a sequence, each item converted by
    its return's type, then the values as Python gets a stack of them back (none: None, one: it,
    more: a tuple); a sequence longer than the returns as it is once its first items convert
    (torch reads past its returns there)."""
    if not is_sequence(output):
        raise TypeError(f"Object of type '{type_name(output)}' is not an instance of 'sequence'")
    items = tuple(_CONVERTERS[t](v) for t, v in zip(types, output))
    if len(output) > len(types):
        return output
    return None if not items else items[0] if len(items) == 1 else items
