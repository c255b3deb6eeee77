"""Write a ``torch.autograd.Function`` once, setup_context style; run it on torch 1.8 ... newest.

This module is the whole adapter. It imports only the standard library and torch and never names the
package it lives in, so it can be copied ("vendored") into any package under any name.

Example::

    @function
    class ClippedReLU(torch.autograd.Function):
        @staticmethod
        def forward(x, clip=1.0):
            return x.clamp(0, clip)

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, clip = inputs  # defaults are always filled in
            ctx.save_for_backward((x > 0) & (x < clip))

        @staticmethod
        def backward(ctx, grad):
            (mask,) = ctx.saved_tensors
            return grad * mask  # the missing gradient for ``clip`` is padded with None

    ClippedReLU.apply(x)            # every torch >= 1.8
    ClippedReLU.apply(x, clip=2.0)  # keyword arguments too

How it works. Everything is decided once, when a class is decorated:

* torch >= 2.0 ("native" mode): the class keeps torch's own setup_context path; only ``apply`` is
  replaced. It binds keyword and default arguments with a signature cached at decoration (and
  skips binding when every argument is given positionally), then calls torch's C-level apply,
  which is cheaper than torch's own ``apply`` (that one runs ``inspect.signature(forward).bind``
  on every call since torch 2.2; torch 2.15 moved that call into the C-level apply, so there the
  bound tuple goes to the legacy-form twin below, which runs forward and setup_context the same
  way). Under torch.func transforms it delegates to torch's own ``apply``; torch.compile
  intercepts ``Fn.apply`` before it runs.
* torch 1.x, ``legacy=True`` or ``COMPATFN_LEGACY=1`` ("legacy" mode): ``apply`` runs a twin, a
  subclass whose ``forward(ctx, *args)`` calls your ``forward(*args)`` and then your
  ``setup_context(ctx, args, output)``: the form torch 1.x understands.
* Classes already written in the legacy ``forward(ctx, *args)`` form are left as they are, apart
  from an ``apply`` that also takes keyword arguments.
* When forward has defaulted parameters, backward is wrapped to pad missing trailing gradients
  with None (see ``_pad_gradients``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import sys
import warnings
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar, Union, overload

import torch

__all__ = [
    "as_legacy",
    "custom_bwd",
    "custom_fwd",
    "features",
    "function",
    "functional",
    "mode",
]

_F = TypeVar("_F", bound=type)

#: ``COMPATFN_LEGACY=1`` forces the legacy adapter on every class decorated while it is set.
LEGACY_ENV = "COMPATFN_LEGACY"

_Function = torch.autograd.Function
_MISSING: Any = object()
_INFO = "__autograd_compat__"  # attribute holding the decoration record on a decorated class
_TORCH_BASES = frozenset(_Function.__mro__)


def _parse_version(version: str) -> Tuple[int, int]:
    # torch 1.8 has a plain str __version__, 1.10+ a TorchVersion; both parse the same way. Never
    # compare version strings ("2.13" < "2.2").
    match = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


TORCH_VERSION = _parse_version(torch.__version__)

# --- what the running torch offers, detected once at import -------------------------------------

# torch >= 2.0: ``setup_context`` exists and torch's apply runs forward without ctx when a class
# overrides it.
HAS_SETUP_CONTEXT = hasattr(_Function, "setup_context")
_BASE_SETUP_CONTEXT = inspect.getattr_static(_Function, "setup_context", None)

# The C-level apply (``_C._FunctionBase.apply``). Calling it bound to a class skips torch's Python
# ``Function.apply`` wrapper (torch 2.0-2.14).
_C_APPLY = torch._C._FunctionBase.__dict__["apply"]
# torch's own ``Function.apply``: a Python classmethod on torch 2.0-2.14; torch 1.x and torch 2.15+
# expose the C-level apply directly (2.15 moved default binding into C++, which still calls
# ``inspect.signature(forward).bind`` for every setup_context-style call).
_TORCH_APPLY = inspect.getattr_static(_Function, "apply")
_C_APPLY_BINDS = HAS_SETUP_CONTEXT and _TORCH_APPLY is _C_APPLY

# torch >= 2.0: torch.func transforms. torch's own apply must handle calls made under them.
_transforms_active: Callable[[], bool] = getattr(
    torch._C, "_are_functorch_transforms_active", lambda: False
)
_unwrap_dead_wrappers: Optional[Callable[[tuple], tuple]]
try:  # torch 2.0-2.14 unwrap dead functorch wrappers in Function.apply; do exactly the same.
    from torch._functorch.utils import unwrap_dead_wrappers as _unwrap_dead_wrappers
except ImportError:  # torch 1.x (no functorch in core)
    _unwrap_dead_wrappers = None


# torch >= 2.3: torch.compiler.is_compiling; 2.0-2.2: torch._utils.is_compiling. Dynamo reads
# either as True while it traces; in eager code they return False.
_is_compiling: Callable[[], bool] = getattr(
    getattr(torch, "compiler", None),
    "is_compiling",
    getattr(getattr(torch, "_utils", None), "is_compiling", lambda: False),
)

# --- argument binding --------------------------------------------------------------------------


class _Binder:
    """Binds ``apply(*args, **kwargs)`` to forward's positional parameters like Python does.

    Built once per class from forward's signature (without ctx); ``bind`` returns the positional
    tuple torch needs, with defaults filled in up to ``fill`` (all of them, or only up to the last
    argument given, for legacy-form classes whose inputs torch never filled).
    """

    __slots__ = (
        "bind",
        "bind_traceable",
        "defaults",
        "fill_all",
        "index",
        "names",
        "nreq",
        "owner",
        "posonly",
        "varargs",
    )

    def __init__(self, owner: str, params: list, fill_all: bool) -> None:
        self.owner = owner
        self.fill_all = fill_all
        named = [p for p in params if p.kind is not p.VAR_POSITIONAL]
        self.names = tuple(p.name for p in named)
        self.varargs = len(named) != len(params)
        self.defaults = tuple(_MISSING if p.default is p.empty else p.default for p in named)
        self.nreq = next((i for i, d in enumerate(self.defaults) if d is not _MISSING), len(named))
        self.posonly = frozenset(p.name for p in named if p.kind is p.POSITIONAL_ONLY)
        self.index = {p.name: i for i, p in enumerate(named) if p.kind is not p.POSITIONAL_ONLY}
        self.bind, self.bind_traceable = self._make_bind()

    @property
    def size(self) -> int:
        return len(self.names)

    def _error(self, message: str) -> TypeError:
        return TypeError(f"{self.owner}.apply() {message}")

    def _missing(self, missing: list) -> TypeError:
        quoted = [repr(name) for name in missing]
        listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
        plural = "s" if len(missing) > 1 else ""
        return self._error(f"missing {len(missing)} required positional argument{plural}: {listed}")

    def _check_keyword(self, name: str, given: int) -> int:
        i = self.index.get(name)
        if i is None:
            if name in self.posonly:
                raise self._error(
                    f"got a positional-only argument passed as keyword argument: {name!r}"
                )
            raise self._error(f"got an unexpected keyword argument {name!r}")
        if i < given:
            raise self._error(f"got multiple values for argument {name!r}")
        return i

    def _make_bind(self) -> Tuple[Callable[[tuple, dict], tuple], Callable[[tuple, dict], tuple]]:
        """Return ``(bind, bind_traceable)``: ``f(args, kwargs)`` -> the positional tuple for
        ``apply``, or a TypeError as Python raises it.

        ``bind`` is the fastest eager spelling; ``bind_traceable`` does the same without mutating
        a list, which dynamo cannot trace on torch 2.1-2.3.
        """
        n, nreq, defaults, index = len(self.names), self.nreq, self.defaults, self.index
        check_keyword, required, fill_all = self._check_keyword, self.names[:nreq], self.fill_all
        pairs = tuple(zip(self.names, defaults))

        def too_many(args: tuple, kwargs: dict) -> tuple:
            if not self.varargs:
                given = len(args)
                plural, verb = "" if n == 1 else "s", "was" if given == 1 else "were"
                raise self._error(f"takes {n} positional argument{plural} but {given} {verb} given")
            for name in kwargs:  # every named parameter is already filled positionally
                check_keyword(name, len(args))
            return args

        def check_missing(given: int, kwargs: dict) -> None:
            # Every required parameter not given positionally needs a keyword.
            missing = [name for name in required[given:] if name not in kwargs]
            if missing:
                raise self._missing(missing)

        names = tuple(None if name in self.posonly else name for name in self.names)

        def bind(args: tuple, kwargs: dict) -> tuple:
            given = len(args)
            if given > n:
                return too_many(args, kwargs)
            keys = tuple(kwargs)
            end = given + len(keys)
            if end >= nreq and keys == names[given:end]:  # the usual call: f(x, a=1, b=2)
                values = args + tuple(kwargs.values())
                return values + defaults[end:] if fill_all else values
            if given < nreq:
                check_missing(given, kwargs)
            bound = list(args)
            bound += defaults[given:]
            stop = n if fill_all else max(given, nreq)
            for name, value in kwargs.items():
                i = index.get(name, -1)
                if i < given:
                    check_keyword(name, given)  # raises the right TypeError
                bound[i] = value
                if i >= stop:
                    stop = i + 1
            # setup_context style: every default is filled in; legacy form: only up to the last
            # argument given, as the equivalent positional call would.
            return tuple(bound) if stop == n else tuple(bound[:stop])

        def bind_traceable(args: tuple, kwargs: dict) -> tuple:
            given = len(args)
            if given > n:
                return too_many(args, kwargs)
            for name in kwargs:
                if index.get(name, -1) < given:
                    check_keyword(name, given)
            stop = n if fill_all else max([given, nreq] + [index[name] + 1 for name in kwargs])
            values = args + tuple([kwargs.get(name, value) for name, value in pairs[given:stop]])
            if given < nreq:
                check_missing(given, kwargs)
            return values

        return bind, bind_traceable


# --- decoration-time checks --------------------------------------------------------------------


def _fail(cls_name: str, problem: str, fix: str) -> TypeError:
    return TypeError(f"{cls_name}: {problem}. {fix}")


def _defined(cls: type, name: str) -> bool:
    """True when a class between ``cls`` and torch's own classes defines ``name``."""
    for klass in cls.__mro__:
        if klass in _TORCH_BASES or klass.__module__ == "torch.autograd.function":
            return False
        if name in klass.__dict__:
            return True
    return False


