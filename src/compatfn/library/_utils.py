"""Helpers shared by the op object, its generated call and opcheck: operator names, tensors in
arguments, arguments equal to their defaults, and the generated below-autograd lines (tensors as
the dispatcher sees them, torch's aliasing rule included, are ``_storage``'s)."""

from __future__ import annotations

import inspect
import keyword
import re
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import torch

from compatfn.library._dispatch_state import (
    BELOW_AUTOGRAD_GUARDS,
    GUARD_IS_CONTEXT,
    GUARDS_REUSABLE,
    BelowAutograd,
    new_below_autograd_guard,
)
from compatfn.library._facts import (
    HAS_ZERO_TENSOR,
    RESERVED_NAMESPACES,
    increment_version,
)
from compatfn.library._scalars import NUMBER_KIND

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

#: Device type -> dispatch key, where upper-casing the device type does not give it.
_DEVICE_KEYS = {"meta": "Meta", "lazy": "Lazy", "privateuseone": "PrivateUse1"}


def parse_qualname(qualname: str) -> Tuple[str, str, str]:
    """``(namespace, name, overload)`` of ``"namespace::name[.overload]"`` (overload ``""`` for
    none); torch's errors for a name that is not two parts or is in a reserved namespace (the
    parts themselves: ``check_operator_name``).

    Example::

        >>> parse_qualname("mylib::scale.Tensor")
        ('mylib', 'scale', 'Tensor')
    """
    namespace, full_name = qualname.split("::")  # Python's ValueError, as torch's custom_op
    name, _, overload = full_name.partition(".")
    if namespace in RESERVED_NAMESPACES:
        raise ValueError(
            f"{namespace} is a reserved namespace. Please try creating a library with another name."
        )
    return namespace, name, overload


def check_namespace_definable(namespace: str) -> None:
    """torch's error for the wildcard namespace ``_`` (torch 2.13's own custom_op refuses it; a
    ``torch.library.Library`` for it crashes the process on torch 1.13 and 2.0, measured)."""
    if namespace == "_":
        raise RuntimeError(
            "TORCH_LIBRARY_FRAGMENT: cannot define TORCH_LIBRARY_FRAGMENT with the wildcard "
            "namespace _ (every TORCH_LIBRARY_FRAGMENT defines operators for a distinct "
            "namespace!) Did you mean to use TORCH_LIBRARY_IMPL instead?"
        )


def check_operator_name(qualname: str, given_schema: Optional[str]) -> None:
    """torch's errors, at definition, for an operator name its schema parser refuses (``1x``,
    ``x-y``, ``if``), a ``default`` overload or a ``schema=`` naming a namespace of its own;
    compatfn's for a Python keyword the parser of an old torch lets through (generated code names
    parameters after it)."""
    namespace, name, overload = parse_qualname(qualname)
    full_name = f"{name}.{overload}" if overload else name
    if given_schema is not None:  # parsed as torch's CustomOpDef parses it
        written = torch._C.parse_schema(full_name + given_schema).name
        if "::" in written:
            raise RuntimeError(
                f"Explicitly provided namespace ({written.split('::')[0]}) in schema string does "
                f"not match namespace of enclosing TORCH_LIBRARY_FRAGMENT block ({namespace}).  "
                "Move this definition to the (unique) TORCH_LIBRARY block corresponding to this "
                "namespace (and consider deleting the namespace from your schema string.)"
            )
    # The parser reads the name first: its error for a name does not depend on the arguments
    # (which torch 1.12's parser refuses with an empty message for a SymInt default).
    torch._C.parse_schema(qualname + "() -> ()")
    if overload == "default":
        raise RuntimeError("default is not a legal overload name for aten operators")
    for what, part in (("namespace", namespace), ("name", name), ("overload name", overload)):
        if keyword.iskeyword(part):
            raise RuntimeError(
                f"custom_op({qualname!r}): the {what} {part!r} is a Python keyword, which an "
                "operator name cannot be; choose another name"
            )


def device_types_tuple(device_types: Union[str, Sequence[str], None]) -> Optional[Tuple[str, ...]]:
    """``device_types`` as a tuple (None: every device)."""
    if device_types is None:
        return None
    if isinstance(device_types, str):
        return (device_types,)
    return tuple(device_types)


def tags_tuple(tags: Any) -> Tuple[Any, ...]:
    """``tags`` as torch's ``custom_op`` keeps them: one tag or any iterable of them, the first
    of each kept (``custom_op(..., tags=(torch.Tag.pointwise,) * 2)`` has it once)."""
    if tags is None:
        return ()
    if isinstance(tags, getattr(torch, "Tag", ())):
        return (tags,)
    return tuple(dict.fromkeys(tags))


