"""The fast eager call of the "torch" tier's op objects (torch >= 2.4), generated per op (See
NOTE: [the torch tier's call]); the op object itself is in ``_torch_op``."""

from __future__ import annotations

import inspect
import keyword
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from compatfn.core import _dynamo_tracing, _transforms_active
from compatfn.library._convert import (
    MISSING,
    SELF_GIVEN,
    given_by_position,
    keyword_lines,
    positional_parameters,
)
from compatfn.library._dispatch_state import (
    any_autocast_enabled,
    dispatch_mode_count,
    excluded_source,
    forward_ad,
    inference_lines,
    is_tracing,
    profiler_enabled,
    torch_function_mode_enabled,
)
from compatfn.library._facts import (
    AUTOGRAD_KERNEL_ALWAYS_APPLIES,
    C_APPLY,
    HAS_NAMED_TENSORS,
    is_alias_of,
)
from compatfn.library._generated import (
    generated_function,
    shows_torchs_call_signature,
)
from compatfn.library._infer_schema import _resolve, kernel_signature
from compatfn.library._storage import (
    distinct_storage_source,
    fallback_source,
)
from compatfn.library._torch_autograd import autograd_class, single_distinct_tensor
from compatfn.library._torch_replay import Replay, checked_output, replayed
from compatfn.library._utils import (
    below_autograd_lines,
    default_elidable,
)

__all__ = ["generated_call"]

# NOTE: [the torch tier's call]
# torch's ``CustomOpDef.__call__`` sends every call through the dispatcher: the Autograd kernel, an
# autograd Function, a redispatch below autograd and the Python kernel, with their Python wrappers
# (1.9-2.8x a hand-written autograd.Function in eager forward, measured). compatfn keeps torch's
# object -- its registration, every method, ``torch.ops.<ns>.<name>`` -- and hands out an op
# object sharing its state whose call is generated with the op's parameters (as on compatfn's own
# tiers, See NOTE: [the op's call]; See NOTE: [the op object's call] for the object). A simple
# op (its only kernel the function it was made from, tensors and plain scalars in, tensors out,
# no aliasing or keyword-only parameters in its schema, the
# function's defaults the schema's) takes a short path when every argument has the exact type the
# schema wants (so nothing needs converting: anything else goes to the dispatcher, which converts it
# or raises torch's own error), the tensors are plain (strided, not meta, nested, or lazily
# conjugated or negated views, which the dispatcher's fallbacks materialize first), and nothing
# needs the dispatcher: dynamo tracing (first: under dynamo the call is the operator, one node;
# non-strict torch.export runs under dispatch modes), dispatch modes (FakeTensorMode,
# FlopCounterMode, TorchDispatchMode), torch.func transforms, forward-mode AD (``dual_level``),
# TorchFunctionModes, the TorchScript tracer, a profiler (it records the op by name), autocast once
# the op has an autocast rule (``register_autocast``; without one the dispatcher's autocast keys
# fall through, so the call is the same), inference mode where torch's Autograd kernel always runs
# its Function (``AUTOGRAD_KERNEL_ALWAYS_APPLIES``). The short path does what torch's kernels do:
# with an input requiring grad (or always, where torch does) it runs a legacy autograd Function
# named as torch's (``GeneratedBackwardFor_<ns>_<name>_default``) whose forward runs the kernel and
# the registered setup_context and whose backward IS torch's (``torch_autograd_backward``: its
# checks and errors), given the arguments torch's Autograd kernel gets (the dispatcher leaves out
# trailing arguments equal to their defaults, and backward's ``ctx.needs_input_grad`` shows it);
# else the kernel alone below autograd (See NOTE: [where torch's Autograd kernel runs]), or the
# kernel alone where torch's Autograd kernel does not run (inference mode, below autograd:
# the guard changes nothing there, See NOTE: [the guard where autograd is excluded]; inference
# tensors). Trailing arguments equal to their defaults reach the kernel as its defaults,
# as the dispatcher passes them. The call takes its parameters by position only and binds keywords
# in its body (``positional_parameters``, ``keyword_lines``), so that a parameter given both by
# position and by keyword gets the dispatcher's error, not Python's. torch's aliasing rule: a single
# output sharing no storage with any input passes at once; anything else is checked in full, and an
# output that breaks the rule, or is not what the schema returns, is handed to the dispatcher
# without running the kernel again (See NOTE: [replaying an output]), so that torch converts it or
# raises its own error. Every registration method that changes what the short path runs
# (register_kernel, register_autograd, register_autocast) regenerates the call; a kernel or autocast
# rule registered under the operator's name without the op object (``torch.library.impl``,
# ``Library.impl``) is not seen by it.

