"""Schema inference: the operator schema of a Python function from its annotations, as torch's
``torch.library.infer_schema`` writes it (torch >= 2.5), on every torch."""

from __future__ import annotations

import collections.abc
import inspect
import re
import types
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
import torch.types

from compatfn.library._facts import VIEW_OPS_SINCE
from compatfn.library._schema_facts import (
    DTYPE_OF_NUMBER,
    SCALAR_TYPE_NUMBERS,
    int_type,
    parser_reads_dtype_names,
)
from compatfn.library._utils import tags_tuple

__all__ = [
    "SCALAR_TYPES",
    "arguments_text",
    "check_given_schema",
    "check_no_keyword_only_tensors",
    "check_no_view_returns",
    "declared_arguments",
    "infer_schema",
    "kernel_signature",
    "schema_arguments",
    "schema_for_this_torch",
    "schema_signature",
    "spaced_schema",
    "tensor_parameters",
    "with_schema_defaults",
]

_NoneType = type(None)
#: Python type -> schema type, and whether lists of it are allowed.
_SCALARS: Dict[Any, Tuple[str, bool]] = {
    torch.Tensor: ("Tensor", True),
    int: ("SymInt", True),
    float: ("float", True),
    bool: ("bool", True),
    str: ("str", False),
    torch.dtype: ("ScalarType", False),
    torch.device: ("Device", False),
    torch.types.Number: ("Scalar", True),  # typing.Union[int, float, bool] (complex on 2.x)
}
#: The scalar parameter types a generated call's short path hands to the kernel as they are (after
#: one exact ``type(x) is`` test each; anything else is converted or goes to the dispatcher).
SCALAR_TYPES = (int, float, bool, str, torch.dtype, torch.device)
_SEQUENCES = (list, collections.abc.Sequence, typing.List, typing.Sequence)
#: What torch (2.13) adds to its error for a tuple parameter.
_TUPLE_HINT = (
    " We do not support Tuple inputs in schema. As a workaround, please try to use List "
    "instead. For example, list[int]."
)


def _resolve(annotation: Any, fn: Callable) -> Any:
    if isinstance(annotation, str):  # ``from __future__ import annotations``
        scope = {"torch": torch, "Tensor": torch.Tensor, "typing": typing, **vars(typing)}
        scope.update(getattr(fn, "__globals__", {}))
        try:
            return eval(annotation, scope)
        except Exception:
            return annotation
    return annotation


#: What ``typing.get_origin`` gives a union: ``typing.Union``, and ``X | Y`` (Python >= 3.10).
_UNIONS = (Union, getattr(types, "UnionType", Union))


def _optional_of(annotation: Any) -> Any:
    """``X`` for ``Optional[X]`` (or ``X | None``), else ``None``."""
    if typing.get_origin(annotation) in _UNIONS:
        args = tuple(a for a in typing.get_args(annotation) if a is not _NoneType)
        if len(args) == len(typing.get_args(annotation)) - 1:  # None was one of them
            # ``Optional[Number]`` is one flat Union: take ``Number`` back out of it.
            return args[0] if len(args) == 1 else Union[args]
    return None


def _schema_type(annotation: Any) -> Optional[str]:
    """The schema type of a parameter annotation, or ``None`` if unsupported."""
    inner = _optional_of(annotation)
    if inner is not None:
        base = _schema_type(inner)
        if base is None or base.endswith("?"):
            return None
        # torch 2.13 takes an Optional list of ints, floats or bools only (SUPPORTED_PARAM_TYPES)
        if base.endswith("[]") and base not in ("SymInt[]", "int[]", "float[]", "bool[]"):
            return None
        return base + "?"
    if annotation in _SCALARS:
        name = _SCALARS[annotation][0]
        return int_type() if name == "SymInt" else name
    origin = typing.get_origin(annotation)
    if origin in _SEQUENCES:
        (item,) = typing.get_args(annotation) or (None,)
        opt = _optional_of(item)
        if opt is torch.Tensor:
            return "Tensor?[]"
        if item in _SCALARS and _SCALARS[item][1]:
            return _schema_type(item) + "[]"  # type: ignore[operator]
    return None


