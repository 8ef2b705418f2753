"""``Session``: TensorFlow's ``DirectSession`` -- runs a graph on this process's devices.

The first run of each (feeds, fetches, targets) signature rewrites the graph for it
(``subgraph``), places and partitions it, and compiles one executor per device; later
runs of the signature reuse all of that. Kernels are cached per session in the
``OpSegment``, so signatures that share nodes share their kernels (and constants).

A run: the feeds are checked and moved to their ``_Arg``'s device, every executor starts
on a fresh ``Step`` (the caller's thread plus the inter-op pool), an ``ExecutorBarrier``
joins them, and the ``_Retval`` values are copied to host numpy arrays in the structure of
the fetches. ``run`` is safe to call from many threads at once.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final, final

import numpy as np

from kernloom.errors import (
    CancelledError,
    DeadlineExceededError,
    DeviceError,
    Hint,
    InvalidArgumentError,
    KernloomError,
    NotFoundError,
    ResourceExhaustedError,
    Setting,
    did_you_mean,
    short_repr,
)
from kernloom.framework.cancellation import CancellationManager
from kernloom.framework.device import Device, DeviceOptions
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.device_name import parse_device_name
from kernloom.framework.gc_pause import gc_paused
from kernloom.framework.op_kernel import CallFrame, OpKernel
from kernloom.framework.op_segment import OpSegment
from kernloom.framework.resource_mgr import DEFAULT_CONTAINER, ResourceMgr
from kernloom.framework.variable import Var
from kernloom.graph.graph import Graph, Node, get_default_graph
from kernloom.graph.tensor import Tensor
from kernloom.optimizer import OptimizerReport, check_pass_names, optimize_step_graph
from kernloom.optimizer import unchanged_nodes as _unchanged_nodes
from kernloom.registry import Registry, registry_of
from kernloom.runtime.compiled_line import LineProgram
from kernloom.runtime.control_flow import has_control_flow
from kernloom.runtime.device_copies import copy_fault, host_copy_problem, raised
from kernloom.runtime.executor import Executor, ExecutorBarrier, RunArgs
from kernloom.runtime.fetches import check_graph_of
from kernloom.runtime.kernel_choice import describe_kernels
from kernloom.runtime.label_compare import LabelComparison, compare_sessions
from kernloom.runtime.partition import PartitionResult, partition
from kernloom.runtime.placer import Placement, Placer
from kernloom.runtime.rendezvous import CopyStats, Rendezvous
from kernloom.runtime.run_plan import RunCallable, RunPlan, signature_key
from kernloom.runtime.running_kernels import running_kernels
from kernloom.runtime.session_options import RunMetadata, RunOptions, SessionConfig
from kernloom.runtime.step import InterOpPool, Step
from kernloom.runtime.step_stats import StepStatsCollector
from kernloom.runtime.subgraph import StepGraph, build_step_graph

__all__ = ["CLIENT", "Session"]

CLIENT: Final = "client"
"""The caller's side of feed and fetch copies in ``RunMetadata.copies``."""

_log = logging.getLogger("kernloom.session")
_DEFAULT_OPTIONS: Final = RunOptions()
_MAX_CACHED_PLANS: Final = 1024
_OVERRIDES: Final = "SessionConfig(factory_overrides=...)"
"""How the session's factory selections are named in the registry's messages."""
_handles = itertools.count()


@dataclass(frozen=True)
class _Compiled:
    """Everything one signature needs, built once."""

    step_graph: StepGraph
    placement: Placement
    partitions: PartitionResult
    executors: tuple[Executor, ...]
    arg_devices: tuple[Device, ...]
    retval_devices: tuple[Device, ...]
    send_recv_pairs: int
    inline: LineProgram | None
    """The program that runs a whole step on the caller's thread: the step has only one
    executor, with a straight-line program and nothing two threads could run at once."""
    optimizer: OptimizerReport | None = None
    """What the graph optimizer did to the step graph (None when it is off)."""
    may_turn_inline: Executor | None = None
    """The one executor of a step that is not ``inline`` only because two of its nodes
    marked expensive could run at once: measured costs may turn them cheap, and the
    step inline (``Executor.parallel_inline``)."""
    retval_dtypes: tuple[np.dtype[Any], ...] = ()
    """Per fetch, the numpy dtype of the fetched tensor: what ``copy_to_host`` must give."""
    retval_shapes: tuple[tuple[int, ...] | None, ...] = ()
    """Per fetch, the tensor's shape where the graph knows it fully (else None): a
    ``copy_to_host`` result of that shape needs no question to the device."""


def _fetched_types(
    step_graph: StepGraph,
) -> tuple[tuple[np.dtype[Any], ...], tuple[tuple[int, ...] | None, ...]]:
    """``_Compiled.retval_dtypes`` and ``retval_shapes`` of ``step_graph``."""
    tensors = [step_graph.graph.node(name).inputs[0] for name in step_graph.retval_nodes]
    dtypes = tuple(t.dtype.numpy_dtype for t in tensors)
    shapes = tuple(t.shape.as_tuple() if t.shape.is_fully_defined() else None for t in tensors)
    return dtypes, shapes


