"""Convolution, pooling and normalisation kernels (Conv2D, Conv3D, their input gradients,
pools, FusedBatchNormV3, LRN).

No Python loop runs over pixels. A convolution is one matrix product over an im2col matrix
gathered from a strided window view of the padded input (a 1x1, stride-1 convolution needs
no copy at all); depthwise convolution is one ``einsum`` over the same windows; pooling
runs one vectorised ``maximum``/``add`` per window tap over a padded copy (a 3x3/2 max pool
over [8, 114, 114, 32]: 16 ms, against 33 ms reducing the window view over its two window
axes). Layouts: everything is computed NHWC; NCHW is transposed in and out. The same
helpers run the 3-D ops (Conv3D, Conv3DBackpropInputV2, MaxPool3D, AvgPool3D) over NDHWC. float16 is
computed in float32 and rounded once. Timings against torch: benchmarks/CONV.md.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kernloom.plugin import KernelLibrary, OpKernelContext, Window, WindowAttrs, window_attrs
from kernloom_cpu_numpy.kernels._util import Array, lowest

__all__ = ["register"]

CPU = "CPU"


def _compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _nhwc(x: Array, attrs: WindowAttrs) -> Array:
    """``x`` channels-last (NHWC, or NDHWC for the 3-D ops): a view."""
    return x if attrs.channels_last else np.moveaxis(x, 1, -1)


def _spatial(x: Array, attrs: WindowAttrs) -> tuple[int, ...]:
    return tuple(x.shape[a] for a in attrs.spatial_axes)


def _padded(x: Array, window: Window, value: Any = 0) -> Array:
    """Channels-last x with the window's padding around its spatial dimensions."""
    if not window.padded:
        return x
    pads = list(zip(window.pad_before, window.pad_after, strict=True))
    return np.pad(x, [(0, 0), *pads, (0, 0)], constant_values=value)


def _windows(
    x: Array, window_hw: tuple[int, ...], attrs: WindowAttrs, out_hw: tuple[int, ...]
) -> Array:
    """A read-only view [N, *out, *window, C] of every window of the padded channels-last
    ``x`` ([N, OH, OW, KH, KW, C] in 2-D)."""
    n, c = x.shape[0], x.shape[-1]
    sn, *spatial, sc = x.strides
    moves = [s * st for s, st in zip(spatial, attrs.strides, strict=True)]
    taps = [s * dl for s, dl in zip(spatial, attrs.dilations, strict=True)]
    return as_strided(x, (n, *out_hw, *window_hw, c), (sn, *moves, *taps, sc), writeable=False)


def _taps(x: Array, window_hw: tuple[int, ...], attrs: WindowAttrs, out_hw: tuple[int, ...]) -> Any:
    """For each window position (kh, kw): the strided view [N, OH, OW, C] of what it sees
    (a position (kd, kh, kw) and a view [N, OD, OH, OW, C] in 3-D)."""
    for position in np.ndindex(*window_hw):
        yield x[
            (
                slice(None),
                *(
                    slice(i * dl, i * dl + (out - 1) * st + 1, st)
                    for i, dl, out, st in zip(
                        position, attrs.dilations, out_hw, attrs.strides, strict=True
                    )
                ),
                slice(None),
            )
        ]


def _store(ctx: OpKernelContext, attrs: WindowAttrs, result: Array) -> None:
    """Write a channels-last result into output 0 in the op's layout."""
    if not attrs.channels_last:
        result = np.moveaxis(result, -1, 1)
    out = ctx.allocate_output(0, result.shape)
    np.copyto(out, result, "unsafe")


def _filter_hw(ctx: OpKernelContext, f: Array) -> tuple[int, int]:
    if f.ndim != 4:
        raise ctx.fail(f"filter must be 4-D, got shape {list(f.shape)}")
    if f.shape[0] < 1 or f.shape[1] < 1:
        raise ctx.fail(f"the filter's spatial size must be positive, got shape {list(f.shape)}")
    return f.shape[0], f.shape[1]


def _input4(ctx: OpKernelContext, x: Array, what: str = "input", rank: int = 4) -> None:
    if x.ndim != rank:
        raise ctx.fail(f"{what} must be {rank}-D, got shape {list(x.shape)}")


