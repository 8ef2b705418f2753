"""A partition compiled for execution (TensorFlow's ``GraphView``/``NodeItem``).

``GraphView`` compiles a partition once into flat ``NodeItem``s -- the kernel and the
callable that runs it, where the node's inputs sit in the step's flat input-slot list,
its out-edges as (output, consumer, slot) triples, its pending count, and whether it is
expensive or asynchronous. Every executor (the node loop over either propagator, and the
straight-line schedule) reads the same view; a step then only needs flat lists of slots
and pending counts, and running a node allocates no bookkeeping object.

``NodeItem`` is a slots class: CPython specialises attribute loads on slots, so the node
loop reads named fields about as fast as it would unpack a tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, final

from kernloom.framework.device import Device
from kernloom.framework.device_independent_kernels import ConstKernel, pass_through
from kernloom.framework.op_kernel import (
    _UNSET,
    AsyncOpKernel,
    FunctionKernel,
    KernelSignature,
    OpKernel,
    OpKernelContext,
)
from kernloom.graph.graph import Graph, Node
from kernloom.runtime.control_flow import has_control_flow
from kernloom.runtime.frame_layout import FrameLayout
from kernloom.runtime.memory_crossings import host_fed_inputs

__all__ = ["GraphView", "KernelFactory", "NodeItem"]

KernelFactory = Callable[[Node], OpKernel]
Edge = tuple[int, int, int]
"""(output index, consumer id, consumer's input slot): one data out-edge."""


@final
@dataclass(slots=True, eq=False)
class NodeItem:
    """One node of a compiled partition."""

    id: int
    node: Node
    kernel: OpKernel
    signature: KernelSignature
    run: Callable[[OpKernelContext], None]
    """``kernel.compute`` or the device's ``compute`` around it: resolved once."""
    input_start: int
    input_end: int
    num_inputs: int
    num_outputs: int
    empty_slots: tuple[None, ...]
    """What the node's input slots are reset to once it has taken its inputs."""
    unset_outputs: list[Any]
    """A template of the output list (every entry unset): copied per run."""
    out_edges: tuple[Edge, ...]
    control_out: tuple[int, ...]
    pending: int
    is_expensive: bool
    """Worth another inter-op thread: the kernel's ``is_expensive``, unless it uses the
    device's intra-op threads (``OpKernel.intra_op_parallel``) and there are several, or
    its measured cost says it is not (``kernel_costs``, which turns this)."""
    timed: bool
    """Whether steps with an inter-op pool time this node's kernel (``kernel_costs``):
    the kernel is marked expensive, synchronous, and not kept on the caller's thread."""
    on_caller_thread: bool
    """Run on the step's own thread (the caller's), not a pool worker: the kernel spreads
    over the device's intra-op threads, which are the caller's thread team
    (``Step.schedule_for_caller``)."""
    is_async: bool
    direct: Callable[..., Any] | None
    """The kernel's context-free entry (``OpKernel.direct``) where the executors may call
    it: one output, at least one input, no device ``compute`` that wraps every kernel, no
    host-memory input to move first (that is ``OpKernelContext.prepare``'s job). A
    ``Const`` gets one too, which returns its value."""
    direct_dtype: Any
    """The output's numpy dtype, which a direct entry's result is checked against (an
    identity test first; ``OpKernelContext.outputs`` explains a mismatch)."""
    device_inputs: frozenset[int]
    """Inputs fed in host memory (a ``Shape``'s output, or one passed on by ``Identity``)
    that the kernel reads in the device's memory: ``OpKernelContext.prepare`` copies them
    to the device first, as TensorFlow's memory-type pass inserts a copy on such an edge.
    Empty on a device whose memory is the host's."""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def where(self) -> str:
        return f"node {self.node.name!r} (op {self.node.op})"


@final
class GraphView:
    """A partition compiled for execution on one device; immutable, shared by all steps."""

    def __init__(
        self,
        graph: Graph,
        device: Device,
        kernels: KernelFactory,
        *,
        control_flow: bool | None = None,
    ) -> None:
        """``control_flow``: whether values may be dead or frames exist (the session says
        so for every partition of a graph with control flow, as a partition without
        control-flow ops can still receive dead values); None works it out from ``graph``."""
        nodes = graph.nodes
        index = {node.name: i for i, node in enumerate(nodes)}
        starts: list[int] = []
        total = 0
        for node in nodes:
            starts.append(total)
            total += len(node.inputs)
        edges: list[list[Edge]] = [[] for _ in nodes]
        controls: list[list[int]] = [[] for _ in nodes]
        for i, node in enumerate(nodes):
            for j, tensor in enumerate(node.inputs):
                edges[index[tensor.node.name]].append((tensor.index, i, starts[i] + j))
            for control in node.control_inputs:
                controls[index[control.name]].append(i)
        compute_overridden = type(device).compute is not Device.compute
        shared_threads = device.intra_op_threads > 1

        def shares_cores(kernel: OpKernel) -> bool:
            """A kernel that spreads over the device's intra-op threads already uses every
            core: it counts as inexpensive, so that it runs on the step's own thread (the
            one its thread team belongs to), never beside another on the inter-op pool."""
            return shared_threads and bool(kernel.intra_op_parallel)

        node_kernels = [kernels(node) for node in nodes]
        host_fed = {} if device.memory_is_host else host_fed_inputs(nodes, index, node_kernels)
        items: list[NodeItem] = []
        for i, node in enumerate(nodes):
            kernel = node_kernels[i]
            device_inputs = host_fed.get(i, frozenset())
            is_async = isinstance(kernel, AsyncOpKernel)
            on_caller_thread = shares_cores(kernel)
            run: Callable[[OpKernelContext], None]
            if compute_overridden:
                run = _device_compute(device, kernel)
            elif isinstance(kernel, FunctionKernel):
                run = type(kernel).function  # one call less on the hot path
            else:
                run = kernel.compute
            items.append(
                NodeItem(
                    id=i,
                    node=node,
                    kernel=kernel,
                    signature=kernel.signature,
                    run=run,
                    input_start=starts[i],
                    input_end=starts[i] + len(node.inputs),
                    num_inputs=len(node.inputs),
                    num_outputs=len(node.outputs),
                    empty_slots=(None,) * len(node.inputs),
                    unset_outputs=[_UNSET] * len(node.outputs),
                    out_edges=tuple(edges[i]),
                    control_out=tuple(controls[i]),
                    pending=len(node.inputs) + len(node.control_inputs),
                    is_expensive=bool(kernel.is_expensive) and not on_caller_thread,
                    timed=bool(kernel.is_expensive) and not on_caller_thread and not is_async,
                    on_caller_thread=on_caller_thread,
                    is_async=is_async,
                    direct=_direct_entry(
                        kernel,
                        node,
                        compute_overridden
                        or is_async
                        or bool(kernel.signature.host_memory_inputs and not device.memory_is_host)
                        or bool(device_inputs),
                    ),
                    direct_dtype=(kernel.signature.output_numpy_dtypes or (None,))[0],
                    device_inputs=device_inputs,
                )
            )
        self.graph = graph
        self.device = device
        self.compute_overridden = compute_overridden or (
            type(device).compute_async is not Device.compute_async
        )
        """Whether the device wraps kernels (``compute``/``compute_async``): then every
        node, constants and call-frame nodes included, runs through it."""
        self.items = items
        self.num_slots = total
        self.pending = [item.pending for item in items]
        self.roots = [item.id for item in items if item.pending == 0]
        self.passes = [item.direct is pass_through for item in items]
        """Per node, whether it is the core's pass-through kernel (Identity, Enter, Exit,
        NextIteration: the output is the input) run without a device wrapping it: a
        frame-aware step nobody observes delivers through such a node without running
        it."""
        if control_flow is None:
            control_flow = has_control_flow(graph)
        self.frame_layout: FrameLayout | None = FrameLayout(graph) if control_flow else None
        """Frames and local slots, for a partition that has (or may receive) dead values:
        its steps run over the frame-aware propagator."""

    def __len__(self) -> int:
        return len(self.items)


def _direct_entry(kernel: OpKernel, node: Node, excluded: bool) -> Callable[..., Any] | None:
    if excluded or len(node.outputs) != 1:
        return None
    if type(kernel) is ConstKernel:
        # The constant as an entry of its own: a Const in a loop body (it runs every
        # iteration, after its control input) needs no context either. (The straight
        # line puts the value into its program instead.)
        value = kernel.value

        def constant(reuse: int) -> Any:
            return value

        return constant
    if not node.inputs:
        return None
    return kernel.direct


def _device_compute(device: Device, kernel: OpKernel) -> Callable[[OpKernelContext], None]:
    compute = device.compute

    def run(ctx: OpKernelContext) -> None:
        compute(kernel, ctx)

    return run
