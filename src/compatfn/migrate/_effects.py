"""What a call in forward may do besides returning a value: which names it may change, and
whether an expression can be evaluated again later (in setup_context) with the same result.

See NOTE: [calls forward makes] for the rules.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, Optional, Set

import libcst as cst

from ._syntax import decorator_name, dotted, free_names, root_name, walk

# NOTE: [calls forward makes]
# A ctx value that setup_context computes again is right only if nothing between the ctx
# statement and the end of forward changes what it reads, and if computing it later has no
# effect of its own. Spellings of changes in place are in NOTE: [in-place changes]; a call the
# codemod does not know may change anything it is given, in place and without saying so: a
# Triton or CUDA-extension launch writing into its output buffer (``_kernel[grid](x, y)``,
# ``ext.fwd(q, k, out)``), a helper calling ``t.mul_()``, ``torch._foreach_mul_([y], 2)``, a
# method of a Python object that updates the object. So every name handed to such a call (also
# inside a list, a tuple or ``*[...]``; the object a method is called on) counts as changed,
# and a call the codemod does not know may change any module-level or enclosing value
# (``_STATE["k"]``, a ``nonlocal``). Known calls change nothing they are given: the builtins and
# tensor methods listed here and torch's own functions (``torch.mm``, ``F.softmax``) without a
# trailing ``_``, ``out=`` or ``inplace=``. A tensor's shape, dtype, device and the like change
# only in place (``resize_``, ``set_``, ``.data =``), never through a kernel writing its values,
# so reading them does not count as reading the values. Evaluated again, an expression must
# only make known calls: ``next(counter)``, a helper, ``torch.is_autocast_enabled()`` or
# ``torch.empty`` give another result, or the same result with another effect, later.


def _words(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


#: Builtins that change none of their arguments and return nothing that shares them.
PURE_BUILTINS = _words(
    "abs bool callable divmod float format hasattr hash id int isinstance issubclass len "
    "print range repr round slice str type"
)

#: Tensor attributes that are metadata, not values: a kernel writing values leaves them.
METADATA_ATTRIBUTES = _words(
    "shape dtype device ndim layout is_cuda is_sparse is_quantized is_meta requires_grad"
)

#: Tensor methods that read metadata only.
METADATA_METHODS = _words(
    "size dim numel nelement stride storage_offset element_size is_contiguous get_device "
    "is_floating_point is_complex data_ptr"
)

#: Methods (of tensors, and of Python containers) that change neither their object nor their
#: arguments, and whose result is the same when called again on the same values.
PURE_METHODS = METADATA_METHODS | _words(
    "view view_as reshape reshape_as contiguous clone detach t transpose permute expand "
    "expand_as unsqueeze squeeze flatten unflatten narrow select chunk split unbind float "
    "double half bfloat16 int long bool to cpu cuda type_as new_zeros new_ones new_full "
    "new_tensor sum mean amax amin max min prod norm abs exp log sqrt rsqrt pow mul add "
    "sub div neg matmul mm bmm item tolist any all eq ne lt le gt ge sign argmax argmin "
    "cumsum softmax log_softmax sigmoid tanh relu masked_fill index_select gather repeat "
    "flip clamp square reciprocal get keys values items copy index count"
)

#: torch modules whose functions (without a trailing ``_``, ``out=`` or ``inplace=``) change
#: none of their arguments.
_TORCH_MODULES = frozenset(["torch", "torch.nn.functional", "torch.linalg", "torch.special"])

#: torch functions that read global state, draw memory or numbers, or act beyond the call:
#: their result is not the same when called again later.
_TORCH_STATEFUL_PREFIXES = (
    "is_",
    "are_",
    "get_",
    "set_",
    "empty",
    "rand",
    "manual_seed",
    "seed",
    "initial_seed",
)

#: Calls that may change any name at all.
_ANY_NAME = frozenset(["exec", "eval", "globals", "locals", "vars"])

ANY = "*"  # in a set of changed names: every name may have changed


def _torch_function(func: cst.BaseExpression, imports: Dict[str, str]) -> Optional[str]:
    """The last part of ``func`` if it is a function of one of torch's modules, resolved
    through the file's imports (``F.softmax`` -> ``softmax``)."""
    path = dotted(func)
    if path is None or "." not in path:
        return None
    head, _, rest = path.partition(".")
    full = f"{imports.get(head, head)}.{rest}"
    module, _, name = full.rpartition(".")
    return name if module in _TORCH_MODULES else None


