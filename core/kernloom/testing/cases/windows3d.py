"""Reference cases: the 3-D window ops (Conv3D, Conv3DBackpropInputV2, MaxPool3D, AvgPool3D).

The references are direct loops over every output position and every window tap of tiny
inputs, in float64, written from TensorFlow's documented semantics (output sizes, SAME
padding with the odd pad at the end, padding that never wins a maximum and is never
counted in a mean): a second formulation, never the kernels' strided-slice code. The
input gradient's reference walks every out_backprop position and filter tap and adds the
product into the input element the tap read in the forward convolution (a scatter, where
the kernels gather one matrix product per tap).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = [
    "backprop_input3d_reference",
    "cases",
    "conv3d_reference",
    "pool3d_reference",
    "window3d",
]


def window3d(
    strides: tuple[int, int, int], padding: str, data_format: str = "NDHWC", **more: Any
) -> dict[str, Any]:
    """A 3-D window op's attrs: ``strides`` over (D, H, W), in ``data_format``'s order;
    ``ksize`` and ``dilations`` given the same way are laid out alike."""

    def laid(values: tuple[int, ...]) -> list[int]:
        return [1, *values, 1] if data_format == "NDHWC" else [1, 1, *values]

    attrs = {"strides": laid(strides), "padding": padding, "data_format": data_format}
    for name in ("ksize", "dilations"):
        if name in more:
            more[name] = laid(more[name])
    return {**attrs, **more}


def _spatial(values: list[int], data_format: str) -> list[int]:
    return values[1:4] if data_format == "NDHWC" else values[2:5]


def _geometry(size: int, window: int, stride: int, dilation: int, padding: str) -> tuple[int, int]:
    """(output size, pad before) from the tf.nn padding notes."""
    span = (window - 1) * dilation + 1
    if padding == "VALID":
        return max(int(np.ceil((size - span + 1) / stride)), 0), 0
    out = int(np.ceil(size / stride))
    return out, max((out - 1) * stride + span - size, 0) // 2


def _loop(
    x: Array,
    attrs: dict[str, Any],
    kernel: list[int],
    dilations: list[int],
    fold: Callable[[Array, list[tuple[int, ...]]], Array],
    out_depth: int,
) -> Array:
    """For every output position of channels-last ``x``: ``fold`` of the input positions its
    window covers inside the input (padding left out), written into an NDHWC result."""
    fmt = attrs.get("data_format", "NDHWC")
    xl = x if fmt == "NDHWC" else np.moveaxis(x, 1, -1)
    strides = _spatial(attrs["strides"], fmt)
    geometry = [
        _geometry(size, k, s, dl, attrs["padding"])
        for size, k, s, dl in zip(xl.shape[1:4], kernel, strides, dilations, strict=True)
    ]
    y = np.zeros((xl.shape[0], *(g[0] for g in geometry), out_depth))
    for out in itertools.product(*(range(g[0]) for g in geometry)):
        taps = []
        for tap in itertools.product(*(range(k) for k in kernel)):
            where = tuple(
                o * s - g[1] + t * dl
                for o, s, g, t, dl in zip(out, strides, geometry, tap, dilations, strict=True)
            )
            if all(0 <= p < size for p, size in zip(where, xl.shape[1:4], strict=True)):
                taps.append((*where, *tap))
        index: tuple[Any, ...] = (slice(None), *out, slice(None))
        y[index] = fold(xl, taps)
    return y if fmt == "NDHWC" else np.moveaxis(y, -1, 1)


def conv3d_reference(attrs: dict[str, Any]) -> Callable[[Array, Array], Array]:
    fmt = attrs.get("data_format", "NDHWC")
    dilations = _spatial(attrs.get("dilations", [1] * 5), fmt)

    def reference(x: Array, f: Array) -> Array:
        def fold(xl: Array, taps: list[Any]) -> Array:
            total = np.zeros((xl.shape[0], f.shape[4]))
            for d, h, w, i, j, k in taps:
                total += xl[:, d, h, w, :].astype(np.float64) @ f[i, j, k].astype(np.float64)
            return total

        y = _loop(x, attrs, list(f.shape[:3]), dilations, fold, f.shape[4])
        return y.astype(x.dtype)

    return reference


def backprop_input3d_reference(
    attrs: dict[str, Any],
) -> Callable[[Array, Array, Array], Array]:
    """Conv3DBackpropInputV2's: for every out_backprop position o and filter tap t, the
    input element that tap read (o * stride - pad_before + t * dilation, if inside the
    input) gains dy[o] @ f[t]^T."""
    fmt = attrs.get("data_format", "NDHWC")
    strides = _spatial(attrs["strides"], fmt)
    dilations = _spatial(attrs.get("dilations", [1] * 5), fmt)

    def reference(input_sizes: Array, f: Array, dy: Array) -> Array:
        sizes = [int(v) for v in input_sizes]
        if fmt != "NDHWC":
            sizes = [sizes[0], *sizes[2:], sizes[1]]
            dy = np.moveaxis(dy, 1, -1)
        spatial = sizes[1:4]
        pads = [
            _geometry(size, k, s, dl, attrs["padding"])[1]
            for size, k, s, dl in zip(spatial, f.shape[:3], strides, dilations, strict=True)
        ]
        dx = np.zeros(sizes)
        for out in itertools.product(*(range(o) for o in dy.shape[1:4])):
            for tap in itertools.product(*(range(k) for k in f.shape[:3])):
                where = tuple(
                    o * s - p + t * dl
                    for o, s, p, t, dl in zip(out, strides, pads, tap, dilations, strict=True)
                )
                if all(0 <= w < size for w, size in zip(where, spatial, strict=True)):
                    read: tuple[Any, ...] = (slice(None), *out, slice(None))
                    write: tuple[Any, ...] = (slice(None), *where, slice(None))
                    dx[write] += dy[read].astype(np.float64) @ f[tap].astype(np.float64).T
        dx = dx if fmt == "NDHWC" else np.moveaxis(dx, -1, 1)
        return dx.astype(dy.dtype)

    return reference


def pool3d_reference(attrs: dict[str, Any], kind: str) -> Callable[[Array], Array]:
    """MaxPool3D's (``kind="max"``: NaN wins) or AvgPool3D's (the real elements' mean)."""
    fmt = attrs.get("data_format", "NDHWC")
    kernel = _spatial(attrs["ksize"], fmt)

    def reference(x: Array) -> Array:
        def fold(xl: Array, taps: list[Any]) -> Array:
            values = np.stack([xl[:, d, h, w, :].astype(np.float64) for d, h, w, *_ in taps])
            folded: Array = values.max(axis=0) if kind == "max" else values.mean(axis=0)
            return folded

        channels = x.shape[-1] if fmt == "NDHWC" else x.shape[1]
        return _loop(x, attrs, kernel, [1, 1, 1], fold, channels).astype(x.dtype)

    return reference


def _conv_cases() -> Iterator[Case]:
    settings: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
        ("valid", (2, 4, 5, 6, 3), (2, 2, 3, 3, 4), window3d((1, 1, 1), "VALID")),
        ("same-strided", (1, 5, 4, 6, 2), (3, 2, 2, 2, 3), window3d((2, 1, 2), "SAME")),
        (
            "same-dilated",
            (1, 6, 5, 4, 2),
            (2, 3, 2, 2, 2),
            window3d((1, 1, 1), "SAME", dilations=(2, 1, 2)),
        ),
        ("ncdhw", (2, 3, 4, 5, 4), (2, 2, 2, 3, 2), window3d((1, 2, 1), "SAME", "NCDHW")),
    ]
    for name, x_shape, f_shape, attrs in settings:
        for dtype in (kl.float32, kl.float64, kl.float16):
            x, f = sample(x_shape, dtype, small=True), sample(f_shape, dtype, small=True)
            yield Case(
                "Conv3D", [x, f], attrs, conv3d_reference(attrs), id=f"Conv3D-{name}-{dtype}"
            )
    empty = window3d((1, 1, 1), "SAME")
    x, f = np.zeros((0, 3, 3, 3, 2), np.float32), sample((2, 2, 2, 2, 3), kl.float32)
    yield Case("Conv3D", [x, f], empty, conv3d_reference(empty), id="Conv3D-empty")