def _require_static(cls: type, name: str) -> None:
    attr = inspect.getattr_static(cls, name)
    if not isinstance(attr, staticmethod):
        kind = type(attr).__name__
        raise _fail(
            cls.__qualname__,
            f"{name} must be a @staticmethod, found a {kind}",
            f"Put @staticmethod on {name} (autograd.Function methods are static).",
        )


def _torch_custom_fwd(fn: Callable) -> bool:
    """True if ``fn`` is wrapped by torch's own ``custom_fwd`` (torch.amp or torch.cuda.amp)."""
    while hasattr(fn, "__wrapped__"):
        # functools.wraps copies the user's names onto torch's wrapper; its code and globals stay.
        code = getattr(fn, "__code__", None)
        module = getattr(fn, "__globals__", {}).get("__name__", "")
        if code is not None and code.co_name == "decorate_fwd" and module.startswith("torch."):
            return True
        fn = fn.__wrapped__
    return False


def _positional_params(cls: type, fn: Callable, what: str) -> list:
    params = list(inspect.signature(fn).parameters.values())
    for p in params:
        if p.kind is p.KEYWORD_ONLY or p.kind is p.VAR_KEYWORD:
            shown = ("**" if p.kind is p.VAR_KEYWORD else "") + p.name
            raise _fail(
                cls.__qualname__,
                f"{what} has the keyword-only parameter {shown!r}, which cannot reach "
                "setup_context's inputs nor receive a gradient",
                f"Make {p.name!r} an ordinary positional parameter (with a default if optional).",
            )
    return params


