"""What forward does with ctx: the statements that move to setup_context, the uses that do not,
reads of attributes forward set itself (replaced by the value), and random draws.

Example::

    is_ctx_statement(cst.parse_statement("ctx.save_for_backward(x)\\n"), "ctx")  # True
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Set, Union

import libcst as cst

from ._syntax import dotted, source_of, walk

CTX_METHODS = {
    "save_for_backward",
    "save_for_forward",
    "mark_dirty",
    "mark_non_differentiable",
    "set_materialize_grads",
}
#: Calls that draw random numbers or read the random state, matched anywhere in the called name
#: (``np.random.choice``, ``torch.randperm``, ``rng.integers``, ``dist.sample``,
#: ``torch.get_rng_state``, ``torch.utils.checkpoint.get_device_states``, ``getstate`` and
#: numpy's ``get_state`` imported by name): their values stay in forward.
RANDOM_CALL = re.compile(
    r"rand|bernoulli|multinomial|normal|uniform|dropout|rng|seed|exponential|geometric|cauchy|"
    r"poisson|choice|permut|shuffle|sample|generator|gumbel|noise|device_states|getstate|get_state",
    re.IGNORECASE,
)


def _is_ctx_call(node: cst.BaseSmallStatement, ctx: str) -> bool:
    return (
        isinstance(node, cst.Expr)
        and isinstance(node.value, cst.Call)
        and isinstance(node.value.func, cst.Attribute)
        and isinstance(node.value.func.value, cst.Name)
        and node.value.func.value.value == ctx
        and node.value.func.attr.value in CTX_METHODS
    )


def _is_ctx_attribute(target: cst.BaseExpression, ctx: str) -> bool:
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(_is_ctx_attribute(e.value, ctx) for e in target.elements)
    return (
        isinstance(target, cst.Attribute)
        and isinstance(target.value, cst.Name)
        and target.value.value == ctx
    )


def _is_ctx_small(node: cst.BaseSmallStatement, ctx: str) -> bool:
    if _is_ctx_call(node, ctx):
        return True
    if isinstance(node, cst.Assign):
        return all(_is_ctx_attribute(t.target, ctx) for t in node.targets)
    return isinstance(node, cst.AnnAssign) and _is_ctx_attribute(node.target, ctx)


def is_ctx_statement(stmt: cst.BaseStatement, ctx: str) -> bool:
    """A ctx call or ctx attribute assignment, or an ``if`` made only of them."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return len(stmt.body) == 1 and _is_ctx_small(stmt.body[0], ctx)
    if isinstance(stmt, cst.If):
        orelse = stmt.orelse
        if isinstance(orelse, cst.If) and not is_ctx_statement(orelse, ctx):
            return False
        blocks = [stmt.body, orelse.body] if isinstance(orelse, cst.Else) else [stmt.body]
        return all(
            isinstance(b, cst.IndentedBlock) and all(is_ctx_statement(s, ctx) for s in b.body)
            for b in blocks
        )
    return False


def ctx_misuse(stmt: cst.CSTNode, ctx: str) -> Optional[str]:
    """Why a statement that is not a movable ctx statement uses ctx, or None if it does not."""
    parents: List[cst.CSTNode] = []
    helper = next(
        (
            node
            for node in walk(stmt, into_scopes=True)
            if isinstance(node, cst.Call)
            and any(isinstance(a.value, cst.Name) and a.value.value == ctx for a in node.args)
        ),
        None,
    )
    if helper is not None:  # the reason that matters most, wherever the call is
        return _passes_ctx(helper)
    if isinstance(stmt, cst.If):  # the statement in it that keeps the if from being split
        node: Optional[cst.CSTNode] = stmt
        while isinstance(node, (cst.If, cst.Else)):
            for inner in getattr(node.body, "body", ()):
                found = None if is_ctx_statement(inner, ctx) else ctx_misuse(inner, ctx)
                if found:
                    return found
            node = node.orelse if isinstance(node, cst.If) else None

    def visit(node: cst.CSTNode) -> Optional[str]:
        if isinstance(node, cst.Name) and node.value == ctx:
            return _describe_ctx_use(node, parents)
        parents.append(node)
        try:
            for child in node.children:
                found = visit(child)
                if found:
                    return found
        finally:
            parents.pop()
        return None

    return visit(stmt)


