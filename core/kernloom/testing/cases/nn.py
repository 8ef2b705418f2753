"""Reference cases: convolution, pooling and normalisation (Conv2D, pools, batch norm).

The references are direct loops over tiny inputs, in float64, written from TensorFlow's
documented semantics (output sizes, SAME padding with the odd pad at the end, the real
element count of SAME averages, the flattened argmax index): a second formulation, never
the kernels' im2col/window code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = ["cases"]


def strided(strides: tuple[int, int], padding: str, **more: Any) -> dict[str, Any]:
    """A windowed op's (convolution, pooling) attrs in NHWC: ``strides`` over (H, W)."""
    return {"strides": [1, *strides, 1], "padding": padding, **more}


def _pads(
    size: int, window: int, stride: int, dilation: int, padding: str, explicit: Any
) -> tuple[int, int, int]:
    """(output size, pad before, pad after) written from the tf.nn padding notes."""
    span = (window - 1) * dilation + 1
    if padding == "VALID":
        return int(np.ceil((size - span + 1) / stride)), 0, 0
    if padding == "SAME":
        out = int(np.ceil(size / stride))
        total = max((out - 1) * stride + span - size, 0)
        return out, total // 2, total - total // 2
    before, after = explicit
    return (size + before + after - span) // stride + 1, before, after


def _nhwc(x: Array, data_format: str) -> Array:
    return x if data_format == "NHWC" else x.transpose(0, 2, 3, 1)


def _back(y: Array, data_format: str) -> Array:
    return y if data_format == "NHWC" else y.transpose(0, 3, 1, 2)


def _hw(values: list[int], data_format: str) -> tuple[int, int]:
    return (values[1], values[2]) if data_format == "NHWC" else (values[2], values[3])


