"""Reference cases: image ops (resize, space/depth), BatchMatMulV2 and Einsum.

Every reference is a second formulation that shares no code with the kernels: the resizes
walk the output pixel by pixel with TensorFlow's float32 coordinate arithmetic written
out (C's ``roundf`` as ``floor(v + 0.5)`` in double precision; the bicubic one evaluates
Keys' polynomial directly in float64 at the offset TensorFlow's 1/1024 table rounds to,
so it agrees with the float32 kernels to a few ulps), SpaceToDepth and
DepthToSpace index element by element, BatchMatMulV2 loops over the broadcast batch with
``np.dot`` in a wide type, and Einsum sums every label assignment by brute force. A few
cases carry values worked by hand.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = [
    "brute_einsum",
    "cases",
    "reference_batch_matmul",
    "reference_bicubic",
    "reference_bilinear",
    "reference_crop_and_resize",
    "reference_nearest",
]

f32 = np.float32
RESIZE_TYPES = (
    kl.float16,
    kl.float32,
    kl.float64,
    kl.int8,
    kl.uint8,
    kl.int16,
    kl.uint16,
    kl.int32,
    kl.int64,
)
BATCH_MATMUL_TYPES = (
    kl.float16,
    kl.float32,
    kl.float64,
    kl.int16,
    kl.int32,
    kl.int64,
    kl.uint8,
    kl.uint16,
    kl.uint32,
    kl.uint64,
    kl.complex64,
    kl.complex128,
)
MODES = [(False, False), (True, False), (False, True)]  # (align_corners, half_pixel_centers)


# -- resize references ---------------------------------------------------------------------------


def _scale(in_size: int, out_size: int, align: bool) -> np.float32:
    if align and out_size > 1:
        return f32(in_size - 1) / f32(out_size - 1)
    return f32(in_size) / f32(out_size)


def _nearest_source(i: int, in_size: int, out_size: int, align: bool, half: bool) -> int:
    scale = _scale(in_size, out_size, align)
    v = (f32(i) + f32(0.5)) * scale if half else f32(i) * scale
    # v >= 0, so C's roundf (halves away from zero) is floor(v + 0.5) in exact arithmetic.
    index = math.floor(float(v) + 0.5) if align else math.floor(float(v))
    index = min(index, in_size - 1)
    return max(index, 0) if half else index


def reference_nearest(align: bool, half: bool) -> Callable[..., Array]:
    def reference(images: Array, size: Array) -> Array:
        b, h, w, c = images.shape
        oh, ow = (int(s) for s in size)
        out = np.empty((b, oh, ow, c), images.dtype)
        for y in range(oh):
            sy = _nearest_source(y, h, oh, align, half)
            for x in range(ow):
                out[:, y, x, :] = images[:, sy, _nearest_source(x, w, ow, align, half), :]
        return out

    return reference


def _bilinear_source(i: int, in_size: int, out_size: int, align: bool, half: bool) -> Any:
    scale = _scale(in_size, out_size, align)
    v = (f32(i) + f32(0.5)) * scale - f32(0.5) if half else f32(i) * scale
    low = math.floor(float(v))
    return max(low, 0), min(math.ceil(float(v)), in_size - 1), f32(v - f32(low))


def reference_bilinear(align: bool, half: bool) -> Callable[..., Array]:
    def reference(images: Array, size: Array) -> Array:
        b, h, w, c = images.shape
        oh, ow = (int(s) for s in size)
        source = images.astype(f32)
        if (oh, ow) == (h, w):
            return source
        out = np.empty((b, oh, ow, c), f32)
        for y in range(oh):
            top, bottom, dy = _bilinear_source(y, h, oh, align, half)
            for x in range(ow):
                left, right, dx = _bilinear_source(x, w, ow, align, half)
                tl, tr = source[:, top, left], source[:, top, right]
                bl, br = source[:, bottom, left], source[:, bottom, right]
                upper = tl + (tr - tl) * dx
                lower = bl + (br - bl) * dx
                out[:, y, x] = upper + (lower - upper) * dy
        return out

    return reference


def _keys(a: float, distance: float) -> float:
    """Keys' cubic convolution kernel at ``distance`` (0 beyond 2)."""
    d = abs(distance)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    if d < 2:
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return 0.0


