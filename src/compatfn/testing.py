"""Test helpers for downstream suites: prove a Function correct on the torch you run.

* :func:`check_function` runs gradcheck, gradgradcheck, forward-mode AD, native-vs-legacy parity,
  ``torch.func.vmap`` and ``torch.compile`` -- each where it applies and the running torch supports
  it -- and returns a :class:`CheckReport` saying what ran and why anything was skipped.
* :func:`saved_bytes` measures what one call keeps alive for backward.

Example::

    import torch, compatfn.testing
    from compatfn.relu import MaskReLU

    x = torch.randn(10, dtype=torch.double, requires_grad=True)
    report = compatfn.testing.check_function(MaskReLU, x)
    print(report)  # ran: forward, gradcheck, gradgradcheck, ...; skipped: jvp (...)

Layout: the report and :func:`check_function`; the checks, one small function each, registered
by name with ``@_check``; how results are compared; the torch.compile probes (with the one
function that reads dynamo's messages); :func:`saved_bytes`. Torch facts come from
:mod:`compatfn.core`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import torch

import compatfn
from compatfn import core

__all__ = ["CHECKS", "CheckReport", "check_function", "saved_bytes"]

#: Every check :func:`check_function` knows, in the order it runs them.
CHECKS = ("forward", "gradcheck", "gradgradcheck", "forward_ad", "parity", "vmap", "compile")


@dataclass
class CheckReport:
    """What :func:`check_function` did: ``ran`` (check names) and ``skipped`` (name -> reason).

    Example::

        >>> x = torch.randn(8, dtype=torch.double, requires_grad=True)
        >>> report = check_function(compatfn.relu.ReLU, x)
        >>> "gradcheck" in report.ran
        True
    """

    function: str
    torch_version: str
    ran: List[str] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"check_function({self.function}) on torch {self.torch_version}"]
        lines.append("  ran: " + (", ".join(self.ran) or "nothing"))
        for name, why in self.skipped.items():
            lines.append(f"  skipped {name}: {why}")
        return "\n".join(lines)


def check_function(
    fn: Any,
    *inputs: Any,
    kwargs: Optional[Mapping[str, Any]] = None,
    checks: Optional[Sequence[str]] = None,
    gradcheck_dtype: Optional[torch.dtype] = torch.float64,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    compile_backend: str = "aot_eager",
) -> CheckReport:
    """Check a (``@compatfn.function``-decorated) autograd Function on the running torch.

    Example::

        >>> x = torch.randn(8, dtype=torch.double, requires_grad=True)
        >>> check_function(compatfn.relu.ClippedReLU, x, 2.0).ran[:2]
        ['forward', 'gradcheck']

    Runs, in order (``checks`` selects a subset; the rest are reported as skipped):

    * ``forward``: calls it; an input modified in place must be returned (``mark_dirty``).
    * ``gradcheck`` / ``gradgradcheck`` (the latter unless backward is ``@once_differentiable``)
      on copies of the inputs cast to ``gradcheck_dtype`` (``None`` keeps their dtypes).
    * ``forward_ad``: ``gradcheck(check_forward_ad=True)`` when the Function defines ``jvp``.
    * ``parity``: outputs and gradients identical through the native path and the legacy adapter
      (:func:`compatfn.as_legacy`), on a torch that has both.
    * ``vmap``: ``torch.func.vmap`` of the call and of its gradient equals a loop, when the
      Function has ``generate_vmap_rule = True`` or a ``vmap`` staticmethod.
    * ``compile``: ``torch.compile(fullgraph=True, backend=compile_backend)`` of
      ``compatfn.functional(fn)`` (and of ``fn.apply`` on torch >= 2.4) matches eager. Skipped,
      with the reason, only where the failure names a ctx method (``set_materialize_grads``,
      ``mark_dirty``, ``mark_non_differentiable``) and a minimal plain-torch Function (legacy
      form, no compatfn) using that method fails to compile the same way on the running torch
      (e.g. torch 2.1); the probe runs once per process. Any other failure is a failure.

    ``fn`` is a Function class; a plain callable (e.g. a functional wrapper) gets the checks that
    need no class. Inputs that should get gradients need ``requires_grad=True``; pick values away
    from kinks for the numerical checks. Raises ``AssertionError`` naming the Function and the
    check on the first failure; returns a :class:`CheckReport` otherwise.
    """
    wanted = list(CHECKS) if checks is None else list(checks)
    unknown = [c for c in wanted if c not in CHECKS]
    if unknown:
        raise ValueError(f"check_function: unknown checks {unknown}; known: {list(CHECKS)}")
    case = _Case(
        fn,
        inputs,
        dict(kwargs or {}),
        gradcheck_dtype,
        dict(eps=eps, atol=atol, rtol=rtol, raise_exception=True),
        compile_backend,
    )
    report = CheckReport(function=case.name, torch_version=str(torch.__version__))
    for name in CHECKS:
        why = _REGISTRY[name](case) if name in wanted else "not requested (checks=...)"
        if why is None:
            report.ran.append(name)
        else:
            report.skipped[name] = why
        report.skipped.update(case.notes)
        case.notes.clear()
    return report


class _Case:
    """One :func:`check_function` call: the Function, its inputs and the check settings."""

    def __init__(
        self,
        fn: Any,
        inputs: Sequence[Any],
        kwargs: Dict[str, Any],
        gradcheck_dtype: Optional[torch.dtype],
        gradcheck_args: Dict[str, Any],
        compile_backend: str,
    ) -> None:
        self.fn = fn
        self.is_class = _is_function_class(fn)
        self.name: str = fn.__name__ if hasattr(fn, "__name__") else repr(fn)
        self.call: Callable[..., Any] = fn.apply if self.is_class else fn
        self.inputs = tuple(inputs)
        self.kwargs = kwargs
        self.diff = _diff_inputs(inputs)
        """Positions of the inputs that require grad."""
        self.gradcheck_inputs = _fresh(inputs, gradcheck_dtype)
        self.gradcheck_args = gradcheck_args
        self.rtol: float = gradcheck_args["rtol"]
        self.atol: float = gradcheck_args["atol"]
        self.compile_backend = compile_backend
        self.notes: Dict[str, str] = {}
        """Skipped parts of a check (name -> reason), reported after the check itself."""

    def defines(self, name: str) -> bool:
        """Whether the user's Function class defines ``name`` (``jvp``, ``vmap``)."""
        return self.is_class and core.defines(self.fn, name)

    def failure(self, check: str, detail: str) -> AssertionError:
        """The error :func:`check_function` raises when ``check`` fails."""
        return _failure(self.name, check, detail)

    def gradcheck_closure(self) -> Callable[..., Any]:
        """The call as a function of the differentiable inputs only (what gradcheck varies)."""

        def call(*diff_values: torch.Tensor) -> Any:
            values = list(self.gradcheck_inputs)
            for i, v in zip(self.diff, diff_values):
                values[i] = v.clone()  # in-place Functions need non-leaves
            return self.call(*values, **self.kwargs)

        return call


