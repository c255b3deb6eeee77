"""``compatfn.custom_op``: ``torch.library.custom_op`` on every torch from 1.8 to the newest.

Write a custom operator once, with torch 2.4's API, and run it everywhere::

    import numpy as np
    import torch
    import compatfn

    @compatfn.custom_op("mylib::numpy_sin", mutates_args=())
    def numpy_sin(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.sin(x.cpu().numpy())).to(x.device)

    @numpy_sin.register_fake
    def _(x):
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    numpy_sin.register_autograd(backward, setup_context=setup_context)

What each torch gives (the tier is decided once, at import of this module, by feature detection):

* ``torch`` -- torch has ``torch.library.custom_op`` (2.4+): the object returned is torch's own
  ``CustomOpDef``; compatfn adds nothing to the call.
* ``registered`` -- torch has ``torch.library.Library`` (1.13-2.3): a real operator
  ``torch.ops.<namespace>.<name>`` (kernels per device key, the fake kernel as its ``Meta``
  kernel, autograd as an ``Autograd`` kernel running a ``compatfn.function`` that redispatches
  below autograd), so the dispatcher, FakeTensor and ``torch.compile`` see one op. Calling the op
  object in plain eager code takes the same kernels without the dispatcher round trips.
* ``function`` -- torch 1.8 (no ``torch.library``): the same behaviour built on
  ``compatfn.function`` and per-device kernel dispatch in Python; the fake kernel runs for ``meta``
  tensors.
"""

from __future__ import annotations

import collections.abc
import functools
import importlib
import importlib.util
import inspect
import keyword
import linecache
import re
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from compatfn.core import (
    CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS,
    HAS_FUNCTORCH,
    HAS_IS_COMPILING,
    _fresh_name,
    _legacy_forward,
    dynamo_unsupported,
    function,
    is_compiling,
    transforms_active,
)

# What ``compatfn`` itself re-exports; ``CustomOp``, ``TIER``, ``infer_schema`` and ``opcheck``
# (also ``compatfn.testing.opcheck``) are used from this module.
__all__ = ["custom_op"]

# --------------------------------------------------------------------------- torch facts
# Each is detected from the running torch, once, at import.

#: ``torch.library.custom_op`` (torch >= 2.4, https://github.com/pytorch/pytorch/pull/122344):
#: hand everything to torch.
HAS_TORCH_CUSTOM_OP = hasattr(getattr(torch, "library", None), "custom_op")
#: ``torch.library.Library`` with ``define`` and the below-autograd redispatch guard
#: ``torch._C._AutoDispatchBelowAutograd`` (torch >= 1.13): operators can be defined from Python
#: and given an Autograd kernel. torch 1.8 has no ``torch.library``; torch 1.12 has ``Library``
#: but not the guard (and its schema parser rejects schemas 1.13+ accept), so it takes the
#: ``function`` tier (measured: the registered tier failed there).
HAS_LIBRARY = (
    hasattr(getattr(torch, "library", None), "Library")
    and hasattr(getattr(torch, "library", None), "define")
    and hasattr(torch._C, "_AutoDispatchBelowAutograd")
)
#: torch's ``opcheck`` as a public API (torch >= 2.4); torch 2.1-2.3 ship the same function under
#: ``torch.testing._internal.optests`` (https://github.com/pytorch/pytorch/pull/103063).
HAS_TORCH_OPCHECK = hasattr(getattr(torch, "library", None), "opcheck")
#: ``torch.autograd.graph.increment_version`` (torch >= 2.1): bump the version counter of an
#: argument a kernel mutated outside torch (NumPy), as torch >= 2.4 does for declared mutations.
_increment_version: Optional[Callable[[Any], None]] = getattr(
    getattr(torch.autograd, "graph", None), "increment_version", None
)


def _bump_version(t: torch.Tensor) -> None:
    """Record an in-place change autograd did not see (torch < 2.1: a same-value ``copy_``)."""
    if _increment_version is not None:
        _increment_version(t)
    else:
        with torch.no_grad():
            t.copy_(t)


def _probe_meta_device() -> bool:
    try:
        torch.empty(0, device="meta")
    except RuntimeError:  # torch 1.8 (measured)
        return False
    return True


#: The ``meta`` device (not on torch 1.8): fake kernels run for meta tensors.
HAS_META_DEVICE = _probe_meta_device()
#: ``torch._C._storage_id`` (absent on torch 1.8, present on 1.13 and later; measured): the
#: identity of a tensor's storage, which torch's own aliasing check compares. Without it compatfn
#: compares the storages' data pointers. See NOTE: [storage identity].
_storage_id: Optional[Callable[[torch.Tensor], int]] = getattr(torch._C, "_storage_id", None)
#: ``torch._C._is_alias_of(a, b)`` (torch >= 1.13; measured): whether two tensors share a storage,
#: in one call (two ``_storage_id`` calls cost more, measured with callgrind on 1.13).
_is_alias_of: Optional[Callable[[torch.Tensor, torch.Tensor], bool]] = getattr(
    torch._C, "_is_alias_of", None
)

#: Below-autograd redispatch guard (every torch with ``torch.library``); a context manager on
#: torch >= 2.1, a plain guard object (active while alive) on 1.13 and 2.0 (measured).
_BelowAutograd: Any = getattr(torch._C, "_AutoDispatchBelowAutograd", None)
_GUARD_IS_CONTEXT = hasattr(_BelowAutograd, "__enter__")
#: torch's C-level ``Function.apply``: no binding, no transform checks (the caller has done them).
_C_APPLY = torch._C._FunctionBase.__dict__["apply"]

#: Which implementation :func:`custom_op` uses on the running torch (see the module docstring).
TIER = "torch" if HAS_TORCH_CUSTOM_OP else ("registered" if HAS_LIBRARY else "function")

_dispatch_mode_count: Callable[[], int] = getattr(
    torch._C,
    "_len_torch_dispatch_stack",
    lambda: int(getattr(torch._C, "_get_torch_dispatch_mode", lambda: None)() is not None),
)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
#: Device type -> dispatch key, where upper-casing the device type does not give it.
_DEVICE_KEYS = {"meta": "Meta", "lazy": "Lazy", "privateuseone": "PrivateUse1"}

