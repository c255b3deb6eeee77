"""The "torch" tier's op object (``_torch_op``): the state of torch's CustomOpDef in an object of
a class of its own per op, compared with the object ``torch.library.custom_op`` itself returns."""

# No ``from __future__ import annotations``: torch 2.4's own custom_op (the control) cannot read
# string annotations.

import copy
import functools
import warnings
from typing import Any, List

import pytest
import torch

from compatfn import core
from library_support import run_script
from test_library_torch_call import _backward, _setup_context, pair, spied

pytestmark = pytest.mark.skipif(
    not hasattr(getattr(torch, "library", None), "custom_op"),
    reason="torch.library.custom_op (the control) exists from torch 2.4",
)


def test_torchs_registry_keeps_its_object_sharing_the_state():
    """torch's registry by name keeps torch's own object; a registration by name (through it)
    regenerates the op object's call, whose short path then runs the new formula."""
    ours, control = pair(autograd=False)
    theirs = torch._library.custom_ops.OPDEFS[ours._qualname]
    assert theirs is not ours and theirs.__dict__ is ours.__dict__
    assert isinstance(theirs, type(control)) and isinstance(ours, type(control))
    assert type(ours) is not type(theirs)
    spy = spied(ours)
    torch.library.register_autograd(ours._qualname, _backward, setup_context=_setup_context)
    x = torch.ones(2, requires_grad=True)
    (grad,) = torch.autograd.grad(ours(x, 3.0).sum(), x)
    assert torch.equal(grad, torch.full((2,), 3.0)) and spy.calls == 0
    assert torch.equal(theirs(x, 3.0), ours(x, 3.0)) and spy.calls == 1  # torch's call


def test_copies_are_as_torchs():
    ours, control = pair()
    x = torch.ones(2)
    for op in (ours, control):
        copied = copy.copy(op)
        assert type(copied) is type(op) and copied is not op
        assert torch.equal(copied(x, 3.0), torch.full((2,), 3.0))
    messages = []
    for op in (ours, control):
        with pytest.raises(TypeError, match="cannot pickle") as info:
            copy.deepcopy(op)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_a_class_attribute_is_the_op_itself():
    """As torch's object, the op is no descriptor: read through an instance, a class attribute
    is the op itself, never a bound method."""
    ours, control = pair()

    class Holder:
        mine = ours
        torchs = control

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        holder = Holder()
        assert holder.mine is ours and holder.torchs is control
        assert torch.equal(holder.mine(torch.ones(1)), holder.torchs(torch.ones(1)))


def _gradient(op: Any) -> List[float]:
    leaf = torch.ones(2, requires_grad=True)
    return torch.autograd.grad(op(leaf).sum(), leaf)[0].tolist()  # type: ignore[no-any-return]


def test_a_registration_through_a_copy_is_as_torchs():
    """A kernel registered through ``copy.copy(op)`` is the op's (the copy shares torch's
    kernels per device); an autograd formula registered through a copy is nobody's (torch's
    Autograd kernel reads the object torch made). Before: the short path ignored both copies."""
    results = []
    for op in pair(autograd=False):
        x = torch.ones(2)
        got = [op(x).tolist()]
        copy.copy(op).register_kernel("cpu", lambda x, s=2.0: x * 3)
        got += [op(x).tolist(), copy.copy(op)(x).tolist()]
        copy.copy(op).register_kernel(None, lambda x, s=2.0: x * 5)
        got.append(op(x).tolist())
        copy.copy(op).register_autograd(_backward, setup_context=_setup_context)
        got.append(_outcome(functools.partial(_gradient, op)))
        results.append(got)
    ours, control = results
    assert ours[:4] == control[:4] == [[2.0, 2.0], [3.0, 3.0], [3.0, 3.0], [3.0, 3.0]]
    assert ours[4][0] == control[4][0] == "RuntimeError"


@pytest.mark.skipif(core._dynamo_unsupported() is not None, reason=core._dynamo_unsupported() or "")
@pytest.mark.usefixtures("fresh_dynamo")
def test_inside_compile_the_op_is_the_object_it_is_in_eager():
    """Inside ``torch.compile`` the op answers ``isinstance``, attribute reads, ``in`` and
    dict lookups as in eager code, as torch's own op does (before: dynamo saw the op object,
    a ``functools.partial``, as a partial: wrong answers without an error)."""
    from torch._library.custom_ops import CustomOpDef

    def probe(op: Any, x: torch.Tensor) -> torch.Tensor:
        ops = [op]
        known = isinstance(op, CustomOpDef) + hasattr(op, "_opoverload") + (op in ops)
        return op._opoverload(x, 3.0) + known + sum(o is op for o in ops)

    def lookup(op: Any, x: torch.Tensor) -> torch.Tensor:
        return x + {op: 10.0}[op]  # a dict keyed by op objects: torch 2.4's dynamo refuses it

    results = []
    for op in pair():
        op.register_fake(lambda x, s=2.0: torch.empty_like(x))
        x = torch.ones(2)
        assert probe(op, x).tolist() == [7.0, 7.0] and lookup(op, x).tolist() == [11.0, 11.0]
        got = []
        for fn in (probe, lookup):
            compiled = torch.compile(functools.partial(fn, op), backend="eager", fullgraph=True)
            got.append(_outcome(lambda compiled=compiled, x=x: compiled(x).tolist()))
            torch._dynamo.reset()
        results.append(got)
    ours, control = results
    assert ours[0] == control[0] == ("ok", [7.0, 7.0])
    assert ours[1][0] == control[1][0] and (control[1][0] != "ok" or ours[1] == control[1])


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as e:
        return (type(e).__name__, str(e))


