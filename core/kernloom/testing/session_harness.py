"""Run one op through a whole session: placer, partitioner, executor, copies.

``run_kernel`` calls a kernel directly; a device vendor also needs to know that the op
works when the runtime places it, moves its inputs onto the device and its outputs off
it. ``run_op`` builds a graph of placeholders feeding one node named ``op``, runs it in a
fresh session with tracing on, and returns the fetched outputs with the run's metadata
(placement, copies, step stats) to assert on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kernloom.dtypes import as_dtype
from kernloom.framework.node_def import KERNEL_LABEL_ATTR
from kernloom.graph.builder import apply_op, placeholder
from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.registry import Registry
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import RunMetadata, RunOptions

__all__ = ["run_op"]


def run_op(
    registry: Registry,
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any] | None = None,
    *,
    label: str = "",
    device: str | None = None,
) -> tuple[list[np.ndarray[Any, Any]], RunMetadata]:
    """Feed ``inputs`` (a list item is an ``N * T`` argument) into one ``op`` node and fetch
    its outputs. ``device`` requests a device for the node; ``label`` a kernel label."""
    graph = Graph(registry)
    feeds: dict[Tensor, np.ndarray[Any, Any]] = {}

    def fed(value: Any) -> Tensor:
        array = np.asarray(value)
        tensor = placeholder(as_dtype(array.dtype), array.shape, graph=graph)
        feeds[tensor] = array
        return tensor

    full = dict(attrs or {})
    if label:
        full[KERNEL_LABEL_ATTR] = label
    with graph.as_default():
        args = [[fed(v) for v in item] if isinstance(item, list) else fed(item) for item in inputs]
        scope = graph.device(device) if device else contextlib.nullcontext()
        with scope:
            out = apply_op(op, args, full, name="op")
    fetches = list(out) if isinstance(out, tuple) else [out]
    metadata = RunMetadata()
    with Session(graph, registry=registry) as session:
        values = session.run(fetches, feeds, options=RunOptions(trace=True), run_metadata=metadata)
    return [np.asarray(v) for v in values], metadata