def _explicit(attrs: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
    pads = attrs.get("explicit_paddings", [])
    if attrs["padding"] != "EXPLICIT":
        return (0, 0), (0, 0)
    h, w = (1, 2) if attrs.get("data_format", "NHWC") == "NHWC" else (2, 3)
    return (pads[2 * h], pads[2 * h + 1]), (pads[2 * w], pads[2 * w + 1])


def _geometry(
    attrs: dict[str, Any], in_hw: tuple[int, int], k_hw: tuple[int, int]
) -> list[tuple[int, int, int, int, int]]:
    """Per axis: (output size, pad before, stride, dilation, input size)."""
    fmt = attrs.get("data_format", "NHWC")
    strides = _hw(attrs["strides"], fmt)
    dilations = _hw(attrs.get("dilations", [1, 1, 1, 1]), fmt)
    explicit = _explicit(attrs)
    out = []
    for a in range(2):
        size, before, _ = _pads(
            in_hw[a], k_hw[a], strides[a], dilations[a], attrs["padding"], explicit[a]
        )
        out.append((size, before, strides[a], dilations[a], in_hw[a]))
    return out


def _taps(
    attrs: dict[str, Any], in_hw: tuple[int, int], k_hw: tuple[int, int]
) -> Iterator[tuple[int, int, int, int, int, int]]:
    """Every (output row i, output col j, filter row p, filter col q, input row r, input
    col s) of a 2-D correlation whose input position lies inside the input (padding adds
    nothing): the loops the convolution references share, written from the definition."""
    h, w = in_hw
    kh, kw = k_hw
    (oh, top, sh, dh, _), (ow, left, sw, dw, _) = _geometry(attrs, in_hw, k_hw)
    for i in range(oh):
        for j in range(ow):
            for p in range(kh):
                for q in range(kw):
                    r, s = i * sh + p * dh - top, j * sw + q * dw - left
                    if 0 <= r < h and 0 <= s < w:
                        yield i, j, p, q, r, s


def _out_hw(attrs: dict[str, Any], in_hw: tuple[int, int], k_hw: tuple[int, int]) -> list[int]:
    return [axis[0] for axis in _geometry(attrs, in_hw, k_hw)]


def conv2d_reference(attrs: dict[str, Any]) -> Any:
    fmt = attrs.get("data_format", "NHWC")

    def reference(x: Array, f: Array) -> Array:
        xs = _nhwc(x, fmt).astype(np.float64)
        n, h, w, c = xs.shape
        kh, kw, group_depth, out_depth = f.shape
        groups = c // group_depth
        per_group = out_depth // groups
        y = np.zeros((n, *_out_hw(attrs, (h, w), (kh, kw)), out_depth))
        for i, j, p, q, r, s in _taps(attrs, (h, w), (kh, kw)):
            for g in range(groups):
                pixels = xs[:, r, s, g * group_depth : (g + 1) * group_depth]
                y[:, i, j, g * per_group : (g + 1) * per_group] += (
                    pixels @ f[p, q, :, g * per_group : (g + 1) * per_group]
                )
        return _back(y, fmt).astype(x.dtype)

    return reference


def depthwise_reference(attrs: dict[str, Any]) -> Any:
    fmt = attrs.get("data_format", "NHWC")

    def reference(x: Array, f: Array) -> Array:
        xs = _nhwc(x, fmt).astype(np.float64)
        n, h, w, c = xs.shape
        kh, kw, _, mult = f.shape
        y = np.zeros((n, *_out_hw(attrs, (h, w), (kh, kw)), c * mult))
        for i, j, p, q, r, s in _taps(attrs, (h, w), (kh, kw)):
            for ch in range(c):
                for m in range(mult):
                    y[:, i, j, ch * mult + m] += xs[:, r, s, ch] * f[p, q, ch, m]
        return _back(y, fmt).astype(x.dtype)

    return reference


def backprop_input_reference(attrs: dict[str, Any]) -> Any:
    """The adjoint of the forward correlation, scattered element by element; grouped as
    ``conv2d_reference`` (group g's input channels get the transposed correlation of its
    output channels with its filter columns)."""
    fmt = attrs.get("data_format", "NHWC")

    def reference(sizes: Array, f: Array, dy: Array) -> Array:
        full = [int(v) for v in sizes]
        n, h, w, c = full if fmt == "NHWC" else (full[0], full[2], full[3], full[1])
        dys = _nhwc(dy, fmt).astype(np.float64)
        kh, kw, group_depth, out_depth = f.shape
        groups = c // group_depth
        per_group = out_depth // groups
        dx = np.zeros((n, h, w, c))
        for i, j, p, q, r, s in _taps(attrs, (h, w), (kh, kw)):
            for g in range(groups):
                outs = slice(g * per_group, (g + 1) * per_group)
                dx[:, r, s, g * group_depth : (g + 1) * group_depth] += (
                    dys[:, i, j, outs] @ f[p, q, :, outs].T
                )
        return _back(dx, fmt).astype(dy.dtype)

    return reference


def _pool_windows(attrs: dict[str, Any], x: Array) -> Iterator[tuple[int, int, Array, int, int]]:
    """(i, j, the real elements of window (i, j) as [N, rows, cols, C], first row, first col)."""
    fmt = attrs.get("data_format", "NHWC")
    xs = _nhwc(x, fmt)
    h, w = xs.shape[1:3]
    k = _hw(attrs["ksize"], fmt)
    (oh, top, sh, _, _), (ow, left, sw, _, _) = _geometry(
        {**attrs, "dilations": [1] * 4}, (h, w), k
    )
    for i in range(oh):
        for j in range(ow):
            r0, s0 = i * sh - top, j * sw - left
            r_lo, s_lo = max(r0, 0), max(s0, 0)
            yield i, j, xs[:, r_lo : min(r0 + k[0], h), s_lo : min(s0 + k[1], w), :], r_lo, s_lo


def _pool_out(attrs: dict[str, Any], x: Array) -> tuple[int, int]:
    fmt = attrs.get("data_format", "NHWC")
    xs = _nhwc(x, fmt)
    geometry = _geometry({**attrs, "dilations": [1] * 4}, xs.shape[1:3], _hw(attrs["ksize"], fmt))
    return geometry[0][0], geometry[1][0]


def max_pool_reference(attrs: dict[str, Any]) -> Any:
    fmt = attrs.get("data_format", "NHWC")

    def reference(x: Array) -> Array:
        n, c = _nhwc(x, fmt).shape[0], _nhwc(x, fmt).shape[3]
        y = np.zeros((n, *_pool_out(attrs, x), c), x.dtype)
        for i, j, real, _, _ in _pool_windows(attrs, x):
            y[:, i, j, :] = real.max(axis=(1, 2))  # np.max propagates NaN
        return _back(y, fmt)

    return reference


def avg_pool_reference(attrs: dict[str, Any]) -> Any:
    fmt = attrs.get("data_format", "NHWC")

    def reference(x: Array) -> Array:
        n, c = _nhwc(x, fmt).shape[0], _nhwc(x, fmt).shape[3]
        y = np.zeros((n, *_pool_out(attrs, x), c))
        for i, j, real, _, _ in _pool_windows(attrs, x):
            y[:, i, j, :] = real.astype(np.float64).mean(axis=(1, 2))  # real elements only
        return _back(y, fmt).astype(x.dtype)

    return reference


def argmax_reference(attrs: dict[str, Any]) -> Any:
    def reference(x: Array) -> tuple[Array, Array]:
        n, h, w, c = x.shape
        oh, ow = _pool_out(attrs, x)
        y = np.zeros((n, oh, ow, c), x.dtype)
        index = np.zeros((n, oh, ow, c), attrs.get("Targmax", kl.int64).numpy_dtype)
        for i, j, real, r_lo, s_lo in _pool_windows(attrs, x):
            for b in range(n):
                for ch in range(c):
                    best, where = None, (0, 0)
                    for p in range(real.shape[1]):
                        for q in range(real.shape[2]):
                            v = real[b, p, q, ch]
                            if best is None or v > best:
                                best, where = v, (p, q)
                    y[b, i, j, ch] = best
                    flat = ((r_lo + where[0]) * w + s_lo + where[1]) * c + ch
                    index[b, i, j, ch] = flat + (
                        b * h * w * c if attrs.get("include_batch_in_index") else 0
                    )
        return y, index

    return reference


def batch_norm_reference(attrs: dict[str, Any]) -> Any:
    fmt = attrs.get("data_format", "NHWC")
    training = attrs.get("is_training", True)
    factor = attrs.get("exponential_avg_factor", 1.0)
    eps = attrs.get("epsilon", 1e-4)

    def reference(
        x: Array, scale: Array, offset: Array, mean: Array, var: Array
    ) -> tuple[Array, ...]:
        axis = x.ndim - 1 if fmt.endswith("C") else 1
        moved = np.moveaxis(x.astype(np.float64), axis, -1).reshape(-1, x.shape[axis])
        count = moved.shape[0]
        if training:
            m = moved.mean(axis=0)
            v = ((moved - m) ** 2).mean(axis=0)
            unbiased = v * count / max(count - 1, 1)
            run_m = (1 - factor) * mean + factor * m if factor != 1 else m
            run_v = (1 - factor) * var + factor * unbiased if factor != 1 else unbiased
        else:
            m, v = mean.astype(np.float64), var.astype(np.float64)
            run_m, run_v = m, v
        y = (moved - m) / np.sqrt(v + eps) * scale + offset
        shape = list(np.moveaxis(x, axis, -1).shape)
        y = np.moveaxis(y.reshape(shape), -1, axis).astype(x.dtype)
        f32 = np.float32
        return (
            y,
            run_m.astype(f32),
            run_v.astype(f32),
            m.astype(f32),
            v.astype(f32),
            np.zeros((), f32),
        )

    return reference


def lrn_reference(attrs: dict[str, Any]) -> Any:
    r = attrs.get("depth_radius", 5)
    bias, alpha, beta = attrs.get("bias", 1.0), attrs.get("alpha", 1.0), attrs.get("beta", 0.5)

    def reference(x: Array) -> Array:
        xs = x.astype(np.float64)
        y = np.zeros_like(xs)
        depth = x.shape[-1]
        for d in range(depth):
            sqr = (xs[..., max(d - r, 0) : min(d + r + 1, depth)] ** 2).sum(axis=-1)
            y[..., d] = xs[..., d] / (bias + alpha * sqr) ** beta
        return y.astype(x.dtype)

    return reference


def _conv_cases() -> Iterator[Case]:
    nchw = "NCHW"
    settings: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
        ("valid", (2, 5, 6, 3), (3, 3, 3, 4), strided((1, 1), "VALID")),
        ("same-stride2-odd", (1, 6, 7, 2), (3, 3, 2, 3), strided((2, 2), "SAME")),
        ("same-even-filter", (1, 5, 5, 2), (2, 4, 2, 2), strided((1, 1), "SAME")),
        ("same-stride3", (2, 7, 8, 2), (2, 2, 2, 3), strided((3, 3), "SAME")),
        ("dilated", (1, 7, 7, 2), (3, 2, 2, 2), strided((1, 1), "SAME", dilations=[1, 2, 3, 1])),
        (
            "explicit",
            (1, 4, 5, 2),
            (3, 3, 2, 2),
            strided((2, 1), "EXPLICIT", explicit_paddings=[0, 0, 2, 1, 0, 3, 0, 0]),
        ),
        ("1x1", (2, 3, 4, 5), (1, 1, 5, 6), strided((1, 1), "VALID")),
        ("1x1-stride2", (1, 5, 5, 3), (1, 1, 3, 2), strided((2, 2), "SAME")),
        ("grouped", (1, 4, 4, 4), (3, 3, 2, 6), strided((1, 1), "SAME")),
        ("empty-batch", (0, 4, 4, 2), (3, 3, 2, 2), strided((1, 1), "SAME")),
        ("window-equals-input", (1, 3, 3, 2), (3, 3, 2, 1), strided((1, 1), "VALID")),
        (
            "wider-than-the-image",
            (1, 3, 3, 4),
            (3, 3, 4, 16),
            strided((1, 1), "SAME", dilations=[1, 2, 1, 1]),
        ),
    ]
    for name, x_shape, f_shape, attrs in settings:
        for dtype in (kl.float32, kl.float64, kl.float16, kl.int32):
            if dtype in (kl.float16, kl.int32) and name not in ("valid", "same-stride2-odd"):
                continue
            x = sample(x_shape, dtype, small=True)
            f = sample(f_shape, dtype, small=True)
            yield Case(
                "Conv2D", [x, f], attrs, conv2d_reference(attrs), id=f"Conv2D-{name}-{dtype}"
            )
        x = sample(x_shape, kl.float32)
        f = sample(f_shape, kl.float32)
        nchw_attrs = {
            **attrs,
            "data_format": nchw,
            "strides": _to_nchw(attrs["strides"]),
            "dilations": _to_nchw(attrs.get("dilations", [1, 1, 1, 1])),
        }
        if "explicit_paddings" in attrs:
            nchw_attrs["explicit_paddings"] = _pads_to_nchw(attrs["explicit_paddings"])
        yield Case(
            "Conv2D",
            [x.transpose(0, 3, 1, 2).copy(), f],
            nchw_attrs,
            conv2d_reference(nchw_attrs),
            id=f"Conv2D-{name}-{nchw}",
        )