def _abort_rendezvous(rendezvous: Rendezvous, step: Step) -> None:
    rendezvous.abort(step.error or KernloomError("the step was cancelled"))


def _results(
    compiled: _Compiled, frame: CallFrame, copies: CopyStats | None
) -> list[np.ndarray[Any, Any]]:
    """The fetched values as host arrays the caller owns (device-to-client copies counted
    in ``copies``).

    A value the step allocated and nothing else holds is handed over as it is; a value
    someone else can reach -- a variable's storage, a constant, the caller's own feed
    (``Identity(x)``), a view of any of these, a read-only array -- is copied, so that
    writing into a fetched array never changes the session's state or the caller's
    inputs, and a later run never changes a fetched array (TensorFlow's fetches are
    copies too). A value in host memory on a device whose memory is not the host's (a
    host-memory output, such as a ``Shape``'s) is taken as it is, as ``_Send`` does.

    What a device's ``copy_to_host`` returns is checked -- a numpy array of the value's
    dtype and shape -- and handed over only when nothing else can reach its memory: an
    array that owns its memory, is writeable and is held by nobody but this function (not
    the device's own buffer, nor a view of it: a unified-memory device may return one)."""
    results = []
    retvals = frame.retvals
    for index, device in enumerate(compiled.retval_devices):
        value = retvals[index]
        if value is None:
            name = compiled.step_graph.fetches[index]
            raise InvalidArgumentError(
                f"fetched tensor {name!r} has no value in this run: it is dead (computed "
                f"only on the branch of a kl.cond that was not taken). Fetch the cond's "
                f"output instead."
            )
        if device.memory_is_host or device.is_host_value(value):
            if type(value) is not np.ndarray:
                value = np.array(value)  # a fresh array (also from a numpy scalar)
            elif _getrefcount(value) > _EXCLUSIVE or not _is_own_buffer(value):
                value = value.copy()
            retvals[index] = None
            results.append(value)
            continue
        try:
            host = device.copy_to_host(value)
        except KernloomError:
            raise
        except Exception as exc:
            raise _copy_error(compiled, "fetch", index, raised(exc)) from exc
        dtype = compiled.retval_dtypes[index]
        if (
            not isinstance(host, np.ndarray)
            or (host.dtype is not dtype and host.dtype != dtype)
            or host.shape != compiled.retval_shapes[index]
        ):
            _check_fetched(compiled, index, host, value)
        if copies is not None:
            copies.record(device.name, CLIENT, int(host.nbytes))
        if type(host) is not np.ndarray or _getrefcount(host) > _FRESH or not _is_own_buffer(host):
            host = np.array(host)  # e.g. the device's own memory, or a view of it
        results.append(host)
    return results


_getrefcount: Final = sys.getrefcount
_EXCLUSIVE: Final = 3
"""``getrefcount`` of a fetched value that only the step's call frame holds: the frame's
slot, ``_results``' local and the call's own argument."""


def _local_refcount() -> int:
    fresh = np.empty(0)
    return _getrefcount(fresh)


_FRESH: Final = _local_refcount()
"""``getrefcount`` of an array that nothing but a function's local holds (the local and
the call's own argument: 2 on CPython 3.11), measured: the count of a ``copy_to_host``
result that the device keeps no reference to."""


def _check_fetched(compiled: _Compiled, index: int, host: object, value: object) -> None:
    """Raise the ``DeviceError`` for fetch ``index``'s ``copy_to_host`` of ``value`` that
    returned ``host``, unless ``host`` is a numpy array of the fetch's dtype and of the
    shape the device gives ``value`` (``_results`` compares it with the graph's shape
    first: this runs where that is not fully known, or differs)."""
    device = compiled.retval_devices[index]
    try:
        shape = device.value_shape(value).as_tuple()
    except KernloomError:
        raise
    except Exception as exc:
        fault = copy_fault(
            f"fetch {compiled.step_graph.fetches[index]!r}",
            f"copying it off {device.name}",
            device,
            "value_shape",
            raised(exc),
            "the fetch",
        )
        raise fault from exc
    problem = host_copy_problem(host, compiled.retval_dtypes[index], shape)
    if problem is not None:
        raise _copy_error(compiled, "fetch", index, problem)


def _is_own_buffer(value: np.ndarray[Any, Any]) -> bool:
    """Whether ``value`` owns its memory and may be written: not a view of something else
    (a feed, a variable, a constant) and not read-only."""
    flags = value.flags
    return bool(flags.owndata and flags.writeable)


_FEED_DICT: Final = "a dict from tensors (or tensor names) to values, or None"


def _check_type(where: str, argument: str, value: object, kind: Any, expected: str) -> None:
    """A ``TypeError`` naming ``argument`` when ``value`` is neither None nor a ``kind``."""
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"{where}: {argument} must be {expected}, got {_kind_of(value)}")


