"""``compatfn.custom_op`` against torch's own ``torch.library.custom_op``, on generated cases
(``library_oracle``): outputs, gradients, errors, kernel and setup_context calls, what reaches the
kernel, random state, version counters and node names must be the same.

On torch >= 2.4 every tier this torch runs is compared with torch's own op side by side; older
torch compares with the outcomes torch's own op gave a fixed set of cases on the newest torch
(``tests/data/custom_op_oracle.json``; ``python tests/library_oracle.py --record`` rewrites it).
The CI budget is small; ``COMPATFN_HYPOTHESIS_PROFILE=nightly`` draws many more cases.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Dict, List, Tuple

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import library_oracle as oracle
from compatfn.library import TIER, _custom_op
from compatfn.library._dispatch_state import BelowAutograd
from compatfn.library._facts import (
    NEEDS_INPUT_GRAD_WRITABLE,
    increment_version,
)
from compatfn.library._schema_facts import int_type
from library_oracle_transforms import TRANSFORMS
from library_support import TIERS

_NIGHTLY = os.environ.get("COMPATFN_HYPOTHESIS_PROFILE") == "nightly"
_EXAMPLES = 600 if _NIGHTLY else 40
_RUN = uuid.uuid4().hex[:6]
_count = iter(range(10**9))
HAS_TORCH_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
#: torch >= 2.2 keeps fake kernels in a registry (``torch.library.impl_abstract``).
HAS_FAKE_REGISTRY = hasattr(getattr(torch, "library", None), "impl_abstract")
#: torch 2.4-2.12's own op refusing ``register_kernel("meta", ...)`` (measured).
_META_KERNEL_REFUSED = "already a kernel registered from python overriding"


def _recorded_on() -> str:
    return str(json.loads(oracle.RECORDED.read_text())["torch"])


#: Tiers compared side by side with this torch's own op: the torch tier (what this torch gives),
#: and compatfn's older tiers on the torch the stored outcomes come from (they follow that
#: torch's behaviour where torch releases differ; elsewhere they run the stored set).
SIDE_BY_SIDE = [t for t in TIERS if t == "torch" or torch.__version__ == _recorded_on()]
#: Tiers compared with the stored outcomes.
RECORDED_TIERS = [t for t in TIERS if t not in SIDE_BY_SIDE]


def _outputs_convert_by_call_form() -> bool:
    """Whether torch's own op converts a kernel's list for a tuple of outputs in a keyword call
    but hands it on as it is in a positional one (measured: torch 2.15; 2.4-2.13 convert both).
    compatfn's op gives the positional call's result for both there."""
    if not HAS_TORCH_OP:
        return False
    source = (
        "def k(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:\n    return [x + 1, x + 2]\n"
    )
    namespace: Dict[str, Any] = {"torch": torch, "Tuple": Tuple}
    exec(compile(source, "<probe>", "exec", dont_inherit=True), namespace)
    op = torch.library.custom_op(f"cft{_RUN}_probe::k", namespace["k"], mutates_args=())
    x = torch.ones(1)
    return type(op(x)) is not type(op(x=x))


CONVERTS_BY_CALL_FORM = _outputs_convert_by_call_form()


_PROBE_LIBRARIES: List[Any] = []


def _dispatcher_scalars(values: Tuple[Any, ...]) -> List[Any]:
    """What this torch's dispatcher hands a Python kernel for each of ``values`` given for a
    ``Scalar`` (None where it refuses the value); torch 1.8-1.12 have no ``torch.library``:
    ``values`` as given."""
    if not hasattr(torch, "library") or not hasattr(torch.library, "Library"):
        return list(values)
    namespace = f"cft{_RUN}_scalar"
    library = torch.library.Library(namespace, "DEF")
    # Kept for the whole run: on torch 2.6-2.11 (measured on 2.6, 2.7, 2.9, 2.11; 2.13 and 2.14
    # not) the decomposition table that torch.compile's backends and torch.export read fails
    # ("not a mapping", from an AttributeError: no overload 'default') once an op read through
    # torch.ops is gone with its Library.
    _PROBE_LIBRARIES.append(library)
    library.define("probe(Tensor x, Scalar s) -> Tensor")
    seen: List[Any] = []
    library.impl("probe", lambda x, s: seen.append(s) or x.clone(), "CPU")
    for value in values:
        try:
            getattr(torch.ops, namespace).probe(torch.ones(1), value)
        except RuntimeError:
            seen.append(None)
    return seen


_BOOL_SEEN, _BIG_INT_SEEN = _dispatcher_scalars((True, 2**63))
#: This torch's dispatcher hands a kernel the int 1 for a bool given for a ``Scalar`` (measured:
#: torch 1.13; 2.0 and later hand the bool): the registered tier's calls through the operator
#: do too (docs/custom-ops.md).
DISPATCHER_BOOL_SCALAR_AS_INT = type(_BOOL_SEEN) is not bool
#: This torch's dispatcher refuses an int beyond int64 for a ``Scalar`` (measured: torch 1.13-2.4;
#: 2.13 takes it up to 2**64 - 1).
DISPATCHER_REFUSES_BIG_SCALAR = _BIG_INT_SEEN is None


def _by_keyword(case: Dict[str, Any]) -> bool:
    return any(a["how"] != "pos" for a in case["args"])


def _ours(tier: str) -> Any:
    def make(qualname: str, fn: Any, mutates_args: Any, schema: Any) -> Any:
        return _custom_op(qualname, fn, mutates_args, None, schema, tier)

    return make


def _theirs(qualname: str, fn: Any, mutates_args: Any, schema: Any) -> Any:
    return torch.library.custom_op(qualname, fn, mutates_args=mutates_args, schema=schema)


def compare(case: Dict[str, Any], tier: str) -> None:
    """``case`` gives the same outcome on compatfn's op (``tier``) and torch's own."""
    n = next(_count)
    expected = oracle.outcome(case, _theirs, f"cft{_RUN}_torch{n}::op")
    got = oracle.outcome(case, _ours(tier), f"cft{_RUN}_ours{n}::op")
    _assert_same(case, tier, got, expected)


def _real_tensors_under_fake(case: Dict[str, Any], generator: bool) -> bool:
    """Whether ``case`` hands a FakeTensorMode real tensors in a declared-mutated argument: a
    generator under ``fake_mode``, or a tensor list where a tracer fakes only a function's own
    tensor arguments (``library_oracle_transforms``: the list is a constant of the function)."""
    if case["context"] == "fake_mode":
        return generator
    if case["context"] not in ("export", "export_strict", "make_fx"):
        return False
    return any(
        p["name"] in case["mutates"] and p["type"].startswith("List") and a["how"] != "left_out"
        for p, a in zip(case["params"], case["args"])
    )


def tier_difference(case: Dict[str, Any], tier: str, expected: Any = None) -> Any:
    """Why ``tier`` cannot give torch's outcome for ``case`` on any torch, or None (``expected``:
    torch's outcome where known; a difference that needs torch's call to get as far as the
    kernel or setup_context is only one where torch's did)."""
    meta_kernel = case.get("meta_kernel", "none") != "none"
    if meta_kernel and tier != "torch" and _META_KERNEL_REFUSED in json.dumps(expected):
        return (
            f"torch {torch.__version__}'s own op refuses register_kernel('meta') (its fake kernel "
            "holds the Meta key); compatfn's older tiers take it, as torch 2.13's own op does"
        )
    if expected is not None and "define_error" in expected:  # nothing ran
        return None
    if (
        meta_kernel
        and tier == "registered"
        and not HAS_FAKE_REGISTRY
        and case["context"] in ("fake_mode", *TRANSFORMS)
    ):
        return (
            f"torch {torch.__version__} has no registry of fake kernels (torch >= 2.2): under a "
            "FakeTensorMode the operator's Meta kernel runs, the kernel registered for 'meta' "
            "first (torch's own op: the fake kernel alone)"
        )
    transform = _transform_difference(case, tier)
    if transform is not None:
        return transform
    if tier == "function" and case["context"] == "torch_function_mode":
        return "the function tier has no operator: a TorchFunctionMode sees the kernel's calls"
    if tier == "function" and case["context"] in ("fake_mode", "dispatch_mode"):
        return (
            "the function tier (torch 1.8-1.12, before FakeTensor and today's dispatch modes) "
            "has no operator: a dispatch mode sees the kernel's calls"
        )
    generator = any(a["value"] == "generator" for a in case["args"])
    if tier != "torch" and case["context"] == "symbolic_trace" and generator:
        return (
            "a generator for a tensor list while torch.fx traces: compatfn's tiers hand the "
            "operator the list it converted; torch's own op hands fx the generator, which fx "
            "cannot record (NotImplementedError)"
        )
    if tier == "registered" and case["mutates"] and _real_tensors_under_fake(case, generator):
        return (
            "a declared mutation of real tensors in a call a FakeTensorMode handles (the "
            "tensors of a generator are no FakeTensors and the mode refuses the call; a traced "
            "function's tensor list is a constant the tracer copies): torch's ADInplaceOrView "
            "kernel bumps the real tensors' versions first; the registered tier bumps them in "
            "its fake kernel, which sees FakeTensors or never runs (torch before 2.4 has no "
            "ADInplaceOrView guard in Python)"
        )
    # Contexts where the registered tier's call goes through the operator (a traced graph
    # replayed by fx or TorchScript calls it too).
    through_operator = {"torch_function_mode", "profiler", "forward_ad_level", "neg_views"}
    through_operator |= {"symbolic_trace", "jit_trace"}
    wrong_output = {"one_tuple", "return_none", "return_float"}
    number_given_bool = any(
        (p["type"] == "Number" and type(a["value"]) is bool)
        or (
            p["type"] == "List[Number]"
            and isinstance(a["value"], list)
            and bool in map(type, a["value"])
        )
        for p, a in zip(case["params"], case["args"])
        if a["how"] != "left_out"
    )
    number_given_big_int = any(
        p["type"] in ("Number", "List[Number]") and "int64_overflow" in str(a["value"])
        for p, a in zip(case["params"], case["args"])
        if a["how"] != "left_out"
    )
    if (
        DISPATCHER_REFUSES_BIG_SCALAR
        and tier == "registered"
        and case["context"] in through_operator
        and number_given_big_int
    ):
        return (
            f"torch {torch.__version__}'s dispatcher refuses an int beyond int64 for a Scalar "
            "(torch.types.Number): a call through the operator does too"
        )
    if (
        DISPATCHER_BOOL_SCALAR_AS_INT
        and tier == "registered"
        and case["context"] in through_operator
        and number_given_bool
        and _reached(expected, "kernel")
    ):
        return (
            f"torch {torch.__version__}'s dispatcher hands a Python kernel the int 1 for a bool "
            "given for a Scalar (torch.types.Number, or in a list of them): a call through the "
            "operator does too"
        )
    if (
        tier == "registered"
        and case["context"] in through_operator
        and case["kernel"] in wrong_output
        and case["autograd"]
        and case["grad"]
        and _reached(expected, "setup")
    ):
        return (
            "a kernel output the schema refuses, in a call through the operator that records a "
            "graph: the registered tier's redispatch converts it, and fails, before setup_context "
            "(torch's own op runs setup_context first; the same error follows)"
        )
    if (
        tier == "registered"
        and case["context"] == "neg_views"
        and case["mutates"]
        and case["kernel"] == "one_tuple"
        and case["outputs"] > 1
        and _reached(expected, "assert")
    ):
        return (
            "a 1-tuple for two outputs, for a mutated lazily negated view: the registered "
            "tier's conversion fails first (TypeError); torch's own op fails an internal assert "
            "of its fallback"
        )
    if (
        tier == "function"
        and case["context"] == "neg_views"
        and case["mutates"]
        and _reached(expected, "kernel")
    ):
        return (
            "a mutated lazily negated view: torch's fallback runs the kernel (then fails an "
            "internal assert, or refuses its output); the function tier refuses the view before "
            "the kernel runs"
        )
    return None


