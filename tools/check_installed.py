"""Run compatfn's whole test suite against the torch already installed in this Python.

Usage (from the repository root, with the Python whose torch you want to check)::

    python -m tools.check_installed OUTDIR            # the whole suite, native and legacy forced
    python -m tools.check_installed OUTDIR -- -k relu # arguments after -- go to pytest
    nox -s installed -- OUTDIR                        # the same, with the `python` on PATH

Nothing is downloaded and the environment is left as it was: compatfn is built from this checkout
with ``pip install --no-deps --no-index --no-build-isolation --target`` into a temporary folder
that goes first on ``PYTHONPATH`` (where pip or setuptools is missing, the package's files are
copied there instead, and the output says so). The command prints the torch it finds (version,
CUDA, GPU), runs pytest twice -- compatfn's native path and again with ``COMPATFN_LEGACY=1`` (once
only on torch 1.x, which has no native path) -- with the CUDA tests wherever a GPU is usable, and
writes into OUTDIR:

* ``junit-native.xml``, ``junit-legacy.xml``: pytest's JUnit XML;
* ``compatfn-native.json``, ``compatfn-legacy.json``: ``python -m compatfn --json``;
* ``check.json``: the torch, GPU and Python found, how compatfn was installed, each run's counts.

``nox -s report -- OUTDIR`` (or OUTDIR under ``reports/installed/``) puts the result into the
support table's CUDA column for that torch's row. A missing optional test dependency (hypothesis,
libcst) is a visible skip. Exit status 0 only when every run passed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]

#: What the probe prints: the torch, GPU and test tools this Python has, and where compatfn
#: imports from (the staged copy, or the check stops).
_PROBE = r"""
import importlib.util, json, platform, sys
import torch, compatfn
cuda = torch.cuda.is_available()
def has(name):
    return importlib.util.find_spec(name) is not None
