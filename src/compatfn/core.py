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
* torch 1.x, ``legacy=True`` or ``COMPATFN_LEGACY=1`` ("legacy" mode): the class itself takes the
  legacy form, a ``forward(ctx, <your parameters>)`` that calls your ``forward`` and then your
  ``setup_context(ctx, inputs, output)``: the form torch 1.x understands.
* Classes already written in the legacy ``forward(ctx, *args)`` form are left as they are, apart
  from an ``apply`` that also takes keyword arguments.
* When forward has more than one parameter, backward is wrapped to pad missing trailing gradients
  with None (see ``_complete_gradients``).
* Decoration keeps what it replaced on the class, so subclasses build on your methods (see
  ``_user_attribute``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import linecache
import os
import re
import sys
import threading
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

#: ``COMPATFN_LEGACY=1`` forces the legacy adapter on every class decorated while it is set. Every
#: copy of this module (the package's and each vendored one) reads the same variable.
LEGACY_ENV = "COMPATFN_LEGACY"
_ENV_TRUE = ("1", "true", "yes", "on")
_ENV_FALSE = ("", "0", "false", "no", "off")


def env_forces_legacy() -> bool:
    """Whether ``COMPATFN_LEGACY`` asks for the legacy path (read at each decoration).

    ``1``/``true``/``yes``/``on`` force it and ``0``/``false``/``no``/``off`` or empty do not, in
    any case and with surrounding spaces; any other value is a ``ValueError`` naming the variable.

    Example::

        os.environ["COMPATFN_LEGACY"] = " Yes "
        assert env_forces_legacy()
    """
    raw = os.environ.get(LEGACY_ENV, "")
    value = raw.strip().lower()
    if value in _ENV_TRUE:
        return True
    if value in _ENV_FALSE:
        return False
    raise ValueError(
        f"{LEGACY_ENV}={raw!r} is not understood: set it to one of {', '.join(_ENV_TRUE)} to force "
        f"the legacy path, or to one of {', '.join(_ENV_FALSE[1:])} (or leave it empty or unset) "
        "not to."
    )


_Function = torch.autograd.Function
_MISSING: Any = object()


# === torch facts =============================================================================
# Every fact about the running torch that this module's behaviour depends on, detected at import.
# This block is the only code that reads TORCH_VERSION; the rest of the module (and every module
# built on it) reads the names below. Each version-based flag gives the upstream issue
# or PR on a line of its own, in one greppable form:
#     # Upstream: https://github.com/pytorch/pytorch/...
# so that `grep -n "Upstream:" core.py` lists every torch quirk and where it lives. Long
# explanations are written once as a `# NOTE: [name]` and referenced with `See NOTE: [name]`.


def _parse_version(version: str) -> Tuple[int, int]:
    # torch 1.8 has a plain str __version__, 1.10+ a TorchVersion; both parse the same way. Never
    # compare version strings ("2.13" < "2.2").
    match = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


#: ``(major, minor)`` of the running torch, e.g. ``(2, 15)``. Read only by the flags of this block.
TORCH_VERSION = _parse_version(torch.__version__)

# --- autograd.Function API (feature-detected) ---

#: torch >= 2.0: ``setup_context`` exists; torch runs forward without ctx when a class defines it.
# Upstream: https://github.com/pytorch/pytorch/pull/89859
HAS_SETUP_CONTEXT = hasattr(_Function, "setup_context")
_BASE_SETUP_CONTEXT = inspect.getattr_static(_Function, "setup_context", None)

#: torch >= 1.9: ``vjp`` is an alias of ``backward`` (torch 1.8 knows only ``backward``).
HAS_VJP_ALIAS = hasattr(_Function, "vjp")

#: torch >= 1.11: ``ctx.save_for_forward`` (forward-mode AD reads saved tensors in ``jvp``).
CTX_HAS_SAVE_FOR_FORWARD = hasattr(torch.autograd.function.BackwardCFunction, "save_for_forward")

#: torch >= 1.13: functorch ships in torch; its transforms reject every autograd.Function on 1.13.
HAS_FUNCTORCH = hasattr(torch._C, "_are_functorch_transforms_active")

#: torch >= 2.0: ``torch.func`` transforms run autograd.Functions (``generate_vmap_rule``/``vmap``).
HAS_TORCH_FUNC = importlib.util.find_spec("torch.func") is not None and hasattr(
    _Function, "generate_vmap_rule"
)

# The C-level apply (``_C._FunctionBase.apply``). Calling it bound to a class skips torch's Python
# ``Function.apply`` wrapper (torch 2.0-2.14). torch's own ``Function.apply`` is that Python
# classmethod on torch 2.0-2.14; torch 1.x and torch 2.15+ expose the C-level apply directly.
_C_APPLY = torch._C._FunctionBase.__dict__["apply"]
_TORCH_APPLY = inspect.getattr_static(_Function, "apply")

#: torch >= 2.15: the C-level apply binds defaults itself, calling ``inspect.signature(forward)
#: .bind`` on every setup_context-style call (2.2-2.14 did it in the Python apply).
# Upstream: https://github.com/pytorch/pytorch/pull/190694
C_APPLY_BINDS_DEFAULTS = HAS_SETUP_CONTEXT and _TORCH_APPLY is _C_APPLY

#: torch >= 2.2: ``inputs`` holds forward's defaults and torch then expects one gradient per
#: parameter, defaulted ones included (2.0-2.1 passed only the arguments given). See NOTE:
#: [gradient padding].
# Upstream: https://github.com/pytorch/pytorch/pull/108561
APPLY_FILLS_DEFAULTS = HAS_SETUP_CONTEXT and TORCH_VERSION >= (2, 2)

# torch 2.0-2.14 unwrap dead functorch wrappers in Function.apply; apply here does the same.
_unwrap_dead_wrappers: Optional[Callable[[tuple], tuple]]
try:
    from torch._functorch.utils import unwrap_dead_wrappers as _unwrap_dead_wrappers
except ImportError:  # torch 1.x (no functorch in core)
    _unwrap_dead_wrappers = None

# --- torch.compile / dynamo ---

#: torch 2.0-2.3: dynamo rejects setup_context-style Functions ("NYI - autograd.Function with
#: custom setup_context method"); the legacy form compiles. See NOTE: [dynamo traces the
#: legacy-form copy].
# Upstream: https://github.com/pytorch/pytorch/issues/118397
DYNAMO_REJECTS_SETUP_CONTEXT = HAS_SETUP_CONTEXT and TORCH_VERSION < (2, 4)

#: torch 2.4-2.5: dynamo calls a setup_context-style forward with a ctx when no input requires
#: grad ("ArgsMismatchError: too many positional arguments"); fixed in 2.6.
# Upstream: https://github.com/pytorch/pytorch/issues/133529
# Upstream: https://github.com/pytorch/pytorch/pull/137809
DYNAMO_PASSES_CTX_WITHOUT_GRAD = HAS_SETUP_CONTEXT and (2, 4) <= TORCH_VERSION < (2, 6)

#: Where dynamo mishandles the setup_context style, the code dynamo runs itself traces a
#: legacy-form copy of the class instead. See NOTE: [dynamo traces the legacy-form copy].
DYNAMO_NEEDS_LEGACY_FORM = DYNAMO_REJECTS_SETUP_CONTEXT or DYNAMO_PASSES_CTX_WITHOUT_GRAD

#: torch >= 2.4: a direct ``Fn.apply(...)`` of a setup_context-style class compiles.
COMPILES_SETUP_CONTEXT = HAS_SETUP_CONTEXT and not DYNAMO_REJECTS_SETUP_CONTEXT

#: torch 2.1-2.3: dynamo cannot read ``ctx.needs_input_grad`` while tracing backward.
# Upstream: https://github.com/pytorch/pytorch/issues/119059
# Upstream: https://github.com/pytorch/pytorch/pull/123700
DYNAMO_CANNOT_READ_NEEDS_INPUT_GRAD = HAS_SETUP_CONTEXT and TORCH_VERSION < (2, 4)

#: torch 2.3.x: the first torch.func transform of a Function in a process imports torch._dynamo
#: lazily, under the transform, and that import draws random numbers, which vmap refuses.
#: ``prepare_torch_func()`` imports it beforehand.
# Upstream: https://github.com/pytorch/pytorch/issues/128607
FUNC_NEEDS_DYNAMO_IMPORTED = TORCH_VERSION == (2, 3)

# --- automatic mixed precision ---

#: torch >= 2.4: ``torch.amp.custom_fwd/custom_bwd`` and ``torch.get_autocast_dtype(device)``.
HAS_DEVICE_GENERIC_AMP = hasattr(getattr(torch, "amp", None), "custom_fwd") and hasattr(
    torch, "get_autocast_dtype"
)
#: torch >= 1.10: ``torch.autocast`` with a dtype choice, and CPU autocast.
HAS_TORCH_AUTOCAST = hasattr(torch, "autocast")
HAS_CPU_AUTOCAST = hasattr(torch, "is_autocast_cpu_enabled")

# --- run-time state (cheap calls, no decisions) ---

#: Whether torch.func transforms are active (always False before torch 1.13).
transforms_active: Callable[[], bool] = getattr(
    torch._C, "_are_functorch_transforms_active", lambda: False
)

#: Whether dynamo traces or non-strict torch.export runs this code (torch >= 2.3:
#: ``torch.compiler.is_compiling``; 2.0-2.2: ``torch._utils.is_compiling``; False before).
is_compiling: Callable[[], bool] = getattr(
    getattr(torch, "compiler", None),
    "is_compiling",
    getattr(getattr(torch, "_utils", None), "is_compiling", lambda: False),
)

#: Whether dynamo traces this code (torch >= 2.3 ``torch.compiler.is_dynamo_compiling``; before,
#: ``is_compiling``). False while non-strict torch.export runs the module's Python code for real.
dynamo_tracing: Callable[[], bool] = getattr(
    getattr(torch, "compiler", None), "is_dynamo_compiling", is_compiling
)


def prepare_torch_func() -> None:
    """Do what this torch needs before a first torch.func transform (import torch._dynamo on
    torch 2.3.x, see ``FUNC_NEEDS_DYNAMO_IMPORTED``); nothing elsewhere.

    Example::

        prepare_torch_func()
        torch.func.vmap(fn)(x)
    """
    if FUNC_NEEDS_DYNAMO_IMPORTED:
        importlib.import_module("torch._dynamo")


@functools.lru_cache(maxsize=None)
def dynamo_unsupported() -> Optional[str]:
    """``None`` where torch.compile can run here, else why not (no torch.compile before 2.0;
    dynamo needs a Python this torch supports). Imports torch._dynamo at the first call.

    Example::

        if dynamo_unsupported() is None:
            torch.compile(fn, fullgraph=True)
    """
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (needs torch >= 2.0)"
    try:
        with warnings.catch_warnings():  # torch 2.15 warns about torch.jit while importing dynamo
            warnings.simplefilter("ignore")
            dynamo = importlib.import_module("torch._dynamo")
    except Exception as error:  # pragma: no cover - broken install
        return f"torch._dynamo fails to import ({type(error).__name__}: {error})"
    # torch 2.0 has only eval_frame.check_if_dynamo_supported (raises); 2.1+ is_dynamo_supported.
    check = getattr(getattr(dynamo, "eval_frame", None), "check_if_dynamo_supported", None)
    try:
        if check is not None:
            check()
        elif not getattr(dynamo, "is_dynamo_supported", lambda: True)():
            raise RuntimeError("dynamo is not supported here")
    except Exception as error:
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return f"torch {torch.__version__} on Python {version}: {error}"
    return None


@functools.lru_cache(maxsize=None)
def non_tensor_outputs() -> bool:
    """Whether forward may return non-tensors (torch >= 1.9; 1.8 raises "expected Tensor or tuple
    of Tensor"). Probed once, at the first call. See NOTE: [non-tensor outputs on torch 1.8].

    Example::

        non_tensor_outputs()  # False on torch 1.8 only
    """

    class Probe(_Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x, 0

        @staticmethod
        def backward(ctx: Any, grad: Any, _: Any) -> Any:
            return grad

    try:
        Probe.apply(torch.zeros((), device="cpu"))
    except TypeError:
        return False
    return True


# NOTE: [dynamo traces the legacy-form copy]
# Where dynamo mishandles setup_context-style Functions (DYNAMO_REJECTS_SETUP_CONTEXT on 2.0-2.3,
# DYNAMO_PASSES_CTX_WITHOUT_GRAD on 2.4-2.5), the code paths dynamo runs itself
# (``torch.compile(Fn.apply)``, ``functional(Fn)``, an ``apply`` stored as an attribute) hand it
# the class's legacy-form copy instead, which every dynamo traces. A direct ``Fn.apply(...)`` in
# compiled code is intercepted by dynamo before this module runs, so those torch bugs stay there.


_RECORD = "_autograd_compat_decoration"  # class attribute holding what decoration decided
_TORCH_BASES = frozenset(_Function.__mro__)


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

    def python_error(self, args: tuple, kwargs: dict) -> TypeError:
        """The TypeError Python raises for this call of forward's signature: its checks, in its
        order (keywords one by one, then too many positional arguments, then missing ones), in
        its words. Called only once a binder has found the call wrong."""
        given = len(args)
        for name in kwargs:
            i = self.index.get(name)
            if i is None:
                passed = [p for p in self.names if p in self.posonly and p in kwargs]
                if passed:
                    return self._error(
                        "got some positional-only arguments passed as keyword arguments: "
                        + repr(", ".join(passed))
                    )
                return self._error(f"got an unexpected keyword argument {name!r}")
            if i < given:
                return self._error(f"got multiple values for argument {name!r}")
        n, nreq = len(self.names), self.nreq
        if given > n and not self.varargs:
            accepted = str(n) if nreq == n else f"from {nreq} to {n}"
            plural, verb = "" if accepted == "1" else "s", "was" if given == 1 else "were"
            return self._error(
                f"takes {accepted} positional argument{plural} but {given} {verb} given"
            )
        missing = [repr(name) for name in self.names[given:nreq] if name not in kwargs]
        if len(missing) > 2:
            listed = ", ".join(missing[:-1]) + ", and " + missing[-1]
        else:
            listed = " and ".join(missing)
        plural = "s" if len(missing) > 1 else ""
        return self._error(f"missing {len(missing)} required positional argument{plural}: {listed}")

    def _make_bind(self) -> Tuple[Callable[[tuple, dict], tuple], Callable[[tuple, dict], tuple]]:
        """Return ``(bind, bind_traceable)``: ``f(args, kwargs)`` -> the positional tuple for
        ``apply``, or a TypeError as Python raises it.

        ``bind`` is the fastest eager spelling; ``bind_traceable`` does the same without mutating
        a list, which dynamo cannot trace on torch 2.1-2.3.
        """
        n, nreq, defaults, index = len(self.names), self.nreq, self.defaults, self.index
        error, required, fill_all = self.python_error, self.names[:nreq], self.fill_all
        pairs = tuple(zip(self.names, defaults))

        def too_many(args: tuple, kwargs: dict) -> tuple:
            # With *args every named parameter is already filled positionally: no keyword fits.
            if not self.varargs or kwargs:
                raise error(args, kwargs)
            return args

        def check_missing(args: tuple, kwargs: dict) -> None:
            # Every required parameter not given positionally needs a keyword.
            if any(name not in kwargs for name in required[len(args) :]):
                raise error(args, kwargs)

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
                check_missing(args, kwargs)
            bound = list(args)
            bound += defaults[given:]
            stop = n if fill_all else max(given, nreq)
            for name, value in kwargs.items():
                i = index.get(name, -1)
                if i < given:  # unknown, positional-only, or given twice
                    raise error(args, kwargs)
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
                    raise error(args, kwargs)
            stop = n if fill_all else max([given, nreq] + [index[name] + 1 for name in kwargs])
            values = args + tuple([kwargs.get(name, value) for name, value in pairs[given:stop]])
            if given < nreq:
                check_missing(args, kwargs)
            return values

        return bind, bind_traceable


# --- decoration-time checks --------------------------------------------------------------------

_METHODS = ("forward", "setup_context", "backward", "vjp", "jvp", "vmap")


def _fail(cls_name: str, problem: str, fix: str) -> TypeError:
    return TypeError(f"{cls_name}: {problem}. {fix}")


def _user_attribute(cls: type, name: str) -> Any:
    """The user's own definition of ``name`` (as stored in a class ``__dict__``), or ``_MISSING``.

    Walks ``cls.__mro__`` down to torch's classes. A decorated class answers with what it held
    before decoration, so the adapters decoration installed are never taken for user code.
    """
    for klass in cls.__mro__:
        if klass in _TORCH_BASES or klass.__module__ == "torch.autograd.function":
            return _MISSING
        record = klass.__dict__.get(_RECORD)
        if record is not None and name in record.originals:
            value = record.originals[name]
        else:
            value = klass.__dict__.get(name, _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


def defines(cls: type, name: str) -> bool:
    """True when the user's code between ``cls`` and torch's own classes defines ``name``.

    Methods that decoration installed do not count; those the user wrote before it do.

    Example::

        defines(ClippedReLU, "setup_context")  # True
        defines(ClippedReLU, "jvp")  # False: only torch's base class has one
    """
    return _user_attribute(cls, name) is not _MISSING


def _check_method_kind(cls: type, name: str, attr: Any, legacy_form: bool) -> None:
    if isinstance(attr, staticmethod) or (legacy_form and isinstance(attr, classmethod)):
        return
    if isinstance(attr, classmethod):
        raise _fail(
            cls.__qualname__,
            f"{name} is a @classmethod; the setup_context style needs @staticmethod methods, "
            "since the adapter runs them from a legacy-form copy of the class (torch 1.x, "
            f"torch.compile on torch < 2.6), where cls would not be {cls.__name__}",
            f"Make {name} a @staticmethod and name the class where it needs it, or keep the "
            f"legacy form forward(cls, ctx, ...) without setup_context.",
        )
    raise _fail(
        cls.__qualname__,
        f"{name} must be a @staticmethod, found a {type(attr).__name__}",
        f"Put @staticmethod on {name} (autograd.Function methods are static).",
    )


def _signature(cls: type, fn: Callable, what: str) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError) as error:  # builtins such as torch.sin have no signature
        raise _fail(
            cls.__qualname__,
            f"the signature of {what} ({fn!r}) cannot be read ({error}), so its arguments "
            "cannot be bound",
            f"Wrap it in a Python function, e.g. `def {what}(x): return torch.sin(x)`.",
        ) from None


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
    params = list(_signature(cls, fn, what).parameters.values())
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
        "originals",
        "style",
        "traced",
        "twin",
    )

    def __init__(
        self, forward: Callable, mode: str, style: str, binder: _Binder, forced: bool
    ) -> None:
        self.forward = forward  # the user's, before any change
        self.mode = mode  # "native" or "legacy"
        self.style = style  # "setup_context" or "legacy-form"
        self.binder = binder
        self.forced = forced
        self.originals: Dict[str, Any] = {}  # class-dict entries decoration replaced
        self.twin: Optional[type] = None  # legacy-form copy running the adapter
        self.traced: Any = None  # the class whose apply dynamo should trace
        self.legacy_cls: Optional[type] = None  # cache for as_legacy()


def _info(cls: Any) -> _Info:
    info = cls.__dict__.get(_RECORD) if isinstance(cls, type) else None
    if info is None:
        name = getattr(cls, "__qualname__", repr(cls))
        raise TypeError(f"{name} is not decorated with @function; decorate the class first.")
    return info


# --- the adapter -------------------------------------------------------------------------------


def _complete_gradients(cls: type, backward: Callable, binder: _Binder, expand: bool) -> Callable:
    """Wrap backward (one frame) to pad missing trailing gradients and, with ``expand`` (torch
    1.8), to receive one gradient per output of forward.

    Padding: ``inputs`` always holds every parameter, defaults included, and torch expects one
    gradient per input (every torch checks the count against the inputs given). The adapter
    behaves the same on every torch: it pads with None, or raises naming the parameter when that
    input requires grad (checked in eager mode; dynamo cannot read needs_input_grad on torch
    2.1-2.3, so a compiled backward pads without the check). Expansion: see NOTE: [non-tensor
    outputs on torch 1.8]. Returns ``backward`` itself when there is nothing to do.
    """
    names, size, varargs = binder.names, binder.size, binder.varargs
    pad = size > 1 or varargs
    if not pad and not expand:
        return backward

    @functools.wraps(backward)
    def completed(ctx: Any, *grads: Any) -> Any:
        if expand:
            layout = getattr(ctx, _LAYOUT, None)
            if layout is not None:
                grads = _gradients_in_place(grads, layout)
        # Spelled (ctx,) + grads: dynamo 2.1 fails on backward(ctx, *grads) ("unexpected keyword
        # argument 'proxy'" while cloning the ctx variable).
        result = backward(*((ctx,) + grads))  # noqa: RUF005
        if not pad:
            return result
        count = len(result) if isinstance(result, tuple) else 1
        total = len(ctx.needs_input_grad) if varargs else size
        if count >= total:
            return result
        if not isinstance(result, tuple):  # torch accepts a bare gradient for one input
            result = (result,)
        if not is_compiling():
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

    return completed


# NOTE: [non-tensor outputs on torch 1.8]
# torch 1.8 accepts only tensors from forward ("expected Tensor or tuple of Tensor"); torch 1.9+
# passes other outputs through and hands backward None for them. On torch 1.8 the legacy form
# gives torch the tensors alone, records where they stood on ctx, and leaves the whole output in a
# thread-local slot that ``apply`` empties right after torch returns; backward gets the gradients
# back in their places, None for the rest, exactly as on newer torch.
_LAYOUT = "_nontensor_output_layout"  # ctx attribute: (tensor positions, number of outputs)
_slot = threading.local()


def _tensors_for_torch(ctx: Any, output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, tuple):
        positions = tuple(i for i, o in enumerate(output) if isinstance(o, torch.Tensor))
        if len(positions) == len(output):
            return output
        setattr(ctx, _LAYOUT, (positions, len(output)))
    else:  # one non-tensor output (a list counts: autograd never tracks one)
        setattr(ctx, _LAYOUT, ((), 1))
        _slot.output = output
        return ()
    _slot.output = output
    return tuple(output[i] for i in positions)


def _reassemble(full: Any, result: tuple) -> Any:
    """The whole output of the forward that just ran, with torch's tensors in their places."""
    if not isinstance(full, tuple):
        return full
    tensors = iter(result)
    return tuple(next(tensors) if isinstance(o, torch.Tensor) else o for o in full)


def _gradients_in_place(grads: tuple, layout: Tuple[tuple, int]) -> tuple:
    """torch 1.8's gradients of the tensor outputs, spread over all outputs (None elsewhere)."""
    positions, count = layout
    full: list = [None] * count
    for i, grad in zip(positions, grads):
        full[i] = grad
    return tuple(full)


def _fresh_name(base: str, taken: set) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _legacy_forward(forward: Callable, setup_context: Callable, finish: Any = None) -> Callable:
    """``forward(ctx, <forward's own parameters>)``: runs ``forward``, then ``setup_context``.

    Generated with forward's real parameter names and defaults, not ``(ctx, *args)``, so that
    dynamo (torch >= 2.13) can bind keyword arguments to it as it does for a hand-written legacy
    Function. ``finish(ctx, output)``, where given, turns the output into what torch receives.
    """
    signature = inspect.signature(forward)
    params = list(signature.parameters.values())
    taken = {p.name for p in params}
    ctx, user_forward, user_setup_context, output, finisher, adapter = (
        _fresh_name(base, taken)
        for base in ("ctx", "forward", "setup_context", "output", "finish", "legacy_forward")
    )
    header, names = [ctx], []
    last_posonly = max((i for i, p in enumerate(params) if p.kind is p.POSITIONAL_ONLY), default=-1)
    for i, p in enumerate(params):
        spelled = f"*{p.name}" if p.kind is p.VAR_POSITIONAL else p.name
        header.append(spelled)
        names.append(spelled)
        if i == last_posonly:
            header.append("/")
    call, inputs = ", ".join(names), ("(" + ", ".join(names) + ",)") if names else "()"
    tensor = _fresh_name("Tensor", taken)
    source = (
        f"def {adapter}({', '.join(header)}):\n"
        f"    {output} = {user_forward}({call})\n"
        f"    {user_setup_context}({ctx}, {inputs}, {output})\n"
    )
    if finish is not None:  # one tensor, the usual output, needs no call
        source += f"    if isinstance({output}, {tensor}):\n        return {output}\n"
        source += f"    return {finisher}({ctx}, {output})\n"
    else:
        source += f"    return {output}\n"
    namespace = {
        user_forward: forward,
        user_setup_context: setup_context,
        finisher: finish,
        tensor: torch.Tensor,
    }
    filename = f"<legacy form of {getattr(forward, '__qualname__', 'forward')}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    legacy: Any = functools.update_wrapper(namespace[adapter], forward)
    legacy.__defaults__ = tuple(p.default for p in params if p.default is not p.empty) or None
    legacy.__signature__ = signature.replace(
        parameters=[inspect.Parameter(ctx, inspect.Parameter.POSITIONAL_ONLY), *params]
    )
    return legacy


def _legacy_form(forward: Callable, setup_context: Callable, finish: Any = None) -> Dict[str, Any]:
    """The class attributes that turn a setup_context-style class into the legacy form.

    ``setup_context`` is torch's own again, so torch (>= 2.0) passes ctx to forward.
    """
    attributes: Dict[str, Any] = {
        "forward": staticmethod(_legacy_forward(forward, setup_context, finish))
    }
    if _BASE_SETUP_CONTEXT is not None:  # torch >= 2.0
        attributes["setup_context"] = _BASE_SETUP_CONTEXT
    return attributes


def _accept_save_for_forward(cls: type) -> None:
    """Give torch < 1.11's ctx a ``save_for_forward`` (torch 1.11 added it, with forward-mode AD
    reading saved tensors in ``jvp``), so that a setup_context calling it works for backward. On
    torch 1.10, whose forward AD runs ``jvp`` without saved tensors, ``jvp`` then raises a clear
    error instead of failing on an empty ``ctx.saved_tensors``."""
    backward_cls = cls._backward_cls  # type: ignore[attr-defined]

    def save_for_forward(self: Any, *tensors: Any) -> None:
        self._saved_for_forward_needs_torch_1_11 = True

    backward_cls.save_for_forward = save_for_forward
    if not defines(cls, "jvp"):
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
    [
        "__dict__",
        "__weakref__",
        "__init_subclass__",
        "__qualname__",
        "__slots__",
        "_backward_cls",
        _RECORD,
    ]
)


