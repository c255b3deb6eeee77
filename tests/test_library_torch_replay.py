"""The torch tier's replay of a kernel output through torch's own wrappers (``_torch_replay``)."""

from __future__ import annotations

from typing import Tuple

import pytest
import torch

from compatfn import library
from library_support import make

pytestmark = pytest.mark.skipif(
    not library.HAS_TORCH_CUSTOM_OP, reason=f"torch {torch.__version__} has no custom_op"
)


def test_a_replayed_output_is_torchs_and_the_kernel_stays_registered() -> None:
    """A list for a tuple comes back as torch's own call gives it, the kernel ran once, and
    torch's kernel table holds the kernel again afterwards."""
    from compatfn.library._torch_replay import replayed

    calls = []

    @make("torch", "pair")
    def pair(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return [x + 1, x + 2]  # type: ignore[return-value]

    x = torch.ones(2)
    kernel = pair._backend_fns[None]
    expected = pair._opoverload(x)  # torch's own call: one kernel run
    output = [x + 1, x + 2]
    got = replayed(pair.__dict__, (x,), output)
    assert type(got) is type(expected) and len(calls) == 1
    assert all(a is b for a, b in zip(got, output))
    assert pair._backend_fns[None] is kernel


def test_the_kernel_runs_once_on_an_output_torch_refuses() -> None:
    calls = []

    @make("torch", "same")
    def same(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x

    with pytest.raises(RuntimeError, match="may not alias any inputs"):  # every torch's words
        same(torch.ones(2))
    assert len(calls) == 1
