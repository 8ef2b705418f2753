"""ONNX's Resize (and Upsample): separable per-axis gathers with weights.

Each axis is resized on its own: the output coordinates (a Range) are mapped back to
input coordinates by the ``coordinate_transformation_mode``, then ``nearest`` gathers
one index, ``linear`` blends two and ``cubic`` four. Scales and sizes may be computed at
run time: every step is a kernloom op. Upsample (7 and 9, its scales an attribute, then an
input) is Resize-10: the asymmetric coordinates, nearest rounding down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import ints, rank_of, shape_of
from kernloom.onnx.ops.resize_antialias import antialiased_axis, static_antialiased

Result = Sequence[Tensor | None]
F = d.float32

_ATTRS = (
    "antialias",
    "axes",
    "coordinate_transformation_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "extrapolation_value",
    "keep_aspect_ratio_policy",
    "mode",
    "nearest_mode",
)


class _Axis:
    """One axis' sizes and output coordinates, as float32 tensors."""

    def __init__(self, ctx: ConversionContext, x: Tensor, axis: int) -> None:
        self.ctx = ctx
        dim = ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), ctx.const(np.int32(0)))
        self.in_len_i = dim
        self.in_len = ops.cast(dim, DstT=F)

    def f(self, value: float) -> Tensor:
        return self.ctx.const(np.float32(value))


def _source_coordinates(
    node: OnnxNode,
    ax: _Axis,
    out_len_i: Tensor,
    scale: Tensor,
    mode: str,
    roi: tuple[Tensor, Tensor] | None,
    exact_len: Tensor | None = None,
) -> Tensor:
    ctx = ax.ctx
    # align_corners and friends divide by in * scale unrounded when scales were given.
    out_len = exact_len if exact_len is not None else ops.cast(out_len_i, DstT=F)
    o = ops.cast(ops.range(ctx.const(np.int64(0)), out_len_i, ctx.const(np.int64(1))), DstT=F)
    half = ax.f(0.5)
    if mode == "half_pixel":
        return ops.sub(ops.real_div(ops.add_v2(o, half), scale), half)
    if mode == "half_pixel_symmetric":
        adjustment = ops.real_div(ops.cast(out_len_i, DstT=F), ops.mul(ax.in_len, scale))
        center = ops.mul(ax.in_len, half)
        offset = ops.mul(center, ops.sub(ax.f(1), adjustment))
        return ops.add_v2(offset, ops.sub(ops.real_div(ops.add_v2(o, half), scale), half))
    if mode == "pytorch_half_pixel":
        plain = ops.sub(ops.real_div(ops.add_v2(o, half), scale), half)
        return ops.select_v2(ops.greater(out_len, ax.f(1)), plain, ops.zeros_like(plain))
    if mode == "align_corners":
        step = ops.div_no_nan(ops.sub(ax.in_len, ax.f(1)), ops.sub(out_len, ax.f(1)))
        return ops.mul(o, step)
    if mode == "asymmetric":
        return ops.real_div(o, scale)
    if mode == "tf_crop_and_resize":
        assert roi is not None
        start, end = roi
        last = ops.sub(ax.in_len, ax.f(1))
        step = ops.div_no_nan(ops.mul(ops.sub(end, start), last), ops.sub(out_len, ax.f(1)))
        spread = ops.add_v2(ops.mul(start, last), ops.mul(o, step))
        middle = ops.mul(ops.mul(ops.add_v2(start, end), half), last)
        return ops.select_v2(
            ops.greater(out_len, ax.f(1)), spread, ops.add_v2(ops.zeros_like(spread), middle)
        )
    raise node.fail(f"coordinate_transformation_mode={mode!r} is not supported")


def _gather(ctx: ConversionContext, x: Tensor, index: Tensor, axis: int) -> Tensor:
    return ops.gather_v2(x, index, ctx.const(np.int32(axis)))


def _along(ctx: ConversionContext, w: Tensor, axis: int, rank: int) -> Tensor:
    shape = [1] * rank
    shape[axis] = -1
    return ops.reshape(w, ctx.int64s(shape))


def _clamp_index(ctx: ConversionContext, ax: _Axis, i: Tensor) -> Tensor:
    last = ops.sub(ax.in_len_i, ctx.const(np.int64(1)))
    return ops.minimum(ops.maximum(i, ctx.const(np.int64(0))), last)


def _cubic_weight(ctx: ConversionContext, t: Tensor, a: float) -> Tensor:
    """Keys' cubic convolution kernel with coefficient a, at distance |t|."""
    t = ops.abs(t)
    one, two = ctx.const(np.float32(1)), ctx.const(np.float32(2))
    t2, t3 = ops.square(t), ops.mul(ops.square(t), t)
    near = ops.add_v2(
        ops.sub(
            ops.mul(ctx.const(np.float32(a + 2)), t3), ops.mul(ctx.const(np.float32(a + 3)), t2)
        ),
        one,
    )
    far = ops.add_v2(
        ops.sub(ops.mul(ctx.const(np.float32(a)), t3), ops.mul(ctx.const(np.float32(5 * a)), t2)),
        ops.sub(ops.mul(ctx.const(np.float32(8 * a)), t), ctx.const(np.float32(4 * a))),
    )
    zero = ops.zeros_like(t)
    return ops.select_v2(ops.less_equal(t, one), near, ops.select_v2(ops.less(t, two), far, zero))


