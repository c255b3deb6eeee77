"""Call torchdiffeq's ``ImplicitFnGradientRerouting`` a few times, forward and backward.

A test command for ``compatfn migrate torchdiffeq --verify``: the tests the table runs
(``gradient_tests.py``, ``event_tests.py``, ``api_tests.py``) never call
``ImplicitFnGradientRerouting``, the Function through which ``odeint_event`` hands the gradient
of the event time to the state. This script calls it through ``torchdiffeq.odeint_event``,
seeded, in float64, on a falling ball whose event is hitting the ground: forward in time and
with ``reverse_time=True``, with a tensor state and a tuple state, with ``odeint`` and with
``odeint_adjoint`` as the interface, and takes gradients of each result (event time and final
state) with respect to the initial state, the initial time and the model's parameters. Run it
from an unpacked torchdiffeq 0.2.5 (the package importable from the current folder)::

    python -m compatfn migrate torchdiffeq --verify python PATH/probe_torchdiffeq.py

It imports nothing from this repository and is not part of compatfn's tests.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, List, Tuple, Union

import torch
from torch import nn

DTYPE = torch.float64
State = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


class Ball(nn.Module):
    """d(height, velocity)/dt = (velocity, -gravity - drag * velocity)."""

    def __init__(self, tuple_state: bool = False) -> None:
        super().__init__()
        self.tuple_state = tuple_state
        self.gravity = nn.Parameter(torch.tensor(9.8, dtype=DTYPE))
        self.drag = nn.Parameter(torch.tensor(0.1, dtype=DTYPE))

    def forward(self, t: torch.Tensor, state: State) -> State:
        _height, velocity = state if isinstance(state, tuple) else state.unbind(-1)
        acceleration = -self.gravity - self.drag * velocity
        if self.tuple_state:
            return velocity, acceleration
        return torch.stack([velocity, acceleration], dim=-1)


def _height(t: torch.Tensor, state: State) -> torch.Tensor:
    """The event: the ball's height is zero."""
    return state[0] if isinstance(state, tuple) else state[..., 0]


def _probes() -> List[Tuple[str, Callable[[], torch.Tensor]]]:
    from torchdiffeq import odeint, odeint_adjoint, odeint_event

    def fall(
        reverse_time: bool = False, tuple_state: bool = False, adjoint: bool = False
    ) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            ball = Ball(tuple_state)
            height = (1.0 + torch.rand((), dtype=DTYPE)).requires_grad_()
            velocity = torch.randn((), dtype=DTYPE).requires_grad_()
            y0: State = (height, velocity) if tuple_state else torch.stack([height, velocity])
            t0 = torch.tensor(0.0, dtype=DTYPE, requires_grad=True)
            event_t, solution = odeint_event(
                ball,
                y0,
                t0,
                event_fn=_height,
                reverse_time=reverse_time,
                odeint_interface=odeint_adjoint if adjoint else odeint,
                method="dopri5",
                rtol=1e-8,
                atol=1e-10,
            )
            final = torch.stack([s[-1] for s in solution]) if tuple_state else solution[-1]
            total: torch.Tensor = 2.0 * event_t + (final * torch.randn_like(final)).sum()
            return total

        return call

    return [
        ("odeint_event", fall()),
        ("odeint_event reverse_time", fall(reverse_time=True)),
        ("odeint_event tuple state", fall(tuple_state=True)),
        ("odeint_event odeint_adjoint", fall(adjoint=True)),
        ("odeint_event odeint_adjoint reverse_time", fall(reverse_time=True, adjoint=True)),
    ]


def _fill_uninitialized_memory() -> None:
    """Make ``torch.empty`` fill its memory (NaN for floats): the Runge-Kutta steps build their
    stages in ``torch.empty`` scratch, which ``_UncheckedAssign`` receives, and ``--verify``
    compares its inputs. torch from 2.1 fills it under deterministic algorithms; before,
    ``torch.empty`` is wrapped for this run."""
    torch.use_deterministic_algorithms(True)
    if hasattr(torch.utils, "deterministic"):
        return
    empty = torch.empty

    def filled(*args: Any, **kwargs: Any) -> torch.Tensor:
        tensor = empty(*args, **kwargs)
        return tensor.fill_(float("nan") if tensor.is_floating_point() else 0)

    torch.empty = filled


def main() -> int:
    failed = 0
    _fill_uninitialized_memory()
    torch.manual_seed(0)
    for name, probe in _probes():
        try:
            value = probe()
            torch.autograd.backward(value)
            print(f"{name}: {value.item():.6g}")
        except Exception as error:  # reported; the others still run
            failed += 1
            print(f"{name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
