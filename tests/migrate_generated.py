"""Legacy Functions written by hypothesis, for the codemod's differential self-check
(``tests/test_migrate_generated.py``).

:func:`legacy_modules` draws the source text of a module with one legacy Function (and, for
inheritance, a subclass) built from the patterns real code uses: ctx attributes set from
parameters and intermediates and read back (chains included), saves, conditions (on inputs,
on computed values, on ``ctx.needs_input_grad``), loops, ``with`` blocks of grad mode, ``*args``,
several outputs, in-place changes of intermediates, random draws and the random state, helpers
that take ctx, classmethods using ``cls``, subclasses and ``super().forward`` chains, and
return annotations (``Tensor``, ``torch.Tensor``, ``Tuple[...]``, ``tuple[...]`` under ``from
__future__ import annotations``).
:func:`compare` migrates it and runs the original and the migrated class on the same inputs:
outputs, gradients (bit for bit), exceptions and the random state afterwards must agree, or the
class must be refused for a reason that is not an internal failure; the migrated forward's
return annotation must say as many values as it returns. Imports torch; LibCST only in
:func:`compare`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from hypothesis import strategies as st

SHAPE = (3,)
HEADER = """\
import itertools

import torch
from torch.autograd import Function

_STATE = {"k": 2.0}
_COUNTER = itertools.count(1)


def _double(t):
    return t * 2


def _keep(ctx, t):
    ctx.kept = t


def _bump(t):  # changes its argument without saying so
    t.mul_(2)


def _bump_all(ts):
    for t in ts:
        t.add_(1)


class _Grid:  # a Triton-style launcher: writes into its output buffer
    def __getitem__(self, grid):
        def launch(src, out):
            out.add_(src)

        return launch


_launch = _Grid()


def _tick():  # changes module state
    _STATE["k"] += 1.0