def _backprop_input_cases() -> Iterator[Case]:
    """(id, input_sizes in data_format order, filter shape, attrs): SAME with odd totals
    and strides that skip the input's last rows, VALID, dilations, NCDHW, an empty batch."""
    settings: list[tuple[str, list[int], tuple[int, ...], dict[str, Any]]] = [
        ("valid", [2, 4, 5, 6, 3], (2, 2, 3, 3, 4), window3d((1, 1, 1), "VALID")),
        ("same-strided", [1, 5, 4, 6, 2], (3, 2, 2, 2, 3), window3d((2, 1, 2), "SAME")),
        ("valid-strided", [1, 6, 5, 7, 2], (2, 3, 2, 2, 2), window3d((3, 2, 2), "VALID")),
        (
            "same-dilated",
            [1, 6, 5, 4, 2],
            (2, 3, 2, 2, 2),
            window3d((1, 1, 1), "SAME", dilations=(2, 1, 2)),
        ),
        ("ncdhw", [2, 4, 3, 4, 5], (2, 2, 2, 4, 2), window3d((1, 2, 1), "SAME", "NCDHW")),
        ("empty", [0, 3, 3, 3, 2], (2, 2, 2, 2, 3), window3d((1, 1, 1), "SAME")),
    ]
    for name, sizes, f_shape, attrs in settings:
        fmt = attrs["data_format"]
        spatial = _spatial(sizes, fmt)
        dilations = _spatial(attrs.get("dilations", [1] * 5), fmt)
        out = [
            _geometry(size, k, s, dl, attrs["padding"])[0]
            for size, k, s, dl in zip(
                spatial, f_shape[:3], _spatial(attrs["strides"], fmt), dilations, strict=True
            )
        ]
        dy_shape = (sizes[0], *out, f_shape[4]) if fmt == "NDHWC" else (sizes[0], f_shape[4], *out)
        for dtype in (kl.float32, kl.float64, kl.float16):
            if dtype != kl.float32 and name in ("ncdhw", "empty"):
                continue
            f, dy = sample(f_shape, dtype, small=True), sample(dy_shape, dtype, small=True)
            yield Case(
                "Conv3DBackpropInputV2",
                [np.array(sizes, np.int32 if dtype != kl.float64 else np.int64), f, dy],
                attrs,
                backprop_input3d_reference(attrs),
                id=f"Conv3DBackpropInputV2-{name}-{dtype}",
            )


