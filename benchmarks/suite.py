"""The benchmark suite of issue 20: kernloom next to numpy direct, ONNX Runtime, torch and
TensorFlow 1, each where installed, in one run; the README's performance table comes from
its JSON.

    make bench-suite                                    # all of it, writes JSON and README
    .venv/bin/python benchmarks/suite.py                # all of it, writes the JSON
    .venv/bin/python benchmarks/suite.py --quick --workloads chain_vector
    .venv/bin/python benchmarks/suite.py --render [--write-readme]   # no measuring

Workloads (``--workloads``): ``chain_vector`` and ``chain_scalar`` (1000 ``Add(x, c)`` on
float32[16], µs per original node), ``mlp_1`` and ``mlp_2`` (784-1024-1024-10, batch 256,
at 1 and 2 threads, ms per run), ``while_loop`` (10,000 iterations of ``i + 1``, µs per
iteration). Each runtime runs in its own interpreter (``isolation.py``) with the BLAS
thread count fixed, rounds interleaved across them; a ratio is taken per round against
numpy direct's time in the same round, and the table shows its median.

TensorFlow runs in the interpreter named by ``KERNLOOM_TF_PYTHON``, else in
``.venv-tf/bin/python`` (``make .venv-tf/.tf-installed`` builds it), else in this one if it
has tensorflow; otherwise its column says "not installed".
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import isolation  # the script's own folder is on sys.path
import suite_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS_SCRIPT = HERE / "suite_workloads.py"
DEFAULT_JSON = HERE / "results" / "suite.json"
README = ROOT / "README.md"
N_ADDS = 1000
LOOP_ITERATIONS = 10_000
RUNTIMES = ("numpy", "onnxruntime", "tf", "torch", "kernloom_off", "kernloom_on")
FULL_ROUNDS = 31
QUICK_ROUNDS = 3


@dataclass(frozen=True)
class Workload:
    """One row of the table: what the children build, and how a round's seconds become
    the row's unit."""

    key: str
    title: str
    """The row's name; ``{param}`` fields are filled from the factory's parameters."""
    factory: str
    params: Mapping[str, Any]
    runtimes: tuple[str, ...]
    unit: str
    unit_short: str
    scale: float
    """Seconds of one call times ``scale`` = the row's unit (per node, per iteration)."""
    repeats: int
    """Calls per round; the round's time is their best."""
    threads: int = 1
    settle_s: float = 0.0
    quick_params: Mapping[str, Any] = field(default_factory=dict)


CHAIN_RUNTIMES = ("numpy", "onnxruntime", "tf", "torch", "kernloom_off", "kernloom_on")
MLP_RUNTIMES = ("numpy", "onnxruntime", "tf", "torch", "kernloom_on")
PER_NODE = 1e6 / N_ADDS


def _chain(*, scalar: bool) -> Workload:
    kind = "scalar" if scalar else "vector"
    return Workload(
        key=f"chain_{kind}",
        title=f"chain of 1000 `Add(x, c)`, float32[16], `c` a {kind} constant",
        factory="chain",
        params={"scalar": scalar},
        runtimes=CHAIN_RUNTIMES,
        unit="µs per original node",
        unit_short="µs",
        scale=PER_NODE,
        repeats=20,
    )


def _mlp(threads: int) -> Workload:
    return Workload(
        key=f"mlp_{threads}",
        title=(
            "MLP 784-1024-1024-10, batch 256, MatMul+bias+Relu, softmax, "
            f"{threads} thread{'s' if threads > 1 else ''}"
        ),
        factory="mlp",
        params={"threads": threads},
        runtimes=MLP_RUNTIMES,
        unit="ms per run",
        unit_short="ms",
        scale=1e3,
        repeats=5,
        threads=threads,
        # OpenBLAS's and OpenMP's workers spin for up to ~0.1-0.2 s after a product:
        # with two threads on two cores they would take the next child's cores.
        settle_s=0.2 if threads > 1 else 0.0,
    )


WORKLOADS = (
    _chain(scalar=False),
    _chain(scalar=True),
    _mlp(1),
    _mlp(2),
    Workload(
        key="while_loop",
        title="`while_loop(i < n, i + 1)`, {iterations:,} iterations",
        factory="while_loop",
        params={"iterations": LOOP_ITERATIONS},
        runtimes=("numpy", "tf", "kernloom_on"),
        unit="µs per iteration",
        unit_short="µs",
        scale=1e6 / LOOP_ITERATIONS,
        repeats=3,
        quick_params={"iterations": 1000},
    ),
)
WORKLOAD_KEYS = tuple(w.key for w in WORKLOADS)


