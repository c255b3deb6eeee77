"""Run ``compatfn migrate`` on real libraries and their own tests, original against migrated.

The libraries' code never enters this repository: unpack their sdists (``pip download --no-deps
--no-binary :all: NAME==VERSION``) into a scratch folder, then::

    python -m tools.real_corpus SCRATCH --python /path/venv-113/bin/python \\
        --python /path/venv-213/bin/python

Each Python needs torch, pytest and the libraries' test dependencies, and libcst; compatfn is
taken from this checkout's ``src/``. For every library the script copies the sdist twice
(``SCRATCH/work/<lib>/original`` and ``.../migrated``), migrates the second copy with
``--write``, checks that a second run changes nothing, runs the library's tests that exercise
its Functions on both copies with every Python (no ``-x``: every test runs; JUnit XML per run in
``SCRATCH/work/<lib>/junit-<copy>-torch<X>.xml``), compares the outcomes test by test, and prints a
Markdown table (and writes it as JSON to ``SCRATCH/work/real_corpus.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

SRC = [Path(__file__).resolve().parent.parent / "src"]


@dataclass(frozen=True)
class Library:
    """One sdist: its folder name, the package to migrate and the tests to run (pytest args)."""

    name: str
    version: str
    folder: str
    package: str
    tests: Tuple[str, ...]


LIBRARIES = (
    # test/functions never calls SqrtInvMatmul; test/operators' sqrt_inv_matmul tests do (the
    # whole of test/operators takes over 20 minutes a run here).
    Library(
        "linear_operator",
        "0.6.1",
        "linear_operator-0.6.1",
        "linear_operator",
        ("test/functions", "test/operators", "-k", "functions or sqrt_inv_matmul"),
    ),
    Library(
        "memory-efficient-attention-pytorch",
        "0.1.6",
        "memory-efficient-attention-pytorch-0.1.6",
        "memory_efficient_attention_pytorch",
        ("tests/test.py",),
    ),
    Library(
        "pytorch_wavelets",
        "1.3.0",
        "pytorch_wavelets-1.3.0",
        "pytorch_wavelets",
        ("tests",),
    ),
    Library("sparsemax", "0.1.9", "sparsemax-0.1.9", "sparsemax", ("tests/test_sparsemax.py",)),
    Library(
        "torch-struct",
        "0.5",
        "torch_struct-0.5",
        "torch_struct",
        ("torch_struct/test_algorithms.py", "-k", "simple or sparse_max or hmm"),
    ),
    Library(
        "torchkbnufft", "1.5.2", "torchkbnufft-1.5.2", "torchkbnufft", ("tests/test_interp.py",)
    ),
    # The sdist lacks tests/__init__.py, utils.py and problems.py: copy them from the v0.2.6 tag
    # (github.com/google-research/torchsde), whose torchsde/ equals the sdist's. The whole file
    # takes over 10 minutes a run here: its basic tests and the coarse reversible Heun ones.
    Library(
        "torchsde",
        "0.2.6",
        "torchsde-0.2.6",
        "torchsde",
        ("tests/test_adjoint.py", "-k", "test_basic or 0.125"),
    ),
    # The sdist has no tests: copy tests/ of the commit whose torchdiffeq/ equals the sdist's
    # (github.com/rtqichen/torchdiffeq a88aac5, "upd version") into the unpacked folder.
    Library(
        "torchdiffeq",
        "0.2.5",
        "torchdiffeq-0.2.5",
        "torchdiffeq",
        tuple(f"tests/{n}_tests.py" for n in ("gradient", "event", "api")),
    ),
    # The second run, on libraries chosen after the codemod's first real corpus.
    # entmax's sdist cannot be built without torch: its tests are those of the v1.3 tag of
    # github.com/deep-spin/entmax (`git archive v1.3`), unpacked as entmax-1.3.
    # test_losses' gradchecks take minutes per test on a shared 2-core machine: one of its four
    # (reduction, ignore_index) rows runs, for every loss Function.
    Library(
        "entmax",
        "1.3",
        "entmax-1.3",
        "entmax",
        (
            "entmax/test_topk.py",
            "entmax/test_mask.py",
            "entmax/test_losses.py",
            "-k",
            "not test_loss or elementwise_mean-False",
        ),
    ),
    Library(
        "gpytorch",
        "1.15.2",
        "gpytorch-1.15.2",
        "gpytorch",
        tuple(
            f"test/variational/test_{n}.py"
            for n in (
                "natural_variational_distribution",
                "ciq_variational_strategy",
                "large_batch_variational_strategy",
                "variational_strategy",
            )
        )
        + tuple(
            f"test/functions/test_{n}.py"
            for n in ("rbf_covariance", "matern_covariance", "log_normal_cdf")
        )
        + ("test/kernels/test_rbf_kernel.py", "test/kernels/test_matern_kernel.py"),
    ),
    Library(
        "memcnn",
        "1.5.2",
        "memcnn-1.5.2",
        "memcnn",
        tuple(f"memcnn/models/tests/test_{n}.py" for n in ("couplings", "revop", "multi")),
    ),
    Library("qpth", "0.0.18", "qpth-0.0.18", "qpth", ()),
    Library("revlib", "1.7.2", "revlib-1.7.2", "revlib", ("tests",)),
    Library(
        "torchsparsegradutils",
        "0.2.7",
        "torchsparsegradutils-0.2.7",
        "torchsparsegradutils",
        tuple(
            f"torchsparsegradutils/tests/test_{n}.py"
            for n in ("sparse_solve", "sparse_matmul", "sparse_lstsq", "jax_sparse_solve")
        ),
    ),
)


def _env(root: Path) -> Dict[str, str]:
    path = f"{root}{os.pathsep}{SRC[0]}"
    return {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore"}


def migrate(python: str, root: Path, package: str, mode: str) -> Tuple[int, str]:
    """(exit status, stderr) of ``compatfn migrate --<mode>`` on ``root/package``."""
    done = subprocess.run(
        [python, "-m", "compatfn", "migrate", f"--{mode}", package],
        cwd=root,
        env=_env(root),
        capture_output=True,
        text=True,
    )
    return done.returncode, done.stderr


def counts(stderr: str) -> Tuple[int, List[str]]:
    """(migrated, refusal lines) from the command's stderr."""
    last = re.search(r"migrated (\d+) class", stderr)
    refusals = [line for line in stderr.splitlines() if re.match(r"^\S+:\d+: \w+: ", line)]
    return int(last.group(1)) if last else 0, refusals


