"""Building a rewritten copy of a graph: the one way every pass changes a graph.

Graphs are append-only (a node's inputs are fixed when it is added, and shape inference
runs then), so a pass copies the graph node by node in topological order, and for each
node either copies it (``copy``, possibly with other inputs or attrs), replaces its
outputs with tensors already in the new graph (``alias``), or leaves it out. A loop's
back edge (``NextIteration`` -> ``Merge``) is copied with a stand-in input and closed in
``finish`` once its source exists, as ``build_step_graph`` does. ``finish`` also drops the
nodes that nothing preserved needs any more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any, TypeVar, final

from kernloom.framework.op_def import OpDef
from kernloom.graph.graph import Graph, Node, with_stand_ins
from kernloom.graph.tensor import Tensor

__all__ = ["FusedNode", "GraphRewriter", "live_nodes", "prune", "replace_groups"]

Group = TypeVar("Group")
FusedNode = tuple[str | OpDef, Sequence[Tensor | Sequence[Tensor]], Mapping[str, Any]]
"""What replaces a group: the op, its inputs (already in the new graph) and its attrs."""


@final
class GraphRewriter:
    """A new graph being built from ``source``; old tensor names map to new tensors.

    Public as ``kernloom.plugin.GraphRewriter``, for plugins' graph passes: walk
    ``source.nodes`` (a topological order), and for each node ``copy`` it, or ``add`` what
    replaces it and ``alias`` its outputs to the new tensors, or skip it; then return
    ``finish(ctx.preserved)``. A node replacing a preserved one keeps its name
    (``exact_name=True``)."""

    def __init__(self, source: Graph) -> None:
        self.source = source
        self.graph = source.derived()
        self.graph.reserve_names([n.name for n in source.nodes])
        self._tensors: dict[str, Tensor] = {}
        self._nodes: dict[str, Node] = {}
        self._later: list[tuple[str, int, str]] = []

    def get(self, tensor: Tensor) -> Tensor | None:
        """The new tensor standing for ``tensor`` of the source, if it exists yet."""
        return self._tensors.get(tensor.name)

    def mapped(self, tensor: Tensor) -> Tensor:
        """The new tensor standing for ``tensor`` of the source; its producer must have
        been copied or aliased already (true of every data input, in ``source.nodes``
        order, but a loop's back edge)."""
        return self._tensors[tensor.name]

    def new_node(self, node: Node) -> Node | None:
        """The new node standing for source node ``node`` (for control edges)."""
        return self._nodes.get(node.name)

    def controls(self, node: Node) -> list[Node]:
        """``node``'s control inputs, mapped into the new graph."""
        found = (self._nodes.get(c.name) for c in node.control_inputs)
        return [c for c in found if c is not None]

    def copy(
        self,
        node: Node,
        inputs: Sequence[Tensor] | None = None,
        attrs: Mapping[str, Any] | None = None,
        *,
        control_inputs: Sequence[Node] | None = None,
        device: str | None = None,
    ) -> Node:
        """Copy ``node`` under its own name: with its inputs mapped, or ``inputs`` (new
        tensors, one per flat input) instead; ``attrs`` replaces its attrs, ``device`` its
        requested device."""
        if inputs is None:
            found: list[Tensor | None] = []
            for index, t in enumerate(node.inputs):
                mapped = self._tensors.get(t.name)
                if mapped is None:  # a loop's back edge: its source comes later
                    self._later.append((node.name, index, t.name))
                found.append(mapped)
            inputs = with_stand_ins(node, found)
        requested = node.requested_device if device is None else device
        controls = self.controls(node) if control_inputs is None else control_inputs
        if attrs is None:  # as it is: checked attrs and output types taken over where they hold
            new = self.graph.copy_node(
                node, node.group_inputs(inputs), device=requested, control_inputs=controls
            )
        else:
            new = self.graph.add_node(
                node.op,
                node.group_inputs(inputs),
                dict(attrs),
                name=node.name,
                device=requested,
                control_inputs=controls,
                exact_name=True,
            )
        self.alias(node, new.outputs, new)
        return new

    def add(
        self,
        op: str | OpDef,
        inputs: Sequence[Tensor | Sequence[Tensor]],
        attrs: Mapping[str, Any] | None = None,
        *,
        name: str,
        exact_name: bool = False,
        device: str = "",
        control_inputs: Sequence[Node] = (),
    ) -> Node:
        """A node the pass makes; ``name`` is made unique unless ``exact_name`` (the name of
        the source node it replaces). ``op`` is a name, or the ``OpDef`` of an op a plugin
        defines (``ctx.registry.op_def(name)``): a graph made without that plugin's
        registry (``kl.Graph()``) knows only the standard ops, and adopts the definition."""
        return self.graph.add_node(
            op,
            inputs,
            dict(attrs or {}),
            name=name,
            device=device,
            control_inputs=control_inputs,
            exact_name=exact_name,
        )

    def alias(self, node: Node, outputs: Sequence[Tensor], control: Node | None = None) -> None:
        """Source ``node``'s outputs are now ``outputs``; control edges from it come from
        ``control`` (by default the producer of the first output)."""
        for old, new in zip(node.outputs, outputs, strict=True):
            self._tensors[old.name] = new
        target = control if control is not None else (outputs[0].node if outputs else None)
        if target is not None:
            self._nodes[node.name] = target

    def close_loops(self) -> Graph:
        """Give each loop's back edge its real source, now that it exists."""
        for consumer, index, name in self._later:
            self.graph.update_input(self.graph.node(consumer), index, self._tensors[name])
        self._later.clear()
        return self.graph

    def finish(self, roots: Iterable[str]) -> Graph:
        """Close the loops' back edges and drop what ``roots`` no longer need."""
        return prune(self.close_loops(), roots)


def replace_groups(
    graph: Graph,
    roots: Mapping[str, Group],
    inner: Set[str],
    fused: Callable[[GraphRewriter, Node, Group], FusedNode],
    preserved: Iterable[str],
) -> Graph:
    """A copy of ``graph`` in which each group of nodes is one node: the node named by a key
    of ``roots`` (the group's last, whose outputs its users read) becomes what ``fused``
    builds for it, under the root's name and requested device, so that users, fetches and
    traces find it in the root's place; the ``inner`` nodes the groups absorbed are left
    out; everything else is copied. How a fusing pass rewrites, whatever it fuses."""
    rewriter = GraphRewriter(graph)
    for node in graph.nodes:
        if node.name in inner:
            continue
        group = roots.get(node.name)
        if group is None:
            rewriter.copy(node)
            continue
        op, inputs, attrs = fused(rewriter, node, group)
        new = rewriter.add(
            op, inputs, attrs, name=node.name, exact_name=True, device=node.requested_device
        )
        rewriter.alias(node, new.outputs, new)
    return rewriter.finish(preserved)


def live_nodes(graph: Graph, roots: Iterable[str]) -> set[str]:
    """The nodes ``roots`` (those of them in the graph) need, through data and control
    edges; every stateful node counts as a root."""
    live: set[str] = set()
    stack = [graph.node(r) for r in roots if r in graph]
    stack += [n for n in graph.nodes if n.op_def.is_stateful]
    while stack:
        node = stack.pop()
        if node.name in live:
            continue
        live.add(node.name)
        stack.extend(t.node for t in node.inputs)
        stack.extend(node.control_inputs)
    return live


def prune(graph: Graph, roots: Iterable[str]) -> Graph:
    """``graph`` without the nodes ``roots`` do not need (``graph`` itself if none)."""
    live = live_nodes(graph, roots)
    if len(live) == len(graph):
        return graph
    rewriter = GraphRewriter(graph)
    for node in graph.nodes:
        if node.name in live:
            rewriter.copy(node)
    return rewriter.close_loops()
