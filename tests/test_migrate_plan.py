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


def _run(source: str, name: str) -> tuple:
    import torch

    namespace: dict = {}
    exec(compile(source, "<case>", "exec"), namespace)
    cls = eval(name, namespace)
    x = torch.arange(1.0, 4.0, dtype=torch.float64, requires_grad=True)
    out = cls.apply(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return out.detach(), grad


NEEDS_ITS_CLASS = """
import torch

class Outer:
    class Scaled(torch.autograd.Function):
        K = 3.0

        @classmethod
        def forward(cls, ctx, x):
            ctx.save_for_backward(x)
            return x * cls.K

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3.0 + x * 0

class Base(torch.autograd.Function):
    @classmethod
    def forward(cls, ctx, x):
        ctx.save_for_backward(x)
        return x * cls.K

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0

    K = 2.0

class Sub(Base): pass
"""


@pytest.mark.parametrize("name", ["Outer.Scaled", "Sub"])
def test_classes_that_need_their_class_migrate_nested_or_on_one_line(name):
    # Hostile probes: a class nested in a class had its staticmethod forward call
    # `Scaled._forward_impl` (NameError: the class body's names are out of a method's reach);
    # `class Sub(Base): pass` stopped the whole file with an AssertionError.
    import torch

    result = migrate_source(textwrap.dedent(NEEDS_ITS_CLASS), "case.py")
    assert result.refusals == [] and result.migrated == ["Scaled", "Base", "Sub"]
    assert "return Outer.Scaled._forward_impl(x)" in result.new_source
    old, new = _run(result.old_source, name), _run(result.new_source, name)
    assert all(torch.equal(a, b) for a, b in zip(old, new))


@pytest.mark.parametrize(
    ("header", "base"),
    [
        ("from torch.autograd.function import InplaceFunction as Base", "Base"),
        ("from torch.autograd import NestedIOFunction", "NestedIOFunction"),
        ("import torch.autograd.function as fn", "fn.InplaceFunction"),
    ],
)
def test_torchs_other_function_bases_are_refused_not_skipped(header, base):
    # --strict must fail while such a class stays legacy: it used to be neither migrated nor
    # reported.
    source = f"""
import torch
{header}


class Drop({base}):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
"""
    result = migrate_source(source, "case.py")
    assert result.migrated == []
    (refusal,) = result.refusals
    assert refusal.name == "Drop"
    assert "derives from torch's" in refusal.reason
    assert "derive from torch.autograd.Function to let it through" in refusal.reason


def test_an_instance_method_forward_is_refused_as_the_style_torch_no_longer_runs():
    # qpth's SpQPFunction (def forward(self, ...), called on an instance): torch 1.8, 1.13 and
    # 2.13 raise RuntimeError ("Legacy autograd function with non-static forward method") when
    # it is called, so there is nothing to keep working.
    source = textwrap.dedent(
        """
        import torch

        class Old(torch.autograd.Function):
            def __init__(self, scale):
                self.scale = scale

            def forward(self, x):
                return x * self.scale

            def backward(self, grad):
                return grad * self.scale
        """
    )
    (refusal,) = migrate_source(source, "case.py").refusals
    assert refusal.reason == (
        "forward is an instance method, the legacy style no torch from 1.8 runs (calling it "
        "raises RuntimeError); make it a @staticmethod forward(ctx, ...) called through .apply "
        "to let it through"
    )


def test_the_refusal_names_the_statement_inside_an_if_that_keeps_it_from_being_split():
    # qpth's QPFunctionFn: `zhats, ctx.nus = solve(...)` in an if/elif on a closure's solver.
    source = textwrap.dedent(
        """
        import torch

        def make(solver):
            class Solve(torch.autograd.Function):
                @staticmethod
                def forward(ctx, q):
                    if solver == 1:
                        ctx.factor = q * 2
                        z, ctx.nus = q * 3, q * 4
                    else:
                        z = q * 5
                    ctx.save_for_backward(z)
                    return z

                @staticmethod
                def backward(ctx, grad):
                    return grad
            return Solve
        """
    )
    (refusal,) = migrate_source(source, "case.py").refusals
    assert refusal.reason == (
        "forward assigns ctx.nus together with other targets; write `ctx.nus = value` on a line "
        "of its own to let it through"
    )


def _migrated(body: str, head: str = "def forward(ctx, x)", extra: str = "") -> str:
    source = (
        "import torch\n\n\nclass F(torch.autograd.Function):\n"
        f"    {extra}@staticmethod\n    {head}:\n{textwrap.indent(body, ' ' * 8)}\n"
        "    @staticmethod\n    def backward(ctx, grad):\n        return grad\n"
    )
    result = migrate_source(source, "case.py")
    assert not result.refusals, result.refusals
    return result.new_source


def test_forward_starts_without_the_blank_line_its_first_ctx_call_left():
    new = _migrated("ctx.save_for_backward(x)\n\ny = x * 2\nreturn y\n")
    assert "    def forward(x):\n        y = x * 2\n" in new


def test_a_return_annotation_is_dropped_where_forward_returns_intermediates_too():
    body = "y = x * 2\nctx.y = y.exp()\ny = y + 1\nreturn y\n"
    new = _migrated(body, "def forward(ctx, x) -> torch.Tensor")
    assert "    def forward(x):\n" in new and "return y, y_\n" in new
    kept = _migrated(
        "ctx.save_for_backward(x)\nreturn x * 2\n", "def forward(ctx, x) -> torch.Tensor"
    )
    assert "    def forward(x) -> torch.Tensor:\n" in kept  # nothing more returned: kept


def test_setup_context_keeps_its_parameter_names_where_only_forward_uses_them():
    new = _migrated(
        "output = x * 2\ninputs = output + 1\nctx.save_for_backward(x)\nreturn inputs\n"
    )
    assert "def setup_context(ctx, inputs, output):\n        (x,) = inputs\n" in new


def test_one_input_of_a_star_forward_is_unpacked_alone():
    new = _migrated("ctx.f = f\nreturn x * 2\n", "def forward(ctx, f, x, y, *rest)").replace(
        "ctx.f = f", "ctx.f = f"
    )
    assert "        f = inputs[0]\n" in new


def test_torch_jit_ignore_on_forward_stays():
    new = _migrated("ctx.save_for_backward(x)\nreturn x * 2\n", extra="@torch.jit.ignore\n    ")
    assert "    @staticmethod\n    @torch.jit.ignore\n    def forward(x):\n" in new


def test_an_unknown_forward_decorator_is_refused_with_a_change_that_works():
    source = _source_with_decorator("@functools.lru_cache()")
    (refusal,) = migrate_source(source, "case.py").refusals
    assert "remove it (or migrate this class by hand)" in refusal.reason
    assert "call it inside" not in refusal.reason


def _source_with_decorator(decorator: str) -> str:
    return (
        "import functools\nimport torch\n\n\nclass F(torch.autograd.Function):\n"
        f"    @staticmethod\n    {decorator}\n    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n        return x\n\n"
        "    @staticmethod\n    def backward(ctx, grad):\n        return grad\n"
    )


def test_a_read_back_of_an_attribute_set_under_a_condition_names_the_condition():
    source = (
        "import torch\n\n\nclass F(torch.autograd.Function):\n    @staticmethod\n"
        "    def forward(ctx, x, flag):\n        if flag:\n            ctx.a = x * 2\n"
        "        return x * ctx.a\n\n    @staticmethod\n    def backward(ctx, grad):\n"
        "        return grad, None\n"
    )
    (refusal,) = migrate_source(source, "case.py").refusals
    assert refusal.reason.startswith(
        "forward reads ctx.a back where migrate cannot tell which value it holds (forward sets "
        "it only under a condition"
    )