#: A check: raises ``AssertionError`` on a failure; returns ``None`` when it ran, else why not.
_CheckFn = Callable[[_Case], Optional[str]]

#: check name -> the check, filled by ``@_check``; :func:`check_function` runs them in the order
#: of :data:`CHECKS`.
_REGISTRY: Dict[str, _CheckFn] = {}


def _check(name: str) -> Callable[[_CheckFn], _CheckFn]:
    """Register the decorated function as the check ``name`` (listed in :data:`CHECKS`)."""

    def register(check: _CheckFn) -> _CheckFn:
        _REGISTRY[name] = check
        return check

    return register


# --------------------------------------------------------------------------- the checks


@_check("forward")
def _check_forward(case: _Case) -> Optional[str]:
    _, used = _leaves_and_arguments(case.inputs)
    versions = {i: v._version for i, v in _tensors(used)}
    try:
        out = case.call(*used, **case.kwargs)
    except Exception as exc:
        raise case.failure("forward", f"{type(exc).__name__}: {exc}") from exc
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for i, v in _tensors(used):
        if v._version != versions[i] and not any(o is v for o in outs):
            raise case.failure(
                "forward",
                f"input {i} was modified in place but not returned "
                "(an in-place forward must return the input and "
                "call ctx.mark_dirty on it)",
            )
    return None


@_check("gradcheck")
def _check_gradcheck(case: _Case) -> Optional[str]:
    if not case.diff:
        return "no input has requires_grad=True"
    _numerical(case, "gradcheck", torch.autograd.gradcheck)
    return None