def _return_types() -> Dict[Any, str]:
    """The return annotations torch 2.13's ``infer_schema`` takes (``SUPPORTED_RETURN_TYPES``),
    and their schema types; looked up by equality, as torch does."""
    types: Dict[Any, str] = {torch.Tensor: "Tensor", typing.List[torch.Tensor]: "Tensor[]"}
    if hasattr(list, "__class_getitem__"):  # list[torch.Tensor]: Python >= 3.9
        types[list[torch.Tensor]] = "Tensor[]"  # type: ignore[misc]
    types.update({int: int_type(), float: "float", bool: "bool", torch.types.Number: "Scalar"})
    return types


def _return_type(annotation: Any, error: Callable[[str], Exception]) -> str:
    """The schema's returns for ``annotation``, as torch 2.13 infers them: one supported type,
    or a tuple of them (``((Tensor))`` for a one-element tuple); torch's error otherwise."""
    if annotation is None:  # not ``type(None)``, which torch 2.13 refuses
        return "()"
    if annotation is inspect.Parameter.empty:
        raise error("No return type annotation was provided. Please add one.")
    types = _return_types()
    unsupported = f"Return has unsupported type {annotation}. The valid types are: {types}."
    if typing.get_origin(annotation) is not tuple:
        if annotation not in types:
            raise error(unsupported)
        return types[annotation]
    args = typing.get_args(annotation)
    if any(arg not in types for arg in args):
        raise error(unsupported)
    returns = ", ".join(types[arg] for arg in args)
    return f"(({returns}))" if len(args) == 1 else f"({returns})"


def _default_repr(value: Any) -> Optional[str]:
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, (str, torch.device)):
        return f'"{value}"'
    if isinstance(value, torch.dtype):
        return str(value)[len("torch.") :]
    return None


def infer_schema(
    prototype_function: Callable,
    /,
    *,
    mutates_args: Union[str, Iterable[str]],
    op_name: Optional[str] = None,
    tags: Any = (),
) -> str:
    """The operator schema of ``prototype_function`` from its annotations, as
    ``torch.library.infer_schema`` (``op_name`` goes first; with ``torch.Tag.inplace`` or
    ``torch.Tag.out`` in ``tags``, torch's own infer_schema infers it where it takes ``tags``).

    Example::

        >>> def f(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor: ...
        >>> infer_schema(f, mutates_args=())
        '(Tensor x, float scale=2.0) -> Tensor'
        >>> infer_schema(f, mutates_args=(), op_name="scale")
        'scale(Tensor x, float scale=2.0) -> Tensor'
    """
    _ = prototype_function.__globals__  # torch reads it first: a partial's AttributeError
    listed = tags_tuple(tags)
    if any(getattr(tag, "name", None) in ("inplace", "out") for tag in listed):
        return _torchs_own_with_tags(prototype_function, mutates_args, op_name, tuple(listed))
    schema = _inferred(prototype_function, mutates_args)
    return schema if op_name is None else op_name + schema


def _torchs_own_with_tags(
    fn: Callable, mutates_args: Any, op_name: Optional[str], tags: Tuple[Any, ...]
) -> str:
    """torch's own inference for the tags that change a schema (an inplace or out op)."""
    own = getattr(getattr(torch, "library", None), "infer_schema", None)
    if own is None or "tags" not in inspect.signature(own).parameters:
        raise NotImplementedError(
            f"infer_schema({getattr(fn, '__name__', fn)!r}): torch.Tag.inplace and torch.Tag.out "
            f"change the inferred schema, which torch {torch.__version__}'s own infer_schema "
            "cannot do; write the schema and pass it as schema="
        )
    return own(fn, mutates_args=mutates_args, op_name=op_name, tags=tags)  # type: ignore[no-any-return]