print(json.dumps({
    "torch": str(torch.__version__),
    "torch_path": torch.__file__,
    "cuda_build": torch.version.cuda,
    "cuda": cuda,
    "gpus": torch.cuda.device_count() if cuda else 0,
    "device": torch.cuda.get_device_name(0) if cuda else "cpu",
    "capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
    "python": platform.python_version(),
    "executable": sys.executable,
    "compatfn_path": compatfn.__file__,
    "optional": {name: has(name) for name in ("pytest", "hypothesis", "libcst")},
}))
"""


def _installers() -> Dict[str, List[str]]:
    """The commands that can build and install compatfn here, in order of preference: this
    Python's pip, else uv (a virtual environment made by uv has no pip)."""
    installers = {
        "pip": [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    }
    uv = shutil.which("uv")
    if uv:
        installers["uv"] = [
            uv,
            "pip",
            "install",
            "--quiet",
            "--offline",
            "--python",
            sys.executable,
        ]
    return installers


def stage(dest: Path) -> str:
    """Put compatfn, built from this checkout, into ``dest``; return how (``pip``, ``uv`` or
    ``copy``, where neither can build it).

    The build runs on a copy of the sources, so that it leaves nothing in the checkout.
    """
    failures = []
    with tempfile.TemporaryDirectory(prefix="compatfn-src-") as tmp:
        src = Path(tmp)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__"))
        for how, installer in _installers().items():
            options = ["--no-deps", "--no-index", "--no-build-isolation", "--target", str(dest)]
            done = subprocess.run([*installer, *options, str(src)], capture_output=True, text=True)
            if done.returncode == 0:
                return how
            lines = done.stderr.strip().splitlines() or ["no output"]
            error = next((line for line in lines if line.lower().startswith("error")), lines[-1])
            failures.append(f"{how}: {error.strip()}")
    print(f"cannot build compatfn here ({'; '.join(failures)}): copying src/compatfn instead")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(
        ROOT / "src" / "compatfn", dest / "compatfn", ignore=shutil.ignore_patterns("__pycache__")
    )
    return "copy"


def environment(site: Path, legacy: bool, deadline: Optional[float] = None) -> Dict[str, str]:
    """The environment of a run: the staged compatfn first on the path, the path forced or not,
    and the time after which tests are skipped (see tests/conftest.py)."""
    env = dict(os.environ)
    if deadline is not None:
        env["COMPATFN_TEST_DEADLINE"] = f"{deadline:.0f}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env.pop("COMPATFN_LEGACY", None)
    env.pop("COMPATFN_EXPECT_INSTALLED", None)  # compatfn comes from the staged folder here
    if legacy:
        env["COMPATFN_LEGACY"] = "1"
    return env


def probe(site: Path) -> Dict[str, Any]:
    """What this Python has; stops with a message when torch or compatfn cannot be imported."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        env=environment(site, legacy=False),
        cwd=str(site),
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"error: {sys.executable} cannot import torch and compatfn: {last}")
    found: Dict[str, Any] = json.loads(done.stdout)
    if Path(found["compatfn_path"]).resolve().parent != (site / "compatfn").resolve():
        raise SystemExit(f"error: compatfn imported from {found['compatfn_path']}, not from {site}")
    return found


def describe(found: Dict[str, Any]) -> List[str]:
    """The lines printed about the torch found."""
    if found["cuda"]:
        gpu = f"{found['device']} (compute capability {found['capability']}"
        gpu += f", {found['gpus']} GPUs)" if found["gpus"] > 1 else ")"
    else:
        gpu = "none usable: the CUDA tests are skipped, each with the reason"
    missing = [name for name, there in found["optional"].items() if not there]
    return [
        f"python {found['python']} ({found['executable']})",
        f"torch  {found['torch']} from {Path(found['torch_path']).parent}",
        f"CUDA   built with {found['cuda_build']}; GPU: {gpu}",
        "missing: " + (", ".join(missing) + " (their tests are skipped)" if missing else "nothing"),
    ]


def run_pytest(
    site: Path,
    out: Path,
    name: str,
    legacy: bool,
    pytest_args: Sequence[str],
    deadline: Optional[float] = None,
    log: Optional[Path] = None,
) -> Dict[str, Any]:
    """One pytest run over the suite, its output to ``log`` if given (else to this terminal);
    returns its record for ``check.json``."""
    junit = out / f"junit-{name}.xml"
    if junit.exists():
        junit.unlink()
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}",
        "--durations=5", *pytest_args,
    ]  # fmt: skip
    label = "COMPATFN_LEGACY=1" if legacy else "native path"
    where = f" (output: {log.name})" if log else ""
    print(f"\n=== pytest, {label}{where}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    env = environment(site, legacy, deadline)
    with open(log, "w") if log else _terminal() as stream:
        status = subprocess.run(
            command, env=env, cwd=str(ROOT), stdout=stream, stderr=subprocess.STDOUT
        ).returncode
    record: Dict[str, Any] = {
        "name": name,
        "legacy": legacy,
        "exit": status,
        "seconds": round(time.monotonic() - started, 1),
        "junit": junit.name if junit.exists() else None,
    }
    report_json = out / f"compatfn-{name}.json"
    done = subprocess.run(
        [sys.executable, "-m", "compatfn", "--json"],
        capture_output=True,
        text=True,
        env=environment(site, legacy),
        cwd=str(site),
    )
    report_json.write_text(done.stdout or json.dumps({"error": done.stderr.strip()}))
    record["compatfn_json"] = report_json.name
    record["compatfn_exit"] = done.returncode
    return record


@contextlib.contextmanager
def _terminal() -> Iterator[None]:
    """This process's own output (``None`` for subprocess: inherit it)."""
    sys.stdout.flush()
    yield None


def run_tests(
    site: Path,
    out: Path,
    runs: Sequence[str],
    pytest_args: Sequence[str],
    budget: Optional[float],
    parallel: bool,
) -> List[Dict[str, Any]]:
    """The pytest runs, one after the other (the time box split between them) or side by side
    (each with the whole box, output in ``pytest-<run>.log``, its summary printed after)."""
    started = time.time()
    if not parallel:
        records = []
        for i, name in enumerate(runs):
            deadline = None if budget is None else started + budget * (i + 1) / len(runs)
            records.append(run_pytest(site, out, name, name == "legacy", pytest_args, deadline))
        return records
    deadline = None if budget is None else started + budget
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        futures = [
            pool.submit(run_pytest, site, out, name, name == "legacy", pytest_args, deadline, log)
            for name, log in ((name, out / f"pytest-{name}.log") for name in runs)
        ]
        records = [future.result() for future in futures]
    for name in runs:
        tail = (out / f"pytest-{name}.log").read_text().splitlines()[-12:]
        print(f"\n=== pytest-{name}.log, its end:", *tail, sep="\n")
    return records


def run_benchmarks(site: Path, out: Path, found: Dict[str, Any]) -> List[Dict[str, Any]]:
    """``benchmarks/run.py --quick`` and ``benchmarks/overhead.py --quick`` on the GPU (on the CPU
    where there is none), their JSON in ``out``; returns their records for ``check.json``."""
    device = "cuda" if found["cuda"] else "cpu"
    tag = f"torch{found['torch'].split('+')[0]}-{device}"
    records = []
    for name in ("relu", "overhead"):
        dest = out / f"{name}-{tag}.json"
        script = ROOT / "benchmarks" / ("run.py" if name == "relu" else "overhead.py")
        # Each script writes <benchmark>-torch<X.Y.Z>-<device>.json into the --results folder.
        command = [
            sys.executable,
            str(script),
            "--quick",
            "--device",
            device,
            "--results",
            str(out),
        ]
        print(f"\n=== benchmark: {' '.join(command[1:])}", flush=True)
        started = time.monotonic()
        status = subprocess.run(command, env=environment(site, legacy=False), cwd=str(ROOT))
        records.append(
            {
                "name": name,
                "device": device,
                "exit": status.returncode,
                "seconds": round(time.monotonic() - started, 1),
                "json": dest.name if dest.exists() else None,
            }
        )
    return records


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pytest_args: List[str] = []
    if "--" in args:
        pytest_args = args[args.index("--") + 1 :]
        args = args[: args.index("--")]
    parser = argparse.ArgumentParser(
        prog="python -m tools.check_installed",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Arguments after -- go to pytest.",
    )
    parser.add_argument("outdir", type=Path, help="folder for the JUnit XML and JSON (created)")
    parser.add_argument(
        "--runs",
        default="native,legacy",
        help="which runs: native, legacy or both (default: native,legacy)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="time box for the test runs (split between them, unless --parallel): tests that "
        "would start later are skipped, visibly (default: none)",
    )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run the native and the legacy run side by side (on a machine with cores to spare)",
    )
    parser.add_argument(
        "--bench",
        action="store_true",
        help="also run the quick benchmarks (ReLU suite, per-call overhead) on the GPU, or on the "
        "CPU where there is none, and write their JSON to OUTDIR",
    )
    options = parser.parse_args(args)
    runs = [r for r in options.runs.split(",") if r]
    if not runs or set(runs) - {"native", "legacy"}:
        parser.error(f"--runs takes native, legacy or both, not {options.runs!r}")
    out: Path = options.outdir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compatfn-site-") as tmp:
        site = Path(tmp)
        how = stage(site)
        found = probe(site)
        print(f"compatfn from this checkout ({how}{' --target' * (how != 'copy')}) in {site}")
        for line in describe(found):
            print(line)
        if not found["optional"]["pytest"]:
            raise SystemExit("error: pytest is not installed in this Python: pip install pytest")
        has_native = not found["torch"].startswith("1.")
        if "legacy" in runs and not has_native:
            print(f"torch {found['torch']} has no native path: one run, legacy already")
            runs = ["native"]
        parallel = options.parallel and len(runs) > 1
        records = run_tests(site, out, runs, pytest_args, options.deadline, parallel)
        benchmarks = run_benchmarks(site, out, found) if options.bench else []
    check = {
        **found,
        "install": how,
        "command": "python -m tools.check_installed " + " ".join(map(str, argv or sys.argv[1:])),
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "pytest_args": pytest_args,
        "runs": records,
        "benchmarks": benchmarks,
        "seconds": round(time.monotonic() - started, 1),
    }
    (out / "check.json").write_text(json.dumps(check, indent=1) + "\n")
    print()
    for record in records:
        outcome = "passed" if record["exit"] == 0 else f"FAILED (pytest exit {record['exit']})"
        if record["compatfn_exit"] != 0:
            outcome += f"; python -m compatfn --json FAILED (exit {record['compatfn_exit']})"
        print(f"{record['name']:6} run: {outcome} in {record['seconds']:.0f} s")
    for bench in benchmarks:
        outcome = "done" if bench["exit"] == 0 else f"FAILED (exit {bench['exit']})"
        print(
            f"{bench['name']} benchmark on {bench['device']}: {outcome} in {bench['seconds']:.0f} s"
        )
    print(
        f"total {time.monotonic() - started:.0f} s; wrote {out}: check.json and "
        + ", ".join(str(r.get("junit") or r.get("json")) for r in [*records, *benchmarks])
    )
    ok = all(r["exit"] == 0 and r["compatfn_exit"] == 0 for r in records)
    return 0 if ok and all(b["exit"] == 0 for b in benchmarks) else 1


if __name__ == "__main__":
    sys.exit(main())
