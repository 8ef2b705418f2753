"""What ``Session.run`` accepts as fetches and feeds, resolved against the graph.

Fetches may be a tensor, a tensor or node name, a node (run for its effect, fetched as
None), or lists, tuples and dicts of these, nested; the result has the same structure.
A name ``"y"`` means the node's first output (or the node itself when it has none);
``"y:1"`` names output 1. Unknown names fail with the nearest existing names; a fetch or
feed key of another type is a ``TypeError`` (as in TensorFlow).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kernloom.errors import InvalidArgumentError, NotFoundError, did_you_mean
from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor

__all__ = ["FetchPlan", "plan_fetches", "resolve_node", "resolve_tensor"]


def _all_names(graph: Graph) -> list[str]:
    names: list[str] = []
    for node in graph.nodes:
        names.append(node.name)
        names.extend(t.name for t in node.outputs)
    return names


def check_graph_of(graph: Graph, item: Tensor | Node, what: str) -> None:
    """An error for a tensor or node of another graph than the session's (one with the
    same name in the session's graph is still another node)."""
    if item.graph is graph:
        return
    kind = "tensor" if isinstance(item, Tensor) else "node"
    same = f" (to mean the session graph's own {item.name!r}, give its name)"
    raise InvalidArgumentError(
        f"{what} {kind} {item.name!r} belongs to another graph than the session's; build it "
        f"in the session's graph, or run it in a kl.Session of its own graph"
        + (same if item.name.partition(":")[0] in graph else "")
    )


def _not_a_tensor(key: object, what: str) -> TypeError:
    """The ``TypeError`` for a key that is no tensor, saying which tensor the caller likely
    meant: a node's output, a variable's value."""
    if isinstance(key, Node):
        outputs = " or ".join(repr(t.name) for t in key.outputs[:4]) or "(it has no outputs)"
        return TypeError(
            f"{what} {key!r} is a kl.Node, not a tensor; {what} one of its outputs: {outputs}"
        )
    if hasattr(key, "__kl_tensor__"):  # a kl.Variable: state, not a tensor
        name = getattr(key, "name", "v")
        if what == "feed":
            fix = (
                f"feed a tensor that reads it (r = {name}.value(), built once; then "
                f"feed_dict={{r: value}}), or set the variable with {name}.assign(value)"
            )
        else:
            fix = f"fetch its value: {name}.value() (build that read once, outside any loop)"
        return TypeError(f"{what} {key!r} is a kl.Variable, not a tensor; {fix}")
    return TypeError(
        f"{what} {key!r} is a {type(key).__name__}; use a kl.Tensor or a tensor name such as 'y:0'"
    )


def resolve_node(graph: Graph, name: str, what: str) -> Node:
    if name not in graph:
        raise NotFoundError(
            f"{what} {name!r} is not a node of the graph." + did_you_mean(name, _all_names(graph))
        )
    return graph.node(name)


def resolve_tensor(graph: Graph, key: object, what: str) -> Tensor:
    """The graph's tensor for a ``Tensor`` or a ``"node:index"``/``"node"`` name."""
    if isinstance(key, Tensor):
        check_graph_of(graph, key, what)
        return key
    if not isinstance(key, str):
        raise _not_a_tensor(key, what)
    node_name, colon, index = key.rpartition(":")
    if not colon or not index.isdigit():
        if colon and key not in graph and node_name in graph:  # "y:-1", "y:", "y:one"
            node = graph.node(node_name)
            raise NotFoundError(
                f"{what} {key!r}: {index!r} is not an output index (a whole number from 0); "
                f"node {node.name!r} (op {node.op}) has {len(node.outputs)} output(s)."
                + did_you_mean(key, [t.name for t in node.outputs])
            )
        node_name, index = key, "0"
    node = resolve_node(graph, node_name, what)
    if not 0 <= int(index) < len(node.outputs):
        raise NotFoundError(
            f"{what} {key!r}: node {node.name!r} (op {node.op}) has {len(node.outputs)} "
            f"output(s)." + did_you_mean(key, [t.name for t in node.outputs])
        )
    return node.outputs[int(index)]


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """The flat tensors and target nodes of a fetch structure, and how to rebuild it."""

    tensors: tuple[str, ...]
    targets: tuple[str, ...]
    rebuild: Callable[[Mapping[str, Any]], Any]


def plan_fetches(graph: Graph, fetches: object) -> FetchPlan:
    if type(fetches) is Tensor and fetches.graph is graph:  # the common case, every run
        name = fetches.name
        return FetchPlan((name,), (), lambda values: values[name])
    tensors: dict[str, None] = {}
    targets: dict[str, None] = {}

    def walk(item: object) -> Callable[[Mapping[str, Any]], Any]:
        if isinstance(item, Node):
            check_graph_of(graph, item, "fetch")
            targets[item.name] = None
            return lambda values: None
        if isinstance(item, str) and ":" not in item and item in graph:
            node = graph.node(item)
            if not node.outputs:
                targets[node.name] = None
                return lambda values: None
        if isinstance(item, Tensor | str):
            name = resolve_tensor(graph, item, "fetch").name
            tensors[name] = None
            return lambda values: values[name]
        if isinstance(item, Mapping):
            parts = {k: walk(v) for k, v in item.items()}
            kind: Callable[[dict[Any, Any]], Any] = type(item)
            if isinstance(item, defaultdict):  # its constructor takes the factory first
                kind = partial(defaultdict, item.default_factory)

            def rebuild_mapping(values: Mapping[str, Any]) -> Any:
                built = {k: f(values) for k, f in parts.items()}
                return built if kind is dict else kind(built)

            return rebuild_mapping
        if isinstance(item, list | tuple):
            seq = [walk(v) for v in item]
            if isinstance(item, list):
                return lambda values: [f(values) for f in seq]
            if hasattr(item, "_fields"):  # a namedtuple
                make = type(item)
                return lambda values: make(*(f(values) for f in seq))
            return lambda values: tuple(f(values) for f in seq)
        if hasattr(item, "__kl_tensor__"):
            raise _not_a_tensor(item, "fetch")
        raise TypeError(
            f"cannot fetch {item!r} ({type(item).__name__}): fetch a kl.Tensor, a tensor or "
            f"node name, a kl.Node, or a list, tuple or dict of these"
        )

    rebuild = walk(fetches)
    return FetchPlan(tuple(tensors), tuple(targets), rebuild)
