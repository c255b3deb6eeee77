"""Functions written as Python source when an op is defined.

A custom op's call and its legacy forward are generated with the op's own parameter names, so
that keywords bind, defaults fill, tracebacks and dynamo see a plain function, at one frame per
call.
"""

from __future__ import annotations

import inspect
import linecache
import re
import types
from typing import Any, Dict

from compatfn.core import _fresh_name

__all__ = ["generated_function", "setup_context_call"]

#: The parameters torch's Autograd kernel gives setup_context by keyword, in their order.
_SETUP_CONTEXT_PARAMETERS = ("ctx", "inputs", "output")


def generated_function(template: str, globals_: Dict[str, Any], taken: set, filename: str) -> Any:
    """The function that ``template`` (the source of one ``def``) defines.

    ``$function`` and every ``$key`` of ``globals_`` in the template are replaced by names that
    clash with none of ``taken`` (the user's parameter names) or each other; ``globals_[key]`` is
    what the name refers to when the function runs. ``filename`` shows in tracebacks (the source
    is put into ``linecache``).

    Example::

        >>> add = generated_function(
        ...     "def $function(x, plus): return $plus(x, plus)", {"plus": operator.add},
        ...     {"x", "plus"}, "<example>")
        >>> add(1, 2)
        3
    """
    names = set(taken)
    renamed = {key: _fresh_name(key, names) for key in ("function", *globals_)}
    source = re.sub(r"\$(\w+)", lambda m: renamed[m.group(1)], template)
    namespace = {renamed[key]: value for key, value in globals_.items()}
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[renamed["function"]]


#: The signature an op's generated ``__call__`` shows (torch's ``CustomOpDef.__call__``).
_CALL_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)


def shows_torchs_call_signature(call: Any) -> Any:
    """``call`` (an op's generated ``__call__``) showing ``(self, *args, **kwargs)``, as torch's
    ``CustomOpDef.__call__`` does: its own positional-only parameters (named by position, for
    the dispatcher's errors) are no signature a caller reads. TorchScript types a call of an
    object it cannot compile by that signature (``torch.jit.annotations``: ``getfullargspec``
    of ``__call__``): varargs, as for torch's op, so ``torch.jit.script`` of a function calling
    the op calls it from Python, whatever its arguments."""
    call.__signature__ = _CALL_SIGNATURE
    return call


def setup_context_call(setup_context: Any, inputs: str) -> str:
    """Source calling ``$setup_context`` with ``$ctx``, ``inputs`` (source of a tuple) and
    ``$output`` as torch's Autograd kernel calls it: by keyword (``setup_context(ctx=...,
    inputs=..., output=...)``), so that its parameters bind by name. A plain function whose
    first three parameters are ``ctx, inputs, output`` taking positions binds them the same way
    by position, which is cheaper.

    Example::

        >>> def setup_context(ctx, inputs, output): ...
        >>> setup_context_call(setup_context, "(x,)")
        '$setup_context($ctx, (x,), $output)'
        >>> setup_context_call(lambda *, ctx, inputs, output: None, "(x,)")
        '$setup_context(ctx=$ctx, inputs=(x,), output=$output)'
    """
    if _binds_by_position(setup_context):
        return f"$setup_context($ctx, {inputs}, $output)"
    return f"$setup_context(ctx=$ctx, inputs={inputs}, output=$output)"


def _binds_by_position(fn: Any) -> bool:
    """Whether ``fn(ctx, inputs, output)`` binds as ``fn(ctx=ctx, inputs=inputs,
    output=output)``: a plain function (its code says how it binds; a wrapper or another
    callable may not) whose first three parameters are those, taking positions and keywords."""
    if type(fn) is not types.FunctionType:
        return False
    code = fn.__code__
    count = len(_SETUP_CONTEXT_PARAMETERS)
    return (
        code.co_posonlyargcount == 0
        and code.co_argcount >= count
        and code.co_varnames[:count] == _SETUP_CONTEXT_PARAMETERS
    )
