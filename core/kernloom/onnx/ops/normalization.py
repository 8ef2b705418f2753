"""Normalization ONNX ops: BatchNormalization (FusedBatchNormV3 for 4-D float inputs, a
composition otherwise), Instance-, Layer-, RMS-, Lp-, MeanVariance- and GroupNormalization,
and LRN (TF's LRN over NHWC, transposed around)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import axis_of, ints, rank_of, static_dims

Result = Sequence[Tensor | None]

# -- normalization --------------------------------------------------------------------------


def _channel_shaped(ctx: ConversionContext, v: Tensor, rank: int) -> Tensor:
    """A per-channel vector [C] as [C, 1, ...] to broadcast over NC... inputs."""
    return ops.reshape(v, ctx.int64s([-1] + [1] * (rank - 2)))


def _batch_norm_training(node: OnnxNode, ctx: ConversionContext) -> Result:
    """training_mode=1 (opset 14 on): normalised by the batch's statistics over every axis
    but the channels (1), the variance a population one; the running statistics are
    ``input * momentum + batch * (1 - momentum)``, as onnx's reference computes them. They
    keep the dtype of the given mean and variance (the schema's U; onnx's reference casts
    them to X's, which differs only where the two dtypes do)."""
    x, scale, offset, mean, var = (ctx.input(i) for i in range(5))
    rank = rank_of(node, x, "input X")
    if rank < 2:
        raise node.fail(f"input X must have a channel axis (rank 2 or more), not rank {rank}")
    epsilon = float(node.attr("epsilon", 1e-5))
    momentum = float(node.attr("momentum", 0.9))
    axes = ctx.int32s([0, *range(2, rank)])
    batch_mean = ops.mean(x, axes, keep_dims=True)
    centered = ops.sub(x, batch_mean)
    batch_var = ops.mean(ops.square(centered), axes, keep_dims=True)
    scale, offset = (
        _channel_shaped(ctx, ops.cast(t, DstT=x.dtype) if t.dtype != x.dtype else t, rank)
        for t in (scale, offset)
    )
    root = ops.sqrt(ops.add_v2(batch_var, ctx.const_like(epsilon, x)))
    y = ops.add_v2(ops.real_div(ops.mul(scale, centered), root), offset)
    outputs: list[Tensor | None] = [y]
    for running, batch in ((mean, batch_mean), (var, batch_var)):
        if len(outputs) == len(node.outputs):
            break
        flat = ops.reshape(batch, ctx.int64s([-1]))
        if flat.dtype != running.dtype:
            flat = ops.cast(flat, DstT=running.dtype)
        outputs.append(
            ops.add_v2(
                ops.mul(running, ctx.const_like(momentum, running)),
                ops.mul(flat, ctx.const_like(1 - momentum, running)),
            )
        )
    return outputs


@converter("BatchNormalization", 7, attrs=("epsilon", "momentum", "spatial", "training_mode"))
def _batch_norm(node: OnnxNode, ctx: ConversionContext) -> Result:
    if int(node.attr("training_mode", 0)):
        return _batch_norm_training(node, ctx)
    if len([o for o in node.outputs if o]) > 1:
        raise node.fail(
            "the running mean and variance outputs are given only in training mode "
            "(training_mode=1, opset 14 on)"
        )
    if int(node.attr("spatial", 1)) != 1:
        raise node.fail("spatial=0 is not supported")
    x, scale, offset, mean, var = (ctx.input(i) for i in range(5))
    epsilon = float(node.attr("epsilon", 1e-5))
    rank = rank_of(node, x, "input X")
    params_f32 = all(t.dtype == d.float32 for t in (scale, offset, mean, var))
    if rank == 4 and x.dtype in (d.float32, d.float16) and params_f32:
        y = ops.fused_batch_norm_v3(
            x, scale, offset, mean, var, epsilon=epsilon, data_format="NCHW", is_training=False
        )
        return [y[0]]
    # Any other rank or dtype: (x - mean) * scale / sqrt(var + epsilon) + offset.
    factor = ops.mul(scale, ops.rsqrt(ops.add_v2(var, ctx.const_like(epsilon, var))))
    shift = ops.sub(offset, ops.mul(mean, factor))
    factor, shift = (
        ops.cast(t, DstT=x.dtype) if t.dtype != x.dtype else t for t in (factor, shift)
    )
    if rank >= 2:
        factor, shift = _channel_shaped(ctx, factor, rank), _channel_shaped(ctx, shift, rank)
    return [ops.add_v2(ops.mul(x, factor), shift)]


@converter("InstanceNormalization", 6, attrs=("epsilon",))
def _instance_norm(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, scale, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = rank_of(node, x, "input")
    axes = ctx.int32s(list(range(2, rank)))
    mean = ops.mean(x, axes, keep_dims=True)
    centered = ops.sub(x, mean)
    var = ops.mean(ops.square(centered), axes, keep_dims=True)
    eps = ctx.const_like(float(node.attr("epsilon", 1e-5)), x)
    normed = ops.mul(centered, ops.rsqrt(ops.add_v2(var, eps)))
    return [
        ops.add_v2(
            ops.mul(normed, _channel_shaped(ctx, scale, rank)), _channel_shaped(ctx, offset, rank)
        )
    ]


@converter("LayerNormalization", 17, attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(node: OnnxNode, ctx: ConversionContext) -> Result:
    if int(node.attr("stash_type", 1)) != 1:
        raise node.fail("only stash_type=1 (float32 statistics) is supported")
    x, scale = ctx.input(0), ctx.input(1)
    bias = ctx.optional(2)
    rank = rank_of(node, x, "input X")
    axis = axis_of(node, int(node.attr("axis", -1)), rank)
    work = ops.cast(x, DstT=d.float32) if x.dtype != d.float32 else x
    axes = ctx.int32s(list(range(axis, rank)))
    mean = ops.mean(work, axes, keep_dims=True)
    centered = ops.sub(work, mean)
    var = ops.mean(ops.square(centered), axes, keep_dims=True)
    inv = ops.rsqrt(ops.add_v2(var, ctx.const_like(float(node.attr("epsilon", 1e-5)), var)))
    normed = ops.mul(centered, inv)
    if normed.dtype != x.dtype:
        normed = ops.cast(normed, DstT=x.dtype)
    y = ops.mul(normed, scale)
    if bias is not None:
        y = ops.add_v2(y, bias)
    outputs: list[Tensor | None] = [y]
    if len(node.outputs) > 1:
        outputs.append(mean)
    if len(node.outputs) > 2:
        outputs.append(inv)
    return outputs


@converter("LRN", 1, attrs=("alpha", "beta", "bias", "size"))
def _lrn(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    size = int(node.attr("size"))
    if size % 2 == 0:
        raise node.fail(f"an even size ({size}) is not supported (TF's LRN window is symmetric)")
    if rank_of(node, x, "input X") != 4:
        raise node.fail("only rank-4 (NCHW) inputs are supported")
    nhwc = ops.transpose(x, ctx.int32s([0, 2, 3, 1]))
    y = ops.lrn(
        nhwc,
        depth_radius=(size - 1) // 2,
        bias=float(node.attr("bias", 1.0)),
        alpha=float(node.attr("alpha", 1e-4)) / size,
        beta=float(node.attr("beta", 0.75)),
    )
    return [ops.transpose(y, ctx.int32s([0, 3, 1, 2]))]


# -- more normalizations, composed ------------------------------------------------------


def _stats_dtype(node: OnnxNode, ctx: ConversionContext, x: Tensor) -> Tensor:
    if int(node.attr("stash_type", 1)) != 1:
        raise node.fail("only stash_type=1 (float32 statistics) is supported")
    return ops.cast(x, DstT=d.float32) if x.dtype != d.float32 else x


@converter("RMSNormalization", 23, attrs=("axis", "epsilon", "stash_type"))
def _rms_norm(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, scale = ctx.input(0), ctx.input(1)
    rank = rank_of(node, x, "input X")
    axis = axis_of(node, int(node.attr("axis", -1)), rank)
    work = _stats_dtype(node, ctx, x)
    mean_square = ops.mean(ops.square(work), ctx.int32s(list(range(axis, rank))), keep_dims=True)
    eps = ctx.const_like(float(node.attr("epsilon", 1e-5)), mean_square)
    normed = ops.mul(work, ops.rsqrt(ops.add_v2(mean_square, eps)))
    if normed.dtype != x.dtype:
        normed = ops.cast(normed, DstT=x.dtype)
    return [ops.mul(normed, scale)]


@converter("LpNormalization", 1, attrs=("axis", "p"))
def _lp_norm(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    axis = axis_of(node, int(node.attr("axis", -1)), rank_of(node, x))
    p = int(node.attr("p", 2))
    axes = ctx.int32s([axis])
    if p == 1:
        norm = ops.sum(ops.abs(x), axes, keep_dims=True)
    elif p == 2:
        norm = ops.sqrt(ops.sum(ops.square(x), axes, keep_dims=True))
    else:
        raise node.fail(f"p={p}: only 1 and 2 are defined")
    return [ops.div_no_nan(x, norm)]


@converter("MeanVarianceNormalization", 9, attrs=("axes",))
def _mvn(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    axes = ctx.int32s(ints(node.attr("axes", [0, 2, 3])))
    mean = ops.mean(x, axes, keep_dims=True)
    centered = ops.sub(x, mean)
    var = ops.mean(ops.square(centered), axes, keep_dims=True)
    return [ops.real_div(centered, ops.add_v2(ops.sqrt(var), ctx.const_like(1e-9, x)))]


@converter("GroupNormalization", 18, attrs=("epsilon", "num_groups", "stash_type"))
def _group_norm(node: OnnxNode, ctx: ConversionContext) -> Result:
    """x [N, C, ...] as [N, num_groups, -1], normalized over the last axis. The batch and
    the other sizes may be known at run time only (x's shape is then read there).
    GroupNormalization-18's scale and bias are per group ([num_groups]), applied before
    the reshape back; from opset 21 on they are per channel ([C])."""
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = rank_of(node, x, "input X")
    if rank < 2:
        raise node.fail(f"input X must have a channel axis (rank 2 or more), not rank {rank}")
    groups = int(node.attr("num_groups"))
    channels = x.shape.as_list()[1]
    if groups <= 0 or (channels is not None and channels % groups):
        raise node.fail(f"num_groups={groups} does not divide the input's {channels} channels")
    work = _stats_dtype(node, ctx, x)
    grouped = ops.reshape(work, _grouped_shape(ctx, x, groups))
    axes = ctx.int32s([2])
    mean = ops.mean(grouped, axes, keep_dims=True)
    centered = ops.sub(grouped, mean)
    var = ops.mean(ops.square(centered), axes, keep_dims=True)
    eps = ctx.const_like(float(node.attr("epsilon", 1e-5)), var)
    normed = ops.mul(centered, ops.rsqrt(ops.add_v2(var, eps)))
    if normed.dtype != x.dtype:
        normed = ops.cast(normed, DstT=x.dtype)
    per_group = node.opset < 21 and scale.shape.as_list() == [groups] and groups != channels
    if per_group:
        # GroupNormalization-18 takes per-group scale and bias: [groups, 1] over the groups.
        column = ctx.int64s([groups, 1])
        normed = ops.add_v2(ops.mul(normed, ops.reshape(scale, column)), ops.reshape(bias, column))
    dims = static_dims(x)
    y = ops.reshape(normed, ctx.int64s(dims) if dims else ops.shape(x, out_type=d.int64))
    if y.shape != x.shape:
        y.graph.set_output_shape(y, y.shape.merge_with(x.shape))  # values keep x's shape
    if per_group:
        return [y]
    return [
        ops.add_v2(ops.mul(y, _channel_shaped(ctx, scale, rank)), _channel_shaped(ctx, bias, rank))
    ]


def _grouped_shape(ctx: ConversionContext, x: Tensor, groups: int) -> Tensor:
    """[N, groups, -1] for x [N, C, ...]: constants where the import knows them (the batch
    -1 when the rest is known), else the batch read from x's shape at run time."""
    dims = x.shape.as_list()
    rest = dims[1:]
    if all(v is not None for v in rest):
        inner = int(np.prod([int(v) for v in rest if v is not None], dtype=np.int64)) // groups
        return ctx.int64s([-1 if dims[0] is None else dims[0], groups, inner])
    if dims[0] is not None:
        return ctx.int64s([dims[0], groups, -1])
    batch = ops.strided_slice(
        ops.shape(x, out_type=d.int64), ctx.int64s([0]), ctx.int64s([1]), ctx.int64s([1])
    )
    return ops.concat_v2([batch, ctx.int64s([groups, -1])], ctx.const(np.int32(0)))


__all__: list[str] = []