def _resize_axis(
    node: OnnxNode,
    ctx: ConversionContext,
    x: Tensor,
    axis: int,
    rank: int,
    out_len_i: Tensor,
    scale: Tensor,
    roi: tuple[Tensor, Tensor] | None,
    legacy_floor: bool,
    exact_len: Tensor | None = None,
    antialias: bool = False,
) -> Tensor:
    ax = _Axis(ctx, x, axis)
    mode = str(node.attr("mode", "nearest"))
    transform = (
        "asymmetric"
        if legacy_floor
        else str(node.attr("coordinate_transformation_mode", "half_pixel"))
    )
    coords = _source_coordinates(node, ax, out_len_i, scale, transform, roi, exact_len)
    if antialias and mode in ("linear", "cubic"):
        out = antialiased_axis(node, ctx, x, axis, rank, coords, ax.in_len_i, scale)
    elif mode == "nearest":
        nearest = "floor" if legacy_floor else str(node.attr("nearest_mode", "round_prefer_floor"))
        if nearest == "round_prefer_floor":
            picked = ops.ceil(ops.sub(coords, ax.f(0.5)))
        elif nearest == "round_prefer_ceil":
            picked = ops.floor(ops.add_v2(coords, ax.f(0.5)))
        elif nearest == "floor":
            picked = ops.floor(coords)
        elif nearest == "ceil":
            picked = ops.ceil(coords)
        else:
            raise node.fail(f"nearest_mode={nearest!r} is not supported")
        index = _clamp_index(ctx, ax, ops.cast(picked, DstT=d.int64))
        out = _gather(ctx, x, index, axis)
    elif mode in ("linear", "cubic"):
        work = x if x.dtype == F else ops.cast(x, DstT=F)
        if mode == "linear":
            clamped = ops.minimum(ops.maximum(coords, ax.f(0)), ops.sub(ax.in_len, ax.f(1)))
            base = ops.floor(clamped)
            frac = ops.sub(clamped, base)
            i0 = ops.cast(base, DstT=d.int64)
            taps = [(i0, ops.sub(ax.f(1), frac)), (ops.add_v2(i0, ctx.const(np.int64(1))), frac)]
        else:
            base = ops.floor(coords)
            frac = ops.sub(coords, base)
            i0 = ops.cast(base, DstT=d.int64)
            a = float(node.attr("cubic_coeff_a", -0.75))
            taps = []
            for k in (-1, 0, 1, 2):
                w = _cubic_weight(ctx, ops.sub(frac, ax.f(k)), a)
                taps.append((ops.add_v2(i0, ctx.const(np.int64(k))), w))
            if int(node.attr("exclude_outside", 0)):
                inside = []
                for index, w in taps:
                    ok = ops.logical_and(
                        ops.greater_equal(index, ctx.const(np.int64(0))),
                        ops.less(index, ax.in_len_i),
                    )
                    inside.append((index, ops.select_v2(ok, w, ops.zeros_like(w))))
                total = inside[0][1]
                for _, w in inside[1:]:
                    total = ops.add_v2(total, w)
                taps = [(i, ops.real_div(w, total)) for i, w in inside]
        out = None
        for index, w in taps:
            term = ops.mul(
                _gather(ctx, work, _clamp_index(ctx, ax, index), axis), _along(ctx, w, axis, rank)
            )
            out = term if out is None else ops.add_v2(out, term)
        assert out is not None
        if x.dtype != F:
            out = ops.cast(ops.round(out) if x.dtype.is_integer else out, DstT=x.dtype)
    else:
        raise node.fail(f"mode={mode!r} is not supported (nearest, linear, cubic are)")
    assert out is not None
    result: Tensor = out
    if transform == "tf_crop_and_resize":
        outside = ops.logical_or(
            ops.less(coords, ax.f(0)), ops.greater(coords, ops.sub(ax.in_len, ax.f(1)))
        )
        fill = ctx.const_like(float(node.attr("extrapolation_value", 0.0)), result)
        filled = ops.add_v2(ops.zeros_like(result), fill)
        result = ops.select_v2(_along(ctx, outside, axis, rank), filled, result)
    return result


