"""README's examples run as written, on every torch of the matrix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from toy_functions import FORCED, expected_mode

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"## {re.escape(heading)}\n.*?```python\n(.*?)```", text, re.S)
    assert match, f"no python block under '## {heading}'"
    return match.group(1)


def test_thirty_second_example():
    namespace: dict = {}
    exec(compile(python_block("30 seconds"), "README.md", "exec"), namespace)
    fn = namespace["ClippedReLU"]
    x = namespace["x"]
    assert torch.equal(namespace["clipped_relu"](x, clip=2.0), x.clamp(0, 2.0))
    assert namespace["compatfn"].mode(fn) == expected_mode(FORCED)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_amp_example_decorates(device):
    source = python_block("Using compatfn with AMP, torch.func and torch.compile")
    if device == "cpu":
        source = source.replace('"cuda"', '"cpu"').replace("torch.float16", "torch.bfloat16")
        if not hasattr(torch, "is_autocast_cpu_enabled"):
            pytest.skip(f"torch {torch.__version__} has no CPU autocast (torch >= 1.10)")
    namespace: dict = {"torch": torch}
    exec(compile("import compatfn\n" + source, "README.md", "exec"), namespace)
    linear = namespace["Linear"]
    x = torch.randn(4, 3, device=device, requires_grad=True)
    w = torch.randn(3, 2, device=device, requires_grad=True)
    with torch.autocast(device, dtype=torch.bfloat16 if device == "cpu" else torch.float16):
        y = linear.apply(x, w)
    y.float().sum().backward()
    assert x.grad is not None and w.grad is not None