def _reached(expected: Any, stage: str) -> bool:
    """Whether torch's call (``expected``; None: not known yet) got as far as ``stage``: the
    kernel ran (``"kernel"``), setup_context ran and an error followed (``"setup"``: the output
    is refused), or it failed the internal assert of its fallback for a mutated negated view
    (``"assert"``); not where an earlier error (an argument the schema refuses) stopped it."""
    if expected is None:
        return True
    if stage == "kernel":
        return bool(expected.get("calls"))
    if stage == "setup":
        return bool(expected.get("setup")) and "error" in expected
    return "INTERNAL ASSERT" in str(expected.get("error"))


def _transform_difference(case: Dict[str, Any], tier: str) -> Any:
    """``tier_difference`` for the transform contexts (``library_oracle_transforms``)."""
    if case["context"] not in TRANSFORMS:
        return None
    if tier == "function":
        return (
            "the function tier (torch 1.8-1.12) has no operator: a tracer records the kernel's "
            "calls or the op object, and torch.compile, torch.export and torch.func come later"
        )
    converted = any(
        str(a["value"]).startswith("np.") or a["value"] == "bytes" for a in case["args"]
    )
    if tier == "registered" and case["context"] == "func_grad":
        return (
            "torch.func cannot differentiate a registered-tier op (torch < 2.4): it raises "
            "compatfn's error saying so (docs/custom-ops.md)"
        )
    if tier == "registered" and converted and case["context"] == "symbolic_trace":
        return (
            "a numpy scalar or bytes in a torch.fx graph: the registered tier converts them "
            "first; torch's own op records them as given, and the graph's code then fails "
            "(NameError: np; NotImplementedError for bytes)"
        )
    return None


