"""``opcheck`` on every torch: torch's own on torch >= 2.4, the same tests as far as an older
torch can run them before."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from compatfn.core import _dynamo_unsupported
from compatfn.library._custom_ops import CustomOp
from compatfn.library._facts import HAS_META_DEVICE, HAS_TORCH_OPCHECK, has_auto_functionalize
from compatfn.library._utils import tensors_in

__all__ = ["DEFAULT_TEST_UTILS", "OpCheckError", "opcheck"]

#: The checks torch's ``opcheck`` runs by default (torch 2.4+), and compatfn's on older torch.
DEFAULT_TEST_UTILS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


class OpCheckError(Exception):
    """A failed :func:`opcheck` test (torch's ``OpCheckError`` where torch has one)."""


def opcheck(
    op: Any,
    args: Tuple[Any, ...],
    kwargs: Optional[Dict[str, Any]] = None,
    *,
    test_utils: Union[str, Sequence[str]] = DEFAULT_TEST_UTILS,
    raise_exception: bool = True,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
) -> Dict[str, Any]:
    """``torch.library.opcheck`` on every torch: test that ``op`` is registered correctly.

    torch >= 2.4 runs torch's own. Older torch runs the same tests, as far as that torch can:
    ``test_schema`` (undeclared mutation of an input), ``test_autograd_registration`` (outputs
    are differentiable when an input requires grad), ``test_faketensor`` (FakeTensor or ``meta``
    outputs match the real ones in shape, dtype, device, the strides of dimensions of more than
    one element and storage offset, as torch 2.13's), ``test_aot_dispatch_dynamic`` (with
    ``torch.compile(backend="aot_eager", dynamic=True, fullgraph=True)``: outputs and gradients
    match eager, each run from the same random seed; an error of the op is raised as it is, not
    wrapped by dynamo). A test this torch cannot run is reported as ``"SKIPPED: <reason>"``.
    Returns ``{test name: "SUCCESS" | "SKIPPED: ..." | exception}``; raises the first failure
    unless ``raise_exception=False``. ``atol``/``rtol``: the tolerances comparing compiled with
    eager results (torch's opcheck has them after torch 2.4; ``torch.allclose``'s by default here).

    Example::

        >>> opcheck(numpy_sin, (torch.randn(3, requires_grad=True),))
        {'test_schema': 'SUCCESS', 'test_autograd_registration': 'SUCCESS', ...}
    """
    tests = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    tolerances = {k: v for k, v in (("atol", atol), ("rtol", rtol)) if v is not None}
    if HAS_TORCH_OPCHECK:
        target = op._opoverload if isinstance(op, CustomOp) and op._opoverload else op
        if not isinstance(op, CustomOp) or op._opoverload is not None:
            return dict(
                torch.library.opcheck(  # type: ignore[attr-defined]
                    target,
                    args,
                    kwargs,
                    test_utils=tests,
                    raise_exception=raise_exception,
                    **tolerances,  # torch 2.4's opcheck has none: its TypeError
                )
            )
    if not isinstance(op, CustomOp):
        raise TypeError(
            f"opcheck: {op!r} is not an operator made by compatfn.custom_op; on torch "
            f"{torch.__version__} compatfn can check only those"
        )
    kwargs = dict(kwargs or {})
    results: Dict[str, Any] = {}
    for test in tests:
        check = _OPCHECKS.get(test)
        if check is None:
            raise ValueError(f"opcheck: unknown test {test!r}; known: {list(_OPCHECKS)}")
        try:
            if test == "test_aot_dispatch_dynamic":
                skipped = _check_aot_dispatch_dynamic(op, args, kwargs, **tolerances)
            else:
                skipped = check(op, args, kwargs)
        except Exception as exc:
            if raise_exception:
                raise OpCheckError(
                    f"opcheck(op, ...): {test} failed with {exc} (scroll up for stack trace)"
                ) from exc
            results[test] = exc
            continue
        results[test] = f"SKIPPED: {skipped}" if skipped else "SUCCESS"
    return results


def _cloned(values: Sequence[Any], requires_grad: bool = True) -> List[Any]:
    def clone(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            return c.requires_grad_(v.requires_grad and requires_grad)
        if isinstance(v, (list, tuple)):
            return type(v)(clone(t) for t in v)
        return v

    return [clone(v) for v in values]


def _outputs(out: Any) -> List[torch.Tensor]:
    return tensors_in(out if isinstance(out, (tuple, list)) else (out,))


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(a.shape == b.shape and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))


def _check_schema(op: CustomOp, args: tuple, kwargs: dict) -> Optional[str]:
    inputs, keyword_only = op._bind(tuple(args), kwargs)
    before = _cloned(list(inputs) + list(keyword_only.values()), requires_grad=False)
    used = _cloned(list(inputs) + list(keyword_only.values()), requires_grad=False)
    names = op._positional + op._keyword_only
    with torch.no_grad():
        op(*used[: len(inputs)], **dict(zip(op._keyword_only, used[len(inputs) :])))
    for i, (old, new) in enumerate(zip(before, used)):
        olds, news = tensors_in((old,)), tensors_in((new,))
        changed = any(not _same_values(a, b) for a, b in zip(olds, news))
        if changed and i not in op._mutated:
            raise RuntimeError(f"Argument {names[i]} is not defined as mutable but was mutated")
    return None


def _check_autograd_registration(op: CustomOp, args: tuple, kwargs: dict) -> Optional[str]:
    used = _cloned(args)
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors_in(used))):
        return None
    for o in _outputs(op(*used, **kwargs)):
        if o.is_floating_point() and o.grad_fn is None:
            raise AssertionError(
                f"{op._qualname}: an input requires grad but output has no grad_fn: autograd "
                "is not registered for this operator"
            )
    return None


