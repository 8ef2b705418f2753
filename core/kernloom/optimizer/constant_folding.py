"""Constant folding (grappler's ``ConstantFolding``): a node whose data inputs are all
constants is evaluated once, with the real kernel on the CPU device the session gives
(``PassContext.evaluate``), and replaced by ``Const`` nodes.

Never folded: stateful and random ops, control flow, the step's interface, nodes in loop
frames, preserved nodes, nodes that ask for a kernel label or colocation, and results
larger than ``PassContext.max_constant_bytes`` and than their inputs together (so a small
``Fill`` cannot balloon into a huge constant in the graph, while a large filter scaled by
folded batch-norm statistics still folds). A folded constant keeps the control inputs of
the node and of its constant inputs, so a constant inside a ``kl.cond`` branch stays dead
when the branch is not taken; a shape materialized from a ``Switch``'s port waits for an
``Identity`` of that port (not the Switch, whose control edges are live either way). A
kernel that fails leaves the node alone: the run reports the error.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from kernloom.dtypes import as_dtype
from kernloom.errors import KernloomError
from kernloom.framework.node_def import NodeDef
from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.optimizer.analysis import Consumers, frame_nodes, may_rewrite, name_list
from kernloom.optimizer.graph_pass import GraphPass, PassContext
from kernloom.optimizer.rewriter import GraphRewriter

__all__ = ["ConstantFolding"]


class ConstantFolding(GraphPass):
    name = "constant_folding"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        if ctx.evaluate is None:
            return graph
        kept: set[str] = set()
        while True:
            try:
                return self._fold(graph, ctx, kept)
            except _Refused as refused:
                # A constant made a reader's shape inference fail (a Reshape to a
                # materialized shape its input cannot take): leave those unfolded, so the
                # run reports the error when, and only if, the reader runs.
                if not refused.inputs - kept:
                    raise refused.error from None
                kept |= refused.inputs

    def _fold(self, graph: Graph, ctx: PassContext, kept: set[str]) -> Graph:
        evaluate = ctx.evaluate
        assert evaluate is not None
        frames = frame_nodes(graph)
        candidates = [
            n
            for n in graph.nodes
            if n.inputs
            and n.name not in kept
            and may_rewrite(n, ctx.preserved, frames)
            and all(t.node.op == "Const" or _maybe_folded(t.node, ctx, frames) for t in n.inputs)
        ]
        consumers = Consumers(graph)
        shaped = {
            n.name: value
            for n in graph.nodes
            if n.name not in kept
            and (value := _materialized(n, ctx, frames, consumers)) is not None
        }
        if not candidates and not shaped:
            return graph
        wanted = {n.name for n in candidates}
        rewriter = GraphRewriter(graph)
        folded: list[str] = []
        too_large: list[str] = []
        for node in graph.nodes:
            if node.name in shaped:
                # The input's producer stays a control input: it still runs first (and
                # fails first), as grappler's shape materialization keeps it.
                data = _control_anchor(rewriter, rewriter.mapped(node.inputs[0]), node)
                _to_constants(rewriter, node, [shaped[node.name]], [data])
                folded.append(node.name)
                continue
            if node.name not in wanted:
                _copy(rewriter, node, folded)
                continue
            inputs = [rewriter.mapped(t) for t in node.inputs]
            if any(t.node.op != "Const" for t in inputs):
                _copy(rewriter, node, folded)
                continue
            values = [t.node.attrs["value"] for t in inputs]
            # A value no larger than its inputs (a folded weight transform) never balloons.
            allowed = max(ctx.max_constant_bytes, sum(np.asarray(v).nbytes for v in values))
            if _inferred_bytes(node) > allowed:  # known too large: not computed at all
                too_large.append(node.name)
                _copy(rewriter, node, folded)
                continue
            try:
                outputs = evaluate(_node_def(node), values)
            except KernloomError:
                _copy(rewriter, node, folded)
                continue
            if any(o.nbytes > allowed for o in outputs):
                too_large.append(node.name)
                _copy(rewriter, node, folded)
                continue
            _to_constants(
                rewriter, node, outputs, [c for t in inputs for c in t.node.control_inputs]
            )
            folded.append(node.name)
        if folded:
            ctx.note(f"folded {len(folded)} node(s) into constants: {name_list(folded)}")
        if too_large:
            ctx.note(
                f"left {len(too_large)} node(s) unfolded, over the "
                f"{ctx.max_constant_bytes} byte cap: {name_list(too_large)}"
            )
        if not folded:
            return graph
        return rewriter.finish(ctx.preserved)


class _Refused(Exception):
    """Copying a node failed (its shape inference, given inputs folded into constants)."""

    def __init__(self, error: KernloomError, inputs: set[str]) -> None:
        super().__init__(str(error))
        self.error = error
        self.inputs = inputs
        """The node's inputs that this pass folded."""