# -- which runtimes this machine has --------------------------------------------------------


def available_runtimes() -> tuple[dict[str, str], dict[str, str]]:
    """(runtime -> its interpreter, runtime -> why it is not installed)."""
    pythons: dict[str, str] = {}
    missing: dict[str, str] = {}
    needs = {
        "numpy": ("numpy",),
        "onnxruntime": ("onnxruntime", "onnx"),
        "torch": ("torch",),
        "kernloom_off": ("kernloom",),
        "kernloom_on": ("kernloom",),
    }
    for runtime, modules in needs.items():
        absent = [m for m in modules if importlib.util.find_spec(m) is None]
        if absent:
            missing[runtime] = f"{', '.join(absent)} not importable by {sys.executable}"
        else:
            pythons[runtime] = sys.executable
    tf_python, reason = tensorflow_python()
    if tf_python is None:
        missing["tf"] = reason
    else:
        pythons["tf"] = tf_python
    return pythons, missing


def tensorflow_python() -> tuple[str | None, str]:
    """The interpreter that runs the TensorFlow child, or None and why there is none. A
    ``KERNLOOM_TF_PYTHON`` that is not a python with tensorflow is an error, not a gap."""
    named = os.environ.get("KERNLOOM_TF_PYTHON")
    if named:
        if not _has_tensorflow(named):
            raise SystemExit(
                f"KERNLOOM_TF_PYTHON={named}: not an interpreter that can import tensorflow; "
                "point it at one (`make .venv-tf/.tf-installed` builds .venv-tf) or unset it"
            )
        return named, ""
    venv_python = ROOT / os.environ.get("TF_VENV", ".venv-tf") / "bin" / "python"
    if venv_python.exists() and _has_tensorflow(str(venv_python)):
        return str(venv_python), ""
    if importlib.util.find_spec("tensorflow") is not None:
        return sys.executable, ""
    return None, (
        "no KERNLOOM_TF_PYTHON, no $TF_VENV (.venv-tf) with tensorflow, and this interpreter "
        "has none "
        "(`make .venv-tf/.tf-installed` builds .venv-tf)"
    )


