"""The ONNX parts of the ``kernloom`` command: ``kernloom convert model.onnx -o graph.json``,
``kernloom ops --onnx``, and the loader ``kernloom run model.onnx`` uses.

onnx is an optional dependency (``kernloom[onnx]``): it is imported only when one of these
commands runs, and its absence is a clear error, not a traceback.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from kernloom.cli_args import UsageError
from kernloom.cli_console import plain_console
from kernloom.cli_flags import run_command
from kernloom.cli_outputs import check_writable
from kernloom.errors import InvalidArgumentError
from kernloom.graph.graph import Graph
from kernloom.optimizer.rewriter import prune

__all__ = ["add_convert_parser", "cmd_ops_onnx", "is_onnx_path", "load_onnx_graph"]

EXIT_OK = 0
EXIT_USAGE = 2


def _frontend() -> Any:
    try:
        import kernloom.onnx as frontend
    except ImportError as exc:
        raise InvalidArgumentError(
            f"ONNX models need the onnx package ({exc}); install kernloom[onnx]"
        ) from None
    return frontend


def is_onnx_path(path: str) -> bool:
    return path.lower().endswith(".onnx")


def load_onnx_graph(path: str) -> tuple[Graph, dict[str, str]]:
    """The kernloom graph of an ONNX file, and the tensor name of each ONNX input and
    output whose node could not keep its ONNX name (tf2onnx's ``x:0``, torch's
    ``onnx::Add_3``), so that ``kernloom run`` takes them by their ONNX names."""
    imported = _frontend().import_model(path)
    names = {
        onnx_name: tensor.name
        for table in (imported.inputs, imported.outputs)
        for onnx_name, tensor in table.items()
        if onnx_name not in (tensor.name, tensor.node.name)
    }
    return imported.graph, names


def _convert(args: argparse.Namespace) -> int:
    """Import, check where to write before anything is written, write, say what it made.
    Errors go through ``run_command``: one line and an exit code, as every command's."""
    flag, target = _output(args)
    check_writable(target, flag, force=args.force, example="graph.json")
    imported = _frontend().import_model(args.model)  # (a missing model: its own error)
    ends = [t.node.name for t in (*imported.inputs.values(), *imported.outputs.values())]
    # Nodes no output needs -- a converter's shape arithmetic whose value was computed at
    # import, which the converters after it took as a constant -- are not written.
    graph = prune(imported.graph, ends)
    graph.save(target)
    inputs = ", ".join(t.node.name for t in imported.inputs.values())
    outputs = ", ".join(t.node.name for t in imported.outputs.values())
    plain_console().print(
        f"{args.model}: {len(graph.nodes)} nodes written to {target} "
        f"(feed: {inputs or '-'}; fetch: {outputs or '-'})"
    )
    return EXIT_OK


def _output(args: argparse.Namespace) -> tuple[str, Path]:
    """The graph file, given as the second argument or as ``-o`` (as ``kernloom optimize``
    takes it), and how to name it in an error."""
    if args.output and args.output_flag:
        raise UsageError(
            f"give the graph file once: as GRAPH.json ({args.output}) or as -o "
            f"({args.output_flag}), not both"
        )
    if args.output_flag:
        return "-o", Path(args.output_flag)
    if args.output:
        return "GRAPH.json", Path(args.output)
    raise UsageError("where to write the graph: kernloom convert MODEL.onnx -o GRAPH.json")


def add_convert_parser(sub: Any) -> None:
    convert = sub.add_parser(
        "convert",
        help="convert an ONNX model to a graph file (JSON)",
        description="Import an ONNX model and write it as a graph file (Graph.save()'s "
        "JSON), to run with kernloom run or optimize with kernloom optimize.",
    )
    convert.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    convert.add_argument(
        "output", metavar="GRAPH.json", nargs="?", help="where to write the graph (or -o)"
    )
    convert.add_argument(
        "-o", "--output", dest="output_flag", metavar="GRAPH.json", help="where to write the graph"
    )
    convert.add_argument("--force", action="store_true", help="replace an existing file")
    convert.set_defaults(
        handler=lambda registry, args: run_command(
            lambda: _convert(args), failed="converting failed: "
        )
    )


def cmd_ops_onnx(args: argparse.Namespace) -> int:
    """The ONNX ops that import: domain, op and the schema versions converted."""
    from kernloom.onnx._registry import REGISTRY

    _frontend()
    rows: dict[tuple[str, str], list[int]] = {}
    for conv in REGISTRY.converters():
        rows.setdefault((conv.domain, conv.op_type), []).append(conv.since_version)
    if args.json:
        listing = [
            {"domain": domain or "ai.onnx", "op": op, "since_versions": versions}
            for (domain, op), versions in sorted(rows.items())
        ]
        print(json.dumps(listing, indent=1))
        return EXIT_OK
    table = Table(title=f"{len(rows)} ONNX ops import (schema versions converted)")
    table.add_column("domain")
    table.add_column("op")
    table.add_column("versions")
    for (domain, op), versions in sorted(rows.items()):
        table.add_row(domain or "ai.onnx", op, ", ".join(str(v) for v in versions))
    plain_console(table_width=True).print(table)
    return EXIT_OK
