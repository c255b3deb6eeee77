"""The registration methods of compatfn's op object (torch < 2.4), as torch's ``CustomOpDef``
has them: kernels by device, a fake kernel, an autograd formula, an autocast rule."""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ContextManager,
    Dict,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import torch

from compatfn.library import _registration
from compatfn.library._autocast import (
    autocast_kernel,
    check_autocast_device_type,
    check_autocast_key,
)
from compatfn.library._kernels import check_device_argument, check_device_types, kernel_switched
from compatfn.library._utils import device_types_tuple

if TYPE_CHECKING:
    from compatfn.library._custom_ops import CustomOp

__all__ = ["Registrations"]


class Registrations:
    """What ``CustomOp`` registers, each method as torch's ``CustomOpDef`` method of that name
    (a base of ``CustomOp``)."""

    _qualname: str
    _schema: str
    _mutated: Tuple[int, ...]
    _library: Any
    _kernels: Dict[Optional[str], Callable]
    _switched_by: Dict[Optional[str], Optional[str]]
    _by_device_only: bool
    _fake: Optional[Callable]
    _backward: Optional[Callable]
    _setup_context: Optional[Callable]
    _autocast: Dict[str, torch.dtype]

    def _op(self) -> CustomOp:
        """This object as the ``CustomOp`` it is, for the functions that take one."""
        return cast("CustomOp", self)

    def register_kernel(
        self,
        device_types: Union[str, Sequence[str], None],
        fn: Optional[Callable] = None,
        /,
    ) -> Callable:
        """Use ``fn`` for tensors on ``device_types`` (``"cpu"``, ``"cuda"``, ...; None: the
        kernel for every device without one of its own, as in torch).

        Example::

            @mysin.register_kernel("cuda")
            def _(x):
                return x.sin()
        """
        op = self._op()

        check_device_types(device_types_tuple(device_types))
        check_device_argument(op, device_types_tuple(device_types) or ())
        # See NOTE: [calls without tensors]: from now on, by their device argument only
        self._by_device_only = self._by_device_only or device_types is not None

        def register(kernel: Callable) -> Callable:
            devices = device_types_tuple(device_types) or (None,)  # None: every device
            for device in devices:
                self._kernels[device] = kernel
                self._switched_by[device] = devices[-1]  # See NOTE: [kernels of several devices]
                if self._library is not None:
                    _registration.register_device_kernel(op, device)
            op._regenerate_call()
            return kernel

        return register if fn is None else register(fn)

    def set_kernel_enabled(self, device_type: str, enabled: bool = True) -> ContextManager[None]:
        """Disable (or enable again) the kernel registered for ``device_type`` inside the
        ``with`` block: the function the op was made from runs instead, as in torch.

        Example::

            with mysin.set_kernel_enabled("cpu", False):
                mysin(torch.ones(2))  # the original function, not the "cpu" kernel
        """
        return kernel_switched(self._op(), device_type, enabled)

    def register_torch_dispatch(
        self, torch_dispatch_class: Any, fn: Optional[Callable] = None, /
    ) -> Callable:
        """A rule for a ``TorchDispatchMode`` or tensor subclass (torch >= 2.5). Older torch
        cannot hand a custom operator to such a rule: this raises ``NotImplementedError``."""
        raise NotImplementedError(
            f"{self._qualname}: register_torch_dispatch needs torch >= 2.5 "
            f"(torch.library.register_torch_dispatch); torch {torch.__version__} cannot route a "
            "custom operator to a rule of a TorchDispatchMode or tensor subclass. Handle the op "
            "in the mode's own __torch_dispatch__ instead."
        )

    def register_fake(self, fn: Callable, /) -> Callable:
        """Shapes, dtypes and devices of the outputs, for FakeTensor/``meta`` inputs.

        Example::

            @mysin.register_fake
            def _(x):
                return torch.empty_like(x)
        """
        op = self._op()
        self._fake = fn
        if self._library is not None:
            _registration.register_fake_kernel(op)
        op._regenerate_call()
        return fn

    def register_autograd(
        self, backward: Callable, /, *, setup_context: Optional[Callable] = None
    ) -> None:
        """Gradient formula: ``setup_context(ctx, inputs, output)`` and ``backward(ctx, *grads)``.

        ``inputs`` holds every positional input, defaults filled in; an op with keyword-only
        parameters gets them as ``keyword_only_inputs`` (a dict), as on torch 2.4+.
        """
        if self._mutated:
            raise RuntimeError(
                f"Cannot register autograd formula for non-functional operator {self!r} with "
                f"schema {self._qualname}{self._schema}. Please create a functional operator "
                "and register an autograd formula for that."
            )
        self._backward = backward
        self._setup_context = setup_context
        self._op()._regenerate_call()

    def register_vmap(self, func: Optional[Callable] = None, /) -> Callable:
        """A ``torch.func.vmap`` rule. ``torch.func`` works on custom ops from torch 2.4 only:
        on older torch this raises ``NotImplementedError`` (the rule is never called there)."""
        raise NotImplementedError(
            f"{self._qualname}: register_vmap needs torch >= 2.5 (torch.library.register_vmap); "
            f"torch {torch.__version__} cannot vmap a custom operator. Call the op in a loop, "
            "or write the batched computation as the op itself."
        )

    def register_autocast(self, device_type: str, cast_inputs: torch.dtype) -> Callable:
        """Under autocast on ``device_type``, cast floating-point tensor inputs on that device
        type (not float64) to ``cast_inputs`` and run the op with autocast off (calls through the
        op object; See NOTE: [a custom op's autocast rule]). As torch, the first rule registered
        for a device type stays; torch's checks of ``device_type`` and its errors. Returns the
        rule as a kernel, as torch does.

        Example: ``mysin.register_autocast("cuda", torch.float16)``.
        """
        op = self._op()
        check_autocast_device_type(op, device_type)
        check_autocast_key(device_type)
        self._autocast.setdefault(device_type, cast_inputs)
        op._regenerate_call()
        return autocast_kernel(op, device_type, cast_inputs)
