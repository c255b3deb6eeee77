"""The "torch" tier (torch >= 2.4): torch's own ``torch.library.custom_op``, with the
workarounds compatfn adds where torch's own falls short, and its fast eager call
(``_torch_call``)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Optional, Sequence, Union, cast

import torch

from compatfn.library._facts import (
    CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS,
    TORCH_CUSTOM_OP,
    TORCH_CUSTOM_OP_TAKES_TAGS,
    TorchCustomOpDef,
)
from compatfn.library._infer_schema import infer_schema, schema_for_this_torch
from compatfn.library._schema_facts import (
    infers_from_string_annotations,
    parser_reads_dtype_names,
)
from compatfn.library._torch_op import hand_out
from compatfn.library._utils import schema_has_tensor_lists

__all__ = ["define_with_torch"]


# NOTE: [string annotations]
# torch's own schema inference mishandles string annotations (``from __future__ import
# annotations``): torch 2.4 rejects every one ("Parameter x has unsupported type torch.Tensor",
# https://github.com/pytorch/pytorch/issues/105157, partly fixed by
# https://github.com/pytorch/pytorch/pull/128809 for 2.5), and releases after it were measured
# failing on some (``"Optional[torch.Tensor]"``: "'str' object has no attribute '__origin__'").
# Where torch's own inference reads them as it reads the same annotations written as objects,
# and refuses an unsupported one with its ValueError (checked once:
# ``infers_from_string_annotations``; measured true on 2.10-2.15; false on 2.4, 2.7, 2.8 and
# 2.9: 2.7 and 2.8 raise an AttributeError for ``x: "dict"``), torch infers the schema,
# as for its own op (``X | None``, a one-element tuple's ``((Tensor))``,
# ``mutates_args="unknown"`` and torch's errors included); elsewhere compatfn hands torch the
# schema it inferred itself (the text torch infers for real annotations).


def _has_string_annotations(fn: Callable) -> bool:
    return any(isinstance(a, str) for a in getattr(fn, "__annotations__", {}).values())


# NOTE: [elided default gradients]
# On torch 2.4-2.13 (CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS) backward fails for torch's own
# custom op with a tensor list when a trailing defaulted argument was left at its default: the
# dispatcher does not pass that argument to the op's autograd kernel, and torch's tensor-list
# wrapper then rejects the one-gradient-per-input result (None for the default) that the same
# backward must return when the argument is given. torch 2.14 trims those gradients itself. For
# such ops compatfn returns torch's CustomOpDef with one method changed: register_autograd wraps
# backward to drop trailing None gradients beyond the inputs autograd saw
# (``len(ctx.needs_input_grad)``, the arguments actually passed). Calls are untouched.


def _trim_elided_default_gradients(backward: Callable) -> Callable:
    @functools.wraps(backward)
    def trimmed(ctx: Any, *grads: Any) -> Any:
        result = backward(ctx, *grads)
        passed = len(ctx.needs_input_grad)
        if isinstance(result, tuple) and all(g is None for g in result[passed:]):
            return result[:passed]
        return result

    return trimmed


@functools.lru_cache(maxsize=None)
def _trimming_opdef_class() -> type:
    """torch's CustomOpDef with a register_autograd that trims the gradients of elided defaults
    (See NOTE: [elided default gradients]); one class, made at first use."""
    base: Any = TorchCustomOpDef

    def register_autograd(
        self: Any, backward: Callable, /, *, setup_context: Optional[Callable] = None
    ) -> None:
        # None (or another non-callable) as torch takes it: its error comes at backward.
        trimmed = _trim_elided_default_gradients(backward) if callable(backward) else backward
        base.register_autograd(self, trimmed, setup_context=setup_context)  # type: ignore[attr-defined]

    return type(base.__name__, (base,), {"register_autograd": register_autograd})


def _torch_infers(fn: Callable, mutates_args: Union[str, Iterable[str]]) -> bool:
    """Whether torch's own schema inference (what its custom_op runs) takes ``fn``: where it
    refuses it (torch 2.4.1: a dtype default), torch's custom_op gives its own error."""
    infer: Any = getattr(torch.library, "infer_schema", None)  # torch >= 2.5
    if infer is None:
        try:  # torch 2.4
            from torch._library.infer_schema import infer_schema as infer
        except ImportError:  # a torch that moved it: compatfn's inference stands
            return True
    try:
        infer(fn, mutates_args=mutates_args)
    except ValueError:
        return False
    return True


def define_with_torch(
    name: str,
    fn: Callable,
    mutates_args: Union[str, Iterable[str]],
    device_types: Union[str, Sequence[str], None],
    schema: Optional[str],
    tags: Any,
) -> Any:
    """``torch.library.custom_op(name, fn, ...)``: torch's ``CustomOpDef``."""
    strings = _has_string_annotations(fn) and not infers_from_string_annotations()
    if schema is None and (strings or not parser_reads_dtype_names()):
        # See NOTE: [string annotations]; torch 2.4's own inference writes a dtype default that
        # its parser refuses (``parser_reads_dtype_names``).
        inferred = infer_schema(fn, mutates_args=mutates_args)
        readable = schema_for_this_torch(inferred)
        if strings or (readable != inferred and _torch_infers(fn, mutates_args)):
            schema = readable
    if tags is not None and not TORCH_CUSTOM_OP_TAKES_TAGS:
        raise RuntimeError(
            f"custom_op({name!r}): torch {torch.__version__} cannot attach tags to a custom op "
            "(torch.library.custom_op takes tags from torch 2.5); drop tags= on this torch"
        )
    extra = {} if tags is None else {"tags": tags}
    make = cast(Callable[..., Any], TORCH_CUSTOM_OP)  # this tier runs where torch has it
    opdef = make(  # torch's own, whatever torch.library.custom_op is now
        name, fn, mutates_args=mutates_args, device_types=device_types, schema=schema, **extra
    )
    if CUSTOM_OP_REJECTS_ELIDED_DEFAULT_GRADIENTS and schema_has_tensor_lists(
        str(opdef._opoverload._schema)
    ):
        # See NOTE: [elided default gradients]; tensor lists never take the short path.
        opdef.__class__ = _trimming_opdef_class()
        return hand_out(opdef, fast=False)
    return hand_out(opdef, fast=True)  # See NOTE: [the torch tier's call]
