"""ONNX's sampling ops -- GridSample, AffineGrid, RoiAlign, Col2Im -- composed of kernloom
gathers, arithmetic and segment sums.

* GridSample maps each grid point to input coordinates, then sums the taps of its
  interpolation kernel (1 for nearest, 2 per axis for linear, 4 per axis for cubic): each
  combination of per-axis taps is one GatherV2 over the flattened spatial axes. Padding
  follows onnx's reference: ``border`` and ``reflection`` first move a coordinate that
  lies outside the borders, then each tap index is clamped or reflected again; ``zeros``
  reads 0 for a tap outside the input. For cubic with ``border`` or ``reflection`` this
  deviates from PyTorch and onnxruntime, which move only the taps: a coordinate less
  than half a pixel beyond the border blends slightly differently. Coordinates are
  computed in float64 and rounded to float32 as the reference does, so that nearest's
  round half to even sees the same value; the blend is then float32 (float64 for float64
  input). Linear and cubic need a float input; nearest gathers any dtype.
* AffineGrid multiplies the homogeneous base grid by each theta (BatchMatMulV2, float64
  as the reference, then theta's dtype: onnx's reference always answers float32). An
  axis of one point with ``align_corners=1`` sits at 0, as in PyTorch's affine_grid.
* RoiAlign samples each bin on a regular grid whose size, for ``sampling_ratio=0``, is
  per region (ceil(roi size / output size)): the graph samples the largest grid of all
  regions, found at run time, and masks the samples a region does not have. ``max`` is
  the reference's (and onnxruntime's): the maximum over the samples of the largest of the
  four weighted corner values, not of the interpolated value.
* Col2Im sums each column element into its image position with UnsortedSegmentSum; the
  positions are computed in the graph, so ``image_shape`` and ``block_shape`` may be
  run-time inputs: only their length (the number of image axes) must be known at import.
  Where they are known then, the blocks' fit is checked at import too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.dtypes import DType
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import ints, pairs, rank_of, shape_of, static_dims

Result = Sequence[Tensor | None]
F32, F64, I64 = d.float32, d.float64, d.int64

_FLOATS = (d.float16, d.float32, d.float64)
_CUBIC_A = -0.75
"""The Keys kernel's coefficient GridSample uses (PyTorch's)."""


# -- shared pieces -------------------------------------------------------------------------


def _dims(ctx: ConversionContext, x: Tensor, first: int, last: int) -> Tensor:
    """x's dimensions [first, last) as an int64 vector."""
    shape = shape_of(ctx, x)
    return ops.strided_slice(shape, ctx.int64s([first]), ctx.int64s([last]), ctx.int64s([1]))


def _dim(ctx: ConversionContext, x: Tensor, axis: int) -> Tensor:
    """x's dimension ``axis`` as an int64 scalar."""
    return ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), ctx.const(np.int32(0)))


def _last(ctx: ConversionContext, x: Tensor, index: int) -> Tensor:
    """x[..., index]."""
    return ops.gather_v2(x, ctx.const(np.int64(index)), ctx.const(np.int32(-1)))


def _sum(terms: Sequence[Tensor]) -> Tensor:
    total = terms[0]
    for term in terms[1:]:
        total = ops.add_v2(total, term)
    return total


def _product(terms: Sequence[Tensor]) -> Tensor:
    total = terms[0]
    for term in terms[1:]:
        total = ops.mul(total, term)
    return total


def _work_dtype(x: Tensor) -> DType:
    return F64 if x.dtype == F64 else F32


# -- GridSample ----------------------------------------------------------------------------


class _Tap:
    """One tap of one axis: its index (int64), its weight and whether it is inside."""

    __slots__ = ("index", "inside", "weight")

    def __init__(self, index: Tensor, weight: Tensor | None, inside: Tensor | None) -> None:
        self.index = index
        self.weight = weight
        """None: 1 (nearest)."""
        self.inside = inside
        """None: always inside (border, reflection)."""


