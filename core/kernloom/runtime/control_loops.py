"""Loops across devices: a control loop per device (TensorFlow's ``AddControlFlow`` in
graph_partition.cc).

A ``_Recv`` has no data input, so by itself it would run once, in the root frame. When a
loop's nodes sit on several devices, every device that takes part gets a small loop of its
own that iterates in step with the real one:

    Const -> Enter(frame) -> Merge -> Switch(pred = the loop's LoopCond) -> Identity (pivot)
                              ^                                               |
                              +------------------ NextIteration <-------------+

The predicate reaches the other devices through an ordinary Send/Recv pair. Every
``_Recv`` of the frame on that device gets a control input from the control loop's
``Merge``, so it runs once in every iteration the real loop has (the matching ``_Send``
runs in every iteration too, with a live or a dead value). The control loops of a nested
frame hang off the pivot of their parent frame's control loop on the same device.
Loops on one device get none of this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from kernloom.errors import InvalidArgumentError
from kernloom.graph.graph import Graph, Node
from kernloom.runtime.control_flow import ControlFlowInfo, FrameInfo

if TYPE_CHECKING:
    from kernloom.runtime.partition import _Partitioner

__all__ = ["ControlLoops"]


def _depth(frame: FrameInfo) -> int:
    depth = 0
    while frame.parent is not None:
        frame, depth = frame.parent, depth + 1
    return depth


class ControlLoops:
    """Which frames span devices, and the Recvs that run inside them."""

    def __init__(self, graph: Graph, placement: Mapping[str, str]) -> None:
        self.info = ControlFlowInfo(graph)
        self.nodes = graph.nodes
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.placement = placement
        span: dict[int, set[str]] = {}
        for i, node in enumerate(self.nodes):
            frame: FrameInfo | None = self.info.frame_of[i]
            if node.op == "Enter":  # its outputs (and any Send of them) are in the child
                frame = self.info.frames[node.attrs["frame_name"]]
            while frame is not None and frame.parent is not None:
                span.setdefault(id(frame), set()).add(placement[node.name])
                frame = frame.parent
        self.spanning = sorted(
            (f for f in self.info.frames.values() if len(span.get(id(f), ())) > 1),
            key=_depth,
        )
        # A frame spanning devices needs control loops in its ancestors on the same devices.
        needed = {id(f) for f in self.spanning}
        for frame in list(self.spanning):
            parent = frame.parent
            while parent is not None and parent.parent is not None:
                if id(parent) not in needed:
                    needed.add(id(parent))
                    self.spanning.append(parent)
                parent = parent.parent
        self.spanning.sort(key=_depth)
        self.span = span
        self.recvs: list[tuple[Node, str, FrameInfo]] = []

    def note_recv(self, recv: Node, device: str, consumer: Node) -> None:
        """``recv`` on ``device`` feeds ``consumer``: it runs in the consumer's frame."""
        frame = self.info.frame_of[self.index[consumer.name]]
        if frame.parent is not None:
            self.recvs.append((recv, device, frame))

    def add_control_loops(self, partitioner: _Partitioner) -> None:
        if not self.spanning:
            return
        merges: dict[tuple[int, str], Node] = {}
        pivots: dict[tuple[int, str], Node] = {}
        for frame in self.spanning:
            if frame.loop_cond is None:
                raise InvalidArgumentError(
                    f"frame {frame.name!r} spans devices "
                    f"({', '.join(sorted(self.span[id(frame)]))}) but has no LoopCond node, so "
                    f"the other devices cannot tell when its iterations end"
                )
            loop_cond = self.nodes[frame.loop_cond]
            for device in sorted(self.span[id(frame)]):
                parent_pivot = None
                if frame.parent is not None and frame.parent.parent is not None:
                    parent_pivot = pivots[(id(frame.parent), device)]
                merge, pivot = self._control_loop(
                    partitioner, frame, device, loop_cond, parent_pivot
                )
                merges[(id(frame), device)] = merge
                pivots[(id(frame), device)] = pivot
        for recv, device, frame in self.recvs:
            control = merges.get((id(frame), device))
            if control is not None and control not in recv.control_inputs:
                recv.control_inputs.append(control)

    def _control_loop(
        self,
        partitioner: _Partitioner,
        frame: FrameInfo,
        device: str,
        loop_cond: Node,
        parent_pivot: Node | None,
    ) -> tuple[Node, Node]:
        part = partitioner.part(device)
        short = device.rsplit("/device:", 1)[-1].replace(":", "_")
        base = f"{frame.name}/_control_loop_{short}"

        def add(op: str, inputs: list[Any], attrs: dict[str, Any], name: str, **kw: Any) -> Node:
            return part.add_node(op, inputs, attrs, name=f"{base}/{name}", device=device, **kw)

        dummy = add(
            "Const",
            [],
            {"value": np.zeros((), np.float32), "dtype": np.float32},
            "dummy",
            control_inputs=[parent_pivot] if parent_pivot is not None else [],
        )
        enter = add(
            "Enter",
            [dummy.outputs[0]],
            {"frame_name": frame.name, "parallel_iterations": frame.parallel_iterations},
            "enter",
        )
        merge = add("Merge", [[enter.outputs[0], enter.outputs[0]]], {}, "merge")
        if partitioner.placement[loop_cond.name] == device:
            pred = part.tensor(loop_cond.outputs[0].name)
        else:
            pred = partitioner.recv_of(loop_cond.outputs[0], device, host=True, consumer=loop_cond)
            if merge not in pred.node.control_inputs:
                pred.node.control_inputs.append(merge)
        switch = add("Switch", [merge.outputs[0], pred], {}, "switch")
        pivot = add("Identity", [switch.outputs[1]], {}, "pivot")
        next_iteration = add("NextIteration", [pivot.outputs[0]], {}, "next_iteration")
        part.update_input(merge, 1, next_iteration.outputs[0])
        return merge, pivot
