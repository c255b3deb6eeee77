"""Which names the ``compatfn`` package exports, read from its modules' source (standard library
only: reading them never imports torch).

The package re-exports the ``__all__`` of every module in :data:`PUBLIC_MODULES`; ``python -m
compatfn vendor`` writes core's ``__all__`` into the vendored header the same way.
"""

from __future__ import annotations

import ast
import importlib.util
from typing import Dict, List

#: The modules whose ``__all__`` is part of ``compatfn``'s own public API, in order. A module
#: added here needs its names in ``__init__``'s ``TYPE_CHECKING`` block too.
PUBLIC_MODULES = ("core", "_features", "library")


def names_in_all(source: str) -> List[str]:
    """The names in the ``__all__`` list of a module's source, read without running it.

    Example::

        >>> names_in_all("__all__ = ['a', 'b']")
        ['a', 'b']
    """
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            if not isinstance(node.value, (ast.List, ast.Tuple)):
                raise ValueError("__all__ is not a literal list")
            return [str(ast.literal_eval(element)) for element in node.value.elts]
    raise ValueError("the module defines no __all__")


def module_source(module: str) -> str:
    """The source of an importable module (e.g. ``"compatfn.core"``), found without importing it.

    Example::

        >>> "def function(" in module_source("compatfn.core")
        True
    """
    spec = importlib.util.find_spec(module)
    if spec is None or spec.loader is None or not hasattr(spec.loader, "get_source"):
        raise ImportError(f"cannot find the source of {module}")
    source = spec.loader.get_source(module)
    if source is None:
        raise ImportError(f"{module} has no source")
    return str(source)


def public_names(package: str) -> Dict[str, str]:
    """Each public name of ``package`` -> the module (of :data:`PUBLIC_MODULES`) defining it.

    Example::

        >>> public_names("compatfn")["function"]
        'core'
    """
    origins: Dict[str, str] = {}
    for module in PUBLIC_MODULES:
        for name in names_in_all(module_source(f"{package}.{module}")):
            origins.setdefault(name, module)
    return origins
