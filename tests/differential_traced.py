"""Running a generated Function traced: ``torch.compile``, ``torch.export``, ``torch.jit.trace``,
and the rule that compares it with its hand-written control (:func:`check_like_control`).

Example::

    check_like_control(made, "left-out", args, compiled("aot_eager"), "torch.compile")
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Tuple

import torch

from compatfn import core
from differential_support import (
    Seen,
    assert_same,
    describe,
    grads_of,
    leaves,
    message_class,
    observe,
)
from function_specs import Made
from spec_arguments import Arguments, Call, calls, canonical, defaults, substitute

#: torch.compile exists and dynamo runs on this Python (torch 2.0 has none on Python 3.11).
HAS_COMPILE = hasattr(torch, "compile") and core._dynamo_unsupported() is None

#: torch 2.1's dynamo takes a direct ``Fn.apply(...)`` call with keyword arguments itself (any
#: Function class) and binds them wrongly: a parameter given by keyword reaches forward as its
#: default, or fails dynamo's guard ("type object 'FunctionMeta' has no attribute 'forward'"),
#: before compatfn's apply runs; a hand-written Function takes no keywords there at all
#: (``apply() takes no keyword arguments``). ``functional(Fn)`` binds them (docs/compile-export.md;
#: test_differential_regressions.test_keywords_in_a_direct_apply_on_torch_2_1).
DYNAMO_BINDS_KEYWORDS = core._TORCH_VERSION[:2] == (2, 1)


def dynamo_binds_the_keywords(made: Made, style: str, args: Arguments) -> bool:
    """Whether this call style is a direct call with keywords that torch 2.1's dynamo binds."""
    if not DYNAMO_BINDS_KEYWORDS:
        return False
    return bool(calls(made.spec, args, defaults(made.hand_written))[style][1])


EXPORT = getattr(getattr(torch, "export", None), "export", None)
NON_STRICT = EXPORT is not None and "strict" in inspect.signature(EXPORT).parameters
#: Runs a class in one traced context (``eager=True``: the same call, not traced).
Runner = Callable[..., Seen]


def dynamo_shifts_the_arguments(made: Made, style: str, args: Arguments, run: Runner) -> bool:
    """Whether dynamo, in ``run``, passes the hand-written forward no ctx (core's
    ``_DYNAMO_COUNTS_PARAMETERS``, torch 2.6-2.14: ``*args``, no input requiring grad, as many
    arguments as forward has parameters, ctx included): the hand-written Function then computes
    with every argument one parameter early (it fails, or returns other values), the decorated
    class computes what eager does (NOTE: [dynamo counts forward's parameters])."""
    sees_grad = getattr(run, "dynamo_sees_grad", None)  # None: no dynamo in run
    if sees_grad is None or not (core._DYNAMO_COUNTS_PARAMETERS and made.spec.rest):
        return False
    if sees_grad and any(args.grads):
        return False
    positional, kwargs = calls(made.spec, args, defaults(made.hand_written))[style]
    forward = inspect.signature(made.hand_written.forward)
    return not kwargs and len(positional) == len(forward.parameters)


def _reset() -> None:
    if HAS_COMPILE:
        import torch._dynamo

        torch._dynamo.reset()


def _no_grad(arguments: Arguments) -> Arguments:
    return arguments._replace(grads=tuple(False for _ in arguments.grads))


def _counting(backend: str) -> Any:
    """A backend that runs ``backend`` and counts the graphs it gets (``frame_count``), or None
    where this torch's dynamo has no ``CompileCounterWithBackend``."""
    testing = importlib.import_module("torch._dynamo.testing")
    counter = getattr(testing, "CompileCounterWithBackend", None)
    return None if counter is None else counter(backend)