def _describe_ctx_use(name: cst.Name, parents: List[cst.CSTNode]) -> str:
    parent = parents[-1] if parents else None
    if isinstance(parent, cst.Arg) and len(parents) > 1 and isinstance(parents[-2], cst.Call):
        return _passes_ctx(parents[-2])
    if isinstance(parent, cst.Attribute) and parent.attr.value == "needs_input_grad":
        return (  # the reason, wherever forward reads it: see NOTE: [needs_input_grad in forward]
            "forward reads ctx.needs_input_grad, which migrate computes from the inputs only "
            "in a module that has `import torch` (a name forward does not assign); add that "
            "import to let it through"
        )
    kinds = [
        (
            (cst.For, cst.While),
            "forward uses ctx inside a loop; collect the values in the loop and save them "
            "once after it to let it through",
        ),
        (
            (cst.FunctionDef, cst.Lambda),
            "forward uses ctx inside a nested function; save in forward itself to let it through",
        ),
        (
            (cst.Try, cst.TryStar),
            "forward uses ctx inside a try block; move the ctx calls after the block to "
            "let it through",
        ),
        (
            (cst.With,),
            "forward uses ctx inside a with block other than grad mode, a device guard or "
            "autocast (or in a way such a block cannot keep); move the ctx calls after the block "
            "to let it through",
        ),
        (
            (cst.If,),
            "forward uses ctx inside an if block that also computes values "
            "(a conditional save that depends on data); compute them before the if to let it "
            "through",
        ),
        (
            (cst.Match,),
            "forward uses ctx inside a match statement; move the ctx calls after it (or write "
            "it as an if block) to let it through",
        ),
    ]
    for types, reason in kinds:
        if any(isinstance(node, types) for node in parents):
            return _with_reason(parents) if types == (cst.With,) else reason
    if isinstance(parent, cst.Attribute):
        attr = parent.attr.value
        grand = parents[-2] if len(parents) > 1 else None
        if isinstance(grand, cst.Call) and grand.func is parent and attr in CTX_METHODS:
            return (
                f"forward calls ctx.{attr}() inside another statement or expression; put the "
                "call on a line of its own to let it through"
            )
        if any(isinstance(node, cst.Del) for node in parents):
            return f"forward deletes ctx.{attr}; remove the del to let it through"
        if any(isinstance(node, cst.AugAssign) for node in parents):
            return (
                f"forward changes ctx.{attr} with an augmented assignment; compute the value in "
                f"a name and set ctx.{attr} = name once to let it through"
            )
        if any(isinstance(node, cst.AssignTarget) for node in parents):
            if isinstance(grand, cst.Subscript) and grand.value is parent:
                hint = "name" if attr == "__dict__" else "..."
                return (
                    f"forward sets an item of ctx.{attr} (ctx.{attr}[...] = value); set the "
                    f"attribute itself (ctx.{hint} = value) to let it through"
                )
            return (
                f"forward assigns ctx.{attr} together with other targets; write "
                f"`ctx.{attr} = value` on a line of its own to let it through"
            )
        return _reads_back(attr)
    return "forward uses ctx in a way migrate cannot move to setup_context"


def _with_reason(parents: List[cst.CSTNode]) -> str:
    """Why ctx inside the innermost ``with`` of ``parents`` stays: a block migrate does not know,
    or one it knows nested where it does not split it."""
    from ._branches import neutral_with  # imports this module

    inner = [node for node in parents if isinstance(node, cst.With)][-1]
    if not neutral_with(inner):
        return (
            "forward uses ctx inside a with block other than grad mode, a device guard or "
            "autocast; move the ctx calls after the block to let it through"
        )
    items = ", ".join(source_of(item.item) for item in inner.items)
    return (
        f"forward uses ctx inside `with {items}:` within an if, loop or other block, where "
        "migrate does not split it; move the ctx statements out of the with block to let it "
        "through"
    )


def _passes_ctx(call: cst.Call) -> str:
    callee = dotted(call.func) or source_of(call.func)
    if callee in ("getattr", "hasattr"):
        return (
            f"forward reads a ctx attribute by name ({callee}(ctx, ...)); read ctx.<name> "
            "where forward sets it, or keep the value in a name of forward's own, to let it "
            "through"
        )
    if callee == "setattr":
        return (
            "forward sets ctx attributes by name (setattr(ctx, ...)); collect the values in "
            "a list or dict and set one ctx attribute to it (ctx.values = values) to let it "
            "through"
        )
    return (
        f"forward passes ctx to {callee}(), which migrate does not follow; move what it does "
        "with ctx into forward (ctx calls and ctx.attr = ... there) to let it through"
    )


