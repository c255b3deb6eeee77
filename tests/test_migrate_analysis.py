"""compatfn.migrate._analysis (with _placement and _outputs): how one legacy forward splits.
Each case is migrated and, where it is migrated, run: the migrated class gives the original's
outputs and gradients."""

from __future__ import annotations

import textwrap
from typing import Any, Dict

import pytest
import torch

pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from compatfn.migrate import migrate_source


def load(source: str) -> Dict[str, Any]:
    """Execute module source; its globals."""
    namespace: Dict[str, Any] = {"__name__": "migrated_case"}
    exec(compile(source, "<migrated>", "exec"), namespace)
    return namespace


def migrate(source: str) -> Any:
    return migrate_source(textwrap.dedent(source), "case.py")


def outputs_and_grads(cls: Any, *inputs: torch.Tensor) -> Any:
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    out = cls.apply(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    total = sum(o.sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    return [o.detach() for o in outs if isinstance(o, torch.Tensor)], grads


def assert_same_behaviour(source: str, name: str, *inputs: torch.Tensor, seed: Any = None) -> str:
    """Migrate ``source``, check ``name`` migrated and behaving as before; the new source."""
    result = migrate(source)
    assert result.migrated == [name], result.refusals
    runs = []
    for text in (result.old_source, result.new_source):
        if seed is not None:
            seed()
        runs.append(outputs_and_grads(load(text)[name], *inputs))
    (out_a, grad_a), (out_b, grad_b) = runs
    assert all(torch.equal(a, b) for a, b in zip(out_a, out_b))
    assert all(a is b is None or torch.equal(a, b) for a, b in zip(grad_a, grad_b))
    return result.new_source


def test_a_saved_value_deleted_later_is_kept_under_a_new_name():
    # Hostile probe 1: forward returned `e` after `del e` (UnboundLocalError on every call).
    source = """
        import torch

        class ExpScale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                e = x.exp()
                ctx.save_for_backward(e)
                y = e * 2
                del e
                return y

            @staticmethod
            def backward(ctx, grad):
                (e,) = ctx.saved_tensors
                return grad * e * 2
        """
    new = assert_same_behaviour(source, "ExpScale", torch.randn(4, dtype=torch.float64))
    assert "saved_0 = e\n" in new and "return y, saved_0" in new


@pytest.mark.parametrize(
    "draw, imports",
    [
        ("random.choice([-1.0, 1.0])", "import random"),
        ("choice([-1.0, 1.0])", "from random import choice"),
        ("random.sample([-1.0, 1.0], 1)[0]", "import random"),
        ("float(torch.randperm(2)[0]) * 2 - 1", "import torch"),
    ],
)
def test_random_draws_stay_in_forward(draw, imports):
    # Hostile probe 3: draws whose name does not say "rand" moved into setup_context and were
    # drawn after forward's own draws: different values for the same seed.
    import random

    source = f"""
import torch
{imports}

class Flip(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.sign = {draw}
        return x * random.choice([2.0, 3.0])

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.sign
"""
    source = "import random\n" + source

    def seed_all(seed: int) -> None:
        random.seed(seed)
        torch.manual_seed(seed)

    for seed in range(8):  # the draws come in another order: some seed shows it
        new = assert_same_behaviour(
            source,
            "Flip",
            torch.randn(3, dtype=torch.float64),
            seed=lambda seed=seed: seed_all(seed),
        )
    assert f"sign = {draw}" in new  # drawn in forward, at its place


def test_a_bare_return_with_intermediates_is_refused_with_the_fix():
    # Hostile probe 4: AssertionError traceback from the codemod, aborting the run.
    result = migrate(
        """
        from torch.autograd import Function

        class Inplace(Function):
            @staticmethod
            def forward(ctx, x):
                e = x.exp()
                ctx.save_for_backward(e)
                x.mul_(2)
                return
        """
    )
    assert [r.reason for r in result.refusals] == [
        "forward ends with a bare `return` and needs intermediates; return its output "
        "(`return None` for none) to let it through"
    ]
    assert not result.changed


def test_a_forward_without_return_is_refused():
    result = migrate(
        """
        from torch.autograd import Function

        class NoReturn(Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
        """
    )
    assert [r.reason for r in result.refusals] == [
        "forward has no return statement; end it with `return <output>`"
    ]


def test_an_input_returned_as_it_is_and_saved_becomes_a_view():
    # torch 2.x refuses to save an input returned as it is when the class has setup_context
    # ("An input that has been returned as-is as output is being saved for backward"); a legacy
    # Function returned a view of it anyway (torch-struct's _SparseMaxGrad pattern).
    source = """
        import torch

        class Identity(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, scale):
                ctx.save_for_backward(x, scale)
                return x

            @staticmethod
            def backward(ctx, grad):
                x, scale = ctx.saved_tensors
                return grad * scale, None
        """
    x, scale = torch.randn(3, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    new = assert_same_behaviour(source, "Identity", x, scale)
    assert "return x.view_as(x)\n" in new


def test_a_with_block_name_and_a_ctx_attribute_read_back_after_the_block():
    # `as` binds a value the ctx call saves; ctx.attr set in the block and read after it
    # becomes a local of forward (see NOTE: [neutral with blocks] in _branches).
    source = """
        import torch

        class Guarded(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                with torch.no_grad() as _unused, torch.cuda.device_of(x):
                    y = x.exp()
                    ctx.save_for_backward(y)
                    ctx.twice = 2.0 * x.shape[0]
                return y * ctx.twice

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y * ctx.twice
        """
    new = assert_same_behaviour(source, "Guarded", torch.randn(3, dtype=torch.float64))
    assert "return y * twice, y, twice" in new


@pytest.mark.parametrize(
    "block, reason",
    [
        (
            "with torch.no_grad():\n    if x.requires_grad:\n        ctx.save_for_backward(x)",
            "forward uses ctx in an if block inside `with torch.no_grad():`, which migrate "
            "splits only outside a with block",
        ),
        (
            "if x.requires_grad:\n    y = x * 2\n    with torch.no_grad():\n"
            "        ctx.save_for_backward(y)",
            "forward uses ctx inside `with torch.no_grad():` within an if, loop or other block",
        ),
        (
            "with torch.no_grad():\n    with torch.enable_grad():\n"
            "        ctx.save_for_backward(x)",
            "forward uses ctx in a with block nested in `with torch.no_grad():`",
        ),
        (
            "with torch.no_grad(), open('log.txt') as f:\n    ctx.save_for_backward(x)",
            "forward uses ctx inside a with block other than grad mode",
        ),
        (
            "with torch.no_grad():\n    y = x * 2\n    ctx.save_for_backward(y)\n    z = y * 3\n"
            "y = y + z",
            "forward saves y inside a with block and assigns it again after the block",
        ),
    ],
)
def test_with_blocks_that_stay_refused(block, reason):
    body = textwrap.indent(block, " " * 8)
    source = (
        "import torch\n\nclass F(torch.autograd.Function):\n    @staticmethod\n"
        f"    def forward(ctx, x):\n{body}\n        return x * 2\n\n"
        "    @staticmethod\n    def backward(ctx, grad):\n        return grad * 2\n"
    )
    result = migrate_source(source, "case.py")
    assert result.migrated == []
    assert len(result.refusals) == 1 and reason in str(result.refusals[0])


def test_a_plain_tail_of_a_with_block_moves_after_it():
    # The save ends the block: it moves after the block, where the value it saves is kept
    # under a name of its own because forward assigns it again.
    source = """
        import torch

        class Tail(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                with torch.no_grad():
                    y = x * 2
                    ctx.save_for_backward(y)
                y = y + 1
                return y

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y
        """
    new = assert_same_behaviour(source, "Tail", torch.randn(3, dtype=torch.float64))
    assert (
        "with torch.no_grad():\n            y = x * 2\n        saved_0 = y\n        y = y + 1\n"
        in new
    )


def test_intermediates_come_in_source_order_whatever_the_string_hashing():
    # The order once followed Python's string hashing (PYTHONHASHSEED): two runs of the codemod
    # could write different files. Six names: a hash order matches the source 1 time in 720.
    source = """
        import torch

        class Many(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                zeta, alpha, mid, beta, omega, gamma = (float(i) for i in range(6))
                ctx.args = (zeta, alpha, mid, beta, omega, gamma)
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * 2
        """
    new = assert_same_behaviour(source, "Many", torch.randn(3, dtype=torch.float64))
    assert "return x * 2, zeta, alpha, mid, beta, omega, gamma\n" in new


@pytest.mark.parametrize(
    "change",
    [
        "torch.relu_(y)",
        "y.data.mul_(3)",
        "y.view(-1).mul_(3)",
        "z = y\n        z.mul_(3)",
        "v = y[:2]\n        v[0] = 100.0",
        "y[0].add_(100)",
        "torch.nn.functional.relu(y, inplace=True)",
        "torch.mul(y, 3, out=y)",
        "def bump():\n            y.mul_(3)\n        bump()",
    ],
)
def test_a_ctx_value_is_computed_before_forward_changes_what_it_reads(change):
    # Hostile probe: ctx.total = y.sum() moved to setup_context, computed there from y after
    # forward had changed y in place in a way the codemod did not see: wrong gradients.
    source = f"""
import torch

class Total(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x - 0.5
        ctx.total = y.sum()
        {change}
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.total
"""
    new = assert_same_behaviour(source, "Total", torch.randn(5, dtype=torch.float64))
    assert "total = y.sum()" in new.split("def setup_context")[0]  # computed in forward


def test_a_list_changed_after_a_ctx_value_is_read_from_it():
    source = """
import torch

class Count(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        parts = [x]
        ctx.n = len(parts)
        parts.append(x)
        return torch.stack(parts).sum(0)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.n
"""
    assert_same_behaviour(source, "Count", torch.randn(3, dtype=torch.float64))


LIST_SAVED = """
import torch

class Pair(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        a = x.sin()
        tensors = [a, x]
        ctx.save_for_backward({arg})
        {after}
        return a * 2

    @staticmethod
    def backward(ctx, grad):
        a, x = ctx.saved_tensors
        return grad * 2 * x.cos()
"""


@pytest.mark.parametrize(
    "arg, after", [("*tuple(tensors)", "tensors.append(a)"), ("*tensors", "tensors = [a]")]
)
def test_a_starred_list_saved_before_it_changes(arg, after):
    source = LIST_SAVED.format(arg=arg, after=after)
    assert_same_behaviour(source, "Pair", torch.randn(3, dtype=torch.float64))


@pytest.mark.parametrize(
    "source, reason",
    [
        (
            LIST_SAVED.format(arg="*tensors", after="tensors.append(a)"),
            "forward passes *tensors to a ctx call and changes tensors in place later; pass "
            "*tuple(tensors) to let it through",
        ),
        (
            """
            import torch
            class F(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    if x.requires_grad:
                        scale = x.abs().max()
                        ctx.noise = torch.rand(3) * scale
                    return x + torch.rand(3)
            """,
            "forward reads the random state (or draws) for ctx inside an if block that also "
            "computes values; compute those values before the if to let it through",
        ),
        (
            """
            import torch
            class F(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, flag):
                    y = x * 2
                    if flag:
                        ctx.total = y.sum()
                    y.mul_(3)
                    return y
            """,
            "forward computes a ctx value under a condition from y, which it changes in place "
            "later; compute it into a name before the block and pass the name to let it through",
        ),
        (
            """
            import torch
            class F(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    y = x * 2
                    if x.requires_grad:
                        ctx.total = y.sum()
                        y.mul_(3)
                    return y
            """,
            "forward computes a ctx value under a condition from y, which it changes in place "
            "later; compute it into a name before the block and pass the name to let it through",
        ),
        (
            """
            import torch
            class F(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    ctx.save_for_backward(y := x * 2)
                    return y + 1
            """,
            "forward assigns a name with := in a statement that moves to setup_context; assign "
            "it on a line of its own before that statement to let it through",
        ),
        (
            """
            import torch
            class F(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    if (n := x.numel()) > 0:
                        ctx.save_for_backward(x)
                    return x * n
            """,
            "forward assigns a name with := in a statement that moves to setup_context; assign "
            "it on a line of its own before that statement to let it through",
        ),
    ],
    ids=[
        "starred-list-appended",
        "random-under-if",
        "if-then-in-place",
        "in-place-in-branch",
        "walrus-in-call",
        "walrus-in-test",
    ],
)
def test_ctx_values_setup_context_would_compute_differently_are_refused(source, reason):
    # Hostile probes: each of these migrated silently and then saved other values (a list
    # grown after the call, other random draws, a tensor changed in place) or hit NameError.
    result = migrate(source)
    assert [r.reason for r in result.refusals] == [reason]
    assert not result.changed


def test_a_comprehension_variable_is_not_an_intermediate():
    # Hostile probe: `t`, bound by both comprehensions, became an intermediate that forward
    # returned: NameError on every call.
    source = """
import torch

class Shifted(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ys = [t * 2 for t in x.unbind()]
        ctx.save_for_backward(*[t + 1 for t in ys])
        return torch.stack(ys)

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        return grad * 2 + 0 * saved[0]
"""
    new = assert_same_behaviour(source, "Shifted", torch.randn(3, dtype=torch.float64))
    assert "intermediates=1" in new and "_, ys = output" in new


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            "match mode:\n    case 1:\n        ctx.save_for_backward(x)\n    case _:\n        pass",
            "forward uses ctx inside a match statement; move the ctx calls after it (or write "
            "it as an if block) to let it through",
        ),
        (
            "ctx.count = 0\nctx.count += 1",
            "forward changes ctx.count with an augmented assignment; compute the value in a "
            "name and set ctx.count = name once to let it through",
        ),
        (
            "a = ctx.total = x.sum()",
            "forward assigns ctx.total together with other targets; write `ctx.total = value` "
            "on a line of its own to let it through",
        ),
        (
            "ctx.save_for_backward(x); y = x * 2",
            "forward calls ctx.save_for_backward() inside another statement or expression; put "
            "the call on a line of its own to let it through",
        ),
        (
            "ctx.total = x.sum()\ndel ctx.total",
            "forward deletes ctx.total; remove the del to let it through",
        ),
    ],
    ids=["match", "augmented", "chained", "semicolon", "del"],
)
def test_refusals_say_what_ctx_use_stops_the_class(body, reason):
    # Hostile probes: each said "forward reads ctx.<attr> back, which forward does not set"
    # (the del one migrated, and forward returned the deleted value: UnboundLocalError).
    indented = textwrap.indent(body, " " * 8)
    source = f"""
import torch

class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mode):
{indented}
        return x * 2
"""
    result = migrate(source)
    assert [r.reason for r in result.refusals] == [reason]
    assert not result.changed


