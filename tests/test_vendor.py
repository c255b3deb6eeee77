"""Issue 2, point 10: the core is one module that imports only the standard library and torch, never
names its package, and works when copied into another package under another name."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import torch

from compatfn import core

SOURCE = Path(core.__file__).read_text(encoding="utf-8")
STDLIB = {
    "__future__", "functools", "importlib", "inspect", "linecache", "os", "re", "sys", "threading",
    "typing", "warnings",
}  # fmt: skip


def test_core_imports_only_stdlib_and_torch():
    imported = set()
    for node in ast.walk(ast.parse(SOURCE)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative imports break vendoring"
            imported.add((node.module or "").split(".")[0])
    assert imported - STDLIB == {"torch"}
    stdlib_names = getattr(sys, "stdlib_module_names", None)  # Python >= 3.10
    if stdlib_names is not None:
        assert imported - {"torch"} <= set(stdlib_names)


def test_core_never_spells_its_package_name():
    # Only the documented environment variable COMPATFN_LEGACY carries the name, upper case.
    assert "compatfn" not in SOURCE
    assert SOURCE.count("COMPATFN") == SOURCE.count("COMPATFN_LEGACY")


def _import_as(package_dir: Path, dotted: str):
    sys.path.insert(0, str(package_dir.parent))
    try:
        return importlib.import_module(dotted)
    finally:
        sys.path.remove(str(package_dir.parent))
        for name in [
            n for n in sys.modules if n == package_dir.name or n.startswith(package_dir.name + ".")
        ]:
            del sys.modules[name]


def _exercise(module) -> None:
    @module.function
    class Triple(torch.autograd.Function):
        @staticmethod
        def forward(x, factor=3.0):
            return x * factor

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.factor = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor

    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    Triple.apply(x, factor=3.0).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 3))
    assert module.mode(Triple) in ("native", "legacy")
    assert torch.autograd.gradcheck(module.functional(Triple), (x,))
    assert module.features()["torch"] == str(torch.__version__)


def test_core_works_when_copied_under_another_name(tmp_path):
    package = tmp_path / "thirdparty_ops"
    (package / "_compat").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_compat" / "__init__.py").write_text("")
    (package / "_compat" / "autograd_fn.py").write_text(SOURCE)
    module = _import_as(package, "thirdparty_ops._compat.autograd_fn")
    assert module.__name__ == "thirdparty_ops._compat.autograd_fn"
    _exercise(module)


def test_vendor_command_writes_one_importable_file(tmp_path):
    package = tmp_path / "throwaway_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    dest = package / "_fn_compat.py"
    command = [sys.executable, "-m", "compatfn", "vendor", str(dest)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert str(dest) in done.stdout
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "_fn_compat.py"]
    text = dest.read_text()
    import compatfn

    assert text.startswith(f"# Vendored from compatfn {compatfn.__version__}")
    assert "BSD-3-Clause" in text.splitlines()[0]
    assert text.endswith(SOURCE)
    _exercise(_import_as(package, "throwaway_pkg._fn_compat"))


def test_vendor_refuses_to_overwrite_without_force(tmp_path, capsys):
    from compatfn.__main__ import main

    dest = tmp_path / "existing.py"
    dest.write_text("# mine\n")
    assert main(["vendor", str(dest)]) == 2
    assert "--force" in capsys.readouterr().err
    assert dest.read_text() == "# mine\n"
    assert main(["vendor", str(dest), "--force"]) == 0
    assert dest.read_text().endswith(SOURCE)
    assert main(["vendor", str(tmp_path / "not-python.txt")]) == 2


def test_report_command():
    done = subprocess.run([sys.executable, "-m", "compatfn"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on torch {torch.__version__}" in done.stdout
    assert "path taken: " in done.stdout
    assert "\n5 passed, 0 failed" in done.stdout or "\n10 passed, 0 failed" in done.stdout


def test_report_json_and_failing_selfcheck(capsys, monkeypatch):
    import json

    from compatfn import __main__ as cli

    assert cli.main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"] == str(torch.__version__)
    assert data["path"] in ("native", "legacy")
    assert data["features"]["torch"] == str(torch.__version__)
    assert data["selfcheck"] and all(row["ok"] for row in data["selfcheck"])

    def broken(cls, kwargs, device):
        raise AssertionError("gradcheck returned False")

    monkeypatch.setattr(cli, "_check", broken)
    assert cli.main([]) == 1  # a failing self-check is a non-zero exit
    out = capsys.readouterr().out
    assert "FAIL" in out and "0 passed" in out
