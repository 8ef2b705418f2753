"""Partitioning (TensorFlow's ``Partition()``): one graph per device, Send/Recv on every
cross-device edge.

- A data edge from a node on device A to a node on device B becomes a ``_Send`` in A's
  partition and a ``_Recv`` in B's, keyed by a rendezvous key naming both devices, A's
  incarnation and the tensor. There is one pair per tensor and destination device,
  shared by all consumers there.
- When the consuming kernel on B declares that input host-memory (a shape, an axis), the
  ``_Recv`` receives into host memory (``recv_into_host_memory``).
- A control edge across devices becomes a dummy scalar ``Const`` in A (after the source
  node), sent to B, whose ``_Recv`` is a control input of the destination node.

Partitions are ordinary ``Graph``s, so they dump to JSON for inspection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from kernloom.errors import InvalidArgumentError
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.device_name import parse_device_name
from kernloom.framework.memory_types import memory_types
from kernloom.graph.graph import BACK_EDGE_OPS, Graph, Node, with_stand_ins
from kernloom.graph.tensor import Tensor
from kernloom.registry import Registry, registry_of
from kernloom.runtime.control_flow import has_control_flow
from kernloom.runtime.control_loops import ControlLoops

__all__ = ["PartitionResult", "partition", "rendezvous_key"]

SEND: Final = "_Send"
RECV: Final = "_Recv"
CONTROL_SUFFIX: Final = "/_control"


def rendezvous_key(
    send_device: str,
    incarnation: int,
    recv_device: str,
    tensor: str,
    frame_iter: tuple[str, int] = ("0", 0),
) -> str:
    """TensorFlow's key: ``src;incarnation;dst;tensor;frame:iter``."""
    return (
        f"{send_device};{incarnation:016x};{recv_device};{tensor};{frame_iter[0]}:{frame_iter[1]}"
    )


@dataclass
class PartitionResult:
    """The per-device graphs and the rendezvous keys that connect them."""

    graphs: dict[str, Graph]
    """Full device name -> that device's partition."""
    keys: list[str] = field(default_factory=list)
    """Every Send/Recv pair's rendezvous key, in creation order."""

    def num_pairs(self) -> int:
        return len(self.keys)


