"""compatfn.migrate._plan: what becomes of each class, and the refusals' reasons."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from compatfn.migrate import migrate_source


def test_a_classmethod_backward_calling_super_is_refused_with_the_fix():
    # Hostile probe 2: it became a @staticmethod whose zero-argument super() raised
    # "TypeError: super(type, obj)" at backward.
    source = textwrap.dedent(
        """
        import torch

        class Base(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * 2

        class Child(Base):
            @classmethod
            def backward(cls, ctx, grad):
                return super().backward(ctx, grad) + 0
        """
    )
    result = migrate_source(source, "case.py")
    assert sorted((r.name, r.reason) for r in result.refusals) == [
        (
            "Base",
            "Child in the same class hierarchy is not migrated (backward calls super(), which a "
            "@staticmethod cannot do; call Base.backward(ctx, ...) instead to let it through)",
        ),
        (
            "Child",
            "backward calls super(), which a @staticmethod cannot do; call "
            "Base.backward(ctx, ...) instead to let it through",
        ),
    ]
    assert not result.changed
