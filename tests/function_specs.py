"""Generated autograd Functions, each written twice: the oracle for the differential suite.

A :class:`Spec` describes one Function: its signature (a tensor ``x``, then tensors, numbers,
bools, ``None``, strings, tuples, a tensor-valued default, ``*rest`` tensors), its outputs (a
second differentiable output, a ``mark_non_differentiable`` mask, a Python int, an intermediate
through ``intermediates=1``) and its ctx use (``save_for_backward`` or attributes, ``mark_dirty``
in place, ``set_materialize_grads(False)``, ``needs_input_grad``, ``once_differentiable``, a
warning with ``stacklevel=2``, a ``ValueError``). :func:`build` writes a module with both forms of
the same math -- the ``@compatfn.function`` setup_context class and a hand-written legacy class
``forward(ctx, ...)`` -- to a real file and imports it, so that warnings and tracebacks have real
locations. ``spec_arguments`` draws specs and their arguments with hypothesis and
gives every call style a spec allows (positional, keywords, defaults left out, reordered keywords,
keywords skipping a default).

Example::

    spec = Spec(params=(Param("scale", "float", "1.5"),))
    made = build(spec)
    made.decorated.apply(torch.ones(4), scale=2.0)
    made.hand_written.apply(torch.ones(4), 2.0)
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import os
import shutil
import sys
import tempfile
import textwrap
from typing import Any, List, NamedTuple, Optional, Tuple

#: Non-tensor parameter kinds: how each adds to the Python float ``coef`` forward scales by.
COEF = {
    "int": "coef = coef + {n} * 0.5",
    "float": "coef = coef + {n}",
    "bool": "coef = coef + (1.0 if {n} else -0.5)",
    "none": "coef = coef + (0.0 if {n} is None else float({n}))",
    "str": 'coef = coef + (0.5 if {n} == "add" else 1.5)',
    "tuple": "coef = coef + sum({n}) * 0.125",
}
TENSOR_KINDS = ("tensor", "tensor_default")
DEFAULTS = {
    "int": "2",
    "float": "1.5",
    "bool": "True",
    "none": "None",
    "str": '"add"',
    "tuple": "(1, 2)",
    "tensor_default": "_W",
}
WARNING = "compatfn differential spec warning"
N = 4  # elements per tensor


class Param(NamedTuple):
    name: str
    kind: str  # a key of COEF, "tensor" or "tensor_default"
    default: Optional[str] = None  # source of the default, None: required


class Spec(NamedTuple):
    """One Function; every field changes the written source (see the module docstring)."""

    params: Tuple[Param, ...] = ()
    rest: bool = False  # a trailing ``*rest`` of tensors
    inplace: bool = False  # x.mul_(coef) + mark_dirty, instead of x * x * coef
    out2: bool = False  # a second differentiable output, x * 3
    mask: bool = False  # a mark_non_differentiable bool output
    count: bool = False  # a Python int output
    intermediates: bool = False  # x * 2 as an intermediate (intermediates=1)
    attributes: bool = False  # tensors kept as ctx attributes, not save_for_backward
    materialize: bool = True  # False: ctx.set_materialize_grads(False)
    needs_input_grad: bool = False
    once: bool = False  # @once_differentiable backward
    warn: bool = False  # warnings.warn(..., stacklevel=2) in forward
    raises: bool = False  # ValueError in forward when coef < 0


class Made(NamedTuple):
    spec: Spec
    source: str
    path: str
    decorated: Any  # @compatfn.function setup_context class
    undecorated: Any  # the same class, not decorated (torch.func's oracle)
    hand_written: Any  # legacy forward(ctx, ...) without compatfn


# --------------------------------------------------------------------------- writing the source


def _extras(spec: Spec) -> List[str]:
    """Tensor arguments after x, as expressions over forward's parameters (rest unpacked)."""
    names = [p.name for p in spec.params if p.kind in TENSOR_KINDS]
    return names + (["*rest"] if spec.rest else [])