def _check_run_arguments(
    where: str, options: object, run_metadata: object, cancellation: object
) -> None:
    """A ``TypeError`` naming the argument of a run (``Session.run`` or a callable from
    ``make_callable``) that is not what it must be."""
    if options is not None and type(options) is not RunOptions:
        _check_type(where, "options", options, RunOptions, "a kl.RunOptions or None")
    if run_metadata is not None:
        _check_type(where, "run_metadata", run_metadata, RunMetadata, "a kl.RunMetadata or None")
    if cancellation is not None:
        _check_type(
            where,
            "cancellation",
            cancellation,
            CancellationManager,
            "a kl.CancellationManager or None",
        )


def _kind_of(value: object) -> str:
    return f"{type(value).__name__} {short_repr(value)}"


def _feed_out_of_memory(
    compiled: _Compiled, index: int, fed: list[np.ndarray[Any, Any]], exc: MemoryError
) -> ResourceExhaustedError:
    """A feed that its device has no room for, named with the device and the bytes."""
    device = compiled.arg_devices[index]
    return ResourceExhaustedError(
        f"feed for {compiled.step_graph.feeds[index]!r}: out of memory on {device.name} "
        f"copying its {int(fed[index].nbytes)} bytes: {exc}"
    )


def _copy_error(compiled: _Compiled, kind: str, index: int, problem: str) -> DeviceError:
    """A feed (``kind`` "feed") or fetch ("fetch") whose copy the device's own code failed
    (``problem``: what the call did, ``device_copies.raised(exc)`` for an exception): the
    device plugin's fault, named with the device and its plugin."""
    if kind == "feed":
        name, device = compiled.step_graph.feeds[index], compiled.arg_devices[index]
        call, moving = "copy_from_host", f"copying it onto {device.name}"
    else:
        name, device = compiled.step_graph.fetches[index], compiled.retval_devices[index]
        call, moving = "copy_to_host", f"copying it off {device.name}"
    return copy_fault(f"{kind} {name!r}", moving, device, call, problem, f"the {kind}")


def _closed_error() -> KernloomError:
    return KernloomError(
        "this session is closed (Session.close() was called); create a new kl.Session"
    )


def _cancelled_by_close() -> CancelledError:
    return CancelledError("session closed: Session.close() cancelled this run")


def _start_pool(workers: int) -> InterOpPool:
    """The inter-op pool; a failure to start its threads is a clear error (the pool stops
    the threads it did start)."""
    try:
        return InterOpPool(workers)
    except RuntimeError as exc:  # "can't start new thread": the process hit a limit
        raise ResourceExhaustedError(
            f"could not start the session's {workers} inter-op thread(s) ({exc}).",
            hint=Hint(
                f"Ask for fewer than {workers + 1} threads ({{threads}}).",
                threads=Setting("inter_op_threads"),
            ),
        ) from exc


def _filter_devices(devices: DeviceMgr, filters: tuple[str, ...]) -> DeviceMgr:
    if not filters:
        return devices
    kept: list[Device] = []
    for text in filters:
        source = Hint("(from {filter})", filter=Setting("device_filter", value=text))
        try:
            spec = parse_device_name(text)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"device filter: {exc}", hint=source) from None
        matched = [d for d in devices if spec.matches(d.spec)]
        if not matched:
            names = [d.name for d in devices]
            raise NotFoundError(
                f"device filter {text!r} matches no device; devices: {', '.join(names)}."
                + did_you_mean(text, [*names, *devices.device_types()]),
                hint=source,
            )
        kept.extend(d for d in matched if d not in kept)
    order = {d.name: i for i, d in enumerate(devices)}
    kept.sort(key=lambda d: order[d.name])
    for device in devices:
        if device not in kept:
            device.close()
    return DeviceMgr(kept)


