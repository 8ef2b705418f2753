"""Image ops: resizing, cropping, non-max suppression and space/depth rearrangement
(TensorFlow's image_ops and array_ops).

dtypes: ResizeBilinear, ResizeBicubic, ResizeNearestNeighbor and CropAndResize take the
real types TensorFlow lists
(int8, uint8, int16, uint16, int32, int64, float16, float32, float64; no bfloat16, which
numpy cannot hold); SpaceToDepth and DepthToSpace take every type; NonMaxSuppressionV3
takes float16 and float32.

Besides the OpDefs and shape functions, this module holds the op's run-time rules, written
once for every backend's kernels (re-exported by ``kernloom.plugin``): the checks of
``size`` and the image shape, and TensorFlow's coordinate transforms, which decide which
source pixels an output pixel reads and with which weights. They are computed on the host
in float32, as TensorFlow's CPU kernels compute them, so every backend gathers the same
pixels.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, Protocol

import numpy as np

from kernloom.dtypes import float16, float32
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext
from kernloom.shapes import Dim, TensorShape

__all__ = [
    "NMS_HOST_MEMORY",
    "NMS_TYPES",
    "CropTaps",
    "bicubic_weights",
    "bilinear_weights",
    "check_crop_boxes",
    "crop_and_resize_shape",
    "crop_taps",
    "define",
    "depth_to_space_shape",
    "nearest_indices",
    "non_max_suppression",
    "resize_output_shape",
    "space_to_depth_shape",
]

RESIZE_TYPES = "{int8, uint8, int16, uint16, int32, int64, float16, float32, float64}"
NMS_TYPES: Final = (float16, float32)
"""NonMaxSuppressionV3's T and T_threshold (TensorFlow's), for the kernels' constraints."""
NMS_HOST_MEMORY: Final = (
    "boxes",
    "scores",
    "max_output_size",
    "iou_threshold",
    "score_threshold",
    "selected_indices",
)
"""Every argument of NonMaxSuppressionV3: a device plugin's kernel runs the shared greedy
selection (``non_max_suppression``) on the host, as TensorFlow's GPU kernel synchronises
anyway, so it keeps them all in host memory."""
Array = np.ndarray[Any, Any]


class Fails(Protocol):
    """What the rules need of a context: an error naming the node (shape inference at
    graph-building time, a kernel's context at run time)."""

    def fail(self, message: str) -> Exception: ...


# -- the rules, shared by the shape functions and every backend's kernels ----------------------


def _check_resize_attrs(ctx: Fails, align_corners: bool, half_pixel_centers: bool) -> None:
    if align_corners and half_pixel_centers:
        raise ctx.fail(
            "half_pixel_centers=True needs align_corners=False (TensorFlow allows only one)"
        )


def _resize_size(ctx: Fails, size: Any) -> tuple[int, int]:
    value = np.asarray(size)
    if value.shape != (2,):
        raise ctx.fail(
            f"size must be a vector of 2 elements (new_height, new_width), got shape "
            f"{list(value.shape)}"
        )
    height, width = (int(v) for v in value)
    if height <= 0 or width <= 0:
        raise ctx.fail(f"size must be positive, got [{height}, {width}]")
    return height, width


def resize_output_shape(
    ctx: Fails,
    images: Sequence[int],
    size: Any,
    align_corners: bool,
    half_pixel_centers: bool,
) -> tuple[int, int, int, int]:
    """The output shape of a resize of ``images`` (NHWC) to ``size``, after TensorFlow's
    checks (ImageResizerState): a 4-D image of non-zero height, width and channels, a
    positive 2-element size, and not both coordinate modes."""
    _check_resize_attrs(ctx, align_corners, half_pixel_centers)
    if len(images) != 4:
        raise ctx.fail(f"images must be 4-D [batch, height, width, channels], got {list(images)}")
    batch, in_height, in_width, channels = (int(d) for d in images)
    if in_height <= 0 or in_width <= 0:
        raise ctx.fail(f"input image must be of non-zero size, got shape {list(images)}")
    if channels <= 0:
        raise ctx.fail(f"image must have at least one channel, got shape {list(images)}")
    height, width = _resize_size(ctx, size)
    return batch, height, width, channels


def resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    """TensorFlow's CalculateResizeScale, in float32."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _round_half_away(values: Array) -> Array:
    """C's roundf: halves away from zero (numpy's round goes to even)."""
    whole: Array = np.trunc(values)
    away: Array = np.where(np.abs(values - whole) >= 0.5, np.sign(values), 0)
    rounded: Array = whole + away.astype(values.dtype)
    return rounded


def nearest_indices(
    in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool
) -> Array:
    """For each output row (or column), the source row ResizeNearestNeighbor copies:
    ``floor(x * scale)`` (``roundf`` with align_corners, ``(x + 0.5) * scale`` with half-pixel
    centres), clamped to the image, all in float32 as TensorFlow computes it."""
    scale = resize_scale(in_size, out_size, align_corners)
    x = np.arange(out_size, dtype=np.float32)
    source = (x + np.float32(0.5)) * scale if half_pixel_centers else x * scale
    rounded = _round_half_away(source) if align_corners else np.floor(source)
    index = np.minimum(rounded.astype(np.int64), in_size - 1)
    return np.maximum(index, 0) if half_pixel_centers else index


def bilinear_weights(
    in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool
) -> tuple[Array, Array, Array]:
    """For each output row (or column): the lower and upper source rows and the float32
    weight of the upper one (TensorFlow's compute_interpolation_weights: the source
    coordinate is ``x * scale`` or, with half-pixel centres, ``(x + 0.5) * scale - 0.5``)."""
    scale = resize_scale(in_size, out_size, align_corners)
    x = np.arange(out_size, dtype=np.float32)
    half = np.float32(0.5)
    source = (x + half) * scale - half if half_pixel_centers else x * scale
    floor = np.floor(source)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(source).astype(np.int64), in_size - 1)
    return lower, upper, (source - floor).astype(np.float32)


CUBIC_TABLE_SIZE = 1024
"""TensorFlow's kTableSize: the Keys kernel is sampled at 1/1024 steps, and each output's
fractional source offset is rounded to the nearest step before its weights are read."""


def _cubic_table(a: float) -> tuple[Array, Array]:
    """TensorFlow's InitCoeffsTable: for offsets ``t = i / 1024``, the Keys kernel's float32
    values at ``t`` (the near taps, ``|x| <= 1``) and at ``t + 1`` (the far taps), each
    evaluated in double precision from a float32 ``t`` and stored as float32."""
    t = (np.arange(CUBIC_TABLE_SIZE + 1, dtype=np.float64) / CUBIC_TABLE_SIZE).astype(np.float32)
    near = t.astype(np.float64)
    near_values = (((a + 2) * near - (a + 3)) * near * near + 1).astype(np.float32)
    far = (near + 1.0).astype(np.float32).astype(np.float64)
    far_values = (((a * far - 5 * a) * far + 8 * a) * far - 4 * a).astype(np.float32)
    return near_values, far_values


_CUBIC_TABLES: dict[bool, tuple[Array, Array]] = {}


def bicubic_weights(
    in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool
) -> tuple[Array, Array]:
    """For each output row (or column): the four source rows ResizeBicubic reads, shape
    ``[out_size, 4]`` (int64, clamped to the image), and their float32 weights.

    TensorFlow's GetWeightsAndIndices: the source coordinate is ``x * scale`` (legacy and
    align_corners; Keys' a = -0.75, and a clamped tap repeats the edge pixel with its full
    weight) or ``(x + 0.5) * scale - 0.5`` (half-pixel centres; a = -0.5, a tap outside the
    image gets weight 0 and the four are renormalised to sum to 1). The taps are
    ``floor(src) - 1 .. floor(src) + 2``; the weights are read from the 1/1024 table at the
    fraction rounded half to even (``lrintf``)."""
    if half_pixel_centers not in _CUBIC_TABLES:
        _CUBIC_TABLES[half_pixel_centers] = _cubic_table(-0.5 if half_pixel_centers else -0.75)
    near, far = _CUBIC_TABLES[half_pixel_centers]
    # A 1-pixel side under align_corners reads at x * (1 / out_size), not at 0: what
    # TensorFlow 2.21's kernel gives (its weights then sum to 1 only within rounding).
    scale = resize_scale(in_size, out_size, align_corners and in_size > 1)
    x = np.arange(out_size, dtype=np.float32)
    half = np.float32(0.5)
    source = (x + half) * scale - half if half_pixel_centers else x * scale
    floor = np.floor(source)
    delta = (source - floor).astype(np.float32)
    offset = np.rint(delta * np.float32(CUBIC_TABLE_SIZE)).astype(np.int64)
    mirrored = CUBIC_TABLE_SIZE - offset
    weights = np.stack([far[offset], near[offset], near[mirrored], far[mirrored]], axis=1)
    taps = floor.astype(np.int64)[:, None] + np.arange(-1, 3, dtype=np.int64)
    indices = np.clip(taps, 0, in_size - 1)
    if half_pixel_centers:
        weights = np.where(indices == taps, weights, np.float32(0))
        total = ((weights[:, 0] + weights[:, 1]) + weights[:, 2]) + weights[:, 3]
        usable = np.abs(total) >= np.float32(1000) * np.finfo(np.float32).tiny
        with np.errstate(divide="ignore"):
            inverse = np.where(usable, np.float32(1) / total, np.float32(1))
        weights = weights * inverse[:, None]
    return indices, weights.astype(np.float32, copy=False)


def crop_and_resize_shape(
    ctx: Fails,
    image: Sequence[int],
    boxes: Sequence[int],
    box_ind: Sequence[int],
    crop_size: Any,
) -> tuple[int, int, int, int]:
    """The output shape of CropAndResize, ``[num_boxes, crop_height, crop_width, depth]``,
    after TensorFlow's run-time checks in its order: a 4-D image of non-zero height and
    width, 2-D boxes of 4 columns and a 1-D box_ind of one entry per box (both empty: no
    boxes, whatever their shapes' other sides), and a positive 2-element crop_size."""
    if len(image) != 4:
        raise ctx.fail(f"input image must be 4-D, got shape {list(image)}")
    if image[1] <= 0 or image[2] <= 0:
        raise ctx.fail(f"image dimensions must be positive, got shape {list(image)}")
    if len(boxes) != 2:
        raise ctx.fail(f"boxes must be 2-D, got shape {list(boxes)}")
    if len(box_ind) != 1:
        raise ctx.fail(f"box_ind must be 1-D, got shape {list(box_ind)}")
    num_boxes = int(boxes[0])
    if boxes[0] * boxes[1] != 0 or box_ind[0] != 0:
        if boxes[1] != 4:
            raise ctx.fail(f"boxes must have 4 columns, got shape {list(boxes)}")
        if box_ind[0] != num_boxes:
            raise ctx.fail(
                f"box_ind has {box_ind[0]} entries but boxes has {num_boxes} rows (one each)"
            )
    else:
        num_boxes = 0
    value = np.asarray(crop_size)
    if value.shape != (2,):
        raise ctx.fail(
            f"crop_size must be a vector of 2 elements (crop_height, crop_width), got shape "
            f"{list(value.shape)}"
        )
    height, width = (int(v) for v in value)
    if height <= 0 or width <= 0:
        raise ctx.fail(f"crop_size must be positive, got [{height}, {width}]")
    return num_boxes, height, width, int(image[3])


def check_crop_boxes(ctx: Fails, boxes: Array, box_ind: Array, batch: int) -> Array:
    """``box_ind`` as int64 after TensorFlow's checks, in its order: every entry names an
    image of the batch (TensorFlow raises OutOfRange here; kernloom's kernels raise their
    InvalidArgumentError), then every box coordinate is finite."""
    index = np.asarray(box_ind).astype(np.int64)
    outside = (index < 0) | (index >= batch)
    if outside.any():
        raise ctx.fail(
            f"box_ind has values outside [0, batch_size) = [0, {batch}): "
            f"{index[outside][:5].tolist()}"
        )
    if not np.isfinite(np.asarray(boxes)).all():
        raise ctx.fail("boxes contains at least one element that is not finite")
    return index


class CropTaps(NamedTuple):
    """Where CropAndResize samples one axis, for every box (rows) and output position
    (columns): the source rows (or columns) below and above, the float32 weight of the
    upper one (``low == high``, rounded half away from zero, for ``nearest``), and
    whether the position lies inside the image (outside: ``extrapolation_value``).
    Outside positions carry clamped, harmless indices."""

    low: Array
    high: Array
    lerp: Array
    inside: Array


def crop_taps(starts: Any, ends: Any, in_size: int, crop_size: int, method: str) -> CropTaps:
    """TensorFlow's CropAndResize coordinates along one axis, in float32 as its CPU kernel
    computes them: ``start * (in - 1) + i * scale`` with ``scale = (end - start) * (in - 1)
    / (crop - 1)``; a crop of 1 samples the box's centre ``0.5 * (start + end) * (in - 1)``,
    in double precision (C++'s ``0.5`` is a double) and then rounded to float32."""
    start = np.asarray(starts, np.float32)
    end = np.asarray(ends, np.float32)
    last = np.float32(in_size - 1)
    if crop_size > 1:
        scale = (end - start) * last / np.float32(crop_size - 1)
        steps = np.arange(crop_size, dtype=np.float32)
        coords = start[:, None] * last + steps[None, :] * scale[:, None]
    else:
        centre = 0.5 * (start + end).astype(np.float64) * float(in_size - 1)
        coords = centre.astype(np.float32)[:, None]
    inside = (coords >= 0) & (coords <= last)
    clamped = np.clip(coords, np.float32(0), last)
    if method == "nearest":
        nearest = _round_half_away(clamped).astype(np.int64)
        return CropTaps(nearest, nearest, np.zeros_like(clamped), inside)
    floor = np.floor(clamped)
    lerp = (clamped - floor).astype(np.float32)
    return CropTaps(floor.astype(np.int64), np.ceil(clamped).astype(np.int64), lerp, inside)


def _spatial(data_format: str) -> tuple[int, int, int]:
    """The height, width and channel axes of a 4-D tensor in ``data_format``."""
    return (1, 2, 3) if data_format == "NHWC" else (2, 3, 1)


def _check_block(ctx: Fails, block_size: int) -> None:
    if block_size < 2:
        raise ctx.fail(f"block_size must be at least 2, got {block_size}")


def space_to_depth_shape(
    ctx: Fails, shape: Sequence[int], block_size: int, data_format: str
) -> tuple[int, ...]:
    """The output shape of SpaceToDepth, after checking the input is 4-D and its height
    and width are multiples of ``block_size``."""
    _check_block(ctx, block_size)
    if len(shape) != 4:
        raise ctx.fail(f"input must be 4-D ({data_format}), got shape {list(shape)}")
    h, w, c = _spatial(data_format)
    for axis, what in ((h, "height"), (w, "width")):
        if shape[axis] % block_size:
            raise ctx.fail(
                f"the {what} {shape[axis]} must be evenly divisible by block_size {block_size}"
            )
    out = list(shape)
    out[h], out[w] = shape[h] // block_size, shape[w] // block_size
    out[c] = shape[c] * block_size * block_size
    return tuple(out)


def depth_to_space_shape(
    ctx: Fails, shape: Sequence[int], block_size: int, data_format: str
) -> tuple[int, ...]:
    """The output shape of DepthToSpace, after checking the input is 4-D and its depth is
    a multiple of ``block_size ** 2``."""
    _check_block(ctx, block_size)
    if len(shape) != 4:
        raise ctx.fail(f"input must be 4-D ({data_format}), got shape {list(shape)}")
    h, w, c = _spatial(data_format)
    square = block_size * block_size
    if shape[c] % square:
        raise ctx.fail(
            f"the depth {shape[c]} must be evenly divisible by block_size * block_size = {square}"
        )
    out = list(shape)
    out[h], out[w] = shape[h] * block_size, shape[w] * block_size
    out[c] = shape[c] // square
    return tuple(out)


def _scalar_arg(ctx: Fails, value: Any, what: str) -> Array:
    array = np.asarray(value)
    if array.ndim != 0:
        raise ctx.fail(
            f"{what} must be 0-D, got shape {list(array.shape)} (Shape must be rank 0 but is "
            f"rank {array.ndim})"
        )
    return array


def _corners(boxes: Array) -> tuple[Array, Array, Array, Array, Array]:
    """Each box's (ymin, xmin, ymax, xmax, area) in float32, the corners in either order,
    with C++'s std::min/std::max (``b < a ? b : a``), so a NaN stays where TensorFlow
    leaves it."""
    b = boxes.astype(np.float32, copy=False)

    def low(a: Array, c: Array) -> Array:
        return np.where(c < a, c, a)

    def high(a: Array, c: Array) -> Array:
        return np.where(a < c, c, a)

    ymin, xmin = low(b[:, 0], b[:, 2]), low(b[:, 1], b[:, 3])
    ymax, xmax = high(b[:, 0], b[:, 2]), high(b[:, 1], b[:, 3])
    return ymin, xmin, ymax, xmax, (ymax - ymin) * (xmax - xmin)


def _iou(corners: tuple[Array, Array, Array, Array, Array], i: int, others: Array) -> Array:
    """TensorFlow's IOU(i, j) for each j of ``others``, in float32 as its CPU kernel
    computes it: 0 where either box has no positive area."""
    ymin, xmin, ymax, xmax, area = corners
    zero = np.float32(0)
    top = np.where(ymin[i] < ymin[others], ymin[others], ymin[i])
    left = np.where(xmin[i] < xmin[others], xmin[others], xmin[i])
    bottom = np.where(ymax[others] < ymax[i], ymax[others], ymax[i])
    right = np.where(xmax[others] < xmax[i], xmax[others], xmax[i])
    height, width = bottom - top, right - left
    inter = np.where(height < zero, zero, height) * np.where(width < zero, zero, width)
    empty = (area[i] <= zero) | (area[others] <= zero)
    with np.errstate(all="ignore"):
        iou = inter / (area[i] + area[others] - inter)
    return np.where(empty, zero, iou).astype(np.float32, copy=False)


def non_max_suppression(
    ctx: Fails,
    boxes: Any,
    scores: Any,
    max_output_size: Any,
    iou_threshold: Any,
    score_threshold: Any,
) -> Array:
    """NonMaxSuppressionV3's selected indices (int32), after TensorFlow's checks in its
    order: the three scalars, iou_threshold in [0, 1], boxes [num_boxes, 4], scores
    [num_boxes], max_output_size >= 0.

    TensorFlow's greedy algorithm (its CPU kernel, which its GPU kernel matches): the boxes
    scoring above score_threshold are taken by descending score, ties by lower index; a
    candidate is compared with the boxes selected so far, the latest first, and dropped
    when an IoU exceeds iou_threshold. Scores and thresholds are in the boxes' dtype T
    (float32 thresholds are rounded to it), IoUs in float32, compared with the threshold
    in float32 (TensorFlow 2.21 drops float16 boxes whose float32 IoU exceeds the
    threshold by less than float16 resolves). As there, a NaN IoU zeroes the candidate's
    score: it is not selected then, but goes back into the queue with its new score while
    that still beats score_threshold.
    """
    size = _scalar_arg(ctx, max_output_size, "max_output_size")
    iou_t = _scalar_arg(ctx, iou_threshold, "iou_threshold")
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    dtype = boxes.dtype.type
    limit = dtype(iou_t)
    if not (limit >= 0 and limit <= 1):
        raise ctx.fail("iou_threshold must be in [0, 1]")
    bound = np.float32(limit)  # the float32 IoUs are compared with it
    floor = dtype(_scalar_arg(ctx, score_threshold, "score_threshold"))
    if boxes.ndim != 2:
        raise ctx.fail(
            f"boxes must be 2-D, got shape {list(boxes.shape)} (Shape must be rank 2 but is "
            f"rank {boxes.ndim})"
        )
    if boxes.shape[1] != 4:
        raise ctx.fail(f"boxes must have 4 columns, got shape {list(boxes.shape)}")
    if scores.ndim != 1:
        raise ctx.fail(
            f"scores must be 1-D, got shape {list(scores.shape)} (Shape must be rank 1 but is "
            f"rank {scores.ndim})"
        )
    if scores.shape[0] != boxes.shape[0]:
        raise ctx.fail(
            f"scores has {scores.shape[0]} entries but boxes has {boxes.shape[0]} rows (one each)"
        )
    wanted = int(size)
    if wanted < 0:
        raise ctx.fail(f"max_output_size must be non-negative, got {wanted}")
    values = scores.astype(dtype, copy=False)
    # A min-heap of (-score, index, suppress_begin): the highest score, then the lowest index.
    queue = [(-float(s), i, 0) for i, s in enumerate(values.tolist()) if values[i] > floor]
    heapq.heapify(queue)
    corners = _corners(boxes)
    selected: list[int] = []
    zero = dtype(0)
    while len(selected) < wanted and queue:
        negative, index, begin = heapq.heappop(queue)
        original = dtype(-negative)
        score = original
        earlier = np.asarray(selected[begin:][::-1], dtype=np.int64)  # the latest first
        similarity = _iou(corners, index, earlier)
        suppressed = False
        # Only an IoU that is not <= the threshold changes anything: above it suppresses,
        # a NaN one zeroes the score (TensorFlow's weight is 0 for it).
        for sim in similarity[~(similarity <= bound)]:
            if sim > bound:
                suppressed = True
                break
            with np.errstate(invalid="ignore"):
                score = dtype(score * zero)
            if score <= floor:
                break
        if suppressed:
            continue
        if score == original:
            selected.append(index)
        elif score > floor:
            heapq.heappush(queue, (-float(score), index, len(selected)))
    return np.asarray(selected, dtype=np.int32)


# -- shape functions -----------------------------------------------------------------------------


def _resize_shape(ctx: InferenceContext) -> None:
    _check_resize_attrs(ctx, bool(ctx.attr("align_corners")), bool(ctx.attr("half_pixel_centers")))
    images = ctx.input_shape(0)
    if images.rank not in (4, None):
        raise ctx.fail(f"images must be 4-D [batch, height, width, channels], got {images}")
    size_shape = ctx.input_shape(1)
    if size_shape.rank not in (1, None) or (
        size_shape.rank == 1 and size_shape[0] not in (2, None)
    ):
        raise ctx.fail(f"size must be a vector of 2 elements, got shape {size_shape}")
    dims: list[Dim] = list(images.dims) if images.dims is not None else [None] * 4
    for axis, what in ((1, "height"), (2, "width"), (3, "channels")):
        if dims[axis] == 0:
            raise ctx.fail(f"the input image's {what} must be positive, got shape {images}")
    size = ctx.input_value(1)
    height, width = _resize_size(ctx, size) if size is not None else (None, None)
    ctx.set_output(0, [dims[0], height, width, dims[3]])


def _crop_and_resize_shape(ctx: InferenceContext) -> None:
    image, boxes, box_ind = (ctx.input_shape(i) for i in range(3))
    for shape, rank, what in ((image, 4, "image"), (boxes, 2, "boxes"), (box_ind, 1, "box_ind")):
        if shape.rank not in (rank, None):
            raise ctx.fail(f"{what} must be {rank}-D, got shape {shape}")
    if boxes.rank == 2 and boxes[1] not in (4, None):
        raise ctx.fail(f"boxes must have 4 columns, got shape {boxes}")
    rows = boxes[0] if boxes.rank == 2 else None
    entries = box_ind[0] if box_ind.rank == 1 else None
    if rows is not None and entries is not None and rows != entries:
        raise ctx.fail(f"box_ind has {entries} entries but boxes has {rows} rows (one each)")
    size_shape = ctx.input_shape(3)
    if size_shape.rank not in (1, None) or (
        size_shape.rank == 1 and size_shape[0] not in (2, None)
    ):
        raise ctx.fail(f"crop_size must be a vector of 2 elements, got shape {size_shape}")
    size = ctx.input_value(3)
    height: Dim = None
    width: Dim = None
    if size is not None:
        height, width = (int(v) for v in np.asarray(size))
        if height <= 0 or width <= 0:
            raise ctx.fail(f"crop_size must be positive, got [{height}, {width}]")
    depth = image[3] if image.rank == 4 else None
    ctx.set_output(0, [rows if rows is not None else entries, height, width, depth])


def _non_max_suppression_shape(ctx: InferenceContext) -> None:
    boxes, scores = ctx.input_shape(0), ctx.input_shape(1)
    if boxes.rank not in (2, None):
        raise ctx.fail(f"boxes must be 2-D [num_boxes, 4], got shape {boxes}")
    if boxes.rank == 2 and boxes[1] not in (4, None):
        raise ctx.fail(f"boxes must have 4 columns, got shape {boxes}")
    if scores.rank not in (1, None):
        raise ctx.fail(f"scores must be 1-D [num_boxes], got shape {scores}")
    rows = boxes[0] if boxes.rank == 2 else None
    entries = scores[0] if scores.rank == 1 else None
    if rows is not None and entries is not None and rows != entries:
        raise ctx.fail(f"scores has {entries} entries but boxes has {rows} rows (one each)")
    for index, what in ((2, "max_output_size"), (3, "iou_threshold"), (4, "score_threshold")):
        if ctx.input_shape(index).rank not in (0, None):
            raise ctx.fail(f"{what} must be 0-D, got shape {ctx.input_shape(index)}")
    ctx.set_output(0, [None])


def _rearrange_shape(to_depth: bool) -> Any:
    def shape_fn(ctx: InferenceContext) -> None:
        shape = ctx.input_shape(0)
        block, data_format = int(ctx.attr("block_size")), str(ctx.attr("data_format"))
        _check_block(ctx, block)
        if shape.rank is None:
            ctx.set_output(0, TensorShape.unknown(4))
            return
        if shape.rank != 4:
            raise ctx.fail(f"input must be 4-D ({data_format}), got shape {shape}")
        # Unknown dimensions stand in as a known multiple, then are unknown again.
        multiple = block * block
        known = [d if d is not None else multiple for d in shape.dims or ()]
        rule = space_to_depth_shape if to_depth else depth_to_space_shape
        out: list[Dim] = list(rule(ctx, known, block, data_format))
        h, w, c = _spatial(data_format)
        for axis in (0, h, w, c):
            if shape[axis] is None:
                out[axis] = None
        ctx.set_output(0, out)

    return shape_fn


def define(lib: OpLibrary) -> None:
    def resize(name: str, output: str, summary: str, description: str) -> None:
        (
            lib.register_op(name)
            .input("images: T", "4-D [batch, height, width, channels].")
            .input("size: int32", "[new_height, new_width], positive.")
            .output(output)
            .attr(f"T: {RESIZE_TYPES}")
            .attr(
                "align_corners: bool = false",
                "Map the corner pixels' centres onto each other (scale (in-1)/(out-1)).",
            )
            .attr(
                "half_pixel_centers: bool = false",
                "Pixel centres at +0.5; needs align_corners=false.",
            )
            .shape_fn(_resize_shape)
            .doc(summary, description)
        )

    resize(
        "ResizeBilinear",
        "resized_images: float32",
        "Resize images to size by bilinear interpolation; the output is float32.",
        "Source coordinates, their floor/ceil neighbours and weights are computed in "
        "float32 exactly as TensorFlow's CPU kernel does; the four neighbours are cast to "
        "float32 and interpolated along the width, then the height. A resize to the same "
        "size is a cast.",
    )
    resize(
        "ResizeBicubic",
        "resized_images: float32",
        "Resize images to size by bicubic (Keys cubic convolution) interpolation; the "
        "output is float32.",
        "Each output reads a 4x4 neighbourhood: the source coordinate is computed in float32 "
        "as TensorFlow's CPU kernel does, and the kernel is Keys' cubic with a = -0.5 under "
        "half_pixel_centers (taps outside the image weigh 0, the rest are renormalised) and "
        "a = -0.75 otherwise (taps clamped to the edge pixel), sampled from a 1/1024 table. "
        "Columns are interpolated along the height first, then the width, in float32.",
    )
    resize(
        "ResizeNearestNeighbor",
        "resized_images: T",
        "Resize images to size by copying the nearest source pixel.",
        "The source row is floor(y * scale) (roundf, halves away from zero, with "
        "align_corners; (y + 0.5) * scale with half_pixel_centers), clamped to the image, "
        "as TensorFlow's CPU kernel computes it in float32.",
    )

    (
        lib.register_op("CropAndResize")
        .input("image: T", "4-D [batch, image_height, image_width, depth].")
        .input("boxes: float32", "[num_boxes, 4]: normalised y1, x1, y2, x2 of each box.")
        .input("box_ind: int32", "[num_boxes]: the image of the batch each box crops.")
        .input("crop_size: int32", "[crop_height, crop_width], positive.")
        .output("crops: float32")
        .attr(f"T: {RESIZE_TYPES}")
        .attr("method: {'bilinear', 'nearest'} = 'bilinear'", "How a crop samples its box.")
        .attr("extrapolation_value: float = 0", "The value of samples outside the image.")
        .shape_fn(_crop_and_resize_shape)
        .doc(
            "Crop boxes out of images and resize each to crop_size; the output is float32.",
            "A box's corners map to image coordinates y1 * (height - 1) and y2 * (height - "
            "1) (likewise x), sampled at crop_size evenly spaced points (a crop of 1 "
            "samples the box's centre), in float32 as TensorFlow's CPU kernel computes "
            "them; samples outside the image take extrapolation_value. bilinear "
            "interpolates as ResizeBilinear does; nearest rounds halves away from zero. "
            "box_ind outside [0, batch) and non-finite boxes are errors (TensorFlow's "
            "OutOfRange for box_ind; an InvalidArgumentError here).",
        )
    )

    (
        lib.register_op("NonMaxSuppressionV3")
        .input("boxes: T", "[num_boxes, 4]: two opposite corners (y1, x1, y2, x2) of each box.")
        .input("scores: T", "[num_boxes]: one score per box.")
        .input("max_output_size: int32", "The most boxes to select, >= 0.")
        .input("iou_threshold: T_threshold", "In [0, 1]: the IoU above which a box is dropped.")
        .input("score_threshold: T_threshold", "Boxes scoring at or below it are never selected.")
        .output("selected_indices: int32")
        .attr("T: {float16, float32} = float32")
        .attr("T_threshold: {float16, float32} = float32")
        .shape_fn(_non_max_suppression_shape)
        .doc(
            "Greedily select boxes by descending score, dropping those that overlap a "
            "selected box by more than iou_threshold.",
            "The corners may come in either order. Candidates are the boxes scoring above "
            "score_threshold, taken by descending score, ties by lower index; a candidate "
            "is selected unless its IoU with a box selected before exceeds iou_threshold, "
            "until max_output_size are selected. IoUs are computed in float32 (0 where a "
            "box has no positive area) as TensorFlow's CPU kernel computes them; the output "
            "lists the selected boxes' indices in the order they were selected.",
        )
    )

    def rearrange(name: str, summary: str, to_depth: bool) -> None:
        (
            lib.register_op(name)
            .input("input: T")
            .output("output: T")
            .attr("T: type")
            .attr("block_size: int >= 2")
            .attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")
            .shape_fn(_rearrange_shape(to_depth))
            .doc(
                summary,
                "Depth is laid out as TensorFlow's DCR order: the channel index is "
                "(block_row * block_size + block_column) * channels + channel. Both NHWC and "
                "NCHW run on every device (TensorFlow's CPU kernel takes only NHWC); "
                "NCHW_VECT_C (quantized int8 only) is not supported.",
            )
        )

    rearrange(
        "SpaceToDepth",
        "Move block_size x block_size spatial blocks into the depth dimension.",
        to_depth=True,
    )
    rearrange(
        "DepthToSpace",
        "Move depth into block_size x block_size spatial blocks (SpaceToDepth's inverse).",
        to_depth=False,
    )