class _GridAxis:
    """One spatial axis of GridSample's input: its length and its padding rules."""

    def __init__(
        self, ctx: ConversionContext, length: Tensor, align_corners: bool, padding: str
    ) -> None:
        self.ctx = ctx
        self.length = length
        self.length_f = ops.cast(length, DstT=F64)
        self.align_corners = align_corners
        self.padding = padding
        if align_corners:
            self.low, self.high = self.f(0.0), ops.sub(self.length_f, self.f(1.0))
        else:
            self.low, self.high = self.f(-0.5), ops.sub(self.length_f, self.f(0.5))

    def f(self, value: float) -> Tensor:
        return self.ctx.const(np.float64(value))

    def denormalized(self, n: Tensor) -> Tensor:
        """A normalized coordinate in [-1, 1] as an input coordinate (float64)."""
        one, half = self.f(1.0), self.f(0.5)
        if self.align_corners:
            return ops.mul(ops.mul(ops.add_v2(n, one), half), ops.sub(self.length_f, one))
        return ops.mul(ops.sub(ops.mul(ops.add_v2(n, one), self.length_f), one), half)

    def reflected(self, x: Tensor) -> Tensor:
        """x folded back into [low, high] by reflecting at the borders (float64)."""
        span = ops.sub(self.high, self.low)
        period = ops.mul(span, self.f(2.0))
        safe = ops.select_v2(ops.greater(period, self.f(0.0)), period, self.f(1.0))
        m = ops.floor_mod(ops.sub(x, self.low), safe)
        folded = ops.select_v2(ops.less_equal(m, span), m, ops.sub(period, m))
        inside = ops.greater(period, self.f(0.0))
        return ops.add_v2(self.low, ops.select_v2(inside, folded, ops.zeros_like(folded)))

    def moved(self, x: Tensor) -> Tensor:
        """The coordinate after the padding mode moved it back when it lies outside."""
        if self.padding == "zeros":
            return x
        outside = ops.logical_or(ops.less(x, self.low), ops.greater(x, self.high))
        if self.padding == "border":
            last = ops.sub(self.length_f, self.f(1.0))
            inward = ops.minimum(ops.maximum(x, self.f(0.0)), last)
        else:
            inward = self.reflected(x)
        return ops.select_v2(outside, inward, x)

    def tap(self, index: Tensor, weight: Tensor | None) -> _Tap:
        """The tap at integer ``index`` (int64): padded by this axis' padding mode."""
        ctx = self.ctx
        zero, last = ctx.const(np.int64(0)), ops.sub(self.length, ctx.const(np.int64(1)))
        if self.padding == "reflection":
            folded = self.reflected(ops.cast(index, DstT=F64))
            index = ops.cast(ops.round(folded), DstT=I64)
        inside = None
        if self.padding == "zeros":
            inside = ops.logical_and(ops.greater_equal(index, zero), ops.less(index, self.length))
        return _Tap(ops.minimum(ops.maximum(index, zero), last), weight, inside)


def _cubic_weights(ctx: ConversionContext, t: Tensor) -> list[Tensor]:
    """Keys' cubic kernel (a = -0.75) at the distances of the 4 taps from t in [0, 1)."""
    a = _CUBIC_A

    def c(v: float) -> Tensor:
        return ctx.const_like(v, t)

    def near(s: Tensor) -> Tensor:
        return ops.add_v2(ops.mul(ops.sub(ops.mul(c(a + 2), s), c(a + 3)), ops.square(s)), c(1))

    def far(s: Tensor) -> Tensor:
        inner = ops.add_v2(ops.mul(ops.sub(ops.mul(c(a), s), c(5 * a)), s), c(8 * a))
        return ops.sub(ops.mul(inner, s), c(4 * a))

    one_minus = ops.sub(c(1), t)
    return [far(ops.add_v2(t, c(1))), near(t), near(one_minus), far(ops.add_v2(one_minus, c(1)))]


