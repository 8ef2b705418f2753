"""Elementwise fusion: a connected group of elementwise ops (``ELEMENTWISE_ARITY`` in
``op_library.fused_ops``) of one float dtype, asking for the same device, becomes one
``_FusedElementwise`` node whose kernel evaluates the whole expression in one pass over
cache-sized blocks, instead of one pass over memory (and one buffer) per op.

Groups grow from a root (a node whose value leaves the group: several consumers, a
preserved node, or a consumer that is not fusable) up through producers that have no
other consumer. The fused node takes the root's name and lists the group in
``_fused_from``. A group is fused only when the device type its nodes would run on has a
kernel for ``_FusedElementwise`` (else they run op by op) and it has at least two ops.

A fused node evaluates each op with the device plugin's own elementwise functions (numpy's
on the CPU, whichever plugin's ``_FusedElementwise`` kernel runs it): a node whose kernel
on that device type is another plugin's (one that replaced the default by priority) stays
out of every group, so that its kernel runs, as a labelled node's does.
"""

from __future__ import annotations

from typing import Final

from kernloom.errors import KernloomError
from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.op_library.fused_ops import ELEMENTWISE_ARITY
from kernloom.op_library.types import FLOATS
from kernloom.optimizer.analysis import Consumers, frame_nodes, fused_from, may_rewrite, name_list
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR, GraphPass, PassContext
from kernloom.optimizer.placement_hint import has_kernel, likely_device_type
from kernloom.optimizer.rewriter import FusedNode, GraphRewriter, replace_groups

__all__ = ["ElementwiseFusion"]

FUSED_OP: Final = "_FusedElementwise"


class ElementwiseFusion(GraphPass):
    name = "elementwise_fusion"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        if FUSED_OP not in ctx.registry.ops:
            return graph
        consumers = Consumers(graph)
        frames = frame_nodes(graph)
        fusable = {n.name for n in graph.nodes if _fusable(n, ctx, frames)}
        if len(fusable) < 2:
            return graph
        groups: dict[str, list[Node]] = {}
        taken: set[str] = set()
        device_types: dict[str, str | None] = {}
        defaults: dict[tuple[str, object, str], bool] = {}

        def device_type(node: Node) -> str | None:
            """The device type the node would run on, or None where it cannot be fused
            there: no kernel, or one that is not the device plugin's own."""
            if node.name not in device_types:
                kind = likely_device_type(node, ctx)
                if kind is not None and not _has_default_kernel(node, kind, ctx, defaults):
                    kind = None
                device_types[node.name] = kind
            return device_types[node.name]

        for root in reversed(graph.nodes):
            if root.name not in fusable or root.name in taken:
                continue
            kind = device_type(root)
            if kind is None:
                continue
            members = _grow(root, fusable, taken, consumers, ctx, kind, device_type)
            if len(members) < 2:
                continue
            attrs = {"T": root.outputs[0].dtype, "N": 1, "expression": "Neg(i0)"}
            if not has_kernel(FUSED_OP, attrs, kind, ctx):
                continue
            taken.update(m.name for m in members)
            groups[root.name] = members
        if not groups:
            return graph
        inner = {m.name for ms in groups.values() for m in ms} - set(groups)
        ctx.note(
            f"fused {len(groups)} group(s) of {sum(map(len, groups.values()))} elementwise "
            f"node(s): {name_list(f'{r} ({len(ms)} ops)' for r, ms in groups.items())}"
        )
        return replace_groups(graph, groups, inner, _fused, ctx.preserved)


def _fused(rewriter: GraphRewriter, root: Node, group: list[Node]) -> FusedNode:
    leaves, expression = _expression(group)
    attrs = {"expression": expression, FUSED_FROM_ATTR: fused_from(group)}
    return FUSED_OP, [[rewriter.mapped(t) for t in leaves]], attrs


def _fusable(node: Node, ctx: PassContext, frames: set[str]) -> bool:
    return (
        node.op in ELEMENTWISE_ARITY
        and node.outputs[0].dtype in FLOATS
        and all(t.dtype is node.outputs[0].dtype for t in node.inputs)
        and may_rewrite(node, ctx.preserved - {node.name}, frames)
        and not node.control_inputs
    )


def _has_default_kernel(
    node: Node, kind: str, ctx: PassContext, known: dict[tuple[str, object, str], bool]
) -> bool:
    """Whether the kernel ``node`` gets on ``kind`` (as the kernel factory picks it: the
    highest priority that fits) is one that a plugin registering ``kind``'s device
    factory registered: the kernel a fused node stands for. Another plugin's kernel that
    outranks it (``docs/kernels.md``: replace the default by priority) must run as itself.
    Known per op, dtype and device type (an elementwise op's kernels differ by ``T``
    only; labelled nodes are never fused)."""
    key = (node.op, node.outputs[0].dtype, kind)
    found = known.get(key)
    if found is None:
        try:
            chosen = ctx.registry.find_kernel(node.to_node_def(), kind)
        except KernloomError:
            found = False
        else:
            factories = ctx.registry.device_factories.registrations(kind)
            found = any(r.origin.plugin == chosen.origin.plugin for r in factories)
        known[key] = found
    return found


def _grow(
    root: Node,
    fusable: set[str],
    taken: set[str],
    consumers: Consumers,
    ctx: PassContext,
    kind: str,
    device_type: object,
) -> list[Node]:
    """The group under ``root``, producers first (a topological order)."""
    members: dict[str, Node] = {root.name: root}
    stack = [root]
    while stack:
        node = stack.pop()
        for tensor in node.inputs:
            producer = tensor.node
            if (
                producer.name in members
                or producer.name not in fusable
                or producer.name in taken
                or producer.name in ctx.preserved
                or producer.requested_device != root.requested_device
                or consumers.control.get(producer.name)
                or any(c.name not in members for c, _ in consumers.of_node(producer))
                or device_type(producer) != kind  # type: ignore[operator]
            ):
                continue
            members[producer.name] = producer
            stack.append(producer)
    order = {n.name: i for i, n in enumerate(root.graph.nodes)}
    return sorted(members.values(), key=lambda n: order[n.name])


def _expression(members: list[Node]) -> tuple[list[Tensor], str]:
    """The group's outside inputs and its expression (steps in ``members``' order)."""
    names = {m.name: k for k, m in enumerate(members)}
    leaves: list[Tensor] = []
    leaf_index: dict[str, int] = {}
    steps: list[str] = []
    for member in members:
        operands = []
        for tensor in member.inputs:
            if tensor.node.name in names:
                operands.append(f"t{names[tensor.node.name]}")
                continue
            if tensor.name not in leaf_index:
                leaf_index[tensor.name] = len(leaves)
                leaves.append(tensor)
            operands.append(f"i{leaf_index[tensor.name]}")
        steps.append(f"{member.op}({', '.join(operands)})")
    return leaves, "; ".join(steps)
