"""Detection ONNX ops: NonMaxSuppression, MaxUnpool, and MaxPool's Indices output.

**NonMaxSuppression** runs kernloom's NonMaxSuppressionV3 (TensorFlow's) once per batch and
class: ONNX's greedy selection is TensorFlow's (by descending score, ties to the lower
index, a box dropped when its IoU with a selected one exceeds the threshold, the IoU 0
where a box has no area), and its corners, like TensorFlow's, may come in either order.
``center_point_box=1`` boxes ([x_center, y_center, width, height]) become corners
(centre -/+ half the size, in float32 as ONNX's reference computes them). When the batch
and class counts are known at import (and their product is at most ``_UNROLL_LIMIT``),
the per-class selections are unrolled; otherwise a ``kl.while_loop`` walks them.
Each selection becomes rows [batch, class, box] (int64), concatenated in ONNX's order.

Deliberate differences, where TensorFlow's op decides: an ``iou_threshold`` outside [0, 1]
is clamped into it (which selects the same boxes: an IoU never exceeds 1, and ONNX's
reference never suppresses disjoint boxes), a negative ``max_output_boxes_per_class``
selects nothing (as ONNX's reference), one above 2**31 - 1 is clamped to it; without a
``score_threshold``, boxes scoring -inf or NaN are never selected (ONNX's reference would
rank them last), and ``center_point_box=1`` boxes with a negative width or height count
their corners in either order (ONNX's reference takes them as given).

**MaxPool's Indices** come from MaxPoolWithArgmax over the input moved to NHWC and padded
with the dtype's lowest value (TensorFlow's op has no explicit padding): each argmax, a
flat NHWC position in the padded input, is taken apart and put together again as ONNX's
flat NCHW position in the unpadded input (``storage_order=1``: the spatial dimensions
column-major). Windows with several maxima give the first in row-major order, as ONNX's
reference. 2-D pooling only, without dilations, as MaxPoolWithArgmax. Where a window's
inputs all equal the dtype's lowest value (-inf for floats) and padding comes first in it,
its index is the padding's (ONNX's reference skips the padding); a window holding NaN
gives the index of its first NaN (the reference's comparisons skip a NaN after the
first element).

**MaxUnpool** scatters each value to its flat NCHW index in an output of zeros: indices
that repeat (overlapping windows chose the same input) carry the same value, so the
scatter is an UnsortedSegmentMax over the output's positions, and positions no index hits
are 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.control_flow import while_loop
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import ints, rank_of, shape_of, static_dims
from kernloom.shapes import TensorShape

__all__ = ["max_pool_indices"]

Result = Sequence[Tensor | None]

_UNROLL_LIMIT = 64
"""The most (batch, class) selections unrolled into the graph; more become a while_loop."""
_INT32_MAX = np.iinfo(np.int32).max


def _scalar(ctx: ConversionContext, t: Tensor) -> Tensor:
    """A scalar or one-element input as a scalar."""
    return ops.reshape(t, ctx.int64s([]))


def _corners(ctx: ConversionContext, boxes: Tensor) -> Tensor:
    """[..., 4] boxes as [x_center, y_center, width, height] -> [y1, x1, y2, x2]."""
    x, y, w, h = ops.unpack(boxes, num=4, axis=-1)
    half = ctx.const_like(0.5, boxes)
    half_w, half_h = ops.mul(w, half), ops.mul(h, half)
    return ops.pack(
        [ops.sub(y, half_h), ops.sub(x, half_w), ops.add_v2(y, half_h), ops.add_v2(x, half_w)],
        axis=-1,
    )


class _Selection:
    """The per-class arguments of NonMaxSuppressionV3, shared by every (batch, class)."""

    __slots__ = ("boxes", "floor", "iou", "limit", "scores")

    def __init__(self, node: OnnxNode, ctx: ConversionContext) -> None:
        boxes, scores = ctx.input(0), ctx.input(1)
        for t, what in ((boxes, "boxes"), (scores, "scores")):
            if t.dtype not in (d.float32, d.float16):
                raise node.fail(f"{what} of {t.dtype.name} are not supported (float32 is)")
            if t.shape.rank not in (3, None):
                raise node.fail(f"{what} must be 3-D, got shape {t.shape}")
        if int(node.attr("center_point_box", 0)) not in (0, 1):
            raise node.fail(f"center_point_box={node.attr('center_point_box')} must be 0 or 1")
        if int(node.attr("center_point_box", 0)):
            boxes = _corners(ctx, boxes)
        self.boxes = boxes
        self.scores = ops.cast(scores, DstT=boxes.dtype) if scores.dtype != boxes.dtype else scores
        most = ctx.optional(2)
        if most is None:
            self.limit: Tensor | None = None
        else:
            wide = ops.cast(_scalar(ctx, most), DstT=d.int64)
            clamped = ops.minimum(
                ops.maximum(wide, ctx.const(np.int64(0))), ctx.const(np.int64(_INT32_MAX))
            )
            self.limit = ops.cast(clamped, DstT=d.int32)
        iou = ctx.optional(3)
        iou = (
            ctx.const(np.float32(0)) if iou is None else ops.cast(_scalar(ctx, iou), DstT=d.float32)
        )
        self.iou = ops.minimum(ops.maximum(iou, ctx.const(np.float32(0))), ctx.const(np.float32(1)))
        floor = ctx.optional(4)
        self.floor = (
            ctx.const(np.float32(-np.inf))
            if floor is None
            else ops.cast(_scalar(ctx, floor), DstT=d.float32)
        )

    def rows(self, ctx: ConversionContext, batch: Tensor, klass: Tensor, limit: Tensor) -> Tensor:
        """The selection of one (batch, class) as rows [batch, class, box] (int64)."""
        zero = ctx.const(np.int32(0))
        boxes = ops.gather_v2(self.boxes, batch, zero)
        scores = ops.gather_nd(self.scores, ops.pack([batch, klass]))
        chosen = ops.non_max_suppression_v3(boxes, scores, limit, self.iou, self.floor)
        picked = ops.cast(chosen, DstT=d.int64)
        column = ops.ones_like(picked)
        return ops.pack([ops.mul(column, batch), ops.mul(column, klass), picked], axis=1)


def _unrolled(
    ctx: ConversionContext, sel: _Selection, limit: Tensor, batches: int, classes: int
) -> Tensor:
    rows = [
        sel.rows(ctx, ctx.const(np.int64(b)), ctx.const(np.int64(c)), limit)
        for b in range(batches)
        for c in range(classes)
    ]
    if not rows:
        return ctx.const(np.zeros((0, 3), np.int64))
    return rows[0] if len(rows) == 1 else ops.concat_v2(rows, ctx.const(np.int32(0)))


def _looped(ctx: ConversionContext, sel: _Selection, limit: Tensor) -> Tensor:
    """A while_loop over every (batch, class), its rows appended to an accumulator."""
    zero = ctx.const(np.int32(0))
    dims = ops.shape(sel.scores, out_type=d.int64)
    batches = ops.gather_v2(dims, ctx.const(np.int64(0)), zero)
    classes = ops.gather_v2(dims, ctx.const(np.int64(1)), zero)
    total = ops.mul(batches, classes)

    def keep_going(i: Tensor, acc: Tensor) -> Tensor:
        return ops.less(i, total)

    def step(i: Tensor, acc: Tensor) -> list[Tensor]:
        rows = sel.rows(ctx, ops.floor_div(i, classes), ops.floor_mod(i, classes), limit)
        # The axis built in the body: one from outside enters the loop, and a concat whose
        # axis is not a constant has no known dimension (the invariant (?, 3) needs them).
        grown = ops.concat_v2([acc, rows], ctx.const(np.int32(0)))
        return [ops.add_v2(i, ctx.const(np.int64(1))), grown]

    start = [ctx.const(np.int64(0)), ctx.const(np.zeros((0, 3), np.int64))]
    _, found = while_loop(
        keep_going, step, start, shape_invariants=[TensorShape([]), TensorShape([None, 3])]
    )
    return found


@converter("NonMaxSuppression", 10, attrs=("center_point_box",))
def _non_max_suppression(node: OnnxNode, ctx: ConversionContext) -> Result:
    sel = _Selection(node, ctx)
    if sel.limit is None:  # ONNX's default: no box per class
        return [ctx.const(np.zeros((0, 3), np.int64))]
    box_dims, score_dims = static_dims(sel.boxes), static_dims(sel.scores)
    if box_dims is not None and score_dims is not None and box_dims[0] != score_dims[0]:
        raise node.fail(f"boxes {box_dims} and scores {score_dims} must have the same batch size")
    known = sel.scores.shape.as_list() if sel.scores.shape.rank == 3 else [None, None, None]
    batches, classes = known[0], known[1]
    if batches is not None and classes is not None and batches * classes <= _UNROLL_LIMIT:
        return [_unrolled(ctx, sel, sel.limit, batches, classes)]
    return [_looped(ctx, sel, sel.limit)]


# -- MaxPool's Indices and MaxUnpool ---------------------------------------------------------


def _lowest(dtype: d.DType) -> object:
    np_dtype = np.dtype(dtype.numpy_dtype)
    return -np.inf if np_dtype.kind == "f" else np.iinfo(np_dtype).min


def _dim(ctx: ConversionContext, shape: Tensor, axis: int) -> Tensor:
    return ops.gather_v2(shape, ctx.const(np.int64(axis)), ctx.const(np.int32(0)))


def max_pool_indices(
    node: OnnxNode,
    ctx: ConversionContext,
    x4: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
) -> tuple[Tensor, Tensor]:
    """MaxPool's (Y, Indices) for a 4-D NCHW input whose windows, strides and pads (begin
    and end, ``ceil_mode``'s extra included) the MaxPool converter worked out."""
    order = int(node.attr("storage_order", 0))
    if order not in (0, 1):
        raise node.fail(f"storage_order={order} must be 0 (row major) or 1 (column major)")
    lowest = ctx.const_like(_lowest(x4.dtype), x4)
    nhwc = ops.transpose(x4, ctx.int32s([0, 2, 3, 1]))
    padding = np.array([[0, 0], [begin[0], end[0]], [begin[1], end[1]], [0, 0]], np.int32)
    padded = ops.pad_v2(nhwc, ctx.const(padding), lowest) if padding.any() else nhwc
    pooled, argmax = ops.max_pool_with_argmax(
        padded,
        ksize=[1, *kernel, 1],
        strides=[1, *strides, 1],
        padding="VALID",
        Targmax=d.int64,
        include_batch_in_index=True,
    )
    # argmax = ((b * Hp + y) * Wp + x) * C + c over the padded NHWC input.
    padded_shape = ops.shape(padded, out_type=d.int64)
    height_p, width_p, channels = (_dim(ctx, padded_shape, a) for a in (1, 2, 3))
    shape = ops.shape(x4, out_type=d.int64)
    height, width = _dim(ctx, shape, 2), _dim(ctx, shape, 3)
    channel = ops.floor_mod(argmax, channels)
    rest = ops.floor_div(argmax, channels)
    column = ops.sub(ops.floor_mod(rest, width_p), ctx.const(np.int64(begin[1])))
    rest = ops.floor_div(rest, width_p)
    row = ops.sub(ops.floor_mod(rest, height_p), ctx.const(np.int64(begin[0])))
    batch = ops.floor_div(rest, height_p)
    plane = ops.mul(ops.add_v2(ops.mul(batch, channels), channel), ops.mul(height, width))
    if order == 0:
        within = ops.add_v2(ops.mul(row, width), column)
    else:
        within = ops.add_v2(row, ops.mul(column, height))
    indices = ops.add_v2(plane, within)
    back = ctx.int32s([0, 3, 1, 2])
    return ops.transpose(pooled, back), ops.transpose(indices, back)