class _Info:
    """What decoration decided for one class (stored on it under ``__autograd_compat__``)."""

    __slots__ = (
        "binder",
        "forced",
        "forward",
        "legacy_cls",
        "mode",
        "style",
        "traced",
        "twin",
    )

    def __init__(self, cls: Any, mode: str, style: str, binder: _Binder, forced: bool) -> None:
        self.forward: Callable = cls.forward  # the user's, before any change
        self.mode = mode  # "native" or "legacy"
        self.style = style  # "setup_context" or "legacy-form"
        self.binder = binder
        self.forced = forced
        self.twin: Optional[type] = None  # legacy-form subclass running the adapter
        self.traced: Any = None  # the class whose apply dynamo should trace
        self.legacy_cls: Optional[type] = None  # cache for as_legacy()


def _info(cls: Any) -> _Info:
    info = cls.__dict__.get(_INFO) if isinstance(cls, type) else None
    if info is None:
        name = getattr(cls, "__qualname__", repr(cls))
        raise TypeError(f"{name} is not decorated with @function; decorate the class first.")
    return info


# --- the adapter -------------------------------------------------------------------------------


def _pad_gradients(cls: type, backward: Callable, binder: _Binder) -> Callable:
    """Wrap backward so a missing trailing gradient becomes None where no gradient is needed.

    ``inputs`` always holds every parameter, defaults included, so torch expects one gradient per
    parameter (torch >= 2.2 raises "incorrect number of gradients" where 2.0/2.1 accepted fewer).
    The adapter behaves the same on every torch: it pads with None, or raises naming the parameter
    when that input requires grad (checked in eager mode; dynamo cannot read needs_input_grad on
    torch 2.1-2.3, so a compiled backward pads without the check).
    """
    names, size, varargs = binder.names, binder.size, binder.varargs

    @functools.wraps(backward)
    def padded(ctx: Any, *grads: Any) -> Any:
        # Spelled (ctx,) + grads: dynamo 2.1 fails on backward(ctx, *grads) ("unexpected keyword
        # argument 'proxy'" while cloning the ctx variable).
        result = backward(*((ctx,) + grads))  # noqa: RUF005
        count = len(result) if isinstance(result, tuple) else 1
        total = len(ctx.needs_input_grad) if varargs else size
        if count >= total:
            return result
        if not isinstance(result, tuple):  # torch accepts a bare gradient for one input
            result = (result,)
        if not _is_compiling():
            needs = ctx.needs_input_grad
            for i in range(count, total):
                if needs[i]:
                    name = names[i] if i < size else f"*args[{i - size}]"
                    raise RuntimeError(
                        f"{cls.__qualname__}.backward returned {count} gradient(s) for {total} "
                        f"inputs, but input {name!r} requires grad. Return one gradient (or None) "
                        "per parameter of forward, defaulted ones included."
                    )
        return result + (None,) * (total - count)

    padded.__autograd_compat_padded__ = backward  # type: ignore[attr-defined]
    return padded


def _legacy_form(cls: type, forward: Callable, setup_context: Callable) -> Dict[str, Any]:
    """The class attributes that turn a setup_context-style class into the legacy form.

    ``forward(ctx, *args)`` runs your ``forward(*args)``, then ``setup_context(ctx, args, output)``;
    ``setup_context`` is torch's own again, so torch (>= 2.0) passes ctx to forward.
    """

    @functools.wraps(forward)
    def legacy_forward(ctx: Any, *args: Any) -> Any:
        output = forward(*args)
        setup_context(ctx, args, output)
        return output

    legacy_forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_ONLY),
            *inspect.signature(forward).parameters.values(),
        ]
    )
    attributes: Dict[str, Any] = {"forward": staticmethod(legacy_forward)}
    if _BASE_SETUP_CONTEXT is not None:  # torch >= 2.0
        attributes["setup_context"] = _BASE_SETUP_CONTEXT
    return attributes


def _accept_save_for_forward(cls: type) -> None:
    """Give torch < 1.11's ctx a ``save_for_forward`` (torch 1.11 added it, with forward-mode AD
    reading saved tensors in ``jvp``), so that a setup_context calling it works for backward. On
    torch 1.10, whose forward AD runs ``jvp`` without saved tensors, ``jvp`` then raises a clear
    error instead of failing on an empty ``ctx.saved_tensors``."""
    backward_cls = cls._backward_cls  # type: ignore[attr-defined]
    if hasattr(backward_cls, "save_for_forward"):
        return

    def save_for_forward(self: Any, *tensors: Any) -> None:
        self._saved_for_forward_needs_torch_1_11 = True

    backward_cls.save_for_forward = save_for_forward
    if not _defined(cls, "jvp"):
        return
    user_jvp, name = cls.jvp, cls.__qualname__  # type: ignore[attr-defined]

    @functools.wraps(user_jvp)
    def jvp(ctx: Any, *tangents: Any) -> Any:
        if getattr(ctx, "_saved_for_forward_needs_torch_1_11", False):
            raise RuntimeError(
                f"{name}: ctx.save_for_forward needs torch >= 1.11; torch {torch.__version__} "
                "runs jvp without the tensors setup_context saved. Keep what jvp needs as ctx "
                "attributes (ctx.x = x) to support this torch, or upgrade it."
            )
        return user_jvp(ctx, *tangents)

    cls.jvp = staticmethod(jvp)  # type: ignore[attr-defined]


