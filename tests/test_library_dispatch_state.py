"""``compatfn.library._dispatch_state``: the dispatcher's state read from Python. Here the reused
below-autograd guards (See NOTE: [reused below-autograd guards]): the kernel of every op sees
exactly the dispatch state torch's own guard gives, on every path, nested, raising and on several
threads, or the caller's where autograd is excluded already; a torch whose guard cannot be reused
gets a guard per call."""

import contextlib
import threading
from typing import Any, Callable, List, Optional, Tuple

import pytest
import torch

from compatfn.library import _dispatch_state, _facts
from library_support import TIERS, TORCH_MINOR, fresh, make, run_script

#: Tiers whose kernel runs below autograd (torch 1.8 has no guard in Python).
GUARDED = [t for t in TIERS if t != "function"] if _dispatch_state.BelowAutograd is not None else []
pytestmark = pytest.mark.skipif(not GUARDED, reason="torch 1.8 has no below-autograd guard")


def excluded_keys() -> Tuple[Any, ...]:
    """Which dispatch keys this thread excludes now."""
    return _dispatch_state._key_fingerprint(torch._C._dispatch_tls_local_exclude_set())


def below_torchs_guard() -> Tuple[Any, ...]:
    """``excluded_keys()`` inside torch's own below-autograd guard."""
    with below_torchs_guard_context():
        return excluded_keys()


def below_torchs_guard_context() -> Any:
    """torch's below-autograd guard, as a context manager on every torch that has one."""
    return _dispatch_state.BelowAutograd() if _dispatch_state.GUARD_IS_CONTEXT else _HeldGuard()


class _HeldGuard:
    """torch 1.13 and 2.0's guard (excludes while it lives), held for a with block."""

    def __enter__(self) -> None:
        self.guard = _dispatch_state.BelowAutograd()

    def __exit__(self, *exc: Any) -> None:
        del self.guard


def recording_op(tier: Optional[str], seen: List[Any], kernel: Callable = lambda x: x * 2) -> Any:
    """An op with a formula whose kernel appends what it sees to ``seen``, on ``tier`` or (None)
    made by torch's own ``torch.library.custom_op`` (the control)."""

    def recorded(x: torch.Tensor) -> torch.Tensor:
        seen.append(excluded_keys())
        return kernel(x)

    if tier is None:
        op = torch.library.custom_op(f"{fresh('control')}::recorded", recorded, mutates_args=())
    else:
        op = make(tier, "recorded")(recorded)
    op.register_autograd(lambda ctx, g: g * 2)
    return op


def test_guards_are_reused_from_torch_2_1():
    """torch 2.1+ has a reusable guard excluding what the below-autograd guard excludes
    (measured on 2.1, 2.4, 2.13, 2.15); 1.13 and 2.0 do not."""
    assert _dispatch_state.GUARDS_REUSABLE is (TORCH_MINOR >= (2, 1))
    assert excluded_keys() != below_torchs_guard()  # the fingerprint tells them apart


@pytest.mark.parametrize("tier", GUARDED)
@pytest.mark.parametrize("requires_grad", [True, False])
@pytest.mark.parametrize("grad_mode", [True, False])
def test_the_kernel_runs_below_autograd_as_torch_runs_it(tier, requires_grad, grad_mode):
    seen: List[Any] = []
    op = recording_op(tier, seen)
    outside = excluded_keys()
    with torch.set_grad_enabled(grad_mode):
        for _ in range(3):  # guards taken from the pool and given back
            op(torch.ones(2, requires_grad=requires_grad))
            assert excluded_keys() == outside
    assert seen == [below_torchs_guard()] * 3


def _contexts() -> List[Any]:
    """Where autograd is excluded already (See NOTE: [the guard where autograd is excluded])."""

    def inference_with_grad() -> Any:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(torch.enable_grad())
        return stack

    if not GUARDED:  # torch 1.8 has no inference mode either
        return []
    contexts = [torch.inference_mode, inference_with_grad, below_torchs_guard_context]
    return [pytest.param(c, id=i) for c, i in zip(contexts, ["inference", "with_grad", "below"])]


