"""``python -m compatfn migrate``: rewrite legacy ``forward(ctx, ...)`` Functions to the
setup_context style, on LibCST (``pip install 'compatfn[migrate]'``).

The steps, one module each: :mod:`._analysis` splits a forward into its ctx-free part and what
setup_context runs (with :mod:`._placement` for where each ctx statement goes and :mod:`._outputs`
for what forward returns); :mod:`._plan` decides what becomes of each class (or why it is refused);
:mod:`._rewrite` applies the plans (with :mod:`._imports` for the added import); :mod:`._command`
and :mod:`._cli` are the command line. :mod:`._rules` states what is migrated and what is refused.
This package imports LibCST only when one of the names below is used. Example::

    from compatfn.migrate import migrate_source
    result = migrate_source(open("ops.py", "rb").read(), path="ops.py")
    print(result.new_source)
    for refusal in result.refusals:
        print(refusal)  # ops.py:12: MyFn: forward passes ctx to _save(); ...
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._command import python_files, run
    from ._rewrite import Refusal, Result, migrate_source

__all__ = ["Refusal", "Result", "migrate_source", "python_files", "run"]

_HOMES = {
    "Refusal": "_rewrite",
    "Result": "_rewrite",
    "migrate_source": "_rewrite",
    "python_files": "_command",
    "run": "_command",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
