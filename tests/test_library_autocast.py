"""``register_autocast`` on every tier (``_autocast``)."""

from __future__ import annotations

from typing import List

import pytest
import torch

from library_support import TIERS, make


@pytest.mark.parametrize("tier", TIERS)
def test_register_autocast(tier):
    """Under CPU autocast the op's floating inputs are cast to the registered dtype."""
    if not hasattr(torch, "is_autocast_cpu_enabled"):
        pytest.skip(f"torch {torch.__version__} has no CPU autocast (control: torch itself)")
    seen: List[torch.dtype] = []

    @make(tier, "autocast_me")
    def autocast_me(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.dtype)
        return x * 2

    if not hasattr(autocast_me, "register_autocast"):
        pytest.skip(f"torch {torch.__version__}'s CustomOpDef has no register_autocast (2.5+)")
    autocast_me.register_autocast("cpu", torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = autocast_me(torch.ones(2))
    assert seen == [torch.float64] and out.dtype == torch.float64
    out = autocast_me(torch.ones(2))
    assert seen[-1] == torch.float32 and out.dtype == torch.float32


@pytest.mark.parametrize("tier", TIERS)
def test_register_autocast_refuses_an_unknown_device_type(tier):
    """torch's own error for a device type it does not know (compatfn's tiers before: a
    ValueError of their own)."""

    @make(tier, "autocast_bad")
    def autocast_bad(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    if not hasattr(autocast_bad, "register_autocast"):
        pytest.skip(f"torch {torch.__version__}'s CustomOpDef has no register_autocast (2.5+)")
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        autocast_bad.register_autocast("tpu", torch.float16)