def correlate(x: Array, f: Array, attrs: WindowAttrs, window: Window) -> Array:
    """The channels-last convolution of channels-last ``x`` with filter
    [*window, C / g, C_out] ([KH, KW, ...] or [KD, KH, KW, ...]), grouped when C is a
    multiple of the filter's input depth: one product over the im2col matrix."""
    dtype = _compute_dtype(x.dtype)
    x = _padded(x.astype(dtype, copy=False), window)
    f = f.astype(dtype, copy=False)
    *kernel, group_depth, out_depth = f.shape
    taps = int(np.prod(kernel))
    n, c = x.shape[0], x.shape[-1]
    out_hw = window.output_hw
    rows = n * int(np.prod(out_hw))
    cols = _windows(x, tuple(kernel), attrs, out_hw)
    groups = c // group_depth if group_depth else 1
    if groups == 1:
        product: Array = cols.reshape(rows, taps * c) @ f.reshape(taps * c, out_depth)
        return product.reshape(n, *out_hw, out_depth)
    per_group = out_depth // groups
    grouped = cols.reshape(rows, taps, groups, group_depth).transpose(2, 0, 1, 3)
    weights = f.reshape(taps, group_depth, groups, per_group).transpose(2, 0, 1, 3)
    stacked: Array = grouped.reshape(groups, rows, -1) @ weights.reshape(groups, -1, per_group)
    return stacked.transpose(1, 0, 2).reshape(n, *out_hw, out_depth)