def _copied_namespace(cls: type) -> Dict[str, Any]:
    """The attributes of ``cls`` and its user-written bases, flattened for a copy of the class.

    ``__slots__`` and their member descriptors stay behind: they belong to the original layout.
    """
    namespace: Dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass in _TORCH_BASES or klass.__module__ == "torch.autograd.function":
            continue
        slots = klass.__dict__.get("__slots__", ())
        slots = {slots} if isinstance(slots, str) else set(slots)
        namespace.update(
            (key, value)
            for key, value in vars(klass).items()
            if key not in _NOT_COPIED and key not in slots
        )
    return namespace


def _make_twin(cls: type, forward: Callable, setup_context: Callable) -> type:
    """A legacy-form copy of a native class, for the places where that form is cheaper or the
    only one that compiles. Same ``__name__``: its grad_fn is also ``<Name>Backward``.

    Built by torch's own metaclass from torch's Function with the class's attributes copied, not
    as a subclass, so that no ``__init_subclass__`` and no metaclass of the user's sees it.
    """
    namespace = _copied_namespace(cls)
    namespace.update(
        {
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}.<legacy>",
            "apply": _TORCH_APPLY,  # torch's own, not the one decoration puts on cls
            **_legacy_form(forward, setup_context),
        }
    )
    base = next(b for b in cls.__mro__ if b in _TORCH_BASES)  # torch's Function class
    torch_metaclass: Any = type(_Function)
    return torch_metaclass(cls.__name__, (base,), namespace)  # type: ignore[no-any-return]


