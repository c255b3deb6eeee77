"""torch's errors for arguments of the wrong type, written as the dispatcher writes them, for the
calls of compatfn's tiers that do not go through it."""

from __future__ import annotations

import re
import types
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple

import torch

from compatfn.library._facts import HAS_NAMED_TENSORS
from compatfn.library._infer_schema import declared_arguments, schema_for_this_torch
from compatfn.library._scalars import utf8_encodable
from compatfn.library._utils import tensors_in

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = [
    "check_tensor_arguments",
    "declaration",
    "expected_error",
    "floats_as_torch_prints",
    "generators_listed",
    "has_named_tensor",
    "refuse_named_tensors",
]

#: torch's words for a named tensor given to an operator (measured on 1.8, 1.13, 2.1, 2.12).
_NAMED_TENSOR_ERROR = (
    "NYI: Named tensors are currently unsupported in TorchScript. As a  workaround please drop "
    "names via `tensor = tensor.rename(None)`."
)
_HAS_NAMES: Any = getattr(torch.Tensor, "has_names", None) if HAS_NAMED_TENSORS else None

#: A quoted string (kept as it is) or a float literal as Python writes it in a schema's default.
_FLOAT_OR_STRING = re.compile(
    r'"(?:[^"\\]|\\.)*"|(?<![\w.])-?(?:\d+\.\d*(?:e[+-]?\d+)?|\d+e[+-]?\d+)(?![\w.])'
)


def declaration(qualname: str, schema: str) -> str:
    """``qualname`` and ``schema`` as torch prints an operator's schema (``float s=2.``).

    Example::

        >>> declaration("ns::op", "(Tensor x, float s=2.0) -> Tensor")
        'ns::op(Tensor x, float s=2.) -> Tensor'
    """
    try:
        return str(torch._C.parse_schema(qualname + schema_for_this_torch(schema)))
    except RuntimeError:  # compatfn parsed it at definition: kept as written, to be safe
        return qualname + schema


def floats_as_torch_prints(schema: str) -> str:
    """``schema`` with its float defaults printed as torch prints a schema (a whole number within
    int64 as that int and a point, ``-0.0`` as ``0.``; else 17 significant digits), its strings as
    they are (measured on torch 2.13).

    Example::

        >>> floats_as_torch_prints("(Tensor x, float a=1.0, float e=1e-05) -> Tensor")
        '(Tensor x, float a=1., float e=1.0000000000000001e-05) -> Tensor'
    """

    def printed(match: re.Match) -> str:
        text = match.group(0)
        if text.startswith('"'):
            return text
        value = float(text)
        if value.is_integer() and -(2**63) <= value < 2**63:  # as an int64, then a point
            return f"{int(value)}."
        return f"{value:.17g}"

    return _FLOAT_OR_STRING.sub(printed, schema)


#: pybind11's detail line for a value it cannot cast (torch's message quotes it).
_PYBIND_CAST = (
    "Unable to cast Python instance of type {} to C++ type '?' "
    "(#define PYBIND11_DETAILED_ERROR_MESSAGES or compile in debug mode for details)"
)


#: ``expected_error``'s culprit where the value itself cannot be cast.
_THE_VALUE: Any = object()


def _printable(value: Any) -> bool:
    """Whether ``str(value)`` is text UTF-8 can encode (not a lone surrogate)."""
    try:
        text = str(value)
    except Exception:  # a __str__ that raises
        return False
    return utf8_encodable(text)


def expected_error(
    qualname: str,
    schema: str,
    name: str,
    shown: str,
    value: Any,
    culprit: Any = _THE_VALUE,
    python_error: Optional[Exception] = None,
) -> RuntimeError:
    """torch's error for an argument of the wrong type (``shown``: the type as torch names it;
    ``culprit``: the element of a list that cannot be cast, else the value itself;
    ``python_error``: the Python error reading it raised, for a list torch reads itself)."""
    arguments = [argument for _, argument in declared_arguments(schema)]
    culprit = value if culprit is _THE_VALUE else culprit
    if python_error is not None:
        details = f"\n Python error details: {type(python_error).__name__}: {python_error}"
    elif not _printable(culprit):  # pybind11 cannot make a str of it either
        details = "\nCast error details: " + _PYBIND_CAST.format(type(culprit))
    elif shown in ("Tensor", "Optional[Tensor]", "List[Optional[Tensor]]"):  # str(), as torch
        details = f"\nCast error details: Unable to cast {culprit!s} to Tensor"
    elif "number" in shown:
        details = f"\nCast error details: Cannot cast {culprit!s} to number"
    else:
        details = "\nCast error details: " + _PYBIND_CAST.format(type(culprit))
    return RuntimeError(
        f"{qualname}() Expected a value of type '{shown}' for argument '{name}' but instead "
        f"found type '{type(value).__name__}'.\nPosition: {arguments.index(name)}\n"
        f"Value: {value!r}\nDeclaration: {declaration(qualname, schema)}{details}"
    )


def check_tensor_arguments(op: CustomOp, inputs: tuple, keyword_only: Dict[str, Any]) -> None:
    """torch's error for a ``Tensor`` parameter given something else; objects that take part in
    ``__torch_function__`` (torch.fx proxies) pass, and so does None (the dispatcher hands the
    kernel an undefined tensor, which it sees as None)."""
    for i, name in op._tensor_params:
        value = inputs[i] if i < len(inputs) else keyword_only[name]
        if value is None or isinstance(value, torch.Tensor):
            continue
        if not hasattr(value, "__torch_function__"):
            raise expected_error(op._qualname, op._schema, name, "Tensor", value)


def generators_listed(
    names: Sequence[str], given: tuple, kwargs: Dict[str, Any], converted: Dict[str, Any]
) -> Tuple[tuple, Dict[str, Any]]:
    """The arguments of a refused call (``given`` for the parameters ``names`` by position,
    ``kwargs`` by keyword) with each generator made a list: the conversion's own (``converted``,
    by name) where it read the generator already, else read now. torch before 2.4 refuses a
    generator for a ``Tensor[]``; torch 2.13 reads it and names the argument it refuses.

    Example::

        >>> gen = (t for t in ())
        >>> generators_listed(["x", "ts"], (1, gen), {}, {"ts": []})
        ((1, []), {})
    """

    def listed(name: str, value: Any) -> Any:
        if not isinstance(value, types.GeneratorType):
            return value
        return converted[name] if name in converted else list(value)

    positional = tuple(listed(name, value) for name, value in zip(names, given))
    return positional, {name: listed(name, value) for name, value in kwargs.items()}


def has_named_tensor(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether one of ``tensors`` has names (never on a torch without named tensors)."""
    return _HAS_NAMES is not None and any(_HAS_NAMES(t) for t in tensors)


def refuse_named_tensors(inputs: tuple, keyword_only: Dict[str, Any]) -> None:
    """torch's error for a named tensor among the arguments, as its operators refuse one (torch
    1.8-2.12; the ``function`` tier has no operator to refuse it)."""
    if has_named_tensor([*tensors_in(inputs), *tensors_in(keyword_only.values())]):
        raise RuntimeError(_NAMED_TENSOR_ERROR)
