"""The remapper's fusions (grappler's ``Remapper``): ``MatMul`` + ``BiasAdd`` [+ ``Relu`` |
``Relu6`` | ``Elu`` | ``LeakyRelu``] becomes one ``_FusedMatMul``, and ``Conv2D`` +
``BiasAdd`` [+ ``Add`` of a residual] [+ activation] one ``_FusedConv2D`` where that op is
registered.

The residual form is TensorFlow's oneDNN remapper's (``FuseConv2DWithBiasAndAddNRelu``):
a ResNet block's shortcut added to the convolution's output inside the convolution, so
the sum costs no pass over memory of its own. It is built only where the residual's shape
is fully known and equal to the convolution's (``Add`` would broadcast otherwise), and only
for a device whose ``_FusedConv2D`` kernel declares the residual forms
(``attr_constraints={"fused_ops": CONV_FORMS}``): a kernel registered before the forms
existed reads ``fused_ops[1]`` as its activation and would drop the residual.

The fused node takes the name of the pattern's last node (so a fetched activation stays
fetchable) and lists the nodes it replaces in ``_fused_from``. A pattern is fused only
when its inner nodes have no other consumer, none is preserved but the last, all ask for
the same device and no kernel label, and the device type they would run on has a kernel
for the fused op; otherwise the nodes stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.op_library.fused_ops import RESIDUAL_FORMS
from kernloom.optimizer.analysis import Consumers, frame_nodes, fused_from, may_rewrite, name_list
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR, GraphPass, PassContext
from kernloom.optimizer.placement_hint import kernel_for, likely_device_type
from kernloom.optimizer.rewriter import FusedNode, GraphRewriter, replace_groups

__all__ = ["Remapper"]

ACTIVATIONS: Final = frozenset({"Relu", "Relu6", "Elu", "LeakyRelu"})
_ADDS: Final = frozenset({"Add", "AddV2"})
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


@dataclass(frozen=True)
class _Pattern:
    """The nodes one fused node replaces, in order, and the residual the ``Add`` takes."""

    product: Node
    bias_add: Node
    add: Node | None = None
    residual: Tensor | None = None
    activation: Node | None = None

    @property
    def members(self) -> list[Node]:
        nodes = (self.product, self.bias_add, self.add, self.activation)
        return [n for n in nodes if n is not None]

    @property
    def last(self) -> Node:
        return self.members[-1]


class Remapper(GraphPass):
    name = "remapper"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        consumers = Consumers(graph)
        frames = frame_nodes(graph)
        patterns: dict[str, _Pattern] = {}
        inner: set[str] = set()
        claimed: set[str] = set()  # every member of a pattern found so far
        for node in graph.nodes:
            found = _match(node, consumers, frames, ctx, claimed)
            if found is not None:
                patterns[found.last.name] = found
                inner.update(n.name for n in found.members if n is not found.last)
                claimed.update(n.name for n in found.members)
        if not patterns:
            return graph
        fused = [
            f"{root} <- {' + '.join(n.name for n in pattern.members)}"
            for root, pattern in patterns.items()
        ]
        ctx.note(f"fused {len(fused)} pattern(s): {name_list(fused)}")
        return replace_groups(graph, patterns, inner, _fused, ctx.preserved)


def _fused(rewriter: GraphRewriter, root: Node, pattern: _Pattern) -> FusedNode:
    product = pattern.product
    args = [rewriter.mapped(pattern.bias_add.inputs[1])]
    if pattern.residual is not None:
        args.append(rewriter.mapped(pattern.residual))
    inputs: list[Tensor | list[Tensor]] = [
        rewriter.mapped(product.inputs[0]),
        rewriter.mapped(product.inputs[1]),
        args,
    ]
    return _FUSED_OP[product.op], inputs, _fused_attrs(pattern)


def _fused_attrs(pattern: _Pattern) -> dict[str, Any]:
    product, activation = pattern.product, pattern.activation
    attrs = {k: product.attrs[k] for k in _COPIED_ATTRS[product.op] if k in product.attrs}
    ops = ["BiasAdd"] + (["Add"] if pattern.add is not None else [])
    attrs["fused_ops"] = ops + ([activation.op] if activation is not None else [])
    attrs["num_args"] = 2 if pattern.add is not None else 1
    if activation is not None and activation.op == "LeakyRelu":
        attrs["leakyrelu_alpha"] = float(activation.attrs["alpha"])
    attrs[FUSED_FROM_ATTR] = fused_from(pattern.members)
    return attrs


def _match(
    node: Node, consumers: Consumers, frames: set[str], ctx: PassContext, claimed: set[str]
) -> _Pattern | None:
    """The pattern with ``node`` as its product, or None: with a residual ``Add`` where
    the device's kernel takes one, else without. No node of ``claimed`` (members of the
    patterns found before) joins it: both branches of a ResNet downsampling block end in
    a ``BiasAdd`` into the same ``Add``; the first takes the ``Add`` and the other's
    output as its residual, the other fuses without it."""
    if node.name in claimed or node.op not in _FUSED_OP or node.op not in ctx.registry.ops:
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
    device_type = likely_device_type(node, ctx)
    if device_type is None:
        return None
    for pattern in _candidates(node, bias_add, consumers, frames, ctx):
        found = _fits(pattern, device_type, ctx, claimed)
        if found is not None:
            return found
    return None


def _candidates(
    node: Node, bias_add: Node, consumers: Consumers, frames: set[str], ctx: PassContext
) -> list[_Pattern]:
    """The forms ``node`` could fuse into, longest first: with the residual ``Add`` (and
    its activation, then without it), then without the residual (with the activation after
    the bias, then without). A kernel that declares only some forms gets the longest it
    takes: one without ``(BiasAdd, Elu)`` still fuses ``BiasAdd``, leaving the Elu a node
    of its own."""
    found: list[_Pattern] = []
    if node.op == "Conv2D":
        with_residual = _residual(node, bias_add, consumers, frames, ctx)
        if with_residual is not None:
            add, residual = with_residual
            activation = _activation(add, node, consumers, frames, ctx)
            found.append(_Pattern(node, bias_add, add, residual, activation))
            if activation is not None:
                found.append(_Pattern(node, bias_add, add, residual))
    activation = _activation(bias_add, node, consumers, frames, ctx)
    found.append(_Pattern(node, bias_add, activation=activation))
    if activation is not None:
        found.append(_Pattern(node, bias_add))
    return found


def _fits(
    pattern: _Pattern, device_type: str, ctx: PassContext, claimed: set[str]
) -> _Pattern | None:
    """``pattern`` when none of it is claimed, all of it would run on ``device_type`` and
    a kernel there takes the fused form (a residual form only from a kernel that declares
    those forms)."""
    if any(m.name in claimed for m in pattern.members):
        return None
    if any(likely_device_type(m, ctx) != device_type for m in pattern.members):
        return None
    attrs = _fused_attrs(pattern)
    kernel = kernel_for(_FUSED_OP[pattern.product.op], attrs, device_type, ctx)
    if kernel is None:
        return None
    if pattern.add is not None and not _declares_residual(kernel.constraints.get("fused_ops")):
        return None
    return pattern


def _declares_residual(forms: tuple[Any, ...] | None) -> bool:
    return forms is not None and any(form in forms for form in RESIDUAL_FORMS)


def _residual(
    product: Node, bias_add: Node, consumers: Consumers, frames: set[str], ctx: PassContext
) -> tuple[Node, Tensor] | None:
    """(the ``Add``, its other operand) when ``bias_add``'s one consumer adds a residual of
    exactly the convolution's shape, both fully known (no broadcasting hides in it)."""
    if not _inner_ok(bias_add, consumers, frames, ctx):
        return None
    ((add, index),) = consumers.of_node(bias_add)
    if add.op not in _ADDS or not _member_ok(add, product, frames, ctx):
        return None
    residual = add.inputs[1 - index]
    shape, mine = residual.shape, bias_add.outputs[0].shape
    if not (shape.is_fully_defined() and mine.is_fully_defined() and shape == mine):
        return None
    if residual.dtype != bias_add.outputs[0].dtype:
        return None
    return add, residual


def _activation(
    last: Node, product: Node, consumers: Consumers, frames: set[str], ctx: PassContext
) -> Node | None:
    """The activation that ``last``'s one consumer applies, when it may join the fusion."""
    if not _inner_ok(last, consumers, frames, ctx):
        return None
    ((after, _),) = consumers.of_node(last)
    if after.op in ACTIVATIONS and _member_ok(after, product, frames, ctx):
        return after
    return None


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
