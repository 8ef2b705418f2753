"""Linear (de)quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear for
8- and 16-bit integer types, per tensor, per axis or per block; and for the small types
kernloom has no dtype for (float8, float4e2m1, int4, uint4, int2, uint2), held as codes
(``kernloom.onnx._small_types``), as onnx's reference: a float8 zero point must be zero
and is not added, a float4e2m1 one is added before the cast, an int4/int2 one as an
integer before the clamp. Deviation: quantizing an infinity or NaN to an integer type
clamps it (inf to the largest code); the reference's numpy cast of those to int32 is
undefined (INT_MIN on x86, hence the smallest code), as for the 8-bit types here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx._small_types import clamp_range, decode, encode, is_small, small_type
from kernloom.onnx._values import OnnxCoded
from kernloom.onnx.ops._helpers import axis_of, rank_of, static_dims

Result = Sequence[Tensor | None]
CodedResult = Sequence[Tensor | OnnxCoded | None]


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


def _plain(value: Tensor | OnnxCoded) -> Tensor:
    """A value as float32: a small type's decoded, another cast."""
    if isinstance(value, OnnxCoded):
        return decode(value.codes, value.elem_type, d.float32)
    return _f32(value)


@converter("DequantizeLinear", 10, attrs=("axis", "block_size", "output_dtype"))
def _dequantize(node: OnnxNode, ctx: ConversionContext) -> Result:
    coded_x = ctx.tensor_or_coded(0)
    scale = ctx.input(1)
    coded_zero = ctx.tensor_or_coded(2) if ctx.has_input(2) else None
    x = coded_x.codes if isinstance(coded_x, OnnxCoded) else coded_x
    zero = coded_zero.codes if isinstance(coded_zero, OnnxCoded) else coded_zero
    shaped_scale = _broadcastable(node, ctx, x, scale)
    value = _plain(coded_x)
    if isinstance(coded_x, OnnxCoded) and small_type(coded_x.elem_type).is_float:
        zero = None  # onnx's reference: a float8 (or float4) zero point is zero, unused
    if zero is not None:
        assert coded_zero is not None
        shaped_zero = _broadcastable(node, ctx, x, zero)
        if isinstance(coded_zero, OnnxCoded):
            shaped_zero = decode(shaped_zero, coded_zero.elem_type, d.float32)
        value = ops.sub(value, _f32(shaped_zero))
    y = ops.mul(value, _f32(shaped_scale))
    out = node.attr("output_dtype")
    target = scale.dtype if not out else kernloom_dtype(int(out), f"node {node.name!r}")
    return [y if y.dtype == target else ops.cast(y, DstT=target)]


@converter(
    "QuantizeLinear", 10, attrs=("axis", "block_size", "output_dtype", "saturate", "precision")
)
def _quantize(node: OnnxNode, ctx: ConversionContext) -> CodedResult:
    x, scale = ctx.input(0), ctx.input(1)
    coded_zero = ctx.tensor_or_coded(2) if ctx.has_input(2) else None
    out = node.attr("output_dtype")
    small = coded_zero.elem_type if isinstance(coded_zero, OnnxCoded) else None
    if small is None and coded_zero is None and out and is_small(int(out)):
        small = int(out)
    if small is not None:
        return [_quantize_small(node, ctx, x, scale, coded_zero, small)]
    zero = coded_zero
    assert not isinstance(zero, OnnxCoded)
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


def _quantize_small(
    node: OnnxNode,
    ctx: ConversionContext,
    x: Tensor,
    scale: Tensor,
    coded_zero: Tensor | OnnxCoded | None,
    elem_type: int,
) -> OnnxCoded:
    """QuantizeLinear to a small type, as onnx's reference: x / scale, then for an
    integer type rounded half to even, plus the zero point, clamped; for a float8 type
    the saturating (or not) cast, the zero point unused; for float4e2m1 the zero point
    added, then the cast."""
    if coded_zero is not None and not isinstance(coded_zero, OnnxCoded):
        raise node.fail(
            f"the zero point is {coded_zero.dtype} but output_dtype is "
            f"{small_type(elem_type).name}: they must agree"
        )
    ratio = _divided(node, x, _broadcastable(node, ctx, x, scale))
    small = small_type(elem_type)
    zero = None
    if coded_zero is not None:
        zero = decode(_broadcastable(node, ctx, x, coded_zero.codes), elem_type, d.float32)
    if not small.is_float:
        y = ops.round(_f32(ratio))
        if zero is not None:
            y = ops.add_v2(y, zero)
        low, high = clamp_range(elem_type)
        clamped = ops.minimum(ops.maximum(y, ctx.const_like(low, y)), ctx.const_like(high, y))
        return OnnxCoded(ops.cast(clamped, DstT=small.storage), elem_type)
    if elem_type == TensorProto.FLOAT4E2M1 and zero is not None:
        ratio = _ieee_add(ctx, _f32(ratio), zero)
    saturate = bool(node.attr("saturate", 1))
    return OnnxCoded(encode(ratio, elem_type, saturate=saturate), elem_type)


def _divided(node: OnnxNode, x: Tensor, scale: Tensor) -> Tensor:
    """x / scale in numpy's promoted type (float16 by float32 is float32), or in the
    ``precision`` type when the node names one, as the reference divides."""
    precision = node.attr("precision")
    if precision:
        common = kernloom_dtype(int(precision), f"node {node.name!r} attribute 'precision'")
    elif x.dtype == scale.dtype:
        common = x.dtype
    else:
        common = d.float64 if d.float64 in (x.dtype, scale.dtype) else d.float32

    def as_common(t: Tensor) -> Tensor:
        return t if t.dtype == common else ops.cast(t, DstT=common)

    return ops.real_div(as_common(x), as_common(scale))


def _ieee_add(ctx: ConversionContext, x: Tensor, y: Tensor) -> Tensor:
    """x + y with IEEE's zero sign: -0 only when both are -0. The graph optimizer takes
    ``x + 0`` as x (``kernloom.optimizer.arithmetic``), which keeps a -0 that the
    reference's float4e2m1 quantization turns into +0."""
    total = ops.add_v2(x, y)
    zero_bits = ctx.const(np.int32(0))
    both_negative = ops.logical_and(
        ops.less(ops.bitcast(x, type=d.int32), zero_bits),
        ops.less(ops.bitcast(y, type=d.int32), zero_bits),
    )
    plus_zero = ops.logical_and(
        ops.equal(total, ctx.const(np.float32(0))), ops.logical_not(both_negative)
    )
    return ops.select_v2(plus_zero, ctx.const(np.float32(0)), total)


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