"""


@dataclass
class Scope:
    """What a point of the generated forward may read: names bound on every path so far."""

    tensors: List[str]
    scalars: List[str]
    callables: List[str]
    attrs: Dict[str, str] = field(default_factory=dict)  # ctx attributes set on every path
    fresh: List[str] = field(default_factory=list)  # intermediates that alias no input
    params: List[str] = field(default_factory=list)

    def copy(self) -> Scope:
        return Scope(
            list(self.tensors),
            list(self.scalars),
            list(self.callables),
            dict(self.attrs),
            list(self.fresh),
            list(self.params),
        )


@dataclass
class Spec:
    """One generated module and how to call its Function."""

    source: str
    cls: str
    flag: bool = False
    k: Optional[float] = None
    fn: bool = False
    star: int = -1  # how many *args tensors (-1: no *args)
    requires_grad: Tuple[bool, bool] = (True, True)
    no_grad: bool = False  # call under torch.no_grad()
    dirty: bool = False  # forward changes x in place (mark_dirty): x is passed as leaf * 1

    def __str__(self) -> str:
        call = {k: v for k, v in self.__dict__.items() if k != "source"}
        return f"{self.source}\n# call: {call}"


class _Writer:
    """Draws statements into ``lines``; ``n`` numbers the new names."""

    def __init__(self, draw: Callable[..., Any], use_cls: bool) -> None:
        self.draw = draw
        self.use_cls = use_cls
        self.n = 0
        self.all_attrs: Dict[str, str] = {}
        self.marks: List[str] = []

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def pick(self, items: Sequence[str]) -> str:
        return self.draw(st.sampled_from(list(items)))

    # -- expressions

    def tensor_expr(self, scope: Scope) -> str:
        a = self.pick(scope.tensors)
        b = self.pick(scope.tensors)
        options = [
            f"{a} * 1.5",
            f"{a} + {b}",
            f"{a}.sin()",
            f"torch.tanh({a}) * {b}",
            f"{a}.exp() - {b}",
        ]
        options += [f"{self.pick(scope.callables)}({a})"] if scope.callables else []
        options += [f"{a} * {self.pick(scope.scalars)}"] if scope.scalars else []
        attr_t = [k for k, v in scope.attrs.items() if v == "tensor"]
        attr_s = [k for k, v in scope.attrs.items() if v == "scalar"]
        attr_c = [k for k, v in scope.attrs.items() if v == "callable"]
        options += [f"{a} * ctx.{self.pick(attr_t)}"] if attr_t else []
        options += [f"ctx.{self.pick(attr_t)}.cos() + {a}"] if attr_t else []
        options += [f"{a} * ctx.{self.pick(attr_s)}"] if attr_s else []
        options += [f"ctx.{self.pick(attr_c)}({a})"] if attr_c else []
        options += [f"{a} * torch.rand_like({a})"]
        options += [f"{a} * cls.SCALE"] if self.use_cls else []
        return self.pick(options)

    def condition(self, scope: Scope) -> str:
        a = self.pick(scope.tensors)
        options = [f"{a}.requires_grad", f"float({a}.sum()) > 0", "ctx.needs_input_grad[0]"]
        options += [f"ctx.needs_input_grad[{len(scope.params) - 1}]"]
        options += [self.pick(scope.scalars)] if "flag" in scope.scalars else []
        options += ["flag"] if "flag" in scope.params else []
        attr_s = [k for k, v in scope.attrs.items() if v == "scalar"]
        options += [f"ctx.{self.pick(attr_s)}"] if attr_s else []
        return self.pick(options)

    # -- statements

    def block(self, scope: Scope, depth: int, indent: str, size: int) -> List[str]:
        lines: List[str] = []
        for _ in range(size):
            lines += self.statement(scope, depth, indent)
        return lines or [f"{indent}pass"]

    def statement(self, scope: Scope, depth: int, indent: str) -> List[str]:
        kinds = ["compute", "compute", "attr", "attr", "save", "reassign"]
        kinds += ["inplace"] if scope.fresh else []
        kinds += ["if", "with", "for"] if depth < 2 else []
        kinds += ["rng", "random_attr", "overwrite", "non_differentiable", "materialize"]
        kinds += ["maybe_read"] if set(self.all_attrs) - set(scope.attrs) else []
        kinds += ["helper"] if self.draw(st.integers(0, 4)) == 0 else []
        kinds += ["opaque"] if scope.fresh else []
        kinds += ["tick"]
        kind = self.pick(kinds)
        return getattr(self, f"_{kind}")(scope, depth, indent)

    def _compute(self, scope: Scope, depth: int, indent: str) -> List[str]:
        target = self.name("t")
        line = f"{indent}{target} = {self.tensor_expr(scope)}"
        scope.tensors.append(target)
        scope.fresh.append(target)
        return [line]

    def _reassign(self, scope: Scope, depth: int, indent: str) -> List[str]:
        target = self.pick(scope.tensors)
        line = f"{indent}{target} = {self.tensor_expr(scope)}"
        if target not in scope.fresh:
            scope.fresh.append(target)
        return [line]

    def _inplace(self, scope: Scope, depth: int, indent: str) -> List[str]:
        target = self.pick(scope.fresh)
        return [f"{indent}{target}.{self.pick(['mul_(2)', 'add_(1)', 'clamp_(min=-1)'])}"]

    def _opaque(self, scope: Scope, depth: int, indent: str) -> List[str]:
        """A call that changes a tensor in place without saying so in its spelling."""
        target = self.pick(scope.fresh)
        call = self.pick(
            [
                f"_bump({target})",
                f"_bump_all([{target}])",
                f"_launch[(1,)]({self.pick(scope.tensors)}, {target})",
            ]
        )
        return [f"{indent}{call}"]

    def _tick(self, scope: Scope, depth: int, indent: str) -> List[str]:
        return [f"{indent}_tick()"]

    def _attr(self, scope: Scope, depth: int, indent: str) -> List[str]:
        name = self.name("a")
        choices = ["tensor_name", "tensor_expr", "state", "literal"]
        choices += ["scalar"] if scope.scalars else []
        choices += ["callable"] if scope.callables else []
        choice = self.pick(choices)
        if choice == "tensor_name":
            value, kind = self.pick(scope.tensors), "tensor"
        elif choice == "tensor_expr":
            value, kind = self.tensor_expr(scope), "tensor"
        elif choice == "scalar":
            value, kind = self.pick(scope.scalars), "scalar"
        elif choice == "literal":  # read back as the literal itself
            value, kind = self.pick(["3", "-0.5", "1e-06"]), "scalar"
        elif choice == "state":
            value = self.pick(
                ['_STATE["k"]', "next(_COUNTER)", f"float({self.pick(scope.tensors)}.sum())"]
            )
            kind = "scalar"
        else:
            value, kind = self.pick(scope.callables), "callable"
        scope.attrs[name] = kind
        self.all_attrs[name] = kind
        return [f"{indent}ctx.{name} = {value}"]

    def _save(self, scope: Scope, depth: int, indent: str) -> List[str]:
        names = self.draw(st.lists(st.sampled_from(scope.tensors), min_size=1, max_size=3))
        if "args" in scope.params and self.draw(st.booleans()):
            names.append("*args")
        return [f"{indent}ctx.save_for_backward({', '.join(names)})"]

    def _if(self, scope: Scope, depth: int, indent: str) -> List[str]:
        lines = [f"{indent}if {self.condition(scope)}:"]
        inner = scope.copy()
        lines += self.block(inner, depth + 1, indent + "    ", self.draw(st.integers(1, 3)))
        other = scope.copy()
        if self.draw(st.booleans()):
            lines.append(f"{indent}else:")
            lines += self.block(other, depth + 1, indent + "    ", self.draw(st.integers(1, 2)))
            both = [n for n in inner.tensors if n in other.tensors]
            scope.tensors[:] = [n for n in both if n in scope.tensors or n in inner.tensors]
            scope.attrs.update({k: v for k, v in inner.attrs.items() if other.attrs.get(k) == v})
        return lines

    def _with(self, scope: Scope, depth: int, indent: str) -> List[str]:
        manager = self.pick(["torch.no_grad()", "torch.enable_grad()"])
        lines = [f"{indent}with {manager}:"]
        return lines + self.block(scope, depth + 1, indent + "    ", self.draw(st.integers(1, 3)))

    def _for(self, scope: Scope, depth: int, indent: str) -> List[str]:
        lines = [f"{indent}for _ in range({self.draw(st.integers(0, 2))}):"]
        inner = scope.copy()  # the body may not run: what it binds is not kept
        lines += self.block(inner, depth + 1, indent + "    ", self.draw(st.integers(1, 2)))
        return lines

    def _overwrite(self, scope: Scope, depth: int, indent: str) -> List[str]:
        tensors = [k for k, v in self.all_attrs.items() if v == "tensor"]
        if not tensors:
            return self._attr(scope, depth, indent)
        name = self.pick(tensors)
        scope.attrs[name] = "tensor"
        return [f"{indent}ctx.{name} = {self.tensor_expr(scope)}"]

    def _maybe_read(self, scope: Scope, depth: int, indent: str) -> List[str]:
        """A read of an attribute some path may not have set (AttributeError there)."""
        name = self.pick(sorted(set(self.all_attrs) - set(scope.attrs)))
        target = self.name("t")
        scope.tensors.append(target)
        scope.fresh.append(target)
        value = f"ctx.{name}" if self.all_attrs[name] != "callable" else f"ctx.{name}(x)"
        return [f"{indent}{target} = {self.pick(scope.tensors[:-1])} * {value}"]

    def _non_differentiable(self, scope: Scope, depth: int, indent: str) -> List[str]:
        self.marks.append(self.pick(scope.tensors))
        return [f"{indent}ctx.mark_non_differentiable({self.marks[-1]})"]

    def _materialize(self, scope: Scope, depth: int, indent: str) -> List[str]:
        return [f"{indent}ctx.set_materialize_grads(False)"]

    def _helper(self, scope: Scope, depth: int, indent: str) -> List[str]:
        self.all_attrs["kept"] = "tensor"
        return [f"{indent}_keep(ctx, {self.pick(scope.tensors)})"]

    def _rng(self, scope: Scope, depth: int, indent: str) -> List[str]:
        name = self.name("state")
        self.all_attrs[name] = "tensor"
        return [f"{indent}ctx.{name} = torch.get_rng_state()"]

    def _random_attr(self, scope: Scope, depth: int, indent: str) -> List[str]:
        name = self.name("noise")
        scope.attrs[name] = "tensor"
        self.all_attrs[name] = "tensor"
        return [f"{indent}ctx.{name} = torch.randn({SHAPE[0]}, dtype=torch.float64)"]


def _backward(
    params: List[str], star: int, attrs: Dict[str, str], kind: str, outputs: int
) -> List[str]:
    grad_names = ", ".join(f"grad{i}" for i in range(outputs))
    if kind == "class":
        head = f"    @classmethod\n    def backward(cls, ctx, {grad_names}):"
    else:
        head = f"    @staticmethod\n    def backward(ctx, {grad_names}):"
    names = [k for k, v in attrs.items() if v != "callable"]
    lines = [
        head,
        "        total = sum(float(s.double().sum()) for s in ctx.saved_tensors)",
        f"        for name in {names!r}:",
        "            value = getattr(ctx, name, None)",
        "            if value is not None:",
        "                total += float(torch.as_tensor(value).double().sum()) % 7",
        f"        grads = [{grad_names}]",
        "        g = sum(gr for gr in grads if gr is not None) * (1 + total / 1000)",
    ]
    grads = []
    for index, param in enumerate(params):
        grads.append(f"g * {index + 1}" if param in ("x", "w") else "None")
    grads += [f"g * {0.5 + i}" for i in range(max(star, 0))]
    lines.append(f"        return {', '.join(grads)}{',' if len(grads) == 1 else ''}")
    return lines


@st.composite
def legacy_modules(draw: Callable[..., Any]) -> Spec:
    """A module of one legacy Function (or a base and the subclass called), as source text."""
    fn = draw(st.booleans())
    flag = draw(st.booleans())
    k = draw(st.sampled_from([None, 0.5, 2.0]))
    star = draw(st.sampled_from([-1, -1, 0, 2]))
    kind = draw(st.sampled_from(["static", "static", "class"]))
    family = (
        draw(st.sampled_from(["alone", "alone", "subclass", "super"]))
        if kind == "class"
        else "alone"
    )
    params = (["fn"] if fn else []) + ["x", "w"] + (["flag"] if flag else [])
    params += ["k"] if k is not None else []
    scope = Scope(
        tensors=["x", "w"],
        scalars=(["flag"] if flag else []) + (["k"] if k is not None else []),
        callables=["fn"] if fn else [],
        params=params,
    )
    writer = _Writer(draw, use_cls=kind == "class")
    dirty = draw(st.integers(0, 5)) == 0
    head_lines = ["        x.mul_(2)", "        ctx.mark_dirty(x)"] if dirty else []
    body = head_lines + writer.block(scope, 0, "        ", draw(st.integers(1, 6)))
    outputs = draw(st.lists(st.sampled_from(scope.tensors), min_size=1, max_size=3, unique=True))
    if dirty and "x" not in outputs:
        outputs.insert(0, "x")
    body.append(f"        return {', '.join(outputs)}")
    signature = ", ".join(["ctx", *params] + (["*args"] if star >= 0 else []))
    header, returns = _annotated(draw, len(outputs))
    if kind == "class":
        head = [
            "    SCALE = 2.0",
            "",
            "    @classmethod",
            f"    def forward(cls, {signature}){returns}:",
        ]
    else:
        head = ["    @staticmethod", f"    def forward({signature}){returns}:"]
    klass = ["class Base(Function):", *head, *body, ""]
    klass += _backward(params, star, writer.all_attrs, kind, len(outputs))
    called = "Base"
    if family == "subclass":
        klass += ["", "", "class Sub(Base):", "    SCALE = 3.0"]
        called = "Sub"
    elif family == "super":
        passed = ", ".join(["ctx", *params] + (["*args"] if star >= 0 else []))
        klass += [
            "",
            "",
            "class Sub(Base):",
            "    SCALE = 3.0",
            "",
            "    @classmethod",
            f"    def forward(cls, {signature}):",
            f"        return super().forward({passed})",
        ]
        called = "Sub"
    source = header + "\n\n" + "\n".join(klass) + "\n"
    grads = (draw(st.booleans()), draw(st.booleans()))
    return Spec(
        source,
        called,
        flag=draw(st.booleans()) if flag else False,
        k=k,
        fn=fn,
        star=star,
        requires_grad=grads,
        no_grad=draw(st.integers(0, 5)) == 0,
        dirty=dirty,
    )


def _annotated(draw: Callable[..., Any], outputs: int) -> Tuple[str, str]:
    """(the module's header, forward's return annotation): none, or the outputs' types spelled
    as ``Tensor`` or ``torch.Tensor``, in ``Tuple[...]`` (or ``tuple[...]`` under ``from
    __future__ import annotations``) for several outputs."""
    tensor = draw(st.sampled_from([None, None, "Tensor", "torch.Tensor"]))
    if tensor is None:
        return HEADER, ""
    future = draw(st.booleans())
    head = draw(st.sampled_from(["tuple", "Tuple"])) if future else "Tuple"
    header = HEADER.replace("import itertools\n", "import itertools\nfrom typing import Tuple\n", 1)
    header = header.replace("import torch\n", "import torch\nfrom torch import Tensor\n", 1)
    if future:
        header = "from __future__ import annotations\n\n" + header
    returns = tensor if outputs == 1 else f"{head}[{', '.join([tensor] * outputs)}]"
    return header, f" -> {returns}"


def annotation_problem(source: str) -> Optional[str]:
    """Where a forward's return annotation does not say what it returns (as many items as each
    ``return`` writes; a ``return`` of ``super().forward(...)`` is not counted), or None."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef) or node.name != "forward" or not node.returns:
            continue
        annotated = _arity(node.returns)
        for written in _returned_arities(node):
            if None not in (annotated, written) and written != annotated:
                text = ast.get_source_segment(source, node.returns)
                return f"-> {text} for a return of {written} values"
    return None


