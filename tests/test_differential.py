"""Differential suite, eager: every generated Function behaves, decorated, as its hand-written
legacy twin (the oracle, :mod:`function_specs`) in every call style and eager context.

Contexts: grad, no-grad, inference_mode, CPU autocast, checkpoint (reentrant and not),
saved_tensors_hooks, anomaly mode, double backward -- those this torch has. Each decorated class
is checked as decorated and, where it has a native path, through ``compatfn.as_legacy``. The
hand-written class is called the same way; where it refuses keywords (torch's plain ``apply``
before 2.13: ``TypeError``), the oracle is its positional call with every parameter given.
Outputs, gradients, errors and the place warnings point to must agree bit for bit.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from hypothesis import given
from hypothesis import strategies as st

import compatfn
from differential_support import CONTEXTS, Seen, assert_same, budget, in_context
from function_specs import Made, build
from spec_arguments import Arguments, arguments, calls, canonical, defaults, specs


def classes_under_test(made: Made) -> List[Tuple[str, Any]]:
    """The decorated class, and its legacy variant where it has another path."""
    found = [("decorated", made.decorated)]
    if compatfn.mode(made.decorated) != "legacy":
        found.append(("as_legacy", compatfn.as_legacy(made.decorated)))
    return found


def oracle(made: Made, style: str, arguments: Arguments, context: str) -> Seen:
    """The hand-written class called in ``style``; positionally where it refuses keywords."""
    call = calls(made.spec, arguments, defaults(made.hand_written))[style]
    seen = in_context(made.hand_written, call, arguments, context)
    if seen.error == "TypeError" and call[1]:
        seen = in_context(
            made.hand_written,
            canonical(made.spec, arguments, defaults(made.hand_written)),
            arguments,
            context,
        )
    return seen


def check_spec(made: Made, args: Arguments, contexts: Any = None) -> None:
    """Every call style in every context agrees with the oracle."""
    for context in contexts or CONTEXTS:
        for style, call in calls(made.spec, args, defaults(made.hand_written)).items():
            expected = oracle(made, style, args, context)
            for label, cls in classes_under_test(made):
                got = in_context(cls, call, args, context)
                assert_same(got, expected, f"{label}, {style} call, {context}\n{made.source}")


@budget(60)
@given(st.data())
def test_eager_contexts_agree_with_hand_written(data):
    made = build(data.draw(specs(), label="spec"))
    check_spec(made, data.draw(arguments(made.spec), label="arguments"))