_NOT_COPIED = frozenset(
    ["__dict__", "__weakref__", "__init_subclass__", "__qualname__", "_backward_cls", _INFO]
)


def _make_twin(cls: type, forward: Callable, setup_context: Callable) -> type:
    """A legacy-form copy of a native class, for the places where that form is cheaper or the
    only one that compiles. Same ``__name__``: its grad_fn is also ``<Name>Backward``.

    Built from torch's Function with the class's attributes copied, not as a subclass, so that
    no ``__init_subclass__`` of the user's classes sees it.
    """
    namespace: Dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass not in _TORCH_BASES and klass.__module__ != "torch.autograd.function":
            namespace.update(
                (key, value) for key, value in vars(klass).items() if key not in _NOT_COPIED
            )
    namespace.update(
        {
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}.<legacy>",
            "apply": _TORCH_APPLY,  # torch's own, not the one decoration puts on cls
            **_legacy_form(cls, forward, setup_context),
        }
    )
    bases = tuple(b for b in cls.__mro__ if b in _TORCH_BASES)[:1]  # torch's Function class
    return type(cls)(cls.__name__, bases, namespace)


def _refusal(name: str) -> str:
    return (
        f"{name} runs on the legacy path (forced by legacy=True or {LEGACY_ENV}=1), which "
        "torch.func transforms do not support. Do not force the legacy path for classes used "
        "under torch.func."
    )


def _guard_subclasses(cls: Any, legacy_form: bool) -> None:
    """Give undecorated subclasses of ``cls`` torch's own ``apply`` (``cls.apply`` is bound to
    ``cls``'s own forward and signature); a subclass that is decorated gets its own. Where ``cls``
    was turned into the legacy form, a subclass overriding forward or setup_context cannot work
    undecorated: its ``apply`` says so."""
    own = cls.__dict__.get("__init_subclass__")

    def __init_subclass__(sub: Any, **kwargs: Any) -> None:
        if own is not None:
            own.__func__(sub, **kwargs)
        else:
            super(cls, sub).__init_subclass__(**kwargs)
        if legacy_form and ("forward" in sub.__dict__ or "setup_context" in sub.__dict__):
            sub.apply = staticmethod(functools.partial(_undecorated, sub.__qualname__))
        else:
            sub.apply = _TORCH_APPLY

    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


def _explained(cls: type, error: TypeError) -> TypeError:
    """torch 1.8's error for a non-tensor output, with what to do about it; others unchanged."""
    if "expected Tensor or tuple of Tensor" not in str(error):
        return error
    return TypeError(
        f"{cls.__qualname__}: forward returned a non-tensor output, which torch "
        f"{torch.__version__} does not allow (non-tensor outputs need torch >= 1.9). Return only "
        f"tensors, or keep the value on ctx in setup_context. (torch: {error})"
    )


def _undecorated(name: str, *args: Any, **kwargs: Any) -> Any:
    raise TypeError(
        f"{name} subclasses a class decorated with @function and overrides its methods, but is "
        "not decorated itself; decorate it with @function too."
    )


def _apply(
    cls: type,
    binder: _Binder,
    run: Callable,
    native: Optional[Callable] = None,
    refuse: Optional[str] = None,
    unwrap: Optional[Callable] = None,
    traced: Any = None,
) -> Callable:
    """Build ``cls.apply``: bind the arguments when needed, then ``run`` the positional tuple.

    Under active torch.func transforms the call goes to ``native`` (torch's own apply on ``cls``),
    or raises ``refuse`` where the class cannot run there. ``unwrap`` is torch's dead-wrapper
    unwrapping, done exactly as torch 2.0-2.14's own apply does it. While dynamo traces this
    function (``torch.compile(Fn.apply)``, or ``op = Fn.apply`` called in compiled code), the
    bound call goes to ``traced.apply``, which dynamo handles itself. The common eager call
    (all arguments positional, none missing) costs two or three checks on top of ``run``.
    """
    bind, bind_traceable = binder.bind, binder.bind_traceable
    # Arguments need binding when keywords are given or the positional count is off. A legacy
    # form binds for keywords only (torch passes what it gets); *args takes any surplus.
    low = 0 if not binder.fill_all else binder.size
    high = binder.size if binder.fill_all and not binder.varargs else sys.maxsize

    if traced is None and refuse is None and low == high:  # torch 1.8-1.12, fixed arity

        def apply(*args: Any, **kwargs: Any) -> Any:
            if kwargs or len(args) != low:
                args = bind(args, kwargs)
            try:
                return run(*args)
            except TypeError as error:
                raise _explained(cls, error) from None

    elif traced is None and refuse is None:  # torch 1.8-1.12: nothing to hand over to

        def apply(*args: Any, **kwargs: Any) -> Any:
            if kwargs or not low <= len(args) <= high:
                args = bind(args, kwargs)
            try:
                return run(*args)
            except TypeError as error:
                raise _explained(cls, error) from None

    elif traced is None:  # torch 1.13: functorch is bundled and rejects every Function

        def apply(*args: Any, **kwargs: Any) -> Any:
            if kwargs or not low <= len(args) <= high:
                args = bind(args, kwargs)
            if _transforms_active():
                raise RuntimeError(refuse)
            return run(*args)

    else:

        def apply(*args: Any, **kwargs: Any) -> Any:
            if _is_compiling():  # a constant while dynamo traces; the code below is not traceable
                if kwargs or not low <= len(args) <= high:
                    args = bind_traceable(args, kwargs)
                return traced.apply(*args)
            if kwargs or not low <= len(args) <= high:
                args = bind(args, kwargs)
            if _transforms_active():
                if native is not None:
                    return native(*args)
                if refuse is not None:
                    raise RuntimeError(refuse)
            if unwrap is not None:
                args = unwrap(args)
            return run(*args)

    return apply