@converter("MaxUnpool", 9, attrs=("kernel_shape", "pads", "strides"))
def _max_unpool(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, where = ctx.input(0), ctx.input(1)
    rank = rank_of(node, x, "input X")
    kernel = ints(node.attr("kernel_shape"))
    n = len(kernel)
    if rank != n + 2:
        raise node.fail(f"kernel_shape {kernel} needs an input of rank {n + 2}, not {rank}")
    strides = ints(node.attr("strides", [1] * n))
    pads = ints(node.attr("pads", [0] * (2 * n)))
    if len(strides) != n or len(pads) != 2 * n:
        raise node.fail(f"strides needs {n} values and pads {2 * n} (kernel_shape has {n})")
    # The unpooled size: (in - 1) * stride - pads + kernel, per spatial dimension.
    dims = shape_of(ctx, x)
    spatial = ops.slice(dims, ctx.int64s([2]), ctx.int64s([n]))
    grown = ops.mul(ops.sub(spatial, ctx.int64s([1] * n)), ctx.int64s(strides))
    sizes = ops.add_v2(
        grown, ctx.int64s([k - a - b for k, a, b in zip(kernel, pads[:n], pads[n:], strict=True)])
    )
    inferred = ops.concat_v2(
        [ops.slice(dims, ctx.int64s([0]), ctx.int64s([2])), sizes], ctx.const(np.int32(0))
    )
    total = ops.prod(inferred, ctx.int32s([0]))
    flat = ops.reshape(where, ctx.int64s([-1]))
    flat = flat if flat.dtype == d.int64 else ops.cast(flat, DstT=d.int64)
    values = ops.reshape(x, ctx.int64s([-1]))
    # Repeated indices carry the same value (one input chosen by overlapping windows).
    scattered = ops.unsorted_segment_max(values, flat, total)
    hits = ops.unsorted_segment_sum(ops.ones_like(flat), flat, total)
    unpooled = ops.select_v2(
        ops.greater(hits, ctx.const(np.int64(0))), scattered, ops.zeros_like(scattered)
    )
    y = ops.reshape(unpooled, inferred)
    if not ctx.has_input(2):
        return [y]
    # output_shape: the unpooled values in its leading corner, zeros after them.
    wanted = ops.cast(ctx.input(2), DstT=d.int64)
    after = ops.sub(wanted, inferred)
    paddings = ops.pack([ops.zeros_like(after), after], axis=1)
    return [ops.pad(y, paddings)]
