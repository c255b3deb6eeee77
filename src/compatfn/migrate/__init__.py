"""``python -m compatfn migrate``: rewrite legacy ``forward(ctx, ...)`` Functions to the
setup_context style, on LibCST (``pip install 'compatfn[migrate]'``).

The steps, one module each: :mod:`.analysis` splits a forward into its ctx-free part and what
setup_context runs; :mod:`.plan` decides what becomes of each class (or why it is refused);
:mod:`.rewrite` applies the plans (with :mod:`.imports` for the added import); :mod:`.command`
and :mod:`.cli` are the command line. :mod:`.rules` states what is migrated and what is refused.
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
    from .command import python_files, run
    from .rewrite import Refusal, Result, migrate_source

__all__ = ["Refusal", "Result", "migrate_source", "python_files", "run"]

_HOMES = {
    "Refusal": "rewrite",
    "Result": "rewrite",
    "migrate_source": "rewrite",
    "python_files": "command",
    "run": "command",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