def _arity(annotation: ast.expr) -> Optional[int]:
    """How many values a return annotation says (None: any number)."""
    if not isinstance(annotation, ast.Subscript):
        return 1
    head = annotation.value
    name = head.id if isinstance(head, ast.Name) else getattr(head, "attr", "")
    if name not in ("Tuple", "tuple"):
        return 1
    items: Any = annotation.slice
    items = getattr(items, "value", items) if type(items).__name__ == "Index" else items  # 3.8
    if not isinstance(items, ast.Tuple):
        return 1
    return None if any(isinstance(e, ast.Constant) for e in items.elts) else len(items.elts)


def _returned_arities(function: ast.FunctionDef) -> List[Optional[int]]:
    """How many values each ``return`` of ``function`` writes (None: not known)."""
    found: List[Optional[int]] = []
    stack: List[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            found.append(_written(node.value))
        stack.extend(ast.iter_child_nodes(node))
    return found


def _written(value: ast.expr) -> Optional[int]:
    if isinstance(value, ast.Tuple):
        return None if any(isinstance(e, ast.Starred) for e in value.elts) else len(value.elts)
    calls_super = (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Call)
        and getattr(value.func.value.func, "id", None) == "super"
    )
    return None if calls_super else 1


# -- the differential check


@dataclass
class Outcome:
    """What one call of a Function did: outputs, gradients, exception, next random draw."""

    values: List[Any]
    error: Optional[str] = None