def _bicubic_taps(i: int, in_size: int, out_size: int, align: bool, half: bool) -> Any:
    """The (source index, weight) pairs of output ``i``, in float64 from TensorFlow's float32
    source coordinate, its fraction rounded to 1/1024 (half to even, as ``lrintf``)."""
    # TensorFlow 2.21 reads a 1-pixel side under align_corners at i / out_size.
    scale = _scale(in_size, out_size, align and in_size > 1)
    v = (f32(i) + f32(0.5)) * scale - f32(0.5) if half else f32(i) * scale
    base = math.floor(float(v))
    fraction = round(float(f32(f32(v - f32(base)) * f32(1024)))) / 1024  # round(): to even
    a = -0.5 if half else -0.75
    taps = []
    for k in (-1, 0, 1, 2):
        index = min(max(base + k, 0), in_size - 1)
        weight = _keys(a, fraction - k)
        if half and index != base + k:
            weight = 0.0  # outside the image: dropped, the rest renormalised below
        taps.append((index, weight))
    if half:
        total = sum(w for _, w in taps)
        taps = [(index, w / total) for index, w in taps]
    return taps


def reference_bicubic(align: bool, half: bool) -> Callable[..., Array]:
    def reference(images: Array, size: Array) -> Array:
        b, h, w, c = images.shape
        oh, ow = (int(s) for s in size)
        source = images.astype(np.float64)
        out = np.empty((b, oh, ow, c), np.float64)
        for y in range(oh):
            rows = _bicubic_taps(y, h, oh, align, half)
            for x in range(ow):
                columns = _bicubic_taps(x, w, ow, align, half)
                total = np.zeros((b, c), np.float64)
                for (row, wy), (column, wx) in itertools.product(rows, columns):
                    total = total + source[:, row, column] * (wy * wx)
                out[:, y, x] = total
        return out.astype(f32)

    return reference


def _bicubic_cases() -> Iterator[Case]:
    # Up- and downsampling, 1-pixel images, and a size of 1 under align_corners.
    sizes = [
        ((2, 4, 5, 3), (7, 3)),
        ((1, 6, 7, 2), (3, 9)),
        ((1, 3, 3, 2), (3, 3)),
        ((1, 1, 1, 2), (3, 4)),
        ((1, 5, 1, 1), (2, 4)),
        ((1, 4, 3, 1), (1, 1)),
    ]
    for dtype in RESIZE_TYPES:
        for (shape, size), (align, half) in itertools.product(sizes, MODES):
            yield Case(
                "ResizeBicubic",
                [sample(shape, dtype), np.array(size, np.int32)],
                {"align_corners": align, "half_pixel_centers": half},
                reference_bicubic(align, half),
                id=f"ResizeBicubic-{dtype}-{shape}-{size}-ac{int(align)}-hp{int(half)}",
            )
    # Worked by hand on the row [0, 1, 2, 3]. Legacy, to 8 (scale 0.5): the half-way
    # outputs read taps clamped to the row with Keys' a = -0.75 weights -3/32, 19/32,
    # 19/32, -3/32 (at 0.5: taps 0, 0, 1, 2, so 19/32 - 6/32 = 13/32); the others read
    # one pixel. Half-pixel centres, to 2 (sources 0.5 and 2.5): a = -0.5 weights -1/16,
    # 9/16, 9/16, -1/16, the tap outside the row dropped and the rest divided by 17/16.
    line = np.arange(4, dtype=np.uint8).reshape(1, 1, 4, 1)
    by_hand: list[tuple[dict[str, Any], list[float]]] = [
        ({}, [0, 13 / 32, 1, 48 / 32, 2, 83 / 32, 3, 99 / 32]),
        ({"half_pixel_centers": True}, [7 / 17, 44 / 17]),
    ]
    for attrs, row in by_hand:
        yield Case(
            "ResizeBicubic",
            [line, np.array([1, len(row)], np.int32)],
            attrs,
            lambda i, s, e=row: np.array(e, np.float32).reshape(1, 1, -1, 1),
            id=f"ResizeBicubic-by-hand-{'-'.join(attrs) or 'legacy'}",
        )
    special = np.array([0, np.inf, np.nan, 1, -np.inf, 2], np.float32).reshape(1, 2, 3, 1)
    for align, half in MODES:
        yield Case(
            "ResizeBicubic",
            [special, np.array([3, 5], np.int32)],
            {"align_corners": align, "half_pixel_centers": half},
            reference_bicubic(align, half),
            id=f"ResizeBicubic-nan-inf-ac{int(align)}-hp{int(half)}",
        )
    yield Case(
        "ResizeBicubic",
        [np.zeros((0, 2, 2, 3), np.int32), np.array([4, 1], np.int32)],
        reference=lambda i, s: np.zeros((0, 4, 1, 3), np.float32),
        id="ResizeBicubic-empty-batch",
    )


