"""Reference ReLU suite vs torch: fwd+bwd time and bytes saved for backward, side by side.

Usage (what ``nox -s bench-X-Y`` runs; the docs' Performance page shows the results)::

    python benchmarks/run.py                      # 2^10 ... 2^24 fp32, CPU (+ CUDA if present)
    python benchmarks/run.py --quick              # small sizes, short runs (a smoke test)
    python benchmarks/run.py --sizes 16,20,24 --plot out.png

Each row times ``torch.autograd.grad(f(x), x, g)`` with ``torch.utils.benchmark.Timer``; every
candidate of a size is measured in the same process, in alternating rounds, and the best median
is kept (the machine is noisy). Ratios are against ``torch.relu`` (``torch.relu_`` for the in-place
variant, ``clamp`` for the clipped one). Prints a plain table and writes
``benchmarks/results/relu-torch<X.Y.Z>-<device>.json`` (see ``results_json.py``); ``--plot PATH``
also draws a PNG with matplotlib. Also runs ``benchmarks/overhead.py`` with ``--overhead``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import results_json  # next to this script
import torch
from torch.utils.benchmark import Timer

import compatfn
import compatfn.relu as R
from compatfn.testing import saved_bytes

TARGETS = {  # name -> (max time ratio, max saved-bytes ratio) at 2^24, per device type
    "cpu": {"MaskReLU": (2.0, 0.25), "BitReLU": (2.5, 0.04)},
    "cuda": {"MaskReLU": (1.3, 0.25), "BitReLU": (1.6, 0.04)},
}


def _candidates() -> List[Tuple[str, str, Callable[..., Any], bool]]:
    """(name, baseline name, function, in-place?)."""
    return [
        ("torch.relu", "torch.relu", torch.relu, False),
        ("ReLU", "torch.relu", R.relu, False),
        ("MaskReLU", "torch.relu", R.mask_relu, False),
        ("BitReLU", "torch.relu", R.bit_relu, False),
        ("torch.relu_", "torch.relu_", torch.relu_, True),
        ("InplaceReLU", "torch.relu_", R.inplace_relu, True),
        ("clamp", "clamp", lambda t: t.clamp(0.0, 1.0), False),
        ("ClippedReLU", "clamp", lambda t: R.clipped_relu(t, 1.0), False),
    ]


def _time(
    fn: Callable[..., Any], inplace: bool, x: torch.Tensor, g: torch.Tensor, min_run_time: float
) -> float:
    stmt = "grad(fn(x.clone()), x, g)" if inplace else "grad(fn(x), x, g)"
    timer = Timer(stmt, globals={"grad": torch.autograd.grad, "fn": fn, "x": x, "g": g})
    return timer.blocked_autorange(min_run_time=min_run_time).median


def _saved(fn: Callable[..., Any], inplace: bool, x: torch.Tensor) -> Optional[int]:
    try:
        if inplace:
            return saved_bytes(lambda t: fn(t.clone()), x)  # the clone saves nothing
        return saved_bytes(fn, x)
    except RuntimeError:  # torch < 1.10: built-in ops' saved tensors are not measurable
        return None


def run(
    sizes: List[int], devices: List[str], rounds: int, min_run_time: float
) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    cands = _candidates()
    for device in devices:
        for exp in sizes:
            n = 1 << exp
            gen = torch.Generator().manual_seed(exp)
            x = torch.randn(n, generator=gen).to(device).requires_grad_()
            g = torch.randn(n, generator=gen).to(device)
            best: Dict[str, float] = {}
            for _ in range(rounds):
                for name, _, fn, inplace in cands:
                    t = _time(fn, inplace, x, g, min_run_time)
                    best[name] = min(best.get(name, float("inf")), t)
            for name, base, fn, inplace in cands:
                sb = _saved(fn, inplace, x)
                sb_base = _saved(dict((c[0], c[2]) for c in cands)[base], inplace, x)
                rows.append(
                    {
                        "device": device,
                        "log2_size": exp,
                        "size": n,
                        "name": name,
                        "baseline": base,
                        "time_s": best[name],
                        "time_ratio": best[name] / best[base],
                        "saved_bytes": sb,
                        "saved_ratio": (sb / sb_base) if sb is not None and sb_base else None,
                    }
                )
            print(f"# done {device} 2^{exp}", file=sys.stderr, flush=True)
    return rows


#: The columns of the JSON result (the label is ``2^<size> <function> vs <baseline>``).
COLUMNS = ["function", "elements", "fwd+bwd ms", "time ratio", "saved bytes", "bytes ratio"]
NOTE = (
    "fwd+bwd is ``torch.autograd.grad(f(x), x, g)`` on float32 inputs; each ratio compares a "
    "function with its torch baseline at the same size, measured side by side in the same "
    "process (best median of {rounds} alternating rounds, {threads} threads). Saved bytes are "
    "what one call keeps alive for backward (``compatfn.testing.saved_bytes``; empty where this "
    "torch cannot measure a built-in op). Read the ratios; absolute times depend on the machine."
)


def table_rows(rows: List[Dict[str, Any]]) -> List[List[Any]]:
    """The rows of one device for the JSON result; the baselines themselves are left out."""
    return [
        [
            f"2^{r['log2_size']} {r['name']} vs {r['baseline']}",
            r["size"],
            round(r["time_s"] * 1e3, 4),
            round(r["time_ratio"], 3),
            r["saved_bytes"],
            None if r["saved_ratio"] is None else round(r["saved_ratio"], 4),
        ]
        for r in rows
        if r["name"] != r["baseline"]
    ]


def _table(rows: List[Dict[str, Any]]) -> str:
    head = (
        f"{'device':6} {'size':>6} {'function':12} {'vs':12} {'fwd+bwd ms':>11} "
        f"{'time x':>7} {'saved bytes':>12} {'bytes x':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        sb = "n/a" if r["saved_bytes"] is None else str(r["saved_bytes"])
        sr = "n/a" if r["saved_ratio"] is None else f"{r['saved_ratio']:.4f}"
        lines.append(
            f"{r['device']:6} {'2^' + str(r['log2_size']):>6} {r['name']:12} "
            f"{r['baseline']:12} {r['time_s'] * 1e3:11.3f} {r['time_ratio']:7.2f} "
            f"{sb:>12} {sr:>8}"
        )
    return "\n".join(lines)


def _verdicts(rows: List[Dict[str, Any]]) -> List[str]:
    out = []
    for r in rows:
        target = TARGETS.get(r["device"].split(":")[0], {}).get(r["name"])
        if target is None or r["log2_size"] != 24:
            continue
        t_ok = r["time_ratio"] <= target[0]
        s_ok = r["saved_ratio"] is None or r["saved_ratio"] <= target[1]
        out.append(
            f"target {r['device']} {r['name']} at 2^24: time {r['time_ratio']:.2f}x "
            f"(<= {target[0]}x: {'ok' if t_ok else 'MISSED'}), saved bytes "
            f"{'n/a' if r['saved_ratio'] is None else format(r['saved_ratio'], '.4f')}x "
            f"(<= {target[1]}x: {'ok' if s_ok else 'MISSED'})"
        )
    return out


def _plot(rows: List[Dict[str, Any]], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    devices = sorted({r["device"] for r in rows})
    fig, axes = plt.subplots(len(devices), 2, figsize=(11, 4 * len(devices)), squeeze=False)
    for i, device in enumerate(devices):
        for name in dict.fromkeys(r["name"] for r in rows):
            sel = [r for r in rows if r["device"] == device and r["name"] == name]
            axes[i][0].plot(
                [r["size"] for r in sel], [r["time_s"] * 1e3 for r in sel], marker="o", label=name
            )
            if all(r["saved_bytes"] is not None for r in sel):
                axes[i][1].plot(
                    [r["size"] for r in sel],
                    [max(r["saved_bytes"], 1) for r in sel],
                    marker="o",
                    label=name,
                )
        for ax, label in zip(axes[i], ("fwd+bwd time (ms)", "bytes saved for backward")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("elements (fp32)")
            ax.set_ylabel(label)
            ax.set_title(f"{device}: {label}")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes",
        default="10,12,14,16,18,20,22,24",
        help="comma-separated log2 sizes (default: 10,12,...,24)",
    )
    p.add_argument("--quick", action="store_true", help="sizes 10,14,18 and short runs")
    p.add_argument("--device", default=None, help="cpu, cuda or cpu,cuda (default: all present)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per size (best kept)")
    p.add_argument("--min-run-time", type=float, default=0.5, help="seconds per measurement")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument(
        "--results",
        default=results_json.RESULTS,
        help="folder for the JSON results, one per device (default: benchmarks/results; '' "
        "writes none)",
    )
    p.add_argument("--plot", default=None, help="also write a PNG plot here (needs matplotlib)")
    p.add_argument("--overhead", action="store_true", help="also run benchmarks/overhead.py")
    args = p.parse_args(argv)

    sizes = [10, 14, 18] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    rounds, mrt = (1, 0.05) if args.quick else (args.rounds, args.min_run_time)
    devices = (
        args.device.split(",")
        if args.device
        else (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, compatfn {compatfn.__version__}, Python "
        f"{platform.python_version()}, {torch.get_num_threads()} threads, devices {devices}, "
        f"path: {compatfn.mode(R.ReLU)}"
    )
    print(
        f"command: python benchmarks/run.py {' '.join(argv if argv is not None else sys.argv[1:])}"
    )
    rows = run(sizes, devices, rounds, mrt)
    print(_table(rows))
    for line in _verdicts(rows):
        print(line)
    if args.results:
        for device in devices:
            path = results_json.write(
                "relu",
                "Reference ReLU suite against torch: fwd+bwd time and bytes saved for backward",
                results_json.command("run.py", argv),
                COLUMNS,
                table_rows([r for r in rows if r["device"] == device]),
                device,
                note=NOTE.format(threads=torch.get_num_threads(), rounds=rounds),
                results=args.results,
            )
            print(f"wrote {path}")
    if args.plot:
        drawn = _plot(rows, args.plot)
        print(f"wrote {args.plot}" if drawn else "matplotlib not installed: no plot")
    if args.overhead:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import overhead

        where = [] if args.results == results_json.RESULTS else ["--results", args.results]
        overhead.main([*(["--quick"] if args.quick else []), *where])
    return 0


if __name__ == "__main__":
    sys.exit(main())
