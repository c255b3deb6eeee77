"""The cases of ``compatfn.custom_op``'s differential oracle (``library_oracle``): the strategy
that draws them (parameter types, kernels and the contexts a call runs under) and the explicit
cases kept from shrunk failures of the generated ones (:data:`REGRESSIONS`). A case is a plain,
JSON-able dict; ``library_oracle``'s docstring describes its fields.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from hypothesis import strategies as st

from library_oracle_transforms import TRANSFORMS

# --------------------------------------------------------------------------- strategies

#: type -> (annotation source, defaults to draw, values to pass)
SCALARS: Dict[str, Tuple[str, List[Any], List[Any]]] = {
    "float": ("float", [0.0, -0.0, 1.5], [2.0, -0.0, 0.0, 3, "np.float64(2.5)", "big_int"]),
    "int": ("int", [0, 2], [3, "int64_overflow", True, "np.int64(4)"]),
    "bool": ("bool", [False, True], [True, False, "np.bool_(True)"]),
    "str": ("str", ["a"], ["abc", "bytes", "non_ascii", "surrogate"]),
    "Optional[float]": ("Optional[float]", [None], [None, 1.25]),
    "List[int]": ("List[int]", [], [[1, 2], (3,), "int_vector", 3]),
    "Optional[int]": ("Optional[int]", [None], [None, 3, "np.int64(4)"]),
    "Optional[bool]": ("Optional[bool]", [None], [None, True]),
    "Optional[str]": ("Optional[str]", [None], [None, "xy"]),
    "List[float]": ("List[float]", [], [[1.5, 2], [0.5]]),
    "List[bool]": ("List[bool]", [], [[True, False]]),
    "torch.dtype": ("torch.dtype", ["dtype:float32"], ["dtype:float64", "dtype:int32"]),
    "torch.device": ("torch.device", ["device:cpu"], ["device:cpu", "cpu", "cuda:1"]),
    "Number": (
        "torch.types.Number",
        [2, 1.5],
        [2, 1.5, True, "np.float64(2.5)", "np.int64(4)", "dtype:float64", "int64_overflow"],
    ),
    "Optional[List[int]]": ("Optional[List[int]]", [None], [None, [1, 2], "int_vector"]),
    "Sequence[int]": ("Sequence[int]", [], [[1, 2], (3,)]),
    "Sequence[float]": ("Sequence[float]", [], [[1.5], (2, 0.5)]),
    "Optional[torch.dtype]": ("Optional[torch.dtype]", [None], [None, "dtype:float64"]),
    "Optional[torch.device]": ("Optional[torch.device]", [None], [None, "cpu"]),
    "List[Number]": ("List[torch.types.Number]", [], [[1, 2.5], [True], (2,), 3]),
}
TENSOR_TYPES = ["Tensor", "Optional[Tensor]", "List[Tensor]", "List[Optional[Tensor]]"]
#: The values drawn for a tensor parameter of each type, some of which torch refuses (``tensor``
#: for a list; ``none_in_list``: ``[None]``; ``list_tensor``: ``[tensor]`` for ``Tensor?``;
#: ``tensor_and_none``: ``[tensor, None]``).
TENSOR_VALUES = {
    "Optional[Tensor]": ["tensor", None, "tensor", "list_tensor"],
    "List[Tensor]": ["tensors2", "tensors0", "tensors2", "tensor", "none_in_list", "generator"],
    "List[Optional[Tensor]]": ["tensors2", "tensor_and_none", "tensors0", "none_in_list"],
}
#: The type of the first parameter ``x``: mostly a tensor; ``Optional[Tensor]`` or
#: ``List[Tensor]``, for which ``None`` or ``[]`` is drawn too (with no other tensor, a call
#: without tensors: torch's Autograd kernel does not run, a factory-like kernel).
FIRST_TYPES = ["Tensor", "Tensor", "Tensor", "Optional[Tensor]", "List[Tensor]"]
FIRST_VALUES = {"Optional[Tensor]": [None, "tensor"], "List[Tensor]": ["tensors0", "tensors2"]}
#: An explicit ``schema=``: none, the inferred one, one with a float for each int, one with other
#: defaults than the kernel's own.
SCHEMAS = ["none", "none", "given", "float_for_int", "other_defaults"]
KERNELS = [
    "pure",
    "pure",
    "inplace_declared",
    "inplace_undeclared",
    "list_for_tuple",
    "return_input",
    "return_view",
    "capture_param",
    "capture_param_inplace",
    "return_param",
    "return_param_view",
    "return_nonleaf",
    "nested",
    "raising",
    "random",
    "autograd_grad",
    "return_none",
    "return_float",
    "one_tuple",
    "one_tensor",
]
CONTEXTS = [
    "plain",
    "plain",
    "no_grad",
    "inference_mode",
    "enable_grad_in_inference",
    "anomaly",
    "saved_tensor_hooks",
    "checkpoint",
    "torch_function_mode",
    "forward_ad_level",
    "neg_views",
    "profiler",
    "thread",
    "autocast",
]
#: Contexts drawn only where cases run side by side with torch's own op (torch >= 2.4): the
#: stored outcomes of the older rows do not have them. ``meta``: each tensor argument on the meta
#: device; ``fake_mode``: FakeTensors under their FakeTensorMode; ``dispatch_mode``: a
#: TorchDispatchMode sees the op (and a nested op); the transforms of ``library_oracle_transforms``
#: (compile, export, fx, jit, vmap, torch.func); ``zero_tensors``: each tensor argument that
#: requires no grad a ZeroTensor; ``inference_tensors``: each tensor argument an inference tensor
#: (made in inference mode, requiring grad where drawn so), called outside inference mode.
SIDE_BY_SIDE_CONTEXTS = [
    "meta",
    "fake_mode",
    "dispatch_mode",
    "zero_tensors",
    "inference_tensors",
    *TRANSFORMS,
]


#: What a kernel may return besides tensors (``returns``: the op's return types, in order; a case
#: without it returns ``outputs`` tensors) and the kernels that draw them.
RETURNS = ["Tensor", "Tensor[]", "int", "float", "bool"]
RETURN_KERNELS = ["pure", "random", "capture_param", "nested", "raising", "autograd_grad"]

#: What the case registers with register_autograd: nothing (False), or a backward returning a
#: gradient per positional argument (True), one fewer, one more (a tensor), or a bare tensor.
AUTOGRAD = [False, True, "one_fewer", "one_more", "single"]
#: A kernel registered for ``"meta"`` (``register_kernel("meta", ...)``): none, or registered
#: before or after the fake kernel (registered or not).
META_KERNELS = ["none", "none", "before_fake", "after_fake"]
#: How the registered setup_context declares its parameters (torch gives them by keyword):
#: ``(ctx, inputs, output)``, reordered, keyword-only, or ``**kwargs`` alone.
SETUP_SIGNATURES = ["plain", "reordered", "keyword_only", "kwargs"]


@st.composite
def cases(draw: Any, contexts: List[str] = CONTEXTS) -> Dict[str, Any]:
    """A generated case (See ``library_oracle``'s docstring), its context one of ``contexts``."""
    params: List[Dict[str, Any]] = [{"name": "x", "type": "Tensor", "default": "none"}]
    extra = draw(st.lists(st.sampled_from(["Tensor", *TENSOR_TYPES[1:], *SCALARS]), max_size=3))
    for i, kind in enumerate(extra):
        default: Any = "none"
        if kind == "Optional[Tensor]":
            default = draw(st.sampled_from(["none", None]))
        elif kind in SCALARS and SCALARS[kind][1]:
            default = draw(st.sampled_from(["none", *SCALARS[kind][1]]))
        params.append({"name": f"a{i}", "type": kind, "default": default})
    # No parameter without a default after one with a default.
    seen_default = False
    for p in params:
        if p["default"] != "none":
            seen_default = True
        elif seen_default:
            p["default"] = _first_default(p["type"])
            if p["default"] == "none":
                params = params[: params.index(p)]
                break
    if len(params) > 1 and draw(st.integers(0, 3)) == 0:  # a keyword-only last parameter
        params[-1]["kw_only"] = True
    kernel = draw(st.sampled_from(KERNELS))
    tensor_names = [p["name"] for p in params if p["type"] in TENSOR_TYPES]
    mutates = sorted(draw(st.sets(st.sampled_from(tensor_names))))
    if kernel == "inplace_declared" and "x" not in mutates:
        mutates = ["x", *mutates]
    outputs = 0 if kernel == "inplace_declared" and draw(st.booleans()) else draw(st.integers(1, 3))
    if kernel in ("list_for_tuple", "one_tuple", "one_tensor"):
        outputs = max(outputs, 2)
    args = []
    for p in params:
        how = draw(
            st.sampled_from(["pos", "kw", "left_out"] if p["default"] != "none" else ["pos", "kw"])
        )
        how = "kw" if how == "pos" and p.get("kw_only") else how
        args.append({"how": how, "value": _draw_value(draw, p["type"])})
    autograd = not mutates and draw(st.sampled_from(AUTOGRAD))
    drawn: Dict[str, Any] = {
        "params": params,
        "outputs": outputs,
        "mutates": mutates,
        "kernel": kernel,
        "autograd": autograd,
        "setup": draw(st.sampled_from(SETUP_SIGNATURES)) if autograd else "plain",
        "fake": draw(st.booleans()),
        "autocast": draw(st.booleans()),
        "schema": draw(st.sampled_from(SCHEMAS)),
        "args": args,
        "grad": sorted(draw(st.sets(st.sampled_from(tensor_names)))),
        "context": draw(st.sampled_from(contexts)),
        "meta_kernel": draw(st.sampled_from(META_KERNELS)),
    }
    if kernel in RETURN_KERNELS and outputs and draw(st.integers(0, 2)) == 0:
        returns = draw(st.lists(st.sampled_from(RETURNS), max_size=2))
        returns.insert(draw(st.integers(0, len(returns))), draw(st.sampled_from(RETURNS[:2])))
        drawn.update(returns=returns, outputs=len(returns))
    first = draw(st.sampled_from(FIRST_TYPES))
    if first != "Tensor":  # a call without a tensor where None or [] is drawn for it
        params[0]["type"] = first
        args[0]["value"] = draw(st.sampled_from(FIRST_VALUES[first]))
    return drawn


def _first_default(kind: str) -> Any:
    if kind == "Optional[Tensor]":
        return None
    return SCALARS[kind][1][0] if kind in SCALARS and SCALARS[kind][1] else "none"


def _draw_value(draw: Any, kind: str) -> Any:
    if kind == "Tensor":
        return "tensor"
    if kind in TENSOR_VALUES:
        return draw(st.sampled_from(TENSOR_VALUES[kind]))
    return draw(st.sampled_from(SCALARS[kind][2]))


# --------------------------------------------------------------------------- regressions


def case(kernel: str = "pure", outputs: int = 1, **fields: Any) -> Dict[str, Any]:
    """An explicit case: one tensor ``x`` passed by position unless ``params``/``args`` say
    otherwise, plain context, nothing registered."""
    result: Dict[str, Any] = {
        "params": [{"name": "x", "type": "Tensor", "default": "none"}],
        "outputs": outputs,
        "mutates": [],
        "kernel": kernel,
        "autograd": False,
        "fake": False,
        "autocast": False,
        "schema": "none",
        "args": [{"how": "pos", "value": "tensor"}],
        "grad": [],
        "context": "plain",
        "meta_kernel": "none",
    }
    result.update(fields)
    return result


def _with_scalar(
    kind: str, default: Any, value: Any, how: str = "pos", **fields: Any
) -> Dict[str, Any]:
    """A case of ``x`` and a parameter ``a0`` of type ``kind`` (despite the name, any type) given
    ``value`` (``how``: by position, keyword, or left out)."""
    return case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": kind, "default": default},
        ],
        args=[{"how": "pos", "value": "tensor"}, {"how": how, "value": value}],
        **fields,
    )