def test_an_input_named_ctx_is_refused():
    # Hostile probe: `forward(self, ctx, y)` became `forward(ctx, y)`, which the decorator
    # reads as the legacy form: TypeError when the module is imported.
    result = migrate(
        """
        import torch

        class Mul(torch.autograd.Function):
            @staticmethod
            def forward(self, ctx, y):
                self.save_for_backward(ctx, y)
                return ctx * y
        """
    )
    assert [r.reason for r in result.refusals] == [
        "forward's first input is named ctx (its ctx parameter is self), which "
        "@compatfn.function would read as the legacy form; rename that input to let it through"
    ]


RANDOM_STATE_UNDER_A_CONDITION = """
import random
from random import getstate

import torch


class Replay(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        if x.requires_grad:  # a condition forward evaluates (not a plain test of an input)
            ctx.state = {read}
            if w.dim() > 1:
                ctx.wide = True
        ctx.save_for_backward(x, w)
        return x * w * {draw}

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        current = {save}
        {restore}(ctx.state)
        replay = {draw}
        {restore}(current)
        assert not hasattr(ctx, "wide")
        return grad * w * replay, grad * x * replay
"""


@pytest.mark.parametrize(
    "read, draw, save, restore",
    [
        ("torch.get_rng_state()", "torch.rand(())", "torch.get_rng_state()", "torch.set_rng_state"),
        ("random.getstate()", "random.random()", "random.getstate()", "random.setstate"),
        ("getstate()", "random.random()", "getstate()", "random.setstate"),
    ],
)
def test_the_random_state_read_under_a_condition_stays_in_forward(read, draw, save, restore):
    # torch's CheckpointFunction pattern (memcnn, revlib): the state is read under a condition
    # before forward draws; setup_context would read it after the draws, so forward reads it
    # (see NOTE: [random state under a condition]) and an attribute never set stays unset.
    import random

    source = RANDOM_STATE_UNDER_A_CONDITION.format(read=read, draw=draw, save=save, restore=restore)

    def seed_all(seed: int) -> None:
        random.seed(seed)
        torch.manual_seed(seed)

    for seed in range(3):
        new = assert_same_behaviour(
            source,
            "Replay",
            torch.randn(3, dtype=torch.float64),
            torch.randn(3, dtype=torch.float64),
            seed=lambda seed=seed: seed_all(seed),
        )
    assert f"        state = {read}\n" in new  # read in forward, at its place
    assert "requires_grad = True\n" in new  # the condition, evaluated in forward
    assert "            if w.dim() > 1:\n" in new.split("def setup_context")[0]