def _refusal(name: str) -> str:
    return (
        f"{name} runs on the legacy path (forced by legacy=True or {LEGACY_ENV}), which "
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


def _undecorated(name: str, *args: Any, **kwargs: Any) -> Any:
    raise TypeError(
        f"{name} subclasses a class decorated with @function and overrides its methods, but is "
        "not decorated itself; decorate it with @function too."
    )


def _apply(
    binder: _Binder,
    run: Callable,
    native: Optional[Callable] = None,
    refuse: Optional[str] = None,
    unwrap: Optional[Callable] = None,
    traced: Any = None,
    reassemble: bool = False,
) -> Callable:
    """Build ``cls.apply``: bind the arguments when needed, then ``run`` the positional tuple.

    Under active torch.func transforms the call goes to ``native`` (torch's own apply on ``cls``),
    or raises ``refuse`` where the class cannot run there. ``unwrap`` is torch's dead-wrapper
    unwrapping, done exactly as torch 2.0-2.14's own apply does it. While dynamo traces this
    function (``torch.compile(Fn.apply)``, or ``op = Fn.apply`` called in compiled code), the
    bound call goes to ``traced.apply``, which dynamo handles itself; non-strict torch.export
    runs the eager code. ``reassemble`` (torch 1.8) gives back non-tensor outputs (see NOTE:
    [non-tensor outputs on torch 1.8]). The common eager call (all arguments positional, none
    missing) costs two or three checks on top of ``run``.
    """
    bind, bind_traceable = binder.bind, binder.bind_traceable
    # Arguments need binding when keywords are given or the positional count is off. A legacy
    # form binds for keywords only (torch passes what it gets); *args takes any surplus.
    low = 0 if not binder.fill_all else binder.size
    high = binder.size if binder.fill_all and not binder.varargs else sys.maxsize

    if reassemble:  # torch 1.8, setup_context style
        fixed = low == high

        def apply(*args: Any, **kwargs: Any) -> Any:
            if kwargs or (len(args) != low if fixed else not low <= len(args) <= high):
                args = bind(args, kwargs)
            try:
                result = run(*args)
            except BaseException:  # torch may raise after forward filled the slot
                _slot.__dict__.pop("output", None)
                raise
            if result.__class__ is tuple:  # non-tensor outputs always come back as a tuple
                full = _slot.__dict__.pop("output", _MISSING)
                if full is not _MISSING:
                    return _reassemble(full, result)
            return result

    elif traced is None and refuse is None and low == high:  # torch 1.x, fixed arity

        def apply(*args: Any, **kwargs: Any) -> Any:
            if kwargs or len(args) != low:
                args = bind(args, kwargs)
            return run(*args)

    elif traced is None and refuse is None:  # torch 1.8-1.12: nothing to hand over to

        def apply(*args: Any, **kwargs: Any) -> Any:
            if kwargs or not low <= len(args) <= high:
                args = bind(args, kwargs)
            return run(*args)

    elif traced is None:  # torch 1.13: functorch is bundled and rejects every Function

        def apply(*args: Any, **kwargs: Any) -> Any:
            if kwargs or not low <= len(args) <= high:
                args = bind(args, kwargs)
            if transforms_active():
                raise RuntimeError(refuse)
            return run(*args)

    else:

        def apply(*args: Any, **kwargs: Any) -> Any:
            if dynamo_tracing():  # a constant while dynamo traces; the code below is not traceable
                if kwargs or not low <= len(args) <= high:
                    args = bind_traceable(args, kwargs)
                return traced.apply(*args)
            if kwargs or not low <= len(args) <= high:
                args = bind(args, kwargs)
            if transforms_active():
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


def _check_is_function_class(cls: Any) -> None:
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


def _style_and_binder(cls: Any, user: Dict[str, Any]) -> Tuple[str, _Binder, Callable]:
    """Validate the user's methods; return the class's style, its binder and forward."""
    name = cls.__qualname__
    if user["forward"] is _MISSING:
        raise _fail(name, "no forward", "Define a @staticmethod forward(*args).")
    if user["backward"] is _MISSING and user["vjp"] is _MISSING:
        raise _fail(
            name,
            "no backward",
            "Define a @staticmethod backward(ctx, *grad_outputs) returning one gradient per input.",
        )
    legacy_form = user["setup_context"] is _MISSING
    for method, attr in user.items():
        if attr is not _MISSING:
            _check_method_kind(cls, method, attr, legacy_form)
    forward = user["forward"].__get__(None, cls)
    params = _positional_params(cls, forward, "forward")
    if legacy_form:
        if not _takes_ctx(forward):
            first = _first_name(forward)
            raise _fail(
                name,
                f"forward's first parameter is {first or 'missing'!r}, not ctx, and there is no "
                "setup_context",
                "Add @staticmethod setup_context(ctx, inputs, output) (setup_context style), or "
                "give forward a leading parameter named ctx (legacy style).",
            )
        return "legacy-form", _Binder(name, params[1:], fill_all=False), forward
    if params and params[0].name == "ctx":
        raise _fail(
            name,
            "forward takes ctx but setup_context is also defined",
            "Either drop ctx from forward (setup_context style: forward(*args) plus "
            "setup_context(ctx, inputs, output)) or drop setup_context (legacy style).",
        )
    setup_context = user["setup_context"].__get__(None, cls)
    try:
        _signature(cls, setup_context, "setup_context").bind(None, None, None)
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
    return "setup_context", _Binder(name, params, fill_all=True), forward


def _set(cls: Any, info: _Info, name: str, value: Any) -> None:
    """Set a class attribute, keeping what the class's own ``__dict__`` held in the record."""
    info.originals.setdefault(name, cls.__dict__.get(name, _MISSING))
    setattr(cls, name, value)


def _requested_mode(style: str, legacy: Optional[bool]) -> Tuple[str, bool]:
    forced = bool(legacy) or (legacy is None and env_forces_legacy())
    legacy_path = style == "legacy-form" or forced or not HAS_SETUP_CONTEXT
    return ("legacy" if legacy_path else "native"), forced


def _decorate(cls: Any, legacy: Optional[bool]) -> Any:
    _check_is_function_class(cls)
    name = cls.__qualname__
    user = {method: _user_attribute(cls, method) for method in _METHODS}
    existing = cls.__dict__.get(_RECORD)
    if existing is not None:  # decorating twice is harmless; contradicting the first is not
        mode, _ = _requested_mode(existing.style, legacy)
        if legacy is not None and mode != existing.mode:
            raise _fail(
                name,
                f"already decorated in {existing.mode} mode, now asked for legacy={legacy}",
                "Decorate the class once; use as_legacy(cls) for a legacy-mode twin.",
            )
        return cls

    style, binder, forward = _style_and_binder(cls, user)
    mode, forced = _requested_mode(style, legacy)
    info = _Info(forward, mode, style, binder, forced)
    setattr(cls, _RECORD, info)
    # The class states the user's methods itself, not the adapters a decorated base installed.
    for method, attr in user.items():
        if attr is not _MISSING and inspect.getattr_static(cls, method) is not attr:
            _set(cls, info, method, attr)

    forward = _autocast_forward(cls, info, user)
    if style == "setup_context":
        _install_setup_context_style(cls, info, forward)
    apply = _build_apply(cls, info)
    apply.__doc__ = f"Apply {name}; arguments as for forward{inspect.signature(info.forward)}."
    apply.__module__ = cls.__module__
    apply.__qualname__ = f"{name}.apply"  # pickle finds it by reference: getattr(cls, "apply")
    _set(cls, info, "apply", staticmethod(apply))
    info.originals.setdefault("__init_subclass__", cls.__dict__.get("__init_subclass__", _MISSING))
    _guard_subclasses(cls, mode == "legacy" and style == "setup_context")
    return cls


def _install_setup_context_style(cls: Any, info: _Info, forward: Callable) -> None:
    """Complete backward's gradients; give the class (legacy mode) or a twin the legacy form."""
    binder = info.binder
    user_name = "backward" if defines(cls, "backward") else "vjp"
    backward = getattr(cls, user_name)
    expand = info.mode == "legacy" and not non_tensor_outputs()
    backward = _complete_gradients(cls, backward, binder, expand)
    # Wrap whichever of backward / vjp (its alias, torch >= 1.9) the class defines.
    target = user_name if HAS_VJP_ALIAS else "backward"  # torch 1.8: no vjp alias
    if backward is not getattr(cls, target):
        _set(cls, info, target, staticmethod(backward))
    setup_context = _autocast_setup_context(cls, info, forward)
    if info.mode == "legacy":  # the class itself takes the legacy form
        finish = _tensors_for_torch if expand else None
        for key, value in _legacy_form(forward, setup_context, finish).items():
            _set(cls, info, key, value)
        if not CTX_HAS_SAVE_FOR_FORWARD:
            info.originals.setdefault("jvp", cls.__dict__.get("jvp", _MISSING))
            _accept_save_for_forward(cls)
    elif C_APPLY_BINDS_DEFAULTS or DYNAMO_NEEDS_LEGACY_FORM:
        info.twin = _make_twin(cls, forward, setup_context)


def _build_apply(cls: Any, info: _Info) -> Callable:
    name, binder, mode, style = cls.__qualname__, info.binder, info.mode, info.style
    # What dynamo should trace when it runs ``apply`` itself (torch >= 2.0): the class, which it
    # intercepts, or the legacy-form twin (see NOTE: [dynamo traces the legacy-form twin]).
    traced = None
    if HAS_SETUP_CONTEXT:
        traced = info.twin if mode == "native" and DYNAMO_NEEDS_LEGACY_FORM else cls
    info.traced = traced
    torch_apply = _TORCH_APPLY.__get__(None, cls)
    if mode == "legacy":
        refuse = None
        if style == "setup_context" and HAS_SETUP_CONTEXT:  # forced onto the legacy path
            refuse = _refusal(name)
        elif style == "setup_context" and HAS_FUNCTORCH:
            refuse = (  # torch 1.13 bundles functorch, which rejects every autograd.Function
                f"{name}: functorch transforms (vmap, grad, jacrev, jvp) support custom "
                f"autograd.Functions from torch 2.0 on (torch.func); this is torch "
                f"{torch.__version__}. Upgrade torch to use {name} under transforms."
            )
        reassemble = style == "setup_context" and not non_tensor_outputs()
        return _apply(binder, torch_apply, refuse=refuse, traced=traced, reassemble=reassemble)
    if mode == "native":
        prepare_torch_func()
    if C_APPLY_BINDS_DEFAULTS:
        # torch >= 2.15 binds defaults inside its C-level apply, calling inspect.signature(forward)
        # .bind on every call. The legacy-form twin runs forward and setup_context identically
        # without that cost; torch.func and torch.compile use the class itself.
        assert info.twin is not None
        eager = _C_APPLY.__get__(None, info.twin)
        return _apply(binder, eager, torch_apply, traced=traced)
    # torch 2.0-2.14: torch's Python apply binds with inspect (2.2+) and then calls the C-level
    # apply; call the latter with the tuple bound here.
    eager = _C_APPLY.__get__(None, cls)
    return _apply(binder, eager, torch_apply, unwrap=_unwrap_dead_wrappers, traced=traced)


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
    apply = cls.apply
    existing = getattr(apply, "functional", None)
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    forward, traced, bind = info.forward, info.traced, info.binder.bind_traceable

    @functools.wraps(forward)
    def call(*args: Any, **kwargs: Any) -> Any:
        if dynamo_tracing():  # a constant while dynamo traces
            # Dynamo intercepts ``cls.apply`` and takes no keywords there: bind them here.
            return traced.apply(*bind(args, kwargs))
        return apply(*args, **kwargs)

    call.__doc__ = forward.__doc__ or cls.__doc__
    if info.style == "legacy-form":  # show forward's parameters without ctx
        signature = inspect.signature(forward)
        call.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=list(signature.parameters.values())[1:]
        )
    # Kept on apply, so that pickle and copy find it by reference, as torch's own Fn.apply.
    call.__module__, call.__qualname__ = cls.__module__, f"{cls.__qualname__}.apply.functional"
    apply.functional = call
    return call