def _to_nchw(values: list[int]) -> list[int]:
    return [values[0], values[3], values[1], values[2]]


def _pads_to_nchw(pads: list[int]) -> list[int]:
    pairs = [pads[2 * i : 2 * i + 2] for i in range(4)]
    return [v for i in (0, 3, 1, 2) for v in pairs[i]]


def _depthwise_cases() -> Iterator[Case]:
    settings: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
        ("same", (2, 5, 5, 3), (3, 3, 3, 1), strided((1, 1), "SAME")),
        ("multiplier-stride2", (1, 6, 7, 2), (3, 3, 2, 3), strided((2, 2), "SAME")),
        (
            "valid-dilated",
            (1, 7, 6, 2),
            (2, 3, 2, 2),
            strided((1, 1), "VALID", dilations=[1, 2, 1, 1]),
        ),
        (
            "explicit",
            (1, 4, 4, 2),
            (3, 3, 2, 1),
            strided((1, 1), "EXPLICIT", explicit_paddings=[0, 0, 1, 2, 2, 0, 0, 0]),
        ),
    ]
    for name, x_shape, f_shape, attrs in settings:
        for dtype in (kl.float32, kl.float64, kl.float16):
            x = sample(x_shape, dtype, small=True)
            f = sample(f_shape, dtype, small=True)
            yield Case(
                "DepthwiseConv2dNative",
                [x, f],
                attrs,
                depthwise_reference(attrs),
                id=f"Depthwise-{name}-{dtype}",
            )
    attrs = {"strides": [1, 1, 2, 2], "padding": "SAME", "data_format": "NCHW"}
    x, f = sample((1, 2, 5, 6), kl.float32), sample((3, 3, 2, 2), kl.float32)
    yield Case(
        "DepthwiseConv2dNative", [x, f], attrs, depthwise_reference(attrs), id="Depthwise-NCHW"
    )


