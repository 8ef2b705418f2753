"""The placer (seed 004, TensorFlow's ``Placer``): a device for every node, and why.

1. **Colocation groups** by union-find: a node and every node it must be colocated with
   (``_class = loc:@name``) form one group, placed together; so do a node that takes a
   ``resource`` input (a variable's handle) and the node that produces it.
2. **Requests**: a member's requested device (full or partial: ``GPU``, ``GPU:1``,
   ``/device:CPU:0``) is honoured. Where it cannot be -- no such device, or no kernel for a
   member there -- it is an error saying why, unless ``allow_soft_placement``, which falls
   back to the rule below and says so.
3. **Priority**: otherwise the group goes to the highest-priority device type on which
   *every* member has a kernel (labels included: a node asking for a label that exists on
   one type only can only go there), on that type's first device.
4. **Heuristics**, for nodes with no request and no colocation, as TensorFlow's: a
   *generator* (no inputs, one output, one consumer, such as a Const) joins its consumer's
   device; a *metadata* op (Shape, Reshape, Size, Rank) follows its input's device -- each
   only when it has a kernel there.

``Placement.explain()`` gives, per node, the device, the rule that chose it, and for every
device type whether the node has a kernel there and, if not, why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final, final

from kernloom.dtypes import resource
from kernloom.errors import Hint, InvalidArgumentError, KernloomError, NotFoundError, Setting
from kernloom.framework.device import Device
from kernloom.framework.device_independent_kernels import CORE_ORIGIN
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.device_name import DeviceSpec, parse_device_name
from kernloom.framework.node_def import NodeDef
from kernloom.framework.op_kernel import KernelSignature
from kernloom.graph.graph import Graph, Node
from kernloom.registry import Registry, registry_of
from kernloom.runtime.subgraph import step_node_label, step_node_where

__all__ = ["METADATA_OPS", "Placement", "PlacementDecision", "Placer", "TypeCandidate"]

METADATA_OPS: Final = frozenset({"Shape", "Reshape", "Size", "Rank"})
"""Ops that only look at (or relabel) their input's buffer: they follow its device."""


@dataclass(frozen=True, slots=True)
class TypeCandidate:
    device_type: str
    supported: bool
    reason: str
    """Why the node has no kernel on this type; empty when it has one."""


@dataclass(frozen=True, slots=True)
class PlacementDecision:
    node: str
    op: str
    device: str
    reason: str
    candidates: tuple[TypeCandidate, ...]

    def explain(self) -> str:
        lines = [f"{self.node} ({self.op}) -> {self.device}: {self.reason}"]
        for c in self.candidates:
            lines.append(
                f"    {c.device_type}: " + ("has a kernel" if c.supported else f"no: {c.reason}")
            )
        return "\n".join(lines)


@final
class Placement(Mapping[str, str]):
    """Node name -> full device name, with the decision behind each."""

    def __init__(self, decisions: Mapping[str, PlacementDecision]) -> None:
        self._decisions = dict(decisions)

    def __getitem__(self, node: str) -> str:
        return self._decisions[node].device

    def __iter__(self) -> Iterator[str]:
        return iter(self._decisions)

    def __len__(self) -> int:
        return len(self._decisions)

    def decision(self, node: str) -> PlacementDecision:
        return self._decisions[node]

    def explain(self) -> str:
        return "\n".join(d.explain() for d in self._decisions.values())


class _UnionFind:
    def __init__(self, names: list[str]) -> None:
        self.parent = {n: n for n in names}

    def find(self, name: str) -> str:
        root = name
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[name] != root:  # path compression
            self.parent[name], name = root, self.parent[name]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


