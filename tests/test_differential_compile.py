"""Differential suite, traced: a generated Function, decorated, compiles, exports and traces
wherever its hand-written legacy twin does, with the same values and gradients.

``torch.compile(fullgraph=True)`` with each backend (eager, aot_eager, inductor: one graph, no
break), ``torch.compile`` without ``fullgraph`` (graphs counted with dynamo's
``CompileCounterWithBackend``: as many as the control makes, or one), ``torch.export`` strict
and non-strict, ``torch.jit.trace``: those this torch has. The hand-written class called the same
way is the control: where it compiles (exports, traces), the decorated class must too, bit for
bit equal; where it fails, the decorated class fails with the same exception type and message
class (``differential_support.message_class``) or works, equal to the control called
positionally (every parameter given: plain ``apply`` takes no keywords in compiled code before
torch 2.13).
"""

from __future__ import annotations

from typing import Any, Tuple

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from differential_support import budget
from differential_traced import (
    EXPORT,
    HAS_COMPILE,
    NON_STRICT,
    check_like_control,
    compiled,
    dynamo_binds_the_keywords,
    exported,
    traced,
)
from function_specs import Made, build
from spec_arguments import Arguments, arguments, calls, defaults, specs

fresh = pytest.mark.usefixtures("fresh_dynamo")


@st.composite
def cases(draw: Any, warn: bool = False) -> Tuple[Made, str, Arguments]:
    """A spec (``warn``: also one that warns, which breaks the graph), arguments, a call style."""
    made = build(draw(specs(traced=not warn), label="spec"))
    args = draw(arguments(made.spec), label="arguments")
    style = draw(st.sampled_from(sorted(calls(made.spec, args, defaults(made.hand_written)))))
    return made, style, args


BACKENDS = [
    pytest.param("eager", 8),
    pytest.param("aot_eager", 8),
    pytest.param("inductor", 2),
]


@pytest.mark.skipif(not HAS_COMPILE, reason=f"torch {torch.__version__} has no torch.compile")
@pytest.mark.parametrize("backend, examples", BACKENDS)
@fresh
def test_compiles_like_hand_written(backend, examples):
    @budget(examples)
    @given(cases())
    def check(case):
        made, style, args = case
        assume(not dynamo_binds_the_keywords(made, style, args))
        check_like_control(
            made,
            style,
            args,
            compiled(backend),
            f"torch.compile(backend={backend!r}, fullgraph=True)",
        )

    check()


@pytest.mark.skipif(not HAS_COMPILE, reason=f"torch {torch.__version__} has no torch.compile")
@fresh
def test_graph_breaks_like_hand_written():
    """Without ``fullgraph``: the decorated class makes as many graphs as the hand-written one
    (one where it has one; where it breaks the graph, as many pieces)."""

    @budget(8)
    @given(cases(warn=True))
    def check(case):
        made, style, args = case
        # an in-place forward that warns: test_graphs_of_an_in_place_forward_that_breaks_the_graph
        assume(not (made.spec.inplace and made.spec.warn))
        assume(not dynamo_binds_the_keywords(made, style, args))
        what = "torch.compile(backend='eager'), graphs counted"
        # Where dynamo breaks the graph, the decorated class's call may be compiled as a frame of
        # its own where the hand-written one's runs eagerly (torch 2.8: an in-place output is a
        # view there): test_graph_break_before_an_in_place_call.
        run = compiled("eager", fullgraph=False)
        check_like_control(made, style, args, run, what, views=False)

    check()


MODES = [
    pytest.param(True, id="strict"),
    pytest.param(
        False,
        id="non-strict",
        marks=pytest.mark.skipif(
            not NON_STRICT,
            reason=f"torch {torch.__version__} has no non-strict export (torch >= 2.2)",
        ),
    ),
]


@pytest.mark.skipif(
    EXPORT is None, reason=f"torch {torch.__version__} has no torch.export (torch >= 2.1)"
)
@pytest.mark.parametrize("strict", MODES)
@fresh
def test_exports_like_hand_written(strict):
    @budget(4)
    @given(cases())
    def check(case):
        made, style, args = case
        assume(not (strict and dynamo_binds_the_keywords(made, style, args)))
        check_like_control(made, style, args, exported(strict), f"torch.export(strict={strict})")

    check()


@budget(12)
@given(cases())
def test_jit_trace_like_hand_written(case):
    made, style, args = case
    check_like_control(made, style, args, traced, "torch.jit.trace")
