"""Folding inference batch norm into the convolution before it (grappler's
``FoldFusedBatchNorm``, ONNX Runtime's ``ConvBNFusion``).

``FusedBatchNormV3(Conv2D(x, W), scale, offset, mean, variance)`` with ``is_training``
false and constant statistics computes ``conv(x, W) * s + (offset - mean * s)`` with
``s = scale / sqrt(variance + epsilon)``; since the convolution is linear in its filter
(HWIO: the output channel is the last axis), that is ``BiasAdd(conv(x, W * s), offset -
mean * s)``. The pass builds ``W * s`` and the bias from the constants (constant folding
then evaluates them with the real kernels) and replaces the batch norm by the BiasAdd,
under the batch norm's name. Left alone: a convolution with other consumers, a batch norm
whose other outputs are used, mixed ``T``/``U`` dtypes, anything preserved but the norm.

A batch norm with the same constant statistics after something else (DenseNet's come
after a concat) becomes the per-channel affine it computes, ``x * s + (offset - mean *
s)``: a ``Mul`` and an ``AddV2`` that the elementwise fusion joins to what follows (one
pass over the tensor where the batch-norm kernel was one node of its own). A per-channel
``Mul`` and ``Add`` of constants right after it (a Caffe model's separate ``Scale`` layer)
is absorbed into the two constants: ``(x * s + b) * c + d = x * (s * c) + (b * c + d)``.
"""

from __future__ import annotations

import numpy as np

from kernloom.dtypes import int32
from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.optimizer.analysis import Consumers, frame_nodes, may_rewrite, name_list
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR, GraphPass, PassContext
from kernloom.optimizer.rewriter import GraphRewriter

__all__ = ["BatchNormFolding"]

_NORMS = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})


class BatchNormFolding(GraphPass):
    name = "batch_norm_folding"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        # Into the convolutions first; what is left follows something else.
        return _to_affines(_into_convolutions(graph, ctx), ctx)