@final
class Placer:
    def __init__(
        self,
        graph: Graph,
        devices: DeviceMgr,
        registry: Registry | None = None,
        *,
        allow_soft_placement: bool = False,
        log_device_placement: bool = False,
    ) -> None:
        self._graph = graph
        self._devices = devices
        self._registry = registry or registry_of(graph.registry)
        self._soft = allow_soft_placement
        self._log = log_device_placement
        self._types = devices.device_types()
        self._first: dict[str, Device] = {}
        for device in devices:
            self._first.setdefault(device.device_type, device)
        self._placement: Placement | None = None

    def _missing(self, device_type: str | None) -> str:
        return self._devices.why_missing(device_type)

    def explain(self) -> str:
        """Per node: the device, the rule that chose it, and every type's kernel status."""
        if self._placement is None:
            self.run()
        assert self._placement is not None
        return self._placement.explain()

    # -- per node -----------------------------------------------------------------------------

    def _candidates(self, node: Node) -> tuple[TypeCandidate, ...]:
        node_def = node.to_node_def()
        out = []
        for device_type in self._types:
            why = self._registry.kernels.why_not(
                node_def, node.attrs, device_type, self._first[device_type].backend
            )
            if why is None:
                why = self._unheld(node, node_def, device_type)
            out.append(TypeCandidate(device_type, why is None, why or ""))
        return tuple(out)

    def _unheld(self, node: Node, node_def: NodeDef, device_type: str) -> str | None:
        """Why a core kernel that takes every dtype (Identity, IdentityN, control flow)
        cannot run ``node`` on ``device_type``: a dtype of its inputs or outputs that the
        type's devices cannot hold (``Device.holds``). None where they can, and for
        plugins' kernels, which say their dtypes themselves."""
        kernels = self._registry.kernels
        if all(r.origin != CORE_ORIGIN for r in kernels.kernels(node.op)):
            return None  # (most ops: no second lookup)
        device = self._first[device_type]
        try:
            registration = kernels.find(node_def, node.attrs, device_type, device.backend)
        except KernloomError:  # (a tie between kernels: the run reports it, as before)
            return None
        if registration.origin != CORE_ORIGIN:
            return None
        signature = KernelSignature.make(
            node.name, node.op_def, node.attrs, registration.kernel_def
        )
        device_inputs = (
            t for i, t in enumerate(node.inputs) if i not in signature.host_memory_inputs
        )
        device_outputs = (
            t for i, t in enumerate(node.outputs) if i not in signature.host_memory_outputs
        )
        for tensor in (*device_inputs, *device_outputs):
            if not device.holds(tensor.dtype):
                return (
                    f"its devices ({device.backend}) cannot hold {tensor.dtype.name} values, "
                    f"which the core's {node.op} kernel would keep there"
                )
        return None

    def run(self) -> Placement:
        nodes = self._graph.nodes
        if not self._types:
            raise NotFoundError("cannot place the graph: the session has no devices")
        candidates = {n.name: self._candidates(n) for n in nodes}
        groups = _UnionFind([n.name for n in nodes])
        colocated: set[str] = set()
        for node in nodes:
            for target in node.colocation_names:
                if target not in self._graph:
                    raise InvalidArgumentError(
                        f"{step_node_where(node)} must be colocated with {target!r}, "
                        f"which is not in the graph"
                    )
                groups.union(target, node.name)
                colocated.update((target, node.name))
        for node in nodes:
            for tensor in node.inputs:
                if tensor.dtype is resource:  # a variable's users live where it lives
                    groups.union(tensor.node.name, node.name)
                    colocated.update((tensor.node.name, node.name))
        consumers: dict[str, set[str]] = {}
        for node in nodes:
            for tensor in node.inputs:
                consumers.setdefault(tensor.node.name, set()).add(node.name)

        def free(node: Node) -> bool:
            return not node.requested_device and node.name not in colocated

        generators = [
            n
            for n in nodes
            if free(n)
            and not n.inputs
            and not n.control_inputs
            and len(n.outputs) == 1
            and len(consumers.get(n.name, ())) == 1
        ]
        metadata = [n for n in nodes if free(n) and n.op in METADATA_OPS and n.inputs]
        deferred = {n.name for n in (*generators, *metadata)}

        members: dict[str, list[Node]] = {}
        for node in nodes:
            if node.name not in deferred:
                members.setdefault(groups.find(node.name), []).append(node)
        decisions: dict[str, PlacementDecision] = {}
        for group in members.values():
            device, reason = self._place_group(group, candidates)
            for node in group:
                decisions[node.name] = PlacementDecision(
                    node.name, node.op, device.name, reason, candidates[node.name]
                )
        for node in metadata:
            source = node.inputs[0].node.name
            self._follow(node, source, "metadata op: follows its input", candidates, decisions)
        for node in generators:
            (consumer,) = consumers[node.name]
            self._follow(
                node, consumer, "generator: follows its only consumer", candidates, decisions
            )
        ordered = {n.name: decisions[n.name] for n in nodes}
        if self._log:
            for decision in ordered.values():
                print(
                    f"{decision.node} ({decision.op}): {decision.device} [{decision.reason}]",
                    file=sys.stderr,
                )
        self._placement = Placement(ordered)
        return self._placement

    def _follow(
        self,
        node: Node,
        other: str,
        why: str,
        candidates: Mapping[str, tuple[TypeCandidate, ...]],
        decisions: dict[str, PlacementDecision],
    ) -> None:
        target = decisions.get(other)
        if target is not None:
            device = self._devices.lookup(target.device)
            if any(
                c.supported and c.device_type == device.device_type for c in candidates[node.name]
            ):
                decisions[node.name] = PlacementDecision(
                    node.name, node.op, device.name, f"{why} {other!r}", candidates[node.name]
                )
                return
        device, reason = self._place_group([node], candidates)
        decisions[node.name] = PlacementDecision(
            node.name, node.op, device.name, reason, candidates[node.name]
        )

    def _place_group(
        self, group: list[Node], candidates: Mapping[str, tuple[TypeCandidate, ...]]
    ) -> tuple[Device, str]:
        supported = [
            t
            for t in self._types
            if all(
                next(c for c in candidates[n.name] if c.device_type == t).supported for n in group
            )
        ]
        what = _describe_group(group)
        requested = self._requested(group)
        if requested is not None:
            spec, requester = requested
            matching = [d for d in self._devices if spec.matches(d.spec)]
            fitting = [d for d in matching if d.device_type in supported]
            if fitting:
                return fitting[
                    0
                ], f"requested {requester.requested_device!r} by node {requester.name!r}"
            if not matching:
                problem = (
                    f"{what} requests device {requester.requested_device!r}, but no device "
                    f"matches it{self._missing(spec.device_type)}; the devices are: "
                    f"{', '.join(d.name for d in self._devices)}"
                )
            else:
                wanted = matching[0].device_type
                lacking = [
                    (n, next(c for c in candidates[n.name] if c.device_type == wanted))
                    for n in group
                ]
                details = "; ".join(
                    f"{step_node_where(n)}: {c.reason}" for n, c in lacking if not c.supported
                )
                problem = (
                    f"{what} requests device {requester.requested_device!r}, but cannot run "
                    f"on {wanted}: {details}"
                )
            if not self._soft or not supported:
                soft = Hint(
                    "({soft} would place it on a supported device instead)",
                    soft=Setting("soft_placement"),
                )
                raise InvalidArgumentError(problem, hint=None if self._soft else soft)
            device = self._first[supported[0]]
            return (
                device,
                f"soft placement: {problem}; placed on the highest-priority supported type, "
                f"{supported[0]}",
            )
        if not supported:
            lines = [
                f"  - {step_node_where(n)}: "
                + ", ".join(
                    f"{c.device_type}: {'yes' if c.supported else c.reason}"
                    for c in candidates[n.name]
                )
                for n in group
            ]
            raise InvalidArgumentError(
                f"no device type can run {what}: no type has a kernel for every member.\n"
                + "\n".join(lines)
            )
        rule = (
            "highest-priority device type with a kernel for it"
            if len(group) == 1
            else "highest-priority device type with a kernel for every member of its "
            "colocation group"
        )
        return self._first[supported[0]], rule

    def _requested(self, group: list[Node]) -> tuple[DeviceSpec, Node] | None:
        merged: DeviceSpec | None = None
        first: Node | None = None
        for node in group:
            if not node.requested_device:
                continue
            spec = parse_device_name(node.requested_device)
            if merged is None or first is None:
                merged, first = spec, node
                continue
            fields = ("job", "replica", "task", "device_type", "device_index")
            combined = {}
            for field in fields:
                a, b = getattr(merged, field), getattr(spec, field)
                if a is not None and b is not None and a != b:
                    raise InvalidArgumentError(
                        f"nodes {step_node_label(first)} and {step_node_label(node)} must be "
                        f"colocated but request different devices: "
                        f"{first.requested_device!r} and {node.requested_device!r}"
                    )
                combined[field] = a if a is not None else b
            merged = DeviceSpec(**combined)
        return (merged, first) if merged is not None and first is not None else None


def _describe_group(group: list[Node]) -> str:
    """How a placement error names ``group``, in the user's terms: a fetch's ``_Retval``,
    colocated with its producer only because it is fetched, is left out beside it, and a
    step's ``_Arg``/``_Retval`` is named by the feed or fetch it stands for
    (``step_node_where``), never by its internal name (``feed/x_0``)."""
    names = {n.name for n in group}
    shown = [
        n for n in group if not (n.op == "_Retval" and n.inputs and n.inputs[0].node.name in names)
    ] or group
    if len(shown) == 1:
        return step_node_where(shown[0])
    return f"colocation group [{', '.join(step_node_label(n) for n in shown)}]"
