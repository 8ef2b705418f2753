"""Label A/B: a labelled kernel against the default one, on the user's own graph.

``Session.compare_labels(fetches, feed_dict, labels={"MatMul": "einsum"}, runs=N)`` runs the
graph twice over -- once as the session is configured, once with ``labels`` added to its
``kernel_labels`` -- and reports, per node that the labels select a kernel for, which
kernel ran in each variant, the largest absolute and relative difference of its outputs,
and its kernel time in each; and for the whole run, the wall time of each variant over
``runs`` repeated runs (alternating, after a warm-up) with its spread.

Relative differences are ``|labelled - default| / max(|default|, 1e-30)``: a kernel that
gives 1e-7 where the default gives 0 shows as a large relative and a tiny absolute
difference, which is the truth. NaN against NaN is no difference; NaN against a number is
an infinite one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kernloom.errors import InvalidArgumentError, KernloomError
from kernloom.graph.graph import Graph
from kernloom.runtime.session_options import RunMetadata, RunOptions, SessionConfig
from kernloom.runtime.step_stats import StepStats

__all__ = ["LabelComparison", "NodeComparison", "Spread", "compare_sessions", "difference"]

_TINY = 1e-30


class _Session(Protocol):
    """What the comparison needs of ``kernloom.Session`` (not imported: it imports us)."""

    graph: Graph
    config: SessionConfig

    def run(
        self,
        fetches: object,
        feed_dict: Mapping[Any, Any] | None = ...,
        options: RunOptions | None = ...,
        run_metadata: RunMetadata | None = ...,
    ) -> Any: ...

    def make_callable(self, fetches: object, feed_list: Sequence[Any] = ...) -> Any: ...


@dataclass(frozen=True, slots=True)
class Spread:
    """Repeated timings of one variant, in seconds."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def q1(self) -> float:
        return self._quartiles()[0]

    @property
    def q3(self) -> float:
        return self._quartiles()[2]

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def min(self) -> float:
        return min(self.samples, default=float("nan"))

    @property
    def max(self) -> float:
        return max(self.samples, default=float("nan"))

    def _quartiles(self) -> list[float]:
        if len(self.samples) < 2:
            return [self.median] * 3
        return statistics.quantiles(self.samples, n=4, method="inclusive")

    def describe(self) -> str:
        """``1.23 ms (IQR 0.05 ms, min 1.20 ms, max 1.50 ms, 20 runs)``."""
        return (
            f"{_ms(self.median)} (IQR {_ms(self.iqr)}, min {_ms(self.min)}, max {_ms(self.max)}, "
            f"{len(self.samples)} runs)"
        )

    def as_json(self) -> dict[str, float | int]:
        return {
            "median_s": self.median,
            "q1_s": self.q1,
            "q3_s": self.q3,
            "iqr_s": self.iqr,
            "min_s": self.min,
            "max_s": self.max,
            "runs": len(self.samples),
        }


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


@dataclass(frozen=True, slots=True)
class NodeComparison:
    """One node whose kernel the labels change."""

    node: str
    op: str
    label: str
    device: str
    default_kernel: str
    labelled_kernel: str
    max_abs: float | None
    """None when the node's outputs cannot be fetched (inside a loop or an untaken branch):
    its effect shows in the fetches' differences."""
    max_rel: float | None
    default_time: Spread
    labelled_time: Spread