# --- automatic mixed precision ------------------------------------------------------------------


def _autocast_api(device_type: str) -> Tuple[Callable, Callable, Callable]:
    """(is_enabled(), dtype(), autocast(enabled, dtype)) for ``device_type`` on this torch."""
    if HAS_DEVICE_GENERIC_AMP:  # device-generic autocast queries
        return (
            functools.partial(torch.is_autocast_enabled, device_type),
            functools.partial(torch.get_autocast_dtype, device_type),
            lambda enabled, dtype: torch.autocast(device_type, enabled=enabled, dtype=dtype),
        )
    if device_type == "cuda":
        if HAS_TORCH_AUTOCAST:  # dtype choice (bfloat16 too)
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
    if device_type == "cpu" and HAS_CPU_AUTOCAST:
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
    """Whether a forward without setup_context names ctx first (the legacy form)."""
    first = _first_name(fn)
    return first.startswith("ctx") or first in ("context", "self", "_")


# torch >= 1.10 names the ctx base class FunctionCtx; torch 1.8/1.9 call it _ContextMethodMixin.
_FunctionCtx: type = (
    getattr(torch.autograd.function, "FunctionCtx", None)
    or torch.autograd.function._ContextMethodMixin
)


def _autocast_ctx_forward(fwd: Callable, device_type: str, cast_inputs: Any) -> Callable:
    """custom_fwd for ``forward(ctx, *args)``: torch's own where it has one for the device."""
    if HAS_DEVICE_GENERIC_AMP:
        return torch.amp.custom_fwd(fwd, device_type=device_type, cast_inputs=cast_inputs)
    if device_type == "cuda":  # torch < 2.4 (no deprecation warning there)
        return torch.cuda.amp.custom_fwd(fwd, cast_inputs=cast_inputs)
    is_enabled, get_dtype, autocast = _autocast_api(device_type)

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

    return wrapped


