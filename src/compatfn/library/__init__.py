"""``compatfn.custom_op``: ``torch.library.custom_op`` on every torch from 1.8 to the newest.

Write a custom operator once, with torch 2.4's API, and run it everywhere::

    import torch
    import compatfn

    @compatfn.custom_op("mylib::scaled_sin", mutates_args=())
    def scaled_sin(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x.sin() * scale

    @scaled_sin.register_fake
    def _(x, scale=1.0):
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        x, ctx.scale = inputs
        ctx.save_for_backward(x)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos() * ctx.scale, None

    scaled_sin.register_autograd(backward, setup_context=setup_context)

What each torch gives (the tier is decided once, at import, by feature detection; ``TIER``):

* ``torch`` -- torch has ``torch.library.custom_op`` (2.4+): the op is made by torch's own
  ``custom_op`` (``_torch_tier``); the object returned shares the state of torch's ``CustomOpDef``
  in a subclass (``_torch_op``) whose eager calls skip the dispatcher where nothing needs it
  (``_torch_call``).
* ``registered`` -- torch has ``torch.library.Library`` (1.13-2.3): a real operator
  ``torch.ops.<namespace>.<name>`` (kernels per device key, the fake kernel as its ``Meta``
  kernel, autograd as an ``Autograd`` kernel running a ``compatfn.function`` that redispatches
  below autograd; ``_registration``), so the dispatcher, FakeTensor and ``torch.compile`` see one
  op. Calling the op object in plain eager code takes the same kernels without the dispatcher
  round trips (``_fast_call``).
* ``function`` -- torch 1.8 (no ``torch.library``): the same behaviour built on
  ``compatfn.function`` and per-device kernel dispatch in Python; the fake kernel runs for ``meta``
  tensors.

The modules follow torch's own ``torch/_library``: ``_facts``, ``_dispatch_state`` and
``_schema_facts`` (every torch fact), ``_infer_schema``, ``_returns`` (the schema's returns),
``_custom_ops`` (the op object), ``_registration`` (the dispatcher), ``_autograd``,
``_fast_call`` (the generated call), ``_convert`` (argument conversions), ``_autocast``,
``_opcheck``, ``_torch_tier``, ``_torch_call`` and ``_torch_replay`` (torch >= 2.4).
Public here besides ``custom_op`` (which ``compatfn`` re-exports): ``CustomOp``, ``TIER``,
``infer_schema``, ``opcheck`` (also ``compatfn.testing.opcheck``), ``OpCheckError`` and the
functions taking an op by name, ``register_kernel``, ``register_fake``, ``register_autograd``,
``register_autocast``, ``register_vmap``, ``register_torch_dispatch``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Union

import torch

from compatfn.library._custom_ops import OPS, CustomOp
from compatfn.library._facts import (
    HAS_LIBRARY,
    HAS_META_DEVICE,
    HAS_TORCH_CUSTOM_OP,
    HAS_TORCH_OPCHECK,
    TIER,
)
from compatfn.library._infer_schema import infer_schema
from compatfn.library._opcheck import DEFAULT_TEST_UTILS, OpCheckError, opcheck
from compatfn.library._torch_tier import define_with_torch
from compatfn.library._utils import device_types_tuple, parse_qualname, tags_tuple

# What ``compatfn`` itself re-exports; the other public names (module docstring) are used from
# this module.
__all__ = ["custom_op"]

_REEXPORTED = (
    CustomOp,
    DEFAULT_TEST_UTILS,
    HAS_LIBRARY,
    HAS_META_DEVICE,
    HAS_TORCH_CUSTOM_OP,
    HAS_TORCH_OPCHECK,
    OpCheckError,
    infer_schema,
    opcheck,
)


def custom_op(
    name: str,
    fn: Optional[Callable] = None,
    /,
    *,
    mutates_args: Union[str, Iterable[str]],
    device_types: Union[str, Sequence[str], None] = None,
    schema: Optional[str] = None,
    tags: Any = None,
) -> Any:
    """Make ``fn`` a custom operator ``name`` (``"namespace::opname"``) on every torch.

    The signature and behaviour of ``torch.library.custom_op``: on torch >= 2.4 this *is* that
    function (torch's ``CustomOpDef`` is returned); on older torch a :class:`CustomOp` with the
    same methods (``register_kernel``, ``register_fake``, ``register_autograd``,
    ``register_vmap``, ``register_autocast``). See :data:`TIER`.

    Example::

        @compatfn.custom_op("mylib::add_one_", mutates_args={"x"})
        def add_one_(x: torch.Tensor) -> None:
            x.add_(1)
    """
    return _custom_op(name, fn, mutates_args, device_types, schema, TIER, tags)


def custom_op_note() -> str:
    """How ``custom_op`` calls run on this torch, where that differs from its tier's usual way
    (torch >= 2.4: torch's private contract broken, so torch's own op objects untouched; torch >=
    2.1: a below-autograd guard made per call, See NOTE: [reused below-autograd guards]; ""
    otherwise, or before any op was defined)."""
    from compatfn.library._dispatch_state import (
        GUARD_IS_CONTEXT,
        GUARDS_REUSABLE,
    )
    from compatfn.library._torch_op import CONTRACT

    notes = []
    problem = CONTRACT["problem"] if TIER == "torch" else None
    if problem:
        notes.append(
            f"torch's own op objects, untouched (every call through the dispatcher): {problem}"
        )
    if GUARD_IS_CONTEXT and not GUARDS_REUSABLE:  # torch >= 2.1: never the function tier
        notes.append(
            "a below-autograd guard made per call (torch's _ExcludeDispatchKeyGuard cannot stand "
            "for _AutoDispatchBelowAutograd here): exact, slower"
        )
    return "; ".join(notes)


def _custom_op(
    name: str,
    fn: Optional[Callable],
    mutates_args: Union[str, Iterable[str]],
    device_types: Union[str, Sequence[str], None],
    schema: Optional[str],
    tier: str,
    tags: Any = None,
) -> Any:
    """:func:`custom_op` on a given tier (tests run the older tiers on new torch too)."""
    if tier == "registered" and not HAS_LIBRARY:
        raise RuntimeError(f"torch {torch.__version__} has no torch.library.Library")

    def make(f: Callable) -> Any:
        if tier == "torch":
            return define_with_torch(name, f, mutates_args, device_types, schema, tags)
        return CustomOp(
            name,
            f,
            mutates_args,
            device_types_tuple(device_types),
            schema,
            tier == "registered",
            tags_tuple(tags),
        )

    return make if fn is None else make(fn)


# --------------------------------------------------------------------------- ops by name


def _op_named(qualname: str) -> CustomOp:
    """The op compatfn's tiers defined as ``qualname``; torch's error for an unknown one."""
    parse_qualname(qualname)
    op = OPS.get(qualname)
    if op is None:  # torch's error type and first words
        raise RuntimeError(
            f"operator {qualname} does not exist: no operator of that name was defined with "
            f"compatfn.custom_op on torch {torch.__version__} (ops defined otherwise need "
            "torch.library on torch >= 2.4)"
        )
    return op


#: What torch's register functions take besides names and op objects.
_OpOverload: Any = getattr(torch._ops, "OpOverload", ())
_CustomOpDef: Any = getattr(
    getattr(getattr(torch, "_library", None), "custom_ops", None), "CustomOpDef", ()
)


def _is_custom_op_def(op: Any) -> bool:
    """An op object made by ``torch.library.custom_op`` (torch >= 2.4; compatfn's too)."""
    return isinstance(op, _CustomOpDef)


def _is_torch_operator(op: Any) -> bool:
    """An ``OpOverload`` (``torch.ops.ns.op.default``) that torch's functions take (2.4+)."""
    return HAS_TORCH_CUSTOM_OP and isinstance(op, torch._ops.OpOverload)


def _name_of(op: Any, function: str) -> Any:
    """``"ns::op[.overload]"`` for an ``OpOverload`` of an op compatfn's tiers defined, or any
    on torch < 2.4 (by name, as torch's functions take it); else ``op`` itself: a name or an op
    object (compatfn's or torch's ``CustomOpDef``). Anything else is torch's ``ValueError``
    (``function``: the public function's name)."""
    if isinstance(op, (str, CustomOp)) or _is_custom_op_def(op):
        return op
    if not isinstance(op, _OpOverload):
        raise ValueError(f"{function}({op}): got unexpected type for op: {type(op)}")
    schema = op._schema
    overload = schema.overload_name
    name = schema.name + (f".{overload}" if overload else "")
    return name if name in OPS or not HAS_TORCH_CUSTOM_OP else op


def _registered(function: str, op: Any, args: tuple, lib: Any) -> Any:
    """torch.library's ``function`` (a register function) for ``op`` (after ``_name_of``): the
    method of that name of the op compatfn's tiers defined under a name (or the error for an
    unknown one, torch < 2.4); torch's own function for any other name or an ``OpOverload``
    (torch >= 2.4; where that torch has no such function, the same AttributeError); else the op
    object's method."""
    if isinstance(op, str) and (op in OPS or not HAS_TORCH_CUSTOM_OP):
        return getattr(_op_named(op), function)(*args)
    if isinstance(op, str) or _is_torch_operator(op):
        return getattr(torch.library, function)(op, *args, **_lib(lib))
    return getattr(op, function)(*args)


def _lib(lib: Any) -> Dict[str, Any]:
    """The ``lib=`` keyword for torch's register functions: a ``torch.library.Library`` holds
    what they register for ops torch did not make with ``custom_op`` (torch ignores it for those
    ops, and so does compatfn for its own)."""
    return {} if lib is None else {"lib": lib}


def register_kernel(
    op: Union[str, Any],
    device_types: Union[str, Sequence[str], None],
    func: Optional[Callable] = None,
    /,
    *,
    lib: Any = None,
) -> Any:
    """``torch.library.register_kernel`` on every torch, for ops made by :func:`custom_op`.

    Example: ``register_kernel("mylib::scaled_sin", "cpu", lambda x, scale=1.0: x.sin())``.
    """
    op = _name_of(op, "register_kernel")
    extra = () if func is None else (func,)
    return _registered("register_kernel", op, (device_types, *extra), lib)


def register_fake(
    op: Union[str, Any],
    func: Optional[Callable] = None,
    /,
    *,
    lib: Any = None,
    _stacklevel: int = 1,
    allow_override: bool = True,
) -> Any:
    """``torch.library.register_fake`` on every torch, for ops made by :func:`custom_op`.

    Example: ``register_fake("mylib::scaled_sin", lambda x, scale=1.0: torch.empty_like(x))``.
    """
    op = _name_of(op, "register_fake")
    # torch's own keywords, passed on where torch registers (its releases without them refuse);
    # ``_stacklevel`` (where torch records the registration) counts this function's frame.
    keywords = {**_lib(lib), **({} if allow_override else {"allow_override": False})}
    keywords["_stacklevel"] = _stacklevel + 1
    if not isinstance(op, str):
        if _is_torch_operator(op):
            return torch.library.register_fake(op, func, **keywords)  # type: ignore[attr-defined]
        return op.register_fake if func is None else op.register_fake(func)
    if op not in OPS and HAS_TORCH_CUSTOM_OP:
        return torch.library.register_fake(op, func, **keywords)  # type: ignore[attr-defined]
    target = _op_named(op)
    return target.register_fake if func is None else target.register_fake(func)


def register_autograd(
    op: Union[str, Any],
    backward: Callable,
    /,
    *,
    setup_context: Optional[Callable] = None,
    lib: Any = None,
) -> None:
    """``torch.library.register_autograd`` on every torch, for ops made by :func:`custom_op`.

    Example: ``register_autograd("mylib::scaled_sin", backward, setup_context=setup_context)``.
    """
    op = _name_of(op, "register_autograd")
    if _is_torch_operator(op):
        return torch.library.register_autograd(  # type: ignore[attr-defined]
            op, backward, setup_context=setup_context, **_lib(lib)
        )
    if not isinstance(op, str):
        return op.register_autograd(backward, setup_context=setup_context)
    if op not in OPS and HAS_TORCH_CUSTOM_OP:
        return torch.library.register_autograd(  # type: ignore[attr-defined]
            op, backward, setup_context=setup_context, **_lib(lib)
        )
    return _op_named(op).register_autograd(backward, setup_context=setup_context)


def register_autocast(
    op: Union[str, Any], device_type: str, cast_inputs: torch.dtype, /, *, lib: Any = None
) -> Any:
    """``torch.library.register_autocast`` on every torch, for ops made by :func:`custom_op`.

    Example: ``register_autocast("mylib::scaled_sin", "cpu", torch.float64)``.
    """
    op = _name_of(op, "register_autocast")
    return _registered("register_autocast", op, (device_type, cast_inputs), lib)


def register_vmap(
    op: Union[str, Any], func: Optional[Callable] = None, /, *, lib: Any = None
) -> Any:
    """``torch.library.register_vmap`` (torch >= 2.5); on older torch the op's
    ``register_vmap``, which explains that the torch cannot vmap a custom operator.

    Example: ``register_vmap("mylib::scaled_sin", lambda info, dims, x, scale: ...)``.
    """
    return _registered("register_vmap", _name_of(op, "register_vmap"), (func,), lib)


def register_torch_dispatch(
    op: Union[str, Any],
    torch_dispatch_class: Any,
    func: Optional[Callable] = None,
    /,
    *,
    lib: Any = None,
) -> Any:
    """``torch.library.register_torch_dispatch`` (torch >= 2.5); on older torch the op's
    ``register_torch_dispatch``, which explains that the torch cannot.

    Example: ``register_torch_dispatch("mylib::scaled_sin", MyMode, lambda mode, func, types,
    args, kwargs: ...)``.
    """
    extra = () if func is None else (func,)
    op = _name_of(op, "register_torch_dispatch")
    return _registered("register_torch_dispatch", op, (torch_dispatch_class, *extra), lib)
