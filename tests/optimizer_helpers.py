"""Helpers for the graph optimizer's tests: run a fetch with the optimizer on and off,
and see the graph that ran (``RunMetadata.partition_graphs``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.graph.graph import Node
from kernloom.optimizer import PassContext, optimize_step_graph
from kernloom.optimizer.graph_pass import GraphPass
from kernloom.registry import registry_of
from kernloom.runtime.subgraph import build_step_graph


def run_graph(
    graph: kl.Graph,
    fetches: Any,
    feeds: Mapping[Any, Any] | None = None,
    **config: Any,
) -> tuple[Any, list[Node]]:
    """The fetched values and the nodes of every partition that ran them."""
    md = kl.RunMetadata()
    with kl.Session(graph, kl.SessionConfig(inter_op_threads=1, **config)) as sess:
        out = sess.run(fetches, feeds, run_metadata=md)
    nodes = [n for part in md.partition_graphs.values() for n in part.nodes]
    return out, nodes


def ops_of(nodes: list[Node]) -> list[str]:
    return [n.op for n in nodes if n.op not in ("_Arg", "_Retval")]


def node_named(nodes: list[Node], name: str) -> Node:
    return next(n for n in nodes if n.name == name)


def step_graph(
    graph: kl.Graph, fetches: list[str], feeds: list[str] = (), targets: list[str] = ()
) -> kl.Graph:  # type: ignore[assignment]
    return build_step_graph(graph, list(feeds), fetches, list(targets)).graph


def pass_context(graph: kl.Graph, **kw: Any) -> PassContext:
    """A context for running one pass by hand: preserved are the ``_Arg``/``_Retval``
    nodes and the fetched producers, as the session preserves them."""
    preserved = set(kw.pop("preserved", ()))
    for node in graph.nodes:
        if node.op in ("_Arg", "_Retval"):
            preserved.add(node.name)
        if node.op == "_Retval":
            preserved.add(node.inputs[0].node.name)
    return PassContext(registry_of(graph.registry), preserved=frozenset(preserved), **kw)


def run_pass(graph_pass: GraphPass, graph: kl.Graph, **kw: Any) -> tuple[kl.Graph, PassContext]:
    ctx = pass_context(graph, **kw)
    return graph_pass.run(graph, ctx), ctx


__all__ = [
    "node_named",
    "ops_of",
    "optimize_step_graph",
    "pass_context",
    "run_graph",
    "run_pass",
    "step_graph",
]


def activated(activation: str | None, z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """What a fused op's activation (by its kl.ops name) makes of ``z``, written directly
    in numpy as TensorFlow defines each (LeakyRelu with its default alpha 0.2)."""
    return {
        None: lambda: z,
        "relu": lambda: np.maximum(z, 0),
        "relu6": lambda: np.clip(z, 0, 6),
        "elu": lambda: np.where(z > 0, z, np.expm1(z)),
        "leaky_relu": lambda: np.where(z > 0, z, 0.2 * z),
    }[activation]()