@dataclass(frozen=True, slots=True)
class LabelComparison:
    labels: dict[str, str]
    nodes: tuple[NodeComparison, ...]
    fetch_max_abs: float
    fetch_max_rel: float
    default_time: Spread
    labelled_time: Spread
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """A table for people: per node, the kernels, the differences and kernel times."""
        shown = ", ".join(f"{op}={label}" for op, label in self.labels.items())
        lines = [f"labels {shown}: {len(self.nodes)} node(s) change kernel"]
        for n in self.nodes:
            diff = (
                "not fetchable"
                if n.max_abs is None
                else f"max abs diff {n.max_abs:.3g}, max rel diff {n.max_rel:.3g}"
            )
            lines.append(f"  {n.node} ({n.op}) on {n.device}: {diff}")
            lines.append(f"    default  {n.default_kernel}: {n.default_time.describe()}")
            lines.append(f"    {n.label!r:8} {n.labelled_kernel}: {n.labelled_time.describe()}")
        lines.append(
            f"fetches: max abs diff {self.fetch_max_abs:.3g}, max rel diff {self.fetch_max_rel:.3g}"
        )
        lines.append(f"whole run, default: {self.default_time.describe()}")
        lines.append(f"whole run, labelled: {self.labelled_time.describe()}")
        ratio = self.labelled_time.median / self.default_time.median
        lines.append(f"labelled / default (medians): {ratio:.2f}x")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "nodes": [
                {
                    "node": n.node,
                    "op": n.op,
                    "label": n.label,
                    "device": n.device,
                    "default_kernel": n.default_kernel,
                    "labelled_kernel": n.labelled_kernel,
                    "max_abs_diff": n.max_abs,
                    "max_rel_diff": n.max_rel,
                    "default_kernel_time": n.default_time.as_json(),
                    "labelled_kernel_time": n.labelled_time.as_json(),
                }
                for n in self.nodes
            ],
            "fetch_max_abs_diff": self.fetch_max_abs,
            "fetch_max_rel_diff": self.fetch_max_rel,
            "default_time": self.default_time.as_json(),
            "labelled_time": self.labelled_time.as_json(),
            "notes": list(self.notes),
        }


def difference(labelled: Any, default: Any) -> tuple[float, float]:
    """The largest absolute and relative difference between two values of one shape."""
    a, b = np.asarray(labelled), np.asarray(default)
    if a.shape != b.shape:
        raise InvalidArgumentError(
            f"the labelled kernel's output has shape {a.shape}, the default's {b.shape}"
        )
    if a.size == 0:
        return 0.0, 0.0
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        differs = a != b
        return float(differs.max()), float(differs.max())
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return _integer_difference(a, b)
    wide = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    x, y = a.astype(wide), b.astype(wide)
    both_nan = np.isnan(x) & np.isnan(y)
    with np.errstate(invalid="ignore", over="ignore"):
        absolute = np.where(both_nan, 0.0, np.abs(x - y))
        absolute = np.where(np.isnan(absolute), np.inf, absolute)
        scale = np.maximum(np.nan_to_num(np.abs(y), nan=_TINY), _TINY)
        relative = np.where(absolute == 0, 0.0, absolute / scale)
    return float(absolute.max()), float(np.nan_to_num(relative, nan=np.inf, posinf=np.inf).max())


def _integer_difference(a: Any, b: Any) -> tuple[float, float]:
    """``difference`` of integer outputs, exact: through float64 the int64 values
    2**60 + 1 and 2**60 + 4 were equal (a kernel that computes int64 in float64 loses
    exactly such low bits, which an A/B must show). ``|a - b|`` is taken as the unsigned
    64-bit ``max - min`` (two's complement makes that exact for any two int64 or uint64
    values)."""
    if a.dtype.kind != b.dtype.kind:  # signed against unsigned: Python's integers
        gap = np.abs(a.astype(object) - b.astype(object))
    else:
        wide = np.int64 if a.dtype.kind == "i" else np.uint64
        x, y = a.astype(wide), b.astype(wide)
        gap = np.maximum(x, y).astype(np.uint64) - np.minimum(x, y).astype(np.uint64)
    absolute = gap.astype(np.float64)
    scale = np.maximum(np.abs(b.astype(np.float64)), _TINY)
    return float(absolute.max()), float((absolute / scale).max())


