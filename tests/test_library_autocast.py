"""``register_autocast`` on every tier (``_autocast``)."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch

import library_oracle
from compatfn import core
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


#: What torch 2.13's own custom_op gives ``_autocast_outcomes`` (the oracle where this torch has
#: no ``register_autocast`` of its own; measured with ``_autocast_outcomes(_torch_own)``).
_TORCH_AUTOCAST_OUTCOMES = [
    ("float32 and float64", ["kernel", "torch.float16", "torch.float64"]),
    ("a keyword-only argument at its default", ["kernel", "torch.float16", "torch.float16"]),
    (
        "a keyword-only argument given",
        ["AssertionError", "Custom ops do not support kwargs yet, got ['s']"],
    ),
    ("meta tensors", ["fake", "torch.float32", "torch.float32"]),
    ("a second rule for the device type", ["kernel", "torch.float16", "torch.float16"]),
]


def _autocast_outcomes(define: Callable[[Callable, Callable], Any]) -> List[Tuple[str, Any]]:
    """What an op with a CPU autocast rule (float16) hands its kernels under CPU autocast
    (bfloat16): which inputs are cast, keyword-only arguments, meta tensors (the fake kernel),
    a second rule for the same device type. ``define(kernel, fake)``: the op."""
    seen: List[Any] = []

    def kernel(x: torch.Tensor, y: torch.Tensor, *, s: float = 1.0) -> torch.Tensor:
        seen.append(["kernel", str(x.dtype), str(y.dtype)])
        return x.float() + y.float()

    def fake(x: Any, y: Any, *, s: float = 1.0) -> Any:
        seen.append(["fake", str(x.dtype), str(y.dtype)])
        return torch.empty_like(x, dtype=torch.float32)

    op = define(kernel, fake)
    op.register_autocast("cpu", torch.float16)
    f32, f64 = torch.ones(1), torch.ones(1, dtype=torch.float64)
    meta = torch.ones(1, device="meta")
    calls = [
        ("float32 and float64", lambda: op(f32, f64)),
        ("a keyword-only argument at its default", lambda: op(f32, f32, s=1.0)),
        ("a keyword-only argument given", lambda: op(f32, f32, s=2.0)),
        ("meta tensors", lambda: op(meta, meta)),
        ("a second rule for the device type", lambda: op.register_autocast("cpu", torch.bfloat16)),
        ("a second rule for the device type", lambda: op(f32, f32)),
    ]
    found: Dict[str, Any] = {}
    for label, call in calls:
        seen.clear()
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                call()
        except AssertionError as error:
            seen.append(["AssertionError", str(error)])
        if seen:
            found[label] = seen[-1]
    return list(found.items())


def _torch_own(kernel: Callable, fake: Callable) -> Any:
    op = torch.library.custom_op(f"{fresh('own')}::autocast_rule", kernel, mutates_args=())
    op.register_fake(fake)
    return op


@pytest.mark.parametrize("tier", TIERS)
def test_autocast_rule_casts_and_refuses_as_torchs(tier):
    """As torch's own op's autocast rule: only floating tensors on the rule's device type that are
    not float64 are cast (meta tensors reach the fake kernel as they are), a keyword-only
    argument the dispatcher passes is refused, the first rule for a device type stays."""
    if not hasattr(torch, "is_autocast_cpu_enabled") or not hasattr(torch, "autocast"):
        pytest.skip(f"torch {torch.__version__} has no CPU autocast (control: torch itself)")

    def define(kernel: Callable, fake: Callable) -> Any:
        op = make(tier, "autocast_rule")(kernel)
        op.register_fake(fake)
        return op

    probe = make(tier, "autocast_probe", schema="(Tensor x) -> Tensor")(lambda x: x)
    if not hasattr(probe, "register_autocast"):
        pytest.skip(f"torch {torch.__version__}'s CustomOpDef has no register_autocast (2.5+)")
    # The older tiers word their errors as the oracle's torch (torch 2.8's own op words the
    # keyword-only refusal otherwise); the torch tier as the running torch.
    own = (tier == "torch" or torch.__version__ == _oracle_torch()) and (
        hasattr(torch.library, "custom_op")
        and hasattr(torch.library.CustomOpDef, "register_autocast")
    )
    expected = _autocast_outcomes(_torch_own) if own else _TORCH_AUTOCAST_OUTCOMES
    assert _autocast_outcomes(define) == [(k, list(v)) for k, v in expected]


def _registration_outcomes(op: Any, seen: List[Any]) -> List[Tuple[str, Any]]:
    """What ``op.register_autocast`` gives for device types torch 2.13 refuses or takes, and what
    the kernel it returns does when called (outside autocast) with and without a keyword."""
    found: List[Tuple[str, Any]] = []
    kernel: Any = None
    for device_type in (1, "meta", "cpu:0", "meta:0", "lazy", "cpu"):
        try:
            kernel = op.register_autocast(device_type, torch.float16)
            found.append((repr(device_type), "registered"))
        except (RuntimeError, ValueError) as error:
            found.append((repr(device_type), f"{type(error).__name__}: {error}"))
    f32, f64 = torch.ones(1), torch.ones(1, dtype=torch.float64)
    found.append(("returned kernel", callable(kernel)))
    kernel(None, f32, f64)
    found.append(("returned kernel called", seen[-1]))
    try:
        kernel(None, f32, f32, s=1.0)
    except AssertionError as error:
        found.append(("returned kernel given a keyword", str(error)))
    return found


#: What torch 2.13's own custom_op gives ``_registration_outcomes``.
_TORCH_REGISTRATION_OUTCOMES = [
    ("1", "ValueError: Expected `device_type` of type `str`, got: `<class 'int'>`"),
    ("'meta'", "ValueError: Device type 'meta' does not support autocast."),
    ("'cpu:0'", "RuntimeError: Expected device_type string to not have a device index; got cpu:0"),
    ("'meta:0'", "ValueError: Device type 'meta:0' does not support autocast."),
    ("'lazy'", "ValueError: Device type 'lazy' does not support autocast."),
    ("'cpu'", "registered"),
    ("returned kernel", True),
    ("returned kernel called", ["kernel", "torch.float16", "torch.float64"]),
    ("returned kernel given a keyword", "Custom ops do not support kwargs yet, got ['s']"),
]


def _oracle_torch() -> str:
    """The torch whose own custom_op gave the stored outcomes the older tiers follow."""
    return str(json.loads(library_oracle.RECORDED.read_text())["torch"])


@pytest.mark.parametrize("tier", TIERS)
def test_register_autocast_checks_and_returns_as_torchs(tier):
    """torch's checks of the device type with its errors (compatfn's tiers before: an error of
    their own, for ``"cpu:0"`` none), and torch's return value: the rule as a kernel taking a
    dispatch key set first (before: None)."""
    seen: List[Any] = []

    def kernel(x: torch.Tensor, y: torch.Tensor, *, s: float = 1.0) -> torch.Tensor:
        seen.append(["kernel", str(x.dtype), str(y.dtype)])
        return x.float() + y.float()

    op = make(tier, "autocast_checks")(kernel)
    if not hasattr(op, "register_autocast"):
        pytest.skip(f"torch {torch.__version__}'s CustomOpDef has no register_autocast (2.5+)")
    # The older tiers word their errors as the torch the oracle was recorded on (2.13); the torch
    # tier as the running torch.
    side_by_side = tier == "torch" or torch.__version__ == _oracle_torch()
    if (
        side_by_side
        and hasattr(getattr(torch, "library", None), "custom_op")
        and hasattr(torch.library.CustomOpDef, "register_autocast")
    ):
        name = f"{fresh('own')}::autocast_checks"
        own = torch.library.custom_op(name, kernel, mutates_args=())
        expected = _registration_outcomes(own, seen)
    else:
        expected = _TORCH_REGISTRATION_OUTCOMES
    assert _registration_outcomes(op, seen) == expected


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("device_type", ["xla", "mtia", "maia"])
def test_register_autocast_for_a_device_type_without_an_autocast_key(tier, device_type):
    """torch 2.13's own op refuses it with an AttributeError, each time (its dispatcher has no
    such Autocast key; measured on 2.13 and 2.15; compatfn's tiers before: accepted it)."""

    @make(tier, "autocast_keyless")
    def keyless(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    if not hasattr(keyless, "register_autocast"):
        pytest.skip(f"torch {torch.__version__}'s CustomOpDef has no register_autocast (2.5+)")
    if not _has_autocast_for(device_type):
        pytest.skip(f"torch {torch.__version__} has no autocast for {device_type}: refused")
    key = "Autocast" + device_type.upper()
    for _ in range(2):
        with pytest.raises(AttributeError, match=f"has no attribute '{key}'"):
            keyless.register_autocast(device_type, torch.float16)


def _has_autocast_for(device_type: str) -> bool:
    """Whether this torch has autocast for ``device_type`` (else compatfn's tiers refuse the rule
    with an error of their own, tested with the other refusals)."""
    try:
        core._autocast_api(device_type)
    except ValueError:
        return False
    return torch._C._is_autocast_available(device_type)
