"""What backward's gradients become on compatfn's older tiers (``_gradients``)."""

from __future__ import annotations

import pytest
import torch

from compatfn.library._gradients import (
    _gradient_spec,
    spec_repr,
    structured_gradients,
    torch_checked_gradients,
)
from library_support import TORCH_MINOR

NODE = "GeneratedBackwardFor_ns_op_default"


def _torch_spec(value: object) -> str:
    """torch's own TreeSpec of ``value`` as torch's tensor-list wrapper reads gradients."""
    pytree = pytest.importorskip("torch.utils._pytree")

    def leaf(tree: object) -> bool:
        if isinstance(tree, tuple):
            return False
        if isinstance(tree, list):
            return any(v is not None and not isinstance(v, torch.Tensor) for v in tree)
        return True

    return repr(pytree.tree_flatten(value, leaf)[1])


@pytest.mark.parametrize(
    "value",
    [
        (None,),
        (torch.ones(1), None),
        ([torch.ones(1), None], None),
        ([], torch.ones(1), None),
        (([torch.ones(1)], None), None),
    ],
)
def test_the_structure_is_printed_as_torchs_treespec(value):
    if TORCH_MINOR < (2, 4):  # compared with torch 2.4+'s (custom_op's) TreeSpec
        pytest.skip(f"torch {torch.__version__} has no custom_op; its TreeSpec prints otherwise")
    assert spec_repr(_gradient_spec(value)) == _torch_spec(value)


def test_a_gradient_per_argument_passes_with_the_metadatas():
    g = torch.ones(1)
    assert structured_gradients((g, [g, None]), [-1, 2]) == (g, g, None, None, None)


def test_trailing_nones_beyond_the_arguments_are_dropped():
    g = torch.ones(1)
    assert structured_gradients((g, [g], None, None), [-1, 1]) == (g, g, None, None)


@pytest.mark.parametrize("result", [None, (torch.ones(1),), (torch.ones(1), [None, None])])
def test_another_structure_raises_torchs_error(result):
    with pytest.raises(RuntimeError, match=r"same structure as the inputs\. Got: TreeSpec"):
        structured_gradients(result, [-1, 1])


def test_a_wrong_count_raises_autograds_error_counting_the_metadata():
    with pytest.raises(RuntimeError, match=rf"^function {NODE}Backward .* \(expected 3, got 2\)$"):
        torch_checked_gradients(NODE, torch.ones(1), 2, frozenset({1}), 0)


def test_a_gradient_for_the_metadata_is_refused_at_its_position():
    g = torch.ones(1)
    with pytest.raises(RuntimeError, match="different than None at position 2, but"):
        torch_checked_gradients(NODE, (g, g), 1, frozenset(), 0)
    # With a metadata input, autograd itself refuses it there: handed on.
    assert torch_checked_gradients(NODE, (g, g), 1, frozenset(), 1) == (g, g)
