"""The checks of :func:`~compatfn.testing.check_function`, one small function each, registered by
name with ``@_check`` in :data:`REGISTRY`, with the helpers only they use.

Example::

    >>> sorted(REGISTRY)[:3]
    ['compile', 'forward', 'forward_ad']
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

import compatfn
from compatfn import core
from compatfn.testing._call_styles import (
    CallStyle,
    call_styles,
    direct_apply,
    plain_control,
    plain_style_failure,
)
from compatfn.testing._case import (
    Case,
    diff_inputs,
    leaves_and_arguments,
    once_differentiable,
    run_with_grads,
    tensors,
    weights,
)
from compatfn.testing._compare import Comparison
from compatfn.testing._compile_probes import (
    ctx_methods_in_source,
    read_dynamo_failure,
    torch_ctx_limitation,
)
from compatfn.testing._export import export_modes, export_unsupported, exported_matches_eager

__all__ = ["REGISTRY"]


#: A check: raises ``AssertionError`` on a failure; returns ``None`` when it ran, else why not.
_CheckFn = Callable[[Case], Optional[str]]

#: check name -> the check, filled by ``@_check``; :func:`~compatfn.testing.check_function` runs
#: them in the order of :data:`~compatfn.testing.CHECKS`.
REGISTRY: Dict[str, _CheckFn] = {}


def _check(name: str) -> Callable[[_CheckFn], _CheckFn]:
    """Register the decorated function as the check ``name`` (one of ``testing.CHECKS``)."""

    def register(check: _CheckFn) -> _CheckFn:
        REGISTRY[name] = check
        return check

    return register


# --------------------------------------------------------------------------- the checks


@_check("forward")
def _check_forward(case: Case) -> Optional[str]:
    _, used = leaves_and_arguments(case.inputs)
    versions = {i: v._version for i, v in tensors(used)}
    try:
        out = case.call(*used, **case.kwargs)
    except Exception as exc:
        raise case.failure("forward", f"{type(exc).__name__}: {exc}") from exc
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for i, v in tensors(used):
        if v._version != versions[i] and not any(o is v for o in outs):
            raise case.failure(
                "forward",
                f"input {i} was modified in place but not returned "
                "(an in-place forward must return the input and "
                "call ctx.mark_dirty on it)",
            )
    return None


@_check("gradcheck")
def _check_gradcheck(case: Case) -> Optional[str]:
    if not case.diff:
        return "no input has requires_grad=True"
    _numerical(case, "gradcheck", torch.autograd.gradcheck)
    return None


@_check("gradgradcheck")
def _check_gradgradcheck(case: Case) -> Optional[str]:
    if not case.diff:
        return "no input has requires_grad=True"
    if case.is_class and once_differentiable(case.fn):
        return "backward is @once_differentiable"
    _numerical(case, "gradgradcheck", torch.autograd.gradgradcheck)
    return None


@_check("forward_ad")
def _check_forward_ad(case: Case) -> Optional[str]:
    if not case.is_class:
        return "not a Function class (cannot tell whether jvp is defined)"
    if not case.defines("jvp"):
        return f"{case.name} defines no jvp"
    if not case.diff:
        return "no input has requires_grad=True"
    if not core._CTX_HAS_SAVE_FOR_FORWARD:
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
def _check_parity(case: Case) -> Optional[str]:
    if not case.is_class:
        return "not a Function class"
    mode = compatfn.mode(case.fn)
    if mode != "native":
        if mode == "dual":
            why = "it takes the legacy form on this torch (mode 'dual'), as the legacy path does"
        elif not core._HAS_SETUP_CONTEXT:
            why = "torch < 2.0 has only the legacy path"
        else:
            why = "it runs on the legacy path (legacy=True or COMPATFN_LEGACY=1)"
        return f"{case.name} has no native path to compare: {why}"
    legacy = compatfn.as_legacy(case.fn)
    native_out, native_grads, _ = run_with_grads(case.fn.apply, case.inputs, case.kwargs)
    legacy_out, legacy_grads, _ = run_with_grads(legacy.apply, case.inputs, case.kwargs)
    same = Comparison(case.name, "parity", exact=True)
    same.check("outputs (native vs legacy)", native_out, legacy_out)
    same.check("gradients (native vs legacy)", native_grads, legacy_grads)
    return None


@_check("vmap")
def _check_vmap(case: Case) -> Optional[str]:
    why = _vmap_skip_reason(case)
    if why:
        return why
    core._prepare_torch_func()
    _vmap_matches_loop(case)
    return None


@_check("compile")
def _check_compile(case: Case) -> Optional[str]:
    why = core._dynamo_unsupported()
    if why is None and case.defines("jvp"):
        why = "torch.compile (dynamo) does not trace Functions that define a custom jvp"
    if why:
        return why
    targets: List[Tuple[str, Callable[..., Any]]] = [
        ("compatfn.functional", compatfn.functional(case.fn) if case.is_class else case.fn)
    ]
    if case.is_class:  # a direct Fn.apply compiles wherever a hand-written Function does
        targets.append(("apply", direct_apply(case.fn)))
    skipped: List[str] = []
    for style in call_styles(_user_signature(case), len(case.inputs), case.kwargs):
        for label, target in targets:
            limitation = _compiled_matches_eager(case, style, target, label)
            if limitation and style.label == "as given":
                return limitation  # a ctx method this torch cannot compile in any Function
            if limitation:
                skipped.append(limitation)
    if skipped:
        case.notes["compile (call styles)"] = "; ".join(dict.fromkeys(skipped))
    return None


@_check("export")
def _check_export(case: Case) -> Optional[str]:
    why = export_unsupported() or core._dynamo_unsupported()
    if why:
        return why
    modes = export_modes()
    if len(modes) == 1:
        case.notes["export (non-strict)"] = (
            f"torch {torch.__version__}'s torch.export.export has no strict= (always strict)"
        )
    if case.defines("jvp"):
        case.notes["export (strict)"] = "dynamo does not trace Functions that define a custom jvp"
        modes = [m for m in modes if m[0] != "strict"]
    target = direct_apply(case.fn) if case.is_class else case.fn
    signature = _user_signature(case)
    calls = _ctx_methods_of(case)
    close = Comparison(case.name, "export", exact=False, rtol=case.rtol, atol=case.atol)

    def fail(detail: str) -> AssertionError:
        return case.failure("export", detail)

    ran, skipped = False, []
    for mode in modes:
        for style in call_styles(signature, len(case.inputs), case.kwargs):
            why = exported_matches_eager(
                target, style, case.inputs, mode, signature, close.check, fail, calls
            )
            if why and style.label == "as given":
                case.notes[f"export ({mode[0]})"] = why
                break
            ran = ran or not why
            skipped += [why] if why else []
    if skipped:
        case.notes["export (call styles)"] = "; ".join(dict.fromkeys(skipped))
    return None if ran else "; ".join(case.notes.pop(k) for k in list(case.notes))


# --------------------------------------------------------------------------- check helpers


def _ctx_methods_of(case: Case) -> Callable[[], Tuple[str, ...]]:
    """The ctx methods the class's source calls, read at the first call (only after an export
    failed: see ``torch_limitation``)."""
    found: List[Tuple[str, ...]] = []

    def read() -> Tuple[str, ...]:
        if not found:
            found.append(ctx_methods_in_source(case.fn) if case.is_class else ())
        return found[0]

    return read


def _numerical(case: Case, check: str, run: Callable[..., Any], **options: Any) -> None:
    """``run`` (gradcheck or gradgradcheck) over the differentiable inputs; a failure names
    ``check``."""
    diff_values = tuple(case.gradcheck_inputs[i] for i in case.diff)
    try:
        run(case.gradcheck_closure(), diff_values, **options, **case.gradcheck_args)
    except Exception as exc:
        raise case.failure(check, f"{type(exc).__name__}: {exc}") from exc


def _vmap_skip_reason(case: Case) -> Optional[str]:
    if not core._HAS_TORCH_FUNC:
        return f"torch {torch.__version__} has no torch.func (needs torch >= 2.0)"
    if not case.is_class:
        return "not a Function class"
    if not (getattr(case.fn, "generate_vmap_rule", False) or case.defines("vmap")):
        return f"{case.name} has neither generate_vmap_rule = True nor a vmap staticmethod"
    if compatfn.mode(case.fn) == "legacy":
        return "torch.func needs the setup_context style; this class runs on the legacy path"
    return None


def _vmap_matches_loop(case: Case) -> None:
    """vmap of the call, and of ``torch.func.grad`` of it, over a batch of two equals a loop."""
    inputs, name = case.inputs, case.name
    tensor_pos = [i for i, v in tensors(inputs)]
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
    close = Comparison(name, "vmap", exact=False, rtol=case.rtol, atol=case.atol)

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

    diff = [i for i in diff_inputs(inputs) if inputs[i].is_floating_point()]
    if not diff:
        return

    def total(*values: Any) -> torch.Tensor:
        out = call(*values)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        acc = sum(
            (o * weights(o)).sum()
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


def _user_signature(case: Case) -> Optional[inspect.Signature]:
    """forward's parameters as users pass them (no ctx), for a decorated class; else None."""
    if not case.is_class:
        return None
    try:
        return inspect.signature(compatfn.functional(case.fn))
    except (TypeError, ValueError):  # not decorated, or no signature to read
        return None


