"""Common-subexpression elimination (grappler's ``CommonSubgraphElimination``): nodes
with the same op, attrs, inputs (in any order for commutative ops), control inputs and
requested device compute the same value; all but the first are replaced by it.

Stateful and random ops, control flow, the step's interface, labelled or colocated nodes
and nodes in loop frames are never merged; a preserved node may be the one kept, never
one dropped. Constants compare by dtype, shape and bytes.
"""

from __future__ import annotations

from collections.abc import Hashable

from kernloom.graph.graph import Graph, Node
from kernloom.optimizer.analysis import frame_nodes, hashable, may_rewrite, name_list
from kernloom.optimizer.graph_pass import GraphPass, PassContext
from kernloom.optimizer.rewriter import GraphRewriter

__all__ = ["CommonSubexpressionElimination"]


class CommonSubexpressionElimination(GraphPass):
    name = "cse"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        frames = frame_nodes(graph)
        rewriter = GraphRewriter(graph)
        seen: dict[Hashable, Node] = {}
        merged: list[str] = []
        for node in graph.nodes:
            if node.name in frames or not may_rewrite(node, frozenset(), frames):
                rewriter.copy(node)
                continue
            key = _key(node, rewriter)
            first = seen.get(key) if key is not None else None
            if first is not None and node.name not in ctx.preserved:
                rewriter.alias(node, first.outputs, first)
                merged.append(node.name)
                continue
            new = rewriter.copy(node)
            if key is not None:
                seen[key] = new
        if not merged:
            return graph
        ctx.note(f"merged {len(merged)} duplicate node(s): {name_list(merged)}")
        return rewriter.finish(ctx.preserved)


def _key(node: Node, rewriter: GraphRewriter) -> Hashable | None:
    inputs: list[str] = []
    for t in node.inputs:
        mapped = rewriter.get(t)
        if mapped is None:
            return None
        inputs.append(mapped.name)
    if node.op_def.is_commutative:
        inputs.sort()
    controls = sorted(c.name for c in rewriter.controls(node))
    attrs = tuple(sorted((k, hashable(v)) for k, v in node.attrs.items()))
    return (node.op, tuple(inputs), tuple(controls), node.requested_device, attrs)
