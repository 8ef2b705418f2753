"""Small integer computations run on the CPU (grappler's ``PinToHostOptimizer``).

A shape computed at run time -- an ONNX model's ``Shape -> Gather -> Concat -> Reshape``,
a ``Slice``'s bounds -- would otherwise run on the accelerator as a chain of tiny kernels
and end in an argument the accelerator's kernel reads in host memory (``Reshape``'s
``shape``): the host then waits for the device in the middle of the step to copy a few
integers back. ``Shape``'s output is host memory on every device, so the chain can run on
the CPU from start to end, and the device never stops.

A node is pinned (its requested device set to the CPU) when
- it would run on another device type than the CPU (the first in placement order that has
  a kernel for it) and the CPU has a kernel for it;
- its op is one of ``HOST_FRIENDLY``, its outputs are int32 or int64 with a statically
  known size of at most ``MAX_ELEMENTS`` each (TensorFlow's ``kTensorMaxSize``), and each
  input is already in host memory: a host-memory output (a ``Shape``'s) or the output of
  a node pinned before it;
- the user requested no device for it, and it is no part of a loop frame, labelled,
  colocated or stateful.

A small integer ``Const`` is pinned with a node that reads it, or when every consumer reads
it in host memory; one that only the accelerator's kernels read in their own memory stays
there.
"""

from __future__ import annotations

from typing import Final

from kernloom.dtypes import int32, int64
from kernloom.framework.memory_types import memory_types
from kernloom.framework.node_def import KERNEL_LABEL_ATTR, KERNEL_SCOPE_ATTR
from kernloom.graph.graph import COLOCATION_ATTR, Graph, Node
from kernloom.optimizer.analysis import Consumers, frame_nodes, name_list
from kernloom.optimizer.graph_pass import GraphPass, PassContext
from kernloom.optimizer.placement_hint import has_kernel, kernel_for, likely_device_type
from kernloom.optimizer.rewriter import GraphRewriter

__all__ = ["HOST_FRIENDLY", "MAX_ELEMENTS", "PinToHost"]

HOST = "CPU"
MAX_ELEMENTS: Final = 64
"""The largest integer output (in elements) worth computing on the host."""

HOST_FRIENDLY: Final = frozenset(
    {
        "Const",
        "Identity",
        "Add",
        "AddV2",
        "Sub",
        "Mul",
        "FloorDiv",
        "FloorMod",
        "Maximum",
        "Minimum",
        "Neg",
        "Abs",
        "Cast",
        "ConcatV2",
        "Pack",
        "GatherV2",
        "Slice",
        "StridedSlice",
        "Reshape",
        "Squeeze",
        "ExpandDims",
        "Range",
        "Fill",
        "Prod",
        "Sum",
        "Max",
        "Min",
        "Tile",
        "Transpose",
    }
)
"""Ops whose integer results are cheap on the host (grappler's list, less the ones the
standard op library lacks)."""

_INTEGERS: Final = (int32, int64)


class PinToHost(GraphPass):
    name = "pin_to_host"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        if HOST not in ctx.device_types or ctx.device_types == (HOST,):
            return graph
        frames = frame_nodes(graph)
        in_host: set[str] = set()
        """Tensors that will be in host memory: host-memory outputs, pinned nodes' outputs."""
        pinned: set[str] = set()
        constants: set[str] = set()
        elsewhere: dict[str, str] = {}
        """Node -> the device type it would run on, for the nodes not on the host."""
        for node in graph.nodes:
            device_type = likely_device_type(node, ctx)
            if device_type is None:
                continue
            if device_type == HOST:
                in_host.update(t.name for t in node.outputs)
                continue
            elsewhere[node.name] = device_type
            kernel = kernel_for(node.op, node.attrs, device_type, ctx)
            if kernel is not None:
                _, host_outputs = memory_types(node.op_def, node.attrs, kernel)
                in_host.update(node.outputs[i].name for i in host_outputs)
            if not _candidate(node, frames, ctx):
                continue
            if node.op == "Const":
                constants.add(node.name)  # decided below, by its consumers
                in_host.update(t.name for t in node.outputs)
            elif all(t.name in in_host for t in node.inputs):
                pinned.add(node.name)
                in_host.update(t.name for t in node.outputs)
        consumers = Consumers(graph)
        for name in constants:
            readers = consumers.of_node(graph.node(name))
            if any(c.name in pinned for c, _ in readers) or (
                readers and all(_reads_in_host(c, i, elsewhere, ctx) for c, i in readers)
            ):
                pinned.add(name)
        if not pinned:
            return graph
        rewriter = GraphRewriter(graph)
        for node in graph.nodes:
            rewriter.copy(node, device=HOST if node.name in pinned else None)
        ctx.note(f"pinned {len(pinned)} small integer node(s) to the CPU: {name_list(pinned)}")
        return rewriter.finish(ctx.preserved)


def _candidate(node: Node, frames: set[str], ctx: PassContext) -> bool:
    return (
        node.op in HOST_FRIENDLY
        and not node.requested_device
        and node.name not in frames
        and not node.op_def.is_stateful
        and COLOCATION_ATTR not in node.attrs
        and not node.attrs.get(KERNEL_LABEL_ATTR)
        and not node.attrs.get(KERNEL_SCOPE_ATTR)
        and bool(node.outputs)
        and all(_small_integers(t.dtype, t.shape.num_elements()) for t in node.outputs)
        and has_kernel(node.op, node.attrs, HOST, ctx)
    )


def _small_integers(dtype: object, size: int | None) -> bool:
    return dtype in _INTEGERS and size is not None and size <= MAX_ELEMENTS


def _reads_in_host(node: Node, index: int, elsewhere: dict[str, str], ctx: PassContext) -> bool:
    """Whether ``node`` reads its input ``index`` in host memory where it would run."""
    device_type = elsewhere.get(node.name)
    if device_type is None:
        return True  # on the CPU
    kernel = kernel_for(node.op, node.attrs, device_type, ctx)
    if kernel is None:
        return False
    host_inputs, _ = memory_types(node.op_def, node.attrs, kernel)
    return index in host_inputs
