"""The check each rewrite passes before it is written (``compatfn.migrate._soundness``): a new
class that does not compile, reads a name it does not bind, or reads a local some path leaves
unbound (where the original did not) is refused with the reason, never written."""

from __future__ import annotations

import textwrap

import pytest

cst = pytest.importorskip("libcst")
from compatfn.migrate import _rewrite, migrate_source  # noqa: E402
from compatfn.migrate._soundness import unsound  # noqa: E402

OLD = """\
class Tree(Function):
    @staticmethod
    def forward(ctx, fn, x, *args):
        ctx.fn = fn
        if x.dim() > 1:
            y = x * 2
        else:
            y = x
        ctx.scale = ctx.fn(*args)
        ctx.save_for_backward(x, *args)
        return y * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        return None, grad * ctx.scale
"""
GOOD_FORWARD = """\
    @staticmethod
    def forward(fn, x, *args):
        if x.dim() > 1:
            y = x * 2
        else:
            y = x
        scale = fn(*args)
        return y * scale, scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        fn, x = inputs[:2]
        args = inputs[2:]
        _, scale = output
        ctx.fn = fn
        ctx.scale = scale
        ctx.save_for_backward(x, *args)
"""
BACKWARD = """
    @staticmethod
    def backward(ctx, grad):
        return None, grad * ctx.scale
"""


def _class(source: str) -> cst.ClassDef:
    node = cst.parse_module(textwrap.dedent(source)).body[0]
    assert isinstance(node, cst.ClassDef)
    return node


def _new(forward: str) -> cst.ClassDef:
    return _class(
        "@compatfn.function(intermediates=1)\nclass Tree(Function):\n" + forward + BACKWARD
    )


def test_a_correct_rewrite_passes():
    assert unsound(_class(OLD), _new(GOOD_FORWARD), {"compatfn", "torch", "Tree"}) is None


@pytest.mark.parametrize(
    "old, new, reason",
    [
        (
            "scale = fn(*args)",
            "scale = ctx.fn(*args)",
            "forward would read ctx, which it does not bind",
        ),
        (
            "_, scale = output",
            "_ = output",
            "setup_context would read scale, which it does not bind",
        ),
        ("            y = x\n", "            pass\n", "forward would read y where some path"),
        ("        scale = fn(*args)\n", "        scale = scale + fn(*args)\n", "read scale where"),
    ],
    ids=["ctx-in-forward", "lost-in-setup-context", "one-branch", "before-assignment"],
)
def test_a_rewrite_reading_an_unbound_name_is_caught(old, new, reason):
    assert old in GOOD_FORWARD
    found = unsound(_class(OLD), _new(GOOD_FORWARD.replace(old, new)), {"compatfn", "Tree"})
    assert found is not None and reason in found


def test_a_setup_context_binding_a_name_twice_is_caught():
    broken = GOOD_FORWARD.replace("_, scale = output", "x, scale = output")
    found = unsound(_class(OLD), _new(broken), {"compatfn", "Tree"})
    assert found == "the migrated setup_context would bind x twice (one value hides another)"


def test_a_rewrite_that_does_not_compile_is_caught():
    broken = GOOD_FORWARD.replace(
        "def setup_context(ctx, inputs, output)", "def setup_context(ctx, ctx, output)"
    )
    found = unsound(_class(OLD), _new(broken), {"compatfn", "Tree"})
    assert found is not None and "would not compile" in found


def test_what_the_original_leaves_unbound_is_not_held_against_the_rewrite():
    # the user's own forward may read a name only some paths assign (the paths agree)
    old = _class(OLD.replace("        else:\n            y = x\n", ""))
    new = _new(GOOD_FORWARD.replace("        else:\n            y = x\n", ""))
    assert unsound(old, new, {"compatfn", "Tree"}) is None


@pytest.mark.parametrize(
    "body",
    [
        "for i in range(3):\n    y = x\nreturn y",
        "while x:\n    y = x\nreturn y",
        "try:\n    y = x\nexcept ValueError:\n    pass\nreturn y",
        "with open(x) as f:\n    if f:\n        y = 1\nreturn y",
        "del x\nreturn x",
        "if x:\n    return x\nelse:\n    y = 1\n"
        "return [y for y in x] + [(z := 1) for _ in x] + [z]",
        "y = x or (z := 1)\nreturn z",
    ],
)
def test_definite_assignment_is_conservative(body):
    head = "class F(Function):\n    @staticmethod\n    def forward(x):\n"
    old = _class(head + "        y = z = 0\n        return y, z\n")
    new = _class(head + textwrap.indent(body, " " * 8) + "\n")
    found = unsound(old, new, set())
    assert found is not None and "where some path has not assigned it" in found


def test_migrate_source_refuses_a_class_whose_rewrite_fails_the_check(monkeypatch):
    source = "import torch\n\n\n" + OLD.replace("(Function)", "(torch.autograd.Function)")
    real = _rewrite.rebuild

    def broken(planner, plan):  # a rewrite that lost a name setup_context reads
        node = real(planner, plan)
        return node.visit(_Rename("scale", "lost"))

    monkeypatch.setattr(_rewrite, "rebuild", broken)
    result = migrate_source(source, "tree.py")
    assert not result.changed and result.migrated == []
    (refusal,) = result.refusals
    assert "fails migrate's own check" in refusal.reason and refusal.name == "Tree"


class _Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new
        self.seen = 0

    def leave_Name(self, original_node, updated_node):
        if updated_node.value == self.old:
            self.seen += 1
            if self.seen == 1:  # the first: forward's assignment
                return updated_node.with_changes(value=self.new)
        return updated_node