def _signature(spec: Spec, ctx: bool) -> str:
    parts = ["ctx"] if ctx else []
    parts.append("x")
    parts += [p.name if p.default is None else f"{p.name}={p.default}" for p in spec.params]
    if spec.rest:
        parts.append("*rest")
    return ", ".join(parts)


def _inputs_unpacking(spec: Spec) -> str:
    names = ["x"] + [p.name for p in spec.params] + (["*rest"] if spec.rest else [])
    return ", ".join(names) + ("," if len(names) == 1 else "")


def _coef_lines(spec: Spec) -> List[str]:
    lines = ["coef = 1.0"]
    lines += [COEF[p.kind].format(n=p.name) for p in spec.params if p.kind in COEF]
    return lines


def _compute_lines(spec: Spec) -> List[str]:
    """forward's math: sets out (and out2, mask, count, inter); x changes in place if inplace."""
    extras = ", ".join(_extras(spec))
    lines = [f"extras = ({extras}{',' if extras else ''})"]
    if spec.warn:
        lines.insert(0, f"warnings.warn({WARNING!r}, stacklevel=2)")
    if spec.raises:
        lines.append('if coef < 0:\n    raise ValueError(f"coef {coef} < 0")')
    if spec.out2:
        lines.append("out2 = x * 3.0")
    if spec.mask:
        lines.append("mask = x > 0")
    if spec.count:
        lines.append("count = x.shape[0] + len(extras)")
    if spec.inplace:
        lines += ["x.mul_(coef)", "for t in extras:\n    x.add_(t)", "out = x"]
    else:
        lines += ["out = x * x * coef", "for t in extras:\n    out = out + t * x"]
    if spec.intermediates:
        lines.append("inter = x * 2.0")
    return lines


def _outputs(spec: Spec) -> List[str]:
    names = ["out"]
    names += [
        n for n, on in (("out2", spec.out2), ("mask", spec.mask), ("count", spec.count)) if on
    ]
    return names


def _tuple(names: List[str]) -> str:
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def _ctx_lines(spec: Spec) -> List[str]:
    """What forward (hand-written) or setup_context (decorated) does with ctx."""
    lines = ["ctx.coef = coef", "ctx.n_rest = len(extras) - len(TENSOR_AT)"]
    if spec.inplace:
        lines.append("ctx.mark_dirty(x)")
    else:
        kept = "(inter,) + extras" if spec.intermediates else "(x,) + extras"
        lines.append(f"ctx.kept = {kept}" if spec.attributes else f"ctx.save_for_backward(*{kept})")
    if spec.mask:
        lines.append("ctx.mark_non_differentiable(mask)")
    if not spec.materialize:
        lines.append("ctx.set_materialize_grads(False)")
    return lines


def _backward_lines(spec: Spec) -> List[str]:
    lines = ["g = grads[0]", "g2 = grads[1]" if spec.out2 else "g2 = None", "coef = ctx.coef"]
    lines.append("if g is None and g2 is None:\n    return (None,) * (N_IN + ctx.n_rest)")
    if spec.inplace:
        lines += [
            "gx = None if g is None else g * coef",
            "gt = [g] * (len(TENSOR_AT) + ctx.n_rest)",
        ]
    else:
        lines.append(f"first, *ts = {'ctx.kept' if spec.attributes else 'ctx.saved_tensors'}")
        lines.append("xv = first * 0.5" if spec.intermediates else "xv = first")
        lines.append("two_x = first" if spec.intermediates else "two_x = first * 2.0")
        lines.append("gx = None if g is None else g * two_x * coef")
        lines.append("if g is not None:\n    for t in ts:\n        gx = gx + g * t")
        lines.append("gt = [None if g is None else g * xv for _ in ts]")
    lines.append("if g2 is not None:\n    gx = g2 * 3.0 if gx is None else gx + g2 * 3.0")
    lines.append("result = [gx] + [None] * (N_IN - 1 + ctx.n_rest)")
    lines.append(
        "for k, pos in enumerate(TENSOR_AT + tuple(range(N_IN, N_IN + ctx.n_rest))):\n"
        "    result[pos] = gt[k]"
    )
    # A plain apply with defaults left out has fewer inputs: as many gradients as it got.
    lines.append("result = result[: len(ctx.needs_input_grad)]")
    if spec.needs_input_grad:
        lines.append(
            "result = [r if ctx.needs_input_grad[i] else None for i, r in enumerate(result)]"
        )
    lines.append("return tuple(result)")
    return lines