def test_the_cuda_random_state_stays_in_forward_under_its_condition():
    # torch.cuda.get_rng_state() initializes CUDA: it runs only where forward ran it, and
    # setup_context tests the flag forward recorded.
    source = """
        import torch

        class Replay(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                if torch.cuda.is_initialized():
                    ctx.cuda_state = torch.cuda.get_rng_state()
                return torch.nn.functional.dropout(x, 0.5)

            @staticmethod
            def backward(ctx, grad):
                return grad
        """
    result = migrate(source)
    assert result.migrated == ["Replay"]
    forward, setup = result.new_source.split("def setup_context")
    assert "cuda_state = torch.cuda.get_rng_state()" in forward
    assert "if cuda_is_initialized:\n            ctx.cuda_state = cuda_state\n" in setup


def test_a_random_condition_of_ctx_statements_is_drawn_in_forward():
    # setup_context used to draw the condition again, after forward's own draw.
    source = """
        import torch

        class Flip(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                if torch.rand(()) < 0.5:
                    ctx.flip = True
                return x * torch.rand(())

            @staticmethod
            def backward(ctx, grad):
                return grad * (2 if hasattr(ctx, "flip") else 1)
        """
    for seed in range(6):  # both branches
        assert_same_behaviour(
            source,
            "Flip",
            torch.randn(3, dtype=torch.float64),
            seed=lambda s=seed: torch.manual_seed(s),
        )