def _crop_coordinate(start: Any, end: Any, i: int, in_size: int, crop: int) -> np.float32:
    """TensorFlow's float32 sampling position of crop index ``i`` along one axis."""
    last = f32(in_size - 1)
    if crop == 1:  # C++'s 0.5 is a double: the centre is computed in double precision
        return f32(0.5 * float(f32(start) + f32(end)) * float(in_size - 1))
    scale = (f32(end) - f32(start)) * last / f32(crop - 1)
    return f32(f32(start) * last + f32(i) * scale)


def reference_crop_and_resize(method: str, extrapolation: float) -> Callable[..., Array]:
    def reference(image: Array, boxes: Array, box_ind: Array, crop_size: Array) -> Array:
        _, h, w, depth = image.shape
        ch, cw = (int(v) for v in crop_size)
        out = np.full((len(box_ind), ch, cw, depth), f32(extrapolation), f32)
        for n, (y1, x1, y2, x2) in enumerate(boxes):
            picture = image[int(box_ind[n])].astype(f32)
            for i in range(ch):
                y = _crop_coordinate(y1, y2, i, h, ch)
                if not 0 <= y <= h - 1:
                    continue
                for j in range(cw):
                    x = _crop_coordinate(x1, x2, j, w, cw)
                    if not 0 <= x <= w - 1:
                        continue
                    if method == "nearest":  # roundf: halves away from zero (y, x >= 0)
                        row, column = math.floor(float(y) + 0.5), math.floor(float(x) + 0.5)
                        out[n, i, j] = picture[row, column]
                        continue
                    top, left = math.floor(y), math.floor(x)
                    bottom, right = math.ceil(y), math.ceil(x)
                    dy, dx = f32(y - f32(top)), f32(x - f32(left))
                    upper = picture[top, left] + (picture[top, right] - picture[top, left]) * dx
                    lower = (
                        picture[bottom, left]
                        + (picture[bottom, right] - picture[bottom, left]) * dx
                    )
                    out[n, i, j] = upper + (lower - upper) * dy
        return out

    return reference


