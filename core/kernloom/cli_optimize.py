"""``kernloom optimize GRAPH.json -o OUT.json [--explain]``: run the graph optimizer on a
saved graph and write the result, saying per pass what it did.

What must survive: the ``--fetch`` tensors' nodes, or, without ``--fetch``, every node
whose outputs nothing in the graph consumes (the graph's results). Placeholders stay
placeholders (what they will be fed is unknown), so only what does not depend on them
is folded. Bad arguments and files are usage errors (exit 2) naming the argument or file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from kernloom.cli_flags import (
    EXIT_OK,
    OPTIMIZE_FLAGS,
    run_command,
)
from kernloom.errors import InvalidArgumentError
from kernloom.fileio import parent_problem
from kernloom.graph.graph import Graph
from kernloom.optimizer import optimize_step_graph
from kernloom.registry import Registry

__all__ = ["add_optimize_parser"]


def _sinks(graph: Graph) -> set[str]:
    consumed = {t.node.name for n in graph.nodes for t in n.inputs}
    consumed |= {c.name for n in graph.nodes for c in n.control_inputs}
    return {n.name for n in graph.nodes if n.name not in consumed}


def _optimize(registry: Registry, args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True, markup=False)
    source = Path(args.graph)
    if not source.is_file():
        raise InvalidArgumentError(f"{args.graph}: no such file")
    out = Path(args.output)
    problem = parent_problem(out)
    if problem is not None:
        raise InvalidArgumentError(f"-o {args.output}: {problem}")
    graph = Graph.load(source, registry=registry)
    kept = {graph.tensor(name).node.name for name in args.fetch} if args.fetch else _sinks(graph)
    devices = registry.create_devices()
    try:
        optimized, report = optimize_step_graph(
            graph,
            registry=registry,
            devices=devices,
            preserved=kept,
            disabled=tuple(args.disable),
            plugin_passes=registry.graph_passes,
        )
    finally:
        devices.close()
    optimized.save(out)
    if args.explain:
        console.print(report.explain(), markup=False)
    console.print(
        f"{report.nodes_before or len(graph)} -> {len(optimized)} nodes; written to {out}",
        markup=False,
    )
    return EXIT_OK


def _handler(registry: Registry, args: argparse.Namespace) -> int:
    return run_command(
        lambda: _optimize(registry, args), failed="optimizing failed: ", flags=OPTIMIZE_FLAGS
    )


def add_optimize_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "optimize",
        help="run the graph optimizer on a saved graph (GraphDef JSON)",
        description="Rewrite a graph saved with Graph.save() with the graph optimizer and "
        "write the result; --explain shows what each pass did.",
    )
    parser.add_argument("graph", metavar="GRAPH.json", help="a graph saved with Graph.save()")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.json", help="where to write")
    parser.add_argument(
        "--fetch",
        action="append",
        default=[],
        metavar="NAME",
        help="a tensor that must keep its value (default: every unconsumed node)",
    )
    parser.add_argument(
        "--disable", action="append", default=[], metavar="PASS", help="skip this pass"
    )
    parser.add_argument("--explain", action="store_true", help="show what each pass did")
    parser.set_defaults(handler=_handler)