@pytest.mark.parametrize(
    "block, reason",
    [
        (
            "if torch.rand(()) < 0.5:\n    y = x * 2\n    ctx.save_for_backward(y)",
            "forward draws a random number in the condition of an if block that uses ctx and "
            "computes values; draw it into a name before the if to let it through",
        ),
        (
            "if keep:\n    device = x.device\n    ctx.state = torch.get_rng_state()",
            "forward reads the random state (or draws) for ctx inside an if block that also "
            "computes values; compute those values before the if to let it through",
        ),
        (
            "if keep:\n    ctx.state = torch.get_rng_state()\n    ctx.save_for_backward(x * 2)",
            "forward passes a computed value to a ctx call under a condition that reads the "
            "random state; assign it to a name before the if and pass the name to let it through",
        ),
        (
            "if ctx.needs_input_grad[0]:\n    ctx.state = torch.get_rng_state()",
            "forward reads ctx in an if block that reads the random state; compute the value "
            "into a name before the if to let it through",
        ),
        (
            "ctx.k = 2\nif keep:\n    ctx.state = torch.get_rng_state()[: ctx.k]",
            "forward reads ctx in an if block that reads the random state; compute the value "
            "into a name before the if to let it through",
        ),
        (
            "if keep:\n    ctx.state = torch.get_rng_state()\n    ctx.a = ctx.b = x.sum()",
            "forward sets ctx attributes under a condition that reads the random state in a way "
            "migrate cannot move; write one `ctx.attr = value` per line to let it through",
        ),
    ],
)
def test_the_random_state_under_a_condition_stays_refused_where_it_cannot_move(block, reason):
    body = textwrap.indent(block, " " * 8)
    source = (
        "import torch\n\nclass Replay(torch.autograd.Function):\n    @staticmethod\n"
        f"    def forward(ctx, x, keep):\n{body}\n"
        "        return torch.nn.functional.dropout(x, 0.5)\n"
    )
    (refusal,) = migrate_source(source, "case.py").refusals
    assert refusal.reason == reason