def _axis_taps(ctx: ConversionContext, axis: _GridAxis, x: Tensor, mode: str) -> list[_Tap]:
    """The taps of one axis at float32/64 coordinate x (already moved by the padding)."""
    if mode == "nearest":
        return [axis.tap(ops.cast(ops.rint(x), DstT=I64), None)]
    base = ops.floor(x)
    t = ops.sub(x, base)
    i0 = ops.cast(base, DstT=I64)
    if mode == "linear":
        one = ctx.const_like(1.0, t)
        weights = [ops.sub(one, t), t]
        offsets = [0, 1]
    else:
        weights = _cubic_weights(ctx, t)
        offsets = [-1, 0, 1, 2]
    return [
        axis.tap(ops.add_v2(i0, ctx.const(np.int64(k))), w)
        for k, w in zip(offsets, weights, strict=True)
    ]


_GRID_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest"}
_GRID_MODES |= {"bicubic": "cubic", "cubic": "cubic"}


def _grid_sample(node: OnnxNode, ctx: ConversionContext, modes: Sequence[str]) -> Result:
    x, grid = ctx.input(0), ctx.input(1)
    rank = rank_of(node, x, "input X")
    spatial = rank - 2
    if spatial < 1:
        raise node.fail(f"X must have rank 3 or more (N, C, spatial...), not {rank}")
    if rank_of(node, grid, "grid") != rank:
        raise node.fail(f"grid must have the rank of X ({rank}), not {grid.shape.rank}")
    mode_name = str(node.attr("mode", modes[0]))
    if mode_name not in modes:
        raise node.fail(f"mode={mode_name!r} is not supported (this opset's are {list(modes)})")
    mode = _GRID_MODES[mode_name]
    padding = str(node.attr("padding_mode", "zeros"))
    if padding not in ("zeros", "border", "reflection"):
        raise node.fail(
            f"padding_mode={padding!r} is not supported (zeros, border, reflection are)"
        )
    if mode != "nearest" and x.dtype not in _FLOATS:
        raise node.fail(f"mode={mode_name!r} needs a float input X, not {x.dtype.name}")
    align_corners = bool(int(node.attr("align_corners", 0)))
    work = _work_dtype(x)

    # X as [N, S, C]: the spatial axes flattened, channels last, one row per position.
    perm = [0, *range(2, rank), 1]
    n_c = _dims(ctx, x, 0, 2)
    lengths = [_dim(ctx, x, 2 + i) for i in range(spatial)]
    rows = ops.reshape(
        ops.transpose(x, ctx.int32s(perm)),
        ops.concat_v2(
            [_dims(ctx, x, 0, 1), ctx.int64s([-1]), _dims(ctx, x, 1, 2)],
            ctx.const(np.int32(0)),
        ),
    )
    if mode != "nearest" and x.dtype != work:
        rows = ops.cast(rows, DstT=work)
    # The grid as [N, P, spatial]; its last axis lists the coordinates innermost axis first.
    points = ops.reshape(
        ops.cast(grid, DstT=F64),
        ops.concat_v2([_dims(ctx, grid, 0, 1), ctx.int64s([-1, spatial])], ctx.const(np.int32(0))),
    )
    per_axis: list[list[_Tap]] = []
    for i in range(spatial):
        axis = _GridAxis(ctx, lengths[i], align_corners, padding)
        coord = axis.denormalized(_last(ctx, points, spatial - 1 - i))
        coord = ops.cast(coord, DstT=F32)  # as the reference, which keeps them as float32
        if mode == "nearest":
            coord = ops.rint(coord)
        coord = ops.cast(axis.moved(ops.cast(coord, DstT=F64)), DstT=work)
        per_axis.append(_axis_taps(ctx, axis, coord, mode))

    strides: list[Tensor] = []
    stride = ctx.const(np.int64(1))
    for length in reversed(lengths):
        strides.insert(0, stride)
        stride = ops.mul(stride, length)
    terms: list[Tensor] = []
    for combo in itertools.product(*per_axis):
        flat = _sum([ops.mul(tap.index, s) for tap, s in zip(combo, strides, strict=True)])
        values = ops.gather_v2(rows, flat, ctx.const(np.int32(1)), batch_dims=1)
        insides = [tap.inside for tap in combo if tap.inside is not None]
        if insides:
            inside = ops.expand_dims(
                insides[0] if len(insides) == 1 else _product_bool(insides),
                ctx.const(np.int32(-1)),
            )
            values = ops.select_v2(inside, values, ops.zeros_like(values))
        weights = [tap.weight for tap in combo if tap.weight is not None]
        if weights:
            values = ops.mul(values, ops.expand_dims(_product(weights), ctx.const(np.int32(-1))))
        terms.append(values)
    out = _sum(terms)  # [N, P, C]
    if out.dtype != x.dtype:
        out = ops.cast(out, DstT=x.dtype)
    out_shape = ops.concat_v2([n_c, _dims(ctx, grid, 1, rank - 1)], ctx.const(np.int32(0)))
    return [ops.reshape(ops.transpose(out, ctx.int32s([0, 2, 1])), out_shape)]


