"""Every ```python block of README.md and docs/*.md runs on its own, as written, on this torch.

Each block runs on its own (a subprocess, in an empty folder, with an empty ``__main__``), so it
must import and define everything it uses. A block that needs something a torch lacks says so on the
line before it, in an HTML comment that the rendered page does not show::

    <!-- requires: torch>=2.0, native -->

Requirements: ``torch>=X.Y`` / ``torch<X.Y``, ``cuda`` (a usable GPU), ``native`` (compatfn's native
path: ``setup_context`` exists and ``COMPATFN_LEGACY`` does not force the legacy path) and
``import:NAME`` (an importable module). Where one is not met the block still runs and must fail --
so a marker that is no longer needed is reported -- and the test is then skipped with the reason.

By default that subprocess is forked from a helper interpreter that has imported torch and nothing
else (see :data:`ZYGOTE`), which saves every block the seconds torch takes to import; with
``COMPATFN_DOCS_FRESH=1`` (what ``nox -s docs`` sets) each block gets a brand-new interpreter
instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import select
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest
import torch

from compatfn import core

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OPEN_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*requires:\s*(?P<requires>.*?)\s*-->\s*$")
PYTHON = {"python", "py", "python3"}
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    """The line of the opening fence (1-based); ``end`` is the closing fence's."""
    end: int
    language: str
    source: str
    requires: Tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> List[Block]:
    """The fenced code blocks of a Markdown page, with the requirement marker before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: List[Block] = []
    i = 0
    while i < len(lines):
        opening = OPEN_FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        closing = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), len(lines))
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        info = (opening.group("info").split() or [""])[0].lower()
        found.append(Block(page, i + 1, end + 1, info, body + "\n", _marker(lines, i)))
        i = end + 1
    return found


def _marker(lines: List[str], at: int) -> Tuple[str, ...]:
    """The requirements of the marker on the last non-blank line before line ``at``, if any."""
    before = next((line for line in reversed(lines[:at]) if line.strip()), "")
    marker = MARKER.match(before)
    if marker is None:
        return ()
    return tuple(part.strip() for part in marker.group("requires").split(",") if part.strip())


def python_blocks() -> List[Block]:
    return [b for page in PAGES for b in blocks(page) if b.language in PYTHON]


def _release(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def unmet(requirement: str) -> Optional[str]:
    """Why ``requirement`` is not met here, or None when it is; ValueError for an unknown one."""
    version = re.fullmatch(r"torch\s*(>=|<)\s*([\d.]+)", requirement)
    if version is not None:
        op, wanted = version.groups()
        have = _release(str(torch.__version__))
        ok = have >= _release(wanted) if op == ">=" else have < _release(wanted)
        return None if ok else f"torch {torch.__version__} here"
    if requirement == "cuda":
        return None if torch.cuda.is_available() else "no usable GPU here"
    if requirement == "native":
        if not core._HAS_SETUP_CONTEXT:
            return f"torch {torch.__version__} has no setup_context (legacy path)"
        return "COMPATFN_LEGACY forces the legacy path" if core._env_forces_legacy() else None
    if requirement.startswith("import:"):
        name = requirement.split(":", 1)[1]
        return None if importlib.util.find_spec(name) else f"{name} is not installed here"
    raise ValueError(f"unknown requirement {requirement!r}: see tests/test_docs.py")


#: The helper interpreter: imports torch, then for each line ``<script>\t<output file>`` on stdin
#: forks a child that runs the script as ``__main__`` (its own folder as working directory, stdout
#: and stderr into the output file) and prints the child's exit status.
ZYGOTE = r"""
import os, runpy, sys, traceback
import torch

def child(script, out):
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(os.path.dirname(script))
    sys.argv = [script]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

while True:
    line = sys.stdin.readline()
    if not line:
        break
    script, out = line.rstrip("\n").split("\t")
    pid = os.fork()
    if pid == 0:
        child(script, out)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status), flush=True)