@pytest.mark.parametrize("backward", ["*grads", "grad_a, grad_b"])
def test_a_returned_name_that_holds_a_tuple_stays_one_item_before_the_intermediates(backward):
    # memcnn's `outputs = tuple(...)`, returned: as many outputs as the tuple holds, so forward
    # returns `outputs, x2` and torch receives `outputs` as before (see NOTE: [outputs of
    # unknown number]).
    source = f"""
        import torch

        class Pair(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x2 = x * 2
                outputs = tuple([x2.sin(), x2.cos()])
                ctx.save_for_backward(x2)
                return outputs

            @staticmethod
            def backward(ctx, {backward}):
                (x2,) = ctx.saved_tensors
                grad_a, grad_b = {"grads" if backward == "*grads" else "grad_a, grad_b"}
                return 2 * (grad_a * x2.cos() - grad_b * x2.sin())
        """
    new = assert_same_behaviour(
        textwrap.dedent(source), "Pair", torch.randn(3, dtype=torch.float64)
    )
    assert "return outputs, x2\n" in new and "_, x2 = output\n" in new


STARRED_OUTPUTS = """
import torch


class Solve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y0, n):
        ys = y0.exp()
        extra = tuple(ys * i for i in range(int(n)))
        ctx.save_for_backward(ys)
        return {returned}

    @staticmethod
    def backward(ctx, grad_ys, *grad_extra):
        (ys,) = ctx.saved_tensors
        return grad_ys * ys + sum(g * ys * i for i, g in enumerate(grad_extra)), None
"""