def _crop_and_resize_cases() -> Iterator[Case]:
    # Whole image, a point, flipped, partly outside (extrapolated), a box inside.
    boxes = np.array(
        [
            [0, 0, 1, 1],
            [0.5, 0.5, 0.5, 0.5],
            [1, 1, 0, 0],
            [-0.3, 0.2, 1.4, 0.9],
            [0.1, 0.25, 0.6, 0.8],
        ],
        np.float32,
    )
    box_ind = np.array([1, 0, 1, 0, 1], np.int32)
    shapes = [(2, 4, 5, 3), (2, 1, 1, 2), (2, 6, 2, 1)]
    for dtype, shape, size, method in itertools.product(
        RESIZE_TYPES, shapes, [(3, 4), (1, 1), (5, 1)], ["bilinear", "nearest"]
    ):
        extrapolation = -1.5 if size == (3, 4) else 0.0
        yield Case(
            "CropAndResize",
            [sample(shape, dtype), boxes, box_ind, np.array(size, np.int32)],
            {"method": method, "extrapolation_value": extrapolation},
            reference_crop_and_resize(method, extrapolation),
            id=f"CropAndResize-{dtype}-{shape}-{size}-{method}",
        )
    # Worked by hand: [[0, 1], [2, 3]], the whole image to 3x3 (steps of 0.5) and the box
    # (0.25, 0.25)-(0.75, 0.75) to 1x1 (its centre, 0.5, 0.5: the mean 1.5; nearest rounds
    # 0.5 up to the pixel (1, 1): 3); the box (0, 0)-(2, 2) to 2x2 reaches 2 (outside: 9).
    square = np.array([[0, 1], [2, 3]], np.float32).reshape(1, 2, 2, 1)
    whole = np.array([[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]], np.float32)
    by_hand: list[tuple[list[float], tuple[int, int], str, Array]] = [
        ([0, 0, 1, 1], (3, 3), "bilinear", whole),
        ([0.25, 0.25, 0.75, 0.75], (1, 1), "bilinear", np.array([[1.5]], np.float32)),
        ([0.25, 0.25, 0.75, 0.75], (1, 1), "nearest", np.array([[3]], np.float32)),
        ([0, 0, 2, 2], (2, 2), "bilinear", np.array([[0, 9], [9, 9]], np.float32)),
    ]
    for box, size, method, expected in by_hand:
        yield Case(
            "CropAndResize",
            [square, np.array([box], np.float32), np.zeros(1, np.int32), np.array(size, np.int32)],
            {"method": method, "extrapolation_value": 9.0},
            lambda *a, e=expected: e.reshape(1, *e.shape, 1),
            id=f"CropAndResize-by-hand-{box}-{size}-{method}",
        )
    special = np.array([0, np.inf, np.nan, 1, -np.inf, 2], np.float32).reshape(1, 2, 3, 1)
    for method in ("bilinear", "nearest"):
        yield Case(
            "CropAndResize",
            [special, boxes, np.zeros(5, np.int32), np.array([3, 5], np.int32)],
            {"method": method},
            reference_crop_and_resize(method, 0.0),
            id=f"CropAndResize-nan-inf-{method}",
        )
    yield Case(
        "CropAndResize",
        [
            sample((2, 3, 3, 2), kl.int32),
            np.zeros((0, 4), np.float32),
            np.zeros(0, np.int32),
            np.array([4, 1], np.int32),
        ],
        reference=lambda *a: np.zeros((0, 4, 1, 2), np.float32),
        id="CropAndResize-no-boxes",
    )


def _resize_cases() -> Iterator[Case]:
    sizes = [((2, 4, 5, 3), (7, 3)), ((1, 3, 3, 2), (3, 3)), ((1, 5, 1, 1), (2, 4))]
    for dtype in RESIZE_TYPES:
        for (shape, size), (align, half) in itertools.product(sizes, MODES):
            images = sample(shape, dtype)
            target = np.array(size, np.int32)
            attrs = {"align_corners": align, "half_pixel_centers": half}
            tag = f"{dtype}-{shape}-{size}-ac{int(align)}-hp{int(half)}"
            yield Case(
                "ResizeBilinear",
                [images, target],
                attrs,
                reference_bilinear(align, half),
                id=f"ResizeBilinear-{tag}",
            )
            yield Case(
                "ResizeNearestNeighbor",
                [images, target],
                attrs,
                reference_nearest(align, half),
                id=f"ResizeNearestNeighbor-{tag}",
            )
    # Worked by hand: [[0, 1], [2, 3]] to 3x3 with align_corners (scale 0.5) and to 4x4 with
    # half-pixel centres (sources -0.25, 0.25, 0.75, 1.25, clamped at the borders).
    square = np.array([[0, 1], [2, 3]], np.float32).reshape(1, 2, 2, 1)
    corners = np.array([[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]], np.float32)
    row = np.array([0, 0.25, 0.75, 1], np.float32)
    half_pixel = row[None, :] + 2 * row[:, None]
    for size, attrs, expected in (
        ((3, 3), {"align_corners": True}, corners),
        ((4, 4), {"half_pixel_centers": True}, half_pixel),
    ):
        yield Case(
            "ResizeBilinear",
            [square, np.array(size, np.int32)],
            attrs,
            lambda i, s, e=expected: e.reshape(1, *e.shape, 1),
            id=f"ResizeBilinear-by-hand-{size[0]}x{size[1]}",
        )
    # Worked by hand: a row of 4 to 3 columns reads 0,1,2 (floor(x * 4/3)), 0,2,3 with
    # align_corners (roundf(x * 1.5): 1.5 rounds up) and 0,2,3 with half-pixel centres.
    line = np.arange(4, dtype=np.int32).reshape(1, 1, 4, 1)
    columns: list[tuple[dict[str, Any], list[int]]] = [
        ({}, [0, 1, 2]),
        ({"align_corners": True}, [0, 2, 3]),
        ({"half_pixel_centers": True}, [0, 2, 3]),
    ]
    for attrs, picked in columns:
        yield Case(
            "ResizeNearestNeighbor",
            [line, np.array([1, 3], np.int32)],
            attrs,
            lambda i, s, e=picked: np.array(e, np.int32).reshape(1, 1, 3, 1),
            id=f"ResizeNearestNeighbor-by-hand-{'-'.join(attrs) or 'legacy'}",
        )
    # NaN and inf propagate as TensorFlow's lerps make them: inf - inf is NaN, even at
    # weight 0 (the neighbours are read whatever the weight).
    special = np.array([0, np.inf, np.nan, 1, -np.inf, 2], np.float32).reshape(1, 2, 3, 1)
    for align, half in MODES:
        for op, ref in (
            ("ResizeBilinear", reference_bilinear),
            ("ResizeNearestNeighbor", reference_nearest),
        ):
            yield Case(
                op,
                [special, np.array([3, 5], np.int32)],
                {"align_corners": align, "half_pixel_centers": half},
                ref(align, half),
                id=f"{op}-nan-inf-ac{int(align)}-hp{int(half)}",
            )
    empty = np.zeros((0, 2, 2, 3), np.float32)
    for op in ("ResizeBilinear", "ResizeNearestNeighbor"):
        yield Case(
            op,
            [empty, np.array([4, 1], np.int32)],
            reference=lambda i, s: np.zeros((0, 4, 1, 3), np.float32),
            id=f"{op}-empty-batch",
        )