def _fake_mode() -> Any:
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        return None
    return FakeTensorMode


def _new_fake_mode(mode_cls: Any) -> Tuple[Any, Dict[str, bool]]:
    """A FakeTensorMode as torch 2.13's opcheck makes it (``CrossRefFakeMode``): with a shape
    environment, so that a fake kernel can make a data-dependent size
    (``torch.library.get_ctx().new_dynamic_size()``), and the arguments' shapes static (the
    keywords for ``from_tensor``), where this torch's FakeTensorMode takes them (torch >= 2.0)."""
    if "shape_env" not in inspect.signature(mode_cls).parameters:  # torch 1.13
        return mode_cls(), {}
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return mode_cls(shape_env=ShapeEnv()), {"static_shapes": True}


def _check_faketensor(op: CustomOp, args: tuple, kwargs: dict) -> Optional[str]:
    with torch.no_grad():
        real = _outputs(op(*_cloned(args), **kwargs))
    mode_cls = _fake_mode() if op._opoverload is not None else None
    if mode_cls is not None:
        mode, static = _new_fake_mode(mode_cls)

        def convert(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return mode.from_tensor(v.detach().clone(), **static)
            if isinstance(v, (list, tuple)):
                return type(v)(convert(t) for t in v)
            return v

        fake_args = [convert(v) for v in args]
        fake_kwargs = {k: convert(v) for k, v in kwargs.items()}
        with mode, torch.no_grad():
            fake = _outputs(op(*fake_args, **fake_kwargs))
    elif HAS_META_DEVICE:

        def to_meta(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return v.detach().to("meta")
            if isinstance(v, (list, tuple)):
                return type(v)(to_meta(t) for t in v)
            return v

        with torch.no_grad():
            fake = _outputs(
                op(*[to_meta(v) for v in args], **{k: to_meta(v) for k, v in kwargs.items()})
            )
    else:
        return f"torch {torch.__version__} has neither FakeTensor nor a meta device"
    _compare_fake_and_real(op, fake, real)
    return None


class MetadataMismatchError(RuntimeError):
    """torch's error for a fake kernel whose outputs differ from the real kernel's in shape,
    dtype, device, strides or storage offset (``MetadataMismatchError`` of newer torch's
    ``torch._subclasses.fake_tensor``; torch 2.4 and 2.5 raise a RuntimeError with the same
    message, measured)."""


def _compare_fake_and_real(op: CustomOp, fake: List[Any], real: List[Any]) -> None:
    """torch's comparison of the fake and the real outputs (``CrossRefFakeMode``), its errors
    and messages."""
    overload = op._overload or "default"
    context = (
        f"When comparing the output of {op._namespace}.{op._name}.{overload} on FakeTensor and "
        "concrete Tensors, found"
    )
    if len(fake) != len(real):
        raise AssertionError(f"{context} mismatch in number of returns {len(fake)} != {len(real)}")
    for i, (f, r) in enumerate(zip(fake, real)):
        if r.layout is torch.strided and r.storage_offset() != f.storage_offset():
            raise MetadataMismatchError(f"{context} mismatched storage offset")
        mismatch = None
        if not _same_sizes(r.shape, f.shape):
            mismatch = f"Shapes {r.shape} and {f.shape} are not equal!"
        elif f.dtype != r.dtype:
            mismatch = f"Dtypes {r.dtype} and {f.dtype} are not equal!"
        elif f.device != r.device and f.device.type != "meta":
            mismatch = f"Devices {r.device} and {f.device} are not equal!"
        elif _stride_mismatch(r, f) is not None:
            mismatch = (
                f"Stride mismatch! Strides are {r.stride()} and {f.stride()} "
                f"(mismatched at {_stride_mismatch(r, f)})!"
            )
        if mismatch is not None:
            which = "" if len(real) == 1 else f" for output[{i}]"
            raise MetadataMismatchError(f"{context} mismatched tensor metadata{which}: {mismatch}")


#: dynamo's exceptions around an error raised while it compiles (the op's own, in its kernel,
#: fake kernel or autograd formula): torch's opcheck, which runs AOTAutograd without dynamo,
#: reports the op's error itself.
_DYNAMO_WRAPPERS = ("BackendCompilerFailed", "TorchRuntimeError", "InternalTorchDynamoError")


def _unwrapped(error: BaseException) -> BaseException:
    """The error inside dynamo's wrappers of it."""
    while type(error).__name__ in _DYNAMO_WRAPPERS or _runs_node(error):
        inner = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    return error


def _runs_node(error: BaseException) -> bool:
    """dynamo's RuntimeError around an error of a node it runs on fake values (torch 2.1)."""
    return type(error) is RuntimeError and str(error).startswith("Failed running ")


#: A symbolic size (torch >= 2.0; none before).
_SYM_INT: Any = getattr(torch, "SymInt", ())


def _same_sizes(real: Sequence[int], fake: Sequence[Any]) -> bool:
    """Whether the fake output's sizes are the real one's; a symbolic size of the fake output (a
    data-dependent size its fake kernel made: the arguments' shapes are static) matches any, as
    in torch 2.13's comparison (``allow_rhs_unbacked``)."""
    if len(real) != len(fake):
        return False
    return all(isinstance(f, _SYM_INT) or f == r for r, f in zip(real, fake))


def _stride_mismatch(real: torch.Tensor, fake: torch.Tensor) -> Optional[int]:
    """The first dimension of more than one element where the strides differ, for a tensor with
    elements (torch 2.13's ``check_significant_strides``, which its opcheck applies; a symbolic
    stride of the fake output matches any); else None."""
    if real.layout is not torch.strided or real.numel() == 0:
        return None
    for i, (size, a, b) in enumerate(zip(real.shape, real.stride(), fake.stride())):
        if size > 1 and not isinstance(b, _SYM_INT) and a != b:
            return i
    return None


def _check_aot_dispatch_dynamic(
    op: CustomOp, args: tuple, kwargs: dict, atol: float = 1e-8, rtol: float = 1e-5
) -> Optional[str]:
    if op._opoverload is None:
        return "the op is not registered with the dispatcher on this torch (no torch.compile)"
    why = _dynamo_unsupported()
    if why:
        return why
    if op._mutated and not has_auto_functionalize():
        return (
            f"torch {torch.__version__} cannot compile an operator that mutates its inputs "
            "(no auto_functionalize before torch 2.2)"
        )
    dynamo = importlib.import_module("torch._dynamo")

    def call(*values: Any) -> Any:
        return op(*values, **kwargs)

    def run(fn: Callable) -> Tuple[List[torch.Tensor], List[Any]]:
        with torch.random.fork_rng():  # as torch's opcheck: each run from the same seed
            torch.manual_seed(42)
            return run_seeded(fn)

    def run_seeded(fn: Callable) -> Tuple[List[torch.Tensor], List[Any]]:
        used = _cloned(args)
        leaves = [t for t in tensors_in(used) if t.requires_grad]
        out = _outputs(fn(*used))
        diff = [o for o in out if o.requires_grad]
        grads: List[Any] = []
        if diff and leaves:
            grads = list(
                torch.autograd.grad(
                    diff, leaves, [torch.ones_like(o) for o in diff], allow_unused=True
                )
            )
        return [o.detach() for o in out] + [t.detach() for t in tensors_in(used)], grads

    dynamo.reset()
    # torch's opcheck traces with AOTAutograd alone, which records an op of data-dependent
    # output size (its fake kernel's ``new_dynamic_size()``); dynamo does where told to.
    try:
        with dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            compiled = torch.compile(call, backend="aot_eager", dynamic=True, fullgraph=True)
            try:
                got = run(compiled)
            except Exception as error:
                raise _unwrapped(error) from None
    finally:
        dynamo.reset()
    expected = run(call)
    for a, b in zip(got[0] + got[1], expected[0] + expected[1]):
        if (a is None) != (b is None) or (
            a is not None and not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        ):
            raise AssertionError(f"{op._qualname}: compiled outputs or gradients differ from eager")
    return None


_OPCHECKS: Dict[str, Callable[[CustomOp, tuple, dict], Optional[str]]] = {
    "test_schema": _check_schema,
    "test_autograd_registration": _check_autograd_registration,
    "test_faketensor": _check_faketensor,
    "test_aot_dispatch_dynamic": _check_aot_dispatch_dynamic,
}
