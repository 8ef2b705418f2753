"""Integer and quantized products: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Each is composed exactly from kernloom ops, as onnx's reference computes it:

- the operands are cast to int32 and their zero points subtracted there (an int8/uint8
  value less a zero point lies in [-255, 255], exact in int32);
- the product is an int32 MatMul / BatchMatMulV2 or Conv2D (kernloom's CPU kernels take
  int32 and accumulate in it: a sum of K products of at most 255 * 255 stays exact for
  K < 33,000 terms, and wraps beyond, as onnxruntime's int32 accumulator does);
- QLinear* requantize: the multiplier ``a_scale * b_scale / y_scale`` is computed in the
  scales' own dtype (float32 or float16, as the reference does), the int32 product and the
  multiplier are widened to float64 (exact for every int32) and multiplied there, the
  output zero point is added, and the sum is rounded half to even (TensorFlow's Round)
  and saturated to the output type (QuantizeLinear's rule).

Zero points and scales follow ONNX's layouts: per tensor (a scalar or one element); for
the left matrix of MatMulInteger / QLinearMatMul a 1-D one is per row (made [M, 1]), for
the right one per column (it broadcasts over the last axis as it is); for ConvInteger /
QLinearConv the weight's 1-D zero point and scale are per output channel; the output's
scale and zero point, and the convolution input's, are per tensor (one element, as ONNX
says; more is an import error). Their shapes must be known at import time. Float8
operands (QLinearMatMul since opset 21) have no kernloom dtype and fail at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import rank_of, static_dims
from kernloom.onnx.ops.nn import convolve, matrix_product
from kernloom.onnx.ops.quantize import saturate

__all__: list[str] = []

Result = Sequence[Tensor | None]

_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_QUANTIZED = (d.int8, d.uint8)


def _int32(t: Tensor) -> Tensor:
    return t if t.dtype == d.int32 else ops.cast(t, DstT=d.int32)


def _f64(t: Tensor) -> Tensor:
    return t if t.dtype == d.float64 else ops.cast(t, DstT=d.float64)


def _check_quantized(node: OnnxNode, t: Tensor, what: str) -> None:
    if t.dtype not in _QUANTIZED:
        raise node.fail(f"{what} is {t.dtype}; int8 or uint8 is supported")


PER_TENSOR: Final = "per tensor"
"""A parameter ONNX allows only one element of (it fails otherwise)."""
Layout = list[int] | str | None


def _laid_out(
    node: OnnxNode, ctx: ConversionContext, p: Tensor, what: str, layout: Layout
) -> Tensor:
    """A zero point or scale shaped to broadcast: a one-element one as a scalar, a 1-D
    one reshaped to ``layout`` (its per-row / per-channel shape; None: as it is), any
    other as it is (it broadcasts as it stands); ``PER_TENSOR``: one element or an error."""
    dims = static_dims(p)
    if dims is None:
        raise node.fail(f"the shape of {what} must be known at import time")
    if int(np.prod(dims, dtype=np.int64)) == 1:
        return ops.reshape(p, ctx.int64s([]))
    if layout == PER_TENSOR:
        raise node.fail(f"{what} has shape {dims}; ONNX allows one element (per tensor) here")
    if len(dims) == 1 and isinstance(layout, list):
        return ops.reshape(p, ctx.int64s(layout))
    return p


def _centred(
    node: OnnxNode,
    ctx: ConversionContext,
    index: int,
    zero_index: int,
    what: str,
    layout: Layout,
) -> Tensor:
    """Input ``index`` in int32 less its zero point (input ``zero_index``, if given)."""
    x = ctx.input(index)
    _check_quantized(node, x, what)
    value = _int32(x)
    zero = ctx.optional(zero_index)
    if zero is None:
        return value
    _check_quantized(node, zero, f"the zero point of {what}")
    shaped = _laid_out(node, ctx, zero, f"the zero point of {what}", layout)
    return ops.sub(value, _int32(shaped))


def _row_shape(node: OnnxNode, a: Tensor) -> list[int] | None:
    """The layout of a 1-D per-row parameter of the left matrix: [M, 1]."""
    return [-1, 1] if rank_of(node, a, "input A") >= 2 else None


def _requantize(
    node: OnnxNode,
    ctx: ConversionContext,
    product: Tensor,
    multiplier: Tensor,
    zero: Tensor | None,
    fallback: d.DType,
) -> Tensor:
    """round_half_even(product * multiplier + zero), saturated to the zero point's type
    (``fallback``, the quantized input's, without one)."""
    y = ops.mul(_f64(product), _f64(multiplier))
    target = fallback
    if zero is not None:
        _check_quantized(node, zero, "the output zero point")
        target = zero.dtype
        y = ops.add_v2(y, _f64(_laid_out(node, ctx, zero, "the output zero point", PER_TENSOR)))
    return saturate(ctx, ops.round(y), target)


def _scale(node: OnnxNode, ctx: ConversionContext, index: int, what: str) -> Tensor:
    s = ctx.input(index)
    if not s.dtype.is_floating:
        raise node.fail(f"{what} is {s.dtype}; a float scale is expected")
    return s


def _in_dtype(s: Tensor, like: Tensor) -> Tensor:
    return s if s.dtype == like.dtype else ops.cast(s, DstT=like.dtype)


def _multiplier(first: Tensor, second: Tensor, y_scale: Tensor) -> Tensor:
    """first * second / y_scale in the first scale's dtype (the reference's order)."""
    return ops.real_div(ops.mul(first, _in_dtype(second, first)), _in_dtype(y_scale, first))


@converter("MatMulInteger", 10)
def _matmul_integer(node: OnnxNode, ctx: ConversionContext) -> Result:
    rows = _row_shape(node, ctx.input(0))
    a = _centred(node, ctx, 0, 2, "input A", rows)
    b = _centred(node, ctx, 1, 3, "input B", None)
    return [matrix_product(node, a, b)]


@converter("QLinearMatMul", 10)
def _qlinear_matmul(node: OnnxNode, ctx: ConversionContext) -> Result:
    rows = _row_shape(node, ctx.input(0))
    a = _centred(node, ctx, 0, 2, "input a", rows)
    b = _centred(node, ctx, 3, 5, "input b", None)
    a_scale = _laid_out(node, ctx, _scale(node, ctx, 1, "a_scale"), "a_scale", rows)
    b_scale = _laid_out(node, ctx, _scale(node, ctx, 4, "b_scale"), "b_scale", None)
    y_scale = _laid_out(node, ctx, _scale(node, ctx, 6, "y_scale"), "y_scale", PER_TENSOR)
    product = matrix_product(node, a, b)
    multiplier = _multiplier(a_scale, b_scale, y_scale)
    return [_requantize(node, ctx, product, multiplier, ctx.optional(7), ctx.input(0).dtype)]


def _centred_weight(
    node: OnnxNode, ctx: ConversionContext, index: int, zero_index: int
) -> tuple[Tensor, np.ndarray[Any, Any] | None]:
    """The weight in int32 less its zero point (per output channel where 1-D), and that
    value worked out at import time where the weight and zero point are known then."""
    w = ctx.input(index)
    rank = rank_of(node, w, "weight W")
    channels = [-1] + [1] * (rank - 1)
    w_value = ctx.static_input(index)
    has_zero = ctx.has_input(zero_index)
    zero_value = ctx.static_input(zero_index) if has_zero else np.int32(0)
    if w_value is None or zero_value is None:
        return _centred(node, ctx, index, zero_index, "weight W", channels), None
    _check_quantized(node, w, "weight W")
    if has_zero:
        _check_quantized(node, ctx.input(zero_index), "the zero point of weight W")
    zero32 = np.asarray(zero_value).astype(np.int32)
    if zero32.size == 1:
        zero32 = zero32.reshape(())
    elif zero32.ndim == 1:
        zero32 = zero32.reshape(channels)
    value = w_value.astype(np.int32) - zero32
    return ctx.const(value), value


def _conv_input(node: OnnxNode, ctx: ConversionContext) -> Tensor:
    return _centred(node, ctx, 0, 2, "input X", PER_TENSOR)


@converter("ConvInteger", 10, attrs=_CONV_ATTRS)
def _conv_integer(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = _conv_input(node, ctx)
    w, w_value = _centred_weight(node, ctx, 1, 3)
    return [convolve(node, ctx, x, w, w_value, None)]


@converter("QLinearConv", 10, attrs=_CONV_ATTRS)
def _qlinear_conv(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = _conv_input(node, ctx)
    w, w_value = _centred_weight(node, ctx, 3, 5)
    bias = ctx.optional(8)
    if bias is not None and bias.dtype != d.int32:
        raise node.fail(f"the bias B is {bias.dtype}; QLinearConv takes an int32 bias")
    product = convolve(node, ctx, x, w, w_value, bias)
    channels = [1, -1] + [1] * (rank_of(node, ctx.input(0), "input x") - 2)
    x_scale = _laid_out(node, ctx, _scale(node, ctx, 1, "x_scale"), "x_scale", PER_TENSOR)
    w_scale = _laid_out(node, ctx, _scale(node, ctx, 4, "w_scale"), "w_scale", channels)
    y_scale = _laid_out(node, ctx, _scale(node, ctx, 6, "y_scale"), "y_scale", PER_TENSOR)
    multiplier = _multiplier(x_scale, w_scale, y_scale)
    return [_requantize(node, ctx, product, multiplier, ctx.optional(7), ctx.input(0).dtype)]