@pytest.mark.parametrize("returned", ["(ys, *extra)", "ys, *extra"])
@pytest.mark.parametrize("n", [0, 2])
def test_a_starred_return_stays_one_item_before_the_intermediates(returned, n):
    # torchsde's `return (ys, *extra_solver_state)`: with no extra state torch received a tuple
    # of one tensor; appending the intermediates after it would hand torch `ys` alone.
    source = STARRED_OUTPUTS.format(returned=returned)
    result = migrate(source)
    assert result.migrated == ["Solve"]
    assert "return (ys, *extra), ys\n" in result.new_source
    runs = []
    start = torch.randn(3, dtype=torch.float64)
    for text in (result.old_source, result.new_source):
        y0 = start.clone().requires_grad_()
        out = load(text)["Solve"].apply(y0, torch.tensor(float(n)))
        assert isinstance(out, tuple) and len(out) == 1 + n
        runs.append((out, torch.autograd.grad(sum(o.sum() for o in out), y0)))
    (out_a, grad_a), (out_b, grad_b) = runs
    assert all(torch.equal(a, b) for a, b in zip(out_a, out_b))
    assert torch.equal(grad_a[0], grad_b[0])


def test_a_one_element_tuple_stays_a_tuple():
    # `return (y,)`: torch returns a tuple of one tensor; setup_context unpacks it as one (it
    # used to bind y to the tuple and fail in save_for_backward), and with intermediates the
    # tuple stays one item before them.
    source = """
        import torch

        class One(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x.exp()
                s = y.sum()
                ctx.save_for_backward(y)
                ctx.total = s * 2
                return (y,)

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y + 0 * ctx.total
        """
    new = assert_same_behaviour(textwrap.dedent(source), "One", torch.randn(3, dtype=torch.float64))
    assert "return (y,), s\n" in new
    plain = source.replace("                ctx.total = s * 2\n", "").replace(
        " + 0 * ctx.total", ""
    )
    new = assert_same_behaviour(textwrap.dedent(plain), "One", torch.randn(3, dtype=torch.float64))
    assert "(y,) = output\n" in new


