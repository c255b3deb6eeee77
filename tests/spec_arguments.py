"""Calls and drawn values for the specs of :mod:`function_specs`: the call styles a spec allows
(:func:`calls`), the hypothesis strategies for specs and their arguments.

Example::

    args = Arguments((torch.ones(4),), (True,), {}, ())
    calls(Spec(), args, {})  # {"positional": ((Ref(0),), {}), "reordered": ((), {"x": Ref(0)})}
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, NamedTuple, Tuple

import torch
from hypothesis import strategies as st

from function_specs import COEF, DEFAULTS, TENSOR_KINDS, Param, Spec

# --------------------------------------------------------------------------- calls


class Ref(NamedTuple):
    """Placeholder for the tensor argument ``index`` of :attr:`Arguments.tensors`."""

    index: int


class Arguments(NamedTuple):
    """One call's values: ``tensors`` (templates; ``grads[i]``: whether it requires grad), the
    value of every parameter that is given (tensors as :class:`Ref`), and the ``*rest`` refs."""

    tensors: Tuple[torch.Tensor, ...]
    grads: Tuple[bool, ...]
    given: Dict[str, Any]
    rest: Tuple[Ref, ...]


Call = Tuple[Tuple[Any, ...], Dict[str, Any]]


def calls(spec: Spec, arguments: Arguments, defaults: Dict[str, Any]) -> Dict[str, Call]:
    """Every call style ``arguments`` allows, by name, each as (args, kwargs) with :class:`Ref`s.

    ``positional`` gives every parameter (defaults spelled out); ``left-out`` leaves out the
    trailing defaults not given; ``keywords`` names every given parameter after x (``skip-default``
    when that skips a default); ``reordered`` names x too, in reverse order.
    """
    x, given = Ref(0), arguments.given
    full = [given[p.name] if p.name in given else defaults[p.name] for p in spec.params]
    styles: Dict[str, Call] = {"positional": ((x, *full, *arguments.rest), {})}
    if arguments.rest:
        return styles
    names = [p.name for p in spec.params]
    prefix = 0
    while prefix < len(names) and names[prefix] in given:
        prefix += 1
    if prefix < len(names) and all(n not in given for n in names[prefix:]):
        styles["left-out"] = ((x, *full[:prefix]), {})
    keywords = {n: given[n] for n in names if n in given}
    if keywords:
        skips = any(n not in given for n in names[: names.index(list(keywords)[-1])])
        styles["skip-default" if skips else "keywords"] = ((x,), keywords)
    styles["reordered"] = ((), dict(reversed(list({"x": x, **keywords}.items()))))
    return styles


def canonical(spec: Spec, arguments: Arguments, defaults: Dict[str, Any]) -> Call:
    """The positional call every torch's plain ``apply`` takes: every parameter given."""
    return calls(spec, arguments, defaults)["positional"]


def substitute(call: Call, tensors: List[Any]) -> Call:
    def put(v: Any) -> Any:
        return tensors[v.index] if isinstance(v, Ref) else v

    args, kwargs = call
    return tuple(put(a) for a in args), {k: put(v) for k, v in kwargs.items()}


# --------------------------------------------------------------------------- strategies

VALUES = {
    "int": st.integers(-3, 3),
    "float": st.sampled_from([0.5, -1.25, 2.0, 0.0]),
    "bool": st.booleans(),
    "none": st.sampled_from([None, 2, -0.5]),
    "str": st.sampled_from(["add", "mul"]),
    "tuple": st.lists(st.integers(-2, 3), max_size=3).map(tuple),
}
PATTERNS = (
    (-1.5, -0.5, 0.75, 2.0),
    (0.25, 1.5, -2.0, 3.0),
    (1.0, -1.0, 0.5, -0.125),
)


@st.composite
def params(draw: Any) -> Tuple[Param, ...]:
    """Up to four parameters after x: tensors required, the others required or defaulted
    (``tensor_default`` always defaulted), the defaulted ones last."""
    kinds = draw(st.lists(st.sampled_from([*sorted(COEF), *TENSOR_KINDS]), max_size=4))
    required: List[str] = []
    optional: List[str] = []
    for kind in kinds:
        needed = kind == "tensor" or (kind in COEF and draw(st.booleans()))
        (required if needed else optional).append(kind)
    out = [Param(f"p{i}_{k}", k) for i, k in enumerate(required)]
    out += [Param(f"p{len(out) + i}_{k}", k, DEFAULTS[k]) for i, k in enumerate(optional)]
    return tuple(out)


def _plain_non_tensor_outputs() -> bool:
    """Whether a plain Function may return a Python int (torch 1.8: ``TypeError``)."""

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> Any:  # type: ignore[override]
            return x * 1, 0

        @staticmethod
        def backward(ctx: Any, grad: Any, _: Any) -> Any:  # type: ignore[override]
            return grad

    try:
        Probe.apply(torch.zeros(1))
    except TypeError:
        return False
    return True


#: The oracle cannot return non-tensors on torch 1.8 (compatfn can: tested in
#: test_core_semantics.py); int outputs are drawn where a plain Function returns them.
PLAIN_NON_TENSOR_OUTPUTS = _plain_non_tensor_outputs()


@st.composite
def specs(draw: Any, func: bool = False, traced: bool = False) -> Spec:
    """A :class:`Spec`; ``func``: only what torch.func can run (no in-place, no once);
    ``traced``: no warning (dynamo breaks the graph on ``warnings.warn``, hand-written too)."""
    inplace = not func and draw(st.booleans())
    return Spec(
        params=draw(params()),
        rest=draw(st.booleans()),
        inplace=inplace,
        out2=draw(st.booleans()),
        mask=draw(st.booleans()),
        count=PLAIN_NON_TENSOR_OUTPUTS and draw(st.booleans()),
        intermediates=not inplace and draw(st.booleans()),
        attributes=draw(st.booleans()),
        materialize=draw(st.booleans()),
        needs_input_grad=draw(st.booleans()),
        once=not func and draw(st.booleans()),
        warn=not traced and draw(st.booleans()),
        raises=draw(st.booleans()),
    )


@st.composite
def arguments(draw: Any, spec: Spec, dtype: torch.dtype = torch.float32) -> Arguments:
    """Values for ``spec``: every required parameter and some of the defaulted ones."""
    tensors = [torch.tensor(draw(st.sampled_from(PATTERNS)), dtype=dtype)]
    grads = [draw(st.booleans())]
    given: Dict[str, Any] = {}
    for p in spec.params:
        if p.default is not None and not draw(st.booleans()):
            continue
        if p.kind in TENSOR_KINDS:
            given[p.name] = Ref(len(tensors))
            tensors.append(torch.tensor(draw(st.sampled_from(PATTERNS)), dtype=dtype))
            grads.append(draw(st.booleans()))
        else:
            given[p.name] = draw(VALUES[p.kind])
    rest = []
    for _ in range(draw(st.integers(0, 2)) if spec.rest else 0):
        rest.append(Ref(len(tensors)))
        tensors.append(torch.tensor(draw(st.sampled_from(PATTERNS)), dtype=dtype))
        grads.append(draw(st.booleans()))
    return Arguments(tuple(tensors), tuple(grads), given, tuple(rest))


def defaults(cls: Any) -> Dict[str, Any]:
    """Forward's defaults by parameter name (read from the hand-written class)."""
    sig = inspect.signature(cls.forward)
    return {
        n: p.default for n, p in sig.parameters.items() if p.default is not inspect.Parameter.empty
    }