#: torch 2.4-2.14's own op fails backward when it has a ``List[Tensor]`` parameter and an argument
#: equal to its default (given or left out): it drops that argument from the inputs and then
#: compares their structure with backward's gradients (measured 2.5, 2.13; 2.15 computes them).
_TORCH_STRUCTURE_BUG = "Expected the return from backward to be of the same structure as the inputs"


def _without_the_redispatch(events: List[str]) -> List[str]:
    """The profiler's events without the second event of the op that the registered tier's
    Autograd kernel adds where it records a graph: it calls the operator again below autograd
    (torch < 2.4 has no redispatch in Python); torch's own op records one. A known difference,
    documented in docs/custom-ops.md."""
    node = next((i for i, e in enumerate(events) if e.startswith("GeneratedBackwardFor_")), None)
    if node is None or "NS::op" not in events[node + 1 :]:
        return events
    again = events.index("NS::op", node + 1)
    return events[:again] + events[again + 1 :]


def _torch_failed_its_own_backward(expected: Dict[str, Any]) -> bool:
    failure = expected.get("backward")
    return isinstance(failure, dict) and failure.get("error", [None, ""])[1].startswith(
        _TORCH_STRUCTURE_BUG
    )


def _assert_same(case: Dict[str, Any], tier: str, got: Any, expected: Any) -> None:
    """``got == expected``; where ``tier_difference`` explains why not, they must differ (a
    strict expected failure). Where torch's own op fails its own backward with the bug above (a
    backward returning a gradient per argument), compatfn computes the gradients on every tier
    (as torch 2.15 does; the torch tier: See NOTE: [elided default gradients]): backward is not
    compared."""
    if case["autograd"] is True and _torch_failed_its_own_backward(expected):
        got, expected = {**got, "backward": None}, {**expected, "backward": None}
    if tier == "registered" and "events" in got:
        got = {**got, "events": _without_the_redispatch(got["events"])}
    reason = tier_difference(case, tier, expected)
    if reason is None:
        assert got == expected, _explain(case, got, expected)
        return
    assert got != expected, f"no longer different ({reason}): update tier_difference"
    pytest.xfail(reason)