def _backprop_cases() -> Iterator[Case]:
    settings: list[tuple[str, list[int], tuple[int, ...], dict[str, Any]]] = [
        ("same-stride2", [2, 7, 6, 3], (3, 3, 3, 4), strided((2, 2), "SAME")),
        (
            "valid-uncovered",
            [1, 8, 7, 2],
            (3, 2, 2, 3),
            strided((3, 2), "VALID"),
        ),
        (
            "dilated",
            [1, 6, 6, 2],
            (2, 3, 2, 2),
            strided((1, 1), "SAME", dilations=[1, 2, 2, 1]),
        ),
        (
            "explicit",
            [1, 4, 5, 2],
            (3, 3, 2, 3),
            strided((2, 1), "EXPLICIT", explicit_paddings=[0, 0, 1, 3, 2, 0, 0, 0]),
        ),
    ]
    for name, sizes, f_shape, attrs in settings:
        geometry = _geometry(attrs, (sizes[1], sizes[2]), (f_shape[0], f_shape[1]))
        dy_shape = (sizes[0], geometry[0][0], geometry[1][0], f_shape[3])
        for dtype in (kl.float32, kl.float64, kl.float16, kl.int32):
            if dtype in (kl.float16, kl.int32) and name != "same-stride2":
                continue
            f = sample(f_shape, dtype, small=True)
            dy = sample(dy_shape, dtype, small=True)
            yield Case(
                "Conv2DBackpropInput",
                [np.array(sizes, np.int32), f, dy],
                attrs,
                backprop_input_reference(attrs),
                id=f"Conv2DBackpropInput-{name}-{dtype}",
            )
    attrs = {"strides": [1, 1, 2, 2], "padding": "SAME", "data_format": "NCHW"}
    sizes = [1, 2, 5, 6]
    f, dy = sample((3, 3, 2, 3), kl.float32), sample((1, 3, 3, 3), kl.float32)
    yield Case(
        "Conv2DBackpropInput",
        [np.array(sizes, np.int32), f, dy],
        attrs,
        backprop_input_reference(attrs),
        id="Conv2DBackpropInput-NCHW",
    )
    yield from _grouped_backprop_cases()


