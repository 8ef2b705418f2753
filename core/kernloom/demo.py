"""``kernloom demo``: the main job, end to end in a few seconds.

Builds a small neural network (784 -> 256 -> 10, relu, softmax) on synthetic data,
shows the devices the installed plugins provide and where each node goes (once: the
session's explanation lists the devices), runs it, checks the result against numpy,
runs it again with a labelled MatMul kernel, reports both timings and writes a
Chrome/Perfetto trace.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any, Final

import numpy as np
from rich.table import Table
from rich.text import Text

from kernloom.cli_args import Once, int_in_range
from kernloom.cli_console import plain_console
from kernloom.cli_flags import CLI_FLAGS, run_command
from kernloom.cli_outputs import check_writable
from kernloom.graph.builder import constant, placeholder
from kernloom.graph.graph import Graph
from kernloom.ops import wrapper
from kernloom.registry import Registry
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import RunMetadata, RunOptions, SessionConfig

__all__ = ["add_demo_parser", "build_mlp"]

Array = np.ndarray[Any, Any]


def build_mlp(
    registry: Registry, sizes: tuple[int, ...] = (784, 256, 10), seed: int = 0
) -> tuple[Graph, dict[str, Any], list[Array]]:
    """A relu MLP ending in softmax; returns the graph, its tensors and the weights."""
    rng = np.random.default_rng(seed)
    weights = [
        (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        for a, b in itertools.pairwise(sizes)
    ]
    graph = Graph(registry)
    ops = registry.ops
    mat_mul, relu = wrapper(ops.get("MatMul")), wrapper(ops.get("Relu"))
    softmax = wrapper(ops.get("Softmax"))
    with graph.as_default():
        x = placeholder("float32", [None, sizes[0]], name="images")
        h = x
        for i, w in enumerate(weights):
            h = mat_mul(h, constant(w, name=f"layer{i}/weights"), name=f"layer{i}/matmul")
            if i < len(weights) - 1:
                h = relu(h, name=f"layer{i}/relu")
        probs = softmax(h, name="probs")
    return graph, {"images": x, "probs": probs}, weights


def numpy_mlp(x: Array, weights: list[Array]) -> Array:
    h = x
    for i, w in enumerate(weights):
        h = h @ w
        if i < len(weights) - 1:
            h = np.maximum(h, 0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    result: Array = e / e.sum(axis=1, keepdims=True)
    return result


def _best_of(session: Session, fetch: Any, feeds: dict[Any, Array], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(fetch, feeds)
        best = min(best, time.perf_counter() - started)
    return best


def _run_demo(registry: Registry, args: argparse.Namespace) -> int:
    # No markup: device names, backends and labels come from plugins and the user.
    console = plain_console()
    check_writable(args.trace, "--trace", force=True)
    graph, t, weights = build_mlp(registry)
    images = np.random.default_rng(1).standard_normal((args.batch, 784)).astype(np.float32)
    feeds = {t["images"]: images}
    expected = numpy_mlp(images, weights)
    console.print(
        Text.assemble(
            ("kernloom demo", "bold"), f": MLP 784-256-10 on a batch of {args.batch} images\n"
        )
    )

    with Session(graph) as session:
        console.print(Text("Devices and placement", style="bold"))
        console.print(session.explain(t["probs"], feeds))

        metadata = RunMetadata()
        probs = session.run(t["probs"], feeds, RunOptions(trace=True), metadata)
        error = float(np.max(np.abs(probs - expected)))
        ok = error < 1e-4
        verdict = ("matches numpy", "green") if ok else ("DIFFERS from numpy", "red")
        console.print(
            Text.assemble(
                "\n",
                ("Result", "bold"),
                f": probabilities {probs.shape}, max |kernloom - numpy| = {error:.2e} -> ",
                verdict,
            )
        )
        default_s = _best_of(session, t["probs"], feeds, args.repeats)

    labelled = SessionConfig(kernel_labels={"MatMul": args.label})
    with Session(graph, labelled) as session:
        again = session.run(t["probs"], feeds)
        labelled_ok = float(np.max(np.abs(again - expected))) < 1e-4
        labelled_s = _best_of(session, t["probs"], feeds, args.repeats)

    timings = Table(title=f"Timings (best of {args.repeats})", title_justify="left")
    for column in ("MatMul kernel", "time per run", "matches numpy"):
        timings.add_column(column)
    timings.add_row("default", f"{default_s * 1e3:.2f} ms", "yes" if ok else "NO")
    timings.add_row(
        f"label {args.label!r}", f"{labelled_s * 1e3:.2f} ms", "yes" if labelled_ok else "NO"
    )
    console.print()
    console.print(timings)
    metadata.write_trace(args.trace)
    nodes = len(metadata.step_stats.nodes) if metadata.step_stats else 0
    console.print(
        f"\nTrace of the first run ({nodes} nodes) written to {args.trace}: open it in "
        f"https://ui.perfetto.dev or chrome://tracing"
    )
    return 0 if ok and labelled_ok else 1


_DEMO_FLAGS: Final = {
    **CLI_FLAGS,
    "kernel_label": "--label {value}",
    "trace": "--trace FILE.json",
}
"""The demo's flags: its ``--label`` takes a MatMul label only."""


def _handler(registry: Registry, args: argparse.Namespace) -> int:
    return run_command(lambda: _run_demo(registry, args), failed="", flags=_DEMO_FLAGS)


def add_demo_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="build, place, run, check and trace a small network")
    demo.add_argument(
        "--batch",
        action=Once,
        type=int_in_range(1, 65536),
        default=256,
        help="images per batch (256; 1 to 65536)",
    )
    demo.add_argument(
        "--repeats",
        action=Once,
        type=int_in_range(1, 10000),
        default=20,
        help="timed runs per variant (20; 1 to 10000)",
    )
    demo.add_argument(
        "--label", action=Once, default="einsum", help="MatMul kernel label to compare (einsum)"
    )
    demo.add_argument(
        "--trace",
        action=Once,
        type=Path,
        default=Path("kernloom-demo-trace.json"),
        help="trace file to write (replaced if it exists)",
    )
    demo.set_defaults(handler=_handler)