@final
class Session:
    """Runs ``graph`` (the default graph if None); close it, or use it in a ``with``."""

    def __init__(
        self,
        graph: Graph | None = None,
        config: SessionConfig | None = None,
        *,
        registry: Registry | None = None,
    ) -> None:
        _check_type("kl.Session", "graph", graph, Graph, "a kl.Graph or None")
        _check_type("kl.Session", "config", config, SessionConfig, "a kl.SessionConfig or None")
        _check_type(
            "kl.Session", "registry", registry, Registry, "a kernloom.plugin.Registry or None"
        )
        self.graph = graph if graph is not None else get_default_graph()
        self.config = config if config is not None else SessionConfig()
        self.registry = registry if registry is not None else registry_of(self.graph.registry)
        self._closed = True  # until everything below exists: close() then has nothing to do
        self._check_labels()
        check_pass_names(self.config.disabled_passes, self.registry.graph_passes)
        device_options = self.config.device_options()
        self._check_device_types(device_options)
        devices = self.registry.create_devices(device_options, source=_OVERRIDES)
        try:
            self.devices = _filter_devices(devices, self.config.device_filters)
            self._pool = _start_pool(self.config.resolved_inter_op_threads() - 1)
        except BaseException:
            devices.close()
            raise
        self._owns_devices = True
        """Whether closing the session closes its devices (not a ``_sibling``'s)."""
        self._start()

    def _start(self) -> None:
        """The rest of a new session, once its graph, config, registry, devices and
        inter-op pool are set; it is open from here on."""
        self.handle = f"session-{next(_handles)}"
        self.resource_mgr = ResourceMgr()
        self._segment = OpSegment()
        self._segment.add_hold(self.handle)
        self._lock = threading.Lock()
        self._compiled: dict[tuple[Any, ...], _Compiled] = {}
        self._plans: dict[tuple[Any, ...], tuple[RunPlan, _Compiled]] = {}
        """Resolved ``run`` calls by ``signature_key``."""
        self._mutations = self.graph.mutations
        """The graph's in-place changes the caches above have seen (``_check_graph``)."""
        self._step_ids = itertools.count(1)
        self._inflight: dict[int, Step] = {}
        """The steps running now, by step id: ``close()`` cancels them."""
        self._drained = threading.Event()
        """Set when the last run in flight ends after ``close()`` began."""
        self._release_lock = threading.Lock()
        self._release_deferred = False
        """``close()`` timed out with steps still running: the last of them to end
        releases the session's threads, kernels, variables and devices."""
        self._released = False
        self._closed = False

    # -- configuration checks ---------------------------------------------------------------------

    def _check_labels(self) -> None:
        for op, label in self.config.kernel_labels.items():
            source = Hint("(asked for by {label})", label=Setting("kernel_label", op, label))
            try:
                self.registry.op_def(op)  # raises with did-you-mean for an unknown op
            except NotFoundError as exc:
                raise NotFoundError(exc.message, hint=source) from None
            labels = {
                r.kernel_def.label for r in self.registry.kernels.kernels(op) if r.kernel_def.label
            }
            if label not in labels:
                raise InvalidArgumentError(
                    f"op {op} has no kernel labelled {label!r}; "
                    f"its labels: {', '.join(sorted(labels)) or '(none)'}."
                    + did_you_mean(label, labels),
                    hint=source,
                )

    def _check_device_types(self, options: DeviceOptions) -> None:
        """``memory_limit`` and ``device_count`` name device types the plugins provide: a
        typo would otherwise be ignored. (A count of 0 for a type that no plugin provides
        is fine: ``device_count={'GPU': 0}`` hides GPUs wherever the session runs.)"""
        types = self.registry.placement_order(options, source=_OVERRIDES)
        settings = {
            "memory_limit": self.config.memory_limit,
            "device_count": self.config.device_count,
        }
        for argument, entries in settings.items():
            for device_type, amount in entries.items():
                if device_type in types or (argument == "device_count" and amount == 0):
                    continue
                raise NotFoundError(
                    f"SessionConfig({argument}={{{device_type!r}: {amount}}}): no device type "
                    f"{device_type!r}; the types are: {', '.join(types) or '(none)'}."
                    + did_you_mean(device_type, types)
                )

    # -- compiling a signature --------------------------------------------------------------------

    def _kernel_factory(self, device: Device, original: frozenset[str]) -> Any:
        def create(node: Node) -> OpKernel:
            def build() -> OpKernel:
                return self.registry.create_kernel(node.to_node_def(), device)

            if node.name in original:
                return self._segment.find_or_create(
                    self.handle, f"{device.name}|{node.name}", build
                )
            return build()

        return create

    def _compile(
        self, feeds: tuple[str, ...], fetches: tuple[str, ...], targets: tuple[str, ...]
    ) -> _Compiled:
        key = (len(self.graph), feeds, fetches, targets)
        with self._lock:
            found = self._compiled.get(key)
            if found is not None:
                return found
            with gc_paused():  # (a compile's objects live on: framework.gc_pause)
                compiled = self._build(feeds, fetches, targets)
            self._compiled[key] = compiled
            return compiled

    def _build(
        self, feeds: tuple[str, ...], fetches: tuple[str, ...], targets: tuple[str, ...]
    ) -> _Compiled:
        """The step for a signature: its graph, optimized, placed, partitioned, and an
        executor per partition."""
        step_graph = build_step_graph(
            self.graph, feeds, fetches, targets, self.config.kernel_labels
        )
        report = None
        if self.config.graph_optimizer:
            graph, report = optimize_step_graph(
                step_graph.graph,
                registry=self.registry,
                devices=self.devices,
                preserved=targets,
                disabled=self.config.disabled_passes,
                plugin_passes=self.registry.graph_passes,
            )
            kept = _unchanged_nodes(graph, step_graph.graph, step_graph.original_nodes)
            step_graph = replace(step_graph, graph=graph, original_nodes=kept)
        placement = Placer(
            step_graph.graph,
            self.devices,
            self.registry,
            allow_soft_placement=self.config.allow_soft_placement,
            log_device_placement=self.config.log_device_placement,
        ).run()
        parts = partition(step_graph.graph, placement, devices=self.devices, registry=self.registry)
        control_flow = has_control_flow(step_graph.graph)
        executors = tuple(
            Executor.build(
                part,
                self.devices.lookup(name),
                self._kernel_factory(self.devices.lookup(name), step_graph.original_nodes),
                control_flow=control_flow,
            )
            for name, part in parts.graphs.items()
        )
        parallel = self._pool.num_workers > 0
        inline = self._inline_program(executors, parallel)
        return _Compiled(
            step_graph,
            placement,
            parts,
            executors,
            tuple(self.devices.lookup(placement[n]) for n in step_graph.arg_nodes),
            tuple(self.devices.lookup(placement[n]) for n in step_graph.retval_nodes),
            parts.num_pairs(),
            inline,
            report,
            executors[0] if inline is None and parallel and len(executors) == 1 else None,
            *_fetched_types(step_graph),
        )

    def _inline_program(
        self, executors: tuple[Executor, ...], parallel: bool
    ) -> LineProgram | None:
        if len(executors) != 1:
            return None
        return executors[0].straight_line_for(parallel=parallel, observed=False)

    # -- running ----------------------------------------------------------------------------------

    def run(
        self,
        fetches: object,
        feed_dict: Mapping[Any, Any] | None = None,
        options: RunOptions | None = None,
        run_metadata: RunMetadata | None = None,
        *,
        targets: Sequence[Node | Tensor | str] | None = None,
        cancellation: CancellationManager | None = None,
    ) -> Any:
        """Run what ``fetches`` needs and return their values as host numpy arrays, in the
        same structure. ``targets`` are nodes to run for their effect only;
        ``cancellation.cancel()`` from another thread stops the run."""
        if self._closed:
            raise _closed_error()
        if feed_dict is not None and type(feed_dict) is not dict:
            _check_type("Session.run", "feed_dict", feed_dict, Mapping, _FEED_DICT)
        if options is not None or run_metadata is not None or cancellation is not None:
            _check_run_arguments("Session.run", options, run_metadata, cancellation)
        if self.graph.mutations != self._mutations:
            self._check_graph()
        key = signature_key(self.graph, fetches, feed_dict) if targets is None else None
        found = self._plans.get(key) if key is not None else None
        if found is None:
            found = self._resolve(
                fetches,
                list(feed_dict or ()),
                self._target_names(targets if targets is not None else []),
            )
            if key is not None:
                if len(self._plans) >= _MAX_CACHED_PLANS:
                    self._plans.clear()  # a program that builds a new call every step
                self._plans[key] = found
        values = list(feed_dict.values()) if feed_dict else []
        return self._call(*found, values, options, run_metadata, cancellation)

    def make_callable(self, fetches: object, feed_list: Sequence[Any] | None = ()) -> RunCallable:
        """A function that runs ``fetches`` with values for ``feed_list`` (tensors or names),
        given positionally: ``sess.make_callable(y, [x])(x_value)`` is
        ``sess.run(y, {x: x_value})`` with every name resolved once, here (TensorFlow's
        ``Session.make_callable``). It also takes ``options=``, ``run_metadata=`` and
        ``cancellation=``. ``feed_list=None`` feeds nothing (TensorFlow's default). Nodes
        added to the graph later do not change what it runs; a node it runs that is
        changed in place (``Graph.update_input``) makes it compile again on its next call,
        as ``run`` does."""
        if self._closed:
            raise _closed_error()
        if feed_list is None:
            feed_list = ()
        if isinstance(feed_list, str | bytes) or not isinstance(feed_list, Sequence):
            single = isinstance(feed_list, str | bytes | Tensor)
            raise TypeError(
                f"Session.make_callable: feed_list must be a list or tuple of tensors (or "
                f"tensor names), got {_kind_of(feed_list)}"
                + (
                    "; for one feed, pass a list of one: make_callable(fetches, [x])"
                    if single
                    else ""
                )
            )
        if self.graph.mutations != self._mutations:
            self._check_graph()
        feed_keys = list(feed_list)
        plan, compiled = self._resolve(fetches, feed_keys, [])
        compiled_size, seen = len(self.graph), self.graph.mutations

        def call(
            *feed_values: Any,
            options: RunOptions | None = None,
            run_metadata: RunMetadata | None = None,
            cancellation: CancellationManager | None = None,
        ) -> Any:
            nonlocal plan, compiled, compiled_size, seen
            if self._closed:
                raise _closed_error()
            if options is not None or run_metadata is not None or cancellation is not None:
                _check_run_arguments(
                    "Session.make_callable's callable", options, run_metadata, cancellation
                )
            if self.graph.mutations != seen:
                if self.graph.changed_since(seen) < compiled_size:
                    self._check_graph()
                    plan, compiled = self._resolve(fetches, feed_keys, [])
                    compiled_size = len(self.graph)
                seen = self.graph.mutations
            return self._call(plan, compiled, feed_values, options, run_metadata, cancellation)

        return call

    def _check_graph(self) -> None:
        """Drop what was compiled from nodes changed in place since: the next run of those
        signatures compiles the graph as it is now (TensorFlow fails such a run instead;
        recompiling gives the same results a new session would)."""
        with self._lock:
            seen = self._mutations
            now = self.graph.mutations
            if now == seen:
                return
            lowest = self.graph.changed_since(seen)
            for key in [k for k in self._compiled if k[0] > lowest]:
                del self._compiled[key]
            for key in [k for k in self._plans if k[0] > lowest]:
                del self._plans[key]
            self._mutations = now

    def _resolve(
        self, fetches: object, feed_keys: list[Any], targets: list[str]
    ) -> tuple[RunPlan, _Compiled]:
        """A run call resolved against the graph, and its compiled step."""
        plan = RunPlan.build(self.graph, fetches, feed_keys, targets)
        return plan, self._compile(plan.feed_names, plan.fetches.tensors, plan.targets)

    def _target_names(self, targets: object) -> list[str]:
        if not isinstance(targets, list | tuple):
            raise TypeError(
                f"Session.run: targets must be a list of nodes (or node names), got "
                f"{type(targets).__name__}"
            )
        names = []
        for target in targets:
            if isinstance(target, Tensor):  # run the node that computes it
                target = target.node
            if isinstance(target, Node):
                check_graph_of(self.graph, target, "target")
            name = target.name if isinstance(target, Node) else target
            if not isinstance(name, str):
                raise TypeError(
                    f"Session.run: target {_kind_of(name)} is not a node; targets must be "
                    f"kl.Node objects or node names"
                )
            if name not in self.graph:
                raise NotFoundError(
                    f"target {name!r} is not a node of the graph."
                    + did_you_mean(str(name), [n.name for n in self.graph.nodes])
                )
            names.append(name)
        return names

    def _call(
        self,
        plan: RunPlan,
        compiled: _Compiled,
        values: Sequence[Any],
        options: RunOptions | None,
        run_metadata: RunMetadata | None,
        cancellation: CancellationManager | None,
    ) -> Any:
        args = plan.args(values)
        options = options or _DEFAULT_OPTIONS
        inline = compiled.inline
        if inline is None and compiled.may_turn_inline is not None:
            inline = compiled.may_turn_inline.parallel_inline()
        if inline is not None and run_metadata is None and not options.trace:
            results = self._execute_inline(inline, compiled, args, options.timeout_s, cancellation)
        elif run_metadata is None:
            results = self._execute(compiled, args, options, None, cancellation)
        else:
            started = time.perf_counter()
            results = self._execute(compiled, args, options, run_metadata, cancellation)
            run_metadata.wall_s = time.perf_counter() - started
        return plan.results(results)

    def _execute(
        self,
        compiled: _Compiled,
        fed: list[np.ndarray[Any, Any]],
        options: RunOptions,
        run_metadata: RunMetadata | None,
        cancellation: CancellationManager | None,
    ) -> list[np.ndarray[Any, Any]]:
        step_id = next(self._step_ids)
        copies = CopyStats()
        args = []
        try:
            for value, device in zip(fed, compiled.arg_devices, strict=True):
                if not device.memory_is_host:
                    copies.record(CLIENT, device.name, value.nbytes)
                args.append(device.copy_from_host(value))
        except MemoryError as exc:
            raise _feed_out_of_memory(compiled, len(args), fed, exc) from exc
        except KernloomError:
            raise
        except Exception as exc:
            raise _copy_error(compiled, "feed", len(args), raised(exc)) from exc
        frame = CallFrame(args, len(compiled.retval_devices))
        executors = compiled.executors
        step = Step(
            self._pool, step_id=step_id, timeout_s=options.timeout_s, cancellation=cancellation
        )
        self._begin(step)
        rendezvous = None
        if compiled.send_recv_pairs:  # only _Send/_Recv use it
            rendezvous = Rendezvous(self.devices, copies)
            step.cancellation.register(partial(_abort_rendezvous, rendezvous, step))
        stats = StepStatsCollector(step_id) if options.trace else None
        if run_metadata is not None:
            for device in self.devices:
                device.reset_peak_memory()
        run_args = RunArgs(
            step, rendezvous, frame, self.resource_mgr, stats, executors=len(executors)
        )
        # The step is in flight until its executors are done, not until the caller stops
        # waiting: a kernel that ignores cancellation may outlive ``wait``'s grace, and
        # ``close`` must not free what it still uses.
        barrier = ExecutorBarrier(len(executors), step, partial(self._executors_done, step))
        launched = False
        try:
            for executor in executors:
                executor.run_async(run_args, barrier.executor_done)
            launched = True
            step.wait()
        except KeyboardInterrupt as interrupt:
            # Ctrl-C while this thread waited (or ran a task's bookkeeping): stop the step
            # so its kernels are cancelled and its executors end at their next node, give
            # them wait's grace to do so, then let the interrupt reach the caller.
            step.stop(interrupt)
            with contextlib.suppress(BaseException):  # its error is the interrupt, or older
                step.wait()
            raise
        except KernloomError as error:
            # A device's copy that failed while a value crossed to another device is
            # reported by the _Recv waiting for it: the device plugin's error, as itself.
            fault = rendezvous.fault if rendezvous is not None else None
            if fault is not None and (error is fault or error.__cause__ is fault):
                raise fault from fault.__cause__
            raise
        finally:
            step.close()
            if not launched:
                self._end(step_id)
        results = _results(compiled, frame, copies)
        if run_metadata is not None:
            run_metadata.step_id = step_id
            run_metadata.placement = compiled.placement
            run_metadata.partition_graphs = dict(compiled.partitions.graphs)
            run_metadata.copies = copies.copies()
            run_metadata.bytes_copied = copies.bytes()
            run_metadata.memory = {d.name: d.memory_stats() for d in self.devices}
            run_metadata.step_stats = stats.finalize() if stats is not None else None
        return results

    def _execute_inline(
        self,
        straight: LineProgram,
        compiled: _Compiled,
        fed: list[np.ndarray[Any, Any]],
        timeout_s: float | None,
        cancellation: CancellationManager | None,
    ) -> list[np.ndarray[Any, Any]]:
        """A step of one straight-line partition, untraced and without metadata, on this
        thread: no copies to count, no barrier, no queue, nothing for the pool to do."""
        step_id = next(self._step_ids)
        step = Step(None, step_id=step_id, timeout_s=timeout_s, cancellation=cancellation)
        args = []
        try:
            for value, device in zip(fed, compiled.arg_devices, strict=True):
                args.append(device.copy_from_host(value))  # (no comprehension: its own frame)
        except MemoryError as exc:
            raise _feed_out_of_memory(compiled, len(args), fed, exc) from exc
        except KernloomError:
            raise
        except Exception as exc:
            raise _copy_error(compiled, "feed", len(args), raised(exc)) from exc
        frame = CallFrame(args, len(compiled.retval_devices))
        self._begin(step)
        try:
            error = straight.execute(RunArgs(step, None, frame, self.resource_mgr))
        finally:
            step.close()
            self._end(step_id)
        if error is not None:
            raise error
        return _results(compiled, frame, None)

    def compare_labels(
        self,
        fetches: object,
        feed_dict: Mapping[Any, Any] | None = None,
        *,
        labels: Mapping[str, str],
        runs: int = 20,
    ) -> LabelComparison:
        """The labelled kernels (``labels``: op -> label) against the kernels this session
        runs: per node they change, the largest differences of its outputs and its kernel
        time in each; the whole run's time in each over ``runs`` runs, with spread. See
        ``kernloom.runtime.label_compare``.

        Both variants run on this session's devices, in sessions of their own that start
        from this session's variables as they are now (a trained model compares as it
        is). This session's variables are not changed by the comparison: where the
        fetches (or what they need) assign a variable, each variant's runs assign their
        own copy of it, as a run of this session would, so the two variants' values move
        alike over the comparison's runs while this session keeps the values it had."""
        if self._closed:
            raise _closed_error()
        wanted = {**self.config.kernel_labels, **labels}
        config = self.config.model_copy(update={"kernel_labels": wanted})
        with self._sibling(self.config) as default, self._sibling(config) as labelled:
            return compare_sessions(default, labelled, fetches, feed_dict, labels, runs=runs)

    def _sibling(self, config: SessionConfig) -> Session:
        """A new session of this session's graph and registry with ``config`` (which asks
        for the same devices: its kernel labels may differ), on this session's devices,
        whose variables start as this session's are now (``_copy_variables_to``).
        Closing it leaves the devices open."""
        sibling = object.__new__(Session)
        sibling.graph, sibling.config, sibling.registry = self.graph, config, self.registry
        sibling._closed = True
        sibling._check_labels()
        check_pass_names(config.disabled_passes, self.registry.graph_passes)
        sibling.devices = self.devices
        sibling._owns_devices = False
        sibling._pool = _start_pool(config.resolved_inter_op_threads() - 1)
        sibling._start()
        try:
            self._copy_variables_to(sibling)
        except BaseException:
            sibling.close()
            raise
        return sibling

    def _copy_variables_to(self, other: Session) -> None:
        """Each variable this session holds (those its graph's ``VarHandleOp`` nodes name)
        into ``other``'s resources, as a variable of its own holding the same value. The
        value itself is shared, not copied: an assignment stores a new value and never
        writes into the one it replaces (``variable_kernels``), and a kernel never
        overwrites a value a variable holds, so neither session's runs change the other's
        variables. ``other`` runs on this session's devices, where the values are."""
        seen: set[tuple[str, str]] = set()
        for node in self.graph.nodes:
            if node.op != "VarHandleOp":
                continue
            container = node.attrs.get("container") or DEFAULT_CONTAINER
            name = node.attrs.get("shared_name") or node.name
            if (container, name) in seen:
                continue
            seen.add((container, name))
            try:
                var = self.resource_mgr.lookup(name, Var, container)
            except (NotFoundError, InvalidArgumentError):  # none yet (or not a variable)
                continue
            copy = Var(var.name, var.dtype, var.shape)
            with var.lock:
                copy.value = var.value
            other.resource_mgr.create(name, copy, container)

    # -- explaining -------------------------------------------------------------------------------

    def explain(self, fetches: object = None, feed_dict: Mapping[Any, Any] | None = None) -> str:
        """Why each node goes where it goes, and how the graph splits across devices.

        With ``fetches``, for the graph that a run of them executes (feeds as ``_Arg``s,
        fetches as ``_Retval``s); without, for the whole graph.
        """
        if self._closed:
            raise _closed_error()
        graph = self.graph
        if fetches is None:
            placement = Placer(
                self.graph,
                self.devices,
                self.registry,
                allow_soft_placement=self.config.allow_soft_placement,
            ).run()
            parts = partition(self.graph, placement, devices=self.devices, registry=self.registry)
        else:
            _, compiled = self._resolve(fetches, list(feed_dict or ()), [])
            placement, parts = compiled.placement, compiled.partitions
            graph = compiled.step_graph.graph
            report = compiled.optimizer or OptimizerReport(enabled=False)
        lines = ["Devices:"]
        lines += [f"  {d.name} (backend {d.backend})" for d in self.devices]
        lines.append("Placement:")
        lines += ["  " + line for line in placement.explain().splitlines()]
        lines.append("Partitions:")
        for device, part in parts.graphs.items():
            ops = sorted({n.op for n in part.nodes})
            lines.append(f"  {device}: {len(part)} nodes ({', '.join(ops)})")
        lines.append(f"Send/Recv pairs: {parts.num_pairs()}")
        if fetches is not None:
            lines += report.explain().splitlines()
        unshaped = sorted(
            {
                f"  node {n.name!r} (op {n.op}): the op has no shape function, so its output "
                f"shapes are unknown until it runs and shape errors after it surface only then"
                for part in parts.graphs.values()
                for n in part.nodes
                if n.op_def.shape_fn is None and n.op_def.outputs
            }
        )
        if unshaped:
            lines.append("Notes:")
            lines += unshaped
        lines.append("Kernels:")
        labels = self.config.kernel_labels
        kernels = describe_kernels(graph, placement, self.devices, self.registry, labels)
        lines += ["  " + line for line in kernels]
        return "\n".join(lines)

    # -- lifetime ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def _begin(self, step: Step) -> None:
        """Count ``step`` as in flight; a session closed meanwhile cancels it at once."""
        self._inflight[step.step_id] = step  # one dict store: atomic, no lock on the hot path
        if self._closed:  # close() began after run() checked: close may not have seen it
            step.stop(_cancelled_by_close())

    def _executors_done(self, step: Step, error: BaseException | None) -> None:
        """Every executor of ``step`` has ended (the barrier's ``done``)."""
        step.finish()
        self._end(step.step_id)

    def _end(self, step_id: int) -> None:
        if self._inflight.pop(step_id, None) is None:
            return
        if self._closed and not self._inflight:
            self._drained.set()
            with self._release_lock:
                deferred = self._release_deferred
            if deferred:  # on a thread of its own: this may be a pool worker it joins
                threading.Thread(
                    target=self._release, name=f"kernloom-{self.handle}-release", daemon=True
                ).start()

    def close(self, *, timeout_s: float = 10.0) -> None:
        """Cancel the runs in flight (they raise ``CancelledError("session closed")``, as
        in TensorFlow), wait up to ``timeout_s`` for them to stop, then stop the inter-op
        threads, drop cached kernels and variables and close the devices. Later calls of
        ``run``, ``make_callable`` or its callables fail, saying the session is closed.

        A kernel that ignores cancellation can keep its step running past ``timeout_s``.
        TensorFlow's ``DirectSession`` then waits for it, however long; here ``close``
        returns instead, by raising ``DeadlineExceededError`` naming each such kernel's
        node, op and device, and frees nothing that step may still use: the session is
        closed to new runs, and its threads, kernels, variables and devices are released
        when the step ends."""
        if self._closed:
            return
        self._closed = True
        inflight = list(self._inflight.values())
        for step in inflight:
            step.stop(_cancelled_by_close())
        if self._inflight:
            self._drained.wait(timeout_s)
        with self._release_lock:
            stuck = list(self._inflight.values())
            self._release_deferred = bool(stuck)
        if not stuck:
            self._release()
            return
        raise self._stuck_error(stuck, timeout_s)

    def _stuck_error(self, steps: list[Step], timeout_s: float) -> DeadlineExceededError:
        lines = []
        for step in sorted(steps, key=lambda s: s.step_id):
            running = running_kernels(step.step_id, self.resource_mgr)
            if running:
                lines += [f"  step {step.step_id}: {k.describe()}" for k in running]
            else:
                lines.append(
                    f"  step {step.step_id}: no thread is inside one of its kernels; an "
                    f"asynchronous kernel has not called done()"
                )
        return DeadlineExceededError(
            f"Session.close(timeout_s={timeout_s:g}): {len(steps)} cancelled step(s) still "
            f"running a kernel that does not return:\n" + "\n".join(lines) + "\nThe session "
            "is closed to new runs; its variables, kernels, threads and devices are released "
            "when those steps end, not before. A kernel that blocks must wake up when "
            "ctx.cancellation is cancelled (register a callback with it)."
        )

    def _release(self) -> None:
        """Free what the session holds, once: after its last step has ended."""
        with self._release_lock:
            if self._released:
                return
            self._released = True
        self._pool.close()
        with self._lock:
            self._compiled.clear()
            self._plans.clear()
        self.resource_mgr.clear()
        self._segment.remove_hold(self.handle)
        if self._owns_devices:
            self.devices.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        """Close; when the block is already raising, a close that times out is added to
        that error as a note instead of replacing it."""
        if not isinstance(error, BaseException):
            self.close()
            return
        try:
            self.close()
        except DeadlineExceededError as stuck:
            error.add_note(str(stuck))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.devices)} device(s)"
        return f"<kl.Session {self.handle} {state}>"
