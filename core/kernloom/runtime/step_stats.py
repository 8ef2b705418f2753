"""Step statistics (TensorFlow's ``StepStats``) and their Chrome/Perfetto trace.

Collected only when a run asks for a trace (``RunOptions(trace=True)``): the executor's
hot path then pays one ``is not None`` test per node. Each record says which node ran
where, on which thread, when, with which kernel and label, and what it produced.

``chrome_trace(stats)`` is the JSON object format of the Trace Event specification,
which ``chrome://tracing``, https://ui.perfetto.dev and speedscope open: one process per
device, one thread row per OS thread, one complete ("X") event per node.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    from kernloom.framework.device import Device
    from kernloom.runtime.graph_view import NodeItem

__all__ = ["NodeExecStats", "StepStats", "StepStatsCollector", "chrome_trace", "write_trace"]


@dataclass(frozen=True, slots=True)
class NodeExecStats:
    node: str
    op: str
    kernel: str
    label: str
    device: str
    thread_id: int
    thread_name: str
    start_ns: int
    end_ns: int
    output_shapes: tuple[tuple[int, ...] | None, ...]
    output_bytes: int
    forwarded: tuple[tuple[int, int], ...] = ()
    """(input, output) pairs whose buffer the kernel reused."""
    plugin: str = ""
    """The plugin that registered the kernel (its entry-point name)."""
    kernel_class: str = ""
    """The kernel's module and qualified name (``kernel`` is the short name)."""
    fused_from: tuple[str, ...] = ()
    """For a node the graph optimizer built: the user's nodes it replaces."""

    @property
    def duration_us(self) -> float:
        return (self.end_ns - self.start_ns) / 1e3


@dataclass(frozen=True, slots=True)
class StepStats:
    step_id: int
    start_ns: int
    nodes: tuple[NodeExecStats, ...] = field(default_factory=tuple)

    def for_node(self, name: str) -> NodeExecStats:
        for stats in self.nodes:
            if stats.node == name:
                return stats
        raise KeyError(f"node {name!r} did not run in step {self.step_id}")

    def devices(self) -> list[str]:
        return sorted({s.device for s in self.nodes})


def _shape(device: Device, value: Any) -> tuple[int, ...] | None:
    if device.output_dtype(value) is None:  # a dead output
        return None
    return tuple(int(d) for d in device.value_shape(value).as_tuple())


def _nbytes(device: Device, value: Any) -> int:
    return 0 if device.output_dtype(value) is None else device.value_nbytes(value)


@final
class _Record:
    __slots__ = ("collector", "device", "item", "start_ns", "thread")

    def __init__(self, collector: StepStatsCollector, item: NodeItem, device: Device) -> None:
        self.collector = collector
        self.item = item
        self.device = device
        self.thread = threading.current_thread()
        self.start_ns = time.perf_counter_ns()

    def finish(self, outputs: Sequence[Any], forwarded: tuple[tuple[int, int], ...]) -> None:
        end = time.perf_counter_ns()
        node = self.item.node
        kernel = self.item.kernel
        # The kernel's own label: a ``kl.kernel_label`` scope's wish is settled at lookup.
        label = kernel.signature.kernel_def.label
        self.collector.add(
            NodeExecStats(
                node=node.name,
                op=node.op,
                kernel=type(kernel).__qualname__,
                label=label,
                device=self.device.name,
                thread_id=self.thread.ident or 0,
                thread_name=self.thread.name,
                start_ns=self.start_ns,
                end_ns=end,
                output_shapes=tuple(_shape(self.device, v) for v in outputs),
                output_bytes=sum(_nbytes(self.device, v) for v in outputs),
                forwarded=forwarded,
                plugin=kernel.origin.plugin if kernel.origin is not None else "",
                kernel_class=f"{type(kernel).__module__}.{type(kernel).__qualname__}",
                fused_from=tuple(map(str, node.attrs.get("_fused_from", ()))),
            )
        )


@final
class StepStatsCollector:
    """Thread-safe: the executors of one step add to it from every thread."""

    def __init__(self, step_id: int = 0) -> None:
        self.step_id = step_id
        self.start_ns = time.perf_counter_ns()
        self._lock = threading.Lock()
        self._nodes: list[NodeExecStats] = []

    def start(self, item: NodeItem, device: Device) -> _Record:
        return _Record(self, item, device)

    def add(self, stats: NodeExecStats) -> None:
        with self._lock:
            self._nodes.append(stats)

    def finalize(self) -> StepStats:
        with self._lock:
            nodes = tuple(sorted(self._nodes, key=lambda s: s.start_ns))
        return StepStats(self.step_id, self.start_ns, nodes)


def chrome_trace(stats: StepStats) -> dict[str, Any]:
    """The step as a Trace Event Format object (times in microseconds from step start)."""
    events: list[dict[str, Any]] = []
    pids = {device: i + 1 for i, device in enumerate(stats.devices())}
    threads: dict[tuple[int, int], str] = {}
    for device, pid in pids.items():
        events.append(
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": device}}
        )
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
    for node in stats.nodes:
        pid = pids[node.device]
        threads.setdefault((pid, node.thread_id), node.thread_name)
        events.append(
            {
                "ph": "X",
                "name": node.node,
                "cat": node.op,
                "pid": pid,
                "tid": node.thread_id,
                "ts": (node.start_ns - stats.start_ns) / 1e3,
                "dur": max(node.end_ns - node.start_ns, 1) / 1e3,
                "args": {
                    "op": node.op,
                    "kernel": node.kernel,
                    "kernel_class": node.kernel_class,
                    "plugin": node.plugin,
                    "label": node.label,
                    "output_shapes": [
                        list(s) if s is not None else None for s in node.output_shapes
                    ],
                    "output_bytes": node.output_bytes,
                    "forwarded_inputs": [i for i, _ in node.forwarded],
                    **({"fused_from": list(node.fused_from)} if node.fused_from else {}),
                },
            }
        )
    for (pid, tid), name in threads.items():
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
        )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"step_id": stats.step_id}}


def write_trace(stats: StepStats, path: str | os.PathLike[str]) -> None:
    """Write the step's Chrome trace to ``path`` (open it in https://ui.perfetto.dev)."""
    from kernloom.fileio import atomic_write_text

    atomic_write_text(path, json.dumps(chrome_trace(stats)))