def _explain(case: Dict[str, Any], got: Dict[str, Any], expected: Dict[str, Any]) -> str:
    keys = sorted(set(got) | set(expected))
    lines = [f"case: {json.dumps(case)}"]
    lines += [
        f"{k}: ours {got.get(k)!r} / torch {expected.get(k)!r}"
        for k in keys
        if got.get(k) != expected.get(k)
    ]
    return "\n".join(lines)


@pytest.mark.skipif(not HAS_TORCH_OP, reason=f"torch {torch.__version__} has no custom_op")
@pytest.mark.parametrize("tier", SIDE_BY_SIDE)
@settings(
    max_examples=_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    case=oracle.cases(oracle.CONTEXTS + oracle.SIDE_BY_SIDE_CONTEXTS),
    via=st.sampled_from(["op", "copy", "name"]),
    cpu_kernel=st.booleans(),
)
def test_generated_cases_match_torch_custom_op(
    tier: str, case: Dict[str, Any], via: str, cpu_kernel: bool
) -> None:
    # A difference torch has with itself (See _outputs_convert_by_call_form).
    assume(not (CONVERTS_BY_CALL_FORM and case["outputs"] >= 2 and _by_keyword(case)))
    assume(tier_difference(case, tier) is None)  # the explicit cases hold those
    # Rules registered by name are torch.library's (torch >= 2.4), for the torch tier's ops; a
    # registration through a copy is one of the torch tier's differences from compatfn's own
    # tiers (docs/custom-ops.md).
    via = via if tier == "torch" else "op"
    compare({**case, "via": via, "cpu_kernel": cpu_kernel}, tier)