def _inferred(fn: Callable, mutates_args: Union[str, Iterable[str]]) -> str:
    sig = inspect.signature(fn)

    def error(what: str) -> ValueError:
        return ValueError(f"infer_schema(func): {what} Got func with signature {sig})")

    unknown = isinstance(mutates_args, str)
    if unknown and mutates_args != "unknown":
        raise ValueError(
            "mutates_args must either be a sequence of the names of the arguments that are "
            "mutated or the string 'unknown'. "
        )
    mutated = set() if unknown else set(mutates_args)
    params: List[str] = []
    kw_only_seen = False
    for idx, (name, param) in enumerate(sig.parameters.items()):
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise error("We do not support positional-only args, varargs, or varkwargs.")
        if param.kind is param.KEYWORD_ONLY and not kw_only_seen:
            params.append("*")
            kw_only_seen = True
        if param.annotation is inspect.Parameter.empty:
            raise error(f"Parameter {name} must have a type annotation.")
        schema_type = _schema_type(_resolve(param.annotation, fn))
        if schema_type is None:
            unsupported = f"Parameter {name} has unsupported type {param.annotation}."
            if typing.get_origin(_resolve(param.annotation, fn)) is tuple:
                raise error(unsupported + _TUPLE_HINT)
            raise error(
                f"{unsupported} The valid types are: Tensor, int, float, bool, str, "
                "torch.dtype, torch.device, torch.types.Number, their Optional forms, and "
                "Sequence/List of Tensor, Optional[Tensor], int, float, bool, torch.types.Number."
            )
        if (unknown and schema_type.startswith("Tensor")) or name in mutated:
            if not schema_type.startswith("Tensor"):
                raise error(
                    f"Parameter {name} is in mutable_args but only Tensors or collections of "
                    "Tensors can be mutated"
                )
            schema_type = f"Tensor(a{idx}!){schema_type[len('Tensor') :]}"
        if param.default is inspect.Parameter.empty:
            params.append(f"{schema_type} {name}")
        else:
            shown = _default_repr(param.default)
            if shown is None:
                raise error(
                    f"Parameter {name} has an unsupported default value type "
                    f"{type(param.default)}. Please file an issue on GitHub so we can prioritize "
                    "this."
                )
            params.append(f"{schema_type} {name}={shown}")
    missing = mutated - set(sig.parameters)
    if missing:
        raise error(
            f"{missing} in mutates_args were not found in the custom op's signature. "
            "mutates_args should contain the names of all args that the custom op mutates, or "
            "just the string 'unknown' if you don't know."
        )
    returns = _return_type(_resolve(sig.return_annotation, fn), error)
    return f"({', '.join(params)}) -> {returns}"


def schema_for_this_torch(schema: str) -> str:
    """``schema`` as this torch's parser reads it: a dtype default by its ScalarType number on
    torch 1.13-2.3 (See ``parser_reads_dtype_names``), ``SymInt`` (what torch's own inference
    writes for an ``int``) as ``int`` where the parser does not know it (1.8-1.12)."""
    if int_type() == "int":
        schema = re.sub(r"\bSymInt\b", "int", schema)
    if parser_reads_dtype_names():
        return schema

    def number(match: Any) -> str:
        code = SCALAR_TYPE_NUMBERS.get(match.group(2))
        return match.group(0) if code is None else f"{match.group(1)}={code}"

    return re.sub(r"(ScalarType\?? \w+)=(\w+)", number, schema)


