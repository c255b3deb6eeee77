"""Test helpers for downstream suites: prove a Function correct on the torch you run.

* :func:`check_function` runs gradcheck, gradgradcheck, forward-mode AD, native-vs-legacy parity,
  ``torch.func.vmap``, ``torch.compile`` and ``torch.export`` -- each where it applies and the
  running torch supports it -- and returns a :class:`CheckReport` saying what ran and why
  anything was skipped.
* :func:`saved_bytes` measures what one call keeps alive for backward.

Example::

    import torch, compatfn.testing
    from compatfn.relu import MaskReLU

    x = torch.randn(10, dtype=torch.double, requires_grad=True)
    report = compatfn.testing.check_function(MaskReLU, x)
    print(report)  # ran: forward, gradcheck, gradgradcheck, ...; skipped: jvp (...)

Layout: the public API is here (:func:`check_function` with its report, :func:`saved_bytes`, and
:func:`opcheck` from :mod:`compatfn.library`); ``_case`` holds one call's inputs and how they are
run, ``_checks`` the checks (one small function each, registered by name with ``@_check``),
``_compare`` how results are compared, ``_compile_probes`` the torch.compile probes (with the one
function that reads dynamo's messages), ``_call_styles`` the ways users call a Function and the
plain-torch control, ``_export`` the ``export`` check's exporting. Torch facts come from
:mod:`compatfn.core`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from compatfn import core
from compatfn.library import opcheck
from compatfn.testing._case import Case, is_function_class
from compatfn.testing._checks import REGISTRY

__all__ = ["CHECKS", "CheckReport", "check_function", "opcheck", "saved_bytes"]

#: Every check :func:`check_function` knows, in the order it runs them.
CHECKS = (
    "forward",
    "gradcheck",
    "gradgradcheck",
    "forward_ad",
    "parity",
    "vmap",
    "compile",
    "export",
)


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
    * ``compile``: ``torch.compile(fullgraph=True, backend=compile_backend)`` of a function
      calling ``fn.apply(...)`` directly, and of ``compatfn.functional(fn)``, matches eager, in
      each call style the inputs allow: as given, with the defaults left out, with keywords,
      with a keyword that skips a default. Skipped, with the reason, only where the failure
      names a ctx method (``set_materialize_grads``, ``mark_dirty``,
      ``mark_non_differentiable``) and a minimal plain-torch Function (legacy form, no
      compatfn) using that method fails to compile the same way on the running torch (e.g.
      torch 2.1); a call style, only where a plain-torch Function with forward's parameters
      fails to compile that call with the same exception (``"compile (call styles)"``). Any
      other failure is a failure.
    * ``export``: ``torch.export.export`` of a module calling ``fn.apply(...)`` directly, strict
      and non-strict where this torch has both, on copies of the inputs that do not require
      grad, matches eager, in the same call styles. Skipped, with the reason, only where a
      plain-torch Function (legacy form, no compatfn) with forward's parameters, or one using a
      ctx method the failure names, fails to export the same way; any other failure is a
      failure.

    ``fn`` is a Function class; a plain callable (e.g. a functional wrapper) gets the checks that
    need no class. Inputs that should get gradients need ``requires_grad=True``; pick values away
    from kinks for the numerical checks. Raises ``AssertionError`` naming the Function and the
    check on the first failure; returns a :class:`CheckReport` otherwise.
    """
    if is_function_class(fn):
        core.mode(fn)  # the TypeError for an undecorated class, first and on every torch
    wanted = list(CHECKS) if checks is None else list(checks)
    unknown = [c for c in wanted if c not in CHECKS]
    if unknown:
        raise ValueError(f"check_function: unknown checks {unknown}; known: {list(CHECKS)}")
    case = Case(
        fn,
        inputs,
        dict(kwargs or {}),
        gradcheck_dtype,
        dict(eps=eps, atol=atol, rtol=rtol, raise_exception=True),
        compile_backend,
    )
    report = CheckReport(function=case.name, torch_version=str(torch.__version__))
    for name in CHECKS:
        why = REGISTRY[name](case) if name in wanted else "not requested (checks=...)"
        if why is None:
            report.ran.append(name)
        else:
            report.skipped[name] = why
        report.skipped.update(case.notes)
        case.notes.clear()
    return report


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
    call = fn.apply if is_function_class(fn) else fn
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
