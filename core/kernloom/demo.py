"""``kernloom demo``: the main job, end to end in a few seconds.

Builds a small neural network (784 -> 256 -> 10, relu, softmax) on synthetic data,
shows the devices the installed plugins provide and where each node goes, runs it,
checks the result against numpy, runs it again with a labelled MatMul kernel, reports
both timings and writes a Chrome/Perfetto trace.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from kernloom.errors import KernloomError
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
    console = Console(highlight=False, soft_wrap=True)
    graph, t, weights = build_mlp(registry)
    images = np.random.default_rng(1).standard_normal((args.batch, 784)).astype(np.float32)
    feeds = {t["images"]: images}
    expected = numpy_mlp(images, weights)
    console.print(f"[bold]kernloom demo[/]: MLP 784-256-10 on a batch of {args.batch} images\n")

    with Session(graph) as session:
        table = Table(title="Devices", title_justify="left")
        for column in ("device", "backend", "memory limit"):
            table.add_column(column)
        for device in session.devices:
            limit = device.memory_stats().bytes_limit
            table.add_row(device.name, device.backend, f"{limit / 2**30:.1f} GiB" if limit else "-")
        console.print(table)
        console.print("\n[bold]Placement[/]", highlight=False)
        console.print(session.explain(t["probs"], feeds), markup=False)

        metadata = RunMetadata()
        probs = session.run(t["probs"], feeds, RunOptions(trace=True), metadata)
        error = float(np.max(np.abs(probs - expected)))
        ok = error < 1e-4
        console.print(
            f"\n[bold]Result[/]: probabilities {probs.shape}, max |kernloom - numpy| = "
            f"{error:.2e} -> {'[green]matches numpy[/]' if ok else '[red]DIFFERS from numpy[/]'}"
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


def _handler(registry: Registry, args: argparse.Namespace) -> int:
    try:
        return _run_demo(registry, args)
    except KernloomError as exc:
        Console(stderr=True).print(f"error: {exc}", markup=False)
        return 1


def add_demo_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="build, place, run, check and trace a small network")
    demo.add_argument("--batch", type=int, default=256, help="images per batch (256)")
    demo.add_argument("--repeats", type=int, default=20, help="timed runs per variant (20)")
    demo.add_argument("--label", default="einsum", help="MatMul kernel label to compare (einsum)")
    demo.add_argument(
        "--trace", type=Path, default=Path("kernloom-demo-trace.json"), help="trace file to write"
    )
    demo.set_defaults(handler=_handler)