_NEEDS_GRAD_CHECKS = [
    "if any(ctx.needs_input_grad[:1]):\n    raise ValueError('no gradient for x')",
    "needs_grad = any(ctx.needs_input_grad)\nif needs_grad:\n    ctx.save_for_backward(x)",
]


def _needs_grad_source(check: str, imports: str) -> str:
    body = textwrap.indent(check, " " * 8)
    return (
        f"{imports}\n\nclass F(autograd.Function):\n    @staticmethod\n"
        f'    def forward(ctx, x, w, *rest):\n        """Doc."""\n{body}\n        return x * w\n\n'
        "    @staticmethod\n    def backward(ctx, grad):\n        return None, grad\n"
    )


@pytest.mark.parametrize("check", _NEEDS_GRAD_CHECKS)
def test_needs_input_grad_read_in_forward_is_computed_from_the_inputs(check):
    # See NOTE: [needs_input_grad in forward]: the local comes first (after the docstring).
    source = _needs_grad_source(check, "import torch as th\nfrom torch import autograd")
    result = migrate_source(source, "case.py", line_length=120)  # the new line on one line
    assert result.migrated == ["F"]
    assert (
        '        """Doc."""\n        needs_input_grad = tuple(isinstance(arg, th.Tensor) and '
        "arg.requires_grad for arg in (x, w, *rest))\n"
    ) in result.new_source
    assert "ctx.needs_input_grad" not in result.new_source.split("def setup_context")[0]


@pytest.mark.parametrize("check", _NEEDS_GRAD_CHECKS)
def test_needs_input_grad_without_a_torch_import_says_which_line_lets_it_through(check):
    source = _needs_grad_source(check, "from torch import autograd")
    (refusal,) = migrate_source(source, "c.py").refusals
    assert refusal.reason == (
        "forward reads ctx.needs_input_grad, which migrate computes from the inputs only in a "
        "module that has `import torch` (a name forward does not assign); add that import to "
        "let it through"
    )


def test_a_condition_on_a_value_the_branch_changes_is_flagged():
    # See NOTE: [branch flags]: setup_context testing `state[0]` again would see the value the
    # branch wrote and skip the save; forward records the branch instead.
    source = """
        import torch

        class SaveOnce(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, state):
                if state[0]:
                    state[0] = False
                    ctx.save_for_backward(x)
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * (2 if ctx.saved_tensors else 3), None
        """
    result = migrate(source)
    assert "        if branch_taken:\n            ctx.save_for_backward(x)\n" in result.new_source
    grads = []
    for text in (result.old_source, result.new_source):
        x = torch.ones(2, dtype=torch.float64, requires_grad=True)
        load(text)["SaveOnce"].apply(x, [True]).sum().backward()
        grads.append(x.grad)
    assert torch.equal(grads[0], grads[1]) and grads[0][0] == 2


def test_a_nested_condition_on_a_computed_value_is_refused_with_the_fix():
    source = """
        import torch

        class Nested(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, flag):
                if flag:
                    y = x * 2
                    if y.sum() > 0:
                        ctx.save_for_backward(y)
                else:
                    y = x
                return y * 1

            @staticmethod
            def backward(ctx, grad):
                return grad * 2, None
        """
    (refusal,) = migrate(source).refusals
    assert refusal.reason == (
        "forward uses ctx under a nested condition on y, a value forward computes or changes; "
        "compute the condition into a name before the outer if and test that name to let it "
        "through"
    )


def test_a_name_assigned_on_some_paths_is_returned_as_none_on_the_others():
    # See NOTE: [intermediates that may be unbound]: forward used to return `y` unbound
    # (UnboundLocalError) when x does not require grad.
    source = """
        import torch

        class MaybeDouble(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                if x.requires_grad:
                    y = x * 2
                ctx.scale = 3
                if x.requires_grad:
                    ctx.save_for_backward(y)
                return x * 3

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y
        """
    new = assert_same_behaviour(source, "MaybeDouble", torch.ones(3, dtype=torch.float64))
    assert "        y = None\n        if x.requires_grad:\n            y = x * 2\n" in new
    plain = load(new)["MaybeDouble"].apply(torch.ones(3, dtype=torch.float64))
    assert torch.equal(plain, torch.full((3,), 3.0, dtype=torch.float64))