@overload
def function(cls: _F, *, legacy: Optional[bool] = None) -> _F: ...


@overload
def function(cls: None = None, *, legacy: Optional[bool] = None) -> Callable[[_F], _F]: ...


def function(
    cls: Optional[_F] = None, *, legacy: Optional[bool] = None
) -> Union[_F, Callable[[_F], _F]]:
    """Make a setup_context-style ``torch.autograd.Function`` run on every torch from 1.8.

    Returns the same class, with an ``apply`` that accepts keyword arguments and always passes
    ``setup_context`` the full positional ``inputs`` (defaults filled in). ``legacy=True`` forces
    the torch 1.x adapter on any torch (so does the environment variable ``COMPATFN_LEGACY=1``);
    ``legacy=False`` ignores the variable.

    Example::

        @function
        class Double(torch.autograd.Function):
            @staticmethod
            def forward(x):
                return 2 * x

            @staticmethod
            def setup_context(ctx, inputs, output):
                pass

            @staticmethod
            def backward(ctx, grad):
                return 2 * grad

        Double.apply(torch.ones(2, requires_grad=True))
    """
    if cls is None:
        return functools.partial(function, legacy=legacy)  # type: ignore[return-value]
    return _decorate(cls, legacy)


def _decorate(cls: Any, legacy: Optional[bool]) -> Any:
    if not isinstance(cls, type):
        kind = type(cls).__name__
        name = getattr(cls, "__qualname__", repr(cls))
        raise TypeError(
            f"@function decorates a torch.autograd.Function subclass, got the {kind} {name}. "
            "Put it on the class statement."
        )
    if not issubclass(cls, _Function):
        raise _fail(
            cls.__qualname__,
            "@function needs a torch.autograd.Function subclass",
            f"Write `class {cls.__name__}(torch.autograd.Function)`.",
        )
    forced = bool(legacy) or (legacy is None and os.environ.get(LEGACY_ENV, "") not in ("", "0"))
    existing = cls.__dict__.get(_INFO)
    if existing is not None:  # decorating twice is harmless; contradicting the first is not
        if legacy is not None and forced != existing.forced and existing.style == "setup_context":
            raise _fail(
                cls.__qualname__,
                f"already decorated in {existing.mode} mode, now asked for legacy={legacy}",
                "Decorate the class once; use as_legacy(cls) for a legacy-mode twin.",
            )
        return cls

    name = cls.__qualname__
    for method in ("forward", "setup_context", "backward", "vjp", "jvp", "vmap"):
        if _defined(cls, method):
            _require_static(cls, method)
    if not _defined(cls, "forward"):
        raise _fail(name, "no forward", "Define a @staticmethod forward(*args).")
    if not (_defined(cls, "backward") or _defined(cls, "vjp")):
        raise _fail(
            name,
            "no backward",
            "Define a @staticmethod backward(ctx, *grad_outputs) returning one gradient per input.",
        )
    forward = cls.forward
    params = _positional_params(cls, forward, "forward")
    has_setup_context = _defined(cls, "setup_context")

    if has_setup_context:
        if params and params[0].name == "ctx":
            raise _fail(
                name,
                "forward takes ctx but setup_context is also defined",
                "Either drop ctx from forward (setup_context style: forward(*args) plus "
                "setup_context(ctx, inputs, output)) or drop setup_context (legacy style).",
            )
        try:
            inspect.signature(cls.setup_context).bind(None, None, None)
        except TypeError:
            raise _fail(
                name,
                "setup_context must accept (ctx, inputs, output)",
                "Define @staticmethod setup_context(ctx, inputs, output).",
            ) from None
        if _torch_custom_fwd(forward):
            raise _fail(
                name,
                "forward is decorated with torch's custom_fwd, which stores its autocast state on "
                "forward's first argument (here your input tensor, not ctx) so backward fails "
                "(pytorch issue #132388)",
                f"Use custom_fwd / custom_bwd from {__name__} instead.",
            )
        style = "setup_context"
        binder = _Binder(name, params, fill_all=True)
    else:
        if not _takes_ctx(forward):
            first = _first_name(forward)
            raise _fail(
                name,
                f"forward's first parameter is {first or 'missing'!r}, not ctx, and there is no "
                "setup_context",
                "Add @staticmethod setup_context(ctx, inputs, output) (setup_context style), or "
                "give forward a leading parameter named ctx (legacy style).",
            )
        style = "legacy-form"
        binder = _Binder(name, params[1:], fill_all=False)

    mode = "legacy" if style == "legacy-form" or forced or not HAS_SETUP_CONTEXT else "native"
    info = _Info(cls, mode, style, binder, forced)
    setattr(cls, _INFO, info)

    user_name = "backward" if _defined(cls, "backward") else "vjp"
    backward = getattr(cls, user_name)
    backward = getattr(backward, "__autograd_compat_padded__", backward)
    _autocast_setup_context(cls, forward, backward)
    if style == "setup_context":
        # Wrap whichever of backward / vjp (its alias, torch >= 1.9) the class defines.
        if any(d is not _MISSING for d in binder.defaults):
            backward = _pad_gradients(cls, backward, binder)
        target = user_name if hasattr(_Function, "vjp") else "backward"  # torch 1.8: no vjp alias
        if backward is not getattr(cls, target):
            setattr(cls, target, staticmethod(backward))
        if mode == "legacy":  # the class itself takes the legacy form
            for key, value in _legacy_form(cls, forward, cls.setup_context).items():
                setattr(cls, key, value)
            _accept_save_for_forward(cls)
        elif _C_APPLY_BINDS or TORCH_VERSION < (2, 4):
            info.twin = _make_twin(cls, forward, cls.setup_context)

    # What dynamo should trace when it runs ``apply`` itself (torch >= 2.0): the class, which it
    # intercepts, or on torch 2.1-2.3 the legacy-form twin, since dynamo rejects setup_context
    # there ("NYI - autograd.Function with custom setup_context method", pytorch #118397).
    traced = None
    if HAS_SETUP_CONTEXT:
        traced = info.twin if mode == "native" and TORCH_VERSION < (2, 4) else cls
    info.traced = traced
    torch_apply = _TORCH_APPLY.__get__(None, cls)
    if mode == "legacy":
        refuse = None
        if style == "setup_context" and HAS_SETUP_CONTEXT:  # forced onto the legacy path
            refuse = _refusal(name)
        elif style == "setup_context" and hasattr(torch._C, "_are_functorch_transforms_active"):
            refuse = (  # torch 1.13 bundles functorch, which rejects every autograd.Function
                f"{name}: functorch transforms (vmap, grad, jacrev, jvp) support custom "
                f"autograd.Functions from torch 2.0 on (torch.func); this is torch "
                f"{torch.__version__}. Upgrade torch to use {name} under transforms."
            )
        apply = _apply(cls, binder, torch_apply, refuse=refuse, traced=traced)
    elif _C_APPLY_BINDS:
        # torch >= 2.15 binds defaults inside its C-level apply, calling inspect.signature(forward)
        # .bind on every call. The legacy-form twin runs forward and setup_context identically
        # without that cost; torch.func and torch.compile use the class itself.
        assert info.twin is not None
        eager = _C_APPLY.__get__(None, info.twin)
        apply = _apply(cls, binder, eager, torch_apply, traced=traced)
    else:
        # torch 2.0-2.14: torch's Python apply binds with inspect (2.2+) and then calls the C-level
        # apply; call the latter with the tuple bound here.
        eager = _C_APPLY.__get__(None, cls)
        apply = _apply(cls, binder, eager, torch_apply, unwrap=_unwrap_dead_wrappers, traced=traced)
    if mode == "native" and (2, 3) <= TORCH_VERSION < (2, 4):
        # torch 2.3.x: the first torch.func transform of a Function in a process imports
        # torch._dynamo lazily, under the transform, and that import draws random numbers, which
        # vmap refuses (pytorch #128607). Import it now, outside any transform.
        importlib.import_module("torch._dynamo")
    apply.__doc__ = f"Apply {name}; arguments as for forward{inspect.signature(forward)}."
    apply.__qualname__ = f"{name}.apply"
    cls.apply = staticmethod(apply)
    _guard_subclasses(cls, mode == "legacy" and style == "setup_context")
    return cls