#: What sends a registered op's call through the dispatcher: tracing, dispatch modes and
#: torch.func transforms, in the order they are asked (``is_compiling`` first: under dynamo it
#: answers before the C probes, which dynamo 2.1 cannot trace), leaving out those this torch
#: cannot answer True (nothing compiles before torch 2.0).
_DISPATCHER_PROBES: Tuple[Callable[[], Any], ...] = tuple(
    probe
    for probe, present in (
        (is_compiling, HAS_IS_COMPILING),
        (_dispatch_mode_count, True),
        (transforms_active, HAS_FUNCTORCH),
    )
    if present
)


def _needs_dispatcher() -> bool:
    """Whether a call of a registered op must go through the dispatcher (tracing, modes,
    transforms): see ``_DISPATCHER_PROBES``."""
    for probe in _DISPATCHER_PROBES:  # noqa: SIM110 (dynamo unrolls any(...) without stopping)
        if probe():
            return True
    return False


def _dispatch_key(device: Optional[str]) -> str:
    """The dispatch key of a kernel for ``device`` (None: every device, as in torch)."""
    if device is None:
        return "CompositeExplicitAutograd"
    return _DEVICE_KEYS.get(device, device.upper())


# --------------------------------------------------------------------------- schema inference

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
}
_SEQUENCES = (list, collections.abc.Sequence, typing.List, typing.Sequence)


@functools.lru_cache(maxsize=None)
def _int_type() -> str:
    """``SymInt`` where this torch's schema parser knows it, else ``int`` (old releases)."""
    try:
        torch._C.parse_schema("f(SymInt x) -> ()")
    except RuntimeError:
        return "int"
    return "SymInt"


def _resolve(annotation: Any, fn: Callable) -> Any:
    if isinstance(annotation, str):  # ``from __future__ import annotations``
        scope = {"torch": torch, "Tensor": torch.Tensor, "typing": typing, **vars(typing)}
        scope.update(getattr(fn, "__globals__", {}))
        try:
            return eval(annotation, scope)
        except Exception:
            return annotation
    return annotation


def _optional_of(annotation: Any) -> Any:
    """``X`` for ``Optional[X]``, else ``None``."""
    if typing.get_origin(annotation) is Union:
        args = [a for a in typing.get_args(annotation) if a is not _NoneType]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0]
    return None


def _schema_type(annotation: Any) -> Optional[str]:
    """The schema type of a parameter annotation, or ``None`` if unsupported."""
    inner = _optional_of(annotation)
    if inner is not None:
        base = _schema_type(inner)
        return None if base is None or base.endswith("?") else base + "?"
    if annotation in _SCALARS:
        name = _SCALARS[annotation][0]
        return _int_type() if name == "SymInt" else name
    origin = typing.get_origin(annotation)
    if origin in _SEQUENCES:
        (item,) = typing.get_args(annotation) or (None,)
        opt = _optional_of(item)
        if opt is torch.Tensor:
            return "Tensor?[]"
        if item in _SCALARS and _SCALARS[item][1]:
            return _schema_type(item) + "[]"  # type: ignore[operator]
    return None


def _return_type(annotation: Any, error: Callable[[str], Exception]) -> str:
    if annotation is None or annotation is _NoneType:
        return "()"
    if annotation is inspect.Parameter.empty:
        raise error("No return type annotation was provided. Please add one.")
    if typing.get_origin(annotation) in (tuple, typing.Tuple):
        parts = [_return_type(a, error) for a in typing.get_args(annotation)]
        return "(" + ", ".join(parts) + ")"
    if (
        annotation in (torch.Tensor, int, float, bool)
        or typing.get_origin(annotation) in _SEQUENCES
    ):
        found = _schema_type(annotation)
        if found is not None and "?" not in found:
            return found
    raise error(f"Return has unsupported type {annotation}.")


def _default_repr(value: Any) -> Optional[str]:
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, (str, torch.device)):
        return f'"{value}"'
    if isinstance(value, torch.dtype):
        return str(value)[len("torch.") :]
    return None


def infer_schema(fn: Callable, mutates_args: Union[str, Iterable[str]]) -> str:
    """The operator schema of ``fn`` from its annotations, as ``torch.library.infer_schema``.

    Example::

        >>> def f(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor: ...
        >>> infer_schema(f, mutates_args=())
        '(Tensor x, float scale=2.0) -> Tensor'
    """
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
            raise error(
                f"Parameter {name} has unsupported type {param.annotation}. The valid types "
                "are: Tensor, int, float, bool, str, torch.dtype, torch.device, their Optional "
                "forms, and Sequence/List of Tensor, Optional[Tensor], int, float, bool."
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
                    f"Parameter {name} has an unsupported default value type {type(param.default)}."
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


def _parse_qualname(qualname: str) -> Tuple[str, str]:
    parts = qualname.split("::")
    if len(parts) != 2 or not all(parts):
        raise ValueError(
            f'Expected `qualname` to be of the form "namespace::name", but got {qualname}. The '
            "qualname passed to the torch.library APIs must consist of a namespace and a name, "
            "e.g. aten::sin"
        )
    return parts[0], parts[1]


def _device_types(device_types: Union[str, Sequence[str], None]) -> Optional[Tuple[str, ...]]:
    if device_types is None:
        return None
    if isinstance(device_types, str):
        return (device_types,)
    return tuple(device_types)


# --------------------------------------------------------------------------- tensor helpers


def _is_tensor_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)


def _flatten(values: Sequence[Any]) -> Tuple[List[Any], List[int]]:
    """Lists of tensors spliced in (autograd tracks only top-level tensors); ``-1`` marks an
    argument kept as is, ``n >= 0`` one spliced list of ``n`` items."""
    flat: List[Any] = []
    layout: List[int] = []
    for v in values:
        if _is_tensor_list(v):
            flat.extend(v)
            layout.append(len(v))
        else:
            flat.append(v)
            layout.append(-1)
    return flat, layout


def _unflatten(flat: Sequence[Any], layout: Sequence[int]) -> Tuple[Any, ...]:
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