def dispatch_key(device: Optional[str]) -> str:
    """The dispatch key of a kernel for ``device`` (None: every device, as in torch)."""
    if device is None:
        return "CompositeExplicitAutograd"
    return _DEVICE_KEYS.get(device, device.upper())


def bump_version(t: torch.Tensor) -> None:
    """Record an in-place change autograd did not see (torch < 2.1: a same-value ``copy_``,
    which a ZeroTensor refuses: its version stays)."""
    if increment_version is not None:
        increment_version(t)
    elif not (HAS_ZERO_TENSOR and t._is_zerotensor()):
        with torch.no_grad():
            t.copy_(t)


# --------------------------------------------------------------------------- tensors in arguments


#: A tensor-list type in a schema, annotated (mutated: ``Tensor(a0!)[]``) or optional
#: (``Tensor?[]``, ``Tensor(a0!)?[]``).
_TENSOR_LIST_TYPE = re.compile(r"Tensor(\([^)]*\))?\??\[\]")


def schema_has_tensor_lists(schema: str) -> bool:
    """Whether ``schema`` takes or returns a list of tensors (where torch wraps an op's autograd
    Function for tensor lists).

    Example::

        >>> schema_has_tensor_lists("(Tensor(a0!)[] xs) -> ()")
        True
    """
    return _TENSOR_LIST_TYPE.search(schema) is not None


def is_tensor_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)


def flatten(values: Sequence[Any]) -> Tuple[List[Any], List[int]]:
    """Lists of tensors spliced in (autograd tracks only top-level tensors); ``-1`` marks an
    argument kept as is, ``n >= 0`` one spliced list of ``n`` items. As torch's custom_op
    flattens the arguments of its autograd Function (``torch._library.autograd``'s pytree leaf
    rule): a list is spliced when every item is a tensor, an empty list included; a list with a
    None or another value is one argument (autograd does not track its tensors)."""
    flat: List[Any] = []
    layout: List[int] = []
    for v in values:
        if isinstance(v, list) and all(isinstance(t, torch.Tensor) for t in v):
            flat.extend(v)
            layout.append(len(v))
        else:
            flat.append(v)
            layout.append(-1)
    return flat, layout


def unflatten(flat: Sequence[Any], layout: Sequence[int]) -> Tuple[Any, ...]:
    out: List[Any] = []
    i = 0
    for n in layout:
        if n < 0:
            out.append(flat[i])
            i += 1
        else:
            out.append(list(flat[i : i + n]))
            i += n
    return tuple(out)


