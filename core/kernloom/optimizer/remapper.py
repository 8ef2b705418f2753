"""The remapper's fusions (grappler's ``Remapper``): ``MatMul`` + ``BiasAdd`` [+ ``Relu`` |
``Relu6`` | ``Elu`` | ``LeakyRelu``] becomes one ``_FusedMatMul``, and ``Conv2D`` +
``BiasAdd`` [+ activation] one ``_FusedConv2D`` where that op is registered.

The fused node takes the name of the pattern's last node (so a fetched activation stays
fetchable) and lists the nodes it replaces in ``_fused_from``. A pattern is fused only
when its inner nodes have no other consumer, none is preserved but the last, all ask for
the same device and no kernel label, and the device type they would run on has a kernel
for the fused op; otherwise the nodes stay as they are.
"""

from __future__ import annotations

from typing import Any, Final

from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.optimizer.analysis import Consumers, frame_nodes, may_rewrite, name_list
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR, GraphPass, PassContext
from kernloom.optimizer.placement_hint import has_kernel, likely_device_type
from kernloom.optimizer.rewriter import FusedNode, GraphRewriter, replace_groups

__all__ = ["Remapper"]

ACTIVATIONS: Final = frozenset({"Relu", "Relu6", "Elu", "LeakyRelu"})
_FUSED_OP: Final = {"MatMul": "_FusedMatMul", "Conv2D": "_FusedConv2D"}
_COPIED_ATTRS: Final = {
    "MatMul": ("T", "transpose_a", "transpose_b"),
    "Conv2D": (
        "T",
        "strides",
        "padding",
        "explicit_paddings",
        "data_format",
        "dilations",
        "use_cudnn_on_gpu",
    ),
}


class Remapper(GraphPass):
    name = "remapper"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        consumers = Consumers(graph)
        frames = frame_nodes(graph)
        patterns: dict[str, tuple[Node, Node, Node | None]] = {}
        inner: set[str] = set()
        for node in graph.nodes:
            found = _match(node, consumers, frames, ctx)
            if found is not None and found[0].name not in inner:
                last = found[2] or found[1]
                patterns[last.name] = found
                inner.update(n.name for n in found if n is not None and n is not last)
        if not patterns:
            return graph
        fused = [
            f"{root} <- {' + '.join(n.name for n in pattern if n is not None)}"
            for root, pattern in patterns.items()
        ]
        ctx.note(f"fused {len(fused)} pattern(s): {name_list(fused)}")
        return replace_groups(graph, patterns, inner, _fused, ctx.preserved)


def _fused(
    rewriter: GraphRewriter, root: Node, pattern: tuple[Node, Node, Node | None]
) -> FusedNode:
    product, bias_add, activation = pattern
    inputs: list[Tensor | list[Tensor]] = [
        rewriter.mapped(product.inputs[0]),
        rewriter.mapped(product.inputs[1]),
        [rewriter.mapped(bias_add.inputs[1])],
    ]
    return _FUSED_OP[product.op], inputs, _fused_attrs(product, bias_add, activation)


def _fused_attrs(product: Node, bias_add: Node, activation: Node | None) -> dict[str, Any]:
    attrs = {k: product.attrs[k] for k in _COPIED_ATTRS[product.op] if k in product.attrs}
    ops = ["BiasAdd"] + ([activation.op] if activation is not None else [])
    attrs["fused_ops"] = ops
    attrs["num_args"] = 1
    if activation is not None and activation.op == "LeakyRelu":
        attrs["leakyrelu_alpha"] = float(activation.attrs["alpha"])
    members = [product, bias_add] + ([activation] if activation is not None else [])
    attrs[FUSED_FROM_ATTR] = [n.name for n in members]
    return attrs


def _match(
    node: Node, consumers: Consumers, frames: set[str], ctx: PassContext
) -> tuple[Node, Node, Node | None] | None:
    """(product, BiasAdd, activation or None) with ``node`` as the product, or None."""
    if node.op not in _FUSED_OP or node.op not in ctx.registry.ops:
        return None
    if _FUSED_OP[node.op] not in ctx.registry.ops:
        return None
    if not _inner_ok(node, consumers, frames, ctx):
        return None
    ((bias_add, index),) = consumers.of_node(node)
    if bias_add.op != "BiasAdd" or index != 0 or not _member_ok(bias_add, node, frames, ctx):
        return None
    if node.op == "Conv2D" and bias_add.attrs.get("data_format", "NHWC") != node.attrs.get(
        "data_format", "NHWC"
    ):
        return None
    activation: Node | None = None
    if _inner_ok(bias_add, consumers, frames, ctx):
        ((after, _),) = consumers.of_node(bias_add)
        if after.op in ACTIVATIONS and _member_ok(after, node, frames, ctx):
            activation = after
    members = [node, bias_add] + ([activation] if activation is not None else [])
    device_type = likely_device_type(node, ctx)
    if device_type is None or any(likely_device_type(m, ctx) != device_type for m in members):
        return None
    attrs = _fused_attrs(node, bias_add, activation)
    if not has_kernel(_FUSED_OP[node.op], attrs, device_type, ctx):
        return None
    return node, bias_add, activation


def _inner_ok(node: Node, consumers: Consumers, frames: set[str], ctx: PassContext) -> bool:
    """``node`` may disappear into a fused node: one data consumer, nothing else."""
    return (
        may_rewrite(node, ctx.preserved, frames)
        and not node.control_inputs
        and len(consumers.of_node(node)) == 1
        and not consumers.control.get(node.name)
    )


def _member_ok(node: Node, first: Node, frames: set[str], ctx: PassContext) -> bool:
    """``node`` may be the fused node's last member (it may be preserved: the fused node
    takes its name and computes its value)."""
    return (
        may_rewrite(node, ctx.preserved - {node.name}, frames)
        and not node.control_inputs
        and node.requested_device == first.requested_device
    )
