"""Facts about a graph that several passes ask: who consumes a tensor, which nodes sit in
a loop frame, which nodes a pass may touch at all."""

from __future__ import annotations

import hashlib
import weakref
from collections import defaultdict
from collections.abc import Hashable, Iterable
from typing import Any, Final

import numpy as np

from kernloom.framework.node_def import KERNEL_LABEL_ATTR, KERNEL_SCOPE_ATTR
from kernloom.graph.graph import COLOCATION_ATTR, Graph, Node
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR

__all__ = [
    "CONTROL_FLOW_OPS",
    "UNTOUCHABLE_OPS",
    "Consumers",
    "frame_nodes",
    "fused_from",
    "is_random",
    "may_rewrite",
    "name_list",
]

CONTROL_FLOW_OPS: Final = frozenset(
    {"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"}
)
UNTOUCHABLE_OPS: Final = frozenset(
    {"_Arg", "_Retval", "_Send", "_Recv", "Placeholder", "NoOp", *CONTROL_FLOW_OPS}
)
"""Ops no pass removes, merges or folds: the step's interface, transfers, control flow."""


class Consumers:
    """For each tensor its consuming (node, input index) pairs; for each node the nodes
    that take a control edge from it."""

    def __init__(self, graph: Graph) -> None:
        self.data: dict[str, list[tuple[Node, int]]] = defaultdict(list)
        self.control: dict[str, list[Node]] = defaultdict(list)
        for node in graph.nodes:
            for index, tensor in enumerate(node.inputs):
                self.data[tensor.name].append((node, index))
            for dep in node.control_inputs:
                self.control[dep.name].append(node)

    def of_tensor(self, name: str) -> list[tuple[Node, int]]:
        return self.data.get(name, [])

    def of_node(self, node: Node) -> list[tuple[Node, int]]:
        return [c for t in node.outputs for c in self.data.get(t.name, [])]

    def count(self, node: Node) -> int:
        """Data consumers of every output plus control consumers."""
        return len(self.of_node(node)) + len(self.control.get(node.name, []))


def frame_nodes(graph: Graph) -> set[str]:
    """Nodes inside a ``while_loop`` frame: reachable from an ``Enter`` (by data or control
    edges) without passing an ``Exit``. Passes leave them alone unless frame-safe."""
    stack = [n for n in graph.nodes if n.op == "Enter"]
    if not stack:  # no loop (most graphs): no consumer table to build
        return set()
    consumers = Consumers(graph)
    inside: set[str] = set()
    while stack:
        node = stack.pop()
        if node.name in inside:
            continue
        inside.add(node.name)
        if node.op == "Exit":
            continue
        stack.extend(c for c, _ in consumers.of_node(node))
        stack.extend(consumers.control.get(node.name, []))
    return inside


def node_signature(node: Node) -> tuple[object, ...]:
    """What a node computes, comparable across rewrites: op, device, data and control
    inputs by name, attrs (array values by content)."""
    return (
        node.op,
        node.requested_device,
        tuple((t.node.name, t.index) for t in node.inputs),
        tuple(sorted(c.name for c in node.control_inputs)),
        tuple(sorted((k, hashable(v)) for k, v in node.attrs.items())),
    )


def hashable(value: Any) -> Hashable:
    """An attr value as a hashable key that compares by content (arrays by their bytes)."""
    if isinstance(value, np.ndarray):
        return _array_key(value)
    if isinstance(value, list | tuple):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, hashable(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


_SMALL_ARRAY: Final = 4096
"""Bytes up to which an array's key holds its bytes themselves."""
_array_keys: dict[int, tuple[weakref.ref[np.ndarray[Any, Any]], Hashable]] = {}
"""Large read-only arrays' keys by id, each dropped when its array dies."""


def _array_key(value: np.ndarray[Any, Any]) -> Hashable:
    """dtype, shape and content: the bytes of a small array; of a large one a 128-bit
    BLAKE2 digest of them, made once per read-only array (a graph's constants are read-only:
    ``owned_array``). CSE keys every node by its attrs in every round: a DenseNet-121's
    32 MB of weights were copied out and hashed again each time (160 ms a round)."""
    if value.nbytes <= _SMALL_ARRAY:
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if not value.flags.writeable:
        kept = _array_keys.get(id(value))
        if kept is not None and kept[0]() is value:
            return kept[1]
    digest = hashlib.blake2b(np.ascontiguousarray(value).data, digest_size=16).digest()
    key = ("array digest", value.dtype.str, value.shape, digest)
    if not value.flags.writeable:
        ident = id(value)
        _array_keys[ident] = (weakref.ref(value, lambda _: _array_keys.pop(ident, None)), key)
    return key


def is_random(node: Node) -> bool:
    """Random ops are never folded or merged: two draws are two values."""
    return "Random" in node.op or "Multinomial" in node.op


def may_rewrite(node: Node, preserved: frozenset[str], frames: set[str]) -> bool:
    """Whether a pass may remove, merge or replace ``node`` (rewriting a preserved node in
    place is decided by each pass): not preserved, stateful, random, control flow, part
    of the step's interface, in a loop frame, colocated or labelled with a kernel."""
    return not (
        node.name in preserved
        or node.op in UNTOUCHABLE_OPS
        or node.op_def.is_stateful
        or is_random(node)
        or node.name in frames
        or COLOCATION_ATTR in node.attrs
        or node.attrs.get(KERNEL_LABEL_ATTR)
        or node.attrs.get(KERNEL_SCOPE_ATTR)
    )


def name_list(names: Iterable[str], limit: int = 8) -> str:
    """Names for a report line: sorted, at most ``limit``, then how many more."""
    ordered = sorted(names)
    more = f" and {len(ordered) - limit} more" if len(ordered) > limit else ""
    return ", ".join(ordered[:limit]) + more


def fused_from(nodes: Iterable[Node]) -> list[str]:
    """The user's nodes a group of nodes stands for: each member's own ``_fused_from`` (a
    node an earlier pass built in place of others) or its name, in order, each once."""
    names: list[str] = []
    for node in nodes:
        for name in node.attrs.get(FUSED_FROM_ATTR) or [node.name]:
            if str(name) not in names:
                names.append(str(name))
    return names
