"""Sphinx configuration of compatfn's documentation (``nox -s docs`` builds it).

Pages are MyST Markdown; the API page is autodoc of the installed package; the Performance page
includes tables and plots that ``tools/perf_page.py`` renders from ``benchmarks/results/*.json``
at the start of every build (into ``docs/_generated/``, never committed).
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path
from typing import Any

# torch warns at import where NumPy is missing; the docs never need NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository's tools package (perf_page)

from tools import perf_page  # noqa: E402

import compatfn  # noqa: E402

project = "compatfn"
author = "compatfn developers"
copyright = "compatfn developers"
release = version = compatfn.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "requirements.txt"]

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = False  # torch's own Function docstrings are not compatfn's API

html_theme = "furo"
html_title = f"compatfn {release}"

perf_page.write(ROOT / "benchmarks" / "results", Path(__file__).parent / "_generated")


#: Internal type variables in annotations -> what they stand for, as the API reference shows them.
USER_FACING_TYPES = {"_F": "type[torch.autograd.Function]"}
_INTERNAL = re.compile(r"(~compatfn\.core\.)?\b(" + "|".join(USER_FACING_TYPES) + r")\b")


def _user_facing_types(app: Any, domain: str, objtype: str, content: Any) -> None:
    """Show core's ``_F`` (the class being decorated) as what it is, in the signatures and in
    the type hints autodoc has merged into the description (priority 500: plain text there)."""
    from docutils import nodes

    for text in list(content.parent.findall(nodes.Text)):
        shown = _INTERNAL.sub(lambda m: USER_FACING_TYPES[m.group(2)], str(text))
        if shown != str(text):
            text.parent.replace(text, nodes.Text(shown))


def setup(app: Any) -> None:
    app.connect("object-description-transform", _user_facing_types, priority=600)