def _product_bool(terms: Sequence[Tensor]) -> Tensor:
    total = terms[0]
    for term in terms[1:]:
        total = ops.logical_and(total, term)
    return total


@converter("GridSample", 16, 16, attrs=("align_corners", "mode", "padding_mode"))
def _grid_sample_16(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _grid_sample(node, ctx, ("bilinear", "nearest", "bicubic"))


@converter("GridSample", 20, attrs=("align_corners", "mode", "padding_mode"))
def _grid_sample_20(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _grid_sample(node, ctx, ("linear", "nearest", "cubic"))


# -- AffineGrid ----------------------------------------------------------------------------


def _base_coordinates(ctx: ConversionContext, length: Tensor, align_corners: bool) -> Tensor:
    """The normalized coordinates of ``length`` points along one axis (float64)."""
    steps = ops.cast(ops.range(ctx.const(np.int64(0)), length, ctx.const(np.int64(1))), DstT=F64)
    length_f = ops.cast(length, DstT=F64)
    one, two = ctx.const(np.float64(1.0)), ctx.const(np.float64(2.0))
    if align_corners:
        # One point has no corners to align to: PyTorch's affine_grid puts it at 0 (onnx's
        # reference divides by zero, onnxruntime answers 1).
        step = ops.div_no_nan(two, ops.sub(length_f, one))
        spread = ops.sub(ops.mul(steps, step), one)
        return ops.select_v2(ops.greater(length_f, one), spread, ops.zeros_like(spread))
    step = ops.real_div(two, length_f)
    start = ops.sub(ops.mul(step, ctx.const(np.float64(0.5))), one)
    return ops.add_v2(start, ops.mul(steps, step))


@converter("AffineGrid", 20, attrs=("align_corners",))
def _affine_grid(node: OnnxNode, ctx: ConversionContext) -> Result:
    theta, size = ctx.input(0), ctx.input(1)
    if theta.dtype not in _FLOATS:
        raise node.fail(f"theta must be a float tensor, not {theta.dtype.name}")
    size_dims = static_dims(size)
    if size_dims is None or len(size_dims) != 1 or size_dims[0] not in (4, 5):
        raise node.fail(
            "size must be a vector of 4 (N, C, H, W) or 5 (N, C, D, H, W) values whose "
            f"length is known at import, not of shape {size.shape}"
        )
    spatial = size_dims[0] - 2
    align_corners = bool(int(node.attr("align_corners", 0)))
    static = ctx.static_input(1)
    zero = ctx.const(np.int32(0))
    if static is not None:
        lengths = [ctx.const(np.int64(v)) for v in ints(static)[2:]]
    else:
        sizes = ops.cast(size, DstT=I64)
        lengths = [ops.gather_v2(sizes, ctx.const(np.int64(2 + i)), zero) for i in range(spatial)]
    # One column per axis, x (innermost) first, then 1: the homogeneous base grid [S, k+1].
    axes = [_base_coordinates(ctx, length, align_corners) for length in lengths]
    columns: list[Tensor] = []
    for i in reversed(range(spatial)):
        shape = [1] * spatial
        shape[i] = -1
        placed = ops.reshape(axes[i], ctx.int64s(shape))
        columns.append(ops.broadcast_to(placed, ops.pack(lengths)))
    columns.append(ops.ones_like(columns[0]))
    base = ops.reshape(ops.pack(columns, axis=-1), ctx.int64s([1, -1, spatial + 1]))
    grid = ops.batch_mat_mul_v2(base, ops.cast(theta, DstT=F64), adj_y=True)  # [N, S, k]
    n = ops.reshape(_dim(ctx, theta, 0), ctx.int64s([1]))
    out_shape = ops.concat_v2([n, ops.pack(lengths), ctx.int64s([spatial])], ctx.const(np.int32(0)))
    out = ops.reshape(grid, out_shape)
    return [out if theta.dtype == F64 else ops.cast(out, DstT=theta.dtype)]


# -- RoiAlign ------------------------------------------------------------------------------


class _RoiAxis:
    """One axis (height or width) of every region: its sample positions and weights."""

    def __init__(
        self,
        ctx: ConversionContext,
        start: Tensor,
        end: Tensor,
        pooled: int,
        sampling_ratio: int,
        half_pixel: bool,
        length: Tensor,
    ) -> None:
        def c(v: float) -> Tensor:
            return ctx.const_like(v, start)

        extent = ops.sub(end, start)
        if not half_pixel:
            extent = ops.maximum(extent, c(1.0))
        bin_size = ops.real_div(extent, c(float(pooled)))
        if sampling_ratio > 0:
            per_roi = ops.fill(ops.shape(start, out_type=I64), ctx.const(np.int64(sampling_ratio)))
            most = ctx.const(np.int64(sampling_ratio))
        else:
            per_roi = ops.cast(ops.ceil(ops.real_div(extent, c(float(pooled)))), DstT=I64)
            most = ops.maximum(ops.max(per_roi, ctx.int32s([0])), ctx.const(np.int64(1)))
        self.count = per_roi
        """Samples per bin along this axis, per region [R]."""
        count_f = ops.cast(per_roi, DstT=start.dtype)
        step = ops.real_div(bin_size, ops.maximum(count_f, c(1.0)))
        # Positions [R, pooled, G]: start + p * bin + (s + 0.5) * bin / count.
        p = ops.reshape(
            ops.cast(
                ops.range(
                    ctx.const(np.int64(0)), ctx.const(np.int64(pooled)), ctx.const(np.int64(1))
                ),
                DstT=start.dtype,
            ),
            ctx.int64s([1, -1, 1]),
        )
        s_i = ops.range(ctx.const(np.int64(0)), most, ctx.const(np.int64(1)))
        s = ops.reshape(ops.cast(s_i, DstT=start.dtype), ctx.int64s([1, 1, -1]))

        def col(v: Tensor) -> Tensor:
            return ops.reshape(v, ctx.int64s([-1, 1, 1]))

        pos = ops.add_v2(
            ops.add_v2(col(start), ops.mul(p, col(bin_size))),
            ops.mul(ops.add_v2(s, c(0.5)), col(step)),
        )
        present = ops.less(ops.reshape(s_i, ctx.int64s([1, 1, -1])), col(per_roi))
        length_f = ops.cast(length, DstT=start.dtype)
        valid = ops.logical_and(
            present,
            ops.logical_and(ops.greater_equal(pos, c(-1.0)), ops.less_equal(pos, length_f)),
        )
        y = ops.maximum(pos, c(0.0))
        low_i = ops.cast(ops.floor(y), DstT=I64)
        last = ops.sub(length, ctx.const(np.int64(1)))
        at_end = ops.greater_equal(low_i, last)
        low_i = ops.select_v2(at_end, ops.add_v2(ops.zeros_like(low_i), last), low_i)
        high_i = ops.select_v2(at_end, low_i, ops.add_v2(low_i, ctx.const(np.int64(1))))
        y = ops.select_v2(at_end, ops.cast(low_i, DstT=start.dtype), y)
        frac = ops.sub(y, ops.cast(low_i, DstT=start.dtype))
        zero = ops.zeros_like(frac)
        self.present = present
        """Whether each sample slot is one the region has [R, 1, G]."""
        self.taps = [
            (low_i, ops.select_v2(valid, ops.sub(c(1.0), frac), zero)),
            (high_i, ops.select_v2(valid, frac, zero)),
        ]
        """(index, weight) of the low and high neighbour [R, pooled, G]."""


def _roi_align(node: OnnxNode, ctx: ConversionContext, half_pixel: bool) -> Result:
    x, rois, batch = ctx.input(0), ctx.input(1), ctx.input(2)
    if rank_of(node, x, "input X") != 4:
        raise node.fail(f"X must have rank 4 (N, C, H, W), not {x.shape.rank}")
    if x.dtype not in _FLOATS:
        raise node.fail(f"X must be a float tensor, not {x.dtype.name}")
    mode = str(node.attr("mode", "avg"))
    if mode not in ("avg", "max"):
        raise node.fail(f"mode={mode!r} is not supported (avg, max are)")
    out_h, out_w = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    if out_h < 1 or out_w < 1:
        raise node.fail(f"output_height and output_width must be positive, not {out_h}, {out_w}")
    ratio = int(node.attr("sampling_ratio", 0))
    if ratio < 0:
        raise node.fail(f"sampling_ratio must be 0 (adaptive) or positive, not {ratio}")
    scale = float(node.attr("spatial_scale", 1.0))
    work = _work_dtype(x)

    boxes = ops.cast(rois, DstT=work)
    offset = 0.5 if half_pixel else 0.0

    def corner(k: int) -> Tensor:
        v = ops.mul(_last(ctx, boxes, k), ctx.const_like(scale, boxes))
        return ops.sub(v, ctx.const_like(offset, boxes))

    height, width = _dim(ctx, x, 2), _dim(ctx, x, 3)
    ys = _RoiAxis(ctx, corner(1), corner(3), out_h, ratio, half_pixel, height)
    xs = _RoiAxis(ctx, corner(0), corner(2), out_w, ratio, half_pixel, width)

    # X as rows [N * H * W, C]; a sample's row is (b * H + y) * W + x.
    pixels = ops.reshape(
        ops.transpose(ops.cast(x, DstT=work) if x.dtype != work else x, ctx.int32s([0, 2, 3, 1])),
        ops.concat_v2([ctx.int64s([-1]), _dims(ctx, x, 1, 2)], ctx.const(np.int32(0))),
    )
    b = ops.reshape(ops.cast(batch, DstT=I64), ctx.int64s([-1, 1, 1, 1, 1]))

    def as_y(v: Tensor) -> Tensor:  # [R, PH, GH] -> [R, PH, GH, 1, 1]
        return ops.expand_dims(ops.expand_dims(v, ctx.const(np.int32(-1))), ctx.const(np.int32(-1)))

    def as_x(v: Tensor) -> Tensor:  # [R, PW, GW] -> [R, 1, 1, PW, GW]
        return ops.expand_dims(ops.expand_dims(v, ctx.const(np.int32(1))), ctx.const(np.int32(1)))

    corners: list[Tensor] = []
    for (yi, wy), (xi, wx) in itertools.product(ys.taps, xs.taps):
        row = ops.add_v2(ops.mul(ops.add_v2(ops.mul(b, height), as_y(yi)), width), as_x(xi))
        values = ops.gather_v2(pixels, row, ctx.const(np.int32(0)))  # [R, PH, GH, PW, GW, C]
        weight = ops.mul(as_y(wy), as_x(wx))
        corners.append(ops.mul(values, ops.expand_dims(weight, ctx.const(np.int32(-1)))))
    samples = ctx.int32s([2, 4])
    if mode == "avg":
        total = ops.sum(_sum(corners), samples)  # [R, PH, PW, C]
        count = ops.maximum(ops.mul(ys.count, xs.count), ctx.const(np.int64(1)))
        count_f = ops.reshape(ops.cast(count, DstT=work), ctx.int64s([-1, 1, 1, 1]))
        pooled = ops.real_div(total, count_f)
    else:
        best = corners[0]
        for other in corners[1:]:
            best = ops.maximum(best, other)
        # A region with no samples along an axis (zero extent, sampling_ratio 0) pools to 0.
        present = ops.expand_dims(
            ops.logical_and(as_y(ys.present), as_x(xs.present)), ctx.const(np.int32(-1))
        )
        lowest = ops.add_v2(ops.zeros_like(best), ctx.const_like(-np.inf, best))
        masked = ops.select_v2(present, best, lowest)
        pooled = ops.max(masked, samples)
        some = ops.reshape(
            ops.greater(ops.mul(ys.count, xs.count), ctx.const(np.int64(0))),
            ctx.int64s([-1, 1, 1, 1]),
        )
        pooled = ops.select_v2(some, pooled, ops.zeros_like(pooled))
    out = ops.transpose(pooled, ctx.int32s([0, 3, 1, 2]))
    return [out if out.dtype == x.dtype else ops.cast(out, DstT=x.dtype)]


_ROI_ATTRS = ("mode", "output_height", "output_width", "sampling_ratio", "spatial_scale")


@converter("RoiAlign", 10, 10, attrs=_ROI_ATTRS)
def _roi_align_10(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _roi_align(node, ctx, half_pixel=False)


@converter("RoiAlign", 16, attrs=(*_ROI_ATTRS, "coordinate_transformation_mode"))
def _roi_align_16(node: OnnxNode, ctx: ConversionContext) -> Result:
    transform = str(node.attr("coordinate_transformation_mode", "half_pixel"))
    if transform not in ("half_pixel", "output_half_pixel"):
        raise node.fail(
            f"coordinate_transformation_mode={transform!r} is not supported "
            "(half_pixel, output_half_pixel are)"
        )
    return _roi_align(node, ctx, half_pixel=transform == "half_pixel")


# -- Col2Im --------------------------------------------------------------------------------


def _unravel(ctx: ConversionContext, flat: Tensor, dims: list[Tensor]) -> list[Tensor]:
    """The row-major multi-index of each of ``flat`` over ``dims`` (int64 scalars)."""
    out: list[Tensor] = []
    inner = ctx.const(np.int64(1))
    for dim in reversed(dims):
        out.insert(0, ops.floor_mod(ops.floor_div(flat, inner), dim))
        inner = ops.mul(inner, dim)
    return out


def _col2im_check(
    node: OnnxNode,
    ctx: ConversionContext,
    data: Tensor,
    dilations: list[int],
    pads: list[list[int]],
    strides: list[int],
) -> None:
    """The import-time checks of what is known then: blocks that fit, matching sizes."""
    image, block = ctx.static_input(1), ctx.static_input(2)
    if image is None or block is None:
        return
    image_l, block_l = ints(image), ints(block)
    if min(image_l) < 1 or min(block_l) < 1:
        raise node.fail(f"image_shape {image_l} and block_shape {block_l} must be positive")
    places = 1
    for i, size in enumerate(image_l):
        span = dilations[i] * (block_l[i] - 1) + 1
        count = (size + pads[i][0] + pads[i][1] - span) // strides[i] + 1
        if count < 1:
            raise node.fail(
                f"the blocks do not fit the image along axis {i}: image {size}, block "
                f"{block_l[i]}, dilation {dilations[i]}, pads {pads[i]}"
            )
        places *= count
    size = int(np.prod(block_l, dtype=np.int64))
    dims = static_dims(data)
    if dims is not None and (dims[1] % size or dims[2] != places):
        raise node.fail(
            f"input of shape {dims} does not match: dimension 1 must be a multiple of "
            f"prod(block_shape) = {size} and dimension 2 the number of blocks, {places}"
        )


@converter("Col2Im", 18, attrs=("dilations", "pads", "strides"))
def _col2im(node: OnnxNode, ctx: ConversionContext) -> Result:
    data, image_t, block_t = ctx.input(0), ctx.input(1), ctx.input(2)
    if rank_of(node, data) != 3:
        raise node.fail(
            f"input must have rank 3 (N, C * prod(block_shape), L), not {data.shape.rank}"
        )
    lengths = [static_dims(image_t), static_dims(block_t)]
    if lengths[0] is None or lengths[1] is None or len(lengths[0]) != 1 or lengths[0] != lengths[1]:
        raise node.fail(
            "image_shape and block_shape must be vectors of one length known at import, not "
            f"of shapes {image_t.shape} and {block_t.shape}"
        )
    k = lengths[0][0]
    dilations = ints(node.attr("dilations", [1] * k))
    strides = ints(node.attr("strides", [1] * k))
    pad_list = ints(node.attr("pads", [0] * 2 * k))
    if len(dilations) != k or len(strides) != k or len(pad_list) != 2 * k:
        raise node.fail(
            f"dilations and strides need {k} values and pads {2 * k} (one per image axis)"
        )
    pads = pairs(pad_list)
    _col2im_check(node, ctx, data, dilations, pads, strides)

    def c(v: int) -> Tensor:
        return ctx.const(np.int64(v))

    zero, one = c(0), c(1)
    image_v, block_v = ops.cast(image_t, DstT=I64), ops.cast(block_t, DstT=I64)
    axis0 = ctx.const(np.int32(0))
    image = [ops.gather_v2(image_v, c(i), axis0) for i in range(k)]
    block = [ops.gather_v2(block_v, c(i), axis0) for i in range(k)]
    places = []
    for i in range(k):
        span = ops.add_v2(ops.mul(c(dilations[i]), ops.sub(block[i], one)), one)
        room = ops.sub(ops.add_v2(image[i], c(pads[i][0] + pads[i][1])), span)
        places.append(ops.add_v2(ops.floor_div(room, c(strides[i])), one))
    size, count, total = _product(block), _product(places), _product(image)
    # Each column element (offset o in the block, block b): image position b*s - p + o*d.
    offsets = _unravel(ctx, ops.reshape(ops.range(zero, size, one), ctx.int64s([-1, 1])), block)
    spots = _unravel(ctx, ops.reshape(ops.range(zero, count, one), ctx.int64s([1, -1])), places)
    flat: Tensor | None = None
    inside: Tensor | None = None
    for i in range(k):
        start = ops.sub(ops.mul(spots[i], c(strides[i])), c(pads[i][0]))
        at = ops.add_v2(start, ops.mul(offsets[i], c(dilations[i])))  # [K, L]
        ok = ops.logical_and(ops.greater_equal(at, zero), ops.less(at, image[i]))
        inside = ok if inside is None else ops.logical_and(inside, ok)
        flat = at if flat is None else ops.add_v2(ops.mul(flat, image[i]), at)
    assert flat is not None and inside is not None
    # A column element in the padding goes to segment ``total``, which is cut off.
    targets = ops.reshape(
        ops.select_v2(inside, flat, ops.add_v2(ops.zeros_like(flat), total)), ctx.int64s([-1])
    )
    n = _dims(ctx, data, 0, 1)
    channels = ops.floor_div(_dims(ctx, data, 1, 2), ops.reshape(size, ctx.int64s([1])))
    # [N, C*K, L] -> [K*L, N, C]: one segment row per column element.
    split = ops.reshape(data, ops.concat_v2([n, channels, ctx.int64s([-1])], axis0))
    rows = ops.transpose(split, ctx.int32s([2, 0, 1]))
    summed = ops.unsorted_segment_sum(rows, targets, ops.add_v2(total, one))
    kept = ops.strided_slice(
        summed, ctx.int64s([0]), ops.reshape(total, ctx.int64s([1])), ctx.int64s([1])
    )
    out_shape = ops.concat_v2([n, channels, image_v], axis0)
    return [ops.reshape(ops.transpose(kept, ctx.int32s([1, 2, 0])), out_shape)]


__all__: list[str] = []