class _Partitioner:
    def __init__(
        self,
        graph: Graph,
        placement: Mapping[str, str],
        devices: DeviceMgr | None,
        registry: Registry,
    ) -> None:
        self.graph = graph
        self.placement = placement
        self.devices = devices
        self.registry = registry
        self.parts: dict[str, Graph] = {}
        self.recvs: dict[tuple[str, str], Tensor] = {}  # (tensor or control name, dst) -> recv
        self.keys: list[str] = []
        self.loops = ControlLoops(graph, placement) if has_control_flow(graph) else None

    def part(self, device: str) -> Graph:
        if device not in self.parts:
            part = Graph(self.registry)
            part.reserve_names([n.name for n in self.graph.nodes])
            self.parts[device] = part
        return self.parts[device]

    def incarnation(self, device: str) -> int:
        if self.devices is None:
            return 0
        return self.devices.lookup(device).attributes.incarnation

    def host_memory_inputs(self, node: Node, device: str) -> frozenset[int]:
        """Input indices the node's kernel on ``device`` reads from host memory."""
        device_type = parse_device_name(device).device_type or ""
        backend = self.devices.lookup(device).backend if self.devices is not None else None
        kernel_def = self.registry.find_kernel(node.to_node_def(), device_type, backend).kernel_def
        host_inputs, _ = memory_types(node.op_def, node.attrs, kernel_def)
        return host_inputs

    def pair(self, source: Tensor, src_dev: str, dst_dev: str, *, host: bool, what: str) -> Tensor:
        """The ``_Recv`` in ``dst_dev`` of ``source`` (a tensor of ``src_dev``'s partition)."""
        key = rendezvous_key(src_dev, self.incarnation(src_dev), dst_dev, what)
        self.keys.append(key)
        attrs = {
            "tensor_name": what,
            "send_device": src_dev,
            "recv_device": dst_dev,
            "send_device_incarnation": self.incarnation(src_dev) & (2**63 - 1),
        }
        dst_short = dst_dev.rsplit("/device:", 1)[-1].replace(":", "_")
        src_short = src_dev.rsplit("/device:", 1)[-1].replace(":", "_")
        base = what.replace(":", "_").replace("^", "")
        self.part(src_dev).add_node(
            SEND, [source], attrs, name=f"{base}/_send_to_{dst_short}", device=src_dev
        )
        recv = self.part(dst_dev).add_node(
            RECV,
            [],
            {
                **attrs,
                "tensor_type": source.dtype,
                "shape": source.shape,
                "recv_into_host_memory": host,
            },
            name=f"{base}/_recv_from_{src_short}",
            device=dst_dev,
        )
        return recv.outputs[0]

    def recv_of(self, tensor: Tensor, dst: str, *, host: bool, consumer: Node) -> Tensor:
        """The ``_Recv`` in ``dst`` of ``tensor`` (one per tensor and device)."""
        key = (tensor.name, dst)
        if key not in self.recvs:
            src = self.placement[tensor.node.name]
            source = self.part(src).tensor(tensor.name)
            self.recvs[key] = self.pair(source, src, dst, host=host, what=tensor.name)
            self.note_recv_frame(self.recvs[key].node, dst, consumer)
        return self.recvs[key]

    def note_recv_frame(self, recv: Node, dst: str, consumer: Node) -> None:
        """Remember a ``_Recv`` that runs inside a loop (it runs in its consumer's frame)."""
        if self.loops is not None:
            self.loops.note_recv(recv, dst, consumer)

    def run(self) -> PartitionResult:
        later: list[tuple[Node, int, Tensor]] = []
        for node in self.graph.nodes:
            dst = self.placement[node.name]
            part = self.part(dst)
            host = (
                self.host_memory_inputs(node, dst)
                if any(self.placement[t.node.name] != dst for t in node.inputs)
                else frozenset()
            )
            found: list[Tensor | None] = []
            for index, tensor in enumerate(node.inputs):
                src = self.placement[tensor.node.name]
                if tensor.node.op in BACK_EDGE_OPS and tensor.node.name not in self.part(src):
                    later.append((node, index, tensor))  # a loop's back edge: closed below
                    found.append(None)
                elif src == dst:
                    found.append(part.tensor(tensor.name))
                else:
                    found.append(self.recv_of(tensor, dst, host=index in host, consumer=node))
            inputs = with_stand_ins(node, found)
            controls: list[Node] = []
            for control in node.control_inputs:
                src = self.placement[control.name]
                if src == dst:
                    controls.append(part.node(control.name))
                    continue
                key = (f"^{control.name}", dst)
                if key not in self.recvs:
                    source_part = self.part(src)
                    dummy = source_part.add_node(
                        "Const",
                        [],
                        {"value": np.zeros((), np.float32), "dtype": np.float32},
                        name=f"{control.name}{CONTROL_SUFFIX}",
                        device=src,
                        control_inputs=[source_part.node(control.name)],
                    )
                    self.recvs[key] = self.pair(
                        dummy.outputs[0], src, dst, host=False, what=f"^{control.name}"
                    )
                    self.note_recv_frame(self.recvs[key].node, dst, node)
                controls.append(self.recvs[key].node)
            part.copy_node(node, node.group_inputs(inputs), device=dst, control_inputs=controls)
        for node, index, tensor in later:
            dst = self.placement[node.name]
            part = self.part(dst)
            if self.placement[tensor.node.name] == dst:
                source = part.tensor(tensor.name)
            else:
                source = self.recv_of(tensor, dst, host=False, consumer=node)
            part.update_input(part.node(node.name), index, source)
        if self.loops is not None:
            self.loops.add_control_loops(self)
        return PartitionResult(self.parts, self.keys)


def partition(
    graph: Graph,
    placement: Mapping[str, str],
    *,
    devices: DeviceMgr | None = None,
    registry: Registry | None = None,
) -> PartitionResult:
    """Split ``graph`` by ``placement`` (node name -> full device name).

    ``devices`` gives incarnations for the keys and backends for host-memory lookups;
    every node of the graph must be placed.
    """
    missing = [n.name for n in graph.nodes if n.name not in placement]
    if missing:
        raise InvalidArgumentError(
            f"cannot partition: nodes without a device: {', '.join(missing)}"
        )
    return _Partitioner(graph, placement, devices, registry or registry_of(graph.registry)).run()