_DEFAULTS_COMPARABLE = (int, float, bool, str)
_NOT_SIMPLE = object()
#: Schema type -> the exact Python type that reaches the kernel unconverted (None: a tensor).
_SCHEMA_KINDS: Dict[str, Any] = {
    "Tensor": None,
    "float": float,
    "int": int,
    "SymInt": int,
    "bool": bool,
    "str": str,
}


def _simple_kinds(opdef: Any) -> Optional[List[Tuple[str, Any]]]:
    """(name, exact type, None for a tensor) of each parameter when ``opdef`` may take the short
    path (See NOTE: [the torch tier's call]), else None."""
    if list(opdef._backend_fns) != [None] or opdef.__dict__.get("_compatfn_kernel_replaced"):
        return None
    schema = opdef._opoverload._schema
    returns = schema.returns
    if not returns or any(r.alias_info is not None or str(r.type) != "Tensor" for r in returns):
        return None
    fn = opdef._init_fn
    params = list(kernel_signature(fn).parameters.values())
    if len(params) != len(schema.arguments):  # a builtin kernel has none: torch's own call
        return None
    kinds: List[Tuple[str, Any]] = []
    for p, arg in zip(params, schema.arguments):
        annotation = _resolve(p.annotation, fn)
        if arg.kwarg_only or arg.alias_info is not None or p.name != arg.name:
            return None
        if p.kind is not p.POSITIONAL_OR_KEYWORD or not p.name.isidentifier():
            return None
        kind = _SCHEMA_KINDS.get(str(arg.type), _NOT_SIMPLE)  # the schema decides, not annotations
        if kind is _NOT_SIMPLE or annotation is not (torch.Tensor if kind is None else kind):
            return None
        kinds.append((p.name, kind))
        if not _same_default(p, arg, annotation):
            return None
    return kinds


def _same_default(p: inspect.Parameter, arg: Any, annotation: Any) -> bool:
    """Whether the function's default is the schema's (the short path passes every argument)."""
    if p.default is p.empty:
        return not arg.has_default_value()
    return (
        annotation in _DEFAULTS_COMPARABLE
        and arg.has_default_value()
        and type(arg.default_value) is type(p.default)
        and arg.default_value == p.default
    )


def _probes(opdef: Any, g: Dict[str, Any]) -> List[str]:
    """What sends this op's call through the dispatcher (the source of each test; ``g`` gets the
    names they use), dynamo first (a constant True while it traces; non-strict torch.export runs
    the code under dispatch modes)."""
    probes = [
        _dynamo_tracing,
        dispatch_mode_count,
        _transforms_active,
        torch_function_mode_enabled,
        is_tracing,
    ]
    if opdef.__dict__.get("_compatfn_autocast_rule"):  # it runs in the dispatcher
        probes.append(any_autocast_enabled)
    g.update({f"probe{i}": p for i, p in enumerate(probes)})
    g["profiler_enabled"] = profiler_enabled
    g["forward_ad"] = forward_ad
    return [f"$probe{i}()" for i in range(len(probes))] + [
        "$profiler_enabled()",  # every profiler, the legacy one included
        "$forward_ad._current_level >= 0",
    ]