def _tensors_in(values: Iterable[Any]) -> List[torch.Tensor]:
    found: List[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


# NOTE: [storage identity]
# torch's aliasing rule for custom ops (no output shares storage with an input or another output)
# compares storages. Where torch has ``torch._C._storage_id`` (1.13+) that is the identity;
# torch 1.8 has none, so compatfn compares the storages' data pointers: a storage's data pointer
# is the data pointer of any tensor on it at storage offset 0, and it identifies nothing for an
# empty tensor (every empty storage may have pointer 0). Meta tensors have no data to alias.
# ``_storage_key`` applies the rule to one tensor (the full check); ``_distinct_storage_source``
# writes the cheapest exact test that one output shares no storage with given tensors, for the
# op's generated call: when it fails, the call falls back to the full check.


def _storage_key(t: torch.Tensor) -> Optional[int]:
    """What identifies ``t``'s storage, or None where nothing does (See NOTE: [storage
    identity])."""
    if t.is_meta:
        return None
    if _storage_id is not None:
        return int(_storage_id(t))
    if not t.numel():
        return None
    return int(t.data_ptr() - t.storage_offset() * t.element_size())


def _distinct_storage_source(out: str, tensors: Sequence[str], names: Dict[str, str]) -> str:
    """Python source that is True only when the tensor ``out`` shares a storage with none of
    ``tensors`` (See NOTE: [storage identity]). ``names`` maps ``"alias_of"`` and
    ``"storage_id"`` to the names the generated code gives those torch functions."""
    if not tensors:
        return "True"
    if _is_alias_of is not None and len(tensors) == 1:
        return f"not {names['alias_of']}({out}, {tensors[0]})"
    if _storage_id is not None:
        key = names["storage_id"]
        return " and ".join(f"{key}({out}) != {key}({t})" for t in tensors)
    # At storage offset 0 a tensor's data pointer is its storage's.
    tests = [f"not {out}.storage_offset()"]
    tests += [f"not {t}.storage_offset() and {out}.data_ptr() != {t}.data_ptr()" for t in tensors]
    return " and ".join(tests)


# --------------------------------------------------------------------------- the op object


class _Call:
    """The non-tensor part of one call, handed through the autograd Function."""

    __slots__ = ("keyword_only", "layout")

    def __init__(self, layout: List[int], keyword_only: Dict[str, Any]) -> None:
        self.layout = layout
        self.keyword_only = keyword_only


class CustomOp:
    """A custom operator made by :func:`custom_op` on torch < 2.4 (torch's own object on 2.4+).

    Call it like the function it was made from; register kernels and formulas with the same
    methods as torch's ``CustomOpDef``.

    Example::

        >>> @compatfn.custom_op("mylib::scale", mutates_args=())
        ... def scale(x: torch.Tensor, s: float = 2.0) -> torch.Tensor:
        ...     return x * s
        >>> scale(torch.ones(2), s=3.0)
        tensor([3., 3.])
    """

    def __init__(
        self,
        qualname: str,
        fn: Callable,
        mutates_args: Union[str, Iterable[str]],
        device_types: Optional[Tuple[str, ...]],
        schema: Optional[str],
        registered: bool,
    ) -> None:
        self._namespace, self._name = _parse_qualname(qualname)
        self._qualname = qualname
        self._schema = schema if schema is not None else infer_schema(fn, mutates_args)
        self._signature = inspect.signature(fn)
        params = list(self._signature.parameters.values())
        self._positional = [p.name for p in params if p.kind is not p.KEYWORD_ONLY]
        self._keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        self._mutated = self._mutated_positions(mutates_args)
        self._kernels: Dict[Optional[str], Callable] = {}
        for device in device_types or (None,):
            self._kernels[device] = fn
        self._fake: Optional[Callable] = None
        self._backward: Optional[Callable] = None
        self._setup_context: Optional[Callable] = None
        self._vmap: Optional[Callable] = None
        self._autocast: Dict[str, torch.dtype] = {}
        self.__name__ = self._name
        self.__qualname__ = self._name
        self.__doc__ = fn.__doc__
        self.__module__ = getattr(fn, "__module__", __name__)
        self.__wrapped__ = fn
        self._eager_fn = _autograd_function(self, dispatched=False)
        self._tensor_params, self._only_tensors_and_scalars = _tensor_parameters(fn, params)
        self._library: Any = None
        self._opoverload: Any = None
        self._registered_keys: set = set()
        if registered:
            self._register_to_dispatcher(device_types)
        # A class of its own, whose __call__ is the op's call. See NOTE: [the op's call].
        self.__class__ = type(
            "CustomOp", (type(self),), {"__module__": __name__, "__qualname__": "CustomOp"}
        )
        self._regenerate_call()

    def __repr__(self) -> str:
        return f"<compatfn.CustomOp({self._qualname}{self._schema.split(' ->')[0]})>"

    # ---------------------------------------------------------------- calling

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the operator. Each op made by :func:`custom_op` replaces this with a call that has
        the op's own signature (See NOTE: [the op's call])."""
        inputs, keyword_only = self._bind(args, kwargs)
        return self._general_call(inputs, keyword_only)

    def _general_call(self, inputs: tuple, keyword_only: Dict[str, Any]) -> Any:
        """Every call the short path does not take: through the dispatcher where something needs
        it (tracing, modes, transforms, tensor subclasses), else the kernels through autograd."""
        self._check_tensor_arguments(inputs, keyword_only)
        if self._opoverload is not None and not self._eager_ok(inputs, keyword_only):
            return self._opoverload(*inputs, **keyword_only)
        return self._apply(inputs, keyword_only, self._eager_fn)

    def _short_path_ok(self) -> bool:
        """Whether the op is simple enough for the short path (See NOTE: [the op's call])."""
        return (
            not self._keyword_only
            and not self._mutated
            and not self._autocast
            and "[]" not in self._schema
            and "Tensor?" not in self._schema
            and list(self._kernels) == [None]
            and self._kernels[None] is self.__wrapped__  # its signature is the op's
            and self._only_tensors_and_scalars
            and _returns_only_tensors(self._schema)
        )

    def _check_tensor_arguments(self, inputs: tuple, keyword_only: Dict[str, Any]) -> None:
        """torch's error for a ``Tensor`` parameter given something else; objects that take
        part in ``__torch_function__`` (torch.fx proxies) pass."""
        for i, name in self._tensor_params:
            value = inputs[i] if i < len(inputs) else keyword_only[name]
            if not isinstance(value, torch.Tensor) and not hasattr(value, "__torch_function__"):
                raise RuntimeError(
                    f"{self._qualname}() Expected a value of type 'Tensor' for argument "
                    f"'{name}' but instead found type '{type(value).__name__}'."
                )

    def _regenerate_call(self) -> None:
        """The op's call as it is registered now (See NOTE: [the op's call]); run again by every
        registration."""
        type(self).__call__ = _generated_call(self)  # type: ignore[method-assign]

    def _eager_ok(self, inputs: tuple, keyword_only: Dict[str, Any]) -> bool:
        """Whether a call may skip the dispatcher: plain tensors, no tracing, modes, transforms."""
        if _needs_dispatcher():
            return False
        for t in _tensors_in(inputs):
            if type(t) not in _PLAIN_TENSORS:
                return False
        return all(type(t) in _PLAIN_TENSORS for t in _tensors_in(keyword_only.values()))

    def _bind(self, args: tuple, kwargs: dict) -> Tuple[tuple, Dict[str, Any]]:
        """Full positional inputs (defaults filled) and the keyword-only ones."""
        if not kwargs and len(args) == len(self._positional) and not self._keyword_only:
            return args, {}
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self._qualname}: {exc}") from None
        bound.apply_defaults()
        values = bound.arguments
        return (
            tuple(values[n] for n in self._positional),
            {n: values[n] for n in self._keyword_only},
        )

    def _apply(self, inputs: tuple, keyword_only: Dict[str, Any], fn: Any) -> Any:
        autocast = self._autocast_dtype(inputs)
        if autocast is not None:
            return self._call_autocast(inputs, keyword_only, autocast)
        if torch.is_grad_enabled() and any(t.requires_grad for t in _tensors_in(inputs)):
            flat, layout = _flatten(inputs)
            return fn.apply(_Call(layout, keyword_only), *flat)
        if fn is self._eager_fn:
            return self._run_kernel(inputs, keyword_only)
        return _below_autograd(self._opoverload, inputs, keyword_only)

    def _autocast_dtype(self, inputs: tuple) -> Optional[torch.dtype]:
        if not self._autocast:
            return None
        for device_type, dtype in self._autocast.items():
            enabled = (
                torch.is_autocast_enabled()
                if device_type == "cuda"
                else getattr(torch, "is_autocast_cpu_enabled", lambda: False)()
            )
            if enabled:
                return dtype
        return None

    def _call_autocast(self, inputs: tuple, keyword_only: Dict[str, Any], dtype: Any) -> Any:
        def cast(v: Any) -> Any:
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                return v.to(dtype)
            if _is_tensor_list(v):
                return [cast(t) for t in v]
            return v

        cast_inputs = tuple(cast(v) for v in inputs)
        devices = {"cuda" if t.is_cuda else "cpu" for t in _tensors_in(inputs)}
        with torch.autocast(devices.pop() if len(devices) == 1 else "cpu", enabled=False):
            return self(*cast_inputs, **keyword_only)

    def _kernel_for(self, inputs: tuple) -> Callable:
        tensors = _tensors_in(inputs)
        device = tensors[0].device.type if tensors else "cpu"
        if device == "meta":
            return self._meta_kernel_for()
        kernel = self._kernels.get(device, self._kernels.get(None))
        if kernel is None:
            have = ", ".join(sorted(str(k) for k in self._kernels)) or "none"
            raise NotImplementedError(
                f"{self._qualname}: no kernel for device type {device!r} (registered: {have}). "
                f"Add one with @{self._name}.register_kernel({device!r})."
            )
        return kernel

    def _meta_kernel_for(self) -> Callable:
        """The fake kernel, else a kernel registered for ``"meta"``, else torch's error (the
        device-generic kernel never runs for meta tensors, as on torch >= 2.4)."""
        kernel = self._fake or self._kernels.get("meta")
        if kernel is None:
            raise RuntimeError(
                f"There was no fake impl registered for {self!r}. This is necessary for "
                f"torch.compile/export/fx tracing to work. Please use "
                f"`{self._name}.register_fake` to add an fake impl."
            )
        return kernel

    def _run_kernel(self, inputs: tuple, keyword_only: Dict[str, Any]) -> Any:
        kernel = self._kernel_for(inputs)
        mutated = self._mutated_tensors(inputs) if kernel is not self._fake else []
        versions = [t._version for t in mutated]
        output = kernel(*inputs, **keyword_only)
        if kernel is not self._fake:
            self._check_no_alias(inputs, output)
            for t, version in zip(mutated, versions):
                if t._version == version:  # mutated outside torch (NumPy): tell autograd
                    _bump_version(t)
        return output

    def _check_no_alias(self, inputs: tuple, output: Any) -> None:
        """torch's rule: no output shares storage with an input or with another output."""
        outs = _tensors_in(output if isinstance(output, (tuple, list)) else (output,))
        if not outs:
            return
        seen = {_storage_key(t) for t in _tensors_in(inputs)}
        seen.discard(None)
        for o in outs:
            key = _storage_key(o)
            if key is None:
                continue
            if key in seen:
                raise RuntimeError(
                    f"{self._qualname}: The output of this custom operator (1) must not also be "
                    "an input to this custom operator and (2) may not alias any inputs to this "
                    "custom operator or other returns. Please instead return a clone of the "
                    "offending output tensor(s) (e.g. return x.clone()) or refactor the custom "
                    "operator to not return it."
                )
            seen.add(key)

    def _mutated_positions(self, mutates_args: Union[str, Iterable[str]]) -> Tuple[int, ...]:
        names = self._positional if isinstance(mutates_args, str) else set(mutates_args)
        return tuple(i for i, n in enumerate(self._positional) if n in names)

    def _mutated_tensors(self, inputs: tuple) -> List[torch.Tensor]:
        if not self._mutated:
            return []
        return _tensors_in(inputs[i] for i in self._mutated)

    # ---------------------------------------------------------------- registration

    def register_kernel(
        self, device_types: Union[str, Sequence[str], None], fn: Optional[Callable] = None, /
    ) -> Callable:
        """Use ``fn`` for tensors on ``device_types`` (``"cpu"``, ``"cuda"``, ...; None: the
        kernel for every device without one of its own, as in torch).

        Example::

            @mysin.register_kernel("cuda")
            def _(x):
                return x.sin()
        """

        def register(kernel: Callable) -> Callable:
            for device in _device_types(device_types) or (None,):  # None: every device
                self._kernels[device] = kernel
                if self._library is not None:
                    self._impl_once(_dispatch_key(device), self._device_kernel)
            self._regenerate_call()
            return kernel

        return register if fn is None else register(fn)

    def register_fake(self, fn: Callable, /) -> Callable:
        """Shapes, dtypes and devices of the outputs, for FakeTensor/``meta`` inputs.

        Example::

            @mysin.register_fake
            def _(x):
                return torch.empty_like(x)
        """
        self._fake = fn
        if self._library is not None:
            self._impl_once("Meta", self._meta_kernel)
        self._regenerate_call()
        return fn

    def register_autograd(
        self, backward: Callable, /, *, setup_context: Optional[Callable] = None
    ) -> None:
        """Gradient formula: ``setup_context(ctx, inputs, output)`` and ``backward(ctx, *grads)``.

        ``inputs`` holds every positional input, defaults filled in; an op with keyword-only
        parameters gets them as ``keyword_only_inputs`` (a dict), as on torch 2.4+.
        """
        if not callable(backward) or (setup_context is not None and not callable(setup_context)):
            raise TypeError(
                f"{self._qualname}: register_autograd expects callables: "
                "register_autograd(backward, setup_context=setup_context)"
            )
        self._backward = backward
        self._setup_context = setup_context
        self._regenerate_call()

    def register_vmap(self, func: Optional[Callable] = None, /) -> Callable:
        """A ``torch.func.vmap`` rule. ``torch.func`` works on custom ops from torch 2.4 only:
        on older torch this raises ``NotImplementedError`` (the rule is never called there)."""
        raise NotImplementedError(
            f"{self._qualname}: register_vmap needs torch >= 2.5 (torch.library.register_vmap); "
            f"torch {torch.__version__} cannot vmap a custom operator. Call the op in a loop, "
            "or write the batched computation as the op itself."
        )

    def register_autocast(self, device_type: str, cast_inputs: torch.dtype) -> None:
        """Under autocast on ``device_type``, cast floating-point tensor inputs to
        ``cast_inputs`` and run the op with autocast off (calls through the op object).

        Example: ``mysin.register_autocast("cuda", torch.float16)``.
        """
        if device_type not in ("cpu", "cuda"):
            raise ValueError(
                f"{self._qualname}: register_autocast supports device_type 'cpu' or 'cuda' on "
                f"torch {torch.__version__}, got {device_type!r}"
            )
        self._autocast[device_type] = cast_inputs
        self._regenerate_call()

    # ---------------------------------------------------------------- the dispatcher

    def _register_to_dispatcher(self, device_types: Optional[Tuple[str, ...]]) -> None:
        self._library = _library_for(self._namespace)
        self._library.define(self._name + self._schema)
        self._opoverload = getattr(getattr(torch.ops, self._namespace), self._name).default
        for device in device_types or (None,):
            self._impl_once(_dispatch_key(device), self._device_kernel)
        self._dispatched_fn = _autograd_function(self, dispatched=True)
        self._impl_once("Autograd", self._autograd_kernel)

    def _impl_once(self, key: str, kernel: Callable) -> None:
        if key not in self._registered_keys:
            self._library.impl(self._name, kernel, key)
            self._registered_keys.add(key)

    def _device_kernel(self, *args: Any, **kwargs: Any) -> Any:
        inputs, keyword_only = self._bind(args, kwargs)
        return self._run_kernel(inputs, keyword_only)

    def _meta_kernel(self, *args: Any, **kwargs: Any) -> Any:
        assert self._fake is not None
        return self._fake(*args, **kwargs)

    def _autograd_kernel(self, *args: Any, **kwargs: Any) -> Any:
        inputs, keyword_only = self._bind(args, kwargs)
        return self._apply(inputs, keyword_only, self._dispatched_fn)


#: One ``torch.library.Library`` per namespace, kept alive for the process (a Library that is
#: garbage-collected unregisters its operators).
_LIBRARIES: Dict[str, Any] = {}


def _library_for(namespace: str) -> Any:
    lib = _LIBRARIES.get(namespace)
    if lib is None:
        try:
            lib = torch.library.Library(namespace, "FRAGMENT")
        except ValueError:  # torch < 2.1 knows only "DEF" (one per namespace) and "IMPL"
            lib = torch.library.Library(namespace, "DEF")
        _LIBRARIES[namespace] = lib
    return lib


def _below_autograd(fn: Callable, args: tuple, kwargs: Dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` with the autograd dispatch keys excluded (a redispatch)."""
    if _GUARD_IS_CONTEXT:
        with _BelowAutograd():
            return fn(*args, **kwargs)
    guard = _BelowAutograd()
    try:
        return fn(*args, **kwargs)
    finally:
        del guard


def _autograd_function(op: CustomOp, dispatched: bool) -> Any:
    """The ``compatfn.function`` that gives ``op`` its registered autograd formula.

    ``dispatched``: forward redispatches to the operator below autograd (the ``Autograd`` kernel
    of a registered op); else it runs the kernel directly (eager calls of the op object).
    """

    def run(call: _Call, flat: tuple) -> Any:
        inputs = _unflatten(flat, call.layout)
        if not dispatched:
            return op._run_kernel(inputs, call.keyword_only)
        return _below_autograd(op._opoverload, inputs, call.keyword_only)

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(call: _Call, *flat: Any) -> Any:
            return run(call, flat)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            if op._setup_context is None:
                return
            call = inputs[0]
            args = _unflatten(inputs[1:], call.layout)
            if op._keyword_only:
                op._setup_context(
                    ctx=ctx, inputs=args, keyword_only_inputs=call.keyword_only, output=output
                )
            else:
                op._setup_context(ctx=ctx, inputs=args, output=output)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            result = _user_backward(op, ctx, grads)
            return (None, *_regrad(result if isinstance(result, tuple) else (result,), ctx))

    Op.__name__ = Op.__qualname__ = f"CustomOp_{op._namespace}_{op._name}"
    return function(Op)


def _user_backward(op: CustomOp, ctx: Any, grads: tuple) -> Any:
    """Run the registered backward; torch's errors when there is none or it miscounts."""
    if op._backward is None:
        raise RuntimeError(
            f"Trying to backward through {op._namespace}.{op._name}.default but no "
            "autograd formula was registered. Please use register_autograd to add one."
        )
    result = op._backward(ctx, *grads)
    got = len(result) if isinstance(result, tuple) else 1
    expected = len(op._positional)
    if got != expected:
        raise RuntimeError(
            f"The backward formula for {op._qualname} returned an incorrect number of "
            f"gradients (expected {expected}, got {got}). Expected one gradient for each "
            "forward input. Use None for inputs that do not require a gradient."
        )
    return result


def _simple_function(op: CustomOp) -> Any:
    """The autograd Function of the short path, written as a hand-written one would be: a legacy
    ``forward(ctx, <the op's parameters>)`` that runs the kernel and the registered
    setup_context (if any), and the registered backward (torch's checks on its gradients)."""

    def backward(ctx: Any, *grads: Any) -> Any:
        return _user_backward(op, ctx, grads)

    forward = _legacy_forward(op._kernels[None], op._setup_context)
    name = f"CustomOp_{op._namespace}_{op._name}"
    return type(
        name,
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "backward": staticmethod(backward),
            "__qualname__": name,
        },
    )


def _returns_only_tensors(schema: str) -> bool:
    """Whether the schema returns one Tensor or a tuple of Tensors (what torch 1.8's autograd
    Functions can return)."""
    returns = schema.rsplit("-> ", 1)[1].strip("()")
    return bool(returns) and all(r.strip() == "Tensor" for r in returns.split(","))


def _tensor_parameters(
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
        elif annotation not in (int, float, bool, str, torch.dtype, torch.device):
            only_scalars = False
    return tensors, only_scalars


# NOTE: [the op's call]
# A call of an op made by compatfn (registered and function tiers) should cost about what a call
# of a hand-written autograd.Function doing the same costs. So each op gets a call function of its
# own, generated with the op's own parameters and regenerated by every registration: Python binds
# keywords and fills defaults (no ``inspect.Signature.bind``), and a wrong call raises Python's
# TypeError naming the op. A simple op (one kernel, no mutation, no lists or optional tensors, no
# keyword-only parameters, tensor outputs) takes the short path when its tensor arguments are
# plain tensors, none on the meta device (those get the fake kernel or torch's error), and, for a
# registered op, nothing needs the dispatcher (tracing, dispatch modes, transforms): the kernel
# runs directly or, when an input requires grad, through torch's C-level apply of a legacy-form
# Function (``_simple_function``). Every other call (tensor subclasses, torch.fx proxies, wrong
# argument types included) goes to ``CustomOp._general_call``. Both keep torch's aliasing rule: a
# single output whose storage differs from every tensor argument's passes at once, anything else
# gets the full check. Each check is written only where it can fail: no dispatcher probes on the
# ``function`` tier or for what a torch lacks (``_DISPATCHER_PROBES``), no meta test without a
# meta device. Against a hand-written Function's apply, a forward with gradients costs the op's
# call frame, these checks and the frames of the separate kernel and setup_context (measured:
# README "Custom operators").


def _generated_call(op: CustomOp) -> Callable:
    """The call function of ``op`` as it is registered now (See NOTE: [the op's call])."""
    params = list(op._signature.parameters.values())
    name = op._name if op._name.isidentifier() and not keyword.iskeyword(op._name) else "op"
    taken = {p.name for p in params} | {name}
    names = ("self", "out", "Tensor", "Parameter", "apply", "kernel", "storage_id", "alias_of")
    op_, out, tensor, parameter, apply, kernel, storage_id, alias_of = (
        _fresh_name(n, taken) for n in names
    )
    grad_enabled = _fresh_name("grad_enabled", taken)
    probes = {_fresh_name(f"probe{i}", taken): p for i, p in enumerate(_DISPATCHER_PROBES)}
    header: List[str] = [op_]
    for p in params:
        if p.kind is p.KEYWORD_ONLY and "*" not in header:
            header.append("*")
        header.append(p.name)
    positional = [p.name for p in params if p.kind is not p.KEYWORD_ONLY]
    keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    inputs = "(" + ", ".join(positional) + ("," if len(positional) == 1 else "") + ")"
    keywords = "{" + ", ".join(f"{n!r}: {n}" for n in keyword_only) + "}"
    lines = [f"def {name}({', '.join(header)}):"]
    simple_apply = None
    if op._short_path_ok():
        # The short path has every argument, plain tensors and no tracing or transforms, so
        # torch's C-level apply runs the class without compatfn's binding and checks.
        simple_apply = _C_APPLY.__get__(None, _simple_function(op))
        plain: List[str] = []
        tensors = [n for _, n in op._tensor_params]
        if op._opoverload is not None:  # tracing, modes and transforms need the dispatcher
            # First: dynamo 2.1 cannot trace type(tensor).
            plain.append(f"not ({' or '.join(f'{n}()' for n in probes)})")
        # Tensor subclasses, torch.fx proxies and wrong arguments take the general path.
        plain += [f"(type({t}) is {tensor} or type({t}) is {parameter})" for t in tensors]
        if HAS_META_DEVICE:  # meta tensors get the fake kernel, or torch's error
            plain += [f"not {t}.is_meta" for t in tensors]
        distinct = _distinct_storage_source(
            out, tensors, {"storage_id": storage_id, "alias_of": alias_of}
        )
        # As torch 2.7+ and the general path: autograd, so setup_context, only in grad mode.
        requires_grad = " or ".join(f"{t}.requires_grad" for t in tensors) or "False"
        needs_grad = f"({requires_grad}) and {grad_enabled}()"
        short = [
            f"if {needs_grad}:",
            f"    {out} = {apply}({', '.join(positional)})",
            "else:",
            f"    {out} = {kernel}({', '.join(positional)})",
            f"if type({out}) is {tensor} and {distinct}:",
            f"    return {out}",
            f"{op_}._check_no_alias({inputs}, {out})",
            f"return {out}",
        ]
        lines.append(f"    if {' and '.join(plain) or 'True'}:")
        lines += [f"        {line}" for line in short]
    lines.append(f"    return {op_}._general_call({inputs}, {keywords})")
    source = "".join(line + "\n" for line in lines)
    namespace: Dict[str, Any] = {
        tensor: torch.Tensor,
        parameter: torch.nn.Parameter,
        apply: simple_apply,
        kernel: op._kernels.get(None),
        storage_id: _storage_id,
        alias_of: _is_alias_of,
        grad_enabled: torch.is_grad_enabled,
        **probes,
    }
    filename = f"<call of custom op {op._qualname}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    call: Any = namespace[name]
    given = [p for p in params if p.default is not p.empty]
    call.__defaults__ = tuple(p.default for p in given if p.kind is not p.KEYWORD_ONLY) or None
    call.__kwdefaults__ = {p.name: p.default for p in given if p.kind is p.KEYWORD_ONLY} or None
    call.__doc__ = op.__doc__
    return call


def _regrad(result: tuple, ctx: Any) -> List[Any]:
    """Per-input gradients flattened like the inputs (a list input gets a list of gradients)."""
    flat: List[Any] = []
    for g in result:
        if isinstance(g, (list, tuple)):
            flat.extend(g)
        else:
            flat.append(g)
    return flat


# --------------------------------------------------------------------------- public entry


# NOTE: [string annotations]
# torch's own schema inference mishandles string annotations (``from __future__ import
# annotations``): torch 2.4 rejects every one ("Parameter x has unsupported type torch.Tensor",
# https://github.com/pytorch/pytorch/issues/105157, partly fixed by
# https://github.com/pytorch/pytorch/pull/128809 for 2.5), and torch 2.5-2.8 (measured) still fail
# on ``"Optional[torch.Tensor]"`` and ``"Sequence[torch.Tensor]"`` ("'str' object has no attribute
# '__origin__'"). For a function with string annotations compatfn always hands torch the schema it
# inferred itself (the same text torch infers for real annotations).


def _has_string_annotations(fn: Callable) -> bool:
    return any(isinstance(a, str) for a in getattr(fn, "__annotations__", {}).values())


# NOTE: [elided default gradients]
# On torch 2.4-2.13 (CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS) backward fails for torch's own
# custom op with a tensor list when a trailing defaulted argument was left at its default: the
# dispatcher does not pass that argument to the op's autograd kernel, and torch's tensor-list
# wrapper then rejects the one-gradient-per-input result (None for the default) that the same
# backward must return when the argument is given. torch 2.14 trims those gradients itself. For
# such ops compatfn returns torch's CustomOpDef with one method changed: register_autograd wraps
# backward to drop trailing None gradients beyond the inputs autograd saw
# (``len(ctx.needs_input_grad)``, the arguments actually passed). Calls are untouched.


def _has_tensor_lists(opdef: Any) -> bool:
    """Whether the op takes or returns a list of tensors (where torch's wrapper applies)."""
    return re.search(r"Tensor\??(\([^)]*\))?\[\]", str(opdef._opoverload._schema)) is not None


def _trim_elided_default_gradients(backward: Callable) -> Callable:
    @functools.wraps(backward)
    def trimmed(ctx: Any, *grads: Any) -> Any:
        result = backward(ctx, *grads)
        passed = len(ctx.needs_input_grad)
        if isinstance(result, tuple) and all(g is None for g in result[passed:]):
            return result[:passed]
        return result

    return trimmed


@functools.lru_cache(maxsize=None)
def _trimming_opdef_class() -> type:
    """torch's CustomOpDef with a register_autograd that trims the gradients of elided defaults
    (See NOTE: [elided default gradients]); one class, made at first use."""
    base: Any = torch._library.custom_ops.CustomOpDef  # type: ignore[attr-defined]

    def register_autograd(
        self: Any, backward: Callable, /, *, setup_context: Optional[Callable] = None
    ) -> None:
        trimmed = _trim_elided_default_gradients(backward)
        base.register_autograd(self, trimmed, setup_context=setup_context)  # type: ignore[attr-defined]

    return type(base.__name__, (base,), {"register_autograd": register_autograd})


def custom_op(
    name: str,
    fn: Optional[Callable] = None,
    /,
    *,
    mutates_args: Union[str, Iterable[str]],
    device_types: Union[str, Sequence[str], None] = None,
    schema: Optional[str] = None,
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
    return _custom_op(name, fn, mutates_args, device_types, schema, TIER)


def _custom_op(
    name: str,
    fn: Optional[Callable],
    mutates_args: Union[str, Iterable[str]],
    device_types: Union[str, Sequence[str], None],
    schema: Optional[str],
    tier: str,
) -> Any:
    """:func:`custom_op` on a given tier (tests run the older tiers on new torch too)."""
    if tier == "torch":

        def define(f: Callable) -> Any:
            given = schema
            if given is None and _has_string_annotations(f):
                given = infer_schema(f, mutates_args)  # See NOTE: [string annotations]
            opdef = torch.library.custom_op(  # type: ignore[attr-defined]
                name, f, mutates_args=mutates_args, device_types=device_types, schema=given
            )
            if CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS and _has_tensor_lists(opdef):
                # See NOTE: [elided default gradients]
                opdef.__class__ = _trimming_opdef_class()
            return opdef

        return define if fn is None else define(fn)
    if tier == "registered" and not HAS_LIBRARY:
        raise RuntimeError(f"torch {torch.__version__} has no torch.library.Library")

    def make(f: Callable) -> CustomOp:
        return CustomOp(
            name, f, mutates_args, _device_types(device_types), schema, tier == "registered"
        )

    return make if fn is None else make(fn)


# --------------------------------------------------------------------------- opcheck

#: The checks torch's ``opcheck`` runs by default (torch 2.4+), and compatfn's on older torch.
DEFAULT_TEST_UTILS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


def _has_auto_functionalize() -> bool:
    """torch 2.2+ functionalizes mutating custom operators under torch.compile
    (``torch._higher_order_ops.auto_functionalize``); torch 2.1 raises "Found a custom (non-ATen)
    operator that either mutates or its inputs" (measured)."""
    try:
        return importlib.util.find_spec("torch._higher_order_ops.auto_functionalize") is not None
    except ImportError:  # torch < 2.1: no torch._higher_order_ops
        return False


class OpCheckError(Exception):
    """A failed :func:`opcheck` test (torch's ``OpCheckError`` where torch has one)."""


def opcheck(
    op: Any,
    args: Tuple[Any, ...],
    kwargs: Optional[Dict[str, Any]] = None,
    *,
    test_utils: Union[str, Sequence[str]] = DEFAULT_TEST_UTILS,
    raise_exception: bool = True,
) -> Dict[str, Any]:
    """``torch.library.opcheck`` on every torch: test that ``op`` is registered correctly.

    torch >= 2.4 runs torch's own. Older torch runs the same tests, as far as that torch can:
    ``test_schema`` (undeclared mutation of an input), ``test_autograd_registration`` (outputs
    are differentiable when an input requires grad), ``test_faketensor`` (FakeTensor or ``meta``
    outputs match the real ones in shape and dtype), ``test_aot_dispatch_dynamic`` (with
    ``torch.compile(backend="aot_eager", dynamic=True, fullgraph=True)``: outputs and gradients
    match eager). A test this torch cannot run is reported as ``"SKIPPED: <reason>"``.
    Returns ``{test name: "SUCCESS" | "SKIPPED: ..." | exception}``; raises the first failure
    unless ``raise_exception=False``.

    Example::

        >>> opcheck(numpy_sin, (torch.randn(3, requires_grad=True),))
        {'test_schema': 'SUCCESS', 'test_autograd_registration': 'SUCCESS', ...}
    """
    tests = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    if HAS_TORCH_OPCHECK:
        target = op._opoverload if isinstance(op, CustomOp) and op._opoverload else op
        if not isinstance(op, CustomOp) or op._opoverload is not None:
            return dict(
                torch.library.opcheck(  # type: ignore[attr-defined]
                    target, args, kwargs, test_utils=tests, raise_exception=raise_exception
                )
            )
    if not isinstance(op, CustomOp):
        raise TypeError(
            f"opcheck: {op!r} is not an operator made by compatfn.custom_op; on torch "
            f"{torch.__version__} compatfn can check only those"
        )
    kwargs = dict(kwargs or {})
    results: Dict[str, Any] = {}
    for test in tests:
        check = _OPCHECKS.get(test)
        if check is None:
            raise ValueError(f"opcheck: unknown test {test!r}; known: {list(_OPCHECKS)}")
        try:
            skipped = check(op, args, kwargs)
        except Exception as exc:
            if raise_exception:
                raise OpCheckError(
                    f"opcheck(op, ...): {test} failed with {exc} (scroll up for stack trace)"
                ) from exc
            results[test] = exc
            continue
        results[test] = f"SKIPPED: {skipped}" if skipped else "SUCCESS"
    return results


def _cloned(values: Sequence[Any], requires_grad: bool = True) -> List[Any]:
    def clone(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            return c.requires_grad_(v.requires_grad and requires_grad)
        if isinstance(v, (list, tuple)):
            return type(v)(clone(t) for t in v)
        return v

    return [clone(v) for v in values]


def _outputs(out: Any) -> List[torch.Tensor]:
    return _tensors_in(out if isinstance(out, (tuple, list)) else (out,))


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(a.shape == b.shape and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))


def _check_schema(op: CustomOp, args: tuple, kwargs: dict) -> Optional[str]:
    inputs, keyword_only = op._bind(tuple(args), kwargs)
    before = _cloned(list(inputs) + list(keyword_only.values()), requires_grad=False)
    used = _cloned(list(inputs) + list(keyword_only.values()), requires_grad=False)
    names = op._positional + op._keyword_only
    with torch.no_grad():
        op(*used[: len(inputs)], **dict(zip(op._keyword_only, used[len(inputs) :])))
    for i, (old, new) in enumerate(zip(before, used)):
        olds, news = _tensors_in((old,)), _tensors_in((new,))
        changed = any(not _same_values(a, b) for a, b in zip(olds, news))
        if changed and i not in op._mutated:
            raise RuntimeError(f"Argument {names[i]} is not defined as mutable but was mutated")
    return None


def _check_autograd_registration(op: CustomOp, args: tuple, kwargs: dict) -> Optional[str]:
    used = _cloned(args)
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in _tensors_in(used))):
        return None
    for o in _outputs(op(*used, **kwargs)):
        if o.is_floating_point() and o.grad_fn is None:
            raise AssertionError(
                f"{op._qualname}: an input requires grad but output has no grad_fn: autograd "
                "is not registered for this operator"
            )
    return None


def _fake_mode() -> Any:
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        return None
    return FakeTensorMode


def _check_faketensor(op: CustomOp, args: tuple, kwargs: dict) -> Optional[str]:
    with torch.no_grad():
        real = _outputs(op(*_cloned(args), **kwargs))
    mode_cls = _fake_mode() if op._opoverload is not None else None
    if mode_cls is not None:
        mode = mode_cls()

        def convert(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return mode.from_tensor(v.detach().clone())
            if isinstance(v, (list, tuple)):
                return type(v)(convert(t) for t in v)
            return v

        fake_args = [convert(v) for v in args]
        fake_kwargs = {k: convert(v) for k, v in kwargs.items()}
        with mode, torch.no_grad():
            fake = _outputs(op(*fake_args, **fake_kwargs))
    elif HAS_META_DEVICE:

        def to_meta(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return v.detach().to("meta")
            if isinstance(v, (list, tuple)):
                return type(v)(to_meta(t) for t in v)
            return v

        with torch.no_grad():
            fake = _outputs(
                op(*[to_meta(v) for v in args], **{k: to_meta(v) for k, v in kwargs.items()})
            )
    else:
        return f"torch {torch.__version__} has neither FakeTensor nor a meta device"
    if len(fake) != len(real):
        raise AssertionError(
            f"{op._qualname}: fake kernel returned {len(fake)} tensors, real {len(real)}"
        )
    for i, (f, r) in enumerate(zip(fake, real)):
        if tuple(f.shape) != tuple(r.shape) or f.dtype != r.dtype:
            raise AssertionError(
                f"{op._qualname}: output {i} of the fake kernel has shape {tuple(f.shape)} and "
                f"dtype {f.dtype}, the real kernel {tuple(r.shape)} and {r.dtype}"
            )
    return None


def _check_aot_dispatch_dynamic(op: CustomOp, args: tuple, kwargs: dict) -> Optional[str]:
    if op._opoverload is None:
        return "the op is not registered with the dispatcher on this torch (no torch.compile)"
    why = dynamo_unsupported()
    if why:
        return why
    if op._mutated and not _has_auto_functionalize():
        return (
            f"torch {torch.__version__} cannot compile an operator that mutates its inputs "
            "(no auto_functionalize before torch 2.2)"
        )
    dynamo = importlib.import_module("torch._dynamo")

    def call(*values: Any) -> Any:
        return op(*values, **kwargs)

    def run(fn: Callable) -> Tuple[List[torch.Tensor], List[Any]]:
        used = _cloned(args)
        leaves = [t for t in _tensors_in(used) if t.requires_grad]
        out = _outputs(fn(*used))
        diff = [o for o in out if o.requires_grad]
        grads: List[Any] = []
        if diff and leaves:
            grads = list(
                torch.autograd.grad(
                    diff, leaves, [torch.ones_like(o) for o in diff], allow_unused=True
                )
            )
        return [o.detach() for o in out] + [t.detach() for t in _tensors_in(used)], grads

    dynamo.reset()
    try:
        compiled = torch.compile(call, backend="aot_eager", dynamic=True, fullgraph=True)
        got = run(compiled)
    finally:
        dynamo.reset()
    expected = run(call)
    for a, b in zip(got[0] + got[1], expected[0] + expected[1]):
        if (a is None) != (b is None) or (
            a is not None and not torch.allclose(a, b, equal_nan=True)
        ):
            raise AssertionError(f"{op._qualname}: compiled outputs or gradients differ from eager")
    return None


_OPCHECKS: Dict[str, Callable[[CustomOp, tuple, dict], Optional[str]]] = {
    "test_schema": _check_schema,
    "test_autograd_registration": _check_autograd_registration,
    "test_faketensor": _check_faketensor,
    "test_aot_dispatch_dynamic": _check_aot_dispatch_dynamic,
}
