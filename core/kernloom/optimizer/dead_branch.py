"""Dead-branch removal (grappler's ``LoopOptimizer``/``RemoveDeadBranches``): a ``Switch``
whose predicate is a constant always forwards its data to the same port, so the other
port's branch never runs.

The live port is replaced by the Switch's data, every node that only the dead port
reaches is dropped, and each ``Merge`` left with one live input becomes that input (an
``Identity`` under the Merge's name when the Merge is fetched). A Switch is left alone
when the dead branch reaches anything but such Merges (a preserved node, a loop, a Merge
whose ``value_index`` is used or that keeps two live inputs), or when it sits in a loop
frame.
"""

from __future__ import annotations

from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.optimizer.analysis import Consumers, frame_nodes, name_list
from kernloom.optimizer.graph_pass import GraphPass, PassContext
from kernloom.optimizer.rewriter import GraphRewriter

__all__ = ["DeadBranchRemoval"]

_LOOP_OPS = frozenset({"Enter", "Exit", "NextIteration", "LoopCond"})


class DeadBranchRemoval(GraphPass):
    name = "dead_branch"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        frames = frame_nodes(graph)
        consumers = Consumers(graph)
        dead: set[str] = set()
        switches: dict[str, int] = {}
        merges: dict[str, int] = {}
        anchored: dict[str, list[Node]] = {}  # a Merge -> the Switches whose region reaches it
        for node in graph.nodes:
            if node.op != "Switch" or node.name in frames or node.name in dead:
                continue
            pred = node.inputs[1]
            if pred.node.op != "Const" or pred.node.attrs["value"].size != 1:
                continue
            live = 1 if bool(pred.node.attrs["value"].reshape(())) else 0
            found = _dead_region(graph, consumers, node, 1 - live, ctx.preserved, dead, merges)
            if found is None:
                continue
            dead |= found[0]
            merges.update(found[1])
            for merge in found[1]:
                anchored.setdefault(merge, []).append(node)
            switches[node.name] = live
        if not switches:
            return graph
        rewriter = GraphRewriter(graph)
        for node in graph.nodes:
            if node.name in dead:
                continue
            if node.name in switches:
                data = rewriter.mapped(node.inputs[0])
                outputs = [data, data]  # the dead port has no consumers left
                rewriter.alias(node, outputs, data.node)
            elif node.name in merges:
                chosen = rewriter.mapped(node.inputs[merges[node.name]])
                anchors = _anchors(rewriter, anchored.get(node.name, []))
                # Fetched: keep the name, as an Identity. Waiting for the Switches' data:
                # the graph as built computes a Switch's data whichever side is taken, so
                # its producer still runs first (and fails, dividing by zero, say, where
                # the graph as built fails), and is dead with it inside an outer cond.
                if node.name in ctx.preserved or anchors:
                    chosen = rewriter.add(
                        "Identity",
                        [chosen],
                        name=node.name,
                        exact_name=True,
                        device=node.requested_device,
                        control_inputs=[*rewriter.controls(node), *anchors],
                    ).outputs[0]
                rewriter.alias(node, [chosen, chosen], chosen.node)
            else:
                rewriter.copy(node)
        ctx.note(
            f"removed the dead branch of {len(switches)} switch(es) with a constant "
            f"predicate ({len(dead)} node(s)): {name_list(switches)}"
        )
        return rewriter.finish(ctx.preserved)


def _anchors(rewriter: GraphRewriter, switches: list[Node]) -> list[Node]:
    """The producers (in the new graph) of the removed ``switches``' data that may fail or
    be dead: every one but a constant without control inputs."""
    found: dict[str, Node] = {}
    for switch in switches:
        data = rewriter.get(switch.inputs[0])
        if data is None:
            continue
        producer = data.node
        if producer.op != "Const" or producer.control_inputs:
            found[producer.name] = producer
    return list(found.values())


def _dead_region(
    graph: Graph,
    consumers: Consumers,
    switch: Node,
    port: int,
    preserved: frozenset[str],
    already: set[str],
    merges_so_far: dict[str, int],
) -> tuple[set[str], dict[str, int]] | None:
    """The nodes that port ``port`` of ``switch`` makes dead, and for each Merge it reaches
    the index of its one live input; None if the region cannot be removed cleanly."""
    dead_tensors: set[str] = {switch.outputs[port].name}
    dead: set[str] = set()
    merges: dict[str, int] = {}
    frontier: list[Node] = [c for c, _ in consumers.of_tensor(switch.outputs[port].name)]
    # Control edges from a Switch carry deadness of either port: refuse those.
    if consumers.control.get(switch.name):
        return None
    while frontier:
        node = frontier.pop()
        if node.name in dead or node.name in merges:
            continue
        if node.op == "Merge":
            live = [
                i
                for i, t in enumerate(node.inputs)
                if t.name not in dead_tensors and t.node.name not in already
            ]
            if len(live) != 1 or consumers.of_tensor(node.outputs[1].name):
                return None
            if node.name in merges_so_far:
                return None
            merges[node.name] = live[0]
            continue
        if node.name in preserved or node.op in _LOOP_OPS:
            return None
        dead.add(node.name)
        dead_tensors.update(t.name for t in node.outputs)
        frontier.extend(c for c, _ in consumers.of_node(node))
        frontier.extend(consumers.control.get(node.name, []))
    # A node reached only through some of its inputs is still dead (deadness spreads
    # through any dead input); a Merge's other inputs must not be dead too.
    for name, index in merges.items():
        merge = graph.node(name)
        kept: Tensor = merge.inputs[index]
        if kept.node.name in dead:
            return None
    return dead, merges
