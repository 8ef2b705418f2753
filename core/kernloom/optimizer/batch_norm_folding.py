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

The same linearity folds a per-channel scale after a convolution (ONNX Runtime's
``ConvMulFusion`` and ``ConvAddFusion``): ``Conv2D`` [-> ``BiasAdd(b)``] -> ``Mul(c)``
[-> ``Add(d)``], with constants of one value per output channel, becomes
``BiasAdd(conv(x, W * c), b * c + d)`` under the last node's name. Inception v2's Caffe2
export has such a ``Mul`` and ``Add`` after each of its 69 norms: once a norm is folded
into its convolution, they follow a ``BiasAdd``.

Every fold declines where a scale or shift it would make is not finite (``_finite``):
the folded forms equal the nodes they replace only up to float reassociation, and an
infinity breaks that. A dead channel's ``variance + epsilon == 0`` makes ``s`` infinite,
and ``x * s + (offset - mean * s)`` NaN everywhere, where ``(x - mean) * s + offset`` is
+inf, NaN or -inf by the sign of ``x - mean``; an infinite ``c`` times a filter's zeros
makes NaN where the unfolded product gave 0 or inf. Such a norm stays the
``FusedBatchNormV3`` it was.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from kernloom.dtypes import int32
from kernloom.graph.graph import Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.optimizer.analysis import Consumers, frame_nodes, may_rewrite, name_list
from kernloom.optimizer.graph_pass import FUSED_FROM_ATTR, GraphPass, PassContext
from kernloom.optimizer.rewriter import GraphRewriter

__all__ = ["BatchNormFolding"]

_NORMS = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})


def _finite(*values: np.ndarray) -> bool:
    """Whether every constant a fold would make is finite: the one condition under which
    the folded form computes what it replaces (up to float reassociation), shared by every
    fold of this pass."""
    return all(np.isfinite(v).all() for v in values)


class BatchNormFolding(GraphPass):
    name = "batch_norm_folding"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        # Into the convolutions first; what is left follows something else.
        graph = _scales_into_convolutions(_into_convolutions(graph, ctx), ctx)
        return _to_affines(graph, ctx)


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
    return all(t.node.op == "Const" for t in node.inputs[1:5]) and _folded(node) is not None


