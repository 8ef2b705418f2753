"""``kernloom run GRAPH.json``: run a saved graph from the shell.

Every problem with an argument or a file is a usage error (exit 2) that names the
argument or file and says what would fix it, in this command's flags; a failure while
running is exit 1. Nothing here lets a Python traceback reach the user for bad input:
files are read within a size limit and only if they are regular files, numbers are
finite and bounded, contradictory arguments are refused, and outputs are checked before
the run and written atomically.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import IO, Any

import numpy as np
from pydantic import ValidationError
from rich.console import Console

from kernloom.cli_args import (
    MAX_THREADS,
    Once,
    UsageError,
    byte_size,
    int_in_range,
    non_empty,
    positive_seconds,
    settings_from_pairs,
    unknown_device_type,
)
from kernloom.cli_console import plain_console
from kernloom.cli_flags import EXIT_OK, cli_message, run_command
from kernloom.cli_onnx import is_onnx_path, load_onnx_graph
from kernloom.cli_outputs import OutputPlan, member_of, plan_outputs, write_npy, write_npz
from kernloom.cli_passes import add_pass_flags, disabled_passes
from kernloom.dtypes import resource
from kernloom.errors import KernloomError, ResourceExhaustedError
from kernloom.fileio import DEFAULT_MAX_READ_BYTES, FileError, open_regular_file
from kernloom.graph.graph import Graph
from kernloom.graph.graph_def import load_graph
from kernloom.graph.tensor import Tensor
from kernloom.registry import Registry
from kernloom.runtime.run_plan import check_feed
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import RunMetadata, RunOptions, SessionConfig

__all__ = ["add_run_parser"]

_LIMIT_HINT = "pass --max-input-size to allow more"


def _tensor_key(name: str) -> str:
    """``x`` and ``x:0`` name one tensor."""
    return name if ":" in name else f"{name}:0"


def _check_npy_header(stream: IO[bytes], size: int, where: str) -> None:
    """Refuse a header whose shape the file cannot hold before numpy allocates it: a
    forged ``(10**11, 10**11)`` would otherwise exhaust memory, not fail cleanly."""
    if stream.read(4) == b"PK\x03\x04":
        raise UsageError(f"{where}: an .npz archive; feed one .npy per tensor")
    stream.seek(0)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f".npy format version {version[0]}.{version[1]} is not supported")
    if dtype.hasobject:
        raise ValueError("it holds Python objects (pickled), not numbers")
    needed = math.prod(shape) * dtype.itemsize
    if needed != size - stream.tell():
        raise ValueError(
            f"its header declares shape {shape} of {dtype}, {needed} bytes, but the file "
            f"holds {size - stream.tell()}"
        )
    stream.seek(0)


def _load_array(name: str, path: str, max_bytes: int) -> np.ndarray[Any, Any]:
    where = f"--feed {name}={path}"
    try:
        with open_regular_file(path, max_bytes=max_bytes, limit_hint=_LIMIT_HINT) as stream:
            _check_npy_header(stream, os.fstat(stream.fileno()).st_size, where)
            value = np.load(stream, allow_pickle=False)
    except FileError as exc:
        raise UsageError(f"{where}: {exc.problem}") from None
    except (ValueError, EOFError, OSError, UnicodeError, OverflowError, SyntaxError) as exc:
        raise UsageError(
            f"{where}: not a .npy file of plain numbers ({exc}); save it with numpy.save"
        ) from None
    return np.asarray(value)


def _check_feed_file(graph: Graph, name: str, path: str, value: np.ndarray[Any, Any]) -> None:
    """The session's own feed check, run here too so that a dtype or shape that does not
    fit names the file as well as the tensor. Unknown names are left to the session."""
    try:
        tensor = graph.tensor(name)
    except KernloomError:
        return
    try:
        check_feed(tensor, value)
    except KernloomError as exc:
        raise UsageError(f"--feed {name}={path}: {cli_message(exc)}") from None


def _read_of(graph: Graph, handle: Tensor) -> str:
    """A tensor that reads the resource ``handle`` (a ``ReadVariableOp`` of it), or words
    saying what such a tensor would be when the graph has none."""
    for node in graph.nodes:
        if node.op == "ReadVariableOp" and node.inputs and node.inputs[0] is handle:
            return repr(node.outputs[0].name)
    return "the output of a ReadVariableOp of it"


def _check_fetch(graph: Graph, name: str, *, init: list[str], writing: bool) -> None:
    """Refuse, before anything runs, a fetch that has no value (a node without outputs)
    or none that ``--out`` can write (a resource handle). Unknown names are left to the
    session, whose error lists the names it knows."""
    node_name = name.rpartition(":")[0] if ":" in name else name
    if node_name not in graph:
        return
    node = graph.node(node_name)
    if ":" not in name and not node.outputs:
        fix = (
            f"--init {name} already runs it: drop this --fetch"
            if name in init
            else f"to run it, pass --init {name} instead (it runs before the fetches, in "
            "the same session)"
        )
        raise UsageError(
            f"--fetch {name}: node {name!r} (op {node.op}) has no outputs, so there is no "
            f"value to fetch; {fix}"
        )
    try:
        tensor = graph.tensor(name)
    except KernloomError:
        return
    if writing and tensor.dtype is resource:
        raise UsageError(
            f"--fetch {name}: {tensor.name!r} (op {node.op}) is a resource handle, not a "
            f"value, so --out cannot write it; fetch a value read from it instead, such "
            f"as {_read_of(graph, tensor)}"
        )


def _memory_limits(registry: Registry, pairs: list[str]) -> dict[str, int]:
    """``--memory-limit TYPE=SIZE`` as ``SessionConfig.memory_limit``; a type no factory
    creates would limit nothing, so it is an error, not a silent no-op."""
    limits: dict[str, int] = {}
    types = registry.placement_order()
    for device_type, text in settings_from_pairs(pairs, "--memory-limit", "CPU=512M").items():
        if device_type not in types:
            raise unknown_device_type(f"--memory-limit {device_type}={text}", device_type, types)
        try:
            limits[device_type] = byte_size(text)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--memory-limit {device_type}={text}: {exc}") from None
    return limits


def _config(
    args: argparse.Namespace,
    labels: dict[str, str],
    memory_limit: dict[str, int],
    disabled: tuple[str, ...],
) -> SessionConfig:
    try:
        return SessionConfig(
            kernel_labels=labels,
            device_filters=tuple(args.device_filter),
            inter_op_threads=args.inter_op_threads,
            allow_soft_placement=args.soft_placement,
            memory_limit=memory_limit,
            graph_optimizer=not args.no_optimizer,
            disabled_passes=disabled,
        )
    except ValidationError as exc:  # the parser checks each flag; this is a safety net
        raise UsageError(f"bad session settings: {exc.errors()[0]['msg']}") from None


def _write_results(
    console: Console, plan: OutputPlan, fetches: list[str], values: list[Any]
) -> None:
    if plan.archive is not None:
        by_fetch = dict(zip(fetches, values, strict=True))
        members = [m for m, _ in plan.members]
        write_npz(plan.archive, members, [by_fetch[f] for _, f in plan.members])
        renamed = [f"{f} as {m!r}" for m, f in plan.members if m != member_of(f)]
        note = f" (members renamed: {', '.join(renamed)})" if renamed else ""
        console.print(f"{', '.join(f for _, f in plan.members)} written to {plan.archive}{note}")
        return
    if plan.files:
        for name, value, out in zip(fetches, values, plan.files, strict=True):
            write_npy(out, value)
            console.print(f"{name} ({value.dtype}, shape {list(value.shape)}) written to {out}")
        return
    for name, value in zip(fetches, values, strict=True):
        console.print(f"{name} ({value.dtype}, shape {list(value.shape)}):")
        console.print(np.array2string(value, threshold=50))


def _is_graph_def(path: str) -> bool:
    """Whether ``kernloom run`` reads ``path`` as a TensorFlow GraphDef: a ``.pb`` or
    ``.pbtxt`` name, or any name but ``.json`` whose content is not kernloom's JSON (which
    starts with ``{``): a frozen graph saved as ``frozen_graph``, ``model.graphdef`` or
    ``model.prototxt`` loads as ``kernloom.tf.import_graph_def`` loads it, instead of
    failing as JSON."""
    suffix = Path(path).suffix.lower()
    if suffix in (".pb", ".pbtxt"):
        return True
    if suffix == ".json" or not os.path.isfile(path):
        return False  # (the graph loader refuses a FIFO or a device without reading it)
    try:
        with open(path, "rb") as stream:
            head = stream.read(256).lstrip()
    except OSError:
        return False  # (the graph loader names the file that cannot be read)
    return bool(head) and not head.startswith(b"{")


def _run(registry: Registry, args: argparse.Namespace) -> int:
    # (plain_console: names, paths and values are the user's, never rich markup)
    console = plain_console()
    fetches = list(args.fetch)
    plan = plan_outputs(fetches, args.out, args.trace, force=args.force)
    feed_files = settings_from_pairs(args.feed, "--feed", "x=x.npy", key=_tensor_key)
    labels = settings_from_pairs(args.label, "--label", "MatMul=einsum")
    memory_limit = _memory_limits(registry, args.memory_limit)
    disabled = disabled_passes(registry, args)
    renamed: dict[str, str] = {}  # an ONNX name -> the tensor it became
    if is_onnx_path(args.graph):  # an ONNX model imports to a graph (kernloom[onnx])
        graph, renamed = load_onnx_graph(args.graph)
        if renamed:
            feed_files = settings_from_pairs(
                args.feed, "--feed", "x=x.npy", key=lambda n: _tensor_key(renamed.get(n, n))
            )
    elif _is_graph_def(args.graph):  # a TensorFlow GraphDef: kernloom[tf]
        from kernloom.tf import import_graph_def

        graph = import_graph_def(
            args.graph, registry=registry, max_bytes=args.max_input_size, limit_hint=_LIMIT_HINT
        )
    else:
        graph = load_graph(
            args.graph,
            new_graph=Graph,
            registry=registry,
            max_bytes=args.max_input_size,
            limit_hint=_LIMIT_HINT,
        )
    shown, fetches = fetches, [renamed.get(name, name) for name in fetches]
    for name in fetches:
        _check_fetch(graph, name, init=args.init, writing=bool(args.out))
    feeds = {
        name.removesuffix(":0"): _load_array(name.removesuffix(":0"), path, args.max_input_size)
        for name, path in feed_files.items()
    }
    for name, value in feeds.items():
        _check_feed_file(graph, name, feed_files[_tensor_key(name)], value)
    with Session(graph, _config(args, labels, memory_limit, disabled)) as session:
        if args.explain:
            console.print(session.explain(fetches, feeds or None))
        for node in args.init:  # e.g. the variables' initializer, in this same session,
            # with the feeds: an initial value may be computed from a fed placeholder
            session.run([], feeds or None, RunOptions(timeout_s=args.timeout), targets=[node])
        metadata = RunMetadata()
        options = RunOptions(trace=args.trace is not None, timeout_s=args.timeout)
        started = time.perf_counter()
        values = session.run(fetches, feeds, options, metadata)
        elapsed = time.perf_counter() - started
    if args.trace is not None:
        metadata.write_trace(args.trace)
        console.print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    _write_results(console, plan, shown, values)
    copied = metadata.total_bytes_copied()
    console.print(f"ran in {elapsed * 1e3:.2f} ms; {copied} bytes moved between memories")
    return EXIT_OK


def _handler(registry: Registry, args: argparse.Namespace) -> int:
    return run_command(
        lambda: _run(registry, args), failed="the run failed: ", usage=(ResourceExhaustedError,)
    )


def add_run_parser(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run a saved graph (GraphDef JSON) with feeds from .npy files",
        description="Run a graph saved with Graph.save(), feeding .npy files and fetching "
        "tensors by name.",
    )
    run.add_argument(
        "graph",
        metavar="GRAPH.json",
        help="a graph saved with Graph.save(), a TF GraphDef (.pb, .pbtxt, or any file "
        "that is not kernloom JSON) or an ONNX model (.onnx)",
    )
    run.add_argument(
        "--feed",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="feed a tensor (once per tensor)",
    )
    run.add_argument(
        "--fetch", action="append", required=True, metavar="NAME", help="a tensor to fetch"
    )
    run.add_argument(
        "--out",
        action="append",
        default=[],
        metavar="FILE",
        help="one .npy per fetch, or one .npz for all; written exactly as named; without "
        "it values are printed",
    )
    run.add_argument(
        "--force", action="store_true", help="replace --out and --trace files that exist"
    )
    run.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="OP=LABEL",
        help="use the kernel with this label for every node of OP (once per op)",
    )
    run.add_argument(
        "--device-filter",
        action="append",
        type=non_empty,
        default=[],
        metavar="DEVICE",
        help="only use devices matching this (partial) name, e.g. CPU",
    )
    run.add_argument(
        "--soft-placement",
        action="store_true",
        help="place a node elsewhere when its requested device cannot run it",
    )
    run.add_argument(
        "--trace", action=Once, metavar="TRACE.json", help="write a Chrome/Perfetto trace"
    )
    run.add_argument(
        "--init",
        action="append",
        default=[],
        metavar="NODE",
        help="run this node first, in the same session and with the feeds: the graph's "
        "variables initializer, e.g. init (repeatable, in order)",
    )
    run.add_argument(
        "--memory-limit",
        action="append",
        default=[],
        metavar="TYPE=SIZE",
        help="the most memory each device of TYPE may hold, e.g. CPU=512M (once per type)",
    )
    run.add_argument(
        "--explain",
        action="store_true",
        help="say where each node runs and why, and what the graph optimizer did",
    )
    add_pass_flags(run, off_switch=True)
    run.add_argument(
        "--timeout",
        action=Once,
        type=positive_seconds,
        metavar="SECONDS",
        help="fail after this long",
    )
    run.add_argument(
        "--inter-op-threads",
        action=Once,
        type=int_in_range(1, MAX_THREADS),
        metavar="N",
        help=f"threads for one step (1 to {MAX_THREADS})",
    )
    run.add_argument(
        "--max-input-size",
        action=Once,
        type=byte_size,
        default=DEFAULT_MAX_READ_BYTES,
        metavar="SIZE",
        help="refuse graph and feed files larger than this (default 2G; e.g. 512M, 8G)",
    )
    run.set_defaults(handler=_handler)