def check_given_schema(name: str, schema: str, mutates_args: Union[str, Iterable[str]]) -> None:
    """torch's errors for a ``schema=`` its parser refuses, or whose mutated arguments
    (``Tensor(a!)``) are not ``mutates_args``, at definition (before anything is registered)."""
    torch._C.parse_schema(name + schema_for_this_torch(schema))  # torch's error if it cannot
    # torch 1.13's Argument has no alias_info: the written arguments read from the text.
    expected = set(re.findall(r"Tensor\([^)]*!\)\S* (\w+)", schema.rsplit("->", 1)[0]))
    if expected != set(mutates_args):
        raise ValueError(
            f"Attempted to create a custom op with `mutates_args={mutates_args}` "
            f"and `schema={schema}. The schema suggests that the op mutates {expected}"
            "which is different from what was provided to us in `mutates_args`. "
            "Please make these consistent."
        )


def spaced_schema(schema: str) -> str:
    """A ``schema=`` torch's parser took, with one space either side of its arrow, as compatfn's
    readers of the arguments and returns expect it (torch takes any spacing there).

    Example::

        >>> spaced_schema("(Tensor x)->Tensor")
        '(Tensor x) -> Tensor'
    """
    arguments, returns = schema.rsplit("->", 1)
    return f"{arguments.strip()} -> {returns.strip()}"


#: A return's alias annotation that is not a write (``Tensor(a)``, ``Tensor[](a)``): a view op.
_VIEW_RETURN = re.compile(r"Tensor(\[\])?\((?![^)]*!)[^)]*\)")


def check_no_view_returns(qualname: str, schema: str) -> None:
    """An error naming the op, at definition, for a ``schema=`` that returns a view of an input
    (``(Tensor(a) x) -> Tensor(a)``): torch's own custom_op makes such ops from ``VIEW_OPS_SINCE``
    on, and the older tiers cannot (an autograd Function cannot make its output a view)."""
    if _VIEW_RETURN.search(schema.rsplit("->", 1)[1]):
        raise NotImplementedError(
            f"{qualname}: the schema {schema!r} returns a view of an input (an alias annotation "
            f"without '!' on a return); torch's own custom_op makes view ops from torch "
            f"{VIEW_OPS_SINCE} on, torch {torch.__version__} cannot. Return a new tensor "
            "(for example `x.view(-1).clone()`) and drop the annotation from the return."
        )


def arguments_text(schema: str) -> str:
    """The text between the parentheses of ``schema``'s arguments, whatever its spacing.

    Example::

        >>> arguments_text("(Tensor x, float s=2.0)->Tensor")
        'Tensor x, float s=2.0'
    """
    return schema.rsplit("->", 1)[0].strip()[1:-1]


def schema_arguments(schema: str) -> List[str]:
    """The argument declarations of ``schema`` (``"Tensor x"``, ``"*"``, ``"int n=4"``).

    Example::

        >>> schema_arguments("(Tensor(a0!) x, *, int[] n=[1, 2]) -> Tensor")
        ['Tensor(a0!) x', '*', 'int[] n=[1, 2]']
    """
    inner = arguments_text(schema)
    parts, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    return [p for p in parts if p]


#: Schema type -> the annotation of a parameter of that type (what the short path reads).
_ANNOTATIONS = {"Tensor": torch.Tensor, "int": int, "SymInt": int, "float": float, "bool": bool}


def kernel_signature(fn: Callable) -> inspect.Signature:
    """``fn``'s signature; an empty one where Python has none (a builtin such as ``torch.sin``,
    which torch's own op takes as a kernel with an explicit ``schema=``; ``infer_schema`` has
    refused it before this where there is none)."""
    try:
        return inspect.signature(fn)
    except ValueError:
        return inspect.Signature()


def with_schema_defaults(sig: inspect.Signature, fn: Callable) -> inspect.Signature:
    """``sig`` (``fn``'s) with each str default of a ``torch.device`` parameter as the inferred
    schema holds it, a ``torch.device``: the dispatcher compares an argument with that, and
    setup_context gets it for an argument left out; the kernel still gets its own str (See
    NOTE: [arguments equal to their defaults]). An ``Optional[torch.device]``'s str default
    stays a str: no argument equals it, and setup_context gets the str (torch 2.13, measured).

    Example::

        >>> def f(x: torch.Tensor, d: torch.device = "cpu") -> torch.Tensor: ...
        >>> with_schema_defaults(inspect.signature(f), f).parameters["d"].default
        device(type='cpu')
    """

    def held(p: inspect.Parameter) -> inspect.Parameter:
        annotation = _resolve(p.annotation, fn)
        if type(p.default) is str and annotation is torch.device:
            return p.replace(default=torch.device(p.default))
        return p

    return sig.replace(parameters=[held(p) for p in sig.parameters.values()])


