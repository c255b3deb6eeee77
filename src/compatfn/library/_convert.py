"""The argument conversions the dispatcher does, for calls that do not go through it.

A call of ``torch.ops.ns.op`` converts each non-tensor argument to its schema type (``"cpu"`` to
``torch.device``, an int to float for a ``float``, a tuple to a list for ``int[]``) and refuses a
wrong type with "Expected a value of type ...". compatfn's tiers run kernels without the
dispatcher where nothing needs it, so they convert the same way (measured against torch 2.15's
own custom_op): a kernel sees the same values on every torch.
"""

from __future__ import annotations

import inspect
import re
import types
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from compatfn.library._call_errors import expected_error, floats_as_torch_prints
from compatfn.library._facts import HAS_ZERO_TENSOR
from compatfn.library._infer_schema import arguments_text
from compatfn.library._no_operator import needs_dispatcher
from compatfn.library._returns import is_sequence
from compatfn.library._scalars import LIST_ITEMS, SCALARS, in_int64
from compatfn.library._schema_facts import int_type

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = [
    "MISSING",
    "SELF_GIVEN",
    "Conversion",
    "any_left_out",
    "conversions",
    "given_by_position",
    "wrong_call",
]

#: What a parameter of an op's generated call holds when the caller left it out.
_MissingType = type("MissingArgument", (), {"__repr__": lambda self: "<missing>"})
MISSING: Any = _MissingType()

#: A parameter's conversion: the type a value needs no conversion for (None: always convert),
#: whether None passes, and the function that converts a value (or raises torch's error).
Conversion = Tuple[Optional[type], bool, Callable[[Any], Any]]

_ARGUMENT = re.compile(r"(?P<type>[A-Za-z]+(?:\([^)]*\))?\??(?:\[\d*\])?\??) (?P<name>\w+)")

#: A parameter's type: the item's type, then ``[]`` or ``[N]`` for a list (``int[2]``).
_LIST_TYPE = re.compile(r"(.*?)(\[(\d*)\])?")


# NOTE: [what the dispatcher takes for a list]
# Measured on torch 2.13's own custom_op (the newest torch behaves the same; 2.4 differs in
# places, and compatfn's tiers follow 2.13): a ``Tensor[]`` argument is a list, a tuple or a
# generator of tensors (not a tensor, not ``None`` in it unless the type is ``Tensor?[]``, not
# another iterator). A ``SymInt[]`` (what torch >= 2.0 infers from ``List[int]``; a written
# ``int[]`` is not) and a ``Scalar[]`` are read by torch's own loop: any iterable (a set, a
# dict's keys, a str's characters, bytes as ints; for a ``SymInt[]`` an iterator is read twice,
# so it gives an empty list, and a tensor only as a 1-D tensor of an integer dtype, its values);
# what is not iterable gets Python's "not iterable" in the error. Other lists of scalars
# (``float[]``, ``bool[]``, a written ``int[]``) are what pybind11 3 converts to a vector: a
# sequence (a list, a tuple, a range, a numpy array; not a str or bytes), a set, a generator, a
# dict view, a ``map`` or a ``zip`` (not a dict, not a list iterator); torch 2.4's pybind11 takes
# sequences only. A ``Tensor?`` is None or a tensor. An object that takes part in
# ``__torch_function__`` (a torch.fx proxy) passes for any of them.


def _is_sequence(value: Any) -> bool:
    """A sequence in CPython's sense (``is_sequence``) that is not a str or bytes."""
    return is_sequence(value) and not isinstance(value, (str, bytes))


def _pybind_length(value: Any, error: Callable[..., RuntimeError]) -> None:
    """pybind11's vector caster takes a sequence's ``len()`` first: torch's error with the
    Python error where it fails (a 0-d numpy array)."""
    if _is_sequence(value):
        try:
            len(value)
        except TypeError as exc:
            raise error(value, python_error=exc) from None


#: The types, by name, that pybind11 3 takes for a ``std::vector`` beside sequences, sets and
#: generators (``PyObjectTypeIsConvertibleToStdVector`` in its ``stl.h``; torch 2.13 ships it).
_VECTOR_TYPE_NAMES = ("dict_keys", "dict_values", "dict_items", "map", "zip")


def _vector_like(value: Any) -> bool:
    """Whether torch 2.13 (pybind11 3) converts ``value`` for a ``float[]``, ``bool[]`` or
    written ``int[]`` (See NOTE: [what the dispatcher takes for a list])."""
    if isinstance(value, (list, tuple)) or _is_sequence(value):
        return True
    if isinstance(value, (types.GeneratorType, set, frozenset)):
        return True
    return type(value).__name__ in _VECTOR_TYPE_NAMES