def compiled(backend: str, fullgraph: bool = True) -> Runner:
    """``torch.compile(backend=backend, fullgraph=fullgraph)``; the Seen counts the graphs."""

    def run(cls: Any, call: Call, arguments: Arguments, eager: bool = False) -> Seen:
        def fn(*tensors: torch.Tensor) -> Any:
            args, kwargs = substitute(call, list(tensors))
            return cls.apply(*args, **kwargs)

        counter = None if eager else _counting(backend)

        def go() -> Tuple[Any, ...]:
            ts = leaves(arguments)
            _reset()
            compiler = backend if counter is None else counter
            target = fn if eager else torch.compile(fn, backend=compiler, fullgraph=fullgraph)
            out = target(*[t.clone() if t.requires_grad else t for t in ts])
            return describe(out), describe(grads_of(out, ts))

        seen = observe(go)
        return seen if counter is None else seen._replace(graphs=counter.frame_count)

    run.dynamo_sees_grad = True  # type: ignore[attr-defined]
    return run


def exported(strict: bool) -> Runner:
    def run(cls: Any, call: Call, arguments: Arguments, eager: bool = False) -> Seen:
        class Module(torch.nn.Module):
            def forward(self, *tensors: torch.Tensor) -> Any:
                args, kwargs = substitute(call, list(tensors))
                return cls.apply(*args, **kwargs)

        def go() -> Tuple[Any, ...]:
            ts = leaves(_no_grad(arguments))
            if eager:
                return (describe(Module()(*ts)),)
            _reset()
            options = {"strict": strict} if NON_STRICT else {}
            program = EXPORT(Module(), tuple(ts), **options)  # type: ignore[misc]
            return (describe(program.module()(*ts)),)

        return observe(go)

    if strict or not NON_STRICT:  # traced by dynamo, without grad
        run.dynamo_sees_grad = False  # type: ignore[attr-defined]
    return run


def traced(cls: Any, call: Call, arguments: Arguments, eager: bool = False) -> Seen:
    def fn(*tensors: torch.Tensor) -> Any:
        args, kwargs = substitute(call, list(tensors))
        return cls.apply(*args, **kwargs)

    def go() -> Tuple[Any, ...]:
        ts = leaves(arguments)
        example = tuple(t.detach().clone() for t in ts)
        program = fn if eager else torch.jit.trace(fn, example, check_trace=False)
        out = program(*[t.clone() if t.requires_grad else t for t in ts])
        return describe(out), describe(grads_of(out, ts))

    return observe(go)


def check_like_control(
    made: Made, style: str, args: Arguments, run: Runner, what: str, views: bool = True
) -> None:
    """The decorated class does what the hand-written control does in ``run`` (``views=False``:
    an output may be a view in one and not in the other)."""
    hand = made.hand_written
    call = calls(made.spec, args, defaults(hand))[style]
    got = run(made.decorated, call, args)
    where = f"{what}, {style} call\n{made.source}"
    if dynamo_shifts_the_arguments(made, style, args, run):
        # The control is no oracle here: the decorated class computes what eager does.
        expected = run(hand, call, args, eager=True)
        where += "\n(dynamo passes the hand-written forward no ctx: compared with eager)"
        assert got.graphs in (None, 1), f"{where}: {got.graphs} graphs"
        assert_same(got._replace(graphs=None), expected, where, check_warnings=False, views=views)
        return
    control = run(hand, call, args)
    if control.error is None or got.error == control.error:
        assert_same(got, control, where, check_warnings=False, views=views)
        return
    # The control fails in this call style (plain apply takes no keywords before torch 2.13, a
    # ctx method dynamo refuses in a legacy forward only): the control called positionally is
    # the reference -- the same failure, or the same values; where it fails and the decorated
    # class works, the values of the control in eager mode.
    where += f"\n(the control failed: {control.error}: {control.message[:300]})"
    positional = run(hand, canonical(made.spec, args, defaults(hand)), args)
    if got.error is not None:
        assert message_class(got.error, got.message) == message_class(
            positional.error, positional.message
        ), (
            where + f"\ndecorated: {got.error}: {got.message[:300]}\npositional control: "
            f"{positional.error or 'ran'}: {positional.message[:300]}"
        )
        return
    if positional.error is None:
        assert_same(got, positional, where, check_warnings=False, views=views)
        return
    # Where no call of the control compiles, the decorated class makes one graph.
    eager = run(hand, canonical(made.spec, args, defaults(hand)), args, eager=True)
    eager = eager._replace(graphs=None if got.graphs is None else 1)
    assert_same(got, eager, where, check_warnings=False, exact=False)