def _method(head: str, body: List[str], once: bool = False) -> str:
    deco = "    @staticmethod\n" + ("    @once_differentiable\n" if once else "")
    text = textwrap.indent("\n".join(body), " " * 8)
    return f"{deco}    def {head}:\n{text}\n"


def _setup_context_class(spec: Spec, name: str, decorator: str) -> str:
    returned = _outputs(spec) + (["inter"] if spec.intermediates else [])
    unpack_output = ", ".join(returned) + " = output"
    forward = _coef_lines(spec) + _compute_lines(spec) + [f"return {_tuple(returned)}"]
    setup = [f"{_inputs_unpacking(spec)} = inputs", *_coef_lines(spec)]
    extras = ", ".join(_extras(spec))
    setup += [f"extras = ({extras}{',' if extras else ''})", unpack_output, *_ctx_lines(spec)]
    return (
        f"{decorator}class {name}(torch.autograd.Function):\n"
        "    generate_vmap_rule = True\n\n"
        + _method(f"forward({_signature(spec, ctx=False)})", forward)
        + _method("setup_context(ctx, inputs, output)", setup)
        + _method("backward(ctx, *grads)", _backward_lines(spec), spec.once)
    )


def _hand_written_class(spec: Spec) -> str:
    forward = _coef_lines(spec) + _compute_lines(spec) + _ctx_lines(spec)
    forward.append(f"return {_tuple(_outputs(spec))}")
    return (
        "class HandWritten(torch.autograd.Function):\n"
        + _method(f"forward({_signature(spec, ctx=True)})", forward)
        + _method("backward(ctx, *grads)", _backward_lines(spec), spec.once)
    )


def source(spec: Spec) -> str:
    """The module holding ``Decorated``, ``Undecorated`` and ``HandWritten`` for ``spec``."""
    tensor_at = tuple(i + 1 for i, p in enumerate(spec.params) if p.kind in TENSOR_KINDS)
    decorator = (
        "@compatfn.function(intermediates=1)\n" if spec.intermediates else "@compatfn.function\n"
    )
    return "\n".join(
        [
            "import warnings",
            "import torch",
            "import compatfn",
            "from torch.autograd.function import once_differentiable",
            "",
            f"_W = torch.full(({N},), 0.5)",
            f"TENSOR_AT = {tensor_at!r}",
            f"N_IN = {1 + len(spec.params)}",
            "",
            _setup_context_class(spec, "Decorated", decorator),
            _setup_context_class(spec, "Undecorated", ""),
            _hand_written_class(spec),
        ]
    )


_DIR = tempfile.mkdtemp(prefix="compatfn_specs_")
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)  # the modules live as long as the run
_COUNTER = itertools.count()


def build(spec: Spec) -> Made:
    """Write ``spec``'s module to a fresh file and import it: fresh classes every call."""
    text = source(spec)
    name = f"compatfn_spec_{os.getpid()}_{next(_COUNTER)}"
    path = os.path.join(_DIR, name + ".py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    loader = importlib.util.spec_from_file_location(name, path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module  # dynamo and inspect look modules up by name
    loader.loader.exec_module(module)
    return Made(spec, text, path, module.Decorated, module.Undecorated, module.HandWritten)