@pytest.mark.parametrize(
    "block, starts_as_none",
    [
        ("try:\n    y = x.exp()\nexcept RuntimeError:\n    y = x", False),
        ("try:\n    z = x.exp()\nexcept RuntimeError:\n    y = x\nelse:\n    y = z", False),
        ("try:\n    z = x.exp()\nfinally:\n    y = x * 2", False),
        ("try:\n    y = x.exp()\nexcept RuntimeError:\n    pass", True),
        ("try:\n    y = x.exp()\nexcept RuntimeError:\n    print('no')\n    raise", False),
    ],
    ids=["try-and-handler", "else-and-handler", "finally", "handler-misses", "handler-raises"],
)
def test_a_name_a_try_statement_assigns_on_every_path_needs_no_start(block, starts_as_none):
    # a needless `y = None` stood before a try whose body and handler both assign y
    body = textwrap.indent(block, " " * 16)
    source = f"""
        import torch

        class Tried(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
{body}
                ctx.save_for_backward(y)
                return y * 2

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y
        """
    new = assert_same_behaviour(source, "Tried", torch.ones(3, dtype=torch.float64))
    assert ("y = None\n" in new) is starts_as_none


_REFUSED_AND_FIXED = {
    # forward's body as refused, the message's fix, forward's body with the fix made
    "dict_item": (
        'ctx.__dict__["k"] = 3.0\n        return x * 2',
        "set the attribute itself (ctx.name = value)",
        "ctx.k = 3.0\n        return x * 2",
    ),
    "getattr": (
        'ctx.k = 3.0\n        y = x * getattr(ctx, "k", 2.0)\n        return y',
        "keep the value in a name of forward's own",
        "k = 3.0\n        ctx.k = k\n        y = x * k\n        return y",
    ),
    "setattr": (
        'for i in range(2):\n            setattr(ctx, f"o{i}", x * i)\n        return x * 2',
        "collect the values in a list or dict and set one ctx attribute to it",
        "values = [x * i for i in range(2)]\n        ctx.values = values\n        return x * 2",
    ),
    "early_return": (
        "ctx.k = 2.0\n        if x.sum() > 100:\n            return x\n        return x * 2",
        "assign the result to a name and return it once, at the end",
        "ctx.k = 2.0\n        y = x * 2\n        if x.sum() > 100:\n            y = x\n"
        "        return y",
    ),
}


@pytest.mark.parametrize("case", list(_REFUSED_AND_FIXED))
def test_a_refusal_names_its_cause_and_a_fix_that_works(case):
    refused, fix, fixed = _REFUSED_AND_FIXED[case]

    def module(body: str) -> str:
        return (
            "import torch\n\n\nclass Case(torch.autograd.Function):\n"
            "    @staticmethod\n"
            f"    def forward(ctx, x):\n        {body}\n\n"
            "    @staticmethod\n    def backward(ctx, g):\n        return g * 2\n"
        )

    result = migrate_source(module(refused), "case.py")
    assert result.migrated == [] and fix in result.refusals[0].reason
    assert_same_behaviour(module(fixed), "Case", torch.arange(3.0))


def test_a_literal_read_back_is_written_in_place_and_set_again_in_setup_context():
    # a constant set on ctx and read back in forward needs no intermediate (it became one)
    source = """
        import torch

        class Eps(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.eps = 1e-06
                ctx.k = -2
                ctx.save_for_backward(x)
                return x * ctx.k.real + ctx.eps

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad * ctx.k + ctx.eps * x
        """
    new = assert_same_behaviour(source, "Eps", torch.randn(3, dtype=torch.float64))
    assert "@compatfn.function\n" in new
    assert "return x * (-2).real + 1e-06\n" in new
    assert "ctx.eps = 1e-06\n        ctx.k = -2\n" in new