def _folded(norm: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``s`` and ``offset - mean * s`` that ``_factor_and_shift`` makes for ``norm`` (of
    constant statistics), computed as its nodes compute them; None where one is not finite
    (``variance + epsilon`` zero or negative, a NaN or an infinity among the statistics) or
    the statistics are not one value per channel each (the norm's kernel reports that)."""
    scale, offset, mean, variance = (np.asarray(t.node.attrs["value"]) for t in norm.inputs[1:5])
    if scale.ndim != 1 or any(v.shape != scale.shape for v in (offset, mean, variance)):
        return None
    epsilon = np.asarray(norm.attrs["epsilon"], norm.inputs[0].dtype.numpy_dtype)
    with np.errstate(all="ignore"):
        factor = scale * np.reciprocal(np.sqrt(variance + epsilon))
        shift = offset - mean * factor
    return (factor, shift) if _finite(factor, shift) else None


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
    scale = _constant_operand(mul, norm.outputs[0])
    shift = _constant_operand(add, mul.outputs[0])
    if scale is None or shift is None:
        return None
    # ``(x * s + b) * c + d`` is not ``x * (s * c) + (b * c + d)`` where c is infinite: inf
    # where the norm's value is positive is NaN once split (inf - inf); nor where s * c
    # overflows. The norm alone still becomes its affine.
    return (mul, add) if _absorbable(norm, scale, shift) else None


def _absorbable(norm: Node, scale: Tensor, shift: Tensor) -> bool:
    """Whether ``norm``'s ``s`` and ``b`` times the scale layer's ``c`` (plus its ``d``)
    are finite, broadcast as ``_affine`` broadcasts them."""
    folded = _folded(norm)
    if folded is None:
        return False
    factor, bias = folded
    if norm.attrs.get("data_format", "NHWC") in ("NCHW", "NCDHW"):
        rank = 4 if norm.attrs.get("data_format") == "NCHW" else 5
        factor, bias = (v.reshape([-1] + [1] * (rank - 2)) for v in (factor, bias))
    c, d = (np.asarray(t.node.attrs["value"]) for t in (scale, shift))
    try:
        with np.errstate(all="ignore"):
            return _finite(factor * c, bias * c + d)
    except (TypeError, ValueError):  # shapes that do not broadcast: the graph's own error
        return False


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


class _ScaleFold(NamedTuple):
    """A per-channel scale to fold into ``conv``: the nodes it replaces, in order (the last
    one's name is kept), and the constants as one value per output channel."""

    conv: Node
    replaced: tuple[Node, ...]
    bias: np.ndarray | None
    scale: np.ndarray
    shift: np.ndarray | None

    def folded_bias(self) -> np.ndarray:
        """``b * c + d``, the ``BiasAdd``'s constant (0 for a missing ``b`` or ``d``)."""
        with np.errstate(all="ignore"):
            bias = np.zeros_like(self.scale) if self.bias is None else self.bias * self.scale
            return bias if self.shift is None else bias + self.shift


def _scales_into_convolutions(graph: Graph, ctx: PassContext) -> Graph:
    """Each ``Conv2D`` [-> ``BiasAdd``] -> ``Mul`` [-> ``Add``] of per-channel constants as
    one convolution of a scaled filter and one ``BiasAdd``."""
    consumers = Consumers(graph)
    frames = frame_nodes(graph)
    folds: dict[str, _ScaleFold] = {}
    for node in graph.nodes:
        fold = _scale_fold(node, consumers, frames, ctx) if node.op == "Mul" else None
        if fold is not None:
            folds[fold.replaced[-1].name] = fold
    if not folds:
        return graph
    absorbed = {n.name for fold in folds.values() for n in (fold.conv, *fold.replaced[:-1])}
    rewriter = GraphRewriter(graph)
    for node in graph.nodes:
        fold = folds.get(node.name)
        if fold is not None:
            _fold_scale(rewriter, fold)
        elif node.name not in absorbed:
            rewriter.copy(node)
    ctx.note(f"folded {len(folds)} per-channel scale(s) into convolutions: {name_list(folds)}")
    return rewriter.finish(ctx.preserved)


def _scale_fold(
    mul: Node, consumers: Consumers, frames: set[str], ctx: PassContext
) -> _ScaleFold | None:
    """The fold ``mul`` ends or is part of, where every node in it may be replaced (only
    the last may be fetched: the result takes its name) and reads only the one before."""
    for running in mul.inputs:
        previous = running.node
        if previous.op in ("Conv2D", "BiasAdd"):
            break
    else:
        return None
    conv = previous if previous.op == "Conv2D" else previous.inputs[0].node
    if conv.op != "Conv2D" or len(conv.inputs) != 2:
        return None
    data_format = conv.attrs.get("data_format", "NHWC")
    channels = _out_channels(conv)
    if channels is None:
        return None
    chain = [conv] if previous is conv else [conv, previous]
    bias = None
    if previous is not conv:
        if previous.attrs.get("data_format", "NHWC") != data_format:
            return None
        added = _constant_operand(previous, conv.outputs[0])
        if added is None or added is not previous.inputs[1]:
            return None
        bias = np.asarray(added.node.attrs.get("value"))  # BiasAdd's: one per channel
        if bias.shape != (channels,):
            return None
    scale = _per_channel(_constant_operand(mul, running), channels, data_format)
    if scale is None or not _finite(scale):
        return None
    chain.append(mul)
    add = _only_reader(mul, consumers)
    shift = None
    if add is not None and add.op in ("Add", "AddV2"):
        shift = _per_channel(_constant_operand(add, mul.outputs[0]), channels, data_format)
        if shift is not None and _affine_member(add, conv, frames, ctx):
            chain.append(add)
        else:
            shift = None
    if not may_rewrite(conv, ctx.preserved, frames):
        return None
    for node, reader in itertools.pairwise(chain):
        if _only_reader(node, consumers) is not reader:
            return None
        if node is not conv and not _affine_member(node, conv, frames, ctx, keep=False):
            return None
    if not _affine_member(chain[-1], conv, frames, ctx):  # (it may be fetched: kept name)
        return None
    fold = _ScaleFold(conv, tuple(chain[1:]), bias, scale, shift)
    return fold if _finite(fold.folded_bias()) else None


def _out_channels(conv: Node) -> int | None:
    """The convolution's output channels: its filter's last dimension (HWIO), if known."""
    dims = conv.inputs[1].shape.dims
    return dims[-1] if dims and isinstance(dims[-1], int) else None


def _per_channel(tensor: Tensor | None, channels: int, data_format: str) -> np.ndarray | None:
    """A constant's value as one value per channel of a 4-D image, where adding or
    multiplying by it changes nothing else: a scalar, or a shape of 1 on every axis but the
    channel axis (counted from the right, as broadcasting aligns it), 1 or ``channels``
    there. None for anything else, which would broadcast the image to another shape."""
    if tensor is None:
        return None
    value = np.asarray(tensor.node.attrs.get("value"))
    if value.dtype == object or value.ndim > 4:
        return None
    axis = 1 if data_format == "NCHW" else 3
    dims = (1,) * (4 - value.ndim) + value.shape
    if any(size != 1 for i, size in enumerate(dims) if i != axis):
        return None
    if dims[axis] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).copy()


def _fold_scale(rewriter: GraphRewriter, fold: _ScaleFold) -> None:
    """The convolution of the scaled filter and its ``BiasAdd``, named as the last node."""
    conv, last = fold.conv, fold.replaced[-1]
    dtype = conv.outputs[0].dtype
    hint = f"{last.name}/folded"

    def const(value: np.ndarray, name: str) -> Tensor:
        attrs = {"value": value.astype(dtype.numpy_dtype), "dtype": dtype}
        return rewriter.add("Const", [], attrs, name=f"{hint}/{name}").outputs[0]

    scaled = rewriter.add(
        "Mul", [rewriter.mapped(conv.inputs[1]), const(fold.scale, "scale")], name=f"{hint}/filter"
    )
    new_conv = rewriter.copy(conv, [rewriter.mapped(conv.inputs[0]), scaled.outputs[0]])
    bias = fold.folded_bias()
    biased = rewriter.add(
        "BiasAdd",
        [new_conv.outputs[0], const(bias, "bias")],
        {
            "data_format": conv.attrs.get("data_format", "NHWC"),
            FUSED_FROM_ATTR: [n.name for n in fold.replaced],
        },
        name=last.name,
        exact_name=True,
        device=last.requested_device,
        control_inputs=[c for n in fold.replaced for c in rewriter.controls(n)],
    )
    for node in fold.replaced:
        rewriter.alias(node, [biased.outputs[0]] * len(node.outputs), biased)