def _autocast_ctxless_forward(fwd: Callable, device_type: str, cast_inputs: Any) -> Callable:
    """custom_fwd for a setup_context-style ``forward(*args)``: casts, never touches ctx (the
    autocast state is recorded by setup_context, see _autocast_setup_context)."""
    if cast_inputs is None:
        return fwd
    is_enabled, get_dtype, autocast = _autocast_api(device_type)

    @functools.wraps(fwd)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if is_enabled():
            with autocast(False, get_dtype()):
                args = _cast(args, device_type, cast_inputs)
                return fwd(*args, **_cast(kwargs, device_type, cast_inputs))
        return fwd(*args, **kwargs)

    return wrapped


def custom_fwd(fwd: Optional[Callable] = None, *, device_type: str, cast_inputs: Any = None) -> Any:
    """Run forward under autocast as torch's ``custom_fwd`` does, for either Function style.

    Works on a setup_context-style ``forward(*args)`` and on a legacy ``forward(ctx, *args)``:
    ``@function`` decides which from the class (does it define ``setup_context``?), never from
    parameter names, and records the autocast state on ctx before ``setup_context``. Without
    ``@function`` the forward must take ctx first. With ``cast_inputs`` set, inside an autocast
    region the floating-point inputs of ``device_type`` are cast to it and forward (and
    setup_context) run with autocast disabled. Pair it with :func:`custom_bwd`. Uses
    ``torch.amp.custom_fwd`` (torch >= 2.4) or ``torch.cuda.amp.custom_fwd`` for ctx-taking
    forwards where torch has them; never touches the caller's tensors; raises ValueError where
    this torch has no autocast for ``device_type``.

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
    _autocast_api(device_type)  # fail now where this torch has no autocast for the device
    with_ctx = _autocast_ctx_forward(fwd, device_type, cast_inputs)
    name = getattr(fwd, "__qualname__", "forward")

    @functools.wraps(fwd)
    def until_decorated(*args: Any, **kwargs: Any) -> Any:
        if not args or not isinstance(args[0], _FunctionCtx):
            raise TypeError(
                f"{name} is decorated with custom_fwd but was not called with ctx first: its "
                "class defines setup_context (or forward is a classmethod) and is not decorated "
                "with @function. Decorate the class with @function."
            )
        return with_ctx(*args, **kwargs)

    until_decorated._autocast_fwd = (device_type, cast_inputs, fwd)  # type: ignore[attr-defined]
    return until_decorated


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
    if HAS_DEVICE_GENERIC_AMP:
        wrapped = torch.amp.custom_bwd(bwd, device_type=device_type)
    elif device_type == "cuda":
        wrapped = torch.cuda.amp.custom_bwd(bwd)
    else:

        @functools.wraps(bwd)
        def wrapped(ctx: Any, *grads: Any) -> Any:
            with autocast(ctx._fwd_used_autocast, ctx._dtype):
                return bwd(ctx, *grads)

    wrapped._autocast_bwd = device_type  # type: ignore[attr-defined]
    return wrapped


def _autocast_forward(cls: Any, info: _Info, user: Dict[str, Any]) -> Callable:
    """Check custom_fwd/custom_bwd pairing; give a custom_fwd forward the form the class needs.

    Returns the forward to run (the user's, or its autocast wrapper for this class's style).
    """
    name = cls.__qualname__
    forward = user["forward"].__get__(None, cls)
    backward = user["backward" if user["backward"] is not _MISSING else "vjp"].__get__(None, cls)
    fwd_amp = getattr(forward, "_autocast_fwd", None)
    bwd_device = getattr(backward, "_autocast_bwd", None)
    if bwd_device is not None and (fwd_amp is None or fwd_amp[0] != bwd_device):
        shown = f"device_type={fwd_amp[0]!r}" if fwd_amp else "nothing"
        raise _fail(
            name,
            f"backward uses custom_bwd(device_type={bwd_device!r}) but forward has {shown}",
            f"Decorate forward with custom_fwd(device_type={bwd_device!r}) from {__name__}.",
        )
    if fwd_amp is None or not isinstance(user["forward"], staticmethod):
        return forward
    device_type, cast_inputs, original = fwd_amp
    if info.style == "setup_context":
        forward = _autocast_ctxless_forward(original, device_type, cast_inputs)
    else:
        forward = _autocast_ctx_forward(original, device_type, cast_inputs)
    forward._autocast_fwd = fwd_amp  # type: ignore[attr-defined]
    _set(cls, info, "forward", staticmethod(forward))
    return forward


def _autocast_setup_context(cls: Any, info: _Info, forward: Callable) -> Callable:
    """The setup_context to run: the user's, wrapped to record the autocast state on ctx (as
    torch's custom_fwd does) when forward uses custom_fwd."""
    user_setup_context = cls.setup_context
    fwd_amp = getattr(forward, "_autocast_fwd", None)
    if fwd_amp is None:
        return user_setup_context
    device_type, cast_inputs, _ = fwd_amp
    is_enabled, get_dtype, _ = _autocast_api(device_type)

    @functools.wraps(user_setup_context)
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> Any:
        enabled = is_enabled()  # the state forward was called under (apply does not change it)
        ctx._dtype = get_dtype()
        ctx._fwd_used_autocast = enabled and cast_inputs is None
        if enabled and cast_inputs is not None:  # setup_context sees what forward saw
            inputs = _cast(inputs, device_type, cast_inputs)
        return user_setup_context(ctx, inputs, output)

    _set(cls, info, "setup_context", staticmethod(setup_context))
    return setup_context