def _grouped_backprop_cases() -> Iterator[Case]:
    """The gradient of a grouped Conv2D (input depth a multiple of the filter's): each
    group's input channels from its own output channels. Inputs from a local generator, so
    that the cases after these keep their inputs."""
    rng = np.random.default_rng(2024)
    settings: list[tuple[str, list[int], tuple[int, ...], dict[str, Any]]] = [
        ("grouped", [1, 4, 4, 4], (3, 3, 2, 6), strided((1, 1), "SAME")),
        ("grouped3-same-stride2", [2, 7, 6, 6], (3, 2, 2, 6), strided((2, 2), "SAME")),
        (
            "grouped-per-channel-dilated",
            [1, 6, 5, 3],
            (2, 2, 1, 6),
            strided((1, 1), "VALID", dilations=[1, 2, 1, 1]),
        ),
    ]
    for name, sizes, f_shape, attrs in settings:
        geometry = _geometry(attrs, (sizes[1], sizes[2]), (f_shape[0], f_shape[1]))
        dy_shape = (sizes[0], geometry[0][0], geometry[1][0], f_shape[3])
        for dtype in (kl.float32, kl.float64, kl.float16, kl.int32):
            if dtype in (kl.float16, kl.int32) and name != "grouped":
                continue
            np_dtype = dtype.numpy_dtype
            if dtype.is_integer:
                f = rng.integers(-3, 4, size=f_shape).astype(np_dtype)
                dy = rng.integers(-3, 4, size=dy_shape).astype(np_dtype)
            else:
                f = rng.standard_normal(f_shape).astype(np_dtype)
                dy = rng.standard_normal(dy_shape).astype(np_dtype)
            yield Case(
                "Conv2DBackpropInput",
                [np.array(sizes, np.int32), f, dy],
                attrs,
                backprop_input_reference(attrs),
                id=f"Conv2DBackpropInput-{name}-{dtype}",
            )
    attrs = {"strides": [1, 1, 2, 2], "padding": "SAME", "data_format": "NCHW"}
    f = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    dy = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    yield Case(
        "Conv2DBackpropInput",
        [np.array([1, 4, 5, 6], np.int32), f, dy],
        attrs,
        backprop_input_reference(attrs),
        id="Conv2DBackpropInput-grouped-NCHW",
    )


