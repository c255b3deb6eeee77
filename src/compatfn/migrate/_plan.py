"""Plan: decide, class by class, what becomes of each Function of a module (or why not)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import libcst as cst

from ._analysis import ForwardAnalysis, Split, body_statements
from ._annotations import extended, tensor_spelling
from ._chains import plan_super, super_call
from ._ctx_uses import ctx_call_names
from ._methods import (
    delegate,
    drop_first_params,
    forward_return,
    setup_context_method,
    setup_lines,
    strip_ctx_decorators,
    with_kind,
)
from ._names import Names
from ._syntax import (
    Refused,
    bindings,
    decorator_name,
    dotted,
    loaded_names,
    method_kind,
    positional_params,
    source_of,
    tidy_first,
    walk,
)

FUNCTION_BASES = {"torch.autograd.Function", "torch.autograd.function.Function"}
#: torch's other Function bases: found (so that --strict sees them) and refused.
OTHER_FUNCTION_BASES = {
    "torch.autograd.function.InplaceFunction": "InplaceFunction",
    "torch.autograd.function.NestedIOFunction": "NestedIOFunction",
    "torch.autograd.NestedIOFunction": "NestedIOFunction",
}
AUTOGRAD_METHODS = ("forward", "backward", "jvp", "vjp", "vmap")


@dataclass
class Plan:
    """What becomes of one Function class."""

    node: cst.ClassDef
    name: str
    ref: str = ""  # how its methods reach the class: Outer.Name for a class nested in a class
    base: Optional[Plan] = None
    intermediates: int = 0
    forward_params: List[cst.Param] = field(default_factory=list)
    forward_impl: bool = False  # forward's body lives in a classmethod _forward_impl
    forward_decorators: List[cst.Decorator] = field(default_factory=list)
    backward_impl: Optional[List[cst.Param]] = None  # params of backward if in _backward_impl
    backward_decorators: List[cst.Decorator] = field(default_factory=list)
    setup_tail: List[cst.BaseStatement] = field(default_factory=list)  # after inputs unpacking
    needed_inputs: Set[str] = field(default_factory=set)
    setup_ctx: str = "ctx"
    setup_names: Tuple[str, str] = ("inputs", "output")
    replacements: Dict[int, List[cst.BaseStatement]] = field(default_factory=dict)
    additions: List[cst.BaseStatement] = field(default_factory=list)
    refusal: Optional[Refused] = None
    decorate: bool = False
    notes: List[str] = field(default_factory=list)  # what a migrated class does differently


def methods_of(node: cst.ClassDef) -> Dict[str, cst.FunctionDef]:
    found = {}
    if isinstance(node.body, cst.IndentedBlock):
        for stmt in node.body.body:
            if isinstance(stmt, cst.FunctionDef):
                found[stmt.name.value] = stmt
    return found


def class_references(module: cst.Module) -> Dict[int, str]:
    """id(class) -> the expression its own methods reach it by: its name, or ``Outer.Name`` for
    a class in a class body (whose scope a method cannot see); a function body starts afresh
    (its methods see its locals)."""
    refs: Dict[int, str] = {}

    def visit(node: cst.CSTNode, prefix: str) -> None:
        for child in node.children:
            if isinstance(child, cst.ClassDef):
                refs[id(child)] = prefix + child.name.value
                visit(child, f"{refs[id(child)]}.")
            else:
                visit(child, "" if isinstance(child, (cst.FunctionDef, cst.Lambda)) else prefix)

    visit(module, "")
    return refs


def _grad_count(backward: Optional[cst.FunctionDef]) -> Optional[int]:
    if backward is None:
        return None
    params = backward.params
    if params.star_arg not in (cst.MaybeSentinel.DEFAULT, None):
        return None
    skip = 2 if method_kind(backward) == "class" else 1
    return len([*params.posonly_params, *params.params]) - skip


def setup_names(split: Split) -> Set[str]:
    """The names setup_context's own body uses (its ``inputs`` and ``output`` parameters must
    differ from these only: forward's other locals live in another scope)."""
    names = {split.ctx, *split.values.intermediates, *split.values.outputs}
    names |= {p.name.value for p in split.params}
    names |= {split.star} if split.star else set()
    for stmt in split.ctx_statements:
        names |= loaded_names(stmt) | bindings(stmt)[0]
    return names


