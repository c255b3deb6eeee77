"""What module-level names stand for: imports, and the AMP decorators (torch's
``custom_fwd``/``custom_bwd``, partials of them and module-level switches between them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import libcst as cst

from ._syntax import dotted, source_of

CUDA_AMP = {"torch.cuda.amp", "torch.cuda.amp.autocast_mode"}
TORCH_AMP = {"torch.amp", "torch.amp.autocast_mode"}
PARTIAL = {"functools.partial"}


class Names:
    """What module-level names stand for: imports (``F`` -> ``torch.autograd.Function``) and the
    values assigned to them (for AMP decorator switches)."""

    def __init__(self, module: cst.Module) -> None:
        self.imports: Dict[str, str] = {}
        self.values: Dict[str, List[cst.BaseExpression]] = {}
        for stmt in module.body:
            self._scan(stmt)

    def _scan(self, node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name) or ""
                if alias.asname is not None:
                    self.imports[dotted(alias.asname.name) or ""] = full  # type: ignore[arg-type]
                else:
                    self.imports[full.split(".")[0]] = full.split(".")[0]
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            module = dotted(node.module) if node.module is not None else None
            if module is not None and not node.relative:
                for alias in node.names:
                    name = alias.name.value if isinstance(alias.name, cst.Name) else ""
                    local = (
                        dotted(alias.asname.name)  # type: ignore[arg-type]
                        if alias.asname is not None
                        else name
                    )
                    self.imports[local or name] = f"{module}.{name}"
                    self.values.setdefault(local or name, []).append(
                        cst.parse_expression(f"{module}.{name}")
                    )
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self.values.setdefault(target.target.value, []).append(node.value)
        for child in node.children:
            self._scan(child)

    def qualify(self, expr: cst.BaseExpression) -> Optional[str]:
        """The dotted name ``expr`` refers to, imports resolved: ``ag.Function`` ->
        ``torch.autograd.Function``."""
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.imports:
            head = self.imports[head]
        return f"{head}.{rest}" if rest else head


@dataclass
class Amp:
    """A custom_fwd/custom_bwd decorator: which one, its device type and cast_inputs source."""

    which: str  # "custom_fwd" or "custom_bwd"
    device_type: str
    cast_inputs: Optional[str] = None


def _amp_from_reference(names: Names, expr: cst.BaseExpression, depth: int = 0) -> Optional[Amp]:
    """The AMP decorator an expression names (torch's own, a partial of it, or a switch)."""
    if isinstance(expr, cst.Call):
        head = names.qualify(expr.func)
        if head in PARTIAL and expr.args:
            inner = _amp_from_reference(names, expr.args[0].value, depth)
            return _with_call_args(inner, expr.args[1:]) if inner else None
        return None
    qualified = names.qualify(expr)
    if qualified is None:
        return None
    module, _, which = qualified.rpartition(".")
    if which in ("custom_fwd", "custom_bwd"):
        if module in CUDA_AMP:
            return Amp(which, "cuda")
        if module in TORCH_AMP:
            return Amp(which, "")
    if isinstance(expr, cst.Name) and depth < 3 and expr.value in names.values:
        found = [_amp_from_reference(names, v, depth + 1) for v in names.values[expr.value]]
        if found and all(found):
            devices = {amp.device_type for amp in found if amp and amp.device_type}
            first = found[0]
            assert first is not None
            if len(devices) <= 1 and len({amp.which for amp in found if amp}) == 1:
                casts = {amp.cast_inputs for amp in found if amp}
                cast = casts.pop() if len(casts) == 1 else None
                return Amp(first.which, devices.pop() if devices else "", cast)
    return None


def _with_call_args(amp: Optional[Amp], args: Sequence[cst.Arg]) -> Optional[Amp]:
    if amp is None:
        return None
    device, cast = amp.device_type, amp.cast_inputs
    for arg in args:
        keyword = arg.keyword.value if arg.keyword else None
        if keyword == "device_type" and isinstance(arg.value, cst.SimpleString):
            device = arg.value.evaluated_value  # type: ignore[assignment]
        elif keyword == "cast_inputs":
            cast = source_of(arg.value)
        else:
            return None
    return Amp(amp.which, device, cast)


def amp_decorator(names: Names, decorator: cst.Decorator) -> Optional[Amp]:
    expr = decorator.decorator
    if isinstance(expr, cst.Call):
        return _with_call_args(_amp_from_reference(names, expr.func), expr.args)
    return _amp_from_reference(names, expr)