@pytest.mark.skipif(not HAS_TORCH_OP, reason=f"torch {torch.__version__} has no custom_op")
@pytest.mark.parametrize("tier", SIDE_BY_SIDE)
@pytest.mark.parametrize("name", sorted(oracle.REGRESSIONS))
def test_regression_matches_torch_custom_op(name: str, tier: str) -> None:
    """The shrunk failures, side by side with torch's own op (older torch: the recorded set
    holds them too)."""
    compare(oracle.REGRESSIONS[name], tier)


@pytest.mark.skipif(not HAS_TORCH_OP, reason=f"torch {torch.__version__} has no custom_op")
@pytest.mark.parametrize("tier", SIDE_BY_SIDE)
@pytest.mark.parametrize("name", sorted(oracle.TRANSFORM_REGRESSIONS))
def test_transform_case_matches_torch_custom_op(name: str, tier: str) -> None:
    """The explicit cases of the transform contexts, side by side with torch's own op."""
    compare(oracle.TRANSFORM_REGRESSIONS[name], tier)


def _recorded() -> Any:
    return json.loads(oracle.RECORDED.read_text())["rows"]


#: Kernels whose outcome, with no input requiring grad (or grad mode off), depends on running
#: below autograd.
_BELOW_AUTOGRAD = {"autograd_grad", "capture_param_inplace", "return_nonleaf", "return_param_view"}


#: torch 1.13 and 2.0: FakeTensorMode calls an operator's Meta kernel with meta copies of its
#: FakeTensors (measured; 2.1 and later pass the FakeTensors).
_FAKE_MODE_ON_META_COPIES = torch.__version__.startswith(("1.13.", "2.0."))


