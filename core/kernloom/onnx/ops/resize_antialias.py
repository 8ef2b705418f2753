"""Resize with ``antialias=1``: each resized axis is a weight matrix applied along it.

When downsampling by ``scale < 1``, onnx widens the linear (or cubic) filter by
``1 / scale`` (``onnx/reference/ops/op_resize.py``): output ``o`` at source coordinate
``x`` takes every input ``e`` with weight ``K(scale * (e - x))``, normalised to sum 1;
taps past an edge take the edge's value (or, with ``exclude_outside``, are dropped before
normalising). So one axis of the resize is a matrix ``W`` [out, in], and the output is
``x`` contracted with ``W`` along that axis (an Einsum):

* with the input's sizes, the scales or sizes (and the roi of ``tf_crop_and_resize``)
  known at import, ``W`` is a constant computed here with onnx's own float64 formulas,
  the input is contracted in float64 and cast back, as the reference does: exact up to
  the order of the float sums;
* where any of them is only known at run time, ``W`` is built by kernloom ops in float32
  (the coordinates are Resize's own, :mod:`kernloom.onnx.ops.resize`), over the integers
  ``-P .. in + P`` with ``P`` the filter's reach, the taps past an edge folded onto it.

Upsampling with ``antialias=1`` is plain linear or cubic interpolation (the filter is not
narrowed). ``nearest`` with ``antialias=1`` is refused at import, as onnx's reference and
onnxruntime refuse it.

Deliberate deviations from onnx's reference:

* ``pytorch_half_pixel`` with one output places it at source coordinate 0, as ONNX's
  specification, onnxruntime and kernloom's Resize without antialias do; the reference
  takes -0.5 (which, widened, weighs the first inputs differently).
* The reference places each output's window of inputs from ``x + pad`` but its weights
  from ``x``; where ``x`` is within rounding of an integer these can disagree by one input
  (a cubic ``half_pixel_symmetric`` upsampling by 1.5 has such outputs). The import-time
  weights reproduce the reference's; the run-time ones place the window at ``x`` itself,
  as onnxruntime does.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode

__all__ = ["antialiased_axis", "static_antialiased"]

F = d.float32


def _kernel(mode: str, t: np.ndarray[Any, Any], a: float) -> np.ndarray[Any, Any]:
    """onnx's antialias filters at (already scaled) distances t."""
    t = np.abs(t)
    if mode == "linear":
        return np.clip(1 - t, 0, 1)
    t2, t3 = t * t, t * t * t
    near = (a + 2) * t3 - (a + 3) * t2 + 1
    far = a * t3 - 5 * a * t2 + 8 * a * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _source(
    transform: str,
    out_len: int,
    in_len: int,
    scale: float,
    roi: tuple[float, float] | None,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any] | None]:
    """onnx's ``_compute_x_ori``: the source coordinate of each output, and for
    tf_crop_and_resize which outputs fall outside the input."""
    y = np.arange(out_len, dtype=np.float64)
    width = scale * in_len
    if transform == "align_corners":
        return (np.zeros(out_len) if width == 1 else y * (in_len - 1) / (width - 1)), None
    if transform == "asymmetric":
        return y / scale, None
    if transform == "pytorch_half_pixel":  # 0 for one output: the spec's (see above)
        return (np.zeros(out_len) if width == 1 else (y + 0.5) / scale - 0.5), None
    if transform == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if transform == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        return offset + (y + 0.5) / scale - 0.5, None
    assert transform == "tf_crop_and_resize" and roi is not None
    start, end = roi
    if width == 1:
        x = np.full(out_len, (end - start) * (in_len - 1) / 2)
    else:
        x = y * (end - start) * (in_len - 1) / (width - 1)
    x = x + start * (in_len - 1)
    return x, (x < 0) | (x > in_len - 1)


