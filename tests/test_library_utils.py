"""torch's aliasing rule on every tier: no output shares storage with an input or another
output (``_utils``: storage identity, and the generated call's quick test)."""

from __future__ import annotations

from typing import Tuple

import pytest
import torch

from library_support import TIERS, fresh, make


@pytest.mark.parametrize("tier", TIERS)
def test_output_aliasing_an_input_is_an_error(tier):
    @make(tier, "alias")
    def alias(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(RuntimeError, match="may not alias any inputs"):
        alias(torch.ones(2))


@pytest.mark.parametrize("tier", [t for t in TIERS if t != "torch"])
def test_tuple_output_aliasing_an_input_is_an_error(tier):
    @make(tier, "alias_pair")
    def alias_pair(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x, x * 3

    alias_pair.register_autograd(
        lambda ctx, g1, g3: g1 + 3 * g3, setup_context=lambda ctx, inputs, output: None
    )
    for requires_grad in (False, True):
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            alias_pair(torch.ones(2, requires_grad=requires_grad))


ALIASES = {
    # What torch's own rule catches (outputs share storage with an input or with each other),
    # including aliases that are not autograd views.
    "detached view": lambda x: x[1:].detach(),
    "data": lambda x: x.data,
    "view": lambda x: x.view(-1),
}


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("tier", TIERS)
def test_every_storage_alias_of_an_input_is_an_error(tier, alias):
    make_alias = ALIASES[alias]

    @make(tier, "aliasing")
    def aliasing(x: torch.Tensor) -> torch.Tensor:
        return make_alias(x)

    aliasing.register_autograd(lambda ctx, g: g, setup_context=lambda ctx, inputs, output: None)
    for requires_grad in (False, True):
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            aliasing(torch.ones(4, requires_grad=requires_grad))


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("tier", TIERS)
def test_an_alias_of_any_tensor_argument_is_an_error(tier, alias):
    """Ops with several tensor arguments compare the output with each of them."""
    make_alias = ALIASES[alias]

    @make(tier, "aliasing_second")
    def aliasing_second(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        return make_alias(y)

    aliasing_second.register_autograd(
        lambda ctx, g: (None, g, None), setup_context=lambda ctx, inputs, output: None
    )
    for requires_grad in (False, True):
        x, y = torch.ones(4), torch.ones(4, requires_grad=requires_grad)
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            aliasing_second(x, y, 2.0)


@pytest.mark.parametrize("tier", TIERS)
def test_outputs_aliasing_each_other_is_an_error(tier):
    @make(tier, "twins")
    def twins(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y[1:]

    with pytest.raises(RuntimeError, match="may not alias any inputs"):
        twins(torch.ones(4))


@pytest.mark.parametrize("make_alias", [lambda x: x, lambda x: x.view(-1)], ids=["same", "view"])
@pytest.mark.parametrize("tier", TIERS)
def test_returning_an_empty_input_is_an_alias(tier, make_alias):
    """torch 1.8 before: an empty tensor's data pointer identified no storage, so returning the
    input itself passed."""

    @make(tier, "empty_alias")
    def empty_alias(x: torch.Tensor) -> torch.Tensor:
        return make_alias(x)

    if tier == "torch" and not _torch_refuses_empty_alias(make_alias):
        # The torch tier is torch's own op: it does what torch's custom_op does (torch 2.8 lets
        # an empty alias through, measured; 2.4 and 2.15 refuse it).
        assert empty_alias(torch.empty(0)).numel() == 0
        return
    with pytest.raises(RuntimeError, match="may not alias any inputs"):
        empty_alias(torch.empty(0))


def _torch_refuses_empty_alias(make_alias) -> bool:
    """The control: whether torch's own ``torch.library.custom_op`` refuses an op that returns its
    empty input (or a view of it)."""
    op = torch.library.custom_op(
        f"{fresh('control')}::empty_alias", mutates_args=(), schema="(Tensor x) -> Tensor"
    )(lambda x: make_alias(x))
    try:
        op(torch.empty(0))
    except RuntimeError as error:
        assert "may not alias any inputs" in str(error), error
        return True
    return False


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@pytest.mark.parametrize("tier", TIERS)
def test_the_wildcard_namespace_is_refused_at_definition(tier):
    """torch 2.13's own error on every tier (a Library for ``_`` crashed torch 1.13 and 2.0's
    process; found by a hostile probe)."""
    with pytest.raises(
        RuntimeError, match="cannot define TORCH_LIBRARY_FRAGMENT with the wildcard"
    ):
        make(tier, "f", qualname="_::f")(_identity)
