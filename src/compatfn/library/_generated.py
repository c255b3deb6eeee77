"""Functions written as Python source when an op is defined.

A custom op's call and its legacy forward are generated with the op's own parameter names, so
that keywords bind, defaults fill, tracebacks and dynamo see a plain function, at one frame per
call.
"""

from __future__ import annotations

import linecache
import re
from typing import Any, Dict

from compatfn.core import _fresh_name

__all__ = ["generated_function"]


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
