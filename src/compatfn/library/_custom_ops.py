"""The op object of compatfn's tiers (torch < 2.4): :class:`CustomOp`."""

from __future__ import annotations

import inspect
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import torch

from compatfn.core import _dynamo_tracing as dynamo_tracing
from compatfn.library import _registration
from compatfn.library._autocast import (
    autocast_rule,
    call_autocast,
)
from compatfn.library._autograd import (
    apply_autograd,
    autograd_function,
    regrouped_returns,
)
from compatfn.library._call_errors import (
    check_tensor_arguments,
    generators_listed,
    has_named_tensor,
)
from compatfn.library._convert import (
    MISSING,
    any_left_out,
    conversions,
    given_by_position,
    wrong_call,
)
from compatfn.library._dispatch_state import (
    BelowAutograd,
    autograd_excluded,
    is_tracing,
)
from compatfn.library._fast_call import generated_call
from compatfn.library._infer_schema import (
    check_given_schema,
    check_no_keyword_only_tensors,
    check_no_view_returns,
    infer_schema,
    kernel_signature,
    schema_for_this_torch,
    schema_signature,
    spaced_schema,
    tensor_parameters,
    with_schema_defaults,
)
from compatfn.library._kernels import (
    ad_inplace_or_view_runs,
    as_autograd_returned,
    bump_zero_tensors,
    check_device_argument,
    check_device_types,
    device_argument_index,
    has_tensor_argument,
    is_inference,
    kernel_keywords,
    keyword_defaults,
    run_kernel,
)
from compatfn.library._no_operator import (
    call_without_operator,
    fallback_inputs,
    needs_dispatcher,
    refuse_transforms,
    torch_function_arguments,
    transforms_active,
)
from compatfn.library._op_registrations import Registrations
from compatfn.library._returns import (
    list_return_positions,
    return_types,
    scalar_return_types,
    tensor_return_count,
)
from compatfn.library._storage import is_dense
from compatfn.library._utils import (
    any_requires_grad,
    check_namespace_definable,
    check_operator_name,
    detached,
    elidable_tail,
    parse_qualname,
    tensors_in,
)

__all__ = ["OPS", "CustomOp"]

_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
#: Arguments handed to the dispatcher as given where equal to their defaults.
_PLAIN_SCALARS = (int, float, bool, str)
#: Every op compatfn's tiers defined, by qualified name (the newest definition of each).
OPS: Dict[str, CustomOp] = {}
#: Every op object made for a qualified name: a new definition makes the older objects follow it.
_OBJECTS: Dict[str, List[CustomOp]] = {}


