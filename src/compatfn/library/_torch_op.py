"""The op object of the "torch" tier (torch >= 2.4): torch's ``CustomOpDef``, called through a
generated function (``_torch_call``), and the registry of the op objects handed out per name."""

from __future__ import annotations

import copy
import functools
import inspect
import weakref
from typing import Any, Callable, Dict, List, Optional

from compatfn.library._facts import TorchCustomOpDef
from compatfn.library._torch_call import generated_call

__all__ = ["CONTRACT", "FastCustomOpDef", "contract_problem", "hand_out", "install_call"]

_Base: Any = TorchCustomOpDef if TorchCustomOpDef is not None else object

# NOTE: [the op object's call]
# A Python class's ``__call__`` costs a call through the type's slot: the arguments packed into a
# tuple (and a dict for keywords, so a keyword call cost more), the method looked up, ``self``
# prepended. ``functools.partial`` objects are called by CPython directly (vectorcall from Python
# 3.12 on: no tuple, no dict). So the op object compatfn hands out is an instance of a class
# derived from both ``functools.partial`` and torch's ``CustomOpDef`` (``isinstance`` holds, every
# method is torch's), whose partial function is the op's generated call (``_torch_call``) and whose
# ``__dict__`` IS the state of the ``CustomOpDef`` torch made: torch's registry of ops by name
# (``torch._library.custom_ops.OPDEFS``) keeps torch's object, whose class compatfn changes to
# ``FastCustomOpDef`` so that a registration through either object (``op.register_autograd`` or
# ``torch.library.register_autograd("ns::op", ...)``) regenerates the call of every op object of
# that name. The generated call reads the op's state, never the object, so dynamo inlines it as
# a partial's function. What ``functools.partial`` would change is put back: the object is no
# descriptor (a class attribute is not bound to instances), ``repr`` is torch's, and ``copy`` /
# ``deepcopy`` copy the state as for torch's object (``deepcopy`` fails where torch's fails).


class FastCustomOpDef(_Base):  # type: ignore[misc,valid-type]
    """torch's ``CustomOpDef`` (torch >= 2.4) whose eager calls skip the dispatcher where nothing
    needs it (See NOTE: [the torch tier's call]); every method is torch's.

    Example::

        >>> @compatfn.custom_op("mylib::twice", mutates_args=())
        ... def twice(x: torch.Tensor) -> torch.Tensor:
        ...     return x * 2
        >>> twice(torch.ones(2))
        tensor([2., 2.])
    """

    def register_kernel(self, device_types: Any, fn: Optional[Callable] = None, /) -> Callable:
        register = _Base.register_kernel(self, device_types)  # torch's checks, now

        def registered(kernel: Callable) -> Callable:
            result = register(kernel)
            self._compatfn_kernel_replaced = True
            install_call(self)
            return result  # type: ignore[no-any-return]

        return registered if fn is None else registered(fn)

    def register_autograd(self, *args: Any, **kwargs: Any) -> None:
        _Base.register_autograd(self, *args, **kwargs)
        install_call(self)

    if hasattr(_Base, "register_autocast"):  # torch >= 2.5

        def register_autocast(self, *args: Any, **kwargs: Any) -> Any:
            result = _Base.register_autocast(self, *args, **kwargs)
            self._compatfn_autocast_rule = True
            install_call(self)
            return result


#: ``functools.partial.__setstate__``: what a partial calls, and its ``__dict__``.
_SET_STATE: Any = getattr(functools.partial, "__setstate__")  # noqa: B009 (typeshed lacks it)


def _set_call(op: Any, call: Callable, state: Dict[str, Any]) -> None:
    """Make ``op`` (a partial) call ``call``, with ``state`` as its ``__dict__``."""
    _SET_STATE(op, (call, (), None, state))


def _not_bound(self: Any, obj: Any, objtype: Any = None) -> Any:
    """As torch's object: a class attribute, read through an instance, is the op itself."""
    return self


def _same_kind(op: Any, state: Dict[str, Any]) -> Any:
    """A new op object of ``op``'s class whose state is ``state``, calling what ``op`` calls."""
    new = functools.partial.__new__(type(op), op.func)
    _set_call(new, op.func, state)
    return new


def _copied(self: Any) -> Any:
    return _same_kind(self, dict(self.__dict__))


def _deep_copied(self: Any, memo: Dict[int, Any]) -> Any:
    return _same_kind(self, copy.deepcopy(self.__dict__, memo))  # torch's error where it has one


def _torch_object() -> Any:
    """An empty object of torch's class, which unpickling fills with the pickled state."""
    return _Base.__new__(_Base)


def _reduced(self: Any, protocol: Any) -> Any:
    """Pickled as torch's own object: its class and its state (torch's error where it has one)."""
    return (_torch_object, (), self.__dict__)


#: What ``inspect.signature`` gives for torch's op object (its ``__call__(*args, **kwargs)``).
_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)

