"""``kernloom run GRAPH.json``: run a saved graph from the shell.

Every problem with an argument or a file is a usage error (exit 2) that names the
argument or file and says what would fix it; a failure while running is exit 1.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from kernloom.errors import InvalidArgumentError, KernloomError, NotFoundError
from kernloom.graph.graph import Graph
from kernloom.registry import Registry
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import RunMetadata, RunOptions, SessionConfig

__all__ = ["add_run_parser"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad argument or file: reported as ``error: ...`` with exit code 2."""


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _pairs(values: list[str], flag: str, example: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise UsageError(f"{flag} {value!r}: expected NAME=VALUE, e.g. {flag} {example}")
        pairs.append((name, rest))
    return pairs


def _load_array(name: str, path: str) -> np.ndarray[Any, Any]:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--feed {name}={path}: no such file")
    try:
        value = np.load(file, allow_pickle=False)
    except ValueError as exc:
        raise UsageError(
            f"--feed {name}={path}: not a .npy file of plain numbers ({exc}); save it with "
            f"numpy.save"
        ) from None
    if isinstance(value, np.lib.npyio.NpzFile):
        raise UsageError(f"--feed {name}={path}: an .npz archive; feed one .npy per tensor")
    return np.asarray(value)


def _outputs(args: argparse.Namespace) -> list[Path] | Path | None:
    outs = [Path(p) for p in args.out]
    if not outs:
        return None
    if len(outs) == 1 and outs[0].suffix == ".npz":
        return outs[0]
    if len(outs) != len(args.fetch):
        raise UsageError(
            f"{len(args.fetch)} --fetch but {len(outs)} --out: give one .npy per fetch, or "
            f"one .npz for all of them"
        )
    for out in outs:
        if not out.parent.is_dir():
            raise UsageError(f"--out {out}: directory {out.parent} does not exist")
    return outs


def _run(registry: Registry, args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True)
    graph = Graph.load(args.graph, registry=registry)
    feeds = {name: _load_array(name, path) for name, path in _pairs(args.feed, "--feed", "x=x.npy")}
    labels = dict(_pairs(args.label, "--label", "MatMul=einsum"))
    outs = _outputs(args)
    config = SessionConfig(
        kernel_labels=labels,
        device_filters=tuple(args.device_filter),
        inter_op_threads=args.inter_op_threads,
    )
    with Session(graph, config) as session:
        if args.explain:
            console.print(session.explain(args.fetch, feeds or None), markup=False)
        metadata = RunMetadata()
        options = RunOptions(trace=args.trace is not None, timeout_s=args.timeout)
        started = time.perf_counter()
        values = session.run(list(args.fetch), feeds, options, metadata)
        elapsed = time.perf_counter() - started
    if args.trace is not None:
        metadata.write_trace(args.trace)
        console.print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    if isinstance(outs, Path):
        np.savez(outs, **dict(zip(args.fetch, values, strict=True)))
        console.print(f"{', '.join(args.fetch)} written to {outs}")
    elif outs is not None:
        for name, value, out in zip(args.fetch, values, outs, strict=True):
            np.save(out, value)
            console.print(f"{name} ({value.dtype}, shape {list(value.shape)}) written to {out}")
    else:
        for name, value in zip(args.fetch, values, strict=True):
            console.print(f"{name} ({value.dtype}, shape {list(value.shape)}):", markup=False)
            console.print(np.array2string(value, threshold=50), markup=False)
    copied = metadata.total_bytes_copied()
    console.print(f"ran in {elapsed * 1e3:.2f} ms; {copied} bytes moved between memories")
    return EXIT_OK


def _handler(registry: Registry, args: argparse.Namespace) -> int:
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        return _run(registry, args)
    except UsageError as exc:
        errors.print(f"error: {exc}", markup=False)
        return EXIT_USAGE
    except (InvalidArgumentError, NotFoundError) as exc:
        # Bad graph files, unknown fetch or feed names, mismatched feeds, bad labels.
        errors.print(f"error: {exc}", markup=False)
        return EXIT_USAGE
    except KernloomError as exc:
        errors.print(f"error: the run failed: {exc}", markup=False)
        return EXIT_FAILED


def add_run_parser(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run a saved graph (GraphDef JSON) with feeds from .npy files",
        description="Run a graph saved with Graph.save(), feeding .npy files and fetching "
        "tensors by name.",
    )
    run.add_argument("graph", metavar="GRAPH.json", help="a graph saved with Graph.save()")
    run.add_argument(
        "--feed", action="append", default=[], metavar="NAME=FILE.npy", help="feed a tensor"
    )
    run.add_argument(
        "--fetch", action="append", required=True, metavar="NAME", help="a tensor to fetch"
    )
    run.add_argument(
        "--out",
        action="append",
        default=[],
        metavar="FILE",
        help="one .npy per fetch, or one .npz for all; without it values are printed",
    )
    run.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="OP=LABEL",
        help="use the kernel with this label for every node of OP",
    )
    run.add_argument(
        "--device-filter",
        action="append",
        default=[],
        metavar="DEVICE",
        help="only use devices matching this (partial) name, e.g. CPU",
    )
    run.add_argument("--trace", metavar="TRACE.json", help="write a Chrome/Perfetto trace")
    run.add_argument("--explain", action="store_true", help="say where each node runs and why")
    run.add_argument(
        "--timeout", type=_positive(float), metavar="SECONDS", help="fail after this long"
    )
    run.add_argument(
        "--inter-op-threads", type=_positive(int), metavar="N", help="threads for one step"
    )
    run.set_defaults(handler=_handler)