def test_signature_doc_help_and_pickling_are_torchs():
    """``inspect.signature``, ``__doc__``, ``help()`` and pickling answer as for torch's object
    (compatfn's object before: ValueError, None, no methods on Python < 3.13, another error)."""
    import inspect
    import pickle
    import pydoc

    ours, control = pair()
    assert str(inspect.signature(ours)) == str(inspect.signature(control)) == "(*args, **kwargs)"
    assert ours.__doc__ == control.__doc__ and ours.__doc__
    text = pydoc.render_doc(ours, renderer=pydoc.plaintext)
    assert "register_fake" in text and "register_autograd" in text
    assert _outcome(lambda: pickle.dumps(ours)) == _outcome(lambda: pickle.dumps(control))


_CHANGED_TORCH = """
import functools, json, sys
import torch
import torch._library.autograd as autograd

original = autograd.make_autograd_impl

def make_autograd_impl(op, info):  # a torch whose closure layout moved
    kernel = original(op, info)

    def autograd_impl(*args, **kwargs):
        return kernel(*args, **kwargs)

    return autograd_impl

autograd.make_autograd_impl = make_autograd_impl
import compatfn
from compatfn.__main__ import report

@compatfn.custom_op("changed_torch::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2

x = torch.ones(2, requires_grad=True)
twice.register_autograd(lambda ctx, g: g * 2)
(grad,) = torch.autograd.grad(twice(x).sum(), x)
print(json.dumps({
    "torchs": type(twice) is torch._library.custom_ops.CustomOpDef,
    "grad": grad.tolist(),
    "note": report()["custom_op_note"],
}))
"""


def test_a_torch_that_moved_its_internals_gets_torchs_own_op_objects(tmp_path):
    """Where torch's private contract does not hold (simulated: ``make_autograd_impl``'s closure
    moved), every op is torch's own object, untouched and working, and ``python -m compatfn``
    says so."""
    got = run_script(_CHANGED_TORCH, tmp_path)
    assert got["torchs"] and got["grad"] == [2.0, 2.0]
    assert "make_autograd_impl's closure has another layout" in got["note"]


def _described(method: Any) -> List[str]:
    import inspect

    return [str(inspect.signature(method)), method.__qualname__, method.__doc__ or ""]


def _refusal(call: Any, op: Any) -> str:
    try:
        call(op)
    except TypeError as error:
        return str(error)
    return "no error"


def test_registration_methods_read_and_refuse_as_torchs():
    """``register_kernel``/``register_autograd``/``register_autocast`` show torch's signature,
    name and docstring (``help``), and a wrong call raises torch's TypeError naming
    ``CustomOpDef`` (before: ``(*args, **kwargs)``, no docstring, ``FastCustomOpDef``)."""
    ours, control = pair(autograd=False)
    for name in ("register_kernel", "register_autograd", "register_autocast"):
        if hasattr(control, name):
            assert _described(getattr(ours, name)) == _described(getattr(control, name)), name
    wrong_calls = [
        lambda op: op.register_kernel(),
        lambda op: op.register_kernel(device_types="cpu"),
        lambda op: op.register_kernel("cpu", lambda x, s=2.0: x, 3),
        lambda op: op.register_autograd(),
    ]
    for wrong in wrong_calls:
        assert _refusal(wrong, ours) == _refusal(wrong, control)


def _scripted_results(op: Any) -> List[Any]:
    """What scripted functions calling ``op`` (a scale given, the default left out) return."""

    def with_scale(x: torch.Tensor) -> torch.Tensor:
        return op(x, 3.0)

    def with_default(x: torch.Tensor) -> torch.Tensor:
        return op(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.15 warns that TorchScript is deprecated
        scripted = [torch.jit.script(f) for f in (with_scale, with_default)]
    return [f(torch.ones(2)).tolist() for f in scripted]


def test_torchscript_calls_the_op_from_python_as_torchs():
    """``torch.jit.script`` of a function calling the op object: TorchScript calls it from
    Python, as torch's own op (compatfn's before: TorchScript typed every parameter of the
    generated call as a Tensor and refused a float)."""
    ours, control = pair(autograd=False)
    assert _scripted_results(ours) == _scripted_results(control)


def _with_tensor_list(x: torch.Tensor, ys: List[torch.Tensor]) -> torch.Tensor:
    return x * 2


def test_register_autograd_none_clears_the_formula_as_torchs():
    """``register_autograd(None)`` on an op with a tensor list (whose formula compatfn wraps on
    torch 2.4-2.13): backward raises torch's "no autograd formula" error, not a TypeError
    (found by a hostile probe)."""
    messages = []
    for op in pair(_with_tensor_list, "with_list", autograd=False):
        op.register_autograd(lambda ctx, g: (g * 2, None))
        op.register_autograd(None)
        x = torch.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError) as error:
            op(x, [torch.ones(1)]).sum().backward()
        messages.append(str(error.value).replace(op._namespace, "ns"))
    assert messages[0] == messages[1]