def mode(cls: type) -> str:
    """Return ``"native"`` or ``"legacy"``: the path a decorated class takes on this torch.

    Example::

        mode(ClippedReLU)  # "native" on torch >= 2.0, "legacy" on torch 1.x
    """
    return _info(cls).mode


def as_legacy(cls: _F) -> _F:
    """Return a twin of decorated ``cls`` forced onto the legacy (torch 1.x) path.

    Useful to check that both paths agree on a torch that has both (the testing helpers do).
    The twin subclasses ``cls`` and keeps its name, so ``grad_fn`` is still ``<Name>Backward``.

    Example::

        LegacyReLU = as_legacy(ReLU)
        assert mode(LegacyReLU) == "legacy"
    """
    info = _info(cls)
    if info.mode == "legacy":
        return cls
    if info.legacy_cls is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        info.legacy_cls = _decorate(type(cls)(cls.__name__, (cls,), namespace), legacy=True)
    return info.legacy_cls  # type: ignore[return-value]


def functional(cls: Any) -> Callable[..., Any]:
    """Return a plain function that calls ``cls.apply``, with forward's signature and docstring.

    This is the form libraries expose (``my_op = MyFunction.apply``), keyword arguments included,
    and the form that compiles (``fullgraph=True``) wherever torch.compile works: dynamo takes no
    keyword arguments to ``Fn.apply`` before torch 2.13, so they are bound here while it traces,
    and on torch 2.1-2.3, where dynamo rejects setup_context-style Functions (pytorch #118397),
    the legacy-form twin is traced instead.

    Example::

        clipped_relu = functional(ClippedReLU)
        clipped_relu(x, clip=2.0)
    """
    info = _info(cls)
    forward = info.forward if info.style == "setup_context" else _drop_ctx(info.forward)
    apply, traced, bind = cls.apply, info.traced, info.binder.bind_traceable

    @functools.wraps(forward)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _is_compiling():  # a constant while dynamo traces
            # Dynamo intercepts ``cls.apply`` and takes no keywords there: bind them here.
            return traced.apply(*bind(args, kwargs))
        return apply(*args, **kwargs)

    call.__doc__ = forward.__doc__ or cls.__doc__
    return call


