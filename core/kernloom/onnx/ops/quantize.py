"""Linear (de)quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear for
8- and 16-bit integer types, per tensor, per axis or per block. Float8 and 4/2-bit types
have no kernloom dtype and fail at import."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import axis_of, rank_of, static_dims

Result = Sequence[Tensor | None]


def _f32(t: Tensor) -> Tensor:
    return t if t.dtype == d.float32 else ops.cast(t, DstT=d.float32)


def _broadcastable(node: OnnxNode, ctx: ConversionContext, x: Tensor, p: Tensor) -> Tensor:
    """A scale or zero point shaped to broadcast over x: scalar, per axis or per block."""
    p_dims = static_dims(p)
    if p_dims is None:
        raise node.fail("the scale and zero point need shapes known at import time")
    if len(p_dims) == 0 or p_dims == [1]:
        return ops.reshape(p, ctx.int64s([]))
    rank = rank_of(node, x)
    axis = axis_of(node, int(node.attr("axis", 1)), rank)
    block = int(node.attr("block_size", 0))
    if block == 0:
        shape = [1] * rank
        shape[axis] = -1
        return ops.reshape(p, ctx.int64s(shape))
    x_dims = static_dims(x)
    if x_dims is None:
        raise node.fail("blocked quantization needs x's shape at import time")
    # Repeat each entry block times along axis, then cut to x's length.
    expanded = ops.expand_dims(p, ctx.const(np.int32(axis + 1)))
    multiples = [1] * (rank + 1)
    multiples[axis + 1] = block
    tiled = ops.tile(expanded, ctx.int64s(multiples))
    merged = list(p_dims)
    merged[axis] = p_dims[axis] * block
    flat = ops.reshape(tiled, ctx.int64s(merged))
    begin = [0] * rank
    return ops.slice(flat, ctx.int64s(begin), ctx.int64s(x_dims))


def saturate(ctx: ConversionContext, y: Tensor, target: d.DType) -> Tensor:
    """y (a float holding whole numbers) clamped to ``target``'s range and cast to it."""
    info = np.iinfo(target.numpy_dtype)
    low, high = ctx.const_like(float(info.min), y), ctx.const_like(float(info.max), y)
    return ops.cast(ops.minimum(ops.maximum(y, low), high), DstT=target)


@converter("DequantizeLinear", 10, attrs=("axis", "block_size", "output_dtype"))
def _dequantize(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    shaped_scale = _broadcastable(node, ctx, x, scale)
    value = _f32(x)
    if zero is not None:
        value = ops.sub(value, _f32(_broadcastable(node, ctx, x, zero)))
    y = ops.mul(value, _f32(shaped_scale))
    out = node.attr("output_dtype")
    target = scale.dtype if not out else kernloom_dtype(int(out), f"node {node.name!r}")
    return [y if y.dtype == target else ops.cast(y, DstT=target)]


@converter(
    "QuantizeLinear", 10, attrs=("axis", "block_size", "output_dtype", "saturate", "precision")
)
def _quantize(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    out = node.attr("output_dtype")
    if zero is not None:
        target = zero.dtype
    elif out:
        target = kernloom_dtype(int(out), f"node {node.name!r} output_dtype")
    else:
        target = d.uint8
    if not target.is_integer:
        raise node.fail(f"quantizing to {target} is not supported (8- and 16-bit integers are)")
    y = ops.round(ops.real_div(_f32(x), _f32(_broadcastable(node, ctx, x, scale))))
    if zero is not None:
        y = ops.add_v2(y, _f32(_broadcastable(node, ctx, x, zero)))
    return [saturate(ctx, y, target)]


@converter("DynamicQuantizeLinear", 11)
def _dynamic_quantize(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = _f32(ctx.input(0))
    rank = rank_of(node, x)
    every = ctx.int32s(list(range(rank)))
    zero = ctx.const_like(0, x)
    high = ops.maximum(zero, ops.max(x, every))
    low = ops.minimum(zero, ops.min(x, every))
    scale = ops.real_div(ops.sub(high, low), ctx.const_like(255, x))
    zero_point = saturate(ctx, ops.round(ops.real_div(ops.neg(low), scale)), d.uint8)
    y = ops.add_v2(ops.round(ops.real_div(x, scale)), ops.cast(zero_point, DstT=d.float32))
    return [saturate(ctx, y, d.uint8), scale, zero_point]


__all__ = ["saturate"]