def schema_signature(name: str, schema: str, kernel: inspect.Signature) -> inspect.Signature:
    """The signature a call of an op with an explicit ``schema=`` binds to: the schema's
    parameter names, keyword-only ones and defaults (torch's dispatcher binds by the schema, not
    by the kernel's own signature).

    Example::

        >>> kernel = inspect.signature(lambda x, n=1: x)
        >>> schema_signature("f", "(Tensor x, *, int n=4) -> Tensor", kernel)
        <Signature (x: torch.Tensor, *, n: int = 4)>
    """
    arguments = torch._C.parse_schema(name + schema_for_this_torch(schema)).arguments
    written = schema_arguments(schema)
    star = written.index("*") if "*" in written else len(written)
    parameters = []
    for i, (argument, text) in enumerate(zip(arguments, [a for a in written if a != "*"])):
        kind = (
            inspect.Parameter.KEYWORD_ONLY if i >= star else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        default = argument.default_value if "=" in text else inspect.Parameter.empty
        schema_type = re.sub(r"\(.*?\)", "", text.split()[0])
        if schema_type.rstrip("?") == "ScalarType" and type(default) is int:
            default = DTYPE_OF_NUMBER[default]  # the parser reads a dtype default as its number
        annotation = _ANNOTATIONS.get(schema_type, inspect.Parameter.empty)
        parameters.append(
            inspect.Parameter(argument.name, kind, default=default, annotation=annotation)
        )
    return inspect.Signature(parameters, return_annotation=kernel.return_annotation)


def declared_arguments(schema: str) -> List[Tuple[str, str]]:
    """``(type, name)`` of each argument of ``schema``, in order (``*`` left out).

    Example::

        >>> declared_arguments("(Tensor(a0!) x, *, int[] n=[1, 2]) -> Tensor")
        [('Tensor(a0!)', 'x'), ('int[]', 'n')]
    """
    declared = [a.split("=", 1)[0].split() for a in schema_arguments(schema) if a != "*"]
    return [(parts[0], parts[-1]) for parts in declared]


def check_no_keyword_only_tensors(name: str, schema: str, tags: Sequence[Any]) -> None:
    """torch's refusal, at definition, of a keyword-only Tensor argument (``*, Tensor? y``) in an
    op not tagged ``out`` (torch >= 2.4's ``CustomOpDef._validate_schema``)."""
    if any(getattr(tag, "name", None) == "out" for tag in tags):
        return
    arguments = schema_arguments(schema)
    keyword_only = arguments[arguments.index("*") + 1 :] if "*" in arguments else []
    if any(argument.startswith("Tensor") for argument in keyword_only):
        raise NotImplementedError(
            "custom_op with kwarg-only Tensor args. Please make your tensors not kwarg-only. "
            f"Got: {name}{schema}"
        )


def tensor_parameters(
    fn: Callable, params: List[inspect.Parameter]
) -> Tuple[List[Tuple[int, str]], bool]:
    """The (position, name) of each parameter annotated ``Tensor``, and whether every other
    parameter is a scalar (no Optional/Sequence of Tensor, nothing unannotated): the short path
    needs that."""
    tensors, only_scalars = [], True
    for i, p in enumerate(params):
        annotation = _resolve(p.annotation, fn)
        if annotation is torch.Tensor:
            tensors.append((i, p.name))
        elif annotation not in SCALAR_TYPES:
            only_scalars = False
    return tensors, only_scalars