def _labelled_nodes(stats: StepStats, labels: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Node -> (label, device) for the nodes the labels selected a kernel for."""
    return {
        s.node: (s.label, s.device)
        for s in stats.nodes
        if s.op in labels and s.label == labels[s.op]
    }


def _traced(session: _Session, fetches: object, feeds: Mapping[Any, Any] | None) -> StepStats:
    metadata = RunMetadata()
    session.run(fetches, feeds, RunOptions(trace=True), metadata)
    assert metadata.step_stats is not None
    return metadata.step_stats


def _kernel(stats: StepStats, node: str) -> str:
    """``kernloom_cpu_numpy.kernels.labelled.matmul_einsum (cpu_numpy)``."""
    record = stats.for_node(node)
    return f"{record.kernel_class or record.kernel} ({record.plugin or 'unknown plugin'})"


def _node_outputs(
    session: _Session, names: list[str], feeds: Mapping[Any, Any] | None
) -> dict[str, list[Any] | None]:
    """Each node's outputs, or None where they cannot be fetched."""
    tensors = {n: [t.name for t in session.graph.node(n).outputs] for n in names}
    flat = [t for n in names for t in tensors[n]]
    try:
        values = iter(session.run(flat, feeds))
        return {n: [next(values) for _ in tensors[n]] for n in names}
    except KernloomError:
        found: dict[str, list[Any] | None] = {}
        for name in names:
            try:
                found[name] = list(session.run(tensors[name], feeds))
            except KernloomError:
                found[name] = None
        return found


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [v for k in sorted(value) for v in _flatten(value[k])]
    if isinstance(value, list | tuple):
        return [v for item in value for v in _flatten(item)]
    return [value]


def _max_difference(labelled: list[Any], default: list[Any]) -> tuple[float, float]:
    worst = (0.0, 0.0)
    for a, b in zip(labelled, default, strict=True):
        absolute, relative = difference(a, b)
        worst = (max(worst[0], absolute), max(worst[1], relative))
    return worst


def compare_sessions(
    default: _Session,
    labelled: _Session,
    fetches: object,
    feed_dict: Mapping[Any, Any] | None,
    labels: Mapping[str, str],
    *,
    runs: int = 20,
) -> LabelComparison:
    """Compare two sessions of one graph that differ only in their ``kernel_labels``."""
    if runs < 1:
        raise InvalidArgumentError(f"compare_labels: runs must be >= 1, got {runs}")
    if not labels:
        raise InvalidArgumentError("compare_labels: give labels, e.g. labels={'MatMul': 'einsum'}")
    feeds = dict(feed_dict or {})
    default_stats, labelled_stats = (
        _traced(default, fetches, feeds),
        _traced(labelled, fetches, feeds),
    )
    chosen = _labelled_nodes(labelled_stats, labels)
    notes = []
    missing = sorted(set(labels) - {default.graph.node(n).op for n in chosen})
    if missing:
        notes.append(
            f"no node of {', '.join(missing)} runs for these fetches with the label asked for "
            f"(a node that asks for a label of its own keeps it)"
        )
    names = sorted(chosen)
    default_outputs = _node_outputs(default, names, feeds)
    labelled_outputs = _node_outputs(labelled, names, feeds)

    # Timing: alternate the variants so that drift in the machine hits both alike.
    call_a = default.make_callable(fetches, list(feeds))
    call_b = labelled.make_callable(fetches, list(feeds))
    values = list(feeds.values())
    result_a, result_b = call_a(*values), call_b(*values)  # warm-up, and the fetches to compare
    times_a: list[float] = []
    times_b: list[float] = []
    for _ in range(runs):
        for call, times in ((call_a, times_a), (call_b, times_b)):
            started = time.perf_counter()
            call(*values)
            times.append(time.perf_counter() - started)
    kernel_a: dict[str, list[float]] = {n: [] for n in names}
    kernel_b: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(min(runs, 10)):
        for session, kernel_times in ((default, kernel_a), (labelled, kernel_b)):
            for s in _traced(session, fetches, feeds).nodes:
                if s.node in kernel_times:
                    kernel_times[s.node].append(s.duration_us / 1e6)

    nodes = []
    for name in names:
        label, device = chosen[name]
        a, b = labelled_outputs[name], default_outputs[name]
        diff = _max_difference(a, b) if a is not None and b is not None else (None, None)
        nodes.append(
            NodeComparison(
                node=name,
                op=default.graph.node(name).op,
                label=label,
                device=device,
                default_kernel=_kernel(default_stats, name),
                labelled_kernel=_kernel(labelled_stats, name),
                max_abs=diff[0],
                max_rel=diff[1],
                default_time=Spread(tuple(kernel_a[name])),
                labelled_time=Spread(tuple(kernel_b[name])),
            )
        )
    fetch_abs, fetch_rel = _max_difference(_flatten(result_b), _flatten(result_a))
    return LabelComparison(
        labels=dict(labels),
        nodes=tuple(nodes),
        fetch_max_abs=fetch_abs,
        fetch_max_rel=fetch_rel,
        default_time=Spread(tuple(times_a)),
        labelled_time=Spread(tuple(times_b)),
        notes=tuple(notes),
    )