"""


def _environment() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Optional[subprocess.Popen]]:
    """The helper interpreter, or None where each block gets a fresh interpreter."""
    if os.environ.get("COMPATFN_DOCS_FRESH", "") not in ("", "0") or not hasattr(os, "fork"):
        yield None
        return
    process = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp_path_factory.mktemp("zygote"),
        env=_environment(),
        text=True,
    )
    yield process
    process.stdin.close()  # type: ignore[union-attr]
    process.wait(timeout=60)


def run(block: Block, folder: Path, zygote: Optional[subprocess.Popen]) -> Tuple[int, str]:
    """Run ``block`` as a script in ``folder``; return its exit status and output."""
    script = folder / "block.py"
    script.write_text(f"# {block.where}\n" + block.source, encoding="utf-8")
    if zygote is None:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=folder,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        return done.returncode, done.stdout + done.stderr
    out = folder / "output.txt"
    zygote.stdin.write(f"{script}\t{out}\n")  # type: ignore[union-attr]
    zygote.stdin.flush()  # type: ignore[union-attr]
    ready, _, _ = select.select([zygote.stdout], [], [], TIMEOUT_S)
    if not ready:
        zygote.kill()
        pytest.fail(f"{block.where} ran longer than {TIMEOUT_S} s")
    status = zygote.stdout.readline()  # type: ignore[union-attr]
    assert status.strip(), f"the helper interpreter died running {block.where}"
    return int(status), out.read_text(encoding="utf-8", errors="replace")


def test_the_pages_have_python_examples():
    assert (ROOT / "docs" / "index.md").exists(), "docs/ is missing: run from a checkout or sdist"
    assert len(python_blocks()) >= 8


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.where)
def test_example_runs_on_its_own(
    block: Block, tmp_path: Path, zygote: Optional[subprocess.Popen]
) -> None:
    reasons = [f"{req}: {why}" for req in block.requires for why in [unmet(req)] if why]
    status, output = run(block, tmp_path, zygote)
    output = output[-3000:]
    if reasons:
        assert status != 0, (
            f"{block.where} is marked `requires: {', '.join(block.requires)}` but runs here "
            f"({'; '.join(reasons)}): drop the requirement that is no longer needed"
        )
        error = (output.strip().splitlines() or ["no output"])[-1]
        pytest.skip(
            f"{block.where} needs {'; '.join(reasons)} (checked: here it fails with {error})"
        )
    assert status == 0, f"{block.where} failed:\n{output}"


def test_no_example_needs_numpy():
    """torch does not install NumPy, so an example that imports it fails on a plain install."""
    offenders = [
        b.where
        for b in python_blocks()
        if re.search(r"^\s*(import numpy|from numpy)", b.source, re.M)
    ]
    assert not offenders, f"examples that import NumPy: {offenders}"


def test_every_marker_stands_before_a_python_block():
    """A requirement marker anywhere else would be silently ignored."""
    stray = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        inside = {n for b in blocks(page) for n in range(b.line, b.end + 1)}
        for number, line in enumerate(lines, 1):
            if number in inside or not MARKER.match(line):
                continue
            following = next((text for text in lines[number:] if text.strip()), "")
            fence = OPEN_FENCE.match(following)
            if fence is None or (fence.group("info").split() or [""])[0].lower() not in PYTHON:
                stray.append(f"{page.relative_to(ROOT)}:{number}")
    assert not stray, f"requirement markers not followed by a ```python block: {stray}"


@pytest.mark.parametrize("requirement", ["torch>=1.8", "torch<99.0", "import:torch"])
def test_requirements_that_hold_everywhere(requirement: str):
    assert unmet(requirement) is None


def test_unknown_requirement_is_an_error():
    with pytest.raises(ValueError, match="unknown requirement 'gpu'"):
        unmet("gpu")


def test_blocks_are_found_with_their_markers(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent(
            """\
            Text.

            <!-- requires: torch>=2.0, native -->
            ```python
            print(1)
            ```

            1. In a list:
               ```python
               print(2)
               ```
            ````text
            ```python
            not a block
            ```
            ````
            ```` ```python ```` in a sentence is not a fence either.
            """
        )
    )
    found = blocks(page)
    assert [(b.language, b.source, b.requires) for b in found] == [
        ("python", "print(1)\n", ("torch>=2.0", "native")),
        ("python", "print(2)\n", ()),
        ("text", "```python\nnot a block\n```\n", ()),
    ]