def _compiled_matches_eager(
    case: Case, style: CallStyle, target: Callable[..., Any], label: str
) -> Optional[str]:
    """Compile ``target`` called in ``style`` and compare with eager; raise ``AssertionError``
    on a failure.

    Returns a skip reason instead where the failure is a limitation of this torch: the same ctx
    feature in a plain-torch Function fails the same way (see :func:`torch_ctx_limitation`), or,
    for a call style other than the one given, a plain-torch Function with the same signature
    fails to compile that call the same way (:func:`plain_style_failure`). ``None`` when it ran.
    """
    backend = case.compile_backend
    called = f"{label}({case.name}) called {style.label}"
    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    compiled = torch.compile(style.wrap(target), fullgraph=True, backend=backend)
    try:
        got_out, got_grads, _ = run_with_grads(compiled, case.inputs, {})
    except Exception as exc:
        why = torch_ctx_limitation(exc, backend) or _style_limitation(case, style, exc)
        if why:
            return f"{why}; compiling {called} failed the same way"
        raise case.failure(
            "compile", f"{called}, backend={backend!r}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        dynamo.reset()
    exp_out, exp_grads, _ = run_with_grads(style.wrap(target), case.inputs, {})
    close = Comparison(case.name, "compile", exact=False, rtol=case.rtol, atol=case.atol)
    close.check(f"compiled {called}: outputs", got_out, exp_out)
    close.check(f"compiled {called}: gradients", got_grads, exp_grads)
    return None


def _style_limitation(case: Case, style: CallStyle, exc: BaseException) -> Optional[str]:
    """A skip reason if a plain-torch legacy Function with forward's signature fails to compile
    the call in ``style`` with the same exception type; None (a failure) otherwise."""
    signature = _user_signature(case)
    if signature is None:
        return None
    control = plain_control(signature, case.inputs)
    plain = plain_style_failure(control, style, case.inputs, case.compile_backend)
    if plain is None or type(plain) is not type(exc):
        return None
    headline = read_dynamo_failure(plain).headline
    return (
        f"torch {torch.__version__} cannot torch.compile (fullgraph=True, "
        f"backend={case.compile_backend!r}) a plain legacy-form Function with the same "
        f"signature called {style.label} ({type(plain).__name__}: {headline})"
    )
