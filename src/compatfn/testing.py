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
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

import compatfn

__all__ = ["CHECKS", "CheckReport", "check_function", "saved_bytes"]

#: Every check :func:`check_function` knows, in the order it runs them.
CHECKS = ("forward", "gradcheck", "gradgradcheck", "forward_ad", "parity", "vmap", "compile")


@dataclass
class CheckReport:
    """What :func:`check_function` did: ``ran`` (check names) and ``skipped`` (name -> reason)."""

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


def _torch_version() -> Tuple[int, int]:
    parts = str(torch.__version__).split("+")[0].split(".")
    return int(parts[0]), int(parts[1])


def _is_function_class(fn: Any) -> bool:
    return isinstance(fn, type) and issubclass(fn, torch.autograd.Function)


def _defines(cls: type, name: str) -> bool:
    """Whether ``cls`` (not torch's own base classes) defines ``name``."""
    for klass in cls.__mro__:
        if klass.__module__.startswith("torch.") or klass.__module__ == "torch":
            return False
        if name in vars(klass):
            return True
    return False


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


def _fail(name: str, check: str, detail: str) -> AssertionError:
    return AssertionError(
        f"check_function({name}) failed [{check}] on torch {torch.__version__}: {detail}"
    )


def _assert_same(
    name: str,
    check: str,
    what: str,
    a: Any,
    b: Any,
    exact: bool,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        a_seq = list(a) if isinstance(a, (tuple, list)) else [a]
        b_seq = list(b) if isinstance(b, (tuple, list)) else [b]
        if len(a_seq) != len(b_seq):
            raise _fail(name, check, f"{what}: {len(a_seq)} vs {len(b_seq)} values")
        for k, (x, y) in enumerate(zip(a_seq, b_seq)):
            _assert_same(name, check, f"{what}[{k}]", x, y, exact, rtol, atol)
        return
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        if a is None and b is None:
            return
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
            raise _fail(name, check, f"{what}: {a!r} != {b!r}")
        return
    if a.shape != b.shape or a.dtype != b.dtype:
        raise _fail(
            name,
            check,
            f"{what}: shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}",
        )
    a_, b_ = a.detach(), b.detach()
    if exact:
        same = a_ == b_
        if a_.is_floating_point() or a_.is_complex():
            same = same | (torch.isnan(a_) & torch.isnan(b_))
        ok = bool(same.all())
    else:
        low = (torch.float16, torch.bfloat16)
        ok = torch.allclose(
            a_.double() if a_.dtype in low else a_,
            b_.double() if b_.dtype in low else b_,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
        )
    if not ok:
        diff = (a_.double() - b_.double()).abs()
        finite = diff[~torch.isnan(diff)]
        worst = float(finite.max()) if finite.numel() else float("nan")
        raise _fail(
            name,
            check,
            f"{what} differ (max abs difference {worst:g}; "
            f"{'exact match required' if exact else f'rtol={rtol}, atol={atol}'})",
        )


def _run(
    call: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Tuple[Any, List[Optional[torch.Tensor]], List[Any]]:
    """Call on fresh inputs (cloned, so in-place Functions work on non-leaves); return outputs and
    the gradients of ``sum(output * weights)`` w.r.t. the differentiable inputs."""
    leaves = _fresh(args)
    used = [v.clone() if isinstance(v, torch.Tensor) and v.requires_grad else v for v in leaves]
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


def _dynamo_unsupported_reason() -> Optional[str]:
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (needs torch >= 2.0)"
    try:
        from torch._dynamo.eval_frame import check_if_dynamo_supported
    except ImportError:  # pragma: no cover - layout changed
        return None
    try:
        check_if_dynamo_supported()
    except RuntimeError as exc:
        return f"torch.compile unsupported here: {exc}"
    return None


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

    Example::

        >>> x = torch.randn(8, dtype=torch.double, requires_grad=True)
        >>> check_function(compatfn.relu.ClippedReLU, x, 2.0).ran[:2]
        ['forward', 'gradcheck']
    """
    is_cls = _is_function_class(fn)
    name = fn.__name__ if hasattr(fn, "__name__") else repr(fn)
    kwargs = dict(kwargs or {})
    wanted = list(CHECKS) if checks is None else list(checks)
    unknown = [c for c in wanted if c not in CHECKS]
    if unknown:
        raise ValueError(f"check_function: unknown checks {unknown}; known: {list(CHECKS)}")
    report = CheckReport(function=name, torch_version=str(torch.__version__))
    call: Callable[..., Any] = fn.apply if is_cls else fn
    diff = _diff_inputs(inputs)

    def skip(check: str, why: str) -> None:
        report.skipped[check] = why

    def want(check: str) -> bool:
        if check not in wanted:
            skip(check, "not requested (checks=...)")
            return False
        return True

    def closure(call_: Callable[..., Any]) -> Callable[..., Any]:
        # gradcheck passes the differentiable inputs only; in-place Functions need non-leaves.
        def f(*diff_values: torch.Tensor) -> Any:
            values = list(gc_inputs)
            for i, v in zip(diff, diff_values):
                values[i] = v.clone()
            return call_(*values, **kwargs)

        return f

    gc_inputs = _fresh(inputs, gradcheck_dtype)
    gc_diff = [gc_inputs[i] for i in diff]
    gc_args: Dict[str, Any] = dict(eps=eps, atol=atol, rtol=rtol, raise_exception=True)

    # forward ------------------------------------------------------------------------------
    if want("forward"):
        leaves = _fresh(inputs)
        used = [v.clone() if isinstance(v, torch.Tensor) and v.requires_grad else v for v in leaves]
        versions = {i: v._version for i, v in _tensors(used)}
        try:
            out = call(*used, **kwargs)
        except Exception as exc:
            raise _fail(name, "forward", f"{type(exc).__name__}: {exc}") from exc
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for i, v in _tensors(used):
            if v._version != versions[i] and not any(o is v for o in outs):
                raise _fail(
                    name,
                    "forward",
                    f"input {i} was modified in place but not returned "
                    "(an in-place forward must return the input and "
                    "call ctx.mark_dirty on it)",
                )
        report.ran.append("forward")

    # gradcheck / gradgradcheck -------------------------------------------------------------
    if want("gradcheck"):
        if not diff:
            skip("gradcheck", "no input has requires_grad=True")
        else:
            try:
                torch.autograd.gradcheck(closure(call), tuple(gc_diff), **gc_args)
            except Exception as exc:
                raise _fail(name, "gradcheck", f"{type(exc).__name__}: {exc}") from exc
            report.ran.append("gradcheck")
    if want("gradgradcheck"):
        if not diff:
            skip("gradgradcheck", "no input has requires_grad=True")
        elif is_cls and _once_differentiable(fn):
            skip("gradgradcheck", "backward is @once_differentiable")
        else:
            try:
                torch.autograd.gradgradcheck(closure(call), tuple(gc_diff), **gc_args)
            except Exception as exc:
                raise _fail(name, "gradgradcheck", f"{type(exc).__name__}: {exc}") from exc
            report.ran.append("gradgradcheck")

    # forward-mode AD ----------------------------------------------------------------------
    if want("forward_ad"):
        has_fwd = "check_forward_ad" in inspect.signature(torch.autograd.gradcheck).parameters
        if not is_cls:
            skip("forward_ad", "not a Function class (cannot tell whether jvp is defined)")
        elif not _defines(fn, "jvp"):
            skip("forward_ad", f"{name} defines no jvp")
        elif not diff:
            skip("forward_ad", "no input has requires_grad=True")
        elif (
            not has_fwd
            or not hasattr(torch.autograd.function, "FunctionCtx")
            or not hasattr(torch.autograd.function.FunctionCtx, "save_for_forward")
        ):
            skip(
                "forward_ad",
                f"torch {torch.__version__} has no forward-mode AD for custom "
                "Functions (save_for_forward/jvp: torch >= 1.11)",
            )
        else:
            try:
                torch.autograd.gradcheck(
                    closure(call),
                    tuple(gc_diff),
                    check_forward_ad=True,
                    check_backward_ad=False,
                    check_undefined_grad=False,
                    check_batched_grad=False,
                    **gc_args,
                )
            except Exception as exc:
                raise _fail(name, "forward_ad", f"{type(exc).__name__}: {exc}") from exc
            report.ran.append("forward_ad")

    # native vs legacy ---------------------------------------------------------------------
    if want("parity"):
        mode = compatfn.mode(fn) if is_cls else None
        if not is_cls:
            skip("parity", "not a Function class")
        elif mode != "native":
            why = (
                "torch < 2.0 has only the legacy path"
                if _torch_version() < (2, 0)
                else "it runs on the legacy path (legacy=True or COMPATFN_LEGACY=1)"
            )
            skip("parity", f"{name} has no native path to compare: {why}")
        else:
            twin = compatfn.as_legacy(fn)
            native_out, native_grads, _ = _run(fn.apply, inputs, kwargs)
            legacy_out, legacy_grads, _ = _run(twin.apply, inputs, kwargs)
            _assert_same(
                name, "parity", "outputs (native vs legacy)", native_out, legacy_out, exact=True
            )
            _assert_same(
                name,
                "parity",
                "gradients (native vs legacy)",
                native_grads,
                legacy_grads,
                exact=True,
            )
            report.ran.append("parity")

    # torch.func.vmap ----------------------------------------------------------------------
    if want("vmap"):
        vmap_why = _vmap_skip_reason(fn, is_cls, name)
        if vmap_why:
            skip("vmap", vmap_why)
        else:
            _check_vmap(fn, name, inputs, kwargs, rtol, atol)
            report.ran.append("vmap")

    # torch.compile ------------------------------------------------------------------------
    if want("compile"):
        compile_why = _dynamo_unsupported_reason()
        if compile_why is None and is_cls and _defines(fn, "jvp"):
            compile_why = "torch.compile (dynamo) does not trace Functions that define a custom jvp"
        if compile_why:
            skip("compile", compile_why)
        else:
            targets: List[Tuple[str, Callable[..., Any]]] = [
                ("compatfn.functional", compatfn.functional(fn) if is_cls else fn)
            ]
            if is_cls and _torch_version() >= (2, 4):
                targets.append(("apply", fn.apply))
            limitation = None
            for label, target in targets:
                limitation = _check_compile(
                    target, name, label, inputs, kwargs, compile_backend, rtol, atol
                )
                if limitation:  # a torch limitation, proven by the plain-torch probe
                    break
            if limitation:
                skip("compile", limitation)
            else:
                report.ran.append("compile")
            if is_cls and _torch_version() < (2, 4):
                report.skipped["compile(apply)"] = (
                    "direct Fn.apply of setup_context Functions compiles from torch 2.4 "
                    "(pytorch #118397); compatfn.functional(Fn) was compiled instead"
                )
    return report


def _vmap_skip_reason(fn: Any, is_cls: bool, name: str) -> Optional[str]:
    if not hasattr(torch, "func") or not hasattr(torch.func, "vmap"):
        return f"torch {torch.__version__} has no torch.func (needs torch >= 2.0)"
    if not is_cls:
        return "not a Function class"
    if not (getattr(fn, "generate_vmap_rule", False) or _defines(fn, "vmap")):
        return f"{name} has neither generate_vmap_rule = True nor a vmap staticmethod"
    if compatfn.mode(fn) != "native":
        return "torch.func needs the native setup_context path; this class runs legacy"
    return None


def _check_vmap(
    fn: Any, name: str, inputs: Sequence[Any], kwargs: Mapping[str, Any], rtol: float, atol: float
) -> None:
    if _torch_version() == (2, 3):
        # pytorch #128607: on 2.3.x the first transform in a fresh process fails otherwise.
        importlib.import_module("torch._dynamo")

    tensor_pos = [i for i, v in _tensors(inputs)]
    if not tensor_pos:
        raise _fail(name, "vmap", "no tensor input to batch over")
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

    def call(*values: Any) -> Any:
        return fn.apply(*values, **kwargs)

    try:
        got = torch.func.vmap(call, in_dims=in_dims)(*batched)
    except Exception as exc:
        raise _fail(name, "vmap", f"{type(exc).__name__}: {exc}") from exc
    expect = [call(*base), call(*second)]
    if isinstance(expect[0], (tuple, list)):
        expect_b: Any = [torch.stack([a, b]) for a, b in zip(expect[0], expect[1])]
    else:
        expect_b = torch.stack(expect)
    _assert_same(
        name, "vmap", "vmap outputs vs loop", got, expect_b, exact=False, rtol=rtol, atol=atol
    )

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
        raise _fail(name, "vmap", f"vmap(grad): {type(exc).__name__}: {exc}") from exc
    loop = [grad_fn(*base), grad_fn(*second)]
    expect_g = [torch.stack([a, b]) for a, b in zip(loop[0], loop[1])]
    _assert_same(
        name, "vmap", "vmap(grad) vs loop", list(got_g), expect_g, exact=False, rtol=rtol, atol=atol
    )


def _check_compile(
    target: Callable[..., Any],
    name: str,
    label: str,
    inputs: Sequence[Any],
    kwargs: Mapping[str, Any],
    backend: str,
    rtol: float,
    atol: float,
) -> Optional[str]:
    """Compile ``target`` and compare with eager; raise ``AssertionError`` on a failure.

    Returns a skip reason instead where the failure is a limitation of this torch that the same
    ctx feature in a plain-torch Function reproduces (see :func:`_torch_ctx_limitation`), and
    ``None`` when the check ran.
    """
    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    compiled = torch.compile(target, fullgraph=True, backend=backend)
    try:
        got_out, got_grads, _ = _run(compiled, inputs, kwargs)
    except Exception as exc:
        why = _torch_ctx_limitation(exc, backend)
        if why:
            return f"{why}; compiling {label}({name}) failed the same way"
        raise _fail(
            name, "compile", f"{label} with backend={backend!r}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        dynamo.reset()
    exp_out, exp_grads, _ = _run(target, inputs, kwargs)
    _assert_same(
        name,
        "compile",
        f"compiled {label} outputs",
        got_out,
        exp_out,
        exact=False,
        rtol=rtol,
        atol=atol,
    )
    _assert_same(
        name,
        "compile",
        f"compiled {label} gradients",
        got_grads,
        exp_grads,
        exact=False,
        rtol=rtol,
        atol=atol,
    )
    return None


# --------------------------------------------------------------------------- compile probes
#
# Some torch releases cannot compile a Function that uses a given ctx method at all (torch 2.1's
# dynamo refuses to inline ``FunctionCtx.set_materialize_grads`` and ``FunctionCtx.mark_dirty``:
# "Unsupported: inline in skipfiles"). check_function skips its compile check for that reason
# only when a minimal plain-torch Function -- legacy form, no compatfn -- using the same ctx
# method fails to compile with the same exception type naming the same method on the running
# torch. Anything else stays a failure, so a compatfn bug cannot hide behind a torch limitation.


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
_CTX_FEATURE_RE = re.compile(r"\b(" + "|".join(_PLAIN_CTX_PROBES) + r")\b")

#: (ctx method, backend) -> None if the plain probe compiled and ran, else (exception type
#: name, first line of its message). Filled on first use; one probe per process and backend.
_PLAIN_PROBE_RESULTS: Dict[Tuple[str, str], Optional[Tuple[str, str]]] = {}


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, without dynamo's preamble and source paths."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    text = text.split("The reason was: ")[-1]  # speculate_subgraph: ... The reason was: <cause>
    return text.split(" | ")[0].strip()  # "inline in skipfiles: FunctionCtx.x  | x /path/file.py"


def _plain_compile_failure(feature: str, backend: str) -> Optional[Tuple[str, str]]:
    """Compile (``fullgraph=True``) and run fwd+bwd of the plain-torch probe for ``feature``.

    Returns ``None`` when it works, else the exception's type name and first message line.
    Cached per (feature, backend).
    """
    key = (feature, backend)
    if key in _PLAIN_PROBE_RESULTS:
        return _PLAIN_PROBE_RESULTS[key]
    probe = _PLAIN_CTX_PROBES[feature]

    def call(x: torch.Tensor) -> Any:
        return probe.apply(x)

    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    result: Optional[Tuple[str, str]] = None
    try:
        leaf = torch.tensor([-1.0, 2.0], dtype=torch.float64, requires_grad=True)
        out = torch.compile(call, fullgraph=True, backend=backend)(leaf.clone())
        first = out[0] if isinstance(out, (tuple, list)) else out
        torch.autograd.grad(first.sum(), leaf)
    except Exception as exc:
        result = (type(exc).__name__, _first_line(exc))
    finally:
        dynamo.reset()
    _PLAIN_PROBE_RESULTS[key] = result
    return result


def _torch_ctx_limitation(exc: BaseException, backend: str) -> Optional[str]:
    """A skip reason if ``exc`` (from compiling a Function) is a limitation of this torch.

    That is: its message names a ctx method, and the plain-torch probe using that method fails
    to compile here with the same exception type and a message naming the same method.
    """
    text = _first_line(exc)
    for feature in dict.fromkeys(_CTX_FEATURE_RE.findall(text)):
        plain = _plain_compile_failure(feature, backend)
        if plain is None:
            continue  # the plain Function compiles: not a torch limitation
        plain_type, plain_text = plain
        if plain_type == type(exc).__name__ and feature in plain_text:
            return (
                f"torch {torch.__version__} cannot torch.compile (fullgraph=True, "
                f"backend={backend!r}) any autograd.Function that calls ctx.{feature}, not "
                f"even a plain legacy-form one without compatfn ({plain_type}: {plain_text})"
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

    ``fn`` is a Function class (its ``apply`` is called) or any callable; give the inputs
    ``requires_grad=True`` (nothing is saved otherwise). Measured with
    ``torch.autograd.graph.saved_tensors_hooks`` (torch >= 1.10), which sees every tensor saved
    by every op of the call; tensors stashed as plain ctx attributes are invisible to it. On older
    torch only a Function's own ``save_for_backward`` can be measured (the output's ``grad_fn``
    must be that Function); otherwise ``RuntimeError`` says so.

    Example::

        >>> x = torch.randn(1000, requires_grad=True)
        >>> saved_bytes(compatfn.relu.BitReLU, x)
        125
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