@pytest.mark.parametrize("tier", GUARDED)
@pytest.mark.parametrize("context", _contexts())
@pytest.mark.parametrize("inputs", ["requires_grad", "plain", "inference"])
def test_where_autograd_is_excluded_the_kernel_sees_that_state(tier, context, inputs):
    """The kernel sees the dispatch state of the caller, as torch's dispatcher skips the Autograd
    kernel there; torch's own op (torch >= 2.4) agrees."""
    if inputs == "inference":
        with torch.inference_mode():
            x = torch.ones(2)
    else:
        x = torch.ones(2, requires_grad=inputs == "requires_grad")
    seen: List[Any] = []
    ops = [recording_op(tier, seen)]
    if _facts.HAS_TORCH_CUSTOM_OP:
        ops.append(recording_op(None, seen))
    for op in ops:
        with context():
            expected = excluded_keys()
            op(x)
        assert seen.pop() == expected


@pytest.mark.parametrize("tier", GUARDED)
def test_nested_calls_and_a_raising_kernel_leave_the_state_as_it_was(tier):
    seen: List[Any] = []
    inner = recording_op(tier, seen)
    outer = recording_op(tier, seen, lambda x: inner(x) + 1)
    failing = recording_op(tier, seen, lambda x: 1 / 0)
    outside = excluded_keys()
    for requires_grad in (True, False):
        outer(torch.ones(2, requires_grad=requires_grad))
        with pytest.raises(ZeroDivisionError):
            failing(torch.ones(2, requires_grad=requires_grad))
        assert excluded_keys() == outside
    assert seen == [below_torchs_guard()] * 6


@pytest.mark.parametrize("tier", GUARDED)
def test_threads_never_share_a_guard(tier):
    seen: List[Any] = []
    op = recording_op(tier, seen)
    outside = excluded_keys()
    after: List[Any] = []

    def calls() -> None:
        for i in range(200):
            op(torch.ones(2, requires_grad=bool(i % 2)))
        after.append(excluded_keys())

    threads = [threading.Thread(target=calls) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert after == [outside] * 4
    assert len(seen) == 800 and set(seen) == {below_torchs_guard()}


_UNREUSABLE_GUARD = """
import json
import torch

class ExcludesOnce:  # a torch whose guard cannot be entered again once left
    def __init__(self, keys):
        self.keys, self.used = keys, False

    def __enter__(self):
        if self.used:
            raise RuntimeError("entered twice")
        self.used = True
        self.guard = torch._C._AutoDispatchBelowAutograd()

    def __exit__(self, *exc):
        self.guard.__exit__(*exc)

torch._C._ExcludeDispatchKeyGuard = ExcludesOnce
import compatfn
from compatfn.__main__ import report
from compatfn.library import _dispatch_state, _facts

@compatfn.custom_op("unreusable::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    seen.append(_dispatch_state.autograd_excluded())
    return x * 2

seen = []
twice.register_autograd(lambda ctx, g: g * 2)
for requires_grad in (True, False, True):
    twice(torch.ones(2, requires_grad=requires_grad))
print(json.dumps({
    "reusable": _dispatch_state.GUARDS_REUSABLE,
    "seen": seen,
    "after": _dispatch_state.autograd_excluded(),
    "note": report()["custom_op_note"],
}))
"""


@pytest.mark.skipif(not _dispatch_state.GUARD_IS_CONTEXT, reason="torch < 2.1: no guard to reuse")
def test_a_guard_that_cannot_be_entered_again_is_made_per_call(tmp_path):
    """Simulated: a torch whose ``_ExcludeDispatchKeyGuard`` refuses a second entry. The check
    at import finds it, every call makes torch's below-autograd guard, and ``python -m compatfn``
    says so."""
    got = run_script(_UNREUSABLE_GUARD, tmp_path)
    note = got.pop("note")
    assert got == {"reusable": False, "seen": [True, True, True], "after": False}
    assert "a below-autograd guard made per call" in note
