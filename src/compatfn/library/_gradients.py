"""What backward's gradients become on compatfn's tiers: checked as autograd checks those of
torch's own custom op, whose Function has a metadata input more (See NOTE: [needs_input_grad of
a custom op] in ``_autograd``)."""

from __future__ import annotations

from typing import Any, List, Union

import torch

__all__ = ["structured_gradients", "torch_checked_gradients"]

#: A pytree structure as torch's ``TreeSpec`` has it: a leaf, or a node's type name and children.
Spec = Union[str, tuple]
_LEAF = "*"


def torch_checked_gradients(
    name: str, result: Any, count: int, static: frozenset, extra: int
) -> tuple:
    """``result`` of backward checked as autograd checks torch's (``(*result, None)`` against
    ``count`` arguments and the metadata; See NOTE: [needs_input_grad of a custom op]): the
    gradients of the Function's inputs (``extra``: its metadata inputs, 0 or 1).

    ``static``: the positions that never take a tensor. Without a metadata input, a gradient
    for the metadata is reported here, after autograd's own report of such a position."""
    if type(result) is tuple and len(result) == count:
        return (*result, None) if extra else result
    full = (*result, None) if isinstance(result, tuple) else (result, None)
    expected = count + 1
    if len(full) > expected and all(g is None for g in full[expected:]):
        full = full[:expected]
    if len(full) != expected:
        raise RuntimeError(
            f"function {name}Backward returned an incorrect number of gradients "
            f"(expected {expected}, got {len(full)})"
        )
    if extra:  # autograd reports a gradient for the metadata input itself, in order
        return full
    earlier = any(full[i] is not None for i in static if i < count)
    if full[count] is not None and not earlier:
        raise RuntimeError(
            f"function {name}Backward returned a gradient different than None at position "
            f"{expected}, but the corresponding forward input was not a Variable"
        )
    return full[:count]


def structured_gradients(result: Any, layout: List[int]) -> tuple:
    """The gradients of a tensor-list op's Function inputs (its arguments flattened as
    ``flatten`` did, by ``layout``, then two metadata inputs), from backward's ``result`` as
    torch's tensor-list wrapper makes them: ``(*result, None)`` must have the structure of the
    arguments and the metadata (a list of tensors a list of as many gradients or Nones, anything
    else one value), else torch's RuntimeError. Trailing Nones beyond the arguments are dropped
    first, as torch 2.14+ and compatfn's torch tier do (See NOTE: [elided default gradients] in
    ``_torch_tier``)."""
    count = len(layout)
    if isinstance(result, tuple) and all(g is None for g in result[count:]):
        result = result[:count]
    grads = (*result, None) if isinstance(result, tuple) else (result, None)
    expected = ("tuple", [*(_LEAF if n < 0 else ("list", [_LEAF] * n) for n in layout), _LEAF])
    got = _gradient_spec(grads)
    if got != expected:
        raise RuntimeError(
            "Expected the return from backward to be of the same structure as the inputs. "
            f"Got: {spec_repr(got)} (return from backward), {spec_repr(expected)} (inputs)"
        )
    flat: List[Any] = []
    for g in grads:
        flat.extend(g if isinstance(g, list) else (g,))
    return (*flat, None)


def _gradient_spec(value: Any) -> Spec:
    """The structure torch's wrapper reads from gradients: tuples are nodes, a list of tensors
    and Nones is a node of leaves, anything else is a leaf."""
    if isinstance(value, tuple):
        return ("tuple", [_gradient_spec(v) for v in value])
    if isinstance(value, list) and all(v is None or isinstance(v, torch.Tensor) for v in value):
        return ("list", [_LEAF] * len(value))
    return _LEAF


def spec_repr(spec: Spec, indent: int = 0) -> str:
    """``spec`` printed as torch's ``TreeSpec`` prints itself.

    Example::

        >>> spec_repr(("tuple", [("list", ["*", "*"]), "*"]))
        'TreeSpec(tuple, None, [TreeSpec(list, None, [*,\\n    *]),\\n  *])'
    """
    if not isinstance(spec, tuple):
        return _LEAF
    kind, children = spec
    text = ""
    if children:
        indent += 2
        text = spec_repr(children[0], indent) + ("," if len(children) > 1 else "")
        text += ",".join("\n" + " " * indent + spec_repr(c, indent) for c in children[1:])
    return f"TreeSpec({kind}, None, [{text}])"