def _has_tensorflow(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') is None)"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# -- measuring ----------------------------------------------------------------------------


def run_workload(
    workload: Workload,
    pythons: Mapping[str, str],
    missing: Mapping[str, str],
    selected: Sequence[str],
    *,
    rounds: int,
    quick: bool,
) -> dict[str, Any]:
    """One row: the selected, installed runtimes interleaved, each summed up against numpy."""
    repeats = 2 if quick else workload.repeats
    params = {**workload.params, **(workload.quick_params if quick else {}), "repeats": repeats}
    scale = workload.scale
    if quick and "iterations" in workload.quick_params:
        scale = 1e6 / workload.quick_params["iterations"]
    children = [
        isolation.Child(
            name=runtime,
            script=WORKLOADS_SCRIPT,
            factory=workload.factory,
            params={"runtime": runtime, **params},
            threads=workload.threads,
            python=pythons[runtime],
        )
        for runtime in workload.runtimes
        if runtime in selected and runtime in pythons
    ]
    started = time.perf_counter()
    print(
        f"{workload.key}: {', '.join(c.name for c in children)}; {rounds} rounds ...",
        file=sys.stderr,
        flush=True,
    )
    results = isolation.run_interleaved(children, rounds, settle_s=workload.settle_s)
    print(f"{workload.key}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    reference = [s * scale for s in results["numpy"].seconds]
    runtimes: dict[str, Any] = {}
    for runtime in workload.runtimes:
        if runtime in results:
            values = [s * scale for s in results[runtime].seconds]
            ratios = [v / r for v, r in zip(values, reference, strict=True)]
            runtimes[runtime] = {
                "status": "ok",
                "median": statistics.median(values),
                "best": min(values),
                "ratio": statistics.median(ratios),
                "ratio_middle_half": _middle_half(ratios),
                "rounds": values,
                "info": results[runtime].info,
            }
        elif runtime not in selected:
            runtimes[runtime] = {"status": "not selected"}
        else:
            runtimes[runtime] = {"status": "not installed", "reason": missing[runtime]}
    return {
        "key": workload.key,
        "title": workload.title.format(**params),
        "unit": workload.unit,
        "unit_short": workload.unit_short,
        "params": params,
        "threads": workload.threads,
        "rounds": rounds,
        "repeats_per_round": repeats,
        "runtimes": runtimes,
    }


def _middle_half(values: list[float]) -> list[float]:
    if len(values) < 2:
        return [values[0], values[0]]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return [q1, q3]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    if "numpy" not in args.runtimes:
        raise SystemExit("--runtimes must include numpy: every ratio is taken against it")
    pythons, missing = available_runtimes()
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    load = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    workloads = [
        run_workload(w, pythons, missing, args.runtimes, rounds=rounds, quick=args.quick)
        for w in WORKLOADS
        if w.key in args.workloads
    ]
    return {
        "schema": 1,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "command": _command(),
        "quick": args.quick,
        "rounds": rounds,
        "duration_s": round((datetime.datetime.now(datetime.UTC) - started).total_seconds()),
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average": [round(v, 2) for v in load],
            "load_average_end": [round(v, 2) for v in os.getloadavg()],
        },
        "commit": _commit(),
        "interpreters": {runtime: _shown(python) for runtime, python in pythons.items()},
        "versions": _versions(workloads),
        "workloads": workloads,
    }


def _command() -> str:
    """How this run was started, paths relative to the repository where they are in it."""

    return shlex.join([_shown(sys.executable), _shown(sys.argv[0]), *sys.argv[1:]])


def _shown(path: str) -> str:
    """``path`` relative to the repository if it is inside it (the JSON is committed)."""
    relative = os.path.relpath(os.path.abspath(path), ROOT)
    return path if relative.startswith("..") else relative


def _versions(workloads: list[dict[str, Any]]) -> dict[str, str]:
    """Each library's version, as its children reported it ("numpy 2.4.6")."""
    versions: dict[str, str] = {}
    for workload in workloads:
        for result in workload["runtimes"].values():
            name, _, version = result.get("info", {}).get("version", "").partition(" ")
            if name:
                versions[name] = version
            blas = result.get("info", {}).get("blas")
            if blas:
                versions["numpy_blas"] = blas
    return versions


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    def git(*argv: str) -> str:
        return subprocess.run(
            ["git", *argv], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    return commit or "unknown"


# -- the command line ---------------------------------------------------------------------


def _names(choices: Sequence[str], what: str) -> Any:
    def parse(text: str) -> list[str]:
        names = [n for n in text.replace(",", " ").split() if n]
        unknown = [n for n in names if n not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(unknown)}; choose from {', '.join(choices)}"
            )
        return names

    return parse


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--workloads",
        type=_names(WORKLOAD_KEYS, "workload"),
        default=list(WORKLOAD_KEYS),
        help=f"comma-separated, from {', '.join(WORKLOAD_KEYS)} (default: all)",
    )
    parser.add_argument(
        "--runtimes",
        type=_names(RUNTIMES, "runtime"),
        default=list(RUNTIMES),
        help=f"comma-separated, from {', '.join(RUNTIMES)} (default: all installed)",
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds of 2 calls: a smoke test")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved rounds per workload")
    parser.add_argument(
        "--json",
        type=Path,
        default=DEFAULT_JSON,
        help="where the results go (with --render: where they are read)",
    )
    parser.add_argument(
        "--render", action="store_true", help="measure nothing: render the table from --json"
    )
    parser.add_argument(
        "--write-readme",
        action="store_true",
        help="rewrite README.md's table between its suite markers",
    )
    args = parser.parse_args(argv)
    if args.rounds < 0:
        parser.error(f"--rounds must be positive, got {args.rounds}")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.render:
        try:
            data = json.loads(args.json.read_text())
        except FileNotFoundError:
            raise SystemExit(
                f"--render reads {args.json}, which does not exist: run the suite first"
            ) from None
    else:
        if args.write_readme and args.quick:
            raise SystemExit("--write-readme takes a full run's numbers: drop --quick")
        data = measure(args)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    table = suite_table.render(data)
    print(table)
    if args.write_readme:
        README.write_text(suite_table.with_block(README.read_text(), table))
        print(f"rewrote the table in {README}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