def _resize(
    node: OnnxNode,
    ctx: ConversionContext,
    scales: Tensor | None,
    sizes: Tensor | None,
    roi: Tensor | None,
    legacy_floor: bool,
    known: tuple[Any, Any, Any] | None = None,
) -> Result:
    """Resize x; ``known`` is (scales, sizes, roi) as numpy where known at import."""
    x = ctx.input(0)
    rank = rank_of(node, x)
    policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise node.fail(f"keep_aspect_ratio_policy={policy!r} is not supported")
    axes_attr = node.attr("axes")
    axes = list(range(rank)) if axes_attr is None else [a % rank for a in ints(axes_attr)]
    antialias = bool(int(node.attr("antialias", 0)))
    if antialias and node.attr("mode", "nearest") not in ("linear", "cubic"):
        raise node.fail(
            "antialias=1 widens the linear and cubic filters only; onnx's reference and "
            "onnxruntime refuse it with mode 'nearest': set antialias=0"
        )
    if antialias and known is not None:
        constant_weights = static_antialiased(node, ctx, x, axes, *known)
        if constant_weights is not None:
            return [constant_weights]
    zero = ctx.const(np.int32(0))
    common: Tensor | None = None
    if sizes is not None and policy != "stretch":
        # One scale for every axis: the smallest (not_larger) or largest of sizes / input.
        picked = [ctx.const(np.int64(axis)) for axis in axes]
        ratios = ops.real_div(
            ops.cast(sizes, DstT=F),
            ops.cast(ops.gather_v2(shape_of(ctx, x), ops.pack(picked), zero), DstT=F),
        )
        reduce_ = ops.min if policy == "not_larger" else ops.max
        common = reduce_(ratios, ctx.int32s([0]))
    out = x
    for position, axis in enumerate(axes):
        pick = ctx.const(np.int64(position))
        in_len = ops.cast(ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), zero), DstT=F)
        exact: Tensor | None = None
        if common is not None:
            scale = common
            rounded = ops.floor(ops.add_v2(ops.mul(in_len, scale), ctx.const(np.float32(0.5))))
            out_len_i = ops.cast(rounded, DstT=d.int64)
        elif sizes is not None:
            out_len_i = ops.cast(ops.gather_v2(sizes, pick, zero), DstT=d.int64)
            scale = ops.real_div(ops.cast(out_len_i, DstT=F), in_len)
        else:
            assert scales is not None
            scale = ops.cast(ops.gather_v2(scales, pick, zero), DstT=F)
            exact = ops.mul(in_len, scale)
            out_len_i = ops.cast(ops.floor(exact), DstT=d.int64)
        roi_pair = None
        if roi is not None:
            n = len(axes)
            start = ops.cast(ops.gather_v2(roi, pick, zero), DstT=F)
            end = ops.cast(ops.gather_v2(roi, ctx.const(np.int64(position + n)), zero), DstT=F)
            roi_pair = (start, end)
        out = _resize_axis(
            node,
            ctx,
            out,
            axis,
            rank,
            out_len_i,
            scale,
            roi_pair,
            legacy_floor,
            exact,
            antialias,
        )
    return [out]


def _present(ctx: ConversionContext, index: int) -> Tensor | None:
    if not ctx.has_input(index):
        return None
    t = ctx.input(index)
    dims = t.shape.as_list()
    return None if dims == [0] else t


@converter("Resize", 10, 10, attrs=("mode",))
def _resize_10(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _resize(node, ctx, ctx.input(1), None, None, legacy_floor=True)


@converter("Resize", 11, attrs=_ATTRS)
def _resize_11(node: OnnxNode, ctx: ConversionContext) -> Result:
    scales, sizes = _present(ctx, 2), _present(ctx, 3)
    if scales is None and sizes is None:
        raise node.fail("one of scales and sizes is required")
    transform = str(node.attr("coordinate_transformation_mode", "half_pixel"))
    roi = _present(ctx, 1) if transform == "tf_crop_and_resize" else None
    known = (
        None if sizes is not None else _static(ctx, 2, scales),
        _static(ctx, 3, sizes),
        _static(ctx, 1, roi),
    )
    scales = scales if sizes is None else None
    return _resize(node, ctx, scales, sizes, roi, legacy_floor=False, known=known)


def _static(ctx: ConversionContext, index: int, present: Tensor | None) -> Any:
    """Input ``index`` as numpy when it is present and known at import, else None."""
    return None if present is None else ctx.static_input(index)


@converter("Upsample", 7, 8, attrs=("mode", "scales"))
def _upsample_7(node: OnnxNode, ctx: ConversionContext) -> Result:
    """Upsample-7 (opsets 7 and 8): Upsample-9 with its scales an attribute, one per axis
    of x (the output's dimensions floor(input * scale))."""
    scales = list(node.attr("scales"))
    rank = rank_of(node, ctx.input(0))
    if len(scales) != rank:
        raise node.fail(f"scales has {len(scales)} values; x has rank {rank}")
    scales_t = ctx.const(np.asarray(scales, np.float32))
    return _resize(node, ctx, scales_t, None, None, legacy_floor=True)


@converter("Upsample", 9, 9, attrs=("mode",))
def _upsample(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _resize(node, ctx, ctx.input(1), None, None, legacy_floor=True)


__all__: list[str] = []