@_check("gradgradcheck")
def _check_gradgradcheck(case: _Case) -> Optional[str]:
    if not case.diff:
        return "no input has requires_grad=True"
    if case.is_class and _once_differentiable(case.fn):
        return "backward is @once_differentiable"
    _numerical(case, "gradgradcheck", torch.autograd.gradgradcheck)
    return None


@_check("forward_ad")
def _check_forward_ad(case: _Case) -> Optional[str]:
    if not case.is_class:
        return "not a Function class (cannot tell whether jvp is defined)"
    if not case.defines("jvp"):
        return f"{case.name} defines no jvp"
    if not case.diff:
        return "no input has requires_grad=True"
    if not core.CTX_HAS_SAVE_FOR_FORWARD:
        return (
            f"torch {torch.__version__} has no forward-mode AD for custom "
            "Functions (save_for_forward/jvp: torch >= 1.11)"
        )
    _numerical(
        case,
        "forward_ad",
        torch.autograd.gradcheck,
        check_forward_ad=True,
        check_backward_ad=False,
        check_undefined_grad=False,
        check_batched_grad=False,
    )
    return None


@_check("parity")
def _check_parity(case: _Case) -> Optional[str]:
    if not case.is_class:
        return "not a Function class"
    mode = compatfn.mode(case.fn)
    if mode != "native":
        if mode == "dual":
            why = "it takes the legacy form on this torch (mode 'dual'), as the legacy path does"
        elif not core.HAS_SETUP_CONTEXT:
            why = "torch < 2.0 has only the legacy path"
        else:
            why = "it runs on the legacy path (legacy=True or COMPATFN_LEGACY=1)"
        return f"{case.name} has no native path to compare: {why}"
    native_out, native_grads, _ = _run(case.fn.apply, case.inputs, case.kwargs)
    legacy_out, legacy_grads, _ = _run(compatfn.as_legacy(case.fn).apply, case.inputs, case.kwargs)
    same = _Comparison(case.name, "parity", exact=True)
    same.check("outputs (native vs legacy)", native_out, legacy_out)
    same.check("gradients (native vs legacy)", native_grads, legacy_grads)
    return None


@_check("vmap")
def _check_vmap(case: _Case) -> Optional[str]:
    why = _vmap_skip_reason(case)
    if why:
        return why
    core.prepare_torch_func()
    _vmap_matches_loop(case)
    return None


@_check("compile")
def _check_compile(case: _Case) -> Optional[str]:
    why = core.dynamo_unsupported()
    if why is None and case.defines("jvp"):
        why = "torch.compile (dynamo) does not trace Functions that define a custom jvp"
    if why:
        return why
    targets: List[Tuple[str, Callable[..., Any]]] = [
        ("compatfn.functional", compatfn.functional(case.fn) if case.is_class else case.fn)
    ]
    if case.is_class:  # a direct Fn.apply compiles wherever a hand-written Function does
        targets.append(("apply", case.fn.apply))
    limitation = None
    for label, target in targets:
        limitation = _compiled_matches_eager(case, target, label)
        if limitation:  # a torch limitation, proven by the plain-torch probe
            break
    return limitation


# --------------------------------------------------------------------------- check helpers


def _numerical(case: _Case, check: str, run: Callable[..., Any], **options: Any) -> None:
    """``run`` (gradcheck or gradgradcheck) over the differentiable inputs; a failure names
    ``check``."""
    diff_inputs = tuple(case.gradcheck_inputs[i] for i in case.diff)
    try:
        run(case.gradcheck_closure(), diff_inputs, **options, **case.gradcheck_args)
    except Exception as exc:
        raise case.failure(check, f"{type(exc).__name__}: {exc}") from exc


def _vmap_skip_reason(case: _Case) -> Optional[str]:
    if not core.HAS_TORCH_FUNC:
        return f"torch {torch.__version__} has no torch.func (needs torch >= 2.0)"
    if not case.is_class:
        return "not a Function class"
    if not (getattr(case.fn, "generate_vmap_rule", False) or case.defines("vmap")):
        return f"{case.name} has neither generate_vmap_rule = True nor a vmap staticmethod"
    if compatfn.mode(case.fn) == "legacy":
        return "torch.func needs the setup_context style; this class runs on the legacy path"
    return None