def window(
    ksize: tuple[int, int], strides: tuple[int, int], padding: str, **more: Any
) -> dict[str, Any]:
    """A pooling op's attrs for an NHWC window: ``ksize`` and ``strides`` over (H, W)."""
    return {"ksize": [1, *ksize, 1], **strided(strides, padding, **more)}


def _pool_cases() -> Iterator[Case]:
    settings: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
        ("valid-2x2", (2, 4, 6, 3), window((2, 2), (2, 2), "VALID")),
        ("same-3x3-stride2", (1, 5, 6, 2), window((3, 3), (2, 2), "SAME")),
        ("same-odd-pad", (1, 4, 4, 2), window((2, 3), (1, 1), "SAME")),
        ("same-stride3", (1, 7, 5, 1), window((3, 2), (3, 2), "SAME")),
        ("same-pad-at-end-only", (2, 6, 8, 3), window((3, 3), (2, 2), "SAME")),
        ("window-larger-than-input", (1, 2, 3, 2), window((4, 4), (1, 1), "SAME")),
    ]
    for name, shape, attrs in settings:
        for dtype in (kl.float32, kl.float64, kl.float16):
            x = sample(shape, dtype)
            yield Case(
                "MaxPool", [x], attrs, max_pool_reference(attrs), id=f"MaxPool-{name}-{dtype}"
            )
            yield Case(
                "AvgPool", [x], attrs, avg_pool_reference(attrs), id=f"AvgPool-{name}-{dtype}"
            )
        for dtype in (kl.int32, kl.int64, kl.uint8, kl.int8, kl.int16, kl.uint16):
            x = sample(shape, dtype)
            yield Case(
                "MaxPool", [x], attrs, max_pool_reference(attrs), id=f"MaxPool-{name}-{dtype}"
            )
    # Images of more positions than a narrow integer type counts (torch's CPU max pooling
    # kept its argmax in the input's type: an int8 image of 312 positions failed).
    rng = np.random.default_rng(2026)
    narrow: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
        ("int8", (2, 12, 13, 2), window((2, 2), (2, 2), "VALID")),
        ("uint8", (1, 17, 16, 2), window((3, 3), (2, 2), "SAME")),
        ("int16", (1, 130, 129, 2), window((3, 3), (2, 2), "SAME")),
    ]
    for type_name, shape, attrs in narrow:
        info = np.iinfo(type_name)
        x = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(type_name)
        name = f"MaxPool-many-positions-{type_name}"
        yield Case("MaxPool", [x], attrs, max_pool_reference(attrs), id=name)
    explicit = window((2, 2), (1, 2), "EXPLICIT", explicit_paddings=[0, 0, 1, 0, 1, 1, 0, 0])
    x = sample((1, 4, 5, 2), kl.float32)
    yield Case("MaxPool", [x], explicit, max_pool_reference(explicit), id="MaxPool-explicit")
    # -inf and NaN: the padding never wins, a NaN in the window wins.
    special = np.array(
        [[-np.inf, -np.inf, 1.0], [np.nan, -np.inf, 2.0], [3.0, 4.0, -np.inf]], np.float32
    )
    same = window((2, 2), (1, 1), "SAME")
    yield Case(
        "MaxPool", [special[None, :, :, None]], same, max_pool_reference(same), id="MaxPool-inf-nan"
    )
    yield Case(
        "AvgPool", [special[None, :, :, None]], same, avg_pool_reference(same), id="AvgPool-inf-nan"
    )
    for fmt_name, attrs in (
        (
            "max",
            {
                "ksize": [1, 1, 3, 3],
                "strides": [1, 1, 2, 2],
                "padding": "SAME",
                "data_format": "NCHW",
            },
        ),
    ):
        x = sample((2, 3, 5, 6), kl.float32)
        yield Case("MaxPool", [x], attrs, max_pool_reference(attrs), id=f"MaxPool-NCHW-{fmt_name}")
        yield Case("AvgPool", [x], attrs, avg_pool_reference(attrs), id=f"AvgPool-NCHW-{fmt_name}")
    empty = window((2, 2), (2, 2), "SAME")
    yield Case(
        "MaxPool",
        [np.zeros((0, 4, 4, 2), np.float32)],
        empty,
        max_pool_reference(empty),
        id="MaxPool-empty",
    )
    yield Case(
        "AvgPool",
        [np.zeros((2, 4, 4, 0), np.float32)],
        empty,
        avg_pool_reference(empty),
        id="AvgPool-empty",
    )