def _into_convolutions(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    frames = frame_nodes(graph)
    norms = {n.name: n.inputs[0].node for n in graph.nodes if _foldable(n, consumers, frames, ctx)}
    if not norms:
        return graph
    convs = {conv.name: norm for norm, conv in norms.items()}
    rewriter = GraphRewriter(graph)
    for node in graph.nodes:
        if node.name in convs:
            continue  # rebuilt with its folded filter when its norm is reached
        conv = norms.get(node.name)
        if conv is None:
            rewriter.copy(node)
            continue
        hint = f"{node.name}/folded"
        factor, bias = _factor_and_shift(rewriter, node, hint)
        filter_ = rewriter.add(
            "Mul", [rewriter.mapped(conv.inputs[1]), factor], name=f"{hint}/filter"
        )
        new_conv = rewriter.copy(conv, [rewriter.mapped(conv.inputs[0]), filter_.outputs[0]])
        biased = rewriter.add(
            "BiasAdd",
            [new_conv.outputs[0], bias],
            {
                "data_format": conv.attrs.get("data_format", "NHWC"),
                FUSED_FROM_ATTR: [node.name],
            },
            name=node.name,
            exact_name=True,
            device=node.requested_device,
            control_inputs=rewriter.controls(node),
        )
        outputs = [biased.outputs[0]] + [biased.outputs[0]] * (len(node.outputs) - 1)
        rewriter.alias(node, outputs, biased)  # the other outputs have no consumers
    ctx.note(f"folded {len(norms)} batch norm(s) into convolutions: {name_list(norms)}")
    return rewriter.finish(ctx.preserved)


def _factor_and_shift(rewriter: GraphRewriter, norm: Node, hint: str) -> tuple[Tensor, Tensor]:
    """``s = scale / sqrt(variance + epsilon)`` and ``offset - mean * s`` for ``norm``, one
    value per channel, as nodes constant folding evaluates."""
    scale, offset, mean, variance = (rewriter.mapped(t) for t in norm.inputs[1:5])
    dtype = norm.inputs[0].dtype
    epsilon = rewriter.add(
        "Const",
        [],
        {"value": np.asarray(norm.attrs["epsilon"], dtype.numpy_dtype), "dtype": dtype},
        name=f"{hint}/epsilon",
    )
    shifted = rewriter.add("AddV2", [variance, epsilon.outputs[0]], name=f"{hint}/var_eps")
    inv = rewriter.add("Rsqrt", [shifted.outputs[0]], name=f"{hint}/rsqrt")
    factor = rewriter.add("Mul", [scale, inv.outputs[0]], name=f"{hint}/factor")
    moved = rewriter.add("Mul", [mean, factor.outputs[0]], name=f"{hint}/mean_factor")
    shift = rewriter.add("Sub", [offset, moved.outputs[0]], name=f"{hint}/bias")
    return factor.outputs[0], shift.outputs[0]


def _constant_inference_norm(
    node: Node, consumers: Consumers, frames: set[str], ctx: PassContext
) -> bool:
    """An inference batch norm of constant statistics, one dtype, only its output used."""
    if node.op not in _NORMS or node.attrs.get("is_training", True):
        return False
    if not may_rewrite(node, ctx.preserved - {node.name}, frames):
        return False
    if node.attrs.get("U", node.attrs.get("T")) is not node.attrs.get("T"):
        return False
    if any(consumers.of_tensor(t.name) for t in node.outputs[1:]):
        return False
    return all(t.node.op == "Const" for t in node.inputs[1:5])


def _foldable(node: Node, consumers: Consumers, frames: set[str], ctx: PassContext) -> bool:
    if not _constant_inference_norm(node, consumers, frames, ctx):
        return False
    conv = node.inputs[0].node
    return (
        conv.op == "Conv2D"
        and may_rewrite(conv, ctx.preserved, frames)
        and len(consumers.of_node(conv)) == 1
        and not consumers.control.get(conv.name)
        and conv.requested_device == node.requested_device
        and conv.attrs.get("data_format", "NHWC") == node.attrs.get("data_format", "NHWC")
    )


def _scale_layer(
    norm: Node, consumers: Consumers, frames: set[str], ctx: PassContext
) -> tuple[Node, Node] | None:
    """(the ``Mul``, the ``Add``) of constants that follow ``norm`` alone, where both may be
    absorbed (the ``Mul`` has no other reader and is not kept; the ``Add`` may be fetched:
    the affine takes its name). None for a fetched norm: its own value must stay."""
    if norm.name in ctx.preserved:
        return None
    mul = _only_reader(norm, consumers)
    if mul is None or mul.op != "Mul" or not _affine_member(mul, norm, frames, ctx, keep=False):
        return None
    add = _only_reader(mul, consumers)
    if add is None or add.op not in ("Add", "AddV2") or not _affine_member(add, norm, frames, ctx):
        return None
    if _constant_operand(mul, norm.outputs[0]) is None:
        return None
    if _constant_operand(add, mul.outputs[0]) is None:
        return None
    return mul, add


def _only_reader(node: Node, consumers: Consumers) -> Node | None:
    readers = consumers.of_node(node)
    if len(readers) != 1 or consumers.control.get(node.name):
        return None
    return readers[0][0]


def _affine_member(
    node: Node, norm: Node, frames: set[str], ctx: PassContext, *, keep: bool = True
) -> bool:
    preserved = ctx.preserved - {node.name} if keep else ctx.preserved
    return (
        may_rewrite(node, preserved, frames)
        and not node.control_inputs
        and node.requested_device == norm.requested_device
        and node.attrs.get("T") is norm.attrs.get("T")
    )


def _constant_operand(node: Node, running: Tensor) -> Tensor | None:
    """The operand of ``node`` other than ``running``, where it is a constant."""
    if len(node.inputs) != 2 or running not in node.inputs:
        return None
    other = node.inputs[1] if node.inputs[0] is running else node.inputs[0]
    return other if other.node.op == "Const" and other is not running else None


def _to_affines(graph: Graph, ctx: PassContext) -> Graph:
    """Each norm left (after something else than a convolution) as ``Mul`` + ``AddV2`` of
    per-channel constants, its scale layer absorbed where one follows, under the name of the
    last node replaced."""
    consumers = Consumers(graph)
    frames = frame_nodes(graph)
    affines = {
        n.name: _scale_layer(n, consumers, frames, ctx)
        for n in graph.nodes
        if _constant_inference_norm(n, consumers, frames, ctx)
    }
    if not affines:
        return graph
    absorbed = {n.name for pair in affines.values() if pair is not None for n in pair}
    ends = {pair[1].name: name for name, pair in affines.items() if pair is not None}
    rewriter = GraphRewriter(graph)
    for node in graph.nodes:
        if node.name in affines:
            pair = affines[node.name]
            if pair is None:  # nothing absorbed: the affine stands where the norm did
                _affine(rewriter, node, None, node)
            continue
        if node.name in ends:
            norm = graph.node(ends[node.name])
            _affine(rewriter, norm, affines[norm.name], node)
            continue
        if node.name not in absorbed:
            rewriter.copy(node)
    ctx.note(f"made {len(affines)} batch norm(s) per-channel affines: {name_list(affines)}")
    return rewriter.finish(ctx.preserved)


def _affine(
    rewriter: GraphRewriter, norm: Node, pair: tuple[Node, Node] | None, last: Node
) -> None:
    """``x * s + b`` for ``norm`` (and its scale layer ``pair``), named as ``last``."""
    hint = f"{norm.name}/affine"
    factor, shift = _factor_and_shift(rewriter, norm, hint)

    def op(name: str, a: Tensor, b: Tensor) -> Tensor:
        return rewriter.add(name, [a, b], name=f"{hint}/{name.lower()}").outputs[0]

    if norm.attrs.get("data_format", "NHWC") in ("NCHW", "NCDHW"):  # the channel axis is 1
        rank = 4 if norm.attrs.get("data_format") == "NCHW" else 5
        dims = np.asarray([-1] + [1] * (rank - 2), np.int32)
        shape = rewriter.add(
            "Const", [], {"value": dims, "dtype": int32}, name=f"{hint}/channel_shape"
        ).outputs[0]
        factor = rewriter.add("Reshape", [factor, shape], name=f"{hint}/channel_factor").outputs[0]
        shift = rewriter.add("Reshape", [shift, shape], name=f"{hint}/channel_shift").outputs[0]
    if pair is not None:
        mul, add = pair
        c = rewriter.mapped(_constant_operand(mul, norm.outputs[0]))  # type: ignore[arg-type]
        d = rewriter.mapped(_constant_operand(add, mul.outputs[0]))  # type: ignore[arg-type]
        factor = op("Mul", factor, c)
        shift = op("AddV2", op("Mul", shift, c), d)
    fused_from = [norm.name] + ([n.name for n in pair] if pair is not None else [])
    scaled = rewriter.add(
        "Mul",
        [rewriter.mapped(norm.inputs[0]), factor],
        {FUSED_FROM_ATTR: [norm.name]},  # a fusion of it names the norm, not this node
        name=f"{hint}/scaled",
    )
    out = rewriter.add(
        "AddV2",
        [scaled.outputs[0], shift],
        {FUSED_FROM_ATTR: fused_from},
        name=last.name,
        exact_name=True,
        device=norm.requested_device,
        control_inputs=rewriter.controls(norm),
    )
    outputs = [out.outputs[0]] * len(last.outputs)
    rewriter.alias(last, outputs, out)
    if last is not norm:
        rewriter.alias(norm, [out.outputs[0]] * len(norm.outputs), out)
