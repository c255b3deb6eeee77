"""``register_autocast`` on every tier (``_autocast``)."""

from __future__ import annotations

import re
from typing import List, Tuple

import pytest
import torch

from library_support import TIERS, fresh, make


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
    error_type, message = RuntimeError, "Expected one of cpu, cuda"
    if tier == "torch":  # torch's own op object: its error (a ValueError on 2.5-2.8, measured)
        error_type, message = _torch_refusal_of_an_unknown_device_type()
    with pytest.raises(error_type, match=re.escape(message)):
        autocast_bad.register_autocast("tpu", torch.float16)


def _torch_refusal_of_an_unknown_device_type() -> Tuple[type, str]:
    """The error type and first line torch's own custom_op gives ``register_autocast("tpu")``."""
    control = torch.library.custom_op(
        f"{fresh('control')}::autocast_bad",
        lambda x: x * 2,
        mutates_args=(),
        schema="(Tensor x) -> Tensor",
    )
    try:
        control.register_autocast("tpu", torch.float16)
    except (RuntimeError, ValueError) as error:
        return type(error), str(error).splitlines()[0]
    raise AssertionError(f"torch {torch.__version__}'s own op accepted device type 'tpu'")
