"""Converting a list of ONNX nodes, for the model's graph and for the subgraphs of its
control-flow nodes alike (If's branches, Loop's and Scan's bodies): one place that
decodes the nodes, walks into subgraphs and calls each node's converter."""

from __future__ import annotations

import re
from collections.abc import Iterator

import onnx

from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import REGISTRY
from kernloom.onnx.errors import OnnxImportError

__all__ = ["convert_node", "convert_nodes", "graph_nodes", "node_name", "with_subgraph_nodes"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def node_name(text: str, fallback: str) -> str:
    """A valid kernloom node name for an ONNX name."""
    safe = _UNSAFE.sub("_", text) or fallback
    return safe if safe[0].isalnum() or safe[0] == "." else f"n{safe}"


def graph_nodes(graph: onnx.GraphProto, opsets: dict[str, int], scope: str = "") -> list[OnnxNode]:
    """The nodes of ``graph`` decoded, each with the opset in force for its domain; an
    unnamed node of a subgraph gets a made-up name under ``scope`` (its parent's name and
    attribute), so an error tells which subgraph it is in."""
    nodes = []
    for index, proto in enumerate(graph.node):
        domain = proto.domain if proto.domain != "ai.onnx" else ""
        name = proto.name or f"{scope}{proto.op_type}_{index}"
        nodes.append(OnnxNode(proto, name, opsets.get(domain, 0)))
    return nodes


def with_subgraph_nodes(nodes: list[OnnxNode], opsets: dict[str, int]) -> Iterator[OnnxNode]:
    """``nodes`` and, depth first, the nodes of every subgraph they hold (If's branches,
    Loop's body...): what the up-front checks of an import must see, so that an
    unsupported op inside a loop body is reported with the others before anything is
    built."""
    for node in nodes:
        yield node
        for attr in node.proto.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for graph in graphs:
                inner = graph_nodes(graph, opsets, f"{node.name}/{attr.name}/")
                yield from with_subgraph_nodes(inner, opsets)


def convert_nodes(ctx: ConversionContext, nodes: list[OnnxNode]) -> None:
    """Convert ``nodes`` in order into ``ctx`` (their outputs land in ``ctx.values``)."""
    producers = {out: node for node in nodes for out in node.outputs if out}
    for node in nodes:
        convert_node(ctx, node, producers)


def convert_node(ctx: ConversionContext, node: OnnxNode, producers: dict[str, OnnxNode]) -> None:
    """Build the kernloom ops of one node with its registered converter."""
    found = REGISTRY.lookup(node.op_type, node.opset, node.domain)
    assert found is not None  # the importer's checks saw every node, nested ones too
    for name in node.inputs:
        if name and not ctx.knows(name):
            later = producers.get(name)
            if later is not None:
                raise node.fail(
                    f"input {name!r} is the output of node {later.describe()}, which comes "
                    "later: ONNX lists a graph's nodes in topological order (a producer "
                    "before its consumers); re-export the model or sort its nodes"
                )
            raise node.fail(
                f"input {name!r} is produced by no node and is neither a graph input nor an "
                "initializer: add it as one of those, or name an existing value instead"
            )
    ctx.node = node
    with ctx.graph.name_scope(node_name(node.name, node.op_type)):
        try:
            results = list(found.fn(node, ctx))
        except OnnxImportError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise node.fail(f"{type(exc).__name__}: {exc}") from exc
    for index, name in enumerate(node.outputs):
        if not name:
            continue
        if index >= len(results) or results[index] is None:
            raise node.fail(f"output {index} ({name!r}) is not supported")
        value = results[index]
        assert value is not None
        ctx.set_values({name: value})
    ctx.node = None