def _vmap_matches_loop(case: _Case) -> None:
    """vmap of the call, and of ``torch.func.grad`` of it, over a batch of two equals a loop."""
    inputs, name = case.inputs, case.name
    tensor_pos = [i for i, v in _tensors(inputs)]
    if not tensor_pos:
        raise case.failure("vmap", "no tensor input to batch over")
    base = [v.detach() if isinstance(v, torch.Tensor) else v for v in inputs]
    # Batch of two: the inputs and a permutation of their values (same kink-free value set).
    second = list(base)
    for i in tensor_pos:
        t = base[i]
        flat = t.reshape(-1)
        second[i] = flat.flip(0).reshape(t.shape) if flat.numel() else t
    batched = [
        torch.stack([base[i], second[i]]) if i in tensor_pos else base[i] for i in range(len(base))
    ]
    in_dims = tuple(0 if i in tensor_pos else None for i in range(len(base)))
    close = _Comparison(name, "vmap", exact=False, rtol=case.rtol, atol=case.atol)

    def call(*values: Any) -> Any:
        return case.fn.apply(*values, **case.kwargs)

    try:
        got = torch.func.vmap(call, in_dims=in_dims)(*batched)
    except Exception as exc:
        raise case.failure("vmap", f"{type(exc).__name__}: {exc}") from exc
    expect = [call(*base), call(*second)]
    if isinstance(expect[0], (tuple, list)):
        expect_b: Any = [torch.stack([a, b]) for a, b in zip(expect[0], expect[1])]
    else:
        expect_b = torch.stack(expect)
    close.check("vmap outputs vs loop", got, expect_b)

    diff = [i for i in _diff_inputs(inputs) if inputs[i].is_floating_point()]
    if not diff:
        return

    def total(*values: Any) -> torch.Tensor:
        out = call(*values)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        acc = sum(
            (o * _weights(o)).sum()
            for o in outs
            if isinstance(o, torch.Tensor) and o.is_floating_point()
        )
        return acc  # type: ignore[return-value]

    grad_fn = torch.func.grad(total, argnums=tuple(diff))
    try:
        got_g = torch.func.vmap(grad_fn, in_dims=in_dims)(*batched)
    except Exception as exc:
        raise case.failure("vmap", f"vmap(grad): {type(exc).__name__}: {exc}") from exc
    loop = [grad_fn(*base), grad_fn(*second)]
    expect_g = [torch.stack([a, b]) for a, b in zip(loop[0], loop[1])]
    close.check("vmap(grad) vs loop", list(got_g), expect_g)