def tensors_in(values: Iterable[Any]) -> List[torch.Tensor]:
    found: List[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


def any_requires_grad(values: Iterable[Any]) -> bool:
    """Whether a tensor among ``values`` requires grad, as torch's Autograd kernel of a custom op
    asks (``torch._C._any_requires_grad``, measured on 2.13 and 2.15): a tensor, or a list whose
    items are all tensors; a list holding a None (``Tensor?[]``) does not count.

    Example::

        >>> w = torch.ones(1, requires_grad=True)
        >>> any_requires_grad([[w], 2.0]), any_requires_grad([[w, None], 2.0])
        (True, False)
    """
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.requires_grad:
                return True
        elif (
            isinstance(v, (list, tuple))
            and all(isinstance(t, torch.Tensor) for t in v)
            and any(t.requires_grad for t in v)
        ):
            return True
    return False


def detached(output: Any) -> Any:
    """``output`` as the kernel gives it when torch runs it below autograd (no input requires
    grad): what it computed from a captured tensor that requires grad (a parameter) records no
    graph, and a tensor it returns as it is (a parameter, a leaf it made) keeps requiring grad.

    Example::

        >>> weight = torch.ones(2, requires_grad=True)
        >>> detached(torch.ones(2) * weight).requires_grad, detached(weight) is weight
        (False, True)
    """
    if isinstance(output, torch.Tensor):
        return output.detach() if output.grad_fn is not None else output
    if isinstance(output, (tuple, list)) and any(
        isinstance(o, torch.Tensor) and o.grad_fn is not None for o in output
    ):
        return type(output)(detached(o) for o in output)
    return output


# NOTE: [arguments equal to their defaults]
# The dispatcher leaves trailing arguments equal to their defaults out of a Python kernel's call
# (the kernel then gets its own default: ``-0.0`` for a ``0.0`` default arrives as ``0.0``). It
# compares the argument, converted to the schema's type, with the default as the schema holds it,
# and values of different kinds never compare equal: a ``bool`` default of an ``int`` parameter
# (``n: int = True``) is never equal to an int, an ``int`` default of a ``bool`` parameter never to
# a bool; an ``int`` default of a ``float`` parameter is equal to the same float (measured on
# torch 2.13 and 2.15 against their own custom_op). A ``Scalar`` (``torch.types.Number``) keeps
# the kind it is given: it equals a default of the same kind only (``2`` a ``2``, not ``2.0`` or
# a bool; measured on torch 2.13).


def default_elidable(default: Any, kind: Any) -> bool:
    """Whether an argument of exactly type ``kind`` can equal ``default`` as the dispatcher
    compares them (See NOTE: [arguments equal to their defaults])."""
    return type(default) is kind or (kind is float and type(default) is int)


def elidable(op: CustomOp, p: inspect.Parameter) -> bool:
    """Whether an argument of ``p``'s converted type can equal its default as the dispatcher
    compares them (See NOTE: [arguments equal to their defaults])."""
    if type(p.default) not in _ELIDABLE_DEFAULTS:
        return False
    kind = op._conversions.get(p.name, (None,))[0]  # the argument's exact type
    if kind is NUMBER_KIND:  # a Scalar, whose kind is the argument's own
        return type(p.default) in (int, float, bool)
    return kind is None or default_elidable(p.default, compared_kind(kind, p.default))


def compared_kind(kind: Any, default: Any) -> Any:
    """The exact type of an argument that can equal ``default`` where the parameter's converted
    type is ``kind``: a Scalar's own kind, and a str for an ``Optional[torch.device]``'s str
    default (the argument left out: a given one is a device, which never equals it; See
    ``with_schema_defaults``)."""
    if kind is NUMBER_KIND or (kind is torch.device and type(default) is str):
        return type(default)
    return kind


#: The types of defaults a schema can have that an argument can equal (the dispatcher compares
#: them as values).
_ELIDABLE_DEFAULTS = (int, float, bool, complex, str, list, torch.dtype, torch.device)


def elidable_tail(op: CustomOp) -> int:
    """The fewest positional arguments the dispatcher can pass ``op``'s kernel: it leaves out
    trailing arguments equal to their defaults (None included), from the last one back.

    Example: for ``(x: Tensor, n: int = 2, alpha: float = 1.0)``, 1."""
    params = [p for p in op._signature.parameters.values() if p.kind is not p.KEYWORD_ONLY]
    count = len(params)
    while count and (params[count - 1].default is None or elidable(op, params[count - 1])):
        count -= 1
    return count


def legacy_function_class(name: str, forward: Callable, backward: Callable, module: str) -> Any:
    """A legacy ``torch.autograd.Function`` named ``name`` (its autograd node is ``<name>Backward``)
    from a ``forward(ctx, ...)`` and a ``backward(ctx, *grads)``, as a hand-written one would be."""
    return type(
        name,
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "backward": staticmethod(backward),
            "__qualname__": name,
            "__module__": module,
        },
    )


def below_autograd_lines(statements: Union[str, List[str]], globals_: Dict[str, Any]) -> List[str]:
    """Generated lines running ``statements`` (``"$out = $kernel(x)"``, or a list of lines) below
    autograd, as torch's Autograd kernel runs a custom op's kernel and setup_context (See NOTE:
    [where torch's Autograd kernel runs]); ``globals_`` gets the guard's names. torch 1.8 has no
    guard in Python: the lines are ``statements`` as they are."""
    body = [statements] if isinstance(statements, str) else list(statements)
    indented = [f"    {line}" for line in body]
    if BelowAutograd is None:
        return body
    if GUARDS_REUSABLE:  # See NOTE: [reused below-autograd guards]
        globals_.update(guards=BELOW_AUTOGRAD_GUARDS, new=new_below_autograd_guard, guard=None)
        return [
            "try:",
            "    $guard = $guards.pop()",
            "except IndexError:",
            "    $guard = $new()",
            "with $guard:",
            *indented,
            "$guards.append($guard)",
        ]
    globals_["below"] = BelowAutograd
    if GUARD_IS_CONTEXT:
        return ["with $below():", *indented]
    # torch 1.13-2.0: a guard object, active while alive.
    globals_.setdefault("guard", None)
    return ["$guard = $below()", "try:", *indented, "finally:", "    del $guard"]


class Definition:
    """The state of one definition of an op, as its graphs read it in backward.

    Defining a name again makes every older op object of that name follow the newest definition
    (their ``__dict__`` becomes the newest one's), but a graph recorded before backpropagates with
    the formula of the definition that recorded it, as torch's own op does: an autograd Function
    reads its formula through a ``Definition`` sharing the state of its definition, which no
    redefinition rebinds (a registration made through an op object of that definition still
    shows).
    """

    def __init__(self, op: Any) -> None:
        self.__dict__ = op.__dict__
