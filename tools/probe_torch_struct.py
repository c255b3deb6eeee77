"""Call torch-struct's autograd Functions defined inside factory functions, forward and backward.

A test command for ``compatfn migrate torch_struct --verify``: the library's tests
(``test_algorithms.py``) never call the six Functions its semiring factories define but for the
two ``_Check`` classes (``test_lc_custom``), so this script calls all six through the library's
public API, seeded, in float64, and takes gradients of each result:

- ``GumbelMaxSemiring(temp)``'s ``_GumbelMaxLogSumExp``: ``LinearChain(semiring).sum`` and the
  semiring's ``sum`` along an inner axis (its backward's other branch), then backward (the
  backward draws Gumbel noise: seeded);
- ``GumbelCRFSemiring(temp)``'s ``_GumbelCRFLogSumExp`` and ``ST`` (which the former's backward
  applies): ``LinearChainCRF.gumbel_crf`` (with and without lengths) and the semiring's ``sum``
  along an inner axis, then backward through the straight-through samples;
- ``CheckpointSemiring(cls)``'s ``_Check`` and ``CheckpointShardSemiring(cls, max_size)``'s
  ``_Check``: ``LinearChain(semiring).sum``, then backward (sharded and in one piece);
- ``CheckpointSemiring(cls)``'s ``_CheckBand``, which needs genbmm's CUDA ``BandedMatrix``: a
  pure-torch stand-in for it (the band of a dense matrix, for a counting semiring that multiplies
  banded matrices densely) is set on ``torch_struct.semirings.checkpoint`` for those calls only,
  and ``CheckpointSemiring(...).matmul`` is called on two banded matrices (backward inside those
  calls too: ``_CheckBand``'s backward builds banded matrices again).

Run it from an unpacked torch-struct 0.5 (the package importable from the current folder)::

    python -m compatfn migrate torch_struct --verify python PATH/probe_torch_struct.py

It imports nothing from this repository and is not part of compatfn's tests.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any, Callable, Iterator, List, Tuple

import torch

DTYPE = torch.float64
BATCH, STEPS, CLASSES = 2, 4, 3


def _potentials() -> torch.Tensor:
    """Linear-chain log potentials: batch x (length - 1) x classes x classes."""
    return torch.randn(BATCH, STEPS, CLASSES, CLASSES, dtype=DTYPE, requires_grad=True)


def _weighted(value: torch.Tensor) -> torch.Tensor:
    return (value * torch.randn_like(value)).sum()


class _Banded:
    """A stand-in for genbmm's ``BandedMatrix(data, lu, ld, fill)``: ``data[..., i, j]`` holds
    the entry of row ``i``, column ``i + j - ld`` (``lu`` diagonals above, ``ld`` below)."""

    def __init__(self, data: torch.Tensor, lu: int, ld: int, fill: float = 0.0) -> None:
        self.data, self.lu, self.ld, self.fill = data, lu, ld, fill

    @staticmethod
    def _columns(n: int, lu: int, ld: int) -> Tuple[torch.Tensor, torch.Tensor]:
        columns = torch.arange(n)[:, None] + torch.arange(lu + ld + 1)[None, :] - ld
        return columns, (columns >= 0) & (columns < n)

    def dense(self) -> torch.Tensor:
        n = self.data.shape[-2]
        columns, valid = self._columns(n, self.lu, self.ld)
        spare = columns.masked_fill(~valid, n).expand(self.data.shape)  # out of band: column n
        full = self.data.new_full((*self.data.shape[:-1], n + 1), self.fill)
        return full.scatter(-1, spare, self.data.masked_fill(~valid, self.fill))[..., :n]

    @classmethod
    def band(cls, dense: torch.Tensor, lu: int, ld: int, fill: float = 0.0) -> _Banded:
        n = dense.shape[-1]
        columns, valid = cls._columns(n, lu, ld)
        index = columns.clamp(0, n - 1).expand(*dense.shape[:-1], lu + ld + 1)
        return cls(dense.gather(-1, index).masked_fill(~valid, fill), lu, ld, fill)


@contextlib.contextmanager
def _stand_in_genbmm() -> Iterator[None]:
    """Make torch_struct's checkpoint module see ``_Banded`` as genbmm's ``BandedMatrix``."""
    from torch_struct.semirings import checkpoint

    names = ("has_genbmm", "genbmm", "BandedMatrix")
    saved = {name: getattr(checkpoint, name) for name in names if hasattr(checkpoint, name)}
    checkpoint.has_genbmm = True
    checkpoint.genbmm = types.SimpleNamespace(BandedMatrix=_Banded)
    checkpoint.BandedMatrix = _Banded
    try:
        yield
    finally:
        for name in names:
            if name in saved:
                setattr(checkpoint, name, saved[name])
            else:
                delattr(checkpoint, name)


def _probes() -> List[Tuple[str, Callable[[], torch.Tensor]]]:
    from torch_struct import (
        CheckpointSemiring,
        CheckpointShardSemiring,
        GumbelCRFSemiring,
        GumbelMaxSemiring,
        LinearChain,
        LinearChainCRF,
        LogSemiring,
        StdSemiring,
    )

    class BandedStd(StdSemiring):  # type: ignore[misc]  # torch-struct has no types
        @classmethod
        def matmul(cls, a: Any, b: Any) -> Any:
            if isinstance(a, _Banded):
                product = a.dense() @ b.dense()
                return _Banded.band(product, a.lu + b.lu, a.ld + b.ld)
            return super().matmul(a, b)

    def chain_sum(semiring: Any) -> Callable[[], torch.Tensor]:
        return lambda: LinearChain(semiring).sum(_potentials()).sum()

    def semiring_sum(semiring: Any, dim: int) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            xs = torch.randn(3, 4, 5, dtype=DTYPE, requires_grad=True)
            return _weighted(semiring.sum(xs, dim=dim))

        return call

    def gumbel_crf(temperature: float, with_lengths: bool) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            lengths = torch.tensor([STEPS + 1, STEPS - 1]) if with_lengths else None
            dist = LinearChainCRF(_potentials(), lengths=lengths)
            return _weighted(dist.gumbel_crf(temperature))

        return call

    def banded_matmul(
        a_band: Tuple[int, int], b_band: Tuple[int, int]
    ) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:  # bands: (lu, ld)
            a = torch.randn(BATCH, 5, sum(a_band) + 1, dtype=DTYPE, requires_grad=True)
            b = torch.randn(BATCH, 5, sum(b_band) + 1, dtype=DTYPE, requires_grad=True)
            with _stand_in_genbmm():  # backward too: _CheckBand's builds BandedMatrix again
                semiring = CheckpointSemiring(BandedStd)
                product = semiring.matmul(_Banded(a, *a_band), _Banded(b, *b_band))
                value = _weighted(product.data)
                torch.autograd.backward(value)
            return value.detach()

        return call

    return [
        ("GumbelMaxSemiring LinearChain sum", chain_sum(GumbelMaxSemiring(1.0))),
        ("GumbelMaxSemiring LinearChain sum, temp 0.5", chain_sum(GumbelMaxSemiring(0.5))),
        ("GumbelMaxSemiring sum dim 1", semiring_sum(GumbelMaxSemiring(1.0), dim=1)),
        ("GumbelCRFSemiring gumbel_crf", gumbel_crf(1.0, with_lengths=False)),
        ("GumbelCRFSemiring gumbel_crf with lengths", gumbel_crf(0.5, with_lengths=True)),
        ("GumbelCRFSemiring sum dim 1", semiring_sum(GumbelCRFSemiring(1.0), dim=1)),
        ("CheckpointSemiring LinearChain sum", chain_sum(CheckpointSemiring(LogSemiring, 1))),
        ("CheckpointShardSemiring sharded", chain_sum(CheckpointShardSemiring(LogSemiring, 1))),
        ("CheckpointShardSemiring whole", chain_sum(CheckpointShardSemiring(LogSemiring, 10**6))),
        ("CheckpointSemiring banded matmul (_CheckBand)", banded_matmul((1, 1), (2, 0))),
        ("CheckpointSemiring banded matmul, other bands", banded_matmul((0, 2), (1, 1))),
    ]


def main() -> int:
    failed = 0
    torch.manual_seed(0)
    for name, probe in _probes():
        try:
            value = probe()
            if value.requires_grad:  # else the probe took its gradients itself
                torch.autograd.backward(value)
            print(f"{name}: {value.item():.6g}")
        except Exception as error:  # reported; the others still run
            failed += 1
            print(f"{name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