def _marks_in_place(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value in ("out", "inplace") for a in call.args)


def _known(call: cst.Call, imports: Dict[str, str], evaluated_again: bool) -> bool:
    """Whether ``call`` changes none of its arguments (``evaluated_again``: and gives the same
    result, with no other effect, when made again later)."""
    if _marks_in_place(call):
        return False
    func = call.func
    name = _torch_function(func, imports)
    if name is not None:
        if name.endswith("_"):
            return False
        return not (evaluated_again and name.startswith(_TORCH_STATEFUL_PREFIXES))
    if isinstance(func, cst.Name):
        return func.value in PURE_BUILTINS and func.value not in imports
    if isinstance(func, cst.Attribute):  # a method, not a function of an imported module
        return root_name(func.value) not in imports and func.attr.value in PURE_METHODS
    return False


def _argument_roots(expr: cst.BaseExpression) -> Iterator[str]:
    """The names whose objects ``expr`` hands to a call: ``y`` for ``y``, ``y.buf``, ``[y]``,
    ``*[y, z]`` or ``(v := y)``."""
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        for element in expr.elements:
            yield from _argument_roots(element.value)
    elif isinstance(expr, cst.Dict):
        for item in expr.elements:
            if isinstance(item, cst.DictElement):
                yield from _argument_roots(item.key)
            yield from _argument_roots(item.value)
    elif isinstance(expr, cst.NamedExpr):
        yield from _argument_roots(expr.value)
        yield from _argument_roots(expr.target)
    else:
        root = root_name(expr)
        if root is not None:
            yield root


def handed_to_calls(node: cst.CSTNode, imports: Dict[str, str]) -> Set[str]:
    """Names ``node`` hands to calls that may change them (the object of a method call too);
    ``ANY`` where a call may change any name (see NOTE: [calls forward makes])."""
    handed: Set[str] = set()
    for sub in walk(node, into_scopes=True):
        if not isinstance(sub, cst.Call) or _known(sub, imports, evaluated_again=False):
            continue
        if dotted(sub.func) in _ANY_NAME:
            handed.add(ANY)
        for arg in sub.args:
            handed.update(_argument_roots(arg.value))
        if isinstance(sub.func, cst.Attribute):
            handed.update(_argument_roots(sub.func.value))
    return handed


def makes_unknown_calls(node: cst.CSTNode, imports: Dict[str, str]) -> bool:
    """Whether ``node`` makes a call that may change module-level or enclosing values."""
    for sub in walk(node, into_scopes=True):
        if isinstance(sub, cst.Call) and not _known(sub, imports, evaluated_again=False):
            return True
    return False


def evaluates_the_same_later(expr: cst.BaseExpression, imports: Dict[str, str]) -> bool:
    """Whether every call in ``expr`` gives the same result, with no effect, made again later
    on the same values."""
    return all(
        _known(sub, imports, evaluated_again=True)
        for sub in walk(expr, into_scopes=True)
        if isinstance(sub, cst.Call)
    )


def value_names(expr: cst.BaseExpression) -> Set[str]:
    """Names whose values ``expr`` reads: not only their metadata (``x.shape``,
    ``x.size(0)``) or which objects they are (``[x, y]``, ``x is None``)."""
    skip: Set[int] = set()
    for sub in walk(expr, into_scopes=True):
        if isinstance(sub, cst.Attribute):
            skip.add(id(sub.attr))
            if isinstance(sub.value, cst.Name) and sub.attr.value in METADATA_ATTRIBUTES:
                skip.add(id(sub.value))
        elif isinstance(sub, cst.Arg) and sub.keyword is not None:
            skip.add(id(sub.keyword))
        elif (
            isinstance(sub, cst.Call)
            and isinstance(sub.func, cst.Attribute)
            and isinstance(sub.func.value, cst.Name)
            and sub.func.attr.value in METADATA_METHODS
        ):
            skip.add(id(sub.func.value))
        elif isinstance(sub, cst.Comparison) and all(
            isinstance(c.operator, (cst.Is, cst.IsNot)) for c in sub.comparisons
        ):  # which object it is: no change in place alters that
            operands = [sub.left, *(c.comparator for c in sub.comparisons)]
            skip.update(id(o) for o in operands if isinstance(o, cst.Name))
    skip.update(_held_as_they_are(expr))
    read = {
        sub.value
        for sub in walk(expr, into_scopes=True)
        if isinstance(sub, cst.Name) and id(sub) not in skip
    }
    return read & set(free_names(expr))