def _short_path_lines(
    opdef: Any, kinds: List[Tuple[str, Any]], g: Dict[str, Any], defaults: List[str], dispatch: str
) -> List[str]:
    """The short path (See NOTE: [the torch tier's call]): its test, the defaults filled in, and
    its body (``dispatch``: the line handing the call to the dispatcher)."""
    names = [n for n, _ in kinds]
    tensors = [n for n, kind in kinds if kind is None]
    test = [f"not ({' or '.join(_probes(opdef, g))})"]
    test.append("not $args")
    # Tensors the dispatcher would hand to another kernel or fallback first, or that torch's own
    # checks treat apart: other layouts (sparse, mkldnn: torch 2.4-2.8 cannot read their
    # storage), meta, nested, and lazily conjugated or negated views (the fallbacks materialize
    # them for the kernel).
    # Named tensors (torch 2.4-2.12) the operator refuses.
    g["strided"] = torch.strided
    named = " or {}.has_names()" if HAS_NAMED_TENSORS else ""
    test += [
        f"$type({t}) is $Tensor and {t}.layout is $strided and not ({t}.is_meta or {t}.is_nested "
        f"or {fallback_source(t)}{named.format(t)})"
        for t in tensors
    ]
    g["kernel"] = opdef._init_fn
    call = ", ".join(names)
    # See NOTE: [where torch's Autograd kernel runs]
    excluded = excluded_source(g)
    g["grad_enabled"] = torch.is_grad_enabled
    grad = f"({' or '.join(f'{t}.requires_grad' for t in tensors) or 'False'}) and $grad_enabled()"
    inference_block, inference = inference_lines(tensors, g, "False")
    distinct = distinct_storage_source("$out", tensors)
    inputs = "(" + call + ("," if len(names) == 1 else "") + ")"
    # After the defaults are filled: each argument has exactly the type the schema wants.
    scalars = []
    for i, (name, kind) in enumerate(kinds):
        if kind is not None:
            g[f"kind{i}"] = kind
            scalars.append(f"$type({name}) is not $kind{i}")
            if kind is int:  # torch refuses an int outside int64
                scalars.append(f"not -0x8000000000000000 <= {name} <= 0x7FFFFFFFFFFFFFFF")
            if kind is str:  # and a str UTF-8 cannot encode (a lone surrogate)
                scalars.append(f"not {name}.isascii()")
    body = [f"if {' or '.join(scalars)}:", f"    {dispatch}"] if scalars else []
    body += inference_block
    direct = [*_elided_defaults_lines(kinds, g, "    "), f"    $out = $kernel({call})"]
    if AUTOGRAD_KERNEL_ALWAYS_APPLIES:
        body += [f"if {excluded} or {inference}:", *direct]
        body += ["else:", *_apply_lines(opdef, kinds, tensors, g)]
    else:  # See NOTE: [the guard where autograd is excluded]
        # Inference tensors alone, one requiring grad included: torch's Autograd kernel does not
        # run.
        grad += f" and not {inference}" if tensors else ""
        body += [f"if {grad} and not {excluded}:", *_apply_lines(opdef, kinds, tensors, g)]
        body += [f"elif {inference}:", *direct]
        body += [
            "else:",
            *_elided_defaults_lines(kinds, g, "    "),
            *(f"    {line}" for line in below_autograd_lines(f"$out = $kernel({call})", g)),
        ]
    body += [
        f"if {single_distinct_tensor(opdef, '$out', distinct)}:",
        "    return $out",
        f"return $checked($state, {inputs}, $out)",
    ]
    return [f"if {' and '.join(test)}:"] + [f"    {line}" for line in [*defaults, *body]]


def _elided_defaults_lines(
    kinds: List[Tuple[str, Any]], g: Dict[str, Any], indent: str
) -> List[str]:
    """Trailing arguments equal to their defaults replaced by the defaults, from the last one
    back, as the dispatcher leaves them out of the kernel's call (``-0.0`` for a ``0.0`` default
    reaches the kernel as ``0.0``)."""
    lines: List[str] = []
    for i in range(len(kinds) - 1, len(kinds) - 1 - _elidable_count(kinds, g), -1):
        name = kinds[i][0]
        lines += [f"{indent}if {name} == $default{i}:", f"{indent}    {name} = $default{i}"]
        indent += "    "
    return lines


def _elidable_count(kinds: List[Tuple[str, Any]], g: Dict[str, Any]) -> int:
    """How many trailing arguments the dispatcher may leave out: those with a default that an
    argument of the parameter's type can equal (See NOTE: [arguments equal to their defaults])."""
    count = 0
    for i in reversed(range(len(kinds))):
        key = f"default{i}"
        if key not in g or not default_elidable(g[key], kinds[i][1]):
            break
        count += 1
    return count


