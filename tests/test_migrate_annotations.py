"""compatfn.migrate._annotations: a forward that gains intermediates keeps a return annotation
consistent with what it now returns (it was dropped), spelled as the file spells a tuple."""

from __future__ import annotations

import textwrap
from typing import Any, Dict

import pytest
import torch

pytest.importorskip("libcst")
from compatfn.migrate import migrate_source

_CLASS = """
class Op(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: {param}) -> {returns}:
        y = x.exp()
        t = x * 2
        ctx.save_for_backward(t)
        t.add_(1)
        ctx.total = float(x.sum())
        x.mul_(2)
        return {returned}

    @staticmethod
    def backward(ctx, *grads):
        (t,) = ctx.saved_tensors
        return grads[0] * ctx.total * t
"""


def _migrated(header: str, param: str, returns: str, returned: str = "y") -> str:
    source = textwrap.dedent(header) + _CLASS.format(
        param=param, returns=returns, returned=returned
    )
    result = migrate_source(source, "case.py")
    assert result.migrated == ["Op"], result.refusals
    namespace: Dict[str, Any] = {"__name__": "migrated_case"}
    exec(compile(result.new_source, "<migrated>", "exec"), namespace)  # runs as written
    x = torch.ones(2, requires_grad=True)
    namespace["Op"].apply(x.clone())
    return result.new_source


@pytest.mark.parametrize(
    "header, param, returns, returned, expected",
    [
        (
            "from typing import Tuple\n\nimport torch\nfrom torch import Tensor\n",
            "Tensor",
            "Tensor",
            "y",
            "-> Tuple[Tensor, Tensor, object]:",
        ),
        (  # a tuple of as many items as forward returns is extended in place
            "from typing import Tuple\n\nimport torch\n",
            "torch.Tensor",
            "Tuple[torch.Tensor, torch.Tensor]",
            "y, x * 3",
            "-> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, object]:",
        ),
        (
            "import typing\n\nimport torch\n",
            "torch.Tensor",
            "torch.Tensor",
            "y",
            "-> typing.Tuple[torch.Tensor, torch.Tensor, object]:",
        ),
        (
            "from __future__ import annotations\n\nimport torch\n",
            "torch.Tensor",
            "torch.Tensor",
            "y",
            "-> tuple[torch.Tensor, torch.Tensor, object]:",
        ),
        (  # no tuple spelling at hand: dropped, as before
            "import torch\n",
            "torch.Tensor",
            "torch.Tensor",
            "y",
            "def forward(x: torch.Tensor):",
        ),
        (  # a variadic tuple cannot take the intermediates: dropped
            "from typing import Tuple\n\nimport torch\n",
            "torch.Tensor",
            "Tuple[torch.Tensor, ...]",
            "y, x * 3",
            "def forward(x: torch.Tensor):",
        ),
    ],
    ids=["tensor", "flat-tuple", "typing-module", "future-annotations", "no-tuple", "variadic"],
)
def test_the_return_annotation_names_the_intermediates(header, param, returns, returned, expected):
    assert expected in _migrated(header, param, returns, returned)