class CustomOp(Registrations):
    """A custom operator made by ``compatfn.custom_op`` on torch < 2.4 (torch's own object on
    2.4+).

    Call it like the function it was made from; register kernels and formulas with the same
    methods as torch's ``CustomOpDef``.

    Example::

        >>> @compatfn.custom_op("mylib::scale", mutates_args=())
        ... def scale(x: torch.Tensor, s: float = 2.0) -> torch.Tensor:
        ...     return x * s
        >>> scale(torch.ones(2), s=3.0)
        tensor([3., 3.])
    """

    def __init__(
        self,
        qualname: str,
        fn: Callable,
        mutates_args: Union[str, Iterable[str]],
        device_types: Optional[Tuple[str, ...]],
        schema: Optional[str],
        registered: bool,
        tags: Sequence[Any] = (),
    ) -> None:
        self._namespace, self._name, self._overload = parse_qualname(qualname)
        check_namespace_definable(self._namespace)
        check_device_types(device_types)
        self._full_name = f"{self._name}.{self._overload}" if self._overload else self._name
        self._qualname = qualname
        if schema is not None:
            check_given_schema(self._full_name, schema, mutates_args)
            check_no_view_returns(qualname, schema)
            schema = spaced_schema(schema)
        self._schema = schema if schema is not None else infer_schema(fn, mutates_args=mutates_args)
        check_operator_name(qualname, None if schema is None else schema_for_this_torch(schema))
        check_no_keyword_only_tensors(self._full_name, self._schema, tags)
        self._signature = kernel_signature(fn)
        #: The kernel's own defaults (by position; keyword-only ones by name): what it gets for
        #: an argument the dispatcher leaves out (See NOTE: [arguments equal to their defaults]).
        self._kernel_defaults = self._own_defaults()
        if schema is not None:  # calls bind as the schema says
            self._signature = schema_signature(self._full_name, schema, self._signature)
        else:
            self._signature = with_schema_defaults(self._signature, fn)
        params = list(self._signature.parameters.values())
        self._positional = [p.name for p in params if p.kind is not p.KEYWORD_ONLY]
        self._keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        #: The schema's defaults by name (a plain dict: dynamo reads it in a traced call).
        self._defaults = {p.name: p.default for p in params}
        self._mutated = self._mutated_positions(mutates_args)
        self._conversions = conversions(qualname, self._schema, schema is None, registered)
        self._keyword_defaults = keyword_defaults(self)
        self._returns_list = return_types(self._schema) == (("Tensor[]",), False)
        self._list_returns = list_return_positions(self._schema)
        self._tensor_returns = tensor_return_count(self._schema)
        self._scalar_returns = scalar_return_types(self._schema)
        self._kernels: Dict[Optional[str], Callable] = dict.fromkeys(device_types or (None,), fn)
        # The argument a call without tensors takes its device from (See NOTE: [calls without
        # tensors] in _kernels)
        self._device_index = (
            None if has_tensor_argument(self._schema) else device_argument_index(self._schema)
        )
        check_device_argument(self, device_types or ())
        self._by_device_only = device_types is not None
        self._fake: Optional[Callable] = None
        self._backward: Optional[Callable] = None
        self._setup_context: Optional[Callable] = None
        self._autocast: Dict[str, torch.dtype] = {}
        self._disabled_kernels: set = set()
        self._switched_by: Dict[Optional[str], Optional[str]] = {}
        self._tags = tuple(tags)
        if not registered:  # torch 1.8-1.12's fx calls an op by its module and name
            self.__name__ = self.__qualname__ = self._name
            self.__module__ = getattr(fn, "__module__", __name__)
        # torch's name for it; no __wrapped__, so that inspect.signature(op) is the call's
        # (*args, **kwargs), as torch's op answers it and TorchScript reads it.
        self._init_fn = fn
        self._tensor_params, self._only_tensors_and_scalars = tensor_parameters(fn, params)
        self._eager_fn = autograd_function(self, dispatched=False)
        self._library: Any = None
        self._opoverload: Any = None
        self._registered_keys: set = set()
        self._previous = OPS.get(qualname)
        _registration.check_tags(qualname, self._tags, registered)
        if registered:  # everything that can fail at definition is checked before this
            _registration.define(self, self._tags)
            self._dispatched_fn = autograd_function(self, dispatched=True)
            _registration.register_kernels(self, device_types)
        # A class of its own, whose __call__ is the op's call. See NOTE: [the op's call].
        self.__class__ = type(
            "CustomOp",
            (type(self),),
            {"__module__": __name__, "__qualname__": "CustomOp", "__doc__": CustomOp.__doc__},
        )
        self._regenerate_call()
        self._previous = None
        objects = _OBJECTS.setdefault(qualname, [])
        for older in objects:  # the newest definition wins; old objects follow
            older.__class__ = self.__class__
            older.__dict__ = self.__dict__
        objects.append(self)
        OPS[qualname] = self

    def __repr__(self) -> str:  # torch's op object's
        return f"<CustomOpDef({self._qualname})>"

    # ---------------------------------------------------------------- calling

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the operator. Each op made by ``custom_op`` replaces this with a call that has
        the op's own signature (See NOTE: [the op's call])."""
        inputs, keyword_only = self._bind(args, kwargs)
        return self._general_call(inputs, keyword_only, args, kwargs, len(inputs))

    def _general_call(
        self,
        inputs: tuple,
        keyword_only: Dict[str, Any],
        given: tuple,
        written: Dict[str, Any],
        count: int,
    ) -> Any:
        """Every call the short path does not take: through the dispatcher where something needs
        it (tracing, modes, transforms, tensor subclasses), as the caller wrote it (``given``:
        the values given by position, ``MISSING`` after the last; ``written``: the keywords),
        else the kernels through autograd (``count``: how many arguments the dispatcher passes);
        torch's error for a required tensor left out (See NOTE: [the op's call])."""
        if any_left_out(inputs) or any_left_out(keyword_only.values()):
            return wrong_call(self, given, (), written)
        if self._opoverload is not None:
            if not self._eager_ok(inputs, keyword_only):  # the operator checks, modes see it
                if self._mutated and not dynamo_tracing():  # See bump_zero_tensors
                    bump_zero_tensors(self, inputs)
                values = dict(zip(self._positional, inputs))  # dynamo 2.1 cannot trace
                values.update(keyword_only)  # dict(pairs, **keywords)
                positional, keywords = self._as_written(values, given, written, count)
                return self._opoverload(*positional, **keywords)
            check_tensor_arguments(self, inputs, keyword_only)
            return self._apply(inputs, keyword_only, self._eager_fn, count)
        check_tensor_arguments(self, inputs, keyword_only)
        return call_without_operator(self, inputs, keyword_only, count)

    def _refused(
        self,
        error: RuntimeError,
        given: tuple,
        args: tuple,
        kwargs: Dict[str, Any],
        converted: Dict[str, Any],
    ) -> Any:
        """A call with an argument the conversions refuse (``error``, torch 2.13's): through the
        operator where the call needs it (a mode sees the call before the operator refuses it,
        with the error of the torch that runs; torch.fx records it), else ``error``. A generator
        (for a ``Tensor[]``) goes on as a list: the one in ``converted`` (the arguments before
        the refused one, converted) where the conversion read it, else read now; torch before
        2.4 refuses a generator, and torch 2.13 then names the refused argument."""
        if needs_dispatcher() or torch_function_arguments((*given, *args), kwargs):
            given, kwargs = generators_listed(self._positional, given, kwargs, converted)
            return wrong_call(self, given, args, kwargs)
        raise error

    def _as_written(
        self, values: Dict[str, Any], given: tuple, written: Dict[str, Any], count: int
    ) -> Tuple[tuple, Dict[str, Any]]:
        """The arguments (``values``, converted, by name) laid out as the caller wrote them
        (``given`` by position, ``MISSING`` after the last; ``written`` by keyword): what
        torch's own op hands the dispatcher, so that a graph records keywords as keywords and
        leaves out what the caller left out. An argument equal to its default, which the call
        replaced with the kernel's own default (positions from ``count`` on, keyword-only ones),
        is handed on as given.

        Example: ``op(x, scale=np.float64(3))`` gives ``((x,), {"scale": 3.0})``."""
        by_position = given_by_position(given)
        for i, name in enumerate(self._positional[count:], count):
            if i < len(by_position) or name in written:
                raw = by_position[i] if i < len(by_position) else written[name]
                plain = type(raw) in _PLAIN_SCALARS
                values[name] = raw if plain else self._defaults[name]
        for name in self._keyword_only:
            raw = written.get(name, MISSING)
            if type(raw) in _PLAIN_SCALARS and raw == self._defaults[name]:
                values[name] = raw
        positional = tuple(values[name] for name in self._positional[: len(by_position)])
        return positional, {name: values[name] for name in written}

    def _short_path_ok(self) -> bool:
        """Whether the op is simple enough for the short path (See NOTE: [the op's call])."""
        return (
            not self._keyword_only
            and not self._mutated
            and not self._autocast
            and "[" not in self._schema
            and "Tensor?" not in self._schema
            and list(self._kernels) == [None]
            and self._kernels[None] is self._init_fn  # its signature is the op's
            and self._only_tensors_and_scalars
            and self._tensor_returns > 0
            # a parameter the call can leave out has a default in the kernel (else Python's
            # error, as for torch's kernel: the general path calls it so)
            and all(
                i in self._kernel_defaults
                for i in range(elidable_tail(self), len(self._positional))
            )
        )

    def _regenerate_call(self) -> None:
        """The op's call as it is registered now (See NOTE: [the op's call]); run again by every
        registration."""
        type(self).__call__ = generated_call(self)  # type: ignore[method-assign]

    def _eager_ok(self, inputs: tuple, keyword_only: Dict[str, Any]) -> bool:
        """Whether a call may skip the dispatcher: plain tensors (no proxies, no lazy conjugate or
        negative views, no ZeroTensors), no tracing, modes, transforms, profiler or forward AD."""
        if needs_dispatcher():
            return False
        if torch_function_arguments(inputs, keyword_only):  # torch.fx proxies
            return False
        # Asked of plain tensors only: a subclass's __torch_function__ sees none of it.
        tensors = [*tensors_in(inputs), *tensors_in(keyword_only.values())]
        if not all(type(t) in _PLAIN_TENSORS for t in tensors):
            return False
        if has_named_tensor(tensors):  # the operator refuses it
            return False
        # torch's Meta kernel hands the fake kernel torch's get_ctx(): See NOTE: [the fake
        # kernel of a registered op]
        if _registration.fake_kernel_in_registry(self) and any(t.is_meta for t in tensors):
            return False
        # See NOTE: [backends other than dense]
        return all(is_dense(t) for t in tensors) and not fallback_inputs(inputs)

    def _bind(self, args: tuple, kwargs: dict) -> Tuple[tuple, Dict[str, Any]]:
        """Full positional inputs (defaults filled) and the keyword-only ones."""
        if not kwargs and len(args) == len(self._positional) and not self._keyword_only:
            return args, {}
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self._qualname}: {exc}") from None
        bound.apply_defaults()
        values = bound.arguments
        return (
            tuple(values[n] for n in self._positional),
            {n: values[n] for n in self._keyword_only},
        )

    def _apply(self, inputs: tuple, keyword_only: Dict[str, Any], fn: Any, count: int) -> Any:
        """A call through ``fn`` where autograd records it (``count``: how many of ``inputs``
        the dispatcher passes), else the kernels below autograd."""
        autocast = autocast_rule(self, inputs) if self._autocast else None
        if autocast is not None:
            return call_autocast(self, inputs[:count], keyword_only, autocast)
        # See NOTE: [where torch's Autograd kernel runs]
        excluded = autograd_excluded()
        tensors = tensors_in(inputs)
        # No tensor but inference tensors (none at all included): the dispatcher's key set has
        # no Autograd key, so the kernel runs as called, recording what it records.
        inference = all(is_inference(t) for t in tensors)
        if not excluded and (
            (not inference and torch.is_grad_enabled() and any_requires_grad(inputs))
            or (self._opoverload is None and is_tracing())
        ):  # See NOTE: [tracing without a dispatcher]
            if fn is not self._eager_fn and transforms_active():
                refuse_transforms(self)
            output = apply_autograd(fn, self, inputs, keyword_only, count)
            if self._list_returns:  # See NOTE: [tensor lists among several returns]
                output = regrouped_returns(output, self._list_returns)
            if fn is self._eager_fn:  # what torch's Autograd kernel returns
                output = as_autograd_returned(self._tensor_returns, output)
            return list(output) if self._returns_list else output
        if fn is not self._eager_fn:  # torch's Autograd kernel called this
            return _registration.below_autograd(self._opoverload, inputs, keyword_only)
        kernel_call = (self, inputs, count, kernel_keywords(self, keyword_only))
        if excluded or inference:
            output = run_kernel(*kernel_call)
            if self._mutated and ad_inplace_or_view_runs(tensors):  # its kernel returns it
                return self._listed(as_autograd_returned(self._tensor_returns, output))
            return self._listed(output)
        if BelowAutograd is None:  # torch 1.8: a graph the kernel recorded is dropped
            output = detached(run_kernel(*kernel_call))
        else:
            output = _registration.below_autograd(run_kernel, kernel_call, {})
        return self._listed(as_autograd_returned(self._tensor_returns, output))

    def _listed(self, output: Any) -> Any:
        """``output`` as torch's operator hands a ``Tensor[]`` return to Python: a list (a
        kernel may return a tuple)."""
        return list(output) if self._returns_list and type(output) is tuple else output

    def _own_defaults(self) -> Dict[Union[int, str], Any]:
        """The kernel's defaults: by position, and by name for keyword-only parameters."""
        params = self._signature.parameters.values()
        positional = [p for p in params if p.kind is not p.KEYWORD_ONLY]
        own: Dict[Union[int, str], Any] = {
            i: p.default for i, p in enumerate(positional) if p.default is not p.empty
        }
        own.update((p.name, p.default) for p in params if p.kind is p.KEYWORD_ONLY)
        return {k: v for k, v in own.items() if v is not inspect.Parameter.empty}

    def _mutated_positions(self, mutates_args: Union[str, Iterable[str]]) -> Tuple[int, ...]:
        names = self._positional if isinstance(mutates_args, str) else set(mutates_args)
        return tuple(i for i, n in enumerate(self._positional) if n in names)

    # ---------------------------------------------------------------- dispatcher kernels

    def _device_kernel(self, *args: Any, **kwargs: Any) -> Any:
        # The dispatcher has left out what equals its default: the kernel gets its own.
        inputs, _ = self._bind(args, kwargs)
        return run_kernel(self, inputs, len(args), kwargs)

    def _fake_kernel(self, *args: Any, **kwargs: Any) -> Any:
        # See NOTE: [the fake kernel of a registered op]
        inputs, _ = self._bind(args, kwargs)
        return run_kernel(self, inputs, len(args), kwargs, fake=True)

    def _autograd_kernel(self, *args: Any, **kwargs: Any) -> Any:
        inputs, keyword_only = self._bind(args, kwargs)
        return self._apply(inputs, keyword_only, self._dispatched_fn, len(args))
