"""The torch tier's answer to a kernel output its short path cannot hand on as it is: what
torch's own wrappers make of it, without running the kernel again (See NOTE: [replaying an
output])."""

from __future__ import annotations

import threading
from typing import Any, Dict

import torch

from compatfn.library._storage import aliases_any

__all__ = ["Replay", "checked_output", "replayed", "verified"]


def _is_what_torch_returns(state: Dict[str, Any], inputs: tuple, output: Any) -> bool:
    """Whether ``output`` is what the schema returns (a tuple itself for two or more) and keeps
    torch's aliasing rule (torch hands such an output on untouched)."""
    count = len(state["_opoverload"]._schema.returns)
    outputs = (output,) if count == 1 else output
    return (
        type(outputs) is tuple  # a namedtuple torch 2.4-2.13 make a tuple, 2.15 hands on
        and len(outputs) == count
        and all(type(o) is torch.Tensor for o in outputs)
        and not aliases_any(inputs, outputs)
    )


def checked_output(state: Dict[str, Any], inputs: tuple, output: Any) -> Any:
    """The short path's output when torch hands it on untouched; else what the dispatcher makes
    of it (See NOTE: [replaying an output])."""
    if _is_what_torch_returns(state, inputs, output):
        return output
    return replayed(state, inputs, output)


class Replay(Exception):
    """Raised in the short path's autograd forward for an output torch would not hand on
    untouched, before setup_context runs (See NOTE: [replaying an output])."""

    def __init__(self, output: Any) -> None:
        super().__init__("an output for the dispatcher")
        self.output = output


def verified(state: Dict[str, Any], inputs: tuple, output: Any) -> None:
    if not _is_what_torch_returns(state, inputs, output):
        raise Replay(output)


# NOTE: [replaying an output]
# An output the short path cannot hand on as it is (a list for a tuple, None, a 1-tuple for two
# outputs, an input or its view) is what torch's own wrappers must judge: convert it, or raise
# their own error. The kernel must not run again (its side effects, the random state): the op's
# operator is called with the same arguments while the kernel torch looks up for the call
# (``CustomOpDef._backend_fns``, read by torch's backend kernel at each call, every torch >= 2.4)
# is one that hands back the output already computed, on this thread only, once. torch names the
# kernel's module in its aliasing error: the stand-in has the kernel's ``__module__``.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/torch/_library/custom_ops.py
_REPLAY_LOCK = threading.RLock()
_PENDING = threading.local()


def replayed(state: Dict[str, Any], inputs: tuple, output: Any) -> Any:
    """The operator's call on ``inputs`` whose kernel gives ``output`` without running again."""
    kernels = state["_backend_fns"]
    with _REPLAY_LOCK:
        kernel = kernels[None]

        def stand_in(*args: Any, **kwargs: Any) -> Any:
            pending = getattr(_PENDING, "outputs", None)
            if pending:
                return pending.pop()
            return kernel(*args, **kwargs)

        stand_in.__module__ = getattr(kernel, "__module__", None)  # type: ignore[assignment]
        stand_in.__name__ = getattr(kernel, "__name__", "kernel")
        pending = getattr(_PENDING, "outputs", None)
        _PENDING.outputs = [output]
        kernels[None] = stand_in
        try:
            return state["_opoverload"](*inputs)
        finally:
            kernels[None] = kernel
            _PENDING.outputs = pending
