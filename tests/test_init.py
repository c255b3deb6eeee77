"""The package's first contact: what ``import compatfn`` gives, and what it costs."""

from __future__ import annotations

import subprocess
import sys

import compatfn


def _run(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_submodules_are_attributes_imported_on_first_use():
    _run(
        "import sys, compatfn\n"
        "assert 'torch' not in sys.modules and 'compatfn.relu' not in sys.modules\n"
        "assert compatfn.relu.BitReLU.__name__ == 'BitReLU'\n"
        "assert callable(compatfn.testing.check_function)\n"
        "assert callable(compatfn.library.custom_op)\n"
        "assert compatfn.relu_ops.mask_relu_op is not None\n"
    )


def test_dir_lists_the_public_api_and_submodules_only():
    names = dir(compatfn)
    assert set(compatfn.__all__) <= set(names)
    assert {"relu", "testing", "library", "relu_ops", "core"} <= set(names)
    helpers = {"Any", "Dict", "List", "TYPE_CHECKING", "functools", "importlib", "_exports"}
    assert not helpers & set(names)
    assert not [name for name in names if name.startswith("_") and not name.endswith("__")]


def test_help_of_function_shows_the_plain_decorator_first():
    doc = compatfn.function.__doc__ or ""
    assert doc.index("@function\n") < doc.index("@function(intermediates=1)")


def _every_module() -> list[str]:
    import pkgutil

    found = pkgutil.walk_packages(compatfn.__path__, prefix="compatfn.")
    # The codemod needs the migrate extra, the command line runs on import: both are tested where
    # they live (test_migrate*, test_main).
    return [
        info.name
        for info in found
        if not info.name.startswith(("compatfn.migrate", "compatfn.__main__"))
    ]


def test_every_module_imports_on_this_torch():
    # A module a tier imports only when it is used (the torch tier's op class on torch < 2.4)
    # still has to import: a class body that reads a newer torch's attributes breaks it.
    modules = _every_module()
    assert "compatfn.library._torch_op" in modules and "compatfn.core" in modules
    _run("import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules))