def outcomes(junit: Path) -> Dict[str, str]:
    """``{test id: passed | failed | error | skipped}`` from a JUnit XML file."""
    found = {}
    for case in ET.parse(junit).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(
            kinds[0] if kinds else "", "passed"
        )
        found[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return found


def run_tests(python: str, root: Path, tests: Sequence[str], junit: Path) -> Dict[str, str]:
    """Every test's outcome for ``tests`` run in ``root`` (all of them: no ``-x``)."""
    junit.unlink(missing_ok=True)
    subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests],
        cwd=root,
        env=_env(root),
        capture_output=True,
        text=True,
    )
    return outcomes(junit) if junit.exists() else {"(no JUnit XML written)": "error"}


def compare(original: Dict[str, str], migrated: Dict[str, str]) -> Dict[str, object]:
    """Counts of both runs and every test whose outcome differs (or that ran in one only)."""

    def tally(found: Dict[str, str]) -> Dict[str, int]:
        return {kind: list(found.values()).count(kind) for kind in sorted(set(found.values()))}

    differences = [
        f"{test}: {original.get(test, 'not run')} -> {migrated.get(test, 'not run')}"
        for test in sorted(set(original) | set(migrated))
        if original.get(test) != migrated.get(test)
    ]
    return {"original": tally(original), "migrated": tally(migrated), "differences": differences}


def run_library(scratch: Path, library: Library, pythons: Sequence[str]) -> Dict[str, object]:
    work = scratch / "work" / library.name
    shutil.rmtree(work, ignore_errors=True)
    for copy in ("original", "migrated"):
        shutil.copytree(scratch / library.folder, work / copy)
    _, stderr = migrate(pythons[0], work / "migrated", library.package, "write")
    migrated, refusals = counts(stderr)
    again, _ = migrate(pythons[0], work / "migrated", library.package, "check")
    row: Dict[str, object] = {
        "library": library.name,
        "version": library.version,
        "found": migrated + len(refusals),
        "migrated": migrated,
        "refused": [line.split(": ", 1)[1] for line in refusals],
        "second run changes nothing": again == 0,
    }
    if not migrated:
        row["tests"] = "not run: nothing migrated, the copies are identical"
        return row
    for python in pythons:
        version = subprocess.run(
            [python, "-c", "import torch; print(torch.__version__)"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        tag = version.split("+")[0]
        found = [
            run_tests(python, work / copy, library.tests, work / f"junit-{copy}-torch{tag}.xml")
            for copy in ("original", "migrated")
        ]
        row[f"torch {version}"] = compare(*found)
    return row


def _outcome(results: object) -> str:
    """``N passed`` on both copies, or the two counts when they differ."""
    if not isinstance(results, dict):
        return str(results)
    original, migrated = results["original"], results["migrated"]
    shown = ", ".join(f"{n} {kind}" for kind, n in sorted(original.items()))
    if not results.get("differences"):
        return f"identical test by test: {shown}"
    return f"{original} vs {migrated}; differ: {results['differences']}"


def table(rows: Sequence[Dict[str, object]]) -> str:
    """The Markdown table of the docs: library, version, counts, test outcome per torch."""
    torches = sorted({key for row in rows for key in row if key.startswith("torch ")})
    head = ["library", "version", "Functions", "migrated", "refused (reason)", *torches]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        refused = row["refused"]
        assert isinstance(refused, list)
        reasons = "; ".join(refused) or "none"
        cells = [row["library"], row["version"], row["found"], row["migrated"], reasons]
        cells += [_outcome(row.get(t, row.get("tests", ""))) for t in torches]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scratch", type=Path, help="the folder holding the unpacked sdists")
    parser.add_argument("--python", action="append", default=[], help="an interpreter")
    parser.add_argument("--only", action="append", help="run only these libraries")
    parser.add_argument("--table", action="store_true", help="print the table of the last run")
    parser.add_argument("--src", type=Path, help="take compatfn from here (default: ./src)")
    args = parser.parse_args(list(argv) or None)
    if args.src:
        SRC[0] = args.src.resolve()
    saved = args.scratch / "work" / "real_corpus.json"
    if args.table:
        print(table(json.loads(saved.read_text())))
        return 0
    rows: List[Dict[str, object]] = (
        json.loads(saved.read_text()) if args.only and saved.exists() else []
    )
    (args.scratch / "work").mkdir(exist_ok=True)
    for library in LIBRARIES:
        if args.only and library.name not in args.only:
            continue
        row = run_library(args.scratch, library, args.python)
        rows = [r for r in rows if r["library"] != library.name] + [row]
        rows.sort(key=lambda r: str(r["library"]))
        print(json.dumps(row), flush=True)
        saved.write_text(json.dumps(rows, indent=2))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
