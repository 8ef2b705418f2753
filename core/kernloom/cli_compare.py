"""``kernloom compare GRAPH.json --label MatMul=einsum``: a labelled kernel against the default.

Runs the saved graph with and without the labels and prints, per node they change, the
largest output differences and the kernel times, and the whole run's time in each
(``Session.compare_labels``); ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kernloom.cli_args import UsageError, int_in_range, settings_from_pairs
from kernloom.cli_console import plain_console
from kernloom.cli_flags import (
    COMPARE_FLAGS,
    EXIT_OK,
    run_command,
)
from kernloom.cli_run import _load_array, _tensor_key
from kernloom.fileio import DEFAULT_MAX_READ_BYTES
from kernloom.graph.graph import Graph
from kernloom.registry import Registry
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import SessionConfig

__all__ = ["add_compare_parser"]


def _sinks(graph: Graph) -> list[str]:
    """The outputs nothing in the graph consumes: what a run of the whole graph produces."""
    consumed = {t.name for node in graph.nodes for t in node.inputs}
    return [t.name for node in graph.nodes for t in node.outputs if t.name not in consumed]


def _compare(registry: Registry, args: argparse.Namespace) -> int:
    graph = Graph.load(args.graph, registry=registry)
    pairs = settings_from_pairs(args.feed, "--feed", "x=x.npy", key=_tensor_key)
    feeds = {name: _load_array(name, path, DEFAULT_MAX_READ_BYTES) for name, path in pairs.items()}
    labels = settings_from_pairs(args.label, "--label", "MatMul=einsum")
    if not labels:
        raise UsageError("give at least one --label OP=LABEL, e.g. --label MatMul=einsum")
    fetches = list(args.fetch) or _sinks(graph)
    config = SessionConfig(device_filters=tuple(args.device_filter))
    with Session(graph, config) as session:
        result = session.compare_labels(fetches, feeds, labels=labels, runs=args.runs)
    console = plain_console()
    if args.json:
        console.print(json.dumps(result.as_json(), indent=2))
    else:
        console.print(result.describe())
    return EXIT_OK


def _handler(registry: Registry, args: argparse.Namespace) -> int:
    return run_command(
        lambda: _compare(registry, args), failed="the run failed: ", flags=COMPARE_FLAGS
    )


def add_compare_parser(sub: Any) -> None:
    compare = sub.add_parser(
        "compare",
        help="compare labelled kernels with the default ones on a saved graph",
        description="Run a graph saved with Graph.save() with and without kernel labels: per "
        "node they change, the largest output differences and kernel times; the whole run's "
        "time in each, median and spread.",
    )
    compare.add_argument("graph", metavar="GRAPH.json", help="a graph saved with Graph.save()")
    compare.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="OP=LABEL",
        help="the label to compare for every node of OP (repeatable)",
    )
    compare.add_argument(
        "--feed", action="append", default=[], metavar="NAME=FILE.npy", help="feed a tensor"
    )
    compare.add_argument(
        "--fetch",
        action="append",
        default=[],
        metavar="NAME",
        help="a tensor to fetch (default: every output nothing consumes)",
    )
    compare.add_argument(
        "--runs",
        type=int_in_range(1, 1_000_000),
        default=20,
        metavar="N",
        help="timed runs per variant",
    )
    compare.add_argument(
        "--device-filter",
        action="append",
        default=[],
        metavar="DEVICE",
        help="only use devices matching this (partial) name, e.g. CPU",
    )
    compare.add_argument("--json", action="store_true", help="machine-readable output")
    compare.set_defaults(handler=_handler)