def _argmax_cases() -> Iterator[Case]:
    settings: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
        ("valid", (2, 4, 6, 3), window((2, 2), (2, 2), "VALID")),
        (
            "same-batch-index",
            (2, 5, 5, 2),
            window((3, 3), (2, 2), "SAME", include_batch_in_index=True),
        ),
        ("same-int32-index", (1, 4, 5, 2), window((2, 3), (1, 2), "SAME", Targmax=kl.int32)),
    ]
    for name, shape, attrs in settings:
        for dtype in (kl.float32, kl.float64, kl.int32, kl.uint8):
            x = sample(shape, dtype, small=dtype.is_integer)  # small integers: many ties
            yield Case(
                "MaxPoolWithArgmax",
                [x],
                attrs,
                argmax_reference(attrs),
                id=f"MaxPoolWithArgmax-{name}-{dtype}",
            )
    # Ties go to the first element in row-major window order; -inf elements beat padding.
    ties = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 2.0], [-np.inf, -np.inf, 2.0]], np.float32)
    same = window((2, 2), (1, 1), "SAME")
    yield Case(
        "MaxPoolWithArgmax",
        [ties[None, :, :, None]],
        same,
        argmax_reference(same),
        id="MaxPoolWithArgmax-ties",
    )


def _batch_norm_cases() -> Iterator[Case]:
    for fmt, shape in (
        ("NHWC", (2, 3, 4, 5)),
        ("NCHW", (2, 5, 3, 4)),
        ("NDHWC", (1, 2, 3, 2, 5)),
        ("NCDHW", (2, 5, 2, 1, 3)),
    ):
        for training in (True, False):
            mode = "train" if training else "infer"
            for factor in (1.0, 0.25) if training else (1.0,):
                for dtype in (kl.float32, kl.float16):
                    attrs = {
                        "data_format": fmt,
                        "is_training": training,
                        "exponential_avg_factor": factor,
                        "epsilon": 0.001,
                    }
                    x = sample(shape, dtype, small=dtype == kl.float16)
                    stats = [
                        sample((5,), kl.float32),
                        sample((5,), kl.float32),
                        sample((5,), kl.float32),
                        sample((5,), kl.float32, positive=True),
                    ]
                    yield Case(
                        "FusedBatchNormV3",
                        [x, *stats],
                        attrs,
                        batch_norm_reference(attrs),
                        id=f"FusedBatchNormV3-{fmt}-{mode}-{factor}-{dtype}",
                    )
    # Training with factor 1 ignores mean and variance: TF lets them be empty.
    attrs = {"is_training": True}
    x = sample((3, 2, 2, 4), kl.float32)
    empty = np.zeros((0,), np.float32)
    yield Case(
        "FusedBatchNormV3",
        [x, sample((4,), kl.float32), sample((4,), kl.float32), empty, empty],
        attrs,
        batch_norm_reference(attrs),
        id="FusedBatchNormV3-empty-statistics",
    )
    # One element per channel: the unbiased variance divides by 1, not 0.
    x = sample((1, 1, 1, 3), kl.float32)
    yield Case(
        "FusedBatchNormV3",
        [x, *(sample((3,), kl.float32, positive=True) for _ in range(4))],
        attrs,
        batch_norm_reference(attrs),
        id="FusedBatchNormV3-one-element",
    )
    yield from _batch_norm_epsilon0_cases()


