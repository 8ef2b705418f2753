"""Image kernels with torch (ResizeBilinear, ResizeBicubic, ResizeNearestNeighbor,
CropAndResize, NonMaxSuppressionV3, SpaceToDepth, DepthToSpace).

The source rows, columns and weights come from the op's rules (TensorFlow's float32
coordinate transforms, computed on the host); the kernels gather with ``index_select`` and
interpolate in float32 in TensorFlow's order, so the results equal the numpy kernels' bit
for bit. The space/depth ops are a reshape, a permute and one copy. NonMaxSuppressionV3
runs on the host, every argument in host memory: its greedy loop is sequential, and
TensorFlow's GPU kernel waits for the device to count its selections too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

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
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import host_input, output, tensor_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "torch"
RESIZE_TYPES = d.supported((*d.FLOATS, kl.int8, kl.int16, kl.int32, kl.int64, kl.uint8, kl.uint16))


def _resize_setup(ctx: OpKernelContext) -> tuple[torch.Tensor, torch.Tensor, bool, bool]:
    images = tensor_input(ctx, 0)
    align, half = bool(ctx.attr("align_corners")), bool(ctx.attr("half_pixel_centers"))
    shape = resize_output_shape(ctx, tuple(images.shape), host_input(ctx, 1), align, half)
    return images, output(ctx, 0, shape), align, half


def _on(device: torch.device, values: np.ndarray[Any, Any]) -> torch.Tensor:
    return torch.from_numpy(values).to(device)


def resize_bilinear(ctx: OpKernelContext) -> None:
    images, out, align, half = _resize_setup(ctx)
    (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
    if out.numel() == 0:
        return
    if (in_h, in_w) == (out_h, out_w):  # TensorFlow's no-op resize is a plain cast
        out.copy_(images)
        return
    top, bottom, y_lerp = (
        _on(images.device, v) for v in bilinear_weights(in_h, out_h, align, half)
    )
    left, right, x_lerp = (
        _on(images.device, v) for v in bilinear_weights(in_w, out_w, align, half)
    )
    source = images.to(torch.float32)
    x_lerp = x_lerp[:, None]

    def lerp_columns(rows: torch.Tensor) -> torch.Tensor:
        lo, hi = rows.index_select(2, left), rows.index_select(2, right)
        return lo + (hi - lo) * x_lerp

    upper = lerp_columns(source.index_select(1, top))
    lower = lerp_columns(source.index_select(1, bottom))
    torch.add(upper, (lower - upper) * y_lerp[:, None, None], out=out)


def _taps(values: torch.Tensor, axis: int, indices: torch.Tensor, weights: torch.Tensor) -> Any:
    """TensorFlow's Interpolate1D along ``axis`` for every output at once: the four taps
    gathered whole, weighted and summed left to right in float32, the kernel's order, so
    the roundings agree with TensorFlow's and the numpy kernel's."""
    total = values.index_select(axis, indices[:, 0]) * weights[0]
    for k in range(1, 4):
        total += values.index_select(axis, indices[:, k]) * weights[k]
    return total


def resize_bicubic(ctx: OpKernelContext) -> None:
    images, out, align, half = _resize_setup(ctx)
    (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
    if out.numel() == 0:
        return
    rows, row_weights = (_on(images.device, v) for v in bicubic_weights(in_h, out_h, align, half))
    columns, column_weights = (
        _on(images.device, v) for v in bicubic_weights(in_w, out_w, align, half)
    )
    source = images.to(torch.float32)
    # Along the height first (every source column), then the width, as TensorFlow does.
    heights = _taps(source, 1, rows, row_weights.T[:, :, None, None])
    out.copy_(_taps(heights, 2, columns, column_weights.T[:, :, None]))


def crop_and_resize(ctx: OpKernelContext) -> None:
    """The boxes, box_ind and crop_size are host-memory inputs: the sampling positions are
    computed on the host by the op's rules (as the resizes' are) and gathered on the
    device with broadcast index tensors, one row per box."""
    image = tensor_input(ctx, 0)
    boxes, box_ind, crop_size = (host_input(ctx, i) for i in (1, 2, 3))
    shape = crop_and_resize_shape(ctx, tuple(image.shape), boxes.shape, box_ind.shape, crop_size)
    out = output(ctx, 0, shape)
    batch = check_crop_boxes(ctx, boxes, box_ind, image.shape[0])
    if out.numel() == 0:
        return
    (_, in_h, in_w, _), (_, crop_h, crop_w, _) = image.shape, out.shape
    method = str(ctx.attr("method"))
    rows = crop_taps(boxes[:, 0], boxes[:, 2], in_h, crop_h, method)
    columns = crop_taps(boxes[:, 1], boxes[:, 3], in_w, crop_w, method)
    device = image.device
    b = _on(device, batch)[:, None, None]
    top, bottom = _on(device, rows.low)[:, :, None], _on(device, rows.high)[:, :, None]
    left, right = _on(device, columns.low)[:, None, :], _on(device, columns.high)[:, None, :]

    def at(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # [box, h, w, depth], float32
        return image[b, y, x].to(torch.float32)

    if method == "nearest":
        values = at(top, left)
    else:
        x_lerp = _on(device, columns.lerp)[:, None, :, None]
        upper = at(top, left) + (at(top, right) - at(top, left)) * x_lerp
        lower = at(bottom, left) + (at(bottom, right) - at(bottom, left)) * x_lerp
        values = upper + (lower - upper) * _on(device, rows.lerp)[:, :, None, None]
    inside = _on(device, rows.inside[:, :, None] & columns.inside[:, None, :])[..., None]
    extrapolation = torch.tensor(float(ctx.attr("extrapolation_value")), dtype=torch.float32)
    out.copy_(torch.where(inside, values, extrapolation.to(device)))


def resize_nearest_neighbor(ctx: OpKernelContext) -> None:
    images, out, align, half = _resize_setup(ctx)
    (_, in_h, in_w, _), (_, out_h, out_w, _) = images.shape, out.shape
    if out.numel() == 0:
        return
    rows = _on(images.device, nearest_indices(in_h, out_h, align, half))
    columns = _on(images.device, nearest_indices(in_w, out_w, align, half))
    out.copy_(images.index_select(1, rows).index_select(2, columns))


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


TO_DEPTH = {"NHWC": (0, 1, 3, 2, 4, 5), "NCHW": (0, 3, 5, 1, 2, 4)}
TO_SPACE = {"NHWC": (0, 1, 3, 2, 4, 5), "NCHW": (0, 3, 4, 1, 5, 2)}


def space_to_depth(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    block, data_format = int(ctx.attr("block_size")), str(ctx.attr("data_format"))
    shape = space_to_depth_shape(ctx, tuple(x.shape), block, data_format)
    out = output(ctx, 0, shape)
    split = x.reshape(_blocks(tuple(x.shape), block, data_format))
    out.view(_depth(shape, block, data_format)).copy_(split.permute(TO_DEPTH[data_format]))


def depth_to_space(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    block, data_format = int(ctx.attr("block_size")), str(ctx.attr("data_format"))
    shape = depth_to_space_shape(ctx, tuple(x.shape), block, data_format)
    out = output(ctx, 0, shape)
    split = x.reshape(_depth(tuple(x.shape), block, data_format))
    out.view(_blocks(shape, block, data_format)).copy_(split.permute(TO_SPACE[data_format]))


def non_max_suppression_v3(ctx: OpKernelContext) -> None:
    selected = non_max_suppression(ctx, *(host_input(ctx, i) for i in range(5)))
    np.copyto(ctx.allocate_output(0, selected.shape), selected)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def gpu(op: str, types: tuple[Any, ...], **kw: Any) -> Any:
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints={"T": types}, **kw)

    gpu("ResizeBilinear", RESIZE_TYPES, host_memory=["size"])(resize_bilinear)
    gpu("ResizeBicubic", RESIZE_TYPES, host_memory=["size"])(resize_bicubic)
    gpu("ResizeNearestNeighbor", RESIZE_TYPES, host_memory=["size"])(resize_nearest_neighbor)
    gpu("CropAndResize", RESIZE_TYPES, host_memory=["boxes", "box_ind", "crop_size"])(
        crop_and_resize
    )
    lib.kernel(
        "NonMaxSuppressionV3",
        device=GPU,
        backend=BACKEND,
        type_constraints={"T": NMS_TYPES, "T_threshold": NMS_TYPES},
        host_memory=NMS_HOST_MEMORY,
    )(non_max_suppression_v3)
    gpu("SpaceToDepth", d.ALL)(space_to_depth)
    gpu("DepthToSpace", d.ALL)(depth_to_space)
