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
# The op object compatfn hands out is an instance of a class of its own per op, derived from
# torch's ``CustomOpDef`` (``isinstance`` holds, every method is torch's), whose ``__call__`` is
# the op's generated call (``_torch_call``) and whose ``__dict__`` IS the state of the
# ``CustomOpDef`` torch made: torch's registry of ops by name (``torch._library.custom_ops.OPDEFS``)
# keeps torch's object, whose class compatfn changes to ``FastCustomOpDef`` so that a registration
# through any object of the name (the op, a copy of it, or ``torch.library.register_autograd(
# "ns::op", ...)``) regenerates the call of the op's class. The generated call reads the state of
# torch's object, the one its dispatcher kernels read, never the object called: a registration
# through a copy acts as it does on torch's own objects. A plain class, not a
# ``functools.partial`` (which CPython calls with less packing): dynamo treats any partial as a
# partial, so inside ``torch.compile`` ``isinstance(op, CustomOpDef)``, the op's attributes and
# ``op in ops`` would answer otherwise than in eager code. ``repr``, ``inspect.signature`` and
# pickling are those of torch's object; ``copy`` / ``deepcopy`` copy the state as for torch's
# object (``deepcopy`` fails where torch's fails).


def _as_torchs(method: Optional[Callable]) -> Callable[[Callable], Callable]:
    """Give a method overriding torch's ``method`` its name, docstring and signature, as
    ``help()`` and ``inspect.signature`` show them (it calls torch's with what it was given, so
    a wrong call raises torch's own TypeError). No ``method``: torch < 2.4, nothing to give."""

    def named(override: Callable) -> Callable:
        return override if method is None else functools.wraps(method)(override)

    return named


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

    @_as_torchs(getattr(_Base, "register_kernel", None))
    def register_kernel(self, *args: Any, **kwargs: Any) -> Callable:
        result = _Base.register_kernel(self, *args, **kwargs)  # torch's checks and errors
        if len(args) >= 2 and args[1] is not None:  # registered now, ``fn`` returned
            _kernel_replaced(self)
            return result  # type: ignore[no-any-return]

        def registered(kernel: Callable) -> Callable:
            out = result(kernel)
            _kernel_replaced(self)
            return out  # type: ignore[no-any-return]

        return registered

    @_as_torchs(getattr(_Base, "register_autograd", None))
    def register_autograd(self, *args: Any, **kwargs: Any) -> None:
        _Base.register_autograd(self, *args, **kwargs)
        install_call(self)

    if hasattr(_Base, "register_autocast"):  # torch >= 2.5

        @_as_torchs(_Base.register_autocast)
        def register_autocast(self, *args: Any, **kwargs: Any) -> Any:
            result = _Base.register_autocast(self, *args, **kwargs)
            _registered(self).__dict__["_compatfn_autocast_rule"] = True
            install_call(self)
            return result


def _kernel_replaced(op: Any) -> None:
    """The op's kernel is no longer (only) the function it was made from: no short path."""
    _registered(op).__dict__["_compatfn_kernel_replaced"] = True
    install_call(op)


def _same_kind(op: Any, state: Dict[str, Any]) -> Any:
    """A new op object of ``op``'s class whose state is ``state``, handed out as ``op`` was."""
    new = _Base.__new__(type(op))
    new.__dict__ = state
    _HANDED_OUT.setdefault(op._qualname, []).append(weakref.ref(new))
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


def _op_class() -> Any:
    """A class of one op's objects (See NOTE: [the op object's call]); ``install_call`` gives
    it its ``__call__``."""
    return type(
        "CustomOpDef",
        (FastCustomOpDef,),
        {
            "__module__": __name__,
            "__doc__": _Base.__doc__,
            "__signature__": _SIGNATURE,
            "__copy__": _copied,
            "__deepcopy__": _deep_copied,
            "__reduce_ex__": _reduced,
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
    older.__class__ = newest.__class__


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
    """The op object for torch's ``opdef`` (``fast``: an object of a class of its own sharing
    ``opdef``'s state (See NOTE: [the op object's call]), else ``opdef`` itself); older objects
    of its name follow it. See NOTE: [torch's private contract]."""
    fast = fast and _contract_holds(opdef)
    if fast:
        opdef.__class__ = FastCustomOpDef
        op = _Base.__new__(_op_class())
        op.__dict__ = opdef.__dict__
        _REGISTERED[opdef._qualname] = opdef
    else:
        op = opdef
        _REGISTERED.pop(opdef._qualname, None)
    older = _live(opdef._qualname)
    for obj in older:
        _follow(obj, op)
    _HANDED_OUT[opdef._qualname].append(weakref.ref(op))
    if fast:
        install_call(op)
    return op


#: torch's own object of each name whose op objects compatfn made: the one torch registered to
#: the dispatcher, whose state its kernels read (See NOTE: [the op object's call]).
_REGISTERED: Dict[str, Any] = {}


def _registered(op: Any) -> Any:
    """torch's own object of ``op``'s name (``op`` itself where compatfn made none)."""
    return _REGISTERED.get(op._qualname, op)


def install_call(opdef: Any) -> None:
    """Give the op objects of ``opdef``'s name the op's call as it is registered now."""
    registered = _registered(opdef)
    call = generated_call(registered)
    for op in _live(opdef._qualname):
        if isinstance(op, FastCustomOpDef):  # not where torch's own object was handed out
            type(op).__call__ = call
