"""compatfn.migrate._rules: the rules are written once; ``--help`` and docs/migrating.md show
them as they are."""

from __future__ import annotations

from pathlib import Path

from compatfn.migrate._rules import EXIT_STATUS, RULES

PAGE = Path(__file__).resolve().parent.parent / "docs" / "migrating.md"


def test_the_docs_page_shows_the_rules_and_exit_statuses_verbatim():
    page = PAGE.read_text(encoding="utf-8")
    assert f"```text\n{RULES}```" in page
    assert f"```text\n{EXIT_STATUS}```" in page


def test_importing_the_rules_needs_no_libcst():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['libcst'] = None\n"
        "from compatfn.migrate._rules import RULES; print(len(RULES) > 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout == "True\n", result.stderr
