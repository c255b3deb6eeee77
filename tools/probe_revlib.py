"""Call revlib's autograd Functions on the CPU via ``ReversibleSequential``, forward and backward.

A test command for ``compatfn migrate revlib --verify``: revlib's tests (``tests/``) need CUDA, so
on a CPU machine they call none of its Functions. This script calls them through the library's
public API, seeded, in float64, and takes gradients of each result with respect to the input and
the model's parameters (printed as checksums):

- ``_ReversibleHalfResidualSwapFn`` (``reverse_and_swap``, one call per block) and
  ``_ReplaceGrad`` (``replace_grad``, once at the end): ``ReversibleSequential`` of three small
  convolution blocks in its default ``MemoryModes.autograd_function``, with dropout p=0 and
  p=0.3 (its backward recomputes each block under the forward's RNG state), with the modules'
  ``cuda`` flag forced on (device states of CPU tensors: none), with ``target_device="cpu"``
  (the blocks copied there, their gradients added back), with a fused SGD optimizer (its step
  runs in a thread during the backward; the script joins those threads and checksums the
  parameters instead of their gradients), and blocks that also return an auxiliary tensor (the
  Function's ``residual`` output) through ``revlib.utils.module_list_to_momentum_net``;
- ``TensorOffload`` (``offload_tensor``): a CPU tensor offloaded to the device of a CPU
  reference. There is no second device here, so the copy to another device is never made.

``MemoryModes.no_savings`` calls none of the Functions; the script runs it once on the same
model and input as the first call, as a reference for its checksums. The other memory modes
(``checkpoint``, ``autograd_graph``) call none of them either and are not run. Run it from an
unpacked revlib 1.7.2 (the package importable from the current folder)::

    python -m compatfn migrate revlib --verify python PATH/probe_revlib.py

It imports nothing from this repository and is not part of compatfn's tests.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, List, Set, Tuple

import torch
from torch import nn

DTYPE = torch.float64
BATCH, CHANNELS, SIZE = 2, 4, 6  # the input has 2 * CHANNELS channels: one half per stream


def _block(dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1),
        nn.Dropout(dropout),
        nn.ReLU(),
    )


class _WithAux(nn.Module):
    """A block that also returns an auxiliary tensor: ``[out, out.mean(dim=(2, 3))]``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        out = torch.tanh(self.conv(x))
        return [out, out.mean(dim=(2, 3))]


def _input() -> torch.Tensor:
    return torch.randn(BATCH, 2 * CHANNELS, SIZE, SIZE, dtype=DTYPE, requires_grad=True)


def _join_new_threads(before: Set[threading.Thread]) -> None:
    """Wait for the threads started since ``before`` (the fused optimizer's steps)."""
    for thread in threading.enumerate():
        if thread not in before:
            thread.join()


def _checksum(tensors: List[torch.Tensor]) -> torch.Tensor:
    return sum((t.detach().abs().sum() for t in tensors), torch.zeros((), dtype=DTYPE))


def _gradients(leaves: List[torch.Tensor]) -> torch.Tensor:
    """A checksum of the leaves' gradients; a leaf without one counts 0."""
    return _checksum([leaf.grad for leaf in leaves if leaf.grad is not None])


def _probes() -> List[Tuple[str, Callable[[], Tuple[torch.Tensor, torch.Tensor]]]]:
    import revlib
    from revlib.utils import module_list_to_momentum_net

    def sequential(
        dropout: float = 0.0,
        memory_mode: Any = revlib.MemoryModes.autograd_function,  # Any: revlib has no types
        cuda_flag: bool = False,
        target_device: str = "",
        fused: bool = False,
    ) -> Callable[[], Tuple[torch.Tensor, torch.Tensor]]:
        def call() -> Tuple[torch.Tensor, torch.Tensor]:
            torch.manual_seed(round(dropout * 10))  # the same model and input for a dropout
            model = revlib.ReversibleSequential(
                *[_block(dropout) for _ in range(3)],
                memory_mode=memory_mode,
                target_device=target_device,
                fused_optimizer=(lambda ps: torch.optim.SGD(ps, lr=0.1)) if fused else None,
            ).to(DTYPE)
            if cuda_flag:
                for module in model:
                    module.cuda = True  # ReversibleModule's flag (torch.cuda._initialized)
            x = _input()
            out = model(x)
            value = (out * torch.randn_like(out)).sum()
            threads = set(threading.enumerate())
            torch.autograd.backward(value)
            _join_new_threads(threads)
            parameters = list(model.parameters())
            if fused:  # the steps set the gradients to None: checksum what they changed
                return value.detach(), _gradients([x]) + _checksum(parameters)
            return value.detach(), _gradients([x, *parameters])

        return call

    def momentum_with_aux() -> Tuple[torch.Tensor, torch.Tensor]:
        modules = module_list_to_momentum_net(nn.ModuleList([_WithAux() for _ in range(3)]))
        modules.to(DTYPE)
        x = _input()[:, :CHANNELS].detach().requires_grad_()
        y: Any = x
        auxiliary: List[torch.Tensor] = []
        for module in modules:
            y = module(y)
            if isinstance(y, list):
                y, rest = y[0], y[1:]
                auxiliary += [t for t in rest if isinstance(t, torch.Tensor)]
        value = (y * torch.randn_like(y)).sum() + sum(a.sum() for a in auxiliary)
        torch.autograd.backward(value)
        return value.detach(), _gradients([x, *modules.parameters()])

    def offload() -> Tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(3, 4, dtype=DTYPE, requires_grad=True)
        reference = torch.zeros(1, dtype=DTYPE)
        moved = revlib.offload_tensor(x * 2.0, reference)
        value = (moved * torch.randn_like(moved)).sum()
        torch.autograd.backward(value)
        return value.detach(), _gradients([x])

    return [
        ("ReversibleSequential, dropout 0", sequential()),
        (
            "ReversibleSequential, dropout 0, no_savings (reference: no Function)",
            sequential(memory_mode=revlib.MemoryModes.no_savings),
        ),
        ("ReversibleSequential, dropout 0.3", sequential(0.3)),
        (
            "ReversibleSequential, dropout 0.3, no_savings (reference: no Function)",
            sequential(0.3, memory_mode=revlib.MemoryModes.no_savings),
        ),
        ("ReversibleSequential, dropout 0.3, cuda flag", sequential(0.3, cuda_flag=True)),
        ("ReversibleSequential, target_device cpu", sequential(0.3, target_device="cpu")),
        ("ReversibleSequential, fused SGD optimizer", sequential(0.0, fused=True)),
        ("module_list_to_momentum_net, blocks with aux outputs", momentum_with_aux),
        ("offload_tensor, CPU to CPU", offload),
    ]


def main() -> int:
    failed = 0
    torch.manual_seed(0)
    for name, probe in _probes():
        try:
            value, gradients = probe()
            print(f"{name}: {value.item():.6g}, gradients {gradients.item():.6g}")
        except Exception as error:  # reported; the others still run
            failed += 1
            print(f"{name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
