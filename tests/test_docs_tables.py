"""Tables the prose of the docs quotes from benchmark results are those results.

``docs/custom-ops.md`` shows custom_op's instruction ratios for each torch measured; they must be
the ratios of ``benchmarks/results/custom_op_instructions-*.json`` (what ``python
benchmarks/custom_op.py --callgrind --write`` wrote), rounded to two places, so that rerunning the
benchmark without updating the page fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, Tuple

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "custom-ops.md"
RESULTS = ROOT / "benchmarks" / "results"

#: The page's name of a call -> the pattern of the benchmark's row label.
CALLS = {
    "`compatfn.custom_op`": r"compatfn\.custom_op \(\w+\)",
    "`compatfn.custom_op`, keyword call": r"compatfn\.custom_op \(\w+\), keyword",
    "torch's own `torch.library.custom_op`": r"torch\.library\.custom_op",
}
ROW = re.compile(r"^\| (?P<torch>\d+\.\d+\.\d+) \| (?P<call>[^|]+) \|(?P<ratios>( [\d.]+ \|){3})$")

Key = Tuple[str, str]


def _page_table() -> Dict[Key, Tuple[str, ...]]:
    rows = {}
    for line in PAGE.read_text().splitlines():
        match = ROW.match(line)
        if match:
            ratios = tuple(r.strip() for r in match["ratios"].split("|") if r.strip())
            rows[(match["torch"], match["call"].strip())] = ratios
    return rows


def _results() -> Dict[Key, Tuple[str, ...]]:
    rows = {}
    for path in sorted(RESULTS.glob("custom_op_instructions-torch*-cpu.json")):
        data = json.loads(path.read_text())
        torch_version = re.findall(r"-torch(\d+\.\d+\.\d+)", path.name)[0]
        columns = data["columns"]
        wanted = [columns.index(f"{phase} ratio") for phase in ("fwd", "fwd+bwd", "no grad")]
        for row in data["rows"]:
            for call, pattern in CALLS.items():
                if re.fullmatch(pattern, row[0]):
                    rows[(torch_version, call)] = tuple(f"{row[i]:.2f}" for i in wanted)
    return rows


def test_the_custom_op_ratio_table_is_the_stored_results() -> None:
    page, results = _page_table(), _results()
    assert results, f"no custom_op_instructions results in {RESULTS}"
    assert page == results
