"""Image kernels (ResizeBilinear, ResizeBicubic, ResizeNearestNeighbor, CropAndResize,
NonMaxSuppressionV3, SpaceToDepth, DepthToSpace).

The resizes gather whole rows, then whole columns, with index vectors computed once per
call by the op's rules (``bilinear_weights``, ``bicubic_weights``, ``nearest_indices``:
TensorFlow's float32 coordinate transforms); the bilinear interpolation is three
vectorised lerps in float32, the bicubic one two 4-tap weighted sums (heights, then
widths), each in the order TensorFlow's kernel computes them. CropAndResize gathers every
box's samples at once with index arrays from ``crop_taps`` (one row per box). SpaceToDepth
and DepthToSpace are one reshape, transpose and copy. NonMaxSuppressionV3 is the op's rule
(``non_max_suppression``: TensorFlow's checks and greedy selection).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kernloom as kl
from kernloom.plugin import (
    NMS_TYPES,
    KernelLibrary,
    OpKernelContext,
    bicubic_weights,
    bilinear_weights,
    check_crop_boxes,
    crop_and_resize_shape,
    crop_taps,
    depth_to_space_shape,
    nearest_indices,
    non_max_suppression,
    resize_output_shape,
    space_to_depth_shape,
)
from kernloom.plugin import types as t

__all__ = ["register"]

CPU = "CPU"
RESIZE_TYPES = (*t.FLOATS, kl.int8, kl.int16, kl.int32, kl.int64, kl.uint8, kl.uint16)
"""TensorFlow's list for the resizes (less bfloat16)."""


def _resize_setup(ctx: OpKernelContext) -> tuple[Any, Any, bool, bool]:
    images = ctx.input(0)
    align, half = bool(ctx.attr("align_corners")), bool(ctx.attr("half_pixel_centers"))
    shape = resize_output_shape(ctx, images.shape, ctx.input(1), align, half)
    return images, ctx.allocate_output(0, shape), align, half