def _functions_return_only_tensors() -> bool:
    """Whether an autograd Function's forward may return only tensors (torch 1.8: "expected
    Tensor or tuple of Tensor"; 1.9 and later hand a None on)."""

    class ReturnsNone(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> Any:
            return None

    try:
        ReturnsNone.apply(torch.ones(1, requires_grad=True))
    except TypeError:
        return True
    return False


_FUNCTIONS_RETURN_ONLY_TENSORS = _functions_return_only_tensors()
#: Contexts where an input that requires grad sends the call through the autograd Function.
_GRAD_CONTEXTS = ("plain", "anomaly", "saved_tensor_hooks", "checkpoint", "thread")


#: Contexts where nothing the kernel does is recorded, with or without the below-autograd guard.
_NOT_RECORDING = ("no_grad", "inference_mode", "enable_grad_in_inference")


def _takes_short_path(case: Dict[str, Any]) -> bool:
    """Whether this torch's tier gives the op of ``case`` the short path (its legacy autograd
    Function; an op the general path calls goes through ``compatfn.function``)."""
    qualname = f"cf_short_{uuid.uuid4().hex[:8]}::op"
    op, _ = oracle.build(case, _ours(TIER), qualname)
    return bool(op._short_path_ok())


def known_difference(row: Dict[str, Any]) -> Any:
    """Why compatfn's tiers on this torch differ from torch's own op on a recorded case, where
    they cannot help it (a strict xfail: a fix makes the test fail until this is updated)."""
    case = row["case"]
    below = case["kernel"] in _BELOW_AUTOGRAD or (
        case["kernel"] == "capture_param" and case["context"] == "saved_tensor_hooks"
    )
    # grad mode on, no input requiring grad: torch runs the kernel below autograd (under
    # no_grad or inference mode both run it without recording, alike)
    no_autograd = not case["grad"] and case["context"] not in _NOT_RECORDING
    ran = row["torch"].get("calls", 0) > 0  # not when the arguments are refused first
    if _FAKE_MODE_ON_META_COPIES and case["context"] == "fake_mode" and case["mutates"]:
        return (
            f"torch {torch.__version__}'s FakeTensorMode runs the fake kernel on meta copies of "
            "the FakeTensors: the version bump of a declared mutation does not reach them"
        )
    zero_mutated = any(name not in case["grad"] for name in case["mutates"])
    if increment_version is None and case["context"] == "zero_tensors" and zero_mutated:
        return (
            f"torch {torch.__version__} cannot bump a ZeroTensor's version counter from Python "
            "(increment_version comes with torch 2.1); the operator's ZeroTensor fallback words "
            "its error as the running torch does"
        )
    if (
        _FUNCTIONS_RETURN_ONLY_TENSORS
        and case["kernel"] == "return_none"
        and case["outputs"] == 1
        and case["grad"]
        and not case["mutates"]
        and case["context"] in _GRAD_CONTEXTS
        and ran
        and "error" not in row["torch"]
        and _takes_short_path(case)
    ):
        return (
            f"torch {torch.__version__}'s autograd Functions return only tensors: a kernel's None "
            "for a Tensor output raises its TypeError where the call records a graph (torch's own "
            "op hands the None on)"
        )
    if BelowAutograd is None and below and no_autograd and ran:
        return (
            f"torch {torch.__version__} has no below-autograd guard in Python: the kernel's own "
            "operations on captured tensors run with autograd on"
        )
    return None


def _recorded_params() -> Any:
    params = []
    for i, row in enumerate(_recorded() if RECORDED_TIERS else []):
        reason = known_difference(row)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(i, marks=marks, id=row["name"].replace(" ", "_")))
    return params


