"""``kernloom optimize GRAPH.json -o OUT.json [--explain]``: run the graph optimizer on a
saved graph and write the result, saying per pass what it did.

What must survive: the ``--fetch`` tensors' nodes, or, without ``--fetch``, every node
whose outputs nothing in the graph consumes (the graph's results). Placeholders stay
placeholders (what they will be fed is unknown), so only what does not depend on them
is folded. Bad arguments and files are usage errors (exit 2) naming the argument or file;
``-o`` and ``--disable`` are checked before the graph is read. As with ``kernloom run
--out``, an existing ``-o`` file is replaced only with ``--force`` (and then atomically);
``--disable`` takes the names ``kernloom run --disable`` takes (``kernloom.cli_passes``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kernloom.cli_console import plain_console
from kernloom.cli_flags import (
    EXIT_OK,
    OPTIMIZE_FLAGS,
    run_command,
)
from kernloom.cli_outputs import check_writable
from kernloom.cli_passes import add_pass_flags, disabled_passes
from kernloom.errors import InvalidArgumentError, KernloomError
from kernloom.graph.graph import Graph
from kernloom.optimizer import optimize_step_graph
from kernloom.registry import Registry

__all__ = ["add_optimize_parser"]


def _sinks(graph: Graph) -> set[str]:
    consumed = {t.node.name for n in graph.nodes for t in n.inputs}
    consumed |= {c.name for n in graph.nodes for c in n.control_inputs}
    return {n.name for n in graph.nodes if n.name not in consumed}


def _fetched(graph: Graph, name: str) -> str:
    """The node of a ``--fetch`` tensor; a name that is not in the graph is an error that
    names the flag and the nodes it may have meant."""
    try:
        return graph.tensor(name).node.name
    except KernloomError as exc:
        raise InvalidArgumentError(f"--fetch {name}: {exc}") from None


def _optimize(registry: Registry, args: argparse.Namespace) -> int:
    console = plain_console()
    source = Path(args.graph)
    if not source.is_file():
        raise InvalidArgumentError(f"{args.graph}: no such file")
    out = check_writable(Path(args.output), "-o", force=args.force)
    disabled = disabled_passes(registry, args)
    graph = Graph.load(source, registry=registry)
    kept = {_fetched(graph, name) for name in args.fetch} if args.fetch else _sinks(graph)
    devices = registry.create_devices()
    try:
        optimized, report = optimize_step_graph(
            graph,
            registry=registry,
            devices=devices,
            preserved=kept,
            disabled=disabled,
            plugin_passes=registry.graph_passes,
        )
    finally:
        devices.close()
    optimized.save(out)
    if args.explain:
        console.print(report.explain())
    console.print(
        f"{report.nodes_before or len(graph)} -> {len(optimized)} nodes; written to {out}"
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
    parser.add_argument("--force", action="store_true", help="replace an -o file that exists")
    add_pass_flags(parser, off_switch=False)
    parser.add_argument("--explain", action="store_true", help="show what each pass did")
    parser.set_defaults(handler=_handler)