def resize_bilinear(ctx: OpKernelContext) -> None:
    images, out, align, half = _resize_setup(ctx)
    (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
    if out.size == 0:
        return
    if (in_h, in_w) == (out_h, out_w):  # TensorFlow's no-op resize is a plain cast
        out[...] = images
        return
    top, bottom, y_lerp = bilinear_weights(in_h, out_h, align, half)
    left, right, x_lerp = bilinear_weights(in_w, out_w, align, half)
    source = images.astype(np.float32, copy=False)
    x_lerp = x_lerp[:, None]
    rows = source[:, top]
    upper = rows[:, :, left] + (rows[:, :, right] - rows[:, :, left]) * x_lerp
    rows = source[:, bottom]
    lower = rows[:, :, left] + (rows[:, :, right] - rows[:, :, left]) * x_lerp
    lower -= upper
    lower *= y_lerp[:, None, None]
    np.add(upper, lower, out=out)


def _taps(values: Any, axis: int, indices: Any, weights: Any) -> Any:
    """TensorFlow's Interpolate1D along ``axis`` for every output at once: the four taps
    gathered whole, weighted and summed left to right in float32 (the kernel's order, so
    the roundings agree). ``weights`` broadcast against the gathered values."""
    total = values.take(indices[:, 0], axis=axis) * weights[0]
    for k in range(1, 4):
        total += values.take(indices[:, k], axis=axis) * weights[k]
    return total


def resize_bicubic(ctx: OpKernelContext) -> None:
    images, out, align, half = _resize_setup(ctx)
    (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
    if out.size == 0:
        return
    rows, row_weights = bicubic_weights(in_h, out_h, align, half)
    columns, column_weights = bicubic_weights(in_w, out_w, align, half)
    source = images.astype(np.float32, copy=False)
    with np.errstate(all="ignore"):  # inf * 0 is NaN, as in TensorFlow
        # Along the height first (every source column), then the width, as TensorFlow does.
        heights = _taps(source, 1, rows, row_weights.T[:, :, None, None])
        out[...] = _taps(heights, 2, columns, column_weights.T[:, :, None])


def crop_and_resize(ctx: OpKernelContext) -> None:
    image, boxes, box_ind = ctx.input(0), np.asarray(ctx.input(1)), np.asarray(ctx.input(2))
    shape = crop_and_resize_shape(ctx, image.shape, boxes.shape, box_ind.shape, ctx.input(3))
    out = ctx.allocate_output(0, shape)
    # TensorFlow checks box_ind and the boxes' finiteness even when there is nothing to crop.
    batch = check_crop_boxes(ctx, boxes, box_ind, image.shape[0])
    if out.size == 0:
        return
    (_, in_h, in_w, _), (_, crop_h, crop_w, _) = image.shape, out.shape
    method = str(ctx.attr("method"))
    rows = crop_taps(boxes[:, 0], boxes[:, 2], in_h, crop_h, method)
    columns = crop_taps(boxes[:, 1], boxes[:, 3], in_w, crop_w, method)
    b = batch[:, None, None]
    top, bottom = rows.low[:, :, None], rows.high[:, :, None]
    left, right = columns.low[:, None, :], columns.high[:, None, :]

    def at(y: Any, x: Any) -> Any:  # [box, crop_h, crop_w, depth] in float32
        return image[b, y, x].astype(np.float32, copy=False)

    with np.errstate(all="ignore"):  # inf - inf is NaN, as in TensorFlow
        if method == "nearest":
            values = at(top, left)
        else:
            x_lerp = columns.lerp[:, None, :, None]
            upper = at(top, left) + (at(top, right) - at(top, left)) * x_lerp
            lower = at(bottom, left) + (at(bottom, right) - at(bottom, left)) * x_lerp
            values = upper + (lower - upper) * rows.lerp[:, :, None, None]
    inside = (rows.inside[:, :, None] & columns.inside[:, None, :])[..., None]
    extrapolation = np.float32(ctx.attr("extrapolation_value"))
    np.copyto(out, np.where(inside, values, extrapolation))


def non_max_suppression_v3(ctx: OpKernelContext) -> None:
    selected = non_max_suppression(ctx, *(ctx.input(i) for i in range(5)))
    np.copyto(ctx.allocate_output(0, selected.shape), selected)


def resize_nearest_neighbor(ctx: OpKernelContext) -> None:
    images, out, align, half = _resize_setup(ctx)
    (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
    if out.size == 0:
        return
    rows = nearest_indices(in_h, out_h, align, half)
    columns = nearest_indices(in_w, out_w, align, half)
    np.copyto(out, images[:, rows[:, None], columns[None, :]])


def _blocks(shape: tuple[int, ...], block: int, data_format: str) -> tuple[int, ...]:
    """``shape`` (the spatial side) with height and width split into (blocks, block)."""
    if data_format == "NHWC":
        b, h, w, c = shape
        return (b, h // block, block, w // block, block, c)
    b, c, h, w = shape
    return (b, c, h // block, block, w // block, block)


def _depth(shape: tuple[int, ...], block: int, data_format: str) -> tuple[int, ...]:
    """``shape`` (the depth side) with depth split into (block row, block column, channel)."""
    if data_format == "NHWC":
        b, h, w, c = shape
        return (b, h, w, block, block, c // (block * block))
    b, c, h, w = shape
    return (b, block, block, c // (block * block), h, w)


# Axis orders from the split spatial side to the split depth side, and back.
TO_DEPTH = {"NHWC": (0, 1, 3, 2, 4, 5), "NCHW": (0, 3, 5, 1, 2, 4)}
TO_SPACE = {"NHWC": (0, 1, 3, 2, 4, 5), "NCHW": (0, 3, 4, 1, 5, 2)}


def space_to_depth(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    block, data_format = int(ctx.attr("block_size")), str(ctx.attr("data_format"))
    out = ctx.allocate_output(0, space_to_depth_shape(ctx, x.shape, block, data_format))
    split = x.reshape(_blocks(x.shape, block, data_format))
    np.copyto(
        out.reshape(_depth(out.shape, block, data_format)), split.transpose(TO_DEPTH[data_format])
    )


def depth_to_space(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    block, data_format = int(ctx.attr("block_size")), str(ctx.attr("data_format"))
    out = ctx.allocate_output(0, depth_to_space_shape(ctx, x.shape, block, data_format))
    split = x.reshape(_depth(x.shape, block, data_format))
    np.copyto(
        out.reshape(_blocks(out.shape, block, data_format)), split.transpose(TO_SPACE[data_format])
    )


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def cpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints={"T": types}, **kw)

    cpu("ResizeBilinear", RESIZE_TYPES, host_memory=["size"])(resize_bilinear)
    cpu("ResizeBicubic", RESIZE_TYPES, host_memory=["size"])(resize_bicubic)
    cpu("ResizeNearestNeighbor", RESIZE_TYPES, host_memory=["size"])(resize_nearest_neighbor)
    cpu("CropAndResize", RESIZE_TYPES, host_memory=["boxes", "box_ind", "crop_size"])(
        crop_and_resize
    )
    lib.kernel(
        "NonMaxSuppressionV3",
        device=CPU,
        backend="numpy",
        type_constraints={"T": NMS_TYPES, "T_threshold": NMS_TYPES},
    )(non_max_suppression_v3)
    cpu("SpaceToDepth", t.ALL)(space_to_depth)
    cpu("DepthToSpace", t.ALL)(depth_to_space)