@pytest.mark.parametrize("tier", RECORDED_TIERS)
@pytest.mark.parametrize("index", _recorded_params())
def test_recorded_case_matches_torch_custom_op(tier: str, index: int) -> None:
    """compatfn's older tiers against what torch's own op gave the same case on the torch the
    stored outcomes come from."""
    row = _recorded()[index]
    missing = oracle.context_missing(row["case"]["context"])
    if missing:
        pytest.skip(missing)
    got = oracle.outcome(row["case"], _ours(tier), f"cft{_RUN}_ours{next(_count)}::op")
    expected = dict(row["torch"])
    if "needs" in expected:  # not where the definition failed
        expected["needs"] = needs_on_this_torch(row["case"], expected["needs"])
    if "define_error" in expected and int_type() == "int":
        # torch < 2.0 has no SymInt: the schema an error shows has int where 2.0+ infers SymInt
        kind, message = expected["define_error"]
        expected["define_error"] = [kind, message.replace("SymInt", "int")]
    _assert_same(row["case"], tier, got, expected)


def needs_on_this_torch(case: Dict[str, Any], needs: List[Any]) -> List[Any]:
    """torch's ``ctx.needs_input_grad`` (in setup_context, then backward) as compatfn's older
    tiers give it on a torch where Python cannot assign it (measured: 1.8-2.3; docs/custom-ops.md):
    an op with a keyword-only or tensor-list parameter (or a tensor-list return) sees in
    backward what setup_context saw (the metadata's entries, lists flat); any other op lacks the
    metadata's entry in setup_context."""
    if NEEDS_INPUT_GRAD_WRITABLE:
        return needs
    lists = ("List[Tensor]", "List[Optional[Tensor]]")
    metadata = any(p.get("kw_only") or p["type"] in lists for p in case["params"])
    metadata = metadata or "Tensor[]" in case.get("returns", ())
    result, seen = [], None
    for where, flags in needs:
        if where == "setup":
            seen = flags
            result.append([where, flags if metadata else flags[:-1]])
        else:
            result.append([where, seen if metadata else flags])
    return result


def _call_outcome(op: Any, namespace: str, call: Any) -> Tuple[str, Any]:
    """What ``call(op, x)`` gives: its output as a list, or the exception and its message's first
    line (``namespace`` normalised)."""
    try:
        return "ok", call(op, torch.ones(2)).tolist()
    except Exception as e:  # the outcome compared is the exception
        return type(e).__name__, str(e).replace(namespace, "NS").split("\n")[0]


#: Calls that do not fit ``k(x: Tensor, y: float = 1.0, z: float = 2.0)``: a parameter given by
#: position and by keyword (with and without a default), too many, unknown, missing.
_WRONG_CALLS = {
    "twice_required": lambda op, x: op(x, x=x),
    "twice_defaulted": lambda op, x: op(x, 2.0, y=3.0),
    "twice_and_unknown": lambda op, x: op(x, w=1.0, x=x),
    "twice_too_many": lambda op, x: op(x, 2.0, 3.0, y=1.0),
    "twice_after_keywords": lambda op, x: op(x, z=1.0, x=x),
    "keywords_only": lambda op, x: op(z=1.0, y=2.0, x=x),
    "missing": lambda op, x: op(y=2.0),
}


@pytest.mark.skipif(not HAS_TORCH_OP, reason=f"torch {torch.__version__} has no custom_op")
@pytest.mark.parametrize("tier", SIDE_BY_SIDE)
@pytest.mark.parametrize("call", sorted(_WRONG_CALLS))
def test_a_call_that_does_not_fit_gets_torch_own_outcome(tier: str, call: str) -> None:
    """A parameter given twice: the dispatcher's error, not Python's TypeError (before)."""

    def k(x: torch.Tensor, y: float = 1.0, z: float = 2.0) -> torch.Tensor:
        return x * y + z

    ours_ns, theirs_ns = f"cftw{_RUN}o{next(_count)}", f"cftw{_RUN}t{next(_count)}"
    schema = "(Tensor x, float y=1., float z=2.) -> Tensor"  # torch 2.4 reads no string annotation
    ours = _ours(tier)(f"{ours_ns}::k", k, (), schema)
    theirs = _theirs(f"{theirs_ns}::k", k, (), schema)
    expected = _call_outcome(theirs, theirs_ns, _WRONG_CALLS[call])
    got = _call_outcome(ours, ours_ns, _WRONG_CALLS[call])
    if tier == "function" and "INTERNAL ASSERT FAILED" in expected[1]:
        # torch's schema check fails its own assertion for a defaulted parameter given twice;
        # the function tier, which has no operator, names the mistake (documented).
        expected = (
            "RuntimeError",
            "Argument 'y' specified both as positional and keyword argument.",
        )
        assert got[0] == expected[0] and got[1].startswith(expected[1])
        return
    assert got == expected


