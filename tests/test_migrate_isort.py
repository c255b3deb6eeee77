"""compatfn.migrate's added import with isort itself as the oracle: a module isort leaves as it
is, migrated, is a module isort leaves as it is, under the project's isort settings (found as
migrate finds them: ``compatfn.migrate._sections``). Hypothesis draws the module's imports
(standard library, third party, a first-party package that exists in the project or does not,
relative imports, aliases, ``__future__``), a docstring and ``__all__``, and the settings
(none, ``known_first_party``, ``known_third_party``, ``default_section``, ``profile = "black"``,
``force_sort_within_sections``)
in ``.isort.cfg``, ``setup.cfg`` or ``pyproject.toml``. The modules only need to parse: they are
never run.

isort is installed next to black in each test session whose Python runs black
(``tools/sessions.py``, ``LAYOUT_ORACLE``), which sets ``COMPATFN_EXPECT_BLACK``, under which a
missing isort fails; elsewhere these tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if os.environ.get("COMPATFN_EXPECT_BLACK") and sys.version_info >= (3, 10):
    import isort  # the session promised the layout oracles: a missing isort is a failure here
else:
    isort = pytest.importorskip("isort", reason="isort (the import-order oracle) is not installed")
pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")

from compatfn.migrate import migrate_source

NIGHTLY = os.environ.get("COMPATFN_HYPOTHESIS_PROFILE") == "nightly"

#: Import lines a module may start with (``from torch.autograd import Function`` always).
IMPORTS = [
    "import itertools",
    "import math",
    "import os.path",
    "from typing import Tuple",
    "import numpy as np",
    "import torch",
    "import torch.nn as nn",
    "from torch import Tensor",
    "import einops",
    "import attr",
    "from click import echo",
    "import bitsandbytes as bnb",
    "from cupy import cuda",
    "from mylib import helper",
    "from mylib.ops import kernel",
    "import mylib",
    "from . import sibling",
    "from .utils import tool",
    "import zlib",
]

FUNCTION = """

class Scale(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2
"""

#: isort settings by name: each key's value (a list, a string or a bool).
SETTINGS: Dict[str, Dict[str, Any]] = {
    "none": {},
    "first-party": {"known_first_party": ["mylib"]},
    "third-party": {"known_third_party": ["mylib"]},
    "default-first-party": {"default_section": "FIRSTPARTY"},
    "profile-black": {"profile": "black"},
    "force-sort": {"force_sort_within_sections": True, "known_first_party": ["mylib"]},
}


def _config_file(project: Path, where: str, values: Dict[str, Any]) -> None:
    """``values`` written to ``where`` (an INI file's ``[isort]``, or ``[tool.isort]``)."""
    lines = ["[tool.isort]" if where == "pyproject.toml" else "[isort]"]
    for key, value in values.items():
        if where == "pyproject.toml":
            lines.append(f"{key} = {json.dumps(value)}")  # JSON's lists, strings, true: TOML's
        else:
            text = ",".join(value) if isinstance(value, list) else str(value)
            text = text.lower() if isinstance(value, bool) else text
            lines.append(f"{key} = {text}")
    (project / where).write_text("\n".join(lines) + "\n")


@st.composite
def _modules(draw: Callable[..., Any]) -> Tuple[str, str, str, bool]:
    """(module source, settings name, settings file, whether mylib is a folder of the project)."""
    imports = draw(st.lists(st.sampled_from(IMPORTS), unique=True, max_size=6))
    imports = [*imports, "from torch.autograd import Function"]
    lines = []
    if draw(st.booleans()):
        lines += ['"""A module."""', ""]
    if draw(st.booleans()):
        lines += ["from __future__ import annotations", ""]
    lines += imports
    if draw(st.booleans()):
        lines += ["", '__all__ = ["Scale"]']
    source = "\n".join(lines) + "\n" + FUNCTION
    name = draw(st.sampled_from(sorted(SETTINGS)))
    where = draw(st.sampled_from([".isort.cfg", "setup.cfg", "pyproject.toml"]))
    return source, name, where, draw(st.booleans())


@settings(
    max_examples=300 if NIGHTLY else 25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(_modules())
def test_a_module_isort_accepts_stays_accepted(module: Tuple[str, str, str, bool]) -> None:
    raw, name, where, local = module
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        _config_file(project, where, SETTINGS[name])
        if local:
            (project / "mylib").mkdir()
            (project / "mylib" / "__init__.py").write_text("")
        path = project / "pkg" / "ops.py"
        path.parent.mkdir()
        # The project's folder and its src/ hold its first-party modules, as for migrate (isort
        # would otherwise take the working directory's: compatfn's own checkout).
        config = isort.Config(settings_path=str(project), src_paths=(project, project / "src"))
        source = isort.code(raw, config=config)
        path.write_text(source)
        result = migrate_source(source, str(path))
        assert result.migrated == ["Scale"], result.refusals
        new = result.new_source
        assert isort.code(new, config=config) == new, (
            f"settings {name} in {where}, mylib a project folder: {local}\n--- before:\n"
            f"{source}\n--- migrated:\n{new}\n--- isort:\n"
            f"{isort.code(new, config=config)}"
        )