def _inputs(spec: Spec) -> Tuple[List[Any], List[torch.Tensor]]:
    """(the arguments of apply, the tensors to differentiate with respect to)."""
    generator = torch.Generator().manual_seed(0)
    x, w = (torch.randn(SHAPE, dtype=torch.float64, generator=generator) for _ in range(2))
    x.requires_grad_(spec.requires_grad[0])
    w.requires_grad_(spec.requires_grad[1])
    args: List[Any] = [_double] if spec.fn else []
    args += [x, w] + ([spec.flag] if "flag" in spec.source.split("def forward")[1][:80] else [])
    args += [spec.k] if spec.k is not None else []
    extra = [
        torch.randn(SHAPE, dtype=torch.float64, generator=generator)
        for _ in range(max(spec.star, 0))
    ]
    for tensor in extra:
        tensor.requires_grad_()
    wrt = [t for t in [x, w, *extra] if t.requires_grad]
    if spec.dirty:
        args[args.index(x)] = x * 1
    return args + extra, wrt


def _double(t: torch.Tensor) -> torch.Tensor:
    return t * 2


def run(cls: Any, spec: Spec) -> Outcome:
    """Call ``cls.apply`` on the inputs of ``spec``; differentiate; draw once more."""
    args, wrt = _inputs(spec)
    values: List[Any] = []
    try:
        torch.manual_seed(1)
        if spec.no_grad:
            with torch.no_grad():
                result = cls.apply(*args)
        else:
            result = cls.apply(*args)
        outputs = list(result) if isinstance(result, tuple) else [result]
        values += [isinstance(result, tuple), *outputs]
        differentiable = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
        if differentiable and wrt and not spec.no_grad:  # see KNOWN_DIFFERENCES
            weights = torch.Generator().manual_seed(2)
            loss = sum(
                (o * torch.randn(o.shape, dtype=o.dtype, generator=weights)).sum()
                for o in differentiable
            )
            values += list(torch.autograd.grad(loss, wrt, allow_unused=True))
        values.append(torch.rand(1))
    except Exception as error:  # compared with the other copy's
        return Outcome(values, type(error).__name__)
    return Outcome(values)