def _is_integer_vector(value: Any) -> bool:
    """A 1-D tensor of integers with values to read (not meta, not a subclass: a FakeTensor)."""
    return (
        type(value) is torch.Tensor
        and value.device.type != "meta"
        and value.dim() == 1
        and not value.dtype.is_floating_point
        and not value.dtype.is_complex
        and value.dtype is not torch.bool
    )


def _values(vector: torch.Tensor) -> List[int]:
    """The values of an integer vector (a ZeroTensor's are zeros: it has no storage)."""
    if HAS_ZERO_TENSOR and vector._is_zerotensor():
        return [0] * vector.numel()
    return vector.tolist()  # type: ignore[no-any-return]


def _is_proxy(value: Any) -> bool:
    """An object standing for a value while torch.fx traces (it takes part in
    ``__torch_function__`` and is no tensor): the traced graph's run converts the value."""
    return hasattr(value, "__torch_function__") and not isinstance(value, torch.Tensor)


def _is_tensor_like(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or hasattr(value, "__torch_function__")


def _pybind_vector(value: Any, error: Callable[..., RuntimeError]) -> List[Any]:
    """The items pybind11's vector caster reads from ``value``; torch's error where it refuses
    it."""
    if not _vector_like(value):
        raise error(value)
    _pybind_length(value, error)
    return list(value)


def _iterated(value: Any, error: Callable[..., RuntimeError]) -> Tuple[Any, List[Any]]:
    """(its iterator, the items) as torch's own loop reads ``value``: any iterable; torch's
    error with Python's where ``iter()`` refuses it."""
    try:
        iterator = iter(value)
    except TypeError as exc:
        raise error(value, python_error=exc) from None
    return iterator, list(iterator)


def _tensor_list(error: Callable[..., RuntimeError], optional_items: bool) -> Callable[[Any], Any]:
    """A ``Tensor[]`` (``Tensor?[]``: ``optional_items``) argument as the dispatcher takes it
    (See NOTE: [what the dispatcher takes for a list])."""

    def converted(value: Any) -> Any:
        if _is_proxy(value):
            return value
        items = _iterated(value, error)[1] if optional_items else _pybind_vector(value, error)
        for item in items:
            if not (_is_tensor_like(item) or (optional_items and item is None)):
                raise error(value, item) if optional_items else error(value)
        return items

    return converted


def _optional_tensor(error: Callable[..., RuntimeError]) -> Callable[[Any], Any]:
    def converted(value: Any) -> Any:
        if value is None or _is_tensor_like(value):
            return value
        raise error(value)

    return converted


def _conversion(
    qualname: str, schema: str, name: str, schema_type: str, inferred: bool, operator: bool
) -> Optional[Conversion]:
    optional = schema_type.endswith("?")
    base, brackets, size = _LIST_TYPE.fullmatch(schema_type.rstrip("?")).groups()  # type: ignore[union-attr]
    is_list = brackets is not None

    def error(value: Any, *culprit: Any, **python_error: Any) -> RuntimeError:
        return expected_error(qualname, schema, name, shown, value, *culprit, **python_error)

    if is_list and base.startswith("Tensor"):
        shown = "List[Optional[Tensor]]" if base.endswith("?") else "List[Tensor]"
        return None, optional, _tensor_list(error, base.endswith("?"))  # always checked
    if base.startswith("Tensor") and optional:
        shown = "Optional[Tensor]"
        return torch.Tensor, True, _optional_tensor(error)
    if base not in SCALARS:
        return None  # tensors: checked where they are used
    kind, type_name, convert = SCALARS[base]
    # torch < 2.0 has no SymInt: an inferred int there is what torch >= 2.0 infers as SymInt
    symint = base == "SymInt" or (base == "int" and inferred and int_type() == "int")
    if symint:
        convert = SCALARS["SymInt"][2]
    convert_item = LIST_ITEMS["SymInt" if symint else base]
    shown = f"List[{type_name}]" if is_list else type_name
    shown = f"Optional[{shown}]" if optional else shown

    def converted(value: Any) -> Any:
        if (value is None and optional) or _is_proxy(value):
            return value
        if is_list:
            if size and isinstance(value, repeated):
                return _repeated(value)
            return _scalar_list(value)
        result = convert(value)
        if result is None:
            raise error(value)
        return result

    # NOTE: [a list of a given size]
    # For ``int[N]`` torch takes an int (``isinstance``: a bool too) as N copies of it, and for
    # ``float[N]`` a float; ``SymInt[N]``, ``bool[N]`` and ``Scalar[N]`` take lists only, and no
    # list's length is checked against N (torch 2.13, measured).
    # Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/torch/csrc/jit/python/pybind_utils.h
    repeated = {"int": int, "float": float}.get(base, ()) if not symint else ()

    def _repeated(value: Any) -> List[Any]:
        if base == "float":
            return [float.__float__(value)] * int(size)
        if not in_int64(value):
            raise error(value)
        return [int.__index__(value)] * int(size)

    def _scalar_list(value: Any) -> List[Any]:
        if symint and _is_integer_vector(value):  # an operator reads it where it is called
            return value if operator and needs_dispatcher() else _values(value)
        if symint and isinstance(value, torch.Tensor) and value.device.type == "meta":
            raise error(value)  # no values to read: torch refuses it as a whole
        if base == "Scalar" or symint:
            return _read_list(value)
        return _items(value, _pybind_vector(value, error), whole=True)

    def _read_list(value: Any) -> List[Any]:
        """A ``SymInt[]`` or ``Scalar[]``, which torch reads itself (See NOTE: [what the
        dispatcher takes for a list])."""
        iterator, values = _iterated(value, error)
        if symint and iterator is value:  # read twice: the second time finds it empty
            _items(value, [v for v in values if isinstance(v, torch.Tensor)])  # checked first
            return []
        return _items(value, values)

    def _items(value: Any, values: List[Any], whole: bool = False) -> List[Any]:
        """The items converted; torch's error names the item, or the list where pybind11's
        vector caster refuses it as a whole (``whole``)."""
        items: List[Any] = [convert_item(v) for v in values]
        for item, v in zip(items, values):
            if item is None:
                raise error(value) if whole else error(value, v)
        return items

    return (None if is_list else kind), optional, converted


def conversions(
    qualname: str, schema: str, inferred: bool = True, operator: bool = True
) -> Dict[str, Conversion]:
    """Each non-tensor parameter of ``schema`` (and each ``Tensor?``, ``Tensor[]``) -> its
    :data:`Conversion` (``operator``: whether calls that need the dispatcher go through an
    operator, which converts what is left to it; the ``function`` tier has none).

    Example::

        >>> kind, optional, convert = conversions("ns::op", "(Tensor x, float s) -> Tensor")["s"]
        >>> convert(2)
        2.0
    """
    arguments = arguments_text(schema)
    found: Dict[str, Conversion] = {}
    for match in _ARGUMENT.finditer(arguments):
        name = match.group("name")
        conversion = _conversion(qualname, schema, name, match.group("type"), inferred, operator)
        if conversion is not None:
            found[name] = conversion
    return found


def any_left_out(values: Iterable[Any]) -> bool:
    """Whether a caller left out one of ``values`` (it is ``MISSING``).

    Example::

        >>> any_left_out([1, MISSING])
        True
    """
    # ``value.__class__``: dynamo 2.1-2.2 cannot trace ``is`` between a tensor and MISSING.
    return any(value.__class__ is _MissingType for value in values)


def given_by_position(given: tuple) -> tuple:
    """The values a caller gave by position: ``given`` (the by-position parameters' values,
    ``MISSING`` for each one not given) up to the first ``MISSING``.

    Example::

        >>> given_by_position((1, 2, MISSING))
        (1, 2)
    """
    count = len(given)
    while count and given[count - 1].__class__ is _MissingType:  # dynamo 2.1 traces no ``is``
        count -= 1
    return given[:count]


def positional_parameters(
    names: Sequence[str], globals_: Dict[str, Any], default: str = ""
) -> Tuple[List[str], List[str], str]:
    """The header parameters of a generated call that take ``names`` by position only (each
    followed by ``default``, then a ``/``), the body's first lines giving them their names, and
    the source of the tuple of their values as given (``MISSING`` where not given; see
    ``given_by_position``). Every keyword lands in ``**kwargs`` for ``keyword_lines``, a keyword
    written with the fresh name too (Python puts it there for a positional-only parameter).
    Fresh names, not the op's: dynamo binds an inlined call by rules of its own and refuses a
    keyword that names a positional-only parameter (torch 2.7, measured); and identifiers:
    dynamo 2.1 binds with ``inspect.signature``, which refuses any other name (measured)."""
    header, lines = [], []
    for i, name in enumerate(names):
        globals_[f"by_position_{i}"] = None  # a placeholder: renamed apart from every name
        header.append(f"$by_position_{i}{default}")
        lines.append(f"{name} = $by_position_{i}")
    given = "(" + ", ".join(f"$by_position_{i}" for i in range(len(names)))
    given += ("," if len(names) == 1 else "") + ")"
    return header + ["/"] * bool(header), lines, given


#: torch's op is called through ``CustomOpDef.__call__(self, *args, **kwargs)``: a keyword named
#: ``self`` is Python's error there, whatever the op's parameters (a parameter named ``self``
#: included), on every torch >= 2.4.
SELF_GIVEN = "CustomOpDef.__call__() got multiple values for argument 'self'"


def keyword_lines(
    names: Sequence[str], wrong: str, globals_: Dict[str, Any], keyword_only: Sequence[str] = ()
) -> List[str]:
    """Lines of a generated call binding its keyword arguments to the parameters ``names``,
    taken by position only (``positional_parameters``; each ``MISSING`` when not given), and to
    the ``keyword_only`` ones (``MISSING`` when not given; the header has none of them), as
    Python binds them, except that a parameter given both by position and by keyword, or a
    keyword no parameter takes, runs ``wrong`` (the dispatcher's error, not Python's
    ``TypeError``), and a keyword ``self`` raises torch's ``TypeError`` (``SELF_GIVEN``).
    ``$kwargs`` is read, never changed: it stays the keywords as written."""
    globals_.update(Missing=_MissingType, MISSING=MISSING, len=len, taken=None)
    globals_.update(TypeError=TypeError, self_given=SELF_GIVEN)
    lines = [f"{name} = $MISSING" for name in keyword_only]
    lines += ["if $kwargs:", "    if 'self' in $kwargs:", "        raise $TypeError($self_given)"]
    lines += ["    $taken = 0"]
    for name in names:
        lines += [
            f"    if {name!r} in $kwargs:",
            f"        if {name}.__class__ is not $Missing:",
            f"            {wrong}",
            f"        {name} = $kwargs[{name!r}]",
            "        $taken += 1",
        ]
    for name in keyword_only:
        lines += [
            f"    if {name!r} in $kwargs:",
            f"        {name} = $kwargs[{name!r}]",
            "        $taken += 1",
        ]
    return [*lines, "    if $taken != $len($kwargs):", f"        {wrong}"]


def wrong_call(op: CustomOp, given: tuple, args: tuple, kwargs: Dict[str, Any]) -> Any:
    """A call whose arguments do not fit ``op``'s signature, as the caller wrote it (``given``:
    the by-position parameters' values, ``MISSING`` where not given; ``args``: the values given
    beyond them; ``kwargs``: the keywords): the operator's own error where there is an operator,
    else the same error, built as torch's dispatcher builds it."""
    if op._opoverload is not None:
        return op._opoverload(*given_by_position(given), *args, **kwargs)
    raise _dispatcher_error(op, given_by_position(given), args, kwargs)


def _dispatcher_error(
    op: CustomOp, positional: tuple, args: tuple, kwargs: Dict[str, Any]
) -> RuntimeError:
    """torch's error for a wrong call of an operator, its checks in its order."""
    name, declaration = op._qualname, op._qualname + floats_as_torch_prints(op._schema)
    parameters = op._signature.parameters
    received = len(positional) + len(args) + len(kwargs)
    if received > len(parameters):
        return RuntimeError(
            f"{name}() expected at most {len(parameters)} argument(s) but received {received} "
            f"argument(s). Declaration: {declaration}"
        )
    if args:
        count = len(op._positional)
        return RuntimeError(
            f"{name}() takes {count} positional argument(s) but {count + len(args)} was/were "
            f"given.  Declaration: {declaration}"
        )
    by_position = op._positional[: len(positional)]
    for parameter, p in parameters.items():
        given = parameter in by_position or parameter in kwargs
        if not given and p.default is inspect.Parameter.empty:
            return RuntimeError(
                f"{name}() is missing value for argument '{parameter}'. Declaration: {declaration}"
            )
    unknown = next((k for k in kwargs if k not in parameters), None)
    if unknown is None:  # given by position too
        twice = next(k for k in kwargs if k in by_position)
        return RuntimeError(
            f"Argument '{twice}' specified both as positional and keyword argument. "
            f"Schema: {declaration}"
        )
    return RuntimeError(
        f"Unknown keyword argument '{unknown}' for operator '{name}'. Schema: {declaration}"
    )
