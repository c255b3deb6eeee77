"""compatfn.migrate._unused: torch's custom_fwd/custom_bwd imports go when the rewrite leaves
them unused (a linter's F401 on a file that passed it), and only then."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from compatfn.migrate import migrate_source

CLASS = """

class Lin(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    @custom_bwd
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), x.t() @ g
"""


def migrated(head: str, tail: str = "") -> str:
    source = textwrap.dedent(head) + CLASS + textwrap.dedent(tail)
    result = migrate_source(source, "case.py")
    assert result.migrated == ["Lin"], result.refusals
    return result.new_source


def test_an_import_the_rewrite_leaves_unused_goes():
    new = migrated(
        """\
        import torch
        from torch.cuda.amp import custom_bwd, custom_fwd
        """
    )
    assert "from torch.cuda.amp" not in new
    assert new.startswith("import torch\n\nimport compatfn\n") or new.startswith(
        "import compatfn\nimport torch\n"
    )
    compile(new, "<migrated>", "exec")


def test_a_switch_between_two_such_imports_goes_with_them():
    new = migrated(
        """\
        import torch

        try:
            from torch.amp import custom_bwd, custom_fwd
        except ImportError:
            from torch.cuda.amp import custom_bwd, custom_fwd
        """
    )
    assert "try:" not in new and "custom_fwd," not in new
    compile(new, "<migrated>", "exec")


def test_a_name_still_used_or_already_unused_stays():
    still = migrated(
        """\
        import torch
        from torch.cuda.amp import custom_bwd, custom_fwd
        """,
        "\n\nhelper = custom_fwd(lambda x: x)\n",
    )
    assert "from torch.cuda.amp import custom_fwd\n" in still  # custom_bwd went
    unused_before = migrated(
        """\
        import torch
        from torch.cuda.amp import autocast, custom_bwd, custom_fwd
        from torch.amp import custom_fwd as other
        """
    )
    assert "from torch.cuda.amp import autocast\n" in unused_before
    assert "from torch.amp import custom_fwd as other\n" in unused_before  # unused before


def test_an_import_with_a_comment_stays():
    new = migrated(
        """\
        import torch
        # AMP decorators
        from torch.cuda.amp import custom_bwd, custom_fwd
        """
    )
    assert "# AMP decorators\nfrom torch.cuda.amp import custom_bwd, custom_fwd" in new
