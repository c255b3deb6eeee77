"""compatfn.migrate._imports: the added import lands where isort and ruff (``I``, default
settings, or the project's: compatfn.migrate._sections) put it, so that a library's own
import-order check stays green on migrated files."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict

import pytest

cst = pytest.importorskip("libcst", reason="libcst is not installed")

from compatfn.migrate._imports import add_import  # noqa: E402

CASES = {
    "third party, before torch, after __future__ and the standard library": (
        '"""Doc."""\n\nfrom __future__ import annotations\n\nimport math\n\nimport torch\n'
        "from torch import nn\n\nfrom . import utils\n",
        '"""Doc."""\n\nfrom __future__ import annotations\n\nimport math\n\nimport compatfn\n'
        "import torch\nfrom torch import nn\n\nfrom . import utils\n",
    ),
    "after torch from-imports only: straight imports come first": (
        "from torch.autograd import Function\n\nX = 1\n",
        "import compatfn\nfrom torch.autograd import Function\n\nX = 1\n",
    ),
    "a new section between the standard library and local imports": (
        "import math\n\nfrom .ops import f\n",
        "import math\n\nimport compatfn\n\nfrom .ops import f\n",
    ),
    "into the import block after __all__, not beside __future__": (
        'from __future__ import annotations\n\n__all__ = ["F"]\n\nimport math\n\nimport torch\n',
        'from __future__ import annotations\n\n__all__ = ["F"]\n\nimport math\n\n'
        "import compatfn\nimport torch\n",
    ),
    "a new section after __future__ only": (
        "from __future__ import annotations\n\nX = 1\n",
        "from __future__ import annotations\n\nimport compatfn\n\nX = 1\n",
    ),
    "sorted among third-party imports ignoring case": (
        "import Cython\nimport numpy\n",
        "import compatfn\nimport Cython\nimport numpy\n",
    ),
    "no imports: after the docstring": (
        '"""Doc."""\n\nX = 1\n',
        '"""Doc."""\n\nimport compatfn\n\nX = 1\n',
    ),
    "already imported: unchanged": (
        "import compatfn\nimport torch\n",
        "import compatfn\nimport torch\n",
    ),
}


@pytest.mark.parametrize("before, after", CASES.values(), ids=list(CASES))
def test_compatfn_import_is_sorted(before, after):
    assert add_import(cst.parse_module(before), "", "compatfn").code == after


def test_vendored_module_is_first_party_inside_its_own_package():
    before = "import torch\n\nfrom mylib import utils\nfrom mylib.ops import f\n"
    new = add_import(cst.parse_module(before), "mylib", "_compat", "src/mylib/fns.py").code
    assert new == "import torch\n\nfrom mylib import _compat, utils\nfrom mylib.ops import f\n"


def test_vendored_module_elsewhere_is_third_party():
    before = "import math\n\nimport torch\n"
    new = add_import(cst.parse_module(before), "mylib", "_compat", "other/fns.py").code
    assert new == "import math\n\nimport torch\nfrom mylib import _compat\n"


def _project(root: Path, settings: Dict[str, str]) -> str:
    """A project at ``root`` with ``settings`` (file name -> text) and mylib/jax/fns.py; the
    path of that file."""
    (root / ".git").mkdir()
    for name, text in settings.items():
        (root / name).write_text(textwrap.dedent(text))
    (root / "mylib" / "jax").mkdir(parents=True)
    (root / "mylib" / "jax" / "fns.py").write_text("")
    return str(root / "mylib" / "jax" / "fns.py")


def test_vendored_module_gets_its_own_first_party_section(tmp_path):
    before = "import torch\n\nfrom . import utils\n"
    path = _project(tmp_path, {})
    new = add_import(cst.parse_module(before), "mylib", "_compat", path).code
    assert new == "import torch\n\nfrom mylib import _compat\n\nfrom . import utils\n"


_ISORT_DEFAULT_FIRST = """
    [isort]
    profile = black
    known_third_party = numpy,torch
    known_first_party = mylib
    default_section = FIRSTPARTY
    """
_RUFF_KNOWN = """
    [tool.ruff.lint.isort]
    known-first-party = [
        "compatfn",  # vendored as a package of the project's own
    ]
    """


@pytest.mark.parametrize(
    "settings, before, after",
    [
        (  # isort 4 style: what is not known is first party
            {"setup.cfg": _ISORT_DEFAULT_FIRST},
            "import numpy as np\nimport torch\n\nfrom mylib.utils import helper\n",
            "import numpy as np\nimport torch\n\nimport compatfn\nfrom mylib.utils import helper\n",
        ),
        (
            {"pyproject.toml": _RUFF_KNOWN},
            "import torch\n\nfrom mylib import utils\n",
            "import torch\n\nimport compatfn\nfrom mylib import utils\n",
        ),
        (  # a module named as a subfolder of the project's package is not first party
            {"pyproject.toml": "[tool.ruff]\nline-length = 100\n"},
            "import jax\nimport torch\n",
            "import compatfn\nimport jax\nimport torch\n",
        ),
        (  # the shrunk case of test_migrate_isort: import and from lines sorted together
            {".isort.cfg": "[isort]\nforce_sort_within_sections = true\n"},
            "from click import echo\nfrom torch.autograd import Function\n",
            "from click import echo\nimport compatfn\nfrom torch.autograd import Function\n",
        ),
        (
            {"pyproject.toml": "[tool.ruff.lint.isort]\nforce-sort-within-sections = true\n"},
            "import attr\nfrom click import echo\nimport torch\n",
            "import attr\nfrom click import echo\nimport compatfn\nimport torch\n",
        ),
    ],
    ids=[
        "isort-default-section",
        "ruff-known-first-party",
        "not-a-subfolder",
        "isort-force-sort",
        "ruff-force-sort",
    ],
)
def test_the_import_goes_where_the_projects_isort_or_ruff_settings_put_it(
    tmp_path, settings, before, after
):
    path = _project(tmp_path, settings)
    assert add_import(cst.parse_module(before), "", "compatfn", path).code == after
