"""The bit packing of ``BitReLU`` (``compatfn.relu._bits``): every size packs into ``ceil(n/8)``
bytes and unpacks to the same nonzero pattern, on every device."""

from __future__ import annotations

from typing import List

import torch

from compatfn.relu._bits import pack_nonzero, unpack_keep


def _n_values() -> List[int]:
    return [0, 1, 7, 8, 9, 63, 64, 65, 1000, 10007]


def test_bit_packing_roundtrip(device: torch.device) -> None:
    gen = torch.Generator().manual_seed(0)
    for n in _n_values():
        y = torch.rand(n, generator=gen).sub(0.5).clamp(min=0).to(device)
        packed = pack_nonzero(y)
        assert packed.dtype == torch.uint8 and packed.numel() == (n + 7) // 8
        keep = unpack_keep(packed, n, torch.float32)
        assert torch.equal(keep > 0, y != 0), n
