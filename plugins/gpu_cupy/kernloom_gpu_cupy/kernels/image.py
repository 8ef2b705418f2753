"""Image kernels (ResizeBilinear, ResizeBicubic, ResizeNearestNeighbor, CropAndResize,
NonMaxSuppressionV3, SpaceToDepth, DepthToSpace).

Written over the array module ``xp`` (CuPy; numpy in tests). The source rows, columns
and weights come from the op's rules (TensorFlow's float32 coordinate transforms,
computed on the host and copied to the device once per call); the kernels gather whole
rows and columns and interpolate in float32 in TensorFlow's order. The space/depth ops
are a reshape, a transpose and one copy. NonMaxSuppressionV3 runs on the host, every
argument in host memory: its greedy loop is sequential, and TensorFlow's GPU kernel waits
for the device to count its selections too.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.plugin import (
    NMS_HOST_MEMORY,
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
from kernloom_gpu_cupy.kernels._host import host_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
RESIZE_TYPES = (*t.FLOATS, kl.int8, kl.int16, kl.int32, kl.int64, kl.uint8, kl.uint16)
TO_DEPTH = {"NHWC": (0, 1, 3, 2, 4, 5), "NCHW": (0, 3, 5, 1, 2, 4)}
TO_SPACE = {"NHWC": (0, 1, 3, 2, 4, 5), "NCHW": (0, 3, 4, 1, 5, 2)}


def _non_max_suppression_v3(ctx: OpKernelContext) -> None:
    selected = non_max_suppression(ctx, *(host_input(ctx, i) for i in range(5)))
    np.copyto(ctx.allocate_output(0, selected.shape), selected)


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


class _Kernels:
    """The image kernels, bound to one array module ``xp``."""

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp

    def _setup(self, ctx: OpKernelContext) -> tuple[Any, Any, bool, bool]:
        images = ctx.input(0)
        align, half = bool(ctx.attr("align_corners")), bool(ctx.attr("half_pixel_centers"))
        shape = resize_output_shape(ctx, images.shape, host_input(ctx, 1), align, half)
        return images, ctx.allocate_output(0, shape), align, half

    def resize_bilinear(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        images, out, align, half = self._setup(ctx)
        (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
        if out.size == 0:
            return
        if (in_h, in_w) == (out_h, out_w):  # TensorFlow's no-op resize is a plain cast
            xp.copyto(out, images, casting="unsafe")
            return
        top, bottom, y_lerp = (xp.asarray(v) for v in bilinear_weights(in_h, out_h, align, half))
        left, right, x_lerp = (xp.asarray(v) for v in bilinear_weights(in_w, out_w, align, half))
        source = images.astype(np.float32, copy=False)
        x_lerp = x_lerp[:, None]

        def lerp_columns(rows: Any) -> Any:
            lo, hi = xp.take(rows, left, axis=2), xp.take(rows, right, axis=2)
            return lo + (hi - lo) * x_lerp

        with np.errstate(all="ignore"):  # numpy in tests: inf - inf is NaN, as in TensorFlow
            upper = lerp_columns(xp.take(source, top, axis=1))
            lower = lerp_columns(xp.take(source, bottom, axis=1))
            xp.add(upper, (lower - upper) * y_lerp[:, None, None], out=out)

    def _taps(self, values: Any, axis: int, indices: Any, weights: Any) -> Any:
        """TensorFlow's Interpolate1D along ``axis`` for every output at once: the four
        taps gathered whole, weighted and summed left to right in float32 (the kernel's
        order, so the roundings agree)."""
        xp = self.xp
        total = xp.take(values, indices[:, 0], axis=axis) * weights[0]
        for k in range(1, 4):
            total += xp.take(values, indices[:, k], axis=axis) * weights[k]
        return total

    def resize_bicubic(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        images, out, align, half = self._setup(ctx)
        (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
        if out.size == 0:
            return
        rows, row_weights = (xp.asarray(v) for v in bicubic_weights(in_h, out_h, align, half))
        columns, column_weights = (xp.asarray(v) for v in bicubic_weights(in_w, out_w, align, half))
        source = images.astype(np.float32, copy=False)
        with np.errstate(all="ignore"):  # numpy in tests: inf * 0 is NaN, as in TensorFlow
            # Along the height first (every source column), then the width, as TensorFlow.
            heights = self._taps(source, 1, rows, row_weights.T[:, :, None, None])
            xp.copyto(out, self._taps(heights, 2, columns, column_weights.T[:, :, None]))

    def crop_and_resize(self, ctx: OpKernelContext) -> None:
        """The boxes, box_ind and crop_size are host-memory inputs: the sampling positions
        come from the op's rules on the host and are gathered on the device with broadcast
        index arrays, one row per box."""
        xp = self.xp
        image = ctx.input(0)
        boxes, box_ind, crop_size = (host_input(ctx, i) for i in (1, 2, 3))
        shape = crop_and_resize_shape(ctx, image.shape, boxes.shape, box_ind.shape, crop_size)
        out = ctx.allocate_output(0, shape)
        batch = check_crop_boxes(ctx, boxes, box_ind, image.shape[0])
        if out.size == 0:
            return
        (_, in_h, in_w, _), (_, crop_h, crop_w, _) = image.shape, out.shape
        method = str(ctx.attr("method"))
        rows = crop_taps(boxes[:, 0], boxes[:, 2], in_h, crop_h, method)
        columns = crop_taps(boxes[:, 1], boxes[:, 3], in_w, crop_w, method)
        b = xp.asarray(batch)[:, None, None]
        top, bottom = xp.asarray(rows.low)[:, :, None], xp.asarray(rows.high)[:, :, None]
        left, right = xp.asarray(columns.low)[:, None, :], xp.asarray(columns.high)[:, None, :]

        def at(y: Any, x: Any) -> Any:  # [box, crop_h, crop_w, depth] in float32
            return image[b, y, x].astype(np.float32, copy=False)

        with np.errstate(all="ignore"):  # numpy in tests: inf - inf is NaN, as in TensorFlow
            if method == "nearest":
                values = at(top, left)
            else:
                x_lerp = xp.asarray(columns.lerp)[:, None, :, None]
                upper = at(top, left) + (at(top, right) - at(top, left)) * x_lerp
                lower = at(bottom, left) + (at(bottom, right) - at(bottom, left)) * x_lerp
                values = upper + (lower - upper) * xp.asarray(rows.lerp)[:, :, None, None]
        inside = xp.asarray(rows.inside[:, :, None] & columns.inside[:, None, :])[..., None]
        extrapolation = np.float32(ctx.attr("extrapolation_value"))
        xp.copyto(out, xp.where(inside, values, extrapolation))

    def resize_nearest_neighbor(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        images, out, align, half = self._setup(ctx)
        (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
        if out.size == 0:
            return
        rows = xp.asarray(nearest_indices(in_h, out_h, align, half))
        columns = xp.asarray(nearest_indices(in_w, out_w, align, half))
        xp.copyto(out, xp.take(xp.take(images, rows, axis=1), columns, axis=2))

    def space_to_depth(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        block, data_format = int(ctx.attr("block_size")), str(ctx.attr("data_format"))
        out = ctx.allocate_output(0, space_to_depth_shape(ctx, x.shape, block, data_format))
        split = x.reshape(_blocks(x.shape, block, data_format))
        self.xp.copyto(
            out.reshape(_depth(out.shape, block, data_format)),
            self.xp.transpose(split, TO_DEPTH[data_format]),
        )

    def depth_to_space(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        block, data_format = int(ctx.attr("block_size")), str(ctx.attr("data_format"))
        out = ctx.allocate_output(0, depth_to_space_shape(ctx, x.shape, block, data_format))
        split = x.reshape(_depth(x.shape, block, data_format))
        self.xp.copyto(
            out.reshape(_blocks(out.shape, block, data_format)),
            self.xp.transpose(split, TO_SPACE[data_format]),
        )


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""
    kernels = _Kernels(xp)

    def gpu(op: str, types: tuple[Any, ...], **kw: Any) -> Any:
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints={"T": types}, **kw)

    gpu("ResizeBilinear", RESIZE_TYPES, host_memory=["size"])(kernels.resize_bilinear)
    gpu("ResizeBicubic", RESIZE_TYPES, host_memory=["size"])(kernels.resize_bicubic)
    gpu("ResizeNearestNeighbor", RESIZE_TYPES, host_memory=["size"])(
        kernels.resize_nearest_neighbor
    )
    gpu("CropAndResize", RESIZE_TYPES, host_memory=["boxes", "box_ind", "crop_size"])(
        kernels.crop_and_resize
    )
    lib.kernel(
        "NonMaxSuppressionV3",
        device=GPU,
        backend=BACKEND,
        type_constraints={"T": NMS_TYPES, "T_threshold": NMS_TYPES},
        host_memory=NMS_HOST_MEMORY,
    )(_non_max_suppression_v3)
    gpu("SpaceToDepth", t.ALL)(kernels.space_to_depth)
    gpu("DepthToSpace", t.ALL)(kernels.depth_to_space)