def _drop_ctx(forward: Callable) -> Callable:
    signature = inspect.signature(forward)
    shown = signature.replace(parameters=list(signature.parameters.values())[1:])

    @functools.wraps(forward)
    def without_ctx(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never called
        return forward(*args, **kwargs)

    without_ctx.__signature__ = shown  # type: ignore[attr-defined]
    return without_ctx


# --- automatic mixed precision ------------------------------------------------------------------

_AUTOCAST_STATE = ("_fwd_used_autocast", "_dtype")  # the ctx attributes torch's custom_fwd sets


def _autocast_api(device_type: str) -> Tuple[Callable, Callable, Callable]:
    """(is_enabled(), dtype(), autocast(enabled, dtype)) for ``device_type`` on this torch."""
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4: device-generic autocast queries
        return (
            functools.partial(torch.is_autocast_enabled, device_type),
            functools.partial(torch.get_autocast_dtype, device_type),
            lambda enabled, dtype: torch.autocast(device_type, enabled=enabled, dtype=dtype),
        )
    if device_type == "cuda":
        if hasattr(torch, "autocast"):  # torch >= 1.10: dtype choice (bfloat16 too)
            return (
                torch.is_autocast_enabled,
                torch.get_autocast_gpu_dtype,
                lambda enabled, dtype: torch.autocast("cuda", enabled=enabled, dtype=dtype),
            )
        return (  # torch 1.8/1.9: CUDA autocast is float16 only
            torch.is_autocast_enabled,
            lambda: torch.float16,
            lambda enabled, dtype: torch.cuda.amp.autocast(enabled=enabled),
        )
    if device_type == "cpu" and hasattr(torch, "is_autocast_cpu_enabled"):  # torch >= 1.10
        return (
            torch.is_autocast_cpu_enabled,
            torch.get_autocast_cpu_dtype,
            lambda enabled, dtype: torch.autocast("cpu", enabled=enabled, dtype=dtype),
        )
    needed = "1.10" if device_type == "cpu" else "2.4"
    raise ValueError(
        f"autocast for device_type={device_type!r} needs torch >= {needed}; this is torch "
        f"{torch.__version__}. Use device_type='cuda', or upgrade torch."
    )


def _cast(value: Any, device_type: str, dtype: Any) -> Any:
    # As torch's own amp ``_cast``: floating tensors of that device, except float64, to ``dtype``.
    if isinstance(value, torch.Tensor):
        eligible = value.is_floating_point() and value.device.type == device_type
        return value.to(dtype) if eligible and value.dtype is not torch.float64 else value
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast(v, device_type, dtype) for k, v in value.items()}
    return value


def _first_name(fn: Callable) -> str:
    """The name of ``fn``'s first named positional parameter, or ``""``."""
    params = list(inspect.signature(fn).parameters.values())
    return params[0].name if params and params[0].kind is not params[0].VAR_POSITIONAL else ""


def _takes_ctx(fn: Callable) -> bool:
    """Whether ``fn`` takes ctx first (legacy form), judged by its first parameter's name."""
    first = _first_name(fn)
    return first.startswith("ctx") or first in ("context", "self", "_")


def custom_fwd(fwd: Optional[Callable] = None, *, device_type: str, cast_inputs: Any = None) -> Any:
    """Run forward under autocast as torch's ``custom_fwd`` does, for either Function style.

    Works on a ctx-less ``forward(*args)`` (the class must be decorated with ``@function``, which
    records the autocast state on ctx before ``setup_context``) and on ``forward(ctx, *args)``.
    With ``cast_inputs`` set, inside an autocast region the floating-point inputs of
    ``device_type`` are cast to it and forward (and setup_context) run with autocast disabled.
    Pair it with :func:`custom_bwd`. Uses ``torch.amp.custom_fwd`` (torch >= 2.4) or
    ``torch.cuda.amp.custom_fwd`` for ctx-taking forwards where torch has them; never touches the
    caller's tensors; raises ValueError where this torch has no autocast for ``device_type``.

    Example::

        @function
        class Linear(torch.autograd.Function):
            @staticmethod
            @custom_fwd(device_type="cuda", cast_inputs=torch.float16)
            def forward(x, w):
                return x @ w
            ...
            @staticmethod
            @custom_bwd(device_type="cuda")
            def backward(ctx, grad):
                ...
    """
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    is_enabled, get_dtype, autocast = _autocast_api(device_type)

    if _takes_ctx(fwd):  # legacy form: torch's own decorator where it has one for this device
        if hasattr(getattr(torch, "amp", None), "custom_fwd"):  # torch >= 2.4
            wrapped = torch.amp.custom_fwd(fwd, device_type=device_type, cast_inputs=cast_inputs)
        elif device_type == "cuda":  # torch < 2.4 (no deprecation warning there)
            wrapped = torch.cuda.amp.custom_fwd(fwd, cast_inputs=cast_inputs)
        else:

            @functools.wraps(fwd)
            def wrapped(ctx: Any, *args: Any, **kwargs: Any) -> Any:
                enabled = is_enabled()
                ctx._dtype = get_dtype()
                ctx._fwd_used_autocast = enabled and cast_inputs is None
                if enabled and cast_inputs is not None:
                    with autocast(False, ctx._dtype):
                        args = _cast(args, device_type, cast_inputs)
                        return fwd(ctx, *args, **_cast(kwargs, device_type, cast_inputs))
                return fwd(ctx, *args, **kwargs)

    else:

        @functools.wraps(fwd)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if cast_inputs is not None and is_enabled():
                with autocast(False, get_dtype()):
                    args = _cast(args, device_type, cast_inputs)
                    return fwd(*args, **_cast(kwargs, device_type, cast_inputs))
            return fwd(*args, **kwargs)

    wrapped.__autocast_fwd__ = (device_type, cast_inputs)  # type: ignore[attr-defined]
    return wrapped


def custom_bwd(bwd: Optional[Callable] = None, *, device_type: str) -> Any:
    """Run backward under the autocast state and dtype that forward ran under.

    Pair it with :func:`custom_fwd` (same ``device_type``). Uses ``torch.amp.custom_bwd``
    (torch >= 2.4) or ``torch.cuda.amp.custom_bwd`` where torch has one for the device.

    Example::

        @staticmethod
        @custom_bwd(device_type="cpu")
        def backward(ctx, grad):
            ...
    """
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    _, _, autocast = _autocast_api(device_type)
    if hasattr(getattr(torch, "amp", None), "custom_bwd"):  # torch >= 2.4
        wrapped = torch.amp.custom_bwd(bwd, device_type=device_type)
    elif device_type == "cuda":
        wrapped = torch.cuda.amp.custom_bwd(bwd)
    else:

        @functools.wraps(bwd)
        def wrapped(ctx: Any, *grads: Any) -> Any:
            with autocast(ctx._fwd_used_autocast, ctx._dtype):
                return bwd(ctx, *grads)

    wrapped.__autocast_bwd__ = device_type  # type: ignore[attr-defined]
    return wrapped


