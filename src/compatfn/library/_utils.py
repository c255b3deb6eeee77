"""Helpers shared by the op object, its generated call and opcheck: operator names, tensors in
arguments, torch's aliasing rule, and the argument conversions the dispatcher does."""

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

from compatfn.library._facts import (
    BELOW_AUTOGRAD_GUARDS,
    GUARD_IS_CONTEXT,
    GUARDS_REUSABLE,
    HAS_LAZY_CONJ,
    HAS_NESTED,
    HAS_ZERO_TENSOR,
    RESERVED_NAMESPACES,
    BelowAutograd,
    increment_version,
    is_alias_of,
    new_below_autograd_guard,
    storage_id,
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


# NOTE: [storage identity]
# torch's aliasing rule for custom ops (no output shares storage with an input or another output)
# compares storages. Where torch has ``torch._C.storage_id`` (1.13+) that is the identity;
# torch 1.8 has none, so the full check compares ``t.storage()._cdata`` (the address of the
# StorageImpl, measured on 1.8: the same for views, also of empty tensors); the generated call's
# quick test compares data pointers: a storage's data pointer is the data pointer of any tensor on
# it at storage offset 0, and it identifies nothing for an empty tensor (every empty storage may
# have pointer 0), so the quick test fails there and the full check decides. Meta tensors have
# no data to alias, and tensors of other layouts (sparse, mkldnn) no storage: torch 2.13's own op
# leaves both out of the rule (a sparse output equal to its sparse input passes; measured), so
# ``storage_key`` does; torch 1.8-1.12 raise for their data pointer, so there the quick test runs
# in a ``try`` (``distinct_output_test``) and the full check decides.
# ``storage_key`` applies the rule to one tensor (the full check); ``distinct_storage_source``
# writes the cheapest exact test that one output shares no storage with given tensors, for the
# op's generated call: when it fails, the call falls back to the full check.


def storage_key(t: torch.Tensor) -> Optional[int]:
    """What identifies ``t``'s storage, or None where nothing does (See NOTE: [storage
    identity])."""
    if t.is_meta or t.layout is not torch.strided:
        return None
    if storage_id is not None:
        return int(storage_id(t))
    return int(t.storage()._cdata)


def aliases_any(inputs: Iterable[Any], outputs: Iterable[Any]) -> bool:
    """Whether an output shares storage with an input or another output (torch's rule)."""
    seen = {storage_key(t) for t in tensors_in(inputs)}
    seen.discard(None)
    for o in tensors_in(outputs):
        key = storage_key(o)
        if key is None:
            continue
        if key in seen:
            return True
        seen.add(key)
    return False


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
    return kind is None or default_elidable(p.default, kind)


#: The types of defaults a schema can have that an argument can equal (the dispatcher compares
#: them as values).
_ELIDABLE_DEFAULTS = (int, float, bool, str, list, torch.dtype, torch.device)


def elidable_tail(op: CustomOp) -> int:
    """The fewest positional arguments the dispatcher can pass ``op``'s kernel: it leaves out
    trailing arguments equal to their defaults (None included), from the last one back.

    Example: for ``(x: Tensor, n: int = 2, alpha: float = 1.0)``, 1."""
    params = [p for p in op._signature.parameters.values() if p.kind is not p.KEYWORD_ONLY]
    count = len(params)
    while count and (params[count - 1].default is None or elidable(op, params[count - 1])):
        count -= 1
    return count


# NOTE: [lazy views of real tensors]
# A lazily conjugated view (``is_conj()``) exists only for complex dtypes: c10's
# ``TensorImpl::_set_conj`` asserts a complex dtype, and ``conj()`` of a real tensor returns the
# tensor itself. A lazily negated view (``is_neg()``) can be real (``z.conj().imag``). Reading
# ``dtype.is_complex`` (two attribute reads) costs less than calling ``is_conj()``, so the generated
# test asks ``is_conj()`` only of complex tensors.


# NOTE: [backends other than dense]
# torch's dispatcher picks an op's kernel by the backend of its tensors, not by their device
# type alone: a kernel registered for "cpu" serves dense (strided) CPU tensors only. A sparse,
# sparse compressed, mkldnn or quantized tensor gets the op's kernel for every device, or
# torch's "Could not run '<op>' with arguments from the 'SparseCPU' backend" where it has none;
# a nested tensor gets that error in any case (no kernel of a custom op serves its backend).
# Where several tensors differ, the backend of highest priority decides (nested, then sparse
# compressed, sparse, mkldnn, quantized: the order of c10's functionality keys). Measured on
# torch 2.13 with torch's own custom_op.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/c10/core/DispatchKey.h

#: A backend's name before the device's in its dispatch key, by priority (See NOTE: [backends
#: other than dense]).
_OTHER_BACKENDS = ("NestedTensor", "SparseCsr", "Sparse", "Mkldnn", "Quantized")
_SPARSE_COMPRESSED = frozenset(
    getattr(torch, name)
    for name in ("sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")
    if hasattr(torch, name)
)


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t`` is dense: strided, not quantized, not nested."""
    return backend_of(t) is None


def backend_of(t: torch.Tensor) -> Optional[str]:
    """The name of ``t``'s backend other than dense (``"Sparse"``), else None."""
    if HAS_NESTED and t.is_nested:
        return "NestedTensor"
    if t.layout in _SPARSE_COMPRESSED:
        return "SparseCsr"
    if t.layout is torch.sparse_coo:
        return "Sparse"
    if t.layout is not torch.strided:
        return "Mkldnn"
    return "Quantized" if t.is_quantized else None


def other_backend(tensors: Sequence[torch.Tensor]) -> Optional[str]:
    """The dispatch key (``"SparseCPU"``) of the backend other than dense of highest priority
    among ``tensors``, if any (See NOTE: [backends other than dense])."""
    found = {backend_of(t): t for t in tensors}
    for name in _OTHER_BACKENDS:
        if name in found:
            return name + dispatch_key(found[name].device.type)
    return None


def fallback_source(t: str) -> str:
    """Python source that is True when the tensor named ``t`` is one the dispatcher's fallbacks
    materialize before a kernel sees it: a lazily conjugated or negated view (See NOTE: [lazy
    views of real tensors]) or a ZeroTensor; ``"False"`` on a torch without either."""
    tests = []
    if HAS_LAZY_CONJ:
        tests.append(f"{t}.is_neg() or {t}.dtype.is_complex and {t}.is_conj()")
    if HAS_ZERO_TENSOR:
        tests.append(f"{t}._is_zerotensor()")
    return " or ".join(tests) or "False"


def distinct_storage_source(out: str, tensors: Sequence[str]) -> str:
    """Python source that is True only when the tensor ``out`` shares a storage with none of
    ``tensors`` (See NOTE: [storage identity]); it calls ``torch._C._is_alias_of`` as
    ``$alias_of`` where torch has it."""
    if not tensors:
        return "True"
    if is_alias_of is not None:  # also for tensors without storage, where storage_id raises
        return " and ".join(f"not $alias_of({out}, {t})" for t in tensors)
    # At storage offset 0 a tensor's data pointer is its storage's.
    tests = [f"not {out}.storage_offset()"]
    tests += [f"not {t}.storage_offset() and {out}.data_ptr() != {t}.data_ptr()" for t in tensors]
    return " and ".join(tests)


def _distinct_output_source(
    out: str, tensors: Sequence[str], globals_: Dict[str, Any]
) -> Tuple[str, bool]:
    """The test that ``out`` is a tensor sharing no storage with any of ``tensors``, and whether
    it may raise: where it reads data pointers (torch 1.8-1.12), a tensor without storage
    (sparse, mkldnn) makes it raise ``RuntimeError``. ``globals_`` holds ``type`` and
    ``Tensor`` and gets the names the test uses."""
    globals_["alias_of"] = is_alias_of
    test = f"$type({out}) is $Tensor and {distinct_storage_source(out, tensors)}"
    return test, bool(tensors) and is_alias_of is None


def distinct_output_test(
    out: str, tensors: Sequence[str], globals_: Dict[str, Any]
) -> Tuple[List[str], str]:
    """Generated lines, and the test after them, that is True only when ``out`` is a tensor
    sharing no storage with any of ``tensors`` (See NOTE: [storage identity]; False where a
    tensor has no storage: the full check decides)."""
    test, may_raise = _distinct_output_source(out, tensors, globals_)
    if not may_raise:
        return [], test
    globals_["distinct"] = None
    lines = ["try:", f"    $distinct = {test}", "except RuntimeError:", "    $distinct = False"]
    return lines, "$distinct"


def distinct_output_returned(
    out: str, tensors: Sequence[str], globals_: Dict[str, Any]
) -> List[str]:
    """Generated lines returning ``out`` where :func:`distinct_output_test` holds (cheaper on
    torch 1.8-1.12, whose ``try`` then holds only the test and the return)."""
    test, may_raise = _distinct_output_source(out, tensors, globals_)
    lines = [f"if {test}:", f"    return {out}"]
    if not may_raise:
        return lines
    return ["try:", *(f"    {line}" for line in lines), "except RuntimeError:", "    pass"]


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