def _weights(
    mode: str, x: np.ndarray[Any, Any], in_len: int, scale: float, a: float, exclude: bool
) -> np.ndarray[Any, Any]:
    """W [out, in] of one axis, onnx's window of taps per output folded onto the input."""
    narrow = min(scale, 1.0)
    reach = 1 if mode == "linear" else 2
    start = int(np.floor(-reach / narrow) + 1)
    taps = 2 - 2 * start
    # As onnx: the coefficients at taps start.. from floor(x) (from x - 1 at an integer
    # x), the window of inputs placed from x + pad, which may round onto an integer where
    # x did not: then onnx's weights sit one input off, and these reproduce them.
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    coeffs = _kernel(mode, (np.arange(start, start + taps)[None, :] - ratio[:, None]) * narrow, a)
    coeffs = coeffs / coeffs.sum(axis=1, keepdims=True)
    pad = (taps + 1) // 2
    padded = x + pad
    low = np.floor(padded)
    first = low.astype(np.int64) - taps // 2 + np.where(padded == low, 0, 1) - pad
    index = first[:, None] + np.arange(taps)[None, :]
    if exclude:
        coeffs = np.where((index < 0) | (index >= in_len), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    w = np.zeros((len(x), in_len))
    rows = np.broadcast_to(np.arange(len(x))[:, None], index.shape)
    np.add.at(w, (rows, np.clip(index, 0, in_len - 1)), coeffs)
    return w


def _contract(x: Tensor, w: Tensor, axis: int, rank: int) -> Tensor:
    """x with its ``axis`` replaced by W's rows: sum_i W[o, i] x[..., i, ...]."""
    letters = string.ascii_letters[: rank + 1]
    dims = list(letters[:rank])
    out = list(dims)
    out[axis] = letters[rank]
    equation = f"{''.join(dims)},{letters[rank]}{dims[axis]}->{''.join(out)}"
    return ops.einsum([x, w], equation=equation)


def _cast_back(ctx: ConversionContext, y: Tensor, dtype: d.DType) -> Tensor:
    """onnx's saturate_cast: integers rounded half to even and clipped to their range."""
    if y.dtype == dtype:
        return y
    if dtype.is_integer:
        info = np.iinfo(dtype.numpy_dtype)
        y = ops.clip_by_value(
            ops.round(y), ctx.const_like(info.min, y), ctx.const_like(info.max, y)
        )
    return ops.cast(y, DstT=dtype)


def static_antialiased(
    node: OnnxNode,
    ctx: ConversionContext,
    x: Tensor,
    axes: Sequence[int],
    scales: np.ndarray[Any, Any] | None,
    sizes: np.ndarray[Any, Any] | None,
    roi: np.ndarray[Any, Any] | None,
) -> Tensor | None:
    """The antialiased resize with constant weights, or None when the input's sizes along
    ``axes``, the scales or sizes, or the roi are not all known at import."""
    dims = x.shape.as_list() if x.shape.rank is not None else None
    if dims is None or any(dims[a] is None for a in axes):
        return None
    if (scales is None) == (sizes is None):
        return None
    transform = str(node.attr("coordinate_transformation_mode", "half_pixel"))
    if transform == "tf_crop_and_resize" and roi is None:
        return None
    in_lens = [int(dims[a]) for a in axes]  # type: ignore[arg-type]
    policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
    if sizes is not None:
        outs = [int(v) for v in sizes.reshape(-1)]
        factors = [o / i for o, i in zip(outs, in_lens, strict=True)]
        if policy != "stretch":
            common = min(factors) if policy == "not_larger" else max(factors)
            factors = [common] * len(axes)
            outs = [int(common * i + 0.5) for i in in_lens]
    else:
        assert scales is not None
        factors = [float(v) for v in scales.reshape(-1)]
        outs = [int(f * i) for f, i in zip(factors, in_lens, strict=True)]
    mode = str(node.attr("mode"))
    a = float(node.attr("cubic_coeff_a", -0.75))
    exclude = bool(int(node.attr("exclude_outside", 0)))
    rank = len(dims)
    dtype = x.dtype
    y = x if dtype == d.float64 else ops.cast(x, DstT=d.float64)
    for n, axis in enumerate(axes):
        scale, out_len, in_len = factors[n], outs[n], in_lens[n]
        pair = None if roi is None else (float(roi[n]), float(roi[n + len(axes)]))
        untouched = pair is None or (math.isclose(pair[0], 0.0) and math.isclose(pair[1], 1.0))
        if math.isclose(scale, 1.0) and out_len == in_len and untouched:
            continue  # onnx skips an axis left as it is
        if out_len == 0 or in_len == 0:
            w = np.zeros((out_len, in_len))
            outside = None
        else:
            coords, outside = _source(transform, out_len, in_len, scale, pair)
            w = _weights(mode, coords, in_len, scale, a, exclude)
        y = _contract(y, ctx.const(w, d.float64), axis, rank)
        if outside is not None and outside.any():
            shape = [1] * rank
            shape[axis] = out_len
            fill = float(node.attr("extrapolation_value", 0.0))
            y = ops.select_v2(
                ctx.const(outside.reshape(shape)),
                ops.add_v2(ops.zeros_like(y), ctx.const(np.float64(fill))),
                y,
            )
    return _cast_back(ctx, y, dtype)


def antialiased_axis(
    node: OnnxNode,
    ctx: ConversionContext,
    x: Tensor,
    axis: int,
    rank: int,
    coords: Tensor,
    in_len_i: Tensor,
    scale: Tensor,
) -> Tensor:
    """One axis resized with weights built at run time (float32): ``coords`` are the
    outputs' source coordinates [out], ``scale`` the axis' scale (a float32 scalar)."""
    mode = str(node.attr("mode"))
    a = float(node.attr("cubic_coeff_a", -0.75))
    exclude = bool(int(node.attr("exclude_outside", 0)))
    one = ctx.const(np.float32(1))
    narrow = ops.minimum(scale, one)
    reach = ctx.const(np.float32(1 if mode == "linear" else 2))
    widest = ops.cast(ops.ceil(ops.real_div(reach, narrow)), DstT=d.int64)
    pad = ops.add_v2(widest, ctx.const(np.int64(1)))
    # Every integer a tap can reach: -pad .. in + pad - 1.
    taps = ops.range(ops.neg(pad), ops.add_v2(in_len_i, pad), ctx.const(np.int64(1)))
    t = ops.mul(
        narrow,
        ops.sub(
            ops.expand_dims(ops.cast(taps, DstT=F), ctx.const(np.int32(0))),
            ops.expand_dims(coords, ctx.const(np.int32(1))),
        ),
    )
    t = ops.abs(t)
    zero = ops.zeros_like(t)
    if mode == "linear":
        k = ops.maximum(ops.sub(one, t), zero)
    else:
        t2 = ops.square(t)
        t3 = ops.mul(t2, t)

        def c(v: float) -> Tensor:
            return ctx.const(np.float32(v))

        near = ops.add_v2(ops.sub(ops.mul(c(a + 2), t3), ops.mul(c(a + 3), t2)), one)
        far = ops.add_v2(
            ops.sub(ops.mul(c(a), t3), ops.mul(c(5 * a), t2)),
            ops.sub(ops.mul(c(8 * a), t), c(4 * a)),
        )
        k = ops.select_v2(ops.less_equal(t, one), near, ops.select_v2(ops.less(t, c(2)), far, zero))
    inside = ops.logical_and(
        ops.greater_equal(taps, ctx.const(np.int64(0))), ops.less(taps, in_len_i)
    )
    if exclude:
        k = ops.select_v2(inside, k, zero)
    total = ops.sum(k, ctx.int32s([1]), keep_dims=True)
    k = ops.div_no_nan(k, total)
    # Fold the taps past each edge onto the edge: column min(max(e, 0), in - 1).
    last = ops.sub(in_len_i, ctx.const(np.int64(1)))
    column = ops.minimum(ops.maximum(taps, ctx.const(np.int64(0))), last)
    depth = ops.cast(in_len_i, DstT=d.int32)
    onto = ops.one_hot(column, depth, ctx.const(np.float32(1)), ctx.const(np.float32(0)))
    w = ops.mat_mul(k, onto)
    work = x if x.dtype == F else ops.cast(x, DstT=F)
    return _cast_back(ctx, _contract(work, w, axis, rank), x.dtype)
