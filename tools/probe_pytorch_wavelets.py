"""Call pytorch_wavelets' ``SmoothMagFn`` a few times, forward and backward, on fixed inputs.

A test command for ``compatfn migrate pytorch_wavelets --verify``: the library's own tests call
its other twelve Functions, forward only (its gradient tests are skipped), and never
``SmoothMagFn`` (the smoothed complex magnitude ``sqrt(x**2 + y**2 + b**2) - b``); no layer of
the library calls it either, so this script calls ``SmoothMagFn.apply`` itself, seeded, in
float64, with the bias a float, zero and a tensor, and with ``y`` requiring grad or not (its
forward saves only when ``x`` requires grad; its backward reads ``dy`` only then, so ``x``
always does), and takes gradients of each result. Run it from an unpacked pytorch_wavelets 1.3.0
(the package importable from the current folder)::

    python -m compatfn migrate pytorch_wavelets --verify python PATH/probe_pytorch_wavelets.py

It imports nothing from this repository and is not part of compatfn's tests.
"""

from __future__ import annotations

import sys
from typing import Callable, List, Tuple, Union

import torch

DTYPE = torch.float64
SHAPE = (2, 3, 6, 6)  # a batch of scattering coefficients: (batch, channels, rows, columns)


def _probes() -> List[Tuple[str, Callable[[], torch.Tensor]]]:
    from pytorch_wavelets.scatternet.lowlevel import SmoothMagFn

    def magnitude(bias: Union[float, str], y_grad: bool = True) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            x = torch.randn(SHAPE, dtype=DTYPE, requires_grad=True)
            y = torch.randn(SHAPE, dtype=DTYPE, requires_grad=y_grad)
            b = torch.tensor(0.05, dtype=DTYPE) if bias == "tensor" else bias
            r = SmoothMagFn.apply(x, y, b)
            total: torch.Tensor = (r * torch.randn_like(r)).sum()
            return total

        return call

    return [
        ("SmoothMagFn bias 1e-2", magnitude(1e-2)),
        ("SmoothMagFn bias 0", magnitude(0.0)),
        ("SmoothMagFn bias a tensor", magnitude("tensor")),
        ("SmoothMagFn y without grad", magnitude(1e-3, y_grad=False)),
    ]


def main() -> int:
    failed = 0
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