class Planner:
    """Plans and applies the migration of every Function class of one module."""

    def __init__(self, module: cst.Module, decorator: str) -> None:
        self.module = module
        self.names = Names(module)
        mod, _, func = decorator.partition(":")
        self.import_module, _, self.api = mod.rpartition(".")
        self.api_module = mod
        self.function_name = func
        self.plans: Dict[str, Plan] = {}
        self.children: Dict[str, List[str]] = {}
        self.refs = class_references(module)

    # -- discovery

    def function_classes(self) -> List[cst.ClassDef]:
        found: List[cst.ClassDef] = []
        known: Set[str] = set()
        for node in walk(self.module, into_scopes=True):
            if not isinstance(node, cst.ClassDef):
                continue
            for base in node.bases:
                if base.keyword is not None:
                    continue
                qualified = self.names.qualify(base.value)
                local = dotted(base.value)
                if (
                    qualified in FUNCTION_BASES
                    or qualified in OTHER_FUNCTION_BASES
                    or local in known
                ):
                    found.append(node)
                    known.add(node.name.value)
                    if local in known and local != node.name.value:
                        self.children.setdefault(local, []).append(node.name.value)
                    break
        return found

    def _in_file_base(self, node: cst.ClassDef) -> Optional[Plan]:
        for base in node.bases:
            local = dotted(base.value)
            if local in self.plans:
                return self.plans[local]
        return None

    def already_decorated(self, node: cst.ClassDef) -> bool:
        return any(self.is_our_decorator(d) for d in node.decorators)

    def torch_module(self) -> Optional[str]:
        """The name ``import torch`` (or ``import torch as th``) binds in this module, if any."""
        found = [local for local, full in self.names.imports.items() if full == "torch"]
        return "torch" if "torch" in found else (found[0] if found else None)

    # -- planning

    def plan(self, node: cst.ClassDef) -> Plan:
        name = node.name.value
        plan = Plan(node, name, self.refs.get(id(node), name), self._in_file_base(node))
        self.plans[plan.name] = plan
        try:
            self._plan(plan)
        except Refused as refused:
            plan.refusal = refused
        except RecursionError:
            raise  # the whole file is too deep: reported by the command, the run goes on
        except Exception as error:  # a case this codemod does not foresee: refuse, never crash
            plan.refusal = Refused(
                f"migrate cannot analyse this class ({type(error).__name__}: {error}); "
                "please report it"
            )
        return plan

    def _plan(self, plan: Plan) -> None:
        for arg in plan.node.bases:
            other = OTHER_FUNCTION_BASES.get(self.names.qualify(arg.value) or "")
            if other is not None:
                raise Refused(
                    f"it derives from torch's {other}, which @compatfn.function does not "
                    "adapt; derive from torch.autograd.Function to let it through"
                )
        methods = methods_of(plan.node)
        if "setup_context" in methods:
            return  # already in the setup_context style
        base = plan.base
        if base is not None and base.refusal is not None:
            raise Refused(f"its base class {base.name} is not migrated")
        forward = methods.get("forward")
        if forward is None:
            if base is not None and base.decorate:
                self._plan_inherited(plan, base)
            return
        kind = method_kind(forward)
        if kind == "instance":
            raise Refused(
                "forward is an instance method, the legacy style no torch from 1.8 runs (calling "
                "it raises RuntimeError); make it a @staticmethod forward(ctx, ...) called "
                "through .apply to let it through",
                forward,
            )
        plan.decorate = True
        params = positional_params(forward, "forward", allow_star=True)
        ctx = (
            params[1 if kind == "class" else 0].name.value
            if len(params) > (kind == "class")
            else ""
        )
        call = super_call(forward, ctx) if kind == "class" and ctx else None
        if call is not None:
            plan_super(self, plan, forward, call)
        else:
            self._plan_forward(plan, forward, kind, _grad_count(methods.get("backward")))
        self._plan_backward(plan, methods)

    def _plan_inherited(self, plan: Plan, base: Plan) -> None:
        plan.decorate = True
        plan.intermediates = base.intermediates
        plan.forward_params = base.forward_params
        methods = methods_of(plan.node)
        if base.forward_impl and "_forward_impl" not in methods:
            plan.additions.append(
                delegate("forward", base.forward_params, f"{plan.ref}._forward_impl", [])
            )
        self._plan_backward(plan, methods)

    def _plan_forward(
        self, plan: Plan, forward: cst.FunctionDef, kind: str, grads: Optional[int]
    ) -> None:
        analysis = ForwardAnalysis(forward, kind, grads, self.torch_module(), self.names.imports)
        split = analysis.split()
        plan.intermediates = len(split.values.intermediates)
        plan.forward_params = split.params
        plan.notes = [
            f"note: forward returns its input {name} as it is and saves it, so it now returns "
            f"{name}.view_as({name}) (torch refuses to save an input returned as it is from "
            "setup_context); under torch.no_grad() that output requires grad where the "
            f"original's did not: detach it there if a caller depends on that"
            for name in split.viewed
        ]
        plan.setup_ctx = split.ctx
        decorators = strip_ctx_decorators(forward, self.names, self.api, "forward")
        body = tidy_first(forward_return(split, split.forward_body))
        uses_cls = analysis.cls is not None and any(analysis.cls in loaded_names(s) for s in body)
        plan.forward_impl = uses_cls or (kind == "class" and bool(self.children.get(plan.name)))
        if plan.forward_impl and split.star is not None:
            raise Refused(
                f"forward takes *{split.star} and needs its class ({analysis.cls}); give it "
                "named parameters to let it through",
                forward,
            )
        new_forward = forward.with_changes(body=forward.body.with_changes(body=body))
        if plan.intermediates and forward.returns is not None:  # it returns them too
            new_forward = new_forward.with_changes(
                returns=_with_intermediates(forward, split, self.names)
            )
        drop = 2 if kind == "class" else 1
        if plan.forward_impl:
            impl = drop_first_params(new_forward, drop)
            impl = impl.with_changes(
                name=cst.Name("_forward_impl"),
                params=impl.params.with_changes(
                    params=[cst.Param(cst.Name(analysis.cls or "cls")), *impl.params.params]
                ),
            )
            impl = with_kind(impl, "classmethod", [])
            public = delegate("forward", split.params, f"{plan.ref}._forward_impl", decorators)
            methods = [impl, public]
        else:
            methods = [with_kind(drop_first_params(new_forward, drop), "staticmethod", decorators)]
        inputs_name, output_name, unpack_in, unpack_out = setup_lines(split, setup_names(split))
        plan.needed_inputs = split.values.inputs
        plan.setup_names = (inputs_name, output_name)
        plan.setup_tail = [*unpack_out, *tidy_first(split.ctx_statements)]
        setup = setup_context_method(
            split.ctx, inputs_name, output_name, [*unpack_in, *plan.setup_tail]
        )
        plan.replacements[id(forward)] = [*methods, setup]

    def _plan_backward(self, plan: Plan, methods: Dict[str, cst.FunctionDef]) -> None:
        for name in AUTOGRAD_METHODS[1:]:
            fn = methods.get(name)
            if fn is None:
                continue
            kind = method_kind(fn)
            decorators = strip_ctx_decorators(fn, self.names, self.api, name)
            if kind == "static":
                if (
                    decorators != list(fn.decorators)[1:]
                    or decorator_name(fn.decorators[0]) != "staticmethod"
                ):
                    keep = [d for d in fn.decorators if decorator_name(d) == "staticmethod"]
                    plan.replacements[id(fn)] = [
                        with_kind(fn.with_changes(decorators=keep), "staticmethod", decorators)
                    ]
                continue
            if kind == "instance":  # torch calls it on the class: a plain function, as here
                plan.replacements[id(fn)] = [with_kind(fn, "staticmethod", decorators)]
                continue
            params = positional_params(fn, name)
            cls_name = params[0].name.value
            calls_super = any(
                isinstance(n, cst.Call) and dotted(n.func) == "super" for n in walk(fn)
            )
            if calls_super:  # zero-argument super() needs the class: not a staticmethod
                bases = plan.node.bases
                base_name = source_of(bases[0].value) if bases else "Base"
                raise Refused(
                    f"{name} calls super(), which a @staticmethod cannot do; call "
                    f"{base_name}.{name}(ctx, ...) instead to let it through",
                    fn,
                )
            if not any(cls_name in loaded_names(s) for s in body_statements(fn)):
                plan.replacements[id(fn)] = [
                    with_kind(drop_first_params(fn, 1), "staticmethod", decorators)
                ]
                continue
            if name != "backward":
                raise Refused(f"{name} uses {cls_name}", fn)
            impl = with_kind(fn.with_changes(name=cst.Name("_backward_impl")), "classmethod", [])
            public = delegate("backward", params[1:], f"{plan.ref}._backward_impl", decorators)
            plan.backward_impl = params[1:]
            plan.replacements[id(fn)] = [impl, public]
        base = plan.base
        if "backward" not in methods and base is not None:
            inherited = self._inherited_backward(base)
            if inherited is not None:
                plan.backward_impl = inherited
                plan.additions.append(
                    delegate("backward", inherited, f"{plan.ref}._backward_impl", [])
                )

    def _inherited_backward(self, base: Optional[Plan]) -> Optional[List[cst.Param]]:
        while base is not None:
            if base.backward_impl is not None:
                return base.backward_impl
            if "backward" in methods_of(base.node):
                return None
            base = base.base
        return None

    def is_our_decorator(self, decorator: cst.Decorator) -> bool:
        expr = decorator.decorator
        head = expr.func if isinstance(expr, cst.Call) else expr
        return self.names.qualify(head) == f"{self.api_module}.{self.function_name}"


def _with_intermediates(forward: cst.FunctionDef, split: Split, names: Names) -> Any:
    """forward's return annotation with the intermediates' types after the outputs (See
    ``_annotations``), or None (dropped) where it cannot be written."""
    assert forward.returns is not None
    params = [p.annotation.annotation for p in forward.params.params if p.annotation is not None]
    tensor = tensor_spelling([forward.returns.annotation, *params], names)
    saved = ctx_call_names(split.ctx_statements, split.ctx, "save_for_backward")
    extra = [tensor if tensor and n in saved else "object" for n in split.values.intermediates]
    last = split.forward_body[-1]
    ret = last.body[-1] if isinstance(last, cst.SimpleStatementLine) else None
    value = ret.value if isinstance(ret, cst.Return) else None
    flat = isinstance(value, cst.Tuple) and split.output_count is not None and not split.one_tuple
    new = extended(forward.returns.annotation, split.output_count, flat, extra, names)
    return None if new is None else forward.returns.with_changes(annotation=new)