def _copy(rewriter: GraphRewriter, node: Node, folded: list[str]) -> None:
    try:
        rewriter.copy(node)
    except KernloomError as error:
        names = set(folded)
        raise _Refused(error, {t.node.name for t in node.inputs if t.node.name in names}) from None


def _to_constants(
    rewriter: GraphRewriter, node: Node, values: list[Any], controls: list[Node]
) -> None:
    """Replace ``node`` by ``Const`` nodes of ``values`` (under its own name where it has
    one output), which keep its control inputs and ``controls``."""
    waits = {c.name: c for c in [*rewriter.controls(node), *controls]}
    consts = [
        rewriter.add(
            "Const",
            [],
            {"value": _as_value(value, node, i), "dtype": node.outputs[i].dtype},
            name=node.name if len(values) == 1 else f"{node.name}/folded_{i}",
            exact_name=len(values) == 1,
            device=node.requested_device,
            control_inputs=list(waits.values()),
        )
        for i, value in enumerate(values)
    ]
    rewriter.alias(node, [c.outputs[0] for c in consts])


def _control_anchor(rewriter: GraphRewriter, source: Tensor, node: Node) -> Node:
    """The node a constant replacing ``node`` (which reads ``source``) waits for: the
    producer of ``source``, or, where that is a ``Switch``, an ``Identity`` of the port
    read (grappler's ``AddControlDependency``). A Switch runs live whichever port its
    predicate picks, so a control edge from the Switch itself is live on both sides of a
    ``kl.cond``: the constant would be live, and win the ``Merge``, where ``node`` is dead
    (the size of a branch's input, returned when the other branch is taken)."""
    if source.node.op != "Switch":
        return source.node
    return rewriter.add(
        "Identity",
        [source],
        name=f"{node.name}/control_{source.index}",
        device=node.requested_device,
    )


_SHAPE_ONLY: Final = frozenset({"Shape", "Size", "Rank", "ZerosLike", "OnesLike"})
"""Ops whose value follows from their input's shape alone: constants wherever shape
inference knows that shape (grappler's ``MaterializeShapes`` and constant-valued nodes)."""


def _materialized(
    node: Node, ctx: PassContext, frames: set[str], consumers: Consumers
) -> np.ndarray[Any, Any] | None:
    """The value of a ``_SHAPE_ONLY`` node whose input's shape is fully known, or None. A
    ``ZerosLike``/``OnesLike`` becomes a constant only where that lets what reads it fold
    too (every reader's other inputs are constants: the padded mask ONNX's AveragePool
    divides by) and within the constant cap, so a large filled tensor is never kept in
    the graph for nothing."""
    if node.op not in _SHAPE_ONLY or not may_rewrite(node, ctx.preserved, frames):
        return None
    shape = node.inputs[0].shape
    if not shape.is_fully_defined():
        return None
    if node.op in ("ZerosLike", "OnesLike"):
        readers = consumers.of_node(node)
        if not readers or any(
            t.node.op != "Const" and t.node is not node for c, _ in readers for t in c.inputs
        ):
            return None
    dims = shape.as_tuple()
    dtype = node.outputs[0].dtype.numpy_dtype
    if node.op == "Shape":
        return np.array(dims, dtype)
    if node.op == "Size":
        return np.array(math.prod(dims), dtype)
    if node.op == "Rank":
        return np.array(len(dims), dtype)
    if math.prod(dims) * dtype.itemsize > ctx.max_constant_bytes:
        return None
    return np.zeros(dims, dtype) if node.op == "ZerosLike" else np.ones(dims, dtype)


def _maybe_folded(node: Node, ctx: PassContext, frames: set[str]) -> bool:
    """Whether ``node`` may turn into a constant in this same pass (its inputs may)."""
    return bool(node.inputs) and may_rewrite(node, ctx.preserved, frames)


def _inferred_bytes(node: Node) -> int:
    """The bytes of ``node``'s outputs as far as shape inference knows them (0 for an
    output of unknown size): a huge ``Fill`` is refused before it is computed, instead of
    computed and thrown away in every round of the optimizer."""
    total = 0
    for tensor in node.outputs:
        count = tensor.shape.num_elements()
        if count is not None:
            total += count * tensor.dtype.itemsize
    return total


def _node_def(node: Node) -> NodeDef:
    return NodeDef(name=node.name, op=node.op, attrs=dict(node.attrs))


def _as_value(value: Any, node: Node, index: int) -> np.ndarray[Any, Any]:
    array = np.asarray(value)
    want = node.outputs[index].dtype.numpy_dtype
    if array.dtype != want:
        array = array.astype(want)
    assert as_dtype(array.dtype) is node.outputs[index].dtype
    # (not np.ascontiguousarray: it turns a 0-d value into shape (1,))
    return array if array.flags.c_contiguous else array.copy(order="C")
