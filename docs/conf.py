"""Sphinx configuration of compatfn's documentation (``nox -s docs`` builds it).

Pages are MyST Markdown; the API page is autodoc of the installed package; the Performance page
includes tables and plots that ``tools/perf_page.py`` renders from ``benchmarks/results/*.json``
at the start of every build (into ``docs/_generated/``, never committed).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

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