def _autocast_setup_context(cls: Any, forward: Callable, backward: Callable) -> None:
    """Check custom_fwd/custom_bwd pairing; record the autocast state for a ctx-less forward."""
    name = cls.__qualname__
    fwd_amp = getattr(forward, "__autocast_fwd__", None)
    bwd_device = getattr(backward, "__autocast_bwd__", None)
    if bwd_device is not None and (fwd_amp is None or fwd_amp[0] != bwd_device):
        shown = f"device_type={fwd_amp[0]!r}" if fwd_amp else "nothing"
        raise _fail(
            name,
            f"backward uses custom_bwd(device_type={bwd_device!r}) but forward has {shown}",
            f"Decorate forward with custom_fwd(device_type={bwd_device!r}) from {__name__}.",
        )
    if fwd_amp is None or _takes_ctx(forward):
        return
    if getattr(cls.setup_context, "__autocast_recorded__", False):  # done for a base class
        return
    device_type, cast_inputs = fwd_amp
    is_enabled, get_dtype, _ = _autocast_api(device_type)
    user_setup_context = cls.setup_context

    @functools.wraps(user_setup_context)
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> Any:
        enabled = is_enabled()  # the state forward was called under (apply does not change it)
        ctx._dtype = get_dtype()
        ctx._fwd_used_autocast = enabled and cast_inputs is None
        if enabled and cast_inputs is not None:  # setup_context sees what forward saw
            inputs = _cast(inputs, device_type, cast_inputs)
        return user_setup_context(ctx, inputs, output)

    setup_context.__autocast_recorded__ = True  # type: ignore[attr-defined]
    cls.setup_context = staticmethod(setup_context)  # type: ignore[attr-defined]


# --- feature report ----------------------------------------------------------------------------


def _probe(fn: Callable[[], Any]) -> bool:
    try:
        return bool(fn())
    except Exception:
        return False


def _probe_kwargs() -> bool:
    class Probe(_Function):
        @staticmethod
        def forward(ctx: Any, x: Any, scale: float = 1.0) -> Any:
            return x * scale

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    return Probe.apply(torch.ones(1), scale=2.0) is not None


def _probe_defaults() -> bool:
    seen = []

    class Probe(_Function):
        @staticmethod
        def forward(x: Any, scale: float = 1.0) -> Any:
            return x * scale

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            seen.append(len(inputs))

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    Probe.apply(torch.ones(1))
    return seen == [2]


def _probe_forward_ad() -> bool:
    import torch.autograd.forward_ad as fwAD

    class Probe(_Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad * 2

        @staticmethod
        def jvp(ctx: Any, tangent: Any) -> Any:
            return tangent * 3  # not forward's derivative: proves that jvp itself ran

    # torch 1.9 has forward AD but runs it through forward's ops, never calling jvp.
    with fwAD.dual_level():
        out = Probe.apply(fwAD.make_dual(torch.ones(1), torch.ones(1)))
        tangent = fwAD.unpack_dual(out).tangent
        return tangent is not None and float(tangent) == 3.0


def _compile_support() -> str:
    if not hasattr(torch, "compile"):
        return "unavailable: torch.compile needs torch >= 2.0"
    try:
        with warnings.catch_warnings():  # torch 2.15 warns about torch.jit while importing dynamo
            warnings.simplefilter("ignore")
            import torch._dynamo as dynamo
    except Exception as error:  # pragma: no cover - broken install
        return f"unavailable: torch._dynamo fails to import ({error})"
    # torch 2.0 has only eval_frame.check_if_dynamo_supported (raises); 2.1+ is_dynamo_supported.
    check = getattr(getattr(dynamo, "eval_frame", None), "check_if_dynamo_supported", None)
    try:
        if check is not None:
            check()
        elif not getattr(dynamo, "is_dynamo_supported", lambda: True)():
            raise RuntimeError("dynamo is not supported here")
    except Exception as error:
        return (
            f"unavailable: torch {torch.__version__} on Python "
            f"{sys.version_info[0]}.{sys.version_info[1]}: {error}"
        )
    # Only a version tells: torch 2.4 compiles setup_context-style Functions (pytorch #118397);
    # 2.1-2.3 raise "NYI - autograd.Function with custom setup_context method".
    if TORCH_VERSION >= (2, 4):
        return (
            "native: functional(Fn) and Fn.apply compile with fullgraph=True (keywords to a "
            "direct Fn.apply(...) call need torch >= 2.13 or functional(Fn))"
        )
    return (
        "functional: functional(Fn), torch.compile(Fn.apply) and legacy=True classes compile; "
        "a direct Fn.apply(...) call in compiled code of a setup_context-style class does not "
        "(pytorch #118397)"
    )


def features() -> Dict[str, Any]:
    """Report what the running torch offers for custom Functions, each feature detected.

    Example::

        >>> features()["setup_context"]
        True
    """
    amp = getattr(torch, "amp", None)
    cpu_autocast = getattr(getattr(torch, "cpu", None), "amp", None)
    return {
        "torch": str(torch.__version__),
        "setup_context": HAS_SETUP_CONTEXT,
        "apply_kwargs": _probe(_probe_kwargs),
        "default_binding": HAS_SETUP_CONTEXT and _probe(_probe_defaults),
        "forward_ad": importlib.util.find_spec("torch.autograd.forward_ad") is not None
        and _probe(_probe_forward_ad),
        "torch_func": importlib.util.find_spec("torch.func") is not None
        and hasattr(_Function, "generate_vmap_rule"),
        "compile": _compile_support(),
        "amp_device_generic": hasattr(amp, "custom_fwd"),
        "cpu_autocast": cpu_autocast is not None and hasattr(cpu_autocast, "autocast"),
    }
