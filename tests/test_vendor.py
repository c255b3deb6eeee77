"""The core is one module that imports only the standard library and torch, never names its
package, and works when copied into another package under another name; ``python -m compatfn``
(report) and ``python -m compatfn vendor`` behave as documented, errors in one line."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import compatfn
from compatfn import core
from toy_functions import make_scale

SOURCE = Path(core.__file__).read_text(encoding="utf-8")
STDLIB = {
    "__future__", "functools", "importlib", "inspect", "linecache", "os", "re", "sys", "threading",
    "types", "typing", "warnings",
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
    triple = make_scale(name="Triple", factor=3.0, none_for_factor=False, decorate=module.function)

    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    triple.apply(x, factor=3.0).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 3))
    twin = make_scale(name="Triple", factor=3.0, none_for_factor=False)  # the package's own
    assert module.mode(triple) == compatfn.mode(twin)
    assert torch.autograd.gradcheck(module.functional(triple), (x,))
    assert not hasattr(module, "features")  # the report's probes stay in the package


def test_core_works_when_copied_under_another_name(tmp_path):
    package = tmp_path / "thirdparty_ops"
    (package / "_compat").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_compat" / "__init__.py").write_text("")
    (package / "_compat" / "autograd_fn.py").write_text(SOURCE)
    module = _import_as(package, "thirdparty_ops._compat.autograd_fn")
    assert module.__name__ == "thirdparty_ops._compat.autograd_fn"
    _exercise(module)


def _copies(tmp_path):
    """Two vendored copies of core, in two packages, as two libraries would ship them."""
    modules = []
    for name in ("vendor_one", "vendor_two"):
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "_compat.py").write_text(SOURCE)
        modules.append(_import_as(package, f"{name}._compat"))
    assert modules[0] is not modules[1] and modules[0].function is not core.function
    return modules


def test_every_copy_reads_the_one_legacy_variable(tmp_path, monkeypatch):
    """``COMPATFN_LEGACY`` forces the legacy path in the package and in every vendored copy, and
    a value none of them understands fails the decoration in each, naming the variable."""
    copies = [core, *_copies(tmp_path)]
    monkeypatch.setenv("COMPATFN_LEGACY", "1")
    for module in copies:
        cls = make_scale(decorate=module.function)
        assert module.mode(cls) == "legacy", module.__name__
        x = torch.ones(2, dtype=torch.float64, requires_grad=True)
        (grad,) = torch.autograd.grad(cls.apply(x, 3.0).sum(), x)
        assert grad.tolist() == [3.0, 3.0]
    monkeypatch.setenv("COMPATFN_LEGACY", "perhaps")
    for module in copies:
        with pytest.raises(ValueError, match=r"^COMPATFN_LEGACY='perhaps' is not understood"):
            make_scale(decorate=module.function)


def test_a_copy_takes_the_legacy_path_and_intermediates(tmp_path):
    (module, _) = _copies(tmp_path)
    forced = make_scale(decorate=lambda cls: module.function(cls, legacy=True))
    assert module.mode(forced) == "legacy"
    x = torch.tensor([0.5, -1.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: forced.apply(t, 3.0), (x,))

    @module.function(intermediates=1)
    class Shifted(torch.autograd.Function):
        @staticmethod
        def forward(x):
            shifted = x - 1
            return shifted * 2, shifted

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, shifted = output
            ctx.save_for_backward(shifted)

        @staticmethod
        def backward(ctx, grad):
            (shifted,) = ctx.saved_tensors
            return grad * 2 + shifted * 0

    y = Shifted.apply(x)
    assert isinstance(y, torch.Tensor) and y.tolist() == [-1.0, -5.0]
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert grad.tolist() == [2.0, 2.0]


def test_a_copys_custom_fwd_under_autocast(tmp_path):
    if not compatfn.features()["cpu_autocast"]:  # pinned per release in test_features
        pytest.skip(f"torch {torch.__version__} has no CPU autocast (torch >= 1.10)")
    (module, _) = _copies(tmp_path)
    seen = []

    @module.function
    class MatMul(torch.autograd.Function):
        @staticmethod
        @module.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
        def forward(a, b):
            seen.append(("forward", a.dtype, a.mm(b).dtype))
            return a.mm(b)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        @module.custom_bwd(device_type="cpu")
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            seen.append(("backward", grad.mm(b.t()).dtype))
            return grad.mm(b.t()), a.t().mm(grad)

    a = torch.ones(2, 3, dtype=torch.bfloat16, requires_grad=True)
    b = torch.ones(3, 2, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = MatMul.apply(a, b)
    y.sum().backward()
    # forward and backward ran with autocast off (cast_inputs): float32 matmuls throughout
    assert seen == [("forward", torch.float32, torch.float32), ("backward", torch.float32)]
    assert y.dtype == torch.float32 and a.grad.dtype == torch.bfloat16
    assert a.grad.tolist() == [[2.0] * 3] * 2 and b.grad.tolist() == [[2.0] * 2] * 3


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

    assert text.startswith(
        f"# Vendored from compatfn {compatfn.__version__}, module compatfn.core."
    )
    assert text.endswith(SOURCE)
    _exercise(_import_as(package, "throwaway_pkg._fn_compat"))


def test_vendored_header_carries_license_and_whole_api(tmp_path):
    from compatfn import core
    from compatfn.__main__ import vendor

    header = vendor(tmp_path / "v.py").read_text()[: -len(SOURCE)]
    license_text = (Path(core.__file__).parent / "LICENSE").read_text()
    for line in license_text.strip().splitlines():  # copyright line, conditions, disclaimer
        assert f"# {line}".rstrip() in header
    assert "Copyright (c)" in header and "THIS SOFTWARE IS PROVIDED" in header
    comment = " ".join(line[2:] for line in header.splitlines() if line.startswith("# "))
    assert f"Public API: {', '.join(core.__all__)} (" in comment
    prose = [line for line in header.splitlines() if "python -m compatfn vendor" not in line]
    assert max(len(line) for line in prose) <= 88  # passes black's default line length
    assert "custom_fwd" in core.__all__ and "COMPATFN_LEGACY" in header


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "compatfn", *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})


def test_vendor_creates_missing_folders(tmp_path):
    dest = tmp_path / "a" / "b" / "_compat.py"
    done = _cli("vendor", str(dest))
    assert done.returncode == 0, done.stderr
    assert dest.read_text().endswith(SOURCE)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p, "is a folder; name the .py file to write"),
        (lambda p: p / "notes.txt", "is not a .py file"),
        (lambda p: (p / "exists.py").write_text("# mine\n") and p / "exists.py", "--force"),
    ],
    ids=["folder", "not-python", "exists"],
)
def test_vendor_usage_errors_are_one_line_exit_2(tmp_path, make, message):
    done = _cli("vendor", str(make(tmp_path)))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_vendor_that_cannot_write_says_why_in_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = _cli("vendor", str(blocker / "sub" / "x.py"))  # a parent is a file
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: cannot write {blocker / 'sub' / 'x.py'}: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_vendor_does_not_import_torch(tmp_path):
    code = (
        "import sys; from compatfn.__main__ import main\n"
        f"assert main(['vendor', {str(tmp_path / 'v.py')!r}]) == 0\n"
        "assert 'torch' not in sys.modules, 'vendor imported torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_vendor_refuses_to_overwrite_without_force(tmp_path, capsys):
    from compatfn.__main__ import main

    dest = tmp_path / "existing.py"
    dest.write_text("# mine\n")
    assert main(["vendor", str(dest)]) == 2
    assert "--force" in capsys.readouterr().err
    assert dest.read_text() == "# mine\n"
    assert main(["vendor", str(dest), "--force"]) == 0
    assert dest.read_text().endswith(SOURCE)


def test_bad_arguments_exit_2():
    assert _cli("vendor").returncode == 2
    assert _cli("--bogus").returncode == 2


def test_report_under_warnings_as_errors_shows_the_same_features():
    plain, strict = (
        _cli("--json"),
        subprocess.run(
            [sys.executable, "-W", "error", "-m", "compatfn", "--json"],
            capture_output=True,
            text=True,
        ),
    )
    assert plain.returncode == 0 and strict.returncode == 0, plain.stderr + strict.stderr
    assert json.loads(plain.stdout)["features"] == json.loads(strict.stdout)["features"]
    # No stray warnings. (Under -W error torch 2.5-2.6 may print a ResourceWarning traceback
    # at interpreter exit, from a temporary folder torch._dynamo leaves to its finalizer.)
    assert plain.stderr == ""
    features = json.loads(plain.stdout)["features"]
    assert not any(str(value).startswith("error:") for value in features.values()), features


def test_report_leaves_out_torchs_numpy_warning():
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "from compatfn.__main__ import main\n"
        "sys.exit(main([]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if core_needs_numpy():
        assert done.returncode == 1 and done.stderr.startswith("error: torch cannot be imported")
        return
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    # torch warns "Failed to initialize NumPy" here; compatfn never uses NumPy, so the report
    # drops exactly that warning (tests/test_main.py: other warnings stay, one line each).
    assert "NumPy" not in done.stdout


def core_needs_numpy() -> bool:
    """torch 1.8 cannot be imported at all without NumPy."""
    return torch.__version__.startswith("1.8.")


def test_bad_legacy_environment_value_is_a_usage_error():
    done = _cli(COMPATFN_LEGACY="perhaps")
    assert done.returncode == 2
    assert done.stderr.startswith("error: COMPATFN_LEGACY='perhaps' is not understood")
    assert "Traceback" not in done.stderr


def test_report_command():
    done = subprocess.run([sys.executable, "-m", "compatfn"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on torch {torch.__version__}" in done.stdout
    assert "path taken: " in done.stdout
    from compatfn import __main__ as cli
    from compatfn import library

    checks = len(cli._selfcheck_cases()) * (2 if torch.cuda.is_available() else 1)
    assert f"\n{checks} passed, 0 failed" in done.stdout
    assert f"custom_op tier: {library.TIER} (" in done.stdout


def test_report_into_a_closed_pipe_is_not_a_traceback():
    # `true` exits without reading; the report is written seconds later, into a closed pipe.
    command = f"'{sys.executable}' -m compatfn; echo status=$? >&2"
    done = subprocess.run(["bash", "-c", f"({command}) | true"], capture_output=True, text=True)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.stderr.strip().endswith("status=1"), done.stderr


def test_report_json_and_failing_selfcheck(capsys, monkeypatch):
    import json

    from compatfn import __main__ as cli

    assert cli.main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"] == str(torch.__version__)
    assert data["path"] == compatfn.mode(compatfn.relu.ReLU)
    assert data["features"]["torch"] == str(torch.__version__)
    assert data["selfcheck"] and all(row["ok"] for row in data["selfcheck"])
    assert data["custom_op"] in cli.CUSTOM_OP_NOTES
    assert "clipped_relu_op(x, clip=1.0)" in [row["check"] for row in data["selfcheck"]]

    def broken(cls, kwargs, device):
        raise AssertionError("gradcheck returned False")

    monkeypatch.setattr(cli, "_check", broken)
    assert cli.main([]) == 1  # a failing self-check is a non-zero exit
    out = capsys.readouterr().out
    assert "FAIL" in out and "0 passed" in out


def test_selfcheck_is_check_function_and_opcheck_on_the_reference_suites(monkeypatch):
    from compatfn import __main__ as cli
    from compatfn import relu, relu_ops, testing

    seen = []

    def recording(fn, *inputs, kwargs=None, checks=None, **options):
        seen.append((fn, kwargs, tuple(checks)))
        return testing.CheckReport(str(fn), str(torch.__version__))

    opchecked = []

    def recording_opcheck(op, args, kwargs=None, *, test_utils=(), **options):
        opchecked.append((op, kwargs, tuple(test_utils)))
        return {}

    monkeypatch.setattr(testing, "check_function", recording)
    monkeypatch.setattr(testing, "opcheck", recording_opcheck)
    rows = cli.selfcheck()
    assert rows and all(row["ok"] for row in rows)
    targets = [target for _, target, _ in cli._selfcheck_cases()]
    assert [fn for fn, _, _ in seen][: len(targets)] == targets
    assert (relu.ClippedReLU, {"clip": 1.0}, cli.SELFCHECKS) in seen
    numerical = cli.SELFCHECKS[:3]
    assert (relu_ops.clipped_relu_op, {"clip": 1.0}, numerical) in seen
    assert (relu_ops.mask_relu_op, {}, numerical) in seen
    assert opchecked[:2] == [
        (relu_ops.clipped_relu_op, {"clip": 1.0}, cli.SELFCHECK_OPCHECKS),
        (relu_ops.mask_relu_op, {}, cli.SELFCHECK_OPCHECKS),
    ]


@pytest.mark.parametrize("value", ["native", "functional", "unavailable"])
def test_report_explains_every_compile_and_export_value(value):
    from compatfn import __main__ as cli

    for export in [(), ("strict",), ("strict", "non-strict")]:
        notes = cli.feature_notes({"compile": value, "export": export})
        assert notes["compile"], value
        assert ("export" in notes) == (export != ("strict", "non-strict")), export


def test_package_imports_torch_only_when_its_api_is_used():
    code = (
        "import sys, compatfn\n"
        "assert 'torch' not in sys.modules and compatfn.__version__\n"
        "assert compatfn.core._TORCH_VERSION and 'torch' in sys.modules\n"
        "from compatfn import function, custom_fwd\n"
        "assert sorted(set(dir(compatfn)) & set(compatfn.__all__)) == sorted(compatfn.__all__)\n"
    )
    code = (
        "import sys, compatfn\n"
        "assert 'function' in compatfn.__all__ and 'function' in dir(compatfn)\n"
        "assert 'torch' not in sys.modules\n"
    ) + code
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_package_exports_exactly_the_public_modules_names():
    """``compatfn.__all__`` is ``__version__`` plus core's, ``_features``' and library's
    ``__all__``, each name that module's object."""
    import compatfn
    from compatfn import _features, library

    modules = (core, _features, library)
    assert compatfn.__all__ == ["__version__", *(n for m in modules for n in m.__all__)]
    for module in modules:
        for name in module.__all__:
            assert getattr(compatfn, name) is getattr(module, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        compatfn.nothing_here  # noqa: B018


def test_type_checkers_see_every_public_name():
    """The ``TYPE_CHECKING`` imports in ``__init__`` (what mypy reads) list every public name."""
    import compatfn

    tree = ast.parse(Path(compatfn.__file__).read_text(encoding="utf-8"))
    seen = [
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("compatfn.")
        for alias in node.names
    ]
    assert sorted(seen) == sorted(compatfn.__all__[1:])


def test_core_has_no_public_name_outside_all():
    """The vendored module's public API is its ``__all__``: every other name defined in it (the
    torch facts included) is underscored, so a vendoring user can tell what is stable."""
    defined_here = [
        name
        for name, value in vars(core).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and getattr(value, "__module__", core.__name__) == core.__name__
    ]
    assert sorted(defined_here) == sorted(core.__all__)