# -- space/depth references ----------------------------------------------------------------------


def _ref_space_to_depth(block: int, data_format: str) -> Callable[[Array], Array]:
    def nhwc(x: Array) -> Array:
        b, h, w, c = x.shape
        out = np.empty((b, h // block, w // block, c * block * block), x.dtype)
        for i, j, by, bx, ci in itertools.product(
            range(h // block), range(w // block), range(block), range(block), range(c)
        ):
            out[:, i, j, (by * block + bx) * c + ci] = x[:, i * block + by, j * block + bx, ci]
        return out

    if data_format == "NHWC":
        return nhwc
    return lambda x: nhwc(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _ref_depth_to_space(block: int, data_format: str) -> Callable[[Array], Array]:
    def nhwc(x: Array) -> Array:
        b, h, w, depth = x.shape
        c = depth // (block * block)
        out = np.empty((b, h * block, w * block, c), x.dtype)
        for i, j, d in itertools.product(range(h), range(w), range(depth)):
            by, bx, ci = d // (block * c), (d // c) % block, d % c
            out[:, i * block + by, j * block + bx, ci] = x[:, i, j, d]
        return out

    if data_format == "NHWC":
        return nhwc
    return lambda x: nhwc(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _space_depth_cases() -> Iterator[Case]:
    for dtype in (kl.float32, kl.float64, kl.int32, kl.uint8, kl.bool_, kl.complex64, kl.float16):
        for data_format in ("NHWC", "NCHW"):
            for block, space, depth in (
                (2, (2, 4, 6, 3), (2, 2, 3, 12)),
                (3, (1, 3, 6, 2), (1, 1, 2, 18)),
            ):
                for op, shape, ref in (
                    ("SpaceToDepth", space, _ref_space_to_depth),
                    ("DepthToSpace", depth, _ref_depth_to_space),
                ):
                    if data_format == "NCHW":
                        shape = (shape[0], shape[3], shape[1], shape[2])
                    yield Case(
                        op,
                        [sample(shape, dtype)],
                        {"block_size": block, "data_format": data_format},
                        ref(block, data_format),
                        id=f"{op}-{dtype}-{data_format}-b{block}",
                    )
    # Worked by hand: a 2x2 block of one channel becomes 4 channels in row-major order.
    grid = np.array([[1, 2], [3, 4]], np.int32).reshape(1, 2, 2, 1)
    yield Case(
        "SpaceToDepth",
        [grid],
        {"block_size": 2},
        lambda x: np.array([1, 2, 3, 4], np.int32).reshape(1, 1, 1, 4),
        id="SpaceToDepth-by-hand",
    )
    yield Case(
        "DepthToSpace",
        [np.array([1, 2, 3, 4], np.int32).reshape(1, 1, 1, 4)],
        {"block_size": 2},
        lambda x: grid,
        id="DepthToSpace-by-hand",
    )
    yield Case(
        "SpaceToDepth",
        [np.zeros((0, 4, 2, 3), np.float32)],
        {"block_size": 2},
        lambda x: np.zeros((0, 2, 1, 12), np.float32),
        id="SpaceToDepth-empty",
    )


# -- BatchMatMulV2 and Einsum references -----------------------------------------------------------


def _wide(dtype: np.dtype[Any]) -> Any:
    return {"c": np.complex128, "f": np.float64}.get(dtype.kind, np.int64)


def reference_batch_matmul(adj_x: bool, adj_y: bool) -> Callable[[Array, Array], Array]:
    def adjoint(a: Array) -> Array:
        return np.conj(np.swapaxes(a, -1, -2))

    def reference(x: Array, y: Array) -> Array:
        a = adjoint(x) if adj_x else x
        b = adjoint(y) if adj_y else y
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out = np.empty((*batch, a.shape[-2], b.shape[-1]), _wide(x.dtype))
        for index in np.ndindex(*batch):
            ia = tuple(
                i if n > 1 else 0
                for i, n in zip(index[len(batch) - a.ndim + 2 :], a.shape[:-2], strict=True)
            )
            ib = tuple(
                i if n > 1 else 0
                for i, n in zip(index[len(batch) - b.ndim + 2 :], b.shape[:-2], strict=True)
            )
            out[index] = np.dot(a[ia].astype(out.dtype), b[ib].astype(out.dtype))
        return out.astype(x.dtype)

    return reference


def _batch_matmul_cases() -> Iterator[Case]:
    shapes = [
        ((2, 3, 4), (2, 4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((3, 4), (2, 4, 5)),
        ((3, 4), (4, 2)),
    ]
    for dtype in BATCH_MATMUL_TYPES:
        for (sx, sy), adj_x, adj_y in itertools.product(shapes, (False, True), (False, True)):
            if dtype not in (kl.float32, kl.complex64) and (sx, sy) != shapes[1]:
                continue  # every dtype broadcasts; the two common ones take every shape
            x_shape = (*sx[:-2], sx[-1], sx[-2]) if adj_x else sx
            y_shape = (*sy[:-2], sy[-1], sy[-2]) if adj_y else sy
            yield Case(
                "BatchMatMulV2",
                [sample(x_shape, dtype, small=True), sample(y_shape, dtype, small=True)],
                {"adj_x": adj_x, "adj_y": adj_y},
                reference_batch_matmul(adj_x, adj_y),
                id=f"BatchMatMulV2-{dtype}-{sx}-{sy}-{int(adj_x)}{int(adj_y)}",
            )
    yield Case(
        "BatchMatMulV2",
        [np.ones((0, 3, 4), np.float32), np.ones((4, 2), np.float32)],
        reference=lambda x, y: np.zeros((0, 3, 2), np.float32),
        id="BatchMatMulV2-empty-batch",
    )
    yield Case(
        "BatchMatMulV2",
        [np.ones((2, 3, 0), np.float64), np.ones((1, 0, 4), np.float64)],
        reference=lambda x, y: np.zeros((2, 3, 4)),
        id="BatchMatMulV2-empty-inner-is-zeros",
    )
    # Worked by hand: the adjoint conjugates, [[1j]]^H [[1j]] = -1j * 1j = 1.
    yield Case(
        "BatchMatMulV2",
        [np.array([[1j]], np.complex64), np.array([[1j]], np.complex64)],
        {"adj_x": True},
        lambda x, y: np.array([[1 + 0j]], np.complex64),
        id="BatchMatMulV2-adjoint-conjugates",
    )


def brute_einsum(equation: str) -> Callable[..., Array]:
    """Sum over every assignment of the labels (no ellipsis): the definition itself."""
    left, output = equation.split("->")
    subscripts = left.split(",")

    def reference(*operands: Array) -> Array:
        sizes: dict[str, int] = {}
        for subscript, operand in zip(subscripts, operands, strict=True):
            sizes.update(zip(subscript, operand.shape, strict=True))
        labels = sorted(sizes)
        wide = _wide(operands[0].dtype)
        out = np.zeros([sizes[label] for label in output], wide)
        for values in itertools.product(*(range(sizes[label]) for label in labels)):
            at = dict(zip(labels, values, strict=True))
            term = wide(1)
            for subscript, operand in zip(subscripts, operands, strict=True):
                term = term * operand[tuple(at[label] for label in subscript)].astype(wide)
            out[tuple(at[label] for label in output)] += term
        return out.astype(operands[0].dtype)

    return reference


def _einsum_cases() -> Iterator[Case]:
    labelled: list[tuple[str, list[tuple[int, ...]]]] = [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
        ("bhqd,bhkd->bhqk", [(1, 2, 3, 2), (1, 2, 4, 2)]),
        ("ij->ji", [(2, 3)]),
        ("ij->", [(2, 3)]),
        ("ij->i", [(2, 3)]),
        ("ij,ij->ij", [(2, 3), (2, 3)]),
        ("i,j->ij", [(3,), (2,)]),
        ("ijk,kj->i", [(2, 3, 2), (2, 3)]),
        ("ii->i", [(3, 3)]),
        ("ii->", [(3, 3)]),
        ("iij,jk->ik", [(2, 2, 3), (3, 2)]),
        ("aB,Bc->ca", [(2, 3), (3, 2)]),
        ("ij,jk->ik", [(2, 0), (0, 3)]),
        ("ij,jk->ik", [(0, 2), (2, 3)]),
    ]
    for dtype in (kl.float32, kl.float64, kl.int32, kl.int64, kl.complex64, kl.float16):
        for equation, shapes in labelled:
            if dtype not in (kl.float32, kl.int32) and equation not in ("ij,jk->ik", "ii->i"):
                continue
            yield Case(
                "Einsum",
                [[sample(s, dtype, small=True) for s in shapes]],
                {"equation": equation},
                lambda ops, e=equation: brute_einsum(e)(*ops),
                id=f"Einsum-{dtype}-{equation}-{shapes}",
            )
    # Repeated output labels write a diagonal (zeros elsewhere): worked by hand.
    yield Case(
        "Einsum",
        [[np.array([1.0, 2.0, 3.0], np.float32)]],
        {"equation": "i->ii"},
        lambda ops: np.diag([1.0, 2.0, 3.0]).astype(np.float32),
        id="Einsum-inflate-by-hand",
    )
    yield Case(
        "Einsum",
        [[np.array([[1, 2], [3, 4]], np.int32)]],
        {"equation": "ij->iji"},
        lambda ops: np.array([[[1, 0], [2, 0]], [[0, 3], [0, 4]]], np.int32),
        id="Einsum-inflate-with-free-label-by-hand",
    )
    # Ellipses broadcast between the inputs (numpy's rules), written out with matmul and sum.
    x, y = sample((2, 1, 3, 4), kl.float64), sample((5, 4, 2), kl.float64)
    yield Case(
        "Einsum",
        [[x, y]],
        {"equation": "...ij,...jk->...ik"},
        lambda ops: np.matmul(ops[0], ops[1]),
        id="Einsum-ellipsis-broadcast",
    )
    yield Case(
        "Einsum",
        [[sample((3, 4), kl.float32), sample((2, 4, 5), kl.float32)]],
        {"equation": "...ij,...jk->...ik"},
        lambda ops: np.stack([ops[0].astype(np.float64) @ m for m in ops[1]]).astype(np.float32),
        id="Einsum-ellipsis-on-one-side",
    )
    yield Case(
        "Einsum",
        [[sample((2, 3, 4), kl.float64)]],
        {"equation": "i...->...i"},
        lambda ops: np.moveaxis(ops[0], 0, -1),
        id="Einsum-ellipsis-first",
    )
    yield Case(
        "Einsum",
        [[sample((2, 3, 4), kl.int64)]],
        {"equation": "...j->..."},
        lambda ops: ops[0].sum(axis=-1),
        id="Einsum-ellipsis-reduce",
    )
    yield Case(
        "Einsum",
        [[sample((3, 4), kl.float64), sample((4, 2), kl.float64)]],
        {"equation": "...ij,jk->...ik"},
        lambda ops: ops[0] @ ops[1],
        id="Einsum-ellipsis-covers-nothing",
    )


def cases() -> Iterator[Case]:
    yield from _resize_cases()
    yield from _bicubic_cases()
    yield from _crop_and_resize_cases()
    yield from _space_depth_cases()
    yield from _batch_matmul_cases()
    yield from _einsum_cases()