def _batch_norm_epsilon0_cases() -> Iterator[Case]:
    """Training with epsilon 0 (TensorFlow takes it): y = (x - mean) / sqrt(variance), NaN
    in channel 1, whose elements are all equal (0 / 0). Inputs from a local generator, so
    that the cases after these keep their inputs."""
    rng = np.random.default_rng(2025)
    for fmt, shape in (("NHWC", (2, 3, 4, 5)), ("NCHW", (2, 5, 3, 4))):
        channel_axis = 3 if fmt == "NHWC" else 1
        for factor in (1.0, 0.25):
            for dtype in (kl.float32, kl.float16):
                attrs = {
                    "data_format": fmt,
                    "is_training": True,
                    "exponential_avg_factor": factor,
                    "epsilon": 0.0,
                }
                x = rng.standard_normal(shape)
                np.moveaxis(x, channel_axis, -1)[..., 1] = 1.5
                stats = [rng.standard_normal(5).astype(np.float32) for _ in range(3)]
                stats.append((np.abs(rng.standard_normal(5)) + 0.5).astype(np.float32))
                yield Case(
                    "FusedBatchNormV3",
                    [x.astype(dtype.numpy_dtype), *stats],
                    attrs,
                    batch_norm_reference(attrs),
                    id=f"FusedBatchNormV3-epsilon0-{fmt}-{factor}-{dtype}",
                )


def _lrn_cases() -> Iterator[Case]:
    for name, attrs in (
        ("defaults", {}),
        ("radius2", {"depth_radius": 2, "bias": 2.0, "alpha": 1e-2, "beta": 0.75}),
        ("radius0", {"depth_radius": 0, "bias": 0.5, "alpha": 0.3, "beta": 1.0}),
    ):
        for dtype in (kl.float32, kl.float16):
            x = sample((2, 3, 2, 7), dtype, small=True)
            yield Case("LRN", [x], attrs, lrn_reference(attrs), id=f"LRN-{name}-{dtype}")


def cases() -> Iterator[Case]:
    yield from _conv_cases()
    yield from _depthwise_cases()
    yield from _backprop_cases()
    yield from _pool_cases()
    yield from _argmax_cases()
    yield from _batch_norm_cases()
    yield from _lrn_cases()
