"""Imports the rewrite leaves unused: torch's ``custom_fwd``/``custom_bwd`` once every use became
``compatfn.custom_fwd/custom_bwd(device_type=...)``. Left in, they fail a linter (F401) that
passed on the original; a ``try``/``except`` switch between two such imports goes with them.

Example::

    drop_unused_amp_imports(before, after)  # ``after`` without ``from torch.cuda.amp import
                                            # custom_fwd`` when only the old code used it
"""

from __future__ import annotations

from typing import Set, Union

import libcst as cst

from ._syntax import dotted, walk

_AMP_NAMES = frozenset(["custom_fwd", "custom_bwd"])


def _local_name(alias: cst.ImportAlias) -> str:
    return dotted(alias.asname.name if alias.asname else alias.name) or ""  # type: ignore[arg-type]


def _amp_import(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
        return False
    module = dotted(node.module) if node.module is not None else None
    return bool(module and module.split(".")[0] == "torch" and not node.relative)


def _names_read(module: cst.Module) -> Set[str]:
    """Names ``module`` reads outside its import statements, strings included (``__all__``)."""
    skip: Set[int] = set()
    strings: Set[str] = set()
    for sub in walk(module, into_scopes=True):
        if isinstance(sub, (cst.Import, cst.ImportFrom)):
            skip.update(id(n) for n in walk(sub))
        elif isinstance(sub, cst.Attribute):
            skip.add(id(sub.attr))
        elif isinstance(sub, cst.Arg) and sub.keyword is not None:
            skip.add(id(sub.keyword))
        elif isinstance(sub, cst.SimpleString):
            strings.add(sub.value.strip("'\""))
    names = {
        sub.value
        for sub in walk(module, into_scopes=True)
        if isinstance(sub, cst.Name) and id(sub) not in skip
    }
    return names | strings


def _imported_amp_names(module: cst.Module) -> Set[str]:
    return {
        _local_name(alias)
        for sub in walk(module)
        if _amp_import(sub)
        for alias in sub.names  # type: ignore[attr-defined]
        if (dotted(alias.name) or "") in _AMP_NAMES
    }


class _DropNames(cst.CSTTransformer):
    def __init__(self, names: Set[str]) -> None:
        self.names = names

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> Union[cst.ImportFrom, cst.RemovalSentinel]:
        if not _amp_import(updated_node):
            return updated_node
        aliases = updated_node.names
        assert not isinstance(aliases, cst.ImportStar)
        kept = [a for a in aliases if _local_name(a) not in self.names]
        if len(kept) == len(aliases):
            return updated_node
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=kept)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> Union[cst.SimpleStatementLine, cst.RemovalSentinel]:
        if not updated_node.body:
            return cst.RemoveFromParent()
        return updated_node

    def leave_Try(
        self, original_node: cst.Try, updated_node: cst.Try
    ) -> Union[cst.Try, cst.RemovalSentinel]:
        """A switch whose every branch lost its imports goes; one that kept some stays."""
        blocks = [updated_node.body, *(h.body for h in updated_node.handlers)]
        blocks += [updated_node.orelse.body] if updated_node.orelse else []
        blocks += [updated_node.finalbody.body] if updated_node.finalbody else []
        if all(not block.body for block in blocks):  # type: ignore[attr-defined]
            return cst.RemoveFromParent()
        return updated_node


def _removable(module: cst.Module, names: Set[str]) -> bool:
    """Whether dropping ``names`` leaves no empty block and loses no comment: each import
    statement to go stands alone without comments, in a ``try`` that goes as a whole or at the
    module's top level."""
    dropped = module.visit(_DropNames(names))
    try:
        compile(dropped.code, "<migrated>", "exec")
    except Exception:  # an emptied block, written as nothing or not at all
        return False
    return _comments(dropped) == _comments(module)


def _comments(module: cst.Module) -> int:
    return sum(isinstance(sub, cst.Comment) for sub in walk(module, into_scopes=True))


def drop_unused_amp_imports(before: cst.Module, after: cst.Module) -> cst.Module:
    """``after`` without the ``custom_fwd``/``custom_bwd`` imports that ``before`` used and
    ``after`` no longer does (where dropping them loses no comment)."""
    imported = _imported_amp_names(after)
    if not imported:
        return after
    unused = (imported & _names_read(before)) - _names_read(after)
    if not unused or not _removable(after, unused):
        return after
    return after.visit(_DropNames(unused))