#: The class of the op objects compatfn hands out (See NOTE: [the op object's call]); its
#: signature, docstring and pickling are those of torch's object.
CallableCustomOpDef: Any = type(
    "CustomOpDef",
    (functools.partial, FastCustomOpDef),
    {
        "__module__": __name__,
        "__doc__": _Base.__doc__,
        "__signature__": _SIGNATURE,
        "__call__": functools.partial.__call__,
        "__repr__": _Base.__repr__,
        "__copy__": _copied,
        "__deepcopy__": _deep_copied,
        "__reduce_ex__": _reduced,
        # Python 3.13's partial binds as a method: undone (torch's object is no descriptor, and
        # pydoc documents a descriptor as a routine).
        **({"__get__": _not_bound} if hasattr(functools.partial, "__get__") else {}),
    },
)

# NOTE: [defining a name again]
# Defining a name again (re-running a notebook cell) makes torch's custom_op destroy the Library
# of the previous definition (``get_library_allowing_overwrite``), while the older CustomOpDef
# objects keep the OpOverload of the operator that Library owned: calling one reads freed memory
# (measured on torch 2.15: the newest kernel by luck, ``std::bad_alloc`` or a segfault; the
# dispatcher-handle lifetime problem of https://github.com/pytorch/pytorch/issues/125234).
# compatfn makes every older op object it handed out for that name share the newest one's state
# (``__dict__``, and its class or its call), so older objects follow the newest definition, as on
# compatfn's own tiers, and never touch the destroyed operator. Objects torch made are left alone.
_HANDED_OUT: Dict[str, List[weakref.ref[Any]]] = {}


def _live(name: str) -> List[Any]:
    refs = [r for r in _HANDED_OUT.get(name, []) if r() is not None]
    _HANDED_OUT[name] = refs
    return [r() for r in refs]


def _follow(older: Any, newest: Any) -> None:
    """``older`` behaves as ``newest`` from now on (See NOTE: [defining a name again])."""
    older.__dict__ = newest.__dict__
    if isinstance(older, functools.partial) == isinstance(newest, functools.partial):
        older.__class__ = newest.__class__
    elif isinstance(older, functools.partial):  # the newest is torch's own object: its call
        _set_call(older, newest.__call__, newest.__dict__)
    else:
        older.__class__ = FastCustomOpDef  # torch's call, through the newest operator


# NOTE: [torch's private contract]
# The fast op object rests on torch internals: CustomOpDef's fields (``CUSTOM_OP_DEF_FIELDS``,
# the kernels per device in a dict that torch reads at each call), the closure of
# ``make_autograd_impl`` (its ``Generated`` Function, whose backward the short path uses), and
# ``__class__`` assignment on torch's object (a plain Python object with a ``__dict__``). They
# are checked once, on the first op defined; where one does not hold (a torch release that moved
# them), every op is torch's own object, untouched (exact, through the dispatcher at each call),
# and ``python -m compatfn`` says why (``CONTRACT``).
#: None until checked; then "" where the contract holds, else what broke it.
CONTRACT: Dict[str, Optional[str]] = {"problem": None}


def contract_problem(opdef: Any) -> str:
    """What of torch's private contract does not hold for ``opdef`` ("" where all does)."""
    from compatfn.library._facts import CUSTOM_OP_DEF_FIELDS, torch_autograd_backward

    missing = [f for f in CUSTOM_OP_DEF_FIELDS if f not in getattr(opdef, "__dict__", {})]
    if missing:
        return f"torch's CustomOpDef has no {', '.join(missing)}"
    if not isinstance(opdef._backend_fns, dict):
        return "torch's CustomOpDef keeps its kernels otherwise than in a dict"
    try:
        if not callable(torch_autograd_backward(opdef)):
            return "make_autograd_impl's Generated Function has no backward"
    except Exception as e:
        return f"make_autograd_impl's closure has another layout ({type(e).__name__}: {e})"
    if "__slots__" in type(opdef).__dict__ or type(opdef) is not _Base:
        return "torch's CustomOpDef cannot change its class"
    return ""


def _contract_holds(opdef: Any) -> bool:
    if CONTRACT["problem"] is None:
        CONTRACT["problem"] = contract_problem(opdef)
    return not CONTRACT["problem"]


def hand_out(opdef: Any, fast: bool) -> Any:
    """The op object for torch's ``opdef`` (``fast``: one of ``CallableCustomOpDef`` sharing its
    state, else ``opdef`` itself); older objects of its name follow it. See NOTE: [torch's
    private contract]."""
    fast = fast and _contract_holds(opdef)
    if fast:
        opdef.__class__ = FastCustomOpDef
        op = functools.partial.__new__(CallableCustomOpDef, opdef.__call__)
        _set_call(op, opdef.__call__, opdef.__dict__)
    else:
        op = opdef
    older = _live(opdef._qualname)
    for obj in older:
        _follow(obj, op)
    _HANDED_OUT[opdef._qualname].append(weakref.ref(op))
    if fast:
        install_call(op)
    return op


def install_call(opdef: Any) -> None:
    """Give every op object of ``opdef``'s name the op's call as it is registered now."""
    call = generated_call(opdef)
    for op in _live(opdef._qualname):
        if isinstance(op, functools.partial) and op.__dict__ is opdef.__dict__:
            _set_call(op, call, op.__dict__)
