"""The autograd Function of the torch tier's short path (torch >= 2.4), generated per op: the
kernel and setup_context run as torch's Autograd kernel runs them, backward is torch's own (See
NOTE: [the torch tier's call] in ``_torch_call``)."""

from __future__ import annotations

from typing import Any, Dict, List

import torch

from compatfn.library._facts import is_alias_of, torch_autograd_backward
from compatfn.library._generated import generated_function, setup_context_call
from compatfn.library._storage import distinct_storage_source
from compatfn.library._torch_replay import verified
from compatfn.library._utils import Definition, below_autograd_lines, legacy_function_class

__all__ = ["autograd_class", "single_distinct_tensor"]


def single_distinct_tensor(opdef: Any, out: str, distinct: str) -> str:
    """The test that ``out`` needs no check: the op returns one tensor, and ``out`` is a tensor
    sharing no storage with an input (``distinct``). An op returning several tensors always has
    its output checked (one tensor for two: torch 2.4-2.13 raise TypeError, 2.15 hands it on)."""
    if len(opdef._opoverload._schema.returns) != 1:
        return "False"
    return f"$type({out}) is $Tensor and {distinct}"


def autograd_class(
    opdef: Any, names: List[str], tensors: List[str], given: int, g: Dict[str, Any]
) -> Any:
    """The short path's legacy autograd Function for calls whose first ``given`` arguments reach
    torch's Autograd kernel (the dispatcher leaves out trailing arguments equal to their
    defaults, so torch's ``ctx.needs_input_grad`` has one entry per argument given): forward runs
    the kernel and the registered setup_context with every argument, backward is torch's own
    (See NOTE: [the torch tier's call]). ``g`` holds the defaults (``default<i>``)."""
    call = ", ".join(names)
    inputs = "(" + call + ("," if len(names) == 1 else "") + ")"
    distinct = distinct_storage_source("$output", tensors)
    lines = [f"def $function({', '.join(['$ctx', *names[:given], '$metadata'])}):"]
    lines += [f"    {n} = $default{i}" for i, n in enumerate(names) if i >= given]
    # As torch's Autograd kernel: the kernel, then setup_context, both below autograd; the output
    # is checked before setup_context runs (a wrong one is handed to the dispatcher).
    body = [
        f"$output = $kernel({call})",
        f"if not ({single_distinct_tensor(opdef, '$output', distinct)}):",
        f"    $verified($state, {inputs}, $output)",
    ]
    if opdef._setup_context_fn is not None:
        body.append(setup_context_call(opdef._setup_context_fn, inputs))
    g_below: Dict[str, Any] = {}  # the guard's names
    lines += [f"    {line}" for line in below_autograd_lines(body, g_below)]
    lines.append("    return $output")
    globals_ = {k: v for k, v in g.items() if k.startswith("default")}
    forward = generated_function(
        "".join(line + "\n" for line in lines),
        {
            **globals_,
            **g_below,
            "kernel": opdef._init_fn,
            "setup_context": opdef._setup_context_fn,
            "type": type,
            "Tensor": torch.Tensor,
            "alias_of": is_alias_of,
            "verified": verified,
            "state": opdef.__dict__,
            "ctx": None,
            "metadata": None,
            "output": None,
        },
        set(names),
        f"<forward of custom op {opdef._qualname}>",
    )
    overload = opdef._opoverload
    name = f"GeneratedBackwardFor_{overload._namespace}_{overload._opname}_{overload._overloadname}"
    # See Definition: a graph keeps the formula of the definition that recorded it.
    backward = torch_autograd_backward(Definition(opdef))
    return legacy_function_class(name, forward, backward, __name__)