#: The first parameter of most explicit cases.
_X = {"name": "x", "type": "Tensor", "default": "none"}


#: Shrunk failures of the generated cases, each kept as an explicit case (name -> case).
def _refused_after_generator(args: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A case of ``x`` and two tensor lists given ``args``, under forward AD (through the
    operator)."""
    lists = [{"name": f"a{i}", "type": "List[Tensor]", "default": "none"} for i in range(2)]
    return case(
        params=[_X, *lists],
        args=[{"how": "pos", "value": "tensor"}, *args],
        context="forward_ad_level",
    )


REGRESSIONS: Dict[str, Dict[str, Any]] = {
    "a meta integer tensor for a List[int]": _with_scalar(
        "List[int]", "none", "int_vector", context="meta"
    ),
    "a mutating op called without a tensor returns a 1-tuple for two outputs": case(
        "one_tuple",
        2,
        params=[
            {"name": "x", "type": "Optional[Tensor]", "default": "none"},
            {"name": "a0", "type": "float", "default": "none", "kw_only": True},
        ],
        args=[{"how": "pos", "value": None}, {"how": "kw", "value": 2.0}],
        mutates=["x"],
    ),
    "a mutating op with an inference tensor returns a 1-tuple for two outputs": case(
        "one_tuple", 2, mutates=["x"], context="inference_tensors"
    ),
    "a list for a tuple runs the kernel once": case("list_for_tuple", 2),
    "a list for a tuple, input requiring grad": case(
        "list_for_tuple", 2, grad=["x"], autograd=True
    ),
    "a 1-tuple for two outputs runs the kernel once": case("one_tuple", 2),
    "a tensor for two outputs": case("one_tensor", 2),
    "a str UTF-8 cannot encode is refused": _with_scalar("str", "a", "surrogate"),
    "a str UTF-8 cannot encode is refused, input requiring grad": _with_scalar(
        "str", "none", "surrogate", grad=["x"], autograd=True
    ),
    "a tensor for two outputs, input requiring grad": case(
        "one_tensor", 2, grad=["x"], autograd=True
    ),
    "None for two outputs runs the kernel once": case("return_none", 2),
    "None for a tensor runs the kernel once": case("return_none", 1),
    "a float for a tensor": case("return_float", 1),
    "an input returned, setup_context not run": case(
        "return_input", 1, grad=["x"], autograd=True, context="saved_tensor_hooks"
    ),
    "a view of an input returned": case("return_view", 1, context="anomaly"),
    "setup_context's parameters reordered bind by name": case(
        grad=["x"], autograd=True, setup="reordered"
    ),
    "setup_context's parameters keyword-only": case(
        grad=["x"], autograd=True, setup="keyword_only"
    ),
    "a CPU kernel gets no argument equal to its default": _with_scalar(
        "float", 1.0, 1.0, cpu_kernel=True
    ),
    "a CPU kernel gets no keyword-only argument equal to its default": case(
        params=[_X, {"name": "a0", "type": "int", "default": 2, "kw_only": True}],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": 2}],
        cpu_kernel=True,
    ),
    "a keyword-only None default is left out too": case(
        params=[_X, {"name": "a0", "type": "Optional[int]", "default": None, "kw_only": True}],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": None}],
        cpu_kernel=True,
        grad=["x"],
        autograd=True,
    ),
    "a fake kernel gets no argument equal to its default": _with_scalar(
        "int", 2, 2, fake=True, context="meta"
    ),
    "autograd.grad in the kernel finds no graph": case("autograd_grad"),
    "a captured leaf changed in place": case("capture_param_inplace"),
    "a captured non-leaf returned keeps its grad_fn": case("return_nonleaf"),
    "a view of a captured leaf returned": case("return_param_view"),
    "enable_grad inside inference_mode records nothing": case(
        "capture_param", grad=["x"], autograd=True, context="enable_grad_in_inference"
    ),
    "inference_mode": case("capture_param", grad=["x"], autograd=True, context="inference_mode"),
    "explicit schema wins over annotations": _with_scalar("int", "none", 3, schema="float_for_int"),
    "an int outside int64": _with_scalar("int", "none", "int64_overflow"),
    "-0.0 for a 0.0 default": _with_scalar("float", 0.0, -0.0),
    "-0.0 for a 0.0 default, with grad": _with_scalar(
        "float", 0.0, -0.0, grad=["x"], autograd=True
    ),
    "10**400 for a float": _with_scalar("float", "none", "big_int"),
    "bytes for a str": _with_scalar("str", "none", "bytes"),
    "np.bool_ for a bool": _with_scalar("bool", "none", "np.bool_(True)"),
    "np.int64 for an int": _with_scalar("int", "none", "np.int64(4)"),
    "a declared mutation bumps the version once": case(
        "inplace_declared", 0, mutates=["x"], context="checkpoint"
    ),
    "a declared mutation with a raising kernel": case("raising", 2, mutates=["x"]),
    "a mutated tensor list, another input requiring grad": case(
        "inplace_declared",
        1,
        params=[_X, {"name": "a0", "type": "List[Tensor]", "default": "none"}],
        args=[{"how": "pos", "value": "tensor"}, {"how": "pos", "value": "tensors2"}],
        mutates=["a0", "x"],
        grad=["x"],
    ),
    "a tensor list holding None, its tensor requiring grad": case(
        params=[_X, {"name": "a0", "type": "List[Optional[Tensor]]", "default": "none"}],
        args=[{"how": "pos", "value": "tensor"}, {"how": "pos", "value": "tensor_and_none"}],
        grad=["a0"],
        autograd=True,
    ),
    "a TorchFunctionMode sees the op": case(context="torch_function_mode"),
    "a TorchFunctionMode, input requiring grad": case(
        "nested", grad=["x"], autograd=True, context="torch_function_mode"
    ),
    "inference tensors requiring grad skip autograd": case(
        grad=["x"], autograd=True, context="inference_tensors"
    ),
    "inference tensors and a captured parameter": case(
        kernel="capture_param", grad=["x"], context="inference_tensors"
    ),
    "a lazily negated view is materialized": case(context="neg_views"),
    "a lazily negated view requiring grad": case(grad=["x"], autograd=True, context="neg_views"),
    "inside a forward AD level": case("capture_param", grad=["x"], context="forward_ad_level"),
    "None for an empty tensor list, a tensor after it": case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": "List[Tensor]", "default": "none"},
            {"name": "a1", "type": "Optional[Tensor]", "default": "none"},
        ],
        args=[
            {"how": "pos", "value": "tensor"},
            {"how": "pos", "value": "tensors0"},
            {"how": "pos", "value": "tensor"},
        ],
        grad=["x"],
        autograd=True,
    ),
    "the profiler, input requiring grad": case(grad=["x"], autograd=True, context="profiler"),
    "in a thread of its own": case("capture_param", grad=["x"], autograd=True, context="thread"),
    "a declared mutation of a meta tensor, no fake kernel": case(mutates=["x"], context="meta"),
    "a declared mutation under FakeTensorMode": case(mutates=["x"], fake=True, context="fake_mode"),
    "meta tensors run a kernel registered for meta, not the fake kernel": case(
        fake=True, meta_kernel="after_fake", context="meta"
    ),
    "meta tensors run a kernel registered for meta before the fake kernel": case(
        fake=True, meta_kernel="before_fake", context="meta", grad=["x"], autograd=True
    ),
    "FakeTensors run the fake kernel, not the one registered for meta": case(
        fake=True, meta_kernel="before_fake", context="fake_mode"
    ),
    "FakeTensors with only a kernel registered for meta": case(
        meta_kernel="after_fake", context="fake_mode"
    ),
    "an op that only mutates needs no fake kernel": case(
        "inplace_declared", 0, mutates=["x"], context="meta"
    ),
    "a TorchDispatchMode sees the op": case(grad=["x"], autograd=True, context="dispatch_mode"),
    "a keyword-only tensor parameter": case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": "Optional[Tensor]", "default": None, "kw_only": True},
        ],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": "tensor"}],
    ),
    "a tensor for a tensor list": _with_scalar("List[Tensor]", "none", "tensor"),
    "[None] for a tensor list": _with_scalar("List[Tensor]", "none", "none_in_list"),
    "a generator for a tensor list": _with_scalar("List[Tensor]", "none", "generator", grad=["x"]),
    "[x] for an optional tensor": _with_scalar("Optional[Tensor]", None, "list_tensor"),
    "an int vector for an inferred int list": _with_scalar("List[int]", "none", "int_vector"),
    "an int vector for a written int[]": _with_scalar(
        "List[int]", "none", "int_vector", schema="given"
    ),
    "an int vector for an int list under the profiler": _with_scalar(
        "List[int]", "none", "int_vector", context="profiler"
    ),
    "a keyword equal to the schema's default, through the operator": case(
        params=[
            _X,
            {"name": "a0", "type": "int", "default": 2},
            {"name": "a1", "type": "int", "default": 2},
        ],
        args=[
            {"how": "pos", "value": "tensor"},
            {"how": "left_out", "value": 3},
            {"how": "kw", "value": 3},
        ],
        schema="other_defaults",
        context="profiler",
    ),
    "None for an Optional[int]": _with_scalar("Optional[int]", "none", None),
    "a numpy int for an Optional[int]": _with_scalar("Optional[int]", None, "np.int64(4)"),
    "a str for a device": _with_scalar("torch.device", "none", "cpu"),
    "a dtype": _with_scalar("torch.dtype", "none", "dtype:int32", how="kw"),
    "ints in a float list": _with_scalar("List[float]", "none", [1.5, 2]),
    "a bool for a Number": _with_scalar("Number", "none", True),
    "a Number equal to its default, input requiring grad": _with_scalar(
        "Number", 2, 2, grad=["x"], autograd=True
    ),
    "a Number of another kind than its default": _with_scalar("Number", 2, 2.0, grad=["x"]),
    "a Number left out, the schema's default another": _with_scalar(
        "Number", 1.5, 0, how="left_out", schema="other_defaults"
    ),
    "a dtype equal to its default, input requiring grad": _with_scalar(
        "torch.dtype", "dtype:float32", "dtype:float32", grad=["x"], autograd=True
    ),
    "a str equal to a device default, input requiring grad": _with_scalar(
        "torch.device", "device:cpu", "cpu", grad=["x"], autograd=True
    ),
    "a device left out, the schema's default another": _with_scalar(
        "torch.device", "device:cpu", "cpu", how="left_out", schema="other_defaults"
    ),
    "a dtype left out, the schema's default another": _with_scalar(
        "torch.dtype", "dtype:float32", "dtype:int32", how="left_out", schema="other_defaults"
    ),
    "np.float64 for a Number": _with_scalar("Number", "none", "np.float64(2.5)"),
    "np.int64 for a Number": _with_scalar("Number", "none", "np.int64(4)"),
    "a dtype for a Number": _with_scalar("Number", "none", "dtype:float64"),
    "an int beyond int64 for a Number": _with_scalar("Number", "none", "int64_overflow"),
    "an int for an int list": _with_scalar("List[int]", "none", 3),
    "an int for a Number list": _with_scalar("List[Number]", "none", 3),
    "a bool for a Number, through the operator": _with_scalar(
        "Number", "none", True, context="forward_ad_level"
    ),
    "a sparse input (no storage: torch's aliasing rule leaves it out)": case(context="sparse"),
    "a sparse input returned as is": case("return_input", context="sparse"),
    "a sparse input, two outputs": case(outputs=2, context="sparse"),
    "a sparse input beside an input requiring grad": _with_scalar(
        "Tensor", "none", "tensor", grad=["x"], autograd=True, context="sparse"
    ),
    "two mutated negated views are refused before the kernel runs": _with_scalar(
        "Tensor",
        "none",
        "tensor",
        kernel="inplace_declared",
        mutates=["x", "a0"],
        context="neg_views",
    ),
    "a TorchFunctionMode sees a call it refuses": _with_scalar(
        "List[Tensor]", "none", "none_in_list", context="torch_function_mode"
    ),
    "a TorchFunctionMode sees a call with an int outside int64": _with_scalar(
        "int", "none", "int64_overflow", context="torch_function_mode"
    ),
    "an autocast rule, autocast off": case(autocast=True),
    "autocast on, no autocast rule": case(grad=["x"], autograd=True, context="autocast"),
    "an autocast rule under autocast": case(autocast=True, context="autocast"),
    "an autocast rule under autocast, two outputs requiring grad": case(
        outputs=2, autocast=True, grad=["x"], autograd=True, context="autocast"
    ),
    "an autocast rule casts each tensor of a list, not a None": _with_scalar(
        "List[Optional[Tensor]]", "none", "tensor_and_none", autocast=True, context="autocast"
    ),
    "an autocast rule and a tensor given by keyword": _with_scalar(
        "Tensor", "none", "tensor", how="kw", autocast=True, context="autocast"
    ),
    "an autocast rule and a keyword-only tensor": case(
        params=[_X, {"name": "a0", "type": "Tensor", "default": "none", "kw_only": True}],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": "tensor"}],
        autocast=True,
        context="autocast",
    ),
    "an autocast rule and a declared mutation": case(
        "inplace_declared", 0, mutates=["x"], autocast=True, context="autocast"
    ),
    "an autocast rule under autocast, a trailing default left out, a CPU kernel": _with_scalar(
        "float",
        0.0,
        2.0,
        how="left_out",
        autocast=True,
        context="autocast",
        cpu_kernel=True,
        schema="other_defaults",
    ),
    "an autocast rule under autocast, an int list": _with_scalar(
        "List[int]", "none", "int_vector", autocast=True, context="autocast"
    ),
    "a schema default reaches the kernel as the kernel's": _with_scalar(
        "int", 2, 3, schema="other_defaults"
    ),
    "a keyword-only argument equal to its schema default": case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": "str", "default": "a", "kw_only": True},
        ],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": "bytes"}],
        schema="other_defaults",
    ),
    "-0.0 for a keyword-only 0.0 default": case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": "float", "default": 0.0, "kw_only": True},
        ],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": -0.0}],
    ),
    "a list op's backward returning one gradient fewer": _with_scalar(
        "List[Tensor]", "none", "tensors2", grad=["x"], autograd="one_fewer"
    ),
    "a list op's backward returning a bare tensor": _with_scalar(
        "List[Tensor]", "none", "tensors2", grad=["x"], autograd="single"
    ),
    "needs_input_grad of a list holding a None": _with_scalar(
        "List[Optional[Tensor]]", "none", "tensor_and_none", grad=["x", "a0"], autograd=True
    ),
    "needs_input_grad with a default left out": _with_scalar(
        "int", 2, 3, how="left_out", grad=["x"], autograd=True
    ),
    "needs_input_grad with a keyword-only argument": case(
        params=[_X, {"name": "a0", "type": "float", "default": 1.0, "kw_only": True}],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": 2.0}],
        grad=["x"],
        autograd=True,
    ),
    "a gradient more than the arguments, a default left out": _with_scalar(
        "int", 2, 3, how="left_out", grad=["x"], autograd="one_more"
    ),
    "a declared mutation under FakeTensorMode, a generator of real tensors": _with_scalar(
        "List[Tensor]",
        "none",
        "generator",
        kernel="inplace_declared",
        mutates=["x"],
        context="fake_mode",
    ),
    "a declared mutation of a ZeroTensor and of a tensor requiring grad": _with_scalar(
        "Tensor", "none", "tensor", mutates=["a0", "x"], grad=["x"], context="zero_tensors"
    ),
    "a generator, then a refused argument, through the operator": _refused_after_generator(
        [{"how": "pos", "value": "generator"}, {"how": "kw", "value": "tensor"}]
    ),
    "a refused argument, then a generator, through the operator": _refused_after_generator(
        [{"how": "kw", "value": "tensor"}, {"how": "kw", "value": "generator"}]
    ),
    # Tensor lists among several returns: the lists' tensors lost their gradient (1.8-2.3).
    "a tensor list and an int returned, input requiring grad": case(
        returns=["Tensor[]", "int"], outputs=2, grad=["x"], autograd=True
    ),
    "a tensor and a tensor list returned, setup_context and backward see them": case(
        returns=["Tensor", "Tensor[]"], outputs=2, grad=["x"], autograd=True, fake=True
    ),
    "two tensor lists returned, input requiring grad, no autograd registered": case(
        returns=["Tensor[]", "bool", "Tensor[]"], outputs=3, grad=["x"]
    ),
    "a tensor list alone returned, input requiring grad": case(
        returns=["Tensor[]"], grad=["x"], autograd=True
    ),
    "a float and a tensor returned, no grad": case(returns=["float", "Tensor"], outputs=2),
}


#: Explicit cases of the transform contexts (``library_oracle_transforms``), shrunk failures
#: included: compared side by side only (torch >= 2.4), so they are not in the stored set.
TRANSFORM_REGRESSIONS: Dict[str, Dict[str, Any]] = {
    "compiled without a tensor, a meta kernel and no fake kernel": case(
        params=[{"name": "x", "type": "Optional[Tensor]", "default": "none"}],
        args=[{"how": "pos", "value": None}],
        meta_kernel="before_fake",
        context="compile",
    ),
    "a declared mutation of a tensor list the exported function captures": case(
        "inplace_undeclared",
        params=[_X, {"name": "a0", "type": "List[Tensor]", "default": "none"}],
        args=[{"how": "pos", "value": "tensor"}, {"how": "pos", "value": "tensors2"}],
        mutates=["a0", "x"],
        context="export",
    ),
    "compiled, with autograd and a fake kernel": case(
        grad=["x"], autograd=True, fake=True, context="compile"
    ),
    "compiled, no fake kernel": case(context="compile"),
    "exported strictly, with a fake kernel": case(fake=True, context="export_strict"),
    "exported, a declared mutation": case(
        "inplace_declared", 0, mutates=["x"], fake=True, context="export"
    ),
    "make_fx records the op": case(fake=True, context="make_fx"),
    "symbolic_trace records the op": case(context="symbolic_trace"),
    "symbolic_trace, a tensor given by name": case(
        args=[{"how": "kw", "value": "tensor"}], context="symbolic_trace"
    ),
    "jit.trace records the op": case(context="jit_trace"),
    "vmap, no registered rule": case(context="vmap"),
    "torch.func.grad, autograd registered": case(grad=["x"], autograd=True, context="func_grad"),
    "a numpy scalar compiled": _with_scalar("float", "none", "np.float64(2.5)", context="compile"),
    "a numpy scalar compiled, fake kernel": _with_scalar(
        "float", "none", "np.float64(2.5)", fake=True, context="compile"
    ),
    "a numpy bool exported strictly, fake kernel": _with_scalar(
        "bool", "none", "np.bool_(True)", fake=True, context="export_strict"
    ),
    "a numpy scalar in a symbolically traced graph": _with_scalar(
        "float", "none", "np.float64(2.5)", context="symbolic_trace"
    ),
    "bytes in a symbolically traced graph": _with_scalar(
        "str", "none", "bytes", context="symbolic_trace"
    ),
    "a numpy int for a keyword-only default, compiled, a declared mutation": case(
        params=[
            {"name": "x", "type": "Tensor", "default": "none"},
            {"name": "a0", "type": "int", "default": 0, "kw_only": True},
        ],
        args=[{"how": "pos", "value": "tensor"}, {"how": "kw", "value": "np.int64(4)"}],
        mutates=["x"],
        context="compile",
    ),
    "a declared mutation of a ZeroTensor, an optional tensor after it": _with_scalar(
        "Optional[Tensor]", "none", "tensor", mutates=["x"], context="zero_tensors"
    ),
    "a tensor list and an int returned, compiled with autograd": case(
        returns=["Tensor[]", "int"],
        outputs=2,
        grad=["x"],
        autograd=True,
        fake=True,
        context="compile",
    ),
    "a list op's backward returning one gradient fewer, compiled": _with_scalar(
        "List[Tensor]",
        "none",
        "tensors2",
        grad=["x"],
        autograd="one_fewer",
        fake=True,
        context="compile",
    ),
}
