"""compatfn.migrate._imports: the added import lands where isort and ruff (``I``, default
settings) put it, so that a library's own import-order check stays green on migrated files."""

from __future__ import annotations

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


def test_vendored_module_gets_its_own_first_party_section():
    before = "import torch\n\nfrom . import utils\n"
    new = add_import(cst.parse_module(before), "mylib", "_compat", "mylib/fns.py").code
    assert new == "import torch\n\nfrom mylib import _compat\n\nfrom . import utils\n"