#: Ops of 1-3 parameters (a tensor, a defaulted float and int, a required tensor) and their
#: schemas, for the generated call styles below.
_CALL_STYLE_OPS = {
    "k1": ("x: torch.Tensor", "(Tensor x) -> Tensor"),
    "k2": ("x: torch.Tensor, w: torch.Tensor", "(Tensor x, Tensor w) -> Tensor"),
    "k3": (
        "x: torch.Tensor, a: float = 1.0, n: int = 2",
        "(Tensor x, float a=1., int n=2) -> Tensor",
    ),
}
#: ``by_position_0``: the name of the generated call's first parameter (positional-only).
_CALL_VALUES = {
    "x": torch.ones(2),
    "w": torch.full((2,), 3.0),
    "a": 2.5,
    "n": 4,
    "bogus": 1,
    "by_position_0": torch.ones(2),
}


@st.composite
def _call_styles(draw: Any) -> Tuple[str, list, dict]:
    """An op and a call of it: any number of positional arguments (one too many included) and
    any set of keywords (a parameter given by position too, an unknown name)."""
    name = draw(st.sampled_from(sorted(_CALL_STYLE_OPS)))
    params = [p.split(":")[0] for p in _CALL_STYLE_OPS[name][0].split(", ")]
    count = draw(st.integers(0, len(params) + 1))
    args = [_CALL_VALUES.get(p, 7.0) for p in [*params, "extra"][:count]]
    names = draw(st.lists(st.sampled_from([*params, "bogus", "by_position_0"]), unique=True))
    return name, args, {n: _CALL_VALUES[n] for n in names}


@pytest.mark.skipif(not HAS_TORCH_OP, reason=f"torch {torch.__version__} has no custom_op")
@pytest.mark.parametrize("tier", SIDE_BY_SIDE)
@settings(max_examples=_EXAMPLES * 5, deadline=None)
@given(style=_call_styles())
def test_generated_call_styles_match_torch_custom_op(
    tier: str, style: Tuple[str, list, dict]
) -> None:
    """Every call style, right or wrong, gives what torch's own op gives (outputs, or the
    exception and its message)."""
    name, args, kwargs = style
    signature, schema = _CALL_STYLE_OPS[name]
    namespace: Dict[str, Any] = {"torch": torch}
    body = " * ".join(p.split(":")[0] for p in signature.split(", "))
    # Annotated as the short path wants them (a function without annotations goes to torch).
    exec(f"def {name}({signature}) -> torch.Tensor:\n    return ({body}) + 0\n", namespace)
    fn = namespace[name]
    ours_ns, theirs_ns = f"cfts{_RUN}o{next(_count)}", f"cfts{_RUN}t{next(_count)}"
    ours = _ours(tier)(f"{ours_ns}::{name}", fn, (), schema)
    theirs = _theirs(f"{theirs_ns}::{name}", fn, (), schema)

    def call(op: Any, _: Any) -> Any:
        return op(*args, **kwargs)

    expected, got = _call_outcome(theirs, theirs_ns, call), _call_outcome(ours, ours_ns, call)
    if tier == "function" and "INTERNAL ASSERT FAILED" in str(expected[1]):
        # See test_a_call_that_does_not_fit_gets_torch_own_outcome.
        assert got[0] == "RuntimeError" and "specified both as positional and keyword" in got[1]
        return
    assert got == expected