# --- feature report ----------------------------------------------------------------------------


def _probe(fn: Callable[[], bool]) -> Union[bool, str]:
    """Run one feature probe: its answer, or ``"error: <why>"`` when it fails unexpectedly.

    Warnings torch raises while probed (deprecations of its own internals) are not the caller's
    concern and never turn into errors, under ``python -W error`` either.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(fn())
    except Exception as error:
        return f"error: {type(error).__name__}: {error}"


def _probe_kwargs() -> bool:
    class Probe(_Function):
        @staticmethod
        def forward(ctx: Any, x: Any, scale: float = 1.0) -> Any:
            return x * scale

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    try:
        Probe.apply(torch.ones(1), scale=2.0)
    except TypeError as error:  # torch < 2.13: "apply() takes no keyword arguments"
        if "keyword" in str(error):
            return False
        raise
    return True


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
    if importlib.util.find_spec("torch.autograd.forward_ad") is None:  # torch 1.8
        return False
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
    """``"native"``, ``"functional"`` or ``"unavailable"``: see ``features()``."""
    if dynamo_unsupported() is not None:
        return "unavailable"
    return "native" if COMPILES_SETUP_CONTEXT else "functional"


def _export_modes() -> Tuple[str, ...]:
    """The torch.export modes this torch has: strict from 2.1, non-strict (``strict=``) from 2.2."""
    export = getattr(getattr(torch, "export", None), "export", None)
    if export is None:
        return ()
    if "strict" in inspect.signature(export).parameters:
        return ("strict", "non-strict")
    return ("strict",)


def features() -> Dict[str, Any]:
    """Report what the running torch offers for custom Functions, as data.

    ``torch`` is the version string; ``setup_context``, ``torch_func``, ``amp_device_generic`` and
    ``cpu_autocast`` are booleans; the probed ``apply_kwargs``, ``default_binding`` and
    ``forward_ad`` are True, False, or ``"error: <why>"`` when the probe failed unexpectedly;
    ``compile`` is ``"native"`` (a direct ``Fn.apply`` of a setup_context-style class compiles),
    ``"functional"`` (only ``functional(Fn)``, ``torch.compile(Fn.apply)`` and legacy-form classes
    compile) or ``"unavailable"``; ``export`` is the tuple of torch.export modes, e.g.
    ``("strict", "non-strict")``. The command-line report explains each entry.

    Example::

        >>> features()["setup_context"]
        True
    """
    return {
        "torch": str(torch.__version__),
        "setup_context": HAS_SETUP_CONTEXT,
        "apply_kwargs": _probe(_probe_kwargs),
        "default_binding": HAS_SETUP_CONTEXT and _probe(_probe_defaults),
        "forward_ad": _probe(_probe_forward_ad),
        "torch_func": HAS_TORCH_FUNC,
        "compile": _compile_support(),
        "export": _export_modes(),
        "amp_device_generic": HAS_DEVICE_GENERIC_AMP,
        "cpu_autocast": HAS_CPU_AUTOCAST,
    }