def same(left: Outcome, right: Outcome) -> Optional[str]:
    """Why two outcomes differ, or None."""
    if left.error != right.error:
        return f"exception {left.error} against {right.error}"
    if len(left.values) != len(right.values):
        return f"{len(left.values)} values against {len(right.values)}"
    for index, (a, b) in enumerate(zip(left.values, right.values)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                return f"value {index}: {a} against {b}"
        elif isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
            return f"value {index}: {a!r} against {b!r}"
    return None


def load(source: str, name: str) -> Dict[str, Any]:
    namespace: Dict[str, Any] = {"__name__": name}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace


#: Where a migrated class is known to differ from its original (migrate says so in a note on
#: the class; test_migrate_generated.py checks the note and the difference): an input returned
#: as it is and saved becomes ``x.view_as(x)`` (torch 2.x's setup_context refuses to save the
#: input itself), which under torch.no_grad() is an output that requires grad where the
#: original's did not (see NOTE: [an input returned as it is] in migrate/_outputs.py).
KNOWN_DIFFERENCES = ("no_grad: an input returned as it is and saved",)
#: Refusals that mean the codemod failed, not that it declined.
INTERNAL = ("please report it",)


def compare(spec: Spec) -> str:
    """'refused: ...' or 'identical'; raises AssertionError on a difference or a crash."""
    from compatfn.migrate import migrate_source

    result = migrate_source(spec.source, "generated.py")
    for refusal in result.refusals:
        assert not any(word in refusal.reason for word in INTERNAL), f"{refusal}\n{spec}"
    if spec.cls not in result.migrated:
        assert result.refusals, f"{spec.cls} neither migrated nor refused\n{spec}"
        return f"refused: {result.refusals[0].reason}"
    problem = annotation_problem(result.new_source)
    assert problem is None, f"{problem}\n{spec}\n--- migrated:\n{result.new_source}"
    assert annotation_problem(spec.source) is None, spec  # the generator's own annotations
    original = run(load(spec.source, "original")[spec.cls], spec)
    migrated = run(load(result.new_source, "migrated")[spec.cls], spec)
    difference = same(original, migrated)
    assert difference is None, f"{difference}\n{spec}\n--- migrated:\n{result.new_source}"
    return "identical"
