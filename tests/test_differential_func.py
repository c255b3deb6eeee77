"""Differential suite, torch.func: a generated Function, decorated, gives what the same class
undecorated gives under ``torch.func.grad``, ``vmap`` and ``jacrev`` (torch >= 2.0).

torch.func refuses a hand-written legacy Function, so the oracle here is the undecorated
setup_context class of the same math, called positionally with every parameter given (what its
plain ``apply`` takes on every torch 2.x). The decorated class is called in every call style. On
the legacy path (``COMPATFN_LEGACY=1``) compatfn refuses torch.func, as torch does for a legacy
Function: the call must raise.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Dict

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import compatfn
from differential_support import assert_same, budget, describe, first, observe, weights
from function_specs import build
from spec_arguments import Arguments, Call, arguments, calls, canonical, defaults, specs, substitute

HAS_FUNC = importlib.util.find_spec("torch.func") is not None and hasattr(
    torch.autograd.Function, "setup_context"
)
pytestmark = pytest.mark.skipif(
    not HAS_FUNC, reason=f"torch {torch.__version__} has no torch.func (torch >= 2.0)"
)
if HAS_FUNC and importlib.util.find_spec("torch._dynamo") is not None:
    import torch._dynamo

Transform = Callable[[Callable[[torch.Tensor], Any], torch.Tensor], Any]


def _transforms() -> Dict[str, Transform]:
    if not HAS_FUNC:
        return {}
    func = torch.func
    return {
        "grad": lambda f, x: func.grad(lambda t: (first(f(t)) * weights(first(f(t)))).sum())(x),
        "vmap": lambda f, x: func.vmap(lambda t: first(f(t)))(torch.stack([x, x.flip(0)])),
        "jacrev": lambda f, x: func.jacrev(lambda t: first(f(t)))(x),
    }


TRANSFORMS = _transforms()


def under(transform: str, cls: Any, call: Call, args: Arguments) -> Any:
    ts = [t.detach().clone() for t in args.tensors]

    def f(x: torch.Tensor) -> Any:
        a, kw = substitute(call, [x, *ts[1:]])
        return cls.apply(*a, **kw)

    return observe(lambda: (describe(TRANSFORMS[transform](f, ts[0])),))


@budget(16)
@given(st.data())
def test_torch_func_like_undecorated(data):
    made = build(data.draw(specs(func=True), label="spec"))
    args = data.draw(arguments(made.spec), label="arguments")
    positional = canonical(made.spec, args, defaults(made.hand_written))
    legacy = compatfn.mode(made.decorated) == "legacy"
    for transform in TRANSFORMS:
        expected = under(transform, made.undecorated, positional, args)
        for style, call in calls(made.spec, args, defaults(made.hand_written)).items():
            got = under(transform, made.decorated, call, args)
            what = f"torch.func.{transform}, {style} call\n{made.source}"
            if legacy:
                assert got.error is not None, f"{what}: the legacy path ran under torch.func"
            else:
                assert_same(got, expected, what, check_warnings=False)