def _apply_lines(
    opdef: Any, kinds: List[Tuple[str, Any]], tensors: List[str], g: Dict[str, Any]
) -> List[str]:
    """The short path's autograd call, given the arguments torch's Autograd kernel would get:
    trailing arguments equal to their defaults left out, as the dispatcher does."""
    names = [n for n, _ in kinds]
    required = len(names) - _elidable_count(kinds, g)

    inputs = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    g["Replay"] = Replay
    g["replayed"] = replayed
    g["replay"] = None

    def apply(given: int, indent: str) -> List[str]:
        g[f"apply{given}"] = C_APPLY.__get__(None, autograd_class(opdef, names, tensors, given, g))
        return [
            f"{indent}try:",
            f"{indent}    $out = $apply{given}({', '.join([*names[:given], 'None'])})",
            f"{indent}except $Replay as $replay:",
            f"{indent}    return $replayed($state, {inputs}, $replay.output)",
            # forward verified the output: torch hands on what apply returns
            f"{indent}return $out",
        ]

    def lines(given: int, indent: str) -> List[str]:
        if given == required:
            return apply(given, indent)
        last = names[given - 1]
        return [
            f"{indent}if {last} == $default{given - 1}:",
            *lines(given - 1, indent + "    "),
            f"{indent}else:",
            *apply(given, indent + "    "),
        ]

    return lines(len(names), "    ")


def generated_call(opdef: Any) -> Callable:
    """The op's call as it is registered now (See NOTE: [the torch tier's call]): the ``__call__``
    of its op objects, reading the state (``__dict__``) of ``opdef``, never the object called."""
    kinds = _simple_kinds(opdef)
    if kinds is None or all(kind is not None for _, kind in kinds):  # no tensor: the operator
        return _torch_call(opdef.__dict__)
    fn = opdef._init_fn
    params = list(inspect.signature(fn).parameters.values())
    g: Dict[str, Any] = {
        "type": type,  # a parameter may be named ``type``
        "Tensor": torch.Tensor,
        "MISSING": MISSING,
        "alias_of": is_alias_of,
        "checked": checked_output,
        "dispatch": _dispatcher_call,
        "state": opdef.__dict__,
        "self": None,
        "out": None,
        "args": None,
        "kwargs": None,
    }
    # Every parameter defaults to MISSING: what the caller left out stays out of a dispatcher call.
    # Taken by position only: a parameter given twice gets the dispatcher's error, not Python's.
    names = [n for n, _ in kinds]
    by_position, naming, given = positional_parameters(names, g, "=$MISSING")
    header = ["$self", *by_position, "*$args", "**$kwargs"]
    # The dispatcher gets the call as it was written (a graph records its keywords as keywords).
    dispatch = f"return $dispatch($state, {given}, $args, $kwargs)"
    # The short path fills the function's defaults in.
    body: List[str] = []
    for i, p in enumerate(params):
        if p.default is not p.empty:
            g[f"default{i}"] = p.default
            body += [f"if {p.name} is $MISSING:", f"    {p.name} = $default{i}"]
    body = [
        *naming,
        *keyword_lines(names, dispatch, g),
        *_short_path_lines(opdef, kinds, g, body, dispatch),
    ]
    body.append(dispatch)
    source = f"def $function({', '.join(header)}):\n" + "".join(f"    {b}\n" for b in body)
    call: Any = generated_function(source, g, set(names), f"<call of custom op {opdef._qualname}>")
    name = (
        opdef._name if opdef._name.isidentifier() and not keyword.iskeyword(opdef._name) else "op"
    )
    call.__name__ = call.__qualname__ = name
    call.__doc__ = fn.__doc__
    return shows_torchs_call_signature(call)


def _torch_call(state: Dict[str, Any]) -> Callable:
    """torch's own ``CustomOpDef.__call__`` for the op whose state is ``state``: its operator."""

    def call(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        if kwargs and "self" in kwargs:
            raise TypeError(SELF_GIVEN)
        return state["_opoverload"](*args, **kwargs)

    return call


def _dispatcher_call(state: Dict[str, Any], given: tuple, args: tuple, kwargs: dict) -> Any:
    """The call as torch's own ``CustomOpDef.__call__`` makes it (every call the short path does
    not take): the operator, given what the caller gave as the caller gave it (``given``: the
    arguments given by position, then ``MISSING``), so that torch converts the arguments or
    raises its own error."""
    return state["_opoverload"](*given_by_position(given), *args, **kwargs)
