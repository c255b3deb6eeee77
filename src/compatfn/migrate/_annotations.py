"""The return annotation of a forward that now returns its intermediates after its outputs.

``-> Tensor`` returning ``y`` becomes ``-> Tuple[Tensor, Tensor, object]`` when forward now
returns ``y, saved, scale``: a tensor forward hands over to ``save_for_backward`` is annotated
with the file's spelling of ``torch.Tensor``, any other intermediate as ``object`` (its type is not
known; ``object`` needs no import). A tuple annotation of as many items as forward returns is
extended in place (``Tuple[A, B]`` -> ``Tuple[A, B, object]``). The tuple is spelled as the file
already spells one (``Tuple``/``typing.Tuple`` imported, or ``tuple`` under ``from __future__
import annotations``); where none is at hand, or the annotation cannot be extended, it is
dropped, as before. Example::

    extended(cst.parse_expression("Tensor"), 1, False, ["Tensor", "object"], names)
    # Tuple[Tensor, Tensor, object]   (with ``from typing import Tuple`` in the file)
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import libcst as cst

from ._names import Names
from ._syntax import source_of, walk


def tensor_spelling(annotations: Sequence[cst.BaseExpression], names: Names) -> Optional[str]:
    """How the file spells ``torch.Tensor`` in forward's annotations (``Tensor``,
    ``torch.Tensor``, ...), or None where they never name it."""
    for annotation in annotations:
        for node in walk(annotation):
            if isinstance(node, (cst.Name, cst.Attribute)) and names.qualify(node) in (
                "torch.Tensor",
                "torch._tensor.Tensor",
            ):
                return source_of(node)
    return None


def _tuple_head(annotation: cst.BaseExpression, names: Names) -> Optional[str]:
    """The annotation's own tuple head, else one the file has at hand."""
    if isinstance(annotation, cst.Subscript) and _is_tuple(annotation.value, names):
        return source_of(annotation.value)
    for local, full in names.imports.items():
        if full == "typing.Tuple":
            return local
    for local, full in names.imports.items():
        if full == "typing":
            return f"{local}.Tuple"
    if names.imports.get("annotations") == "__future__.annotations":
        return "tuple"
    return None


def _is_tuple(head: cst.BaseExpression, names: Names) -> bool:
    return names.qualify(head) in ("typing.Tuple", "tuple", "builtins.tuple")


def extended(
    annotation: cst.BaseExpression,
    outputs: Optional[int],
    flat: bool,
    extra: List[str],
    names: Names,
) -> Optional[cst.BaseExpression]:
    """``annotation`` with ``extra`` (the intermediates' types) after the outputs: inside it where
    forward returns a tuple of ``outputs`` items (``flat``), else around it; None where it cannot
    be written."""
    head = _tuple_head(annotation, names)
    if head is None:
        return None
    if not flat:
        return cst.parse_expression(f"{head}[{', '.join([source_of(annotation), *extra])}]")
    if not isinstance(annotation, cst.Subscript) or not _is_tuple(annotation.value, names):
        return None
    items = [source_of(e.slice) for e in annotation.slice]
    if len(items) != outputs or any(item.strip() == "..." for item in items):
        return None
    return cst.parse_expression(f"{head}[{', '.join([*items, *extra])}]")