def _pool_cases() -> Iterator[Case]:
    settings: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
        ("valid", (2, 4, 5, 6, 3), window3d((2, 2, 2), "VALID", ksize=(2, 2, 2))),
        ("same-odd", (1, 5, 4, 6, 2), window3d((2, 1, 2), "SAME", ksize=(3, 2, 3))),
        ("same-stride1", (1, 3, 4, 3, 2), window3d((1, 1, 1), "SAME", ksize=(2, 3, 3))),
        ("ncdhw", (2, 3, 4, 5, 6), window3d((2, 2, 1), "SAME", "NCDHW", ksize=(3, 2, 2))),
    ]
    for name, shape, attrs in settings:
        for dtype in (kl.float32, kl.float16):
            x = sample(shape, dtype)
            yield Case(
                "MaxPool3D",
                [x],
                attrs,
                pool3d_reference(attrs, "max"),
                id=f"MaxPool3D-{name}-{dtype}",
            )
        for dtype in (kl.float32, kl.float64, kl.float16):
            x = sample(shape, dtype)
            yield Case(
                "AvgPool3D",
                [x],
                attrs,
                pool3d_reference(attrs, "avg"),
                id=f"AvgPool3D-{name}-{dtype}",
            )
    # -inf and NaN: the padding never wins, a NaN in the window wins.
    special = np.full((1, 2, 3, 3, 1), -np.inf, np.float32)
    special[0, 1, 1, 0, 0], special[0, 0, 2, 2, 0] = np.nan, 5.0
    same = window3d((1, 1, 1), "SAME", ksize=(2, 2, 2))
    yield Case("MaxPool3D", [special], same, pool3d_reference(same, "max"), id="MaxPool3D-inf-nan")
    empty = window3d((2, 2, 2), "SAME", ksize=(2, 2, 2))
    for op, kind in (("MaxPool3D", "max"), ("AvgPool3D", "avg")):
        x = np.zeros((0, 4, 4, 4, 2), np.float32)
        yield Case(op, [x], empty, pool3d_reference(empty, kind), id=f"{op}-empty")


def cases() -> Iterator[Case]:
    yield from _conv_cases()
    yield from _backprop_input_cases()
    yield from _pool_cases()