def _reads_back(attr: str) -> str:
    return (
        f"forward reads ctx.{attr} back where migrate cannot tell which value it holds "
        "(forward sets it only under a condition, inside a block, or not at all); keep the value "
        "in a name of forward's own and read that to let it through"
    )


def reads_attribute(statements: Sequence[cst.CSTNode], ctx: str, attr: str) -> bool:
    """Whether any of ``statements`` reads ``ctx.attr``."""
    return any(
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == ctx
        and node.attr.value == attr
        for stmt in statements
        for node in walk(stmt, into_scopes=True)
    )


def is_literal(expr: cst.BaseExpression) -> bool:
    """A number, string, ``True``/``False``/``None``, or a negated number: a value forward may
    write in place of a ctx attribute it reads back, and setup_context may write again."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        expr = expr.expression
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    return isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString))


_NUMBERS = (cst.Integer, cst.Float, cst.Imaginary, cst.UnaryOperation)


class ReadBacks(cst.CSTTransformer):
    """Reads of ``ctx.attr`` in forward, for attributes forward set itself, replaced by the name
    that holds the value, or by the literal forward set (``aliases``: attribute -> name or
    literal)."""

    def __init__(self, ctx: str) -> None:
        self.ctx = ctx
        self.aliases: Dict[str, Union[str, cst.BaseExpression]] = {}

    def apply(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        if not self.aliases or self._writes_ctx(stmt):
            return stmt
        new = stmt.visit(self)
        assert isinstance(new, cst.BaseStatement)
        return new

    def apply_values(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """A simple ctx statement with the read-backs in the values it computes replaced
        (``ctx.scale = ctx.fn(*args)`` reads ``fn``); its target is kept."""
        if not self.aliases or not isinstance(stmt, cst.SimpleStatementLine):
            return stmt
        small = stmt.body[0]
        if isinstance(small, cst.Expr):
            new_small: cst.BaseSmallStatement = small.with_changes(value=small.value.visit(self))
        elif isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
            new_small = small.with_changes(value=small.value.visit(self))
        else:
            return stmt
        return stmt.with_changes(body=[new_small, *stmt.body[1:]])

    def _writes_ctx(self, stmt: cst.CSTNode) -> bool:
        for node in walk(stmt, into_scopes=True):
            targets: List[cst.BaseExpression] = []
            if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del)):
                targets = [node.target]
            for target in targets:
                if any(isinstance(n, cst.Name) and n.value == self.ctx for n in walk(target)):
                    return True
        return False

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        value = original_node.value
        if isinstance(value, cst.Name) and value.value == self.ctx:
            alias = self.aliases.get(original_node.attr.value)
            if isinstance(alias, str):
                return cst.Name(alias, lpar=updated_node.lpar, rpar=updated_node.rpar)
            if alias is not None:
                return alias.deep_clone().with_changes(
                    lpar=updated_node.lpar, rpar=updated_node.rpar
                )
        if isinstance(updated_node.value, _NUMBERS) and not updated_node.value.lpar:
            # ``ctx.k.real`` read back as ``(3).real``: ``3.real`` is no Python
            parens = {"lpar": [cst.LeftParen()], "rpar": [cst.RightParen()]}
            return updated_node.with_changes(value=updated_node.value.with_changes(**parens))
        return updated_node


def ctx_call_names(statements: Sequence[cst.CSTNode], ctx: str, method: str) -> Set[str]:
    """The plain names passed to ``ctx.<method>(...)`` anywhere in ``statements``."""
    found: Set[str] = set()
    for stmt in statements:
        for node in walk(stmt):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and dotted(node.func) == f"{ctx}.{method}"
            ):
                found |= {a.value.value for a in node.args if isinstance(a.value, cst.Name)}
    return found


def value_expressions(small: cst.BaseSmallStatement) -> List[cst.BaseExpression]:
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return [arg.value for arg in small.value.args]
    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
        return [small.value]
    return []


def draws_random(expr: cst.CSTNode) -> bool:
    for node in walk(expr, into_scopes=True):
        if isinstance(node, cst.Call):
            name = dotted(node.func) or source_of(node.func)
            if RANDOM_CALL.search(name):
                return True
    return False
