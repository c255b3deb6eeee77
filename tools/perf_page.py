"""Render ``benchmarks/results/*.json`` into the tables and plots of the docs' Performance page.

Every benchmark script writes ``benchmarks/results/<benchmark>-torch<X.Y.Z>[-<device>].json``::

    {"meta": {"benchmark": "overhead", "title": "...", "command": "python benchmarks/...",
              "date": "2026-12-01", "torch": "2.15.0", "python": "3.13.0", "device": "cpu"},
     "columns": ["call", "fwd µs", "fwd ratio", ...],
     "rows": [["compatfn (positional)", 5.9, 0.23, ...], ...]}

The first column is a label, the others numbers or ``null``; columns whose name ends in "ratio"
are plotted (one SVG per file, drawn here: no plotting library needed). ``meta`` may also hold a
``note`` shown under the table. The docs build (``docs/conf.py``) calls :func:`write`;
``python -m tools.perf_page [RESULTS] [OUT]`` does the same by hand. Standard library only.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

Cell = Union[str, int, float, None]

#: The keys every result's ``meta`` must have.
META_KEYS = ("benchmark", "title", "command", "date", "torch", "python", "device")
#: Bar colours of the plotted ratio columns, in column order.
COLOURS = ("#3b6ea8", "#d9822b", "#4f9a55", "#a8423b", "#7d5ba6", "#8c8c8c")


@dataclass(frozen=True)
class Result:
    """One benchmark run, as its JSON file holds it."""

    path: Path
    meta: Dict[str, str]
    columns: List[str]
    rows: List[List[Cell]]

    @property
    def ratio_columns(self) -> List[int]:
        """Indices of the columns that are plotted (their name ends in "ratio")."""
        return [i for i, name in enumerate(self.columns) if i and name.endswith("ratio")]

    @property
    def release(self) -> Tuple[int, ...]:
        """The torch release as integers, for sorting: ``(2, 15, 0)``."""
        numbers = self.meta["torch"].split("+")[0].split(".")
        return tuple(int(part) for part in numbers if part.isdigit())


def load(path: Path) -> Result:
    """Read and check one result file; ``ValueError`` names the file and what is wrong."""
    data = json.loads(path.read_text(encoding="utf-8"))
    meta, columns, rows = data.get("meta"), data.get("columns"), data.get("rows")
    if not isinstance(meta, dict) or not isinstance(columns, list) or not isinstance(rows, list):
        raise ValueError(f"{path}: needs the keys meta (object), columns and rows (lists)")
    missing = [key for key in META_KEYS if key not in meta]
    if missing:
        raise ValueError(f"{path}: meta lacks {', '.join(missing)}")
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"{path}: row {row!r} has {len(row)} cells for {len(columns)} columns")
        if any(cell is not None and not isinstance(cell, (int, float)) for cell in row[1:]):
            raise ValueError(f"{path}: row {row!r}: cells after the label must be numbers or null")
    return Result(path, {k: str(v) for k, v in meta.items()}, [str(c) for c in columns], rows)


def number(cell: Cell) -> str:
    """A table cell: ``null`` as n/a, numbers to a precision that reads well."""
    if cell is None:
        return "n/a"
    if isinstance(cell, (str, int)):
        return str(cell)
    if abs(cell) >= 100:
        return f"{cell:.0f}"
    return f"{cell:.1f}" if abs(cell) >= 10 else f"{cell:.2f}"


def table(result: Result) -> str:
    """The result as a Markdown table."""
    lines = ["| " + " | ".join(result.columns) + " |", "|" + "---|" * len(result.columns)]
    for row in result.rows:
        cells = [str(row[0]).replace("|", "\\|")] + [number(cell) for cell in row[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def svg(result: Result) -> str:
    """Horizontal bars of the ratio columns, one group per row, a line at 1.0 (parity)."""
    plotted = result.ratio_columns
    longest = max((len(str(row[0])) for row in result.rows), default=10)
    label_w, plot_w, bar_h, gap, top = int(6.5 * longest) + 16, 380, 9, 8, 34
    values = [c for row in result.rows for c in (row[i] for i in plotted) if c is not None]
    scale_max = max([1.0, *(float(v) for v in values)]) * 1.1
    group_h = bar_h * len(plotted) + gap
    height = top + group_h * len(result.rows) + 20
    width = label_w + plot_w + 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for n, column in enumerate(plotted):  # legend
        x = label_w + 130 * n
        out.append(f'<rect x="{x}" y="8" width="10" height="10" fill="{COLOURS[n % 6]}"/>')
        out.append(f'<text x="{x + 14}" y="17">{html.escape(result.columns[column])}</text>')
    for r, row in enumerate(result.rows):
        y0 = top + group_h * r
        label = html.escape(str(row[0]))
        middle = y0 + group_h / 2
        out.append(f'<text x="{label_w - 6}" y="{middle}" text-anchor="end">{label}</text>')
        for n, column in enumerate(plotted):
            value = row[column]
            if value is None:
                continue
            w = plot_w * float(value) / scale_max
            y = y0 + bar_h * n
            colour = COLOURS[n % 6]
            out.append(
                f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 1}" '
                f'fill="{colour}"/>'
            )
            out.append(
                f'<text x="{label_w + w + 3:.1f}" y="{y + bar_h - 1}" font-size="9">'
                f"{number(value)}</text>"
            )
    one = label_w + plot_w / scale_max
    out.append(
        f'<line x1="{one:.1f}" y1="{top - 4}" x2="{one:.1f}" y2="{height - 16}" stroke="black" '
        'stroke-dasharray="3,3"/>'
    )
    out.append(f'<text x="{one:.1f}" y="{height - 4}" text-anchor="middle">1.0</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def section(result: Result, image: Optional[str]) -> str:
    """One result: heading, command and date, table, note, plot."""
    meta = result.meta
    parts = [
        f"### torch {meta['torch']}, Python {meta['python']}, {meta['device']}\n",
        f"`{meta['command']}`, run on {meta['date']}.\n",
        table(result),
    ]
    if meta.get("note"):
        parts.append(meta["note"] + "\n")
    if image:
        parts.append(f"![{meta['title']}: ratios, torch {meta['torch']}]({image})\n")
    return "\n".join(parts)


def render(results: Sequence[Result], image_dir: str = "perf") -> str:
    """The Markdown of every benchmark, grouped by benchmark, newest torch first in each."""
    if not results:
        return "No benchmark results yet: run the benchmark scripts (see above).\n"
    groups: Dict[str, List[Result]] = {}
    for result in results:
        groups.setdefault(result.meta["benchmark"], []).append(result)
    parts = []
    for name in sorted(groups):
        runs = sorted(groups[name], key=lambda r: (r.release, r.meta["device"]), reverse=True)
        parts.append(f"## {runs[0].meta['title']}\n")
        for run in runs:
            image = f"{image_dir}/{run.path.stem}.svg" if run.ratio_columns else None
            parts.append(section(run, image))
    return "\n".join(parts)


def write(results_dir: Path, out_dir: Path) -> Path:
    """Write ``out_dir/performance.md`` and ``out_dir/perf/<result>.svg``; return the page."""
    results = [load(path) for path in sorted(results_dir.glob("*.json"))]
    plots = out_dir / "perf"
    plots.mkdir(parents=True, exist_ok=True)
    for result in results:
        if result.ratio_columns:
            (plots / f"{result.path.stem}.svg").write_text(svg(result), encoding="utf-8")
    page = out_dir / "performance.md"
    page.write_text(render(results), encoding="utf-8")
    return page


def main(argv: Optional[Sequence[str]] = None) -> int:
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("results", nargs="?", type=Path, default=root / "benchmarks" / "results")
    parser.add_argument("out", nargs="?", type=Path, default=root / "docs" / "_generated")
    args = parser.parse_args(argv)
    print(f"wrote {write(args.results, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