def _held_as_they_are(expr: cst.BaseExpression) -> Iterator[int]:
    """The names ``expr`` holds without reading them: the items of a list, tuple or set that
    is the whole value (``[x, y]``, ``[x] * n``), objects passed on as they are."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        for side in (expr.left, expr.right):
            if isinstance(side, (cst.List, cst.Tuple)):
                yield from _held_as_they_are(side)
    elif isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        for element in expr.elements:
            if isinstance(element.value, cst.Name):
                yield id(element.value)
            else:
                yield from _held_as_they_are(element.value)


_OPERATIONS = (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.BooleanOperation)


def _matmul(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply)


def computes(expr: cst.BaseExpression, state: str) -> bool:
    """Whether ``expr`` computes what ``state`` (``"autocast"``: torch calls and ``@``;
    ``"grad mode"``: any call or operator) would compute otherwise; reading metadata does
    not."""
    for sub in walk(expr, into_scopes=True):
        if isinstance(sub, cst.Call):
            func = sub.func
            if not (isinstance(func, cst.Attribute) and func.attr.value in METADATA_METHODS):
                return True
        elif isinstance(sub, _OPERATIONS) and (state != "autocast" or _matmul(sub)):
            return True
    return False


_BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass
class Later:
    """What forward does after one statement, as far as evaluating it again later goes."""

    handed: Set[str] = field(default_factory=set)  # names calls may change (aliases included)
    unknown_calls: bool = False  # a call that may change module-level or enclosing values
    imports: Dict[str, str] = field(default_factory=dict)  # the file's: name -> dotted path
    local: Set[str] = field(default_factory=set)  # forward's parameters and assigned names
    other_state: str = ""  # what forward's decorators change: "autocast", "grad mode" or ""


def reevaluation_problem(expr: cst.BaseExpression, later: Later) -> Optional[str]:
    """Why setup_context, evaluating ``expr`` after forward ran, could get another value than
    forward did at this point (None: it gets the same; see NOTE: [calls forward makes])."""
    shared = [
        n
        for n in free_names(expr)
        if n not in later.local and n not in later.imports and n not in _BUILTIN_NAMES
    ]
    if shared and later.unknown_calls:
        return f"{shared[0]}, which a call forward makes later may change"
    if isinstance(expr, cst.Name):
        return None  # the object itself is handed over
    if not evaluates_the_same_later(expr, later.imports):
        return "a call whose result or effect differs when made again later"
    values = value_names(expr)
    if values and ANY in later.handed:
        return f"{min(values)}, which forward may change later (exec or eval)"
    if values & later.handed:
        return f"{min(values & later.handed)}, which forward hands to a call later"
    if later.other_state and computes(expr, later.other_state):
        return f"a value forward's decorator computes under another {later.other_state}"
    return None


#: Decorators of forward that leave autocast and grad mode as setup_context runs in them.
_SAME_STATE_DECORATORS = frozenset(["staticmethod", "classmethod", "ignore", "unused"])


def runs_in_other_state(forward: cst.FunctionDef) -> str:
    """What forward's decorators run it under that setup_context does not run in:
    ``"autocast"`` (``custom_fwd(cast_inputs=...)`` turns autocast off), ``"grad mode"``
    (``torch.enable_grad()`` and any other), or ``""`` (none: a ``custom_fwd`` without
    ``cast_inputs`` leaves both as they are)."""
    state = ""
    for decorator in forward.decorators:
        last = (decorator_name(decorator) or "").rpartition(".")[2]
        if last in _SAME_STATE_DECORATORS:
            continue
        expr = decorator.decorator
        args = expr.args if isinstance(expr, cst.Call) else ()
        if last != "custom_fwd":
            return "grad mode"
        if any(a.keyword is not None and a.keyword.value == "cast_inputs" for a in args):
            state = "autocast"
    return state