def _compiled_matches_eager(case: _Case, target: Callable[..., Any], label: str) -> Optional[str]:
    """Compile ``target`` and compare with eager; raise ``AssertionError`` on a failure.

    Returns a skip reason instead where the failure is a limitation of this torch that the same
    ctx feature in a plain-torch Function reproduces (see :func:`_torch_ctx_limitation`), and
    ``None`` when the check ran.
    """
    backend = case.compile_backend
    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    compiled = torch.compile(target, fullgraph=True, backend=backend)
    try:
        got_out, got_grads, _ = _run(compiled, case.inputs, case.kwargs)
    except Exception as exc:
        why = _torch_ctx_limitation(exc, backend)
        if why:
            return f"{why}; compiling {label}({case.name}) failed the same way"
        raise case.failure(
            "compile", f"{label} with backend={backend!r}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        dynamo.reset()
    exp_out, exp_grads, _ = _run(target, case.inputs, case.kwargs)
    close = _Comparison(case.name, "compile", exact=False, rtol=case.rtol, atol=case.atol)
    close.check(f"compiled {label} outputs", got_out, exp_out)
    close.check(f"compiled {label} gradients", got_grads, exp_grads)
    return None


# --------------------------------------------------------------------------- inputs and results


def _is_function_class(fn: Any) -> bool:
    return isinstance(fn, type) and issubclass(fn, torch.autograd.Function)


_ONCE_CODE = getattr(
    torch.autograd.function.once_differentiable(lambda ctx, *grads: None), "__code__", None
)


def _once_differentiable(cls: type) -> bool:
    """Whether ``backward`` is wrapped by ``@once_differentiable`` (through any wrapper chain)."""
    fn: Any = inspect.getattr_static(cls, "backward", None)
    fn = getattr(fn, "__func__", fn)
    for _ in range(16):
        if fn is None:
            return False
        if getattr(fn, "__code__", None) is _ONCE_CODE:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _tensors(values: Sequence[Any]) -> List[Tuple[int, torch.Tensor]]:
    return [(i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)]


def _diff_inputs(values: Sequence[Any]) -> List[int]:
    return [i for i, v in _tensors(values) if v.requires_grad]


def _fresh(values: Sequence[Any], dtype: Optional[torch.dtype] = None) -> List[Any]:
    """Detached copies (same requires_grad); floating tensors cast to ``dtype`` if given."""
    out: List[Any] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            if dtype is not None and (c.is_floating_point() or c.is_complex()):
                c = c.to(torch.complex128 if c.is_complex() else dtype)
            out.append(c.requires_grad_(v.requires_grad))
        else:
            out.append(v)
    return out


def _leaves_and_arguments(values: Sequence[Any]) -> Tuple[List[Any], List[Any]]:
    """Fresh leaf copies of ``values`` and the arguments to call with: clones of the leaves that
    require grad (in-place Functions must not get a leaf), the other values as they are."""
    leaves = _fresh(values)
    used = [v.clone() if isinstance(v, torch.Tensor) and v.requires_grad else v for v in leaves]
    return leaves, used


def _run(
    call: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Tuple[Any, List[Optional[torch.Tensor]], List[Any]]:
    """Call on fresh inputs; return the outputs, the gradients of ``sum(output * weights)`` w.r.t.
    the differentiable inputs, and the arguments the call got."""
    leaves, used = _leaves_and_arguments(args)
    out = call(*used, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [leaves[i] for i in _diff_inputs(leaves)]
    grads: List[Optional[torch.Tensor]] = []
    if diff and wrt:
        gens = [_weights(o) for o in diff]
        grads = list(torch.autograd.grad(diff, wrt, gens, allow_unused=True))
    return out, grads, used


def _weights(t: torch.Tensor) -> torch.Tensor:
    """Deterministic, non-constant output weights (no RNG: the caller's seed stays untouched)."""
    n = t.numel()
    w = torch.arange(n, dtype=torch.float64, device=t.device).remainder(7).sub(3.0).add(0.5)
    return w.reshape(t.shape).to(t.dtype)


def _failure(name: str, check: str, detail: str) -> AssertionError:
    """The error for a failed check: ``check_function(Name) failed [check] on torch X: ...``."""
    return AssertionError(
        f"check_function({name}) failed [{check}] on torch {torch.__version__}: {detail}"
    )


@dataclass
class _Comparison:
    """Compares results for one check of one Function: bit for bit (``exact``, NaN equal to NaN)
    or with ``rtol``/``atol``; raises the check's failure on the first difference."""

    name: str
    check_name: str
    exact: bool
    rtol: float = 1e-5
    atol: float = 1e-6

    def check(self, what: str, a: Any, b: Any) -> None:
        """Compare ``a`` and ``b`` (tensors, other values, or sequences of them)."""
        if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
            a_seq = list(a) if isinstance(a, (tuple, list)) else [a]
            b_seq = list(b) if isinstance(b, (tuple, list)) else [b]
            if len(a_seq) != len(b_seq):
                raise self._failure(f"{what}: {len(a_seq)} vs {len(b_seq)} values")
            for k, (x, y) in enumerate(zip(a_seq, b_seq)):
                self.check(f"{what}[{k}]", x, y)
            return
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if a is None and b is None:
                return
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
                raise self._failure(f"{what}: {a!r} != {b!r}")
            return
        if a.shape != b.shape or a.dtype != b.dtype:
            raise self._failure(
                f"{what}: shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
            )
        a_, b_ = a.detach(), b.detach()
        if not self._tensors_match(a_, b_):
            diff = (a_.double() - b_.double()).abs()
            finite = diff[~torch.isnan(diff)]
            worst = float(finite.max()) if finite.numel() else float("nan")
            tolerance = (
                "exact match required" if self.exact else f"rtol={self.rtol}, atol={self.atol}"
            )
            raise self._failure(f"{what} differ (max abs difference {worst:g}; {tolerance})")

    def _tensors_match(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        if self.exact:
            same = a == b
            if a.is_floating_point() or a.is_complex():
                same = same | (torch.isnan(a) & torch.isnan(b))
            return bool(same.all())
        low = (torch.float16, torch.bfloat16)
        return torch.allclose(
            a.double() if a.dtype in low else a,
            b.double() if b.dtype in low else b,
            rtol=self.rtol,
            atol=self.atol,
            equal_nan=True,
        )

    def _failure(self, detail: str) -> AssertionError:
        return _failure(self.name, self.check_name, detail)


# --------------------------------------------------------------------------- compile probes
#
# Some torch releases cannot compile a Function that uses a given ctx method at all (torch 2.1's
# dynamo refuses to inline ``FunctionCtx.set_materialize_grads`` and ``FunctionCtx.mark_dirty``:
# "Unsupported: inline in skipfiles"). check_function skips its compile check for that reason
# only when a minimal plain-torch Function -- legacy form, no compatfn -- using the same ctx
# method fails to compile with the same exception type naming the same method on the running
# torch. Anything else stays a failure, so a compatfn bug cannot hide behind a torch limitation.
# Only :func:`_read_dynamo_failure` reads the text of dynamo's messages (tests/test_testing.py
# feeds it the real ones of the torch at hand).


class _PlainSetMaterializeGrads(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.set_materialize_grads(False)
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:  # type: ignore[override]
        return None if grad is None else grad * 2


class _PlainMarkDirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad * 2


class _PlainMarkNonDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        mask = x > 0
        ctx.mark_non_differentiable(mask)
        return x * 2, mask

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: Any) -> torch.Tensor:  # type: ignore[override]
        return grad * 2


#: ctx method -> a minimal plain-torch (legacy-form) Function whose forward uses it.
_PLAIN_CTX_PROBES: Dict[str, Any] = {
    "set_materialize_grads": _PlainSetMaterializeGrads,
    "mark_dirty": _PlainMarkDirty,
    "mark_non_differentiable": _PlainMarkNonDifferentiable,
}


class _DynamoFailure(NamedTuple):
    """What check_function needs to know about an exception raised while compiling."""

    error: str
    """The exception's type name, e.g. ``"Unsupported"``."""
    headline: str
    """The first line of its message, without dynamo's preamble and source paths."""
    ctx_methods: Tuple[str, ...]
    """The ctx methods of :data:`_PLAIN_CTX_PROBES` that the headline names."""


_CTX_METHOD_RE = re.compile(r"\b(" + "|".join(_PLAIN_CTX_PROBES) + r")\b")


def _read_dynamo_failure(exc: BaseException) -> _DynamoFailure:
    """Read an exception raised while compiling: the only code that parses dynamo's message text.

    Handles the wrapped form of torch 2.1-2.3 (``speculate_subgraph: ... The reason was: <cause>``)
    and the source location dynamo appends (``inline in skipfiles: FunctionCtx.x  | x /path``).

    Example::

        >>> error = RuntimeError("inline in skipfiles: FunctionCtx.mark_dirty  | mark_dirty /p.py")
        >>> _read_dynamo_failure(error).ctx_methods
        ('mark_dirty',)
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    text = text.split("The reason was: ")[-1]
    headline = text.split(" | ")[0].strip()
    methods = tuple(dict.fromkeys(_CTX_METHOD_RE.findall(headline)))
    return _DynamoFailure(type(exc).__name__, headline, methods)


#: (ctx method, backend) -> None if the plain probe compiled and ran, else how it failed. Filled on
#: first use; one probe per process and backend.
_PLAIN_PROBE_RESULTS: Dict[Tuple[str, str], Optional[_DynamoFailure]] = {}


def _plain_compile_failure(feature: str, backend: str) -> Optional[_DynamoFailure]:
    """Compile (``fullgraph=True``) and run fwd+bwd of the plain-torch probe for ``feature``.

    Returns ``None`` when it works, else how it failed. Cached per (feature, backend).
    """
    key = (feature, backend)
    if key not in _PLAIN_PROBE_RESULTS:
        try:
            _compile_plain_probe(_PLAIN_CTX_PROBES[feature], backend)
            _PLAIN_PROBE_RESULTS[key] = None
        except Exception as exc:
            _PLAIN_PROBE_RESULTS[key] = _read_dynamo_failure(exc)
    return _PLAIN_PROBE_RESULTS[key]


def _compile_plain_probe(probe: Any, backend: str) -> None:
    """Compile ``probe.apply`` with ``fullgraph=True`` and run forward and backward once."""

    def call(x: torch.Tensor) -> Any:
        return probe.apply(x)

    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    try:
        leaf = torch.tensor([-1.0, 2.0], dtype=torch.float64, requires_grad=True)
        out = torch.compile(call, fullgraph=True, backend=backend)(leaf.clone())
        first = out[0] if isinstance(out, (tuple, list)) else out
        torch.autograd.grad(first.sum(), leaf)
    finally:
        dynamo.reset()


def _torch_ctx_limitation(exc: BaseException, backend: str) -> Optional[str]:
    """A skip reason if ``exc`` (from compiling a Function) is a limitation of this torch.

    That is: its message names a ctx method, and the plain-torch probe using that method fails
    to compile here with the same exception type and a message naming the same method.
    """
    ours = _read_dynamo_failure(exc)
    for feature in ours.ctx_methods:
        plain = _plain_compile_failure(feature, backend)
        if plain is None:
            continue  # the plain Function compiles: not a torch limitation
        if plain.error == ours.error and feature in plain.ctx_methods:
            return (
                f"torch {torch.__version__} cannot torch.compile (fullgraph=True, "
                f"backend={backend!r}) any autograd.Function that calls ctx.{feature}, not "
                f"even a plain legacy-form one without compatfn ({plain.error}: {plain.headline})"
            )
    return None


# --------------------------------------------------------------------------- saved_bytes


def _storage_key_and_bytes(t: torch.Tensor) -> Tuple[Tuple[str, int], int]:
    if hasattr(t, "untyped_storage"):
        s = t.untyped_storage()
        return (str(t.device), s.data_ptr()), s.nbytes()
    s = t.storage()  # torch < 2.0: typed storage, size in elements
    return (str(t.device), s.data_ptr()), s.size() * t.element_size()


def _has_saved_tensors_hooks() -> bool:
    graph = getattr(torch.autograd, "graph", None)
    return hasattr(graph, "saved_tensors_hooks")


def saved_bytes(fn: Any, *inputs: Any, **kwargs: Any) -> int:
    """Bytes one call of ``fn`` keeps alive for backward (distinct storages, counted once).

    Example::

        >>> x = torch.randn(1000, requires_grad=True)
        >>> saved_bytes(compatfn.relu.BitReLU, x)
        125

    ``fn`` is a Function class (its ``apply`` is called) or any callable; give the inputs
    ``requires_grad=True`` (nothing is saved otherwise). Measured with
    ``torch.autograd.graph.saved_tensors_hooks`` (torch >= 1.10), which sees every tensor saved
    by every op of the call; tensors stashed as plain ctx attributes are invisible to it. On older
    torch only a Function's own ``save_for_backward`` can be measured (the output's ``grad_fn``
    must be that Function); otherwise ``RuntimeError`` says so.
    """
    call = fn.apply if _is_function_class(fn) else fn
    if _has_saved_tensors_hooks():
        seen: Dict[Tuple[str, int], int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            key, nbytes = _storage_key_and_bytes(t)
            seen[key] = nbytes
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = call(*inputs, **kwargs)
        del out
        return sum(seen.values())
    out = call(*inputs, **kwargs)
    first = out[0] if isinstance(out, (tuple, list)) else out
    node = getattr(first, "grad_fn", None)
    if node is None:
        return 0
    if not hasattr(node, "saved_tensors"):
        raise RuntimeError(
            f"saved_bytes: torch {torch.__version__} has no saved_tensors_hooks (torch >= 1.10), "
            f"and the output's grad_fn {type(node).__name__} is a built-in op whose saved "
            "tensors cannot be inspected here"
        )
    seen_old: Dict[Tuple[str, int], int] = {}
    for t in node.saved_tensors:
        if t is not None:
            key, nbytes = _storage_key_and_bytes(t)
            seen_old[key] = nbytes
    return sum(seen_old.values())


# --------------------------------------------------------------------------- custom operators
# ``opcheck`` lives in compatfn.library (torch's own on torch >= 2.4, compatfn's subset before).
# check_function takes an op made by compatfn.custom_op as the plain callable it is.
from compatfn.library import opcheck  # noqa: E402

__all__ += ["opcheck"]