def conv2d(ctx: OpKernelContext) -> None:
    attrs = window_attrs(ctx)
    x, f = ctx.input(0), ctx.input(1)
    _input4(ctx, x)
    window_hw = _filter_hw(ctx, f)
    channels = x.shape[attrs.channel_axis]
    if f.shape[2] == 0 or channels % f.shape[2] or f.shape[3] % (channels // f.shape[2] or 1):
        raise ctx.fail(
            f"input depth {channels} must be a multiple of the filter's input depth "
            f"{f.shape[2]}, and the filter's output depth {f.shape[3]} of the group count"
        )
    if f.size == 0:  # TensorFlow's Conv2D refuses a filter of no elements
        raise ctx.fail(
            f"filter must not have zero elements (i.e. all dimensions must be non-zero), "
            f"got shape {list(f.shape)}"
        )
    window = attrs.window(ctx, _spatial(x, attrs), window_hw)
    _store(ctx, attrs, correlate(_nhwc(x, attrs), f, attrs, window))


def conv3d(ctx: OpKernelContext) -> None:
    """TensorFlow's CPU Conv3D: the input's depth equal to the filter's (no groups)."""
    attrs = window_attrs(ctx)
    x, f = ctx.input(0), ctx.input(1)
    _input4(ctx, x, rank=5)
    _input4(ctx, f, "filter", rank=5)
    channels = x.shape[attrs.channel_axis]
    if channels != f.shape[3]:
        raise ctx.fail(f"input and filter must have the same depth: {channels} vs {f.shape[3]}")
    if f.size == 0:
        raise ctx.fail(
            f"filter must not have zero elements (i.e. all dimensions must be non-zero), "
            f"got shape {list(f.shape)}"
        )
    window = attrs.window(ctx, _spatial(x, attrs), f.shape[:3])
    _store(ctx, attrs, correlate(_nhwc(x, attrs), f, attrs, window))


def depthwise_conv2d(ctx: OpKernelContext) -> None:
    attrs = window_attrs(ctx)
    x, f = ctx.input(0), ctx.input(1)
    _input4(ctx, x)
    window_hw = _filter_hw(ctx, f)
    channels = x.shape[attrs.channel_axis]
    if f.shape[2] != channels:
        raise ctx.fail(f"input depth {channels} must equal the filter's in_channels {f.shape[2]}")
    window = attrs.window(ctx, _spatial(x, attrs), window_hw)
    dtype = _compute_dtype(x.dtype)
    padded = _padded(_nhwc(x, attrs).astype(dtype, copy=False), window)
    cols = _windows(padded, window_hw, attrs, window.output_hw)
    # Plain einsum (one C loop, no temporaries): on a MobileNet layer ([1, 112, 112, 32],
    # 3x3) 2.4 ms, against 2.9 ms for a multiply-add per tap and 13x that with optimize=True
    # (which reshapes the strided windows into a copy for tensordot).
    result = np.einsum("nhwijc,ijcm->nhwcm", cols, f.astype(dtype, copy=False))
    n, oh, ow = result.shape[:3]
    _store(ctx, attrs, result.reshape(n, oh, ow, channels * f.shape[3]))  # n may be 0


def _input_sizes(ctx: OpKernelContext, attrs: WindowAttrs, f: Array, dy: Array) -> list[int]:
    """input_sizes as NHWC sizes (4 given, or H and W with N from dy and C from filter)."""
    sizes = [int(v) for v in np.asarray(ctx.input(0)).reshape(-1)]
    if len(sizes) == 2:
        return [dy.shape[0], sizes[0], sizes[1], f.shape[2]]
    if len(sizes) != 4 or any(v < 0 for v in sizes):
        raise ctx.fail(f"input_sizes must be 4 (or 2) non-negative sizes, got {sizes}")
    return sizes if attrs.channels_last else [sizes[0], sizes[2], sizes[3], sizes[1]]


def conv2d_backprop_input(ctx: OpKernelContext) -> None:
    """dx = the transpose of the forward correlation: each filter tap scatters dy @ w[tap]^T
    back onto the padded input (a loop over the KH * KW taps, each a strided add); grouped
    as Conv2D when the input depth is a multiple of the filter's input depth."""
    attrs = window_attrs(ctx)
    f, dy = ctx.input(1), ctx.input(2)
    _input4(ctx, dy, "out_backprop")
    window_hw = _filter_hw(ctx, f)
    n, h, w, c = _input_sizes(ctx, attrs, f, dy)
    window = attrs.window(ctx, (h, w), window_hw)
    dy = _nhwc(dy, attrs)
    if (dy.shape[0], *dy.shape[1:3]) != (n, *window.output_hw) or dy.shape[3] != f.shape[3]:
        raise ctx.fail(
            f"out_backprop has shape {list(dy.shape)} (NHWC), but input_sizes "
            f"{[n, h, w, c]} and filter {list(f.shape)} give "
            f"{[n, *window.output_hw, f.shape[3]]}"
        )
    _check_groups(ctx, c, f.shape[2], f.shape[3])
    _store(ctx, attrs, transpose_correlate(dy, f, attrs, window, (n, h, w, c)))


def _check_groups(ctx: OpKernelContext, depth: int, group_depth: int, out_depth: int) -> None:
    """Conv2DBackpropInput's grouping rule (TensorFlow's): the input depth a multiple of the
    filter's input depth, and the filter's output depth a multiple of the group count. An
    input of no channels has nothing to compute (TensorFlow accepts any filter then)."""
    if not (depth or group_depth):
        return
    if group_depth == 0 or depth % group_depth or out_depth % (depth // group_depth or 1):
        raise ctx.fail(
            f"input depth {depth} must be a multiple of the filter's input depth "
            f"{group_depth}, and the filter's output depth {out_depth} of the group count"
        )


def transpose_correlate(
    dy: Array, f: Array, attrs: WindowAttrs, window: Window, x_shape: tuple[int, ...]
) -> Array:
    """The adjoint of ``correlate``: the gradient, channels last, of the convolution of an
    input of shape ``x_shape`` ([N, *spatial, C]) with filter [*window, C / G, C_out] (G
    groups, 1 unless C is a multiple of the filter's input depth), given channels-last
    ``dy``. One product gives every tap's contribution, [N * out, C_out] @ [C_out,
    taps * C] (grouped: one per group, [N * out, C_out / G] @ [C_out / G, taps * C / G],
    stacked); each tap then scatters its share onto a canvas as big as the padded input
    with one strided add (a loop over the KH * KW, or KD * KH * KW, taps), and the padding
    is cropped off."""
    n, *spatial, c = x_shape
    *kernel, group_depth, out_depth = f.shape
    dtype = _compute_dtype(dy.dtype)
    out = window.output_hw
    canvas = np.zeros((n, *attrs.gradient_canvas(window, kernel, spatial), c), dtype)
    if dy.size and f.size and canvas.size:
        grads = dy.astype(dtype, copy=False).reshape(-1, out_depth)
        weights = f.astype(dtype, copy=False)
        groups = c // group_depth
        if groups == 1:
            product: Array = grads @ weights.reshape(-1, out_depth).T
        else:
            # Group g: its C_out / G columns of dy times its filter columns, giving its
            # C / G input channels at every tap: [G, rows, C_out / G] @ [G, C_out / G,
            # taps * C / G], then laid out as [rows, taps, G, C / G] (channel g * C / G + j).
            per_group, taps_count = out_depth // groups, int(np.prod(kernel))
            stacked = grads.reshape(-1, groups, per_group).transpose(1, 0, 2) @ (
                weights.reshape(taps_count, group_depth, groups, per_group)
                .transpose(2, 3, 0, 1)
                .reshape(groups, per_group, taps_count * group_depth)
            )
            product = stacked.reshape(groups, -1, taps_count, group_depth).transpose(1, 2, 0, 3)
        taps = product.reshape(n, *out, *kernel, c)
        lead = (slice(None),) * (1 + len(out))
        for position, view in zip(
            np.ndindex(*kernel), _taps(canvas, tuple(kernel), attrs, out), strict=True
        ):
            view += taps[(*lead, *position)]
    crop = (slice(b, b + size) for b, size in zip(window.pad_before, spatial, strict=True))
    result: Array = canvas[(slice(None), *crop, slice(None))]
    return result


def conv3d_backprop_input(ctx: OpKernelContext) -> None:
    """TensorFlow's Conv3DBackpropInputV2: ``transpose_correlate`` after its checks
    (``WindowAttrs.backprop_input_window``)."""
    attrs = window_attrs(ctx)
    f, dy = ctx.input(1), ctx.input(2)
    sizes = [int(v) for v in np.asarray(ctx.input(0)).reshape(-1)]
    x_shape, window = attrs.backprop_input_window(ctx, sizes, f.shape, dy.shape)
    _store(ctx, attrs, transpose_correlate(_nhwc(dy, attrs), f, attrs, window, x_shape))


def _pool_setup(ctx: OpKernelContext) -> tuple[WindowAttrs, Array, Window]:
    attrs = window_attrs(ctx, pooling=True)
    x = ctx.input(0)
    _input4(ctx, x, rank=attrs.rank + 2)
    return attrs, _nhwc(x, attrs), attrs.pool_window(ctx, _spatial(x, attrs))


def max_pool(ctx: OpKernelContext) -> None:
    attrs, x, window = _pool_setup(ctx)
    padded = _padded(x, window, lowest(x.dtype))
    out = np.full((x.shape[0], *window.output_hw, x.shape[-1]), lowest(x.dtype), x.dtype)
    for tap in _taps(padded, attrs.ksize, attrs, window.output_hw):
        np.maximum(out, tap, out=out)  # NaN propagates (TensorFlow's CPU skips it: see docs)
    _store(ctx, attrs, out)


def avg_pool(ctx: OpKernelContext) -> None:
    attrs, x, window = _pool_setup(ctx)
    dtype = _compute_dtype(x.dtype)
    padded = _padded(x.astype(dtype, copy=False), window)
    total = np.zeros((x.shape[0], *window.output_hw, x.shape[-1]), dtype)
    for tap in _taps(padded, attrs.ksize, attrs, window.output_hw):
        total += tap
    total /= attrs.pool_divisor(window, x.shape[1:-1])[..., None].astype(dtype)
    _store(ctx, attrs, total)


def max_pool_with_argmax(ctx: OpKernelContext) -> None:
    attrs, x, window = _pool_setup(ctx)
    n, h, w, c = x.shape
    (oh, ow), (top, left) = window.output_hw, window.pad_before
    kh, kw = attrs.ksize
    padded = _padded(x, window, lowest(x.dtype))
    cols = _windows(padded, (kh, kw), attrs, (oh, ow))  # [N, OH, OW, KH, KW, C]
    y = np.arange(oh)[:, None] * attrs.strides[0] - top + np.arange(kh)[None, :]  # [OH, KH]
    best = cols.max(axis=(3, 4))
    # The first element (row-major in the window) equal to the maximum, padding excluded;
    # for a NaN maximum, the first NaN (MaxPool's rule: a NaN in the window wins, where
    # TensorFlow's CPU kernel skips it; docs/tensorflow_fidelity.md).
    hits = cols == best[:, :, :, None, None, :]
    if x.dtype.kind == "f":
        hits |= np.isnan(cols) & np.isnan(best)[:, :, :, None, None, :]
    xs = np.arange(ow)[:, None] * attrs.strides[1] - left + np.arange(kw)[None, :]  # [OW, KW]
    real = ((y >= 0) & (y < h))[:, None, :, None] & ((xs >= 0) & (xs < w))[None, :, None, :]
    hits &= real[None, :, :, :, :, None]
    flat = hits.transpose(0, 1, 2, 5, 3, 4).reshape(n, oh, ow, c, kh * kw).argmax(axis=-1)
    dy_, dx_ = flat // kw, flat % kw
    in_y = np.arange(oh)[None, :, None, None] * attrs.strides[0] - top + dy_
    in_x = np.arange(ow)[None, None, :, None] * attrs.strides[1] - left + dx_
    index = (in_y * w + in_x) * c + np.arange(c)
    if ctx.attr("include_batch_in_index"):
        index = index + np.arange(n)[:, None, None, None] * (h * w * c)
    ctx.allocate_output(0, best.shape)[...] = best
    out = ctx.allocate_output(1, index.shape)
    np.copyto(out, index, "unsafe")


def fused_batch_norm(ctx: OpKernelContext) -> None:
    x, scale, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    data_format = str(ctx.attr("data_format"))
    rank = 5 if data_format in ("NDHWC", "NCDHW") else 4
    if x.ndim != rank:
        raise ctx.fail(f"x must be {rank}-D for data_format {data_format}, got {list(x.shape)}")
    channel_axis = rank - 1 if data_format.endswith("C") else 1
    depth = x.shape[channel_axis]
    training = bool(ctx.attr("is_training"))
    factor = np.float32(ctx.attr("exponential_avg_factor"))
    epsilon = np.float32(ctx.attr("epsilon"))
    needs_stats = not training or factor != 1
    for index, name in ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")):
        if (index < 3 or needs_stats) and ctx.input(index).shape != (depth,):
            raise ctx.fail(
                f"{name} must have shape [{depth}] (one entry per channel), got "
                f"{list(ctx.input(index).shape)}"
            )
    shape = [1] * rank
    shape[channel_axis] = depth
    axes = tuple(a for a in range(rank) if a != channel_axis)
    xf = x.astype(np.float32, copy=False)
    if training:
        count = x.size // depth if depth else 0
        if count == 0:
            mean = np.full(depth, np.nan, np.float32)
            variance = mean.copy()
        else:
            mean = xf.mean(axis=axes, dtype=np.float32)
            variance = np.square(xf - mean.reshape(shape)).mean(axis=axes, dtype=np.float32)
        unbiased = variance * np.float32(count / max(count - 1, 1))
        if factor == 1:
            running_mean, running_var = mean, unbiased
        else:
            keep = np.float32(1) - factor
            running_mean = keep * ctx.input(3) + factor * mean
            running_var = keep * ctx.input(4) + factor * unbiased
        saved = (mean, variance)
    else:
        mean, variance = ctx.input(3), ctx.input(4)
        running_mean, running_var = mean, variance
        if x.size == 0:  # TensorFlow's kernel: NaN statistics for an empty x, inference too
            running_mean = running_var = np.full(depth, np.nan, np.float32)
        saved = (mean, variance)
    gain = (scale / np.sqrt(variance + epsilon)).astype(np.float32)
    # (x - mean) * gain + offset, not x * gain + (offset - mean * gain): the latter cancels
    # badly when the variance is tiny and the gain large.
    centred = np.subtract(xf, mean.reshape(shape), dtype=np.float32)
    centred *= gain.reshape(shape)
    centred += offset.reshape(shape)
    y = ctx.allocate_output(0, x.shape)
    np.copyto(y, centred, "unsafe")
    for index, value in enumerate((running_mean, running_var, *saved), start=1):
        ctx.allocate_output(index, (depth,))[...] = value
    ctx.allocate_output(5, ())[...] = 0


SLIDING_SUM_RADIUS: Final = 8
"""Up to this ``depth_radius`` LRN sums each channel's window as ``2r + 1`` adds of shifted
slices of one flat, zero-separated copy of the squares, in float32 (inception_v1's two
LRNs, radius 2 on [1, 55, 55, 64] and [1, 55, 55, 192]: 6.7 ms a node through a float64
prefix sum gathered with an index array, 2.2 after, against 1.8 with shifted adds along
the channel axis, which numpy runs row by row); wider windows keep the prefix sum, whose
cost does not grow with the radius."""


def lrn(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    _input4(ctx, x)
    radius = int(ctx.attr("depth_radius"))
    if radius < 0:
        raise ctx.fail(f"depth_radius must be non-negative, got {radius}")
    bias, alpha, beta = (float(ctx.attr(a)) for a in ("bias", "alpha", "beta"))
    xf = x.astype(np.float32, copy=False)
    squares = np.square(xf)
    window = _window_sums(squares, radius)  # a new float32 buffer: scaled in place below
    window *= alpha
    window += bias
    out = ctx.allocate_output(0, x.shape)
    np.copyto(out, xf * _negative_power(window, beta), "unsafe")


def _window_sums(squares: Array, radius: int) -> Array:
    """For each channel (last axis), the sum of ``squares`` over the channels within
    ``radius`` of it (TensorFlow's ``sqr_sum``), float32, in a new buffer (possibly a
    strided view of one)."""
    depth = squares.shape[-1]
    rows = squares.size // depth if depth else 0
    if radius <= SLIDING_SUM_RADIUS and rows:
        # Each row padded with ``radius`` zeros on both sides, all rows in one flat array:
        # a window never reaches into the next row, so the sums are 1-D adds.
        width = depth + 2 * radius
        padded = np.zeros((rows, width), np.float32)
        padded[:, radius : radius + depth] = squares.reshape(rows, depth)
        flat = padded.reshape(-1)
        n = flat.size - 2 * radius
        sums = np.empty(rows * width, np.float32)
        window = sums[:n]
        np.copyto(window, flat[:n])
        for j in range(1, 2 * radius + 1):
            window += flat[j : j + n]
        return sums.reshape(rows, width)[:, :depth].reshape(squares.shape)
    # Sums over the channel window through a prefix sum (float64: no cancellation).
    prefix = np.zeros((*squares.shape[:-1], depth + 1), np.float64)
    np.cumsum(squares, axis=-1, out=prefix[..., 1:])
    channels = np.arange(depth)
    high = np.minimum(channels + radius + 1, depth)
    low = np.maximum(channels - radius, 0)
    return (prefix[..., high] - prefix[..., low]).astype(np.float32)


def _negative_power(base: Array, beta: float) -> Array:
    """``base ** -beta`` in ``base``'s buffer, without ``pow`` for the exponents LRN is used
    with (TensorFlow's kernel special-cases them too): 0.5 (its default), 0.75 (AlexNet,
    GoogLeNet) and 1."""
    if beta == 0.5:
        np.sqrt(base, out=base)
        return np.reciprocal(base, out=base)
    if beta == 0.75:
        root = np.sqrt(base)
        np.sqrt(root, out=base)  # base ** 0.25
        base *= root  # base ** 0.75
        return np.reciprocal(base, out=base)
    if beta == 1.0:
        return np.reciprocal(base, out=base)
    return np.power(base, -beta, out=base)


def register(lib: KernelLibrary) -> None:
    def cpu(op: str, types: tuple[Any, ...] | None = None, **kw: Any) -> Any:
        constraints = {"T": types} if types is not None else None
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints=constraints, **kw)

    cpu("Conv2D")(conv2d)
    cpu("DepthwiseConv2dNative")(depthwise_conv2d)
    cpu("Conv2DBackpropInput", host_memory=["input_sizes"])(conv2d_backprop_input)
    cpu("MaxPool")(max_pool)
    cpu("AvgPool")(avg_pool)
    cpu("Conv3D")(conv3d)
    cpu("Conv3DBackpropInputV2", host_memory=["input_sizes"])(conv3d_backprop_input)
    cpu("MaxPool3D")(max_pool)
    cpu("AvgPool3D")(avg_pool)
    cpu("MaxPoolWithArgmax")(max_pool_with_argmax)
    cpu("FusedBatchNormV3")(fused_batch_norm)
    cpu("LRN")(lrn)
