"""The differences the differential suite found, each as the spec hypothesis shrank it to.

A difference that is a core bug not fixed yet is a strict xfail naming it: it turns into a
failure the moment the core is fixed, and the xfail (and its entry in
``differential_traced.known_core_bug``) goes.
"""

from __future__ import annotations

import pytest
import torch

from differential_support import in_context
from differential_traced import (
    EXPORT,
    HAS_COMPILE,
    check_like_control,
    compiled,
    exported,
)
from function_specs import Param, Spec, build
from spec_arguments import PATTERNS, Arguments, calls, defaults


def _x(grad: bool = True) -> Arguments:
    return Arguments((torch.tensor(PATTERNS[0]),), (grad,), {}, ())


@pytest.mark.skipif(not HAS_COMPILE, reason=f"torch {torch.__version__} has no torch.compile")
@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_in_place_with_bool_default_left_out():
    """``forward(x, p0_bool=True)`` in place (``mark_dirty``) called ``apply(x)``, compiled: on
    torch 2.13+ dynamo built setup_context's inputs without the default (pytorch#130051)."""
    made = build(Spec(params=(Param("p0_bool", "bool", "True"),), inplace=True, materialize=False))
    what = "torch.compile(backend='aot_eager', fullgraph=True)"
    check_like_control(made, "left-out", _x(), compiled("aot_eager"), what)


def test_warning_in_forward_points_where_hand_written_does():
    """``forward(x)`` that warns with ``stacklevel=2``, called positionally with grad."""
    made = build(Spec(warn=True))
    args = _x(grad=False)
    call = calls(made.spec, args, defaults(made.hand_written))["positional"]
    expected = in_context(made.hand_written, call, args, "grad")
    got = in_context(made.decorated, call, args, "grad")
    assert len(expected.warnings) == 1
    assert got.warnings == expected.warnings


@pytest.mark.skipif(EXPORT is None, reason=f"torch {torch.__version__} has no torch.export")
@pytest.mark.usefixtures("fresh_dynamo")
def test_strict_export_of_empty_varargs():
    """``forward(x, *rest)`` called ``apply(x)``, in a module exported strictly: failed on the
    native path of torch 2.13-2.14 (core's _DYNAMO_MISHANDLES_VARARGS)."""
    made = build(Spec(rest=True))
    check_like_control(made, "positional", _x(grad=False), exported(True), "torch.export(strict)")


@pytest.mark.skipif(not HAS_COMPILE, reason=f"torch {torch.__version__} has no torch.compile")
@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compiled_without_grad_on_the_legacy_form(backend):
    """``forward(x)`` called ``apply(x)`` with no input requiring grad, compiled: on torch 2.2,
    where every class takes the legacy form, dynamo failed on the adapter's sentinel defaults
    ("type object 'FunctionMeta' has no attribute 'forward'"; core's
    _DYNAMO_GUARDS_DEFAULTS_WRONGLY), while the hand-written Function compiles."""
    made = build(Spec())
    what = f"torch.compile(backend={backend!r}, fullgraph=True)"
    check_like_control(made, "positional", _x(grad=False), compiled(backend), what)
