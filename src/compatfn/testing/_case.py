"""One :func:`~compatfn.testing.check_function` call (:class:`Case`) and the helpers that prepare
its inputs and run it: fresh copies, the differentiable positions, gradients of a weighted sum.

Example::

    >>> from compatfn.relu import ReLU
    >>> x = torch.ones(2, requires_grad=True)
    >>> case = Case(ReLU, (x,), {}, torch.float64, {"rtol": 1e-3, "atol": 1e-5}, "aot_eager")
    >>> case.diff, case.gradcheck_inputs[0].dtype
    ([0], torch.float64)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from compatfn import core
from compatfn.testing._compare import check_failure

__all__ = [
    "Case",
    "diff_inputs",
    "fresh",
    "is_function_class",
    "leaves_and_arguments",
    "once_differentiable",
    "run_with_grads",
    "tensors",
    "weights",
]


class Case:
    """One :func:`~compatfn.testing.check_function` call: the Function, its inputs, the settings."""

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
        self.is_class = is_function_class(fn)
        self.name: str = fn.__name__ if hasattr(fn, "__name__") else repr(fn)
        self.call: Callable[..., Any] = fn.apply if self.is_class else fn
        self.inputs = tuple(inputs)
        self.kwargs = kwargs
        self.diff = diff_inputs(inputs)
        """Positions of the inputs that require grad."""
        self.gradcheck_inputs = fresh(inputs, gradcheck_dtype)
        self.gradcheck_args = gradcheck_args
        self.rtol: float = gradcheck_args["rtol"]
        self.atol: float = gradcheck_args["atol"]
        self.compile_backend = compile_backend
        self.notes: Dict[str, str] = {}
        """Skipped parts of a check (name -> reason), reported after the check itself."""

    def defines(self, name: str) -> bool:
        """Whether the user's Function class defines ``name`` (``jvp``, ``vmap``)."""
        return self.is_class and core._defines(self.fn, name)

    def failure(self, check: str, detail: str) -> AssertionError:
        """The error :func:`~compatfn.testing.check_function` raises when ``check`` fails."""
        return check_failure(self.name, check, detail)

    def gradcheck_closure(self) -> Callable[..., Any]:
        """The call as a function of the differentiable inputs only (what gradcheck varies)."""

        def call(*diff_values: torch.Tensor) -> Any:
            values = list(self.gradcheck_inputs)
            for i, v in zip(self.diff, diff_values):
                values[i] = v.clone()  # in-place Functions need non-leaves
            return self.call(*values, **self.kwargs)

        return call


def is_function_class(fn: Any) -> bool:
    return isinstance(fn, type) and issubclass(fn, torch.autograd.Function)


_ONCE_CODE = getattr(
    torch.autograd.function.once_differentiable(lambda ctx, *grads: None), "__code__", None
)


def once_differentiable(cls: type) -> bool:
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


def tensors(values: Sequence[Any]) -> List[Tuple[int, torch.Tensor]]:
    return [(i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)]


def diff_inputs(values: Sequence[Any]) -> List[int]:
    return [i for i, v in tensors(values) if v.requires_grad]


def fresh(values: Sequence[Any], dtype: Optional[torch.dtype] = None) -> List[Any]:
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


def leaves_and_arguments(values: Sequence[Any]) -> Tuple[List[Any], List[Any]]:
    """Fresh leaf copies of ``values`` and the arguments to call with: clones of the leaves that
    require grad (in-place Functions must not get a leaf), the other values as they are."""
    leaves = fresh(values)
    used = [v.clone() if isinstance(v, torch.Tensor) and v.requires_grad else v for v in leaves]
    return leaves, used


def run_with_grads(
    call: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Tuple[Any, List[Optional[torch.Tensor]], List[Any]]:
    """Call on fresh inputs; return the outputs, the gradients of ``sum(output * weights)`` w.r.t.
    the differentiable inputs, and the arguments the call got."""
    leaves, used = leaves_and_arguments(args)
    out = call(*used, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [leaves[i] for i in diff_inputs(leaves)]
    grads: List[Optional[torch.Tensor]] = []
    if diff and wrt:
        gens = [weights(o) for o in diff]
        grads = list(torch.autograd.grad(diff, wrt, gens, allow_unused=True))
    return out, grads, used


def weights(t: torch.Tensor) -> torch.Tensor:
    """Deterministic, non-constant output weights (no RNG: the caller's seed stays untouched)."""
    n = t.numel()
    w = torch.arange(n, dtype=torch.float64, device=t.device).remainder(7).sub(3.0).add(0.5)
    return w.reshape(t.shape).to(t.dtype)
