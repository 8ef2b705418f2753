"""``ControlFlowInfo``: which loop frame every node runs in, worked out once per graph.

A node runs in the frame its inputs come from (TensorFlow's ``BuildControlFlowInfo``):
``Enter`` runs in the parent frame and its outputs are in the child frame it names;
``Exit`` runs in the child frame and its outputs are in the parent; every other node's
outputs are in its own frame. Nodes without inputs are in the root frame, which is why
the loop builders give the constants of a loop body a control input from the loop.

A malformed graph is rejected here, naming the nodes: a node fed from two frames, an Exit
or NextIteration outside any loop, a NextIteration that does not feed a Merge of its own
frame, a frame entered from two different parent frames, or a cycle that is not a loop.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Final

from kernloom.errors import InvalidArgumentError
from kernloom.graph.graph import BACK_EDGE_OPS, Graph, Node

__all__ = ["ROOT_FRAME", "ControlFlowInfo", "FrameInfo", "has_control_flow"]

ROOT_FRAME: Final = ""
_FLOW_OPS: Final = frozenset({"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"})


def has_control_flow(graph: Graph) -> bool:
    """Whether any node is a control-flow op (so values can be dead and frames exist)."""
    return any(node.op in _FLOW_OPS for node in graph.nodes)


@dataclass(eq=False)
class FrameInfo:
    """One loop frame (or the root frame) of a graph: what is fixed about it."""

    name: str
    parent: FrameInfo | None
    parallel_iterations: int = 1
    nodes: list[int] = field(default_factory=list)
    """Nodes that run in this frame (by index in the graph's node list)."""
    enters: list[int] = field(default_factory=list)
    """Enter nodes whose outputs are in this frame (they run in the parent)."""
    exits: list[int] = field(default_factory=list)
    loop_cond: int | None = None

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def describe(self) -> str:
        return "the root frame" if self.is_root else f"frame {self.name!r}"


def _where(node: Node) -> str:
    return f"node {node.name!r} (op {node.op})"


class ControlFlowInfo:
    """The frame of every node of ``graph``; raises ``InvalidArgumentError`` for a graph
    whose loops are malformed."""

    def __init__(self, graph: Graph) -> None:
        nodes = graph.nodes
        self.nodes = nodes
        index = {node.name: i for i, node in enumerate(nodes)}
        self.root = FrameInfo(ROOT_FRAME, None)
        self.frames: dict[str, FrameInfo] = {ROOT_FRAME: self.root}
        sources: list[list[int]] = []
        consumers: list[list[int]] = [[] for _ in nodes]
        for i, node in enumerate(nodes):
            found = [index[t.node.name] for t in node.inputs if t.node.op not in BACK_EDGE_OPS]
            found += [index[c.name] for c in node.control_inputs if c.op not in BACK_EDGE_OPS]
            sources.append(found)
            for src in set(found):
                consumers[src].append(i)
        self._partial: list[FrameInfo | None] = [None] * len(nodes)
        for i in self._order(nodes, sources, consumers):
            self._partial[i] = self._frame_for(i, sources[i])
        self.frame_of: list[FrameInfo] = [f for f in self._partial if f is not None]
        """The frame each node runs in, by index in ``graph.nodes``."""
        self._check_back_edges(index)

    def _order(
        self, nodes: list[Node], sources: list[list[int]], consumers: list[list[int]]
    ) -> list[int]:
        pending = [len(set(s)) for s in sources]
        ready = [i for i, count in enumerate(pending) if count == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for user in consumers[i]:
                pending[user] -= 1
                if pending[user] == 0:
                    heapq.heappush(ready, user)
        if len(order) != len(nodes):
            stuck = sorted(nodes[i].name for i, count in enumerate(pending) if count)
            raise InvalidArgumentError(
                f"the graph has a cycle that is not a loop (only a NextIteration may feed an "
                f"earlier node); nodes on or after it: {', '.join(stuck[:8])}"
            )
        return order

    def output_frame(self, src: int) -> FrameInfo:
        """The frame of ``src``'s outputs."""
        node, frame = self.nodes[src], self._partial[src]
        assert frame is not None  # sources are placed before their consumers
        if node.op == "Enter":
            return self.frames[node.attrs["frame_name"]]
        if node.op == "Exit":
            assert frame.parent is not None  # checked when the Exit was placed in its frame
            return frame.parent
        return frame

    def _frame_for(self, i: int, sources: list[int]) -> FrameInfo:
        node = self.nodes[i]
        frame = self.root
        if sources:
            frame = self.output_frame(sources[0])
            for src in sources[1:]:
                other = self.output_frame(src)
                if other is not frame:
                    raise InvalidArgumentError(
                        f"{_where(node)} is fed from two frames: {self.nodes[sources[0]].name!r} "
                        f"in {frame.describe()} and {self.nodes[src].name!r} in "
                        f"{other.describe()}. A value enters a loop only through Enter and "
                        f"leaves it only through Exit."
                    )
        frame.nodes.append(i)
        if node.op == "Enter":
            self._enter(i, node, frame)
        elif node.op == "Exit":
            if frame.is_root:
                raise InvalidArgumentError(
                    f"{_where(node)} is outside any loop frame: an Exit must be fed from "
                    f"inside a loop (a Switch of a frame entered through Enter)"
                )
            frame.exits.append(i)
        elif node.op == "NextIteration" and frame.is_root:
            raise InvalidArgumentError(
                f"{_where(node)} is outside any loop frame: a NextIteration must be fed "
                f"from inside a loop"
            )
        elif node.op == "LoopCond":
            frame.loop_cond = i
        elif node.op == "_Retval" and not frame.is_root:
            # It would run once per iteration and the run would return one of them.
            fetched = node.inputs[0].name if node.inputs else node.name
            raise InvalidArgumentError(
                f"cannot fetch {fetched!r}: it is computed inside a loop ({frame.describe()}), "
                f"where it has one value per iteration, not one for the "
                f"run (TensorFlow marks such tensors not fetchable). Return it from the body "
                f"as a loop variable and fetch the loop's output instead."
            )
        return frame

    def _enter(self, i: int, node: Node, parent: FrameInfo) -> None:
        name = str(node.attrs["frame_name"])
        if not name:
            raise InvalidArgumentError(f"{_where(node)} has an empty frame_name")
        child = self.frames.get(name)
        if child is None:
            child = FrameInfo(name, parent, int(node.attrs["parallel_iterations"]))
            self.frames[name] = child
        elif child.parent is not parent:
            assert child.parent is not None
            raise InvalidArgumentError(
                f"{_where(node)} enters frame {name!r} from {parent.describe()}, but other "
                f"Enter nodes enter it from {child.parent.describe()}; a frame has one parent"
            )
        child.enters.append(i)

    def _check_back_edges(self, index: dict[str, int]) -> None:
        for i, node in enumerate(self.nodes):
            for tensor in node.inputs:
                src = tensor.node
                if src.op not in BACK_EDGE_OPS:
                    continue
                if node.op != "Merge":
                    raise InvalidArgumentError(
                        f"NextIteration node {src.name!r} feeds {_where(node)}; a "
                        f"NextIteration must feed the Merge at the top of its loop"
                    )
                mine, theirs = self.frame_of[i], self.frame_of[index[src.name]]
                if mine is not theirs:
                    raise InvalidArgumentError(
                        f"NextIteration node {src.name!r} runs in {theirs.describe()} but "
                        f"feeds Merge {node.name!r} in {mine.describe()}; both must be in "
                        f"the same loop"
                    )
            for control in node.control_inputs:
                if control.op in BACK_EDGE_OPS:
                    raise InvalidArgumentError(
                        f"NextIteration node {control.name!r} is a control input of "
                        f"{_where(node)}; it may only feed a Merge"
                    )
