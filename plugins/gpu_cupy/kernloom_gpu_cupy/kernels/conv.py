"""Convolution, pooling and normalisation kernels (Conv2D, Conv3D, pools, FusedBatchNormV3,
LRN).

Written over the array module ``xp`` (CuPy; numpy in tests), with basic slicing only (no
``as_strided`` windows, which CuPy's arrays do not share with numpy): one strided slice per
window tap gathers the im2col matrix of a convolution (then one matmul), accumulates a
depthwise convolution, or folds a pool. The loops run over the KH * KW taps, never over
pixels. Everything is computed NHWC; NCHW is transposed in and out. The 3-D ops (Conv3D,
Conv3DBackpropInputV2, MaxPool3D, AvgPool3D) run on the same helpers over NDHWC.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext, Window, WindowAttrs, window_attrs
from kernloom.plugin import types as t
from kernloom_gpu_cupy.kernels._host import host_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"


def _lowest(dtype: Any) -> Any:
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


def _compute_dtype(dtype: Any) -> Any:
    return np.float32 if np.dtype(dtype) == np.float16 else dtype


class _Kernels:
    """The kernels, bound to one array module ``xp``."""

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp

    # -- helpers -------------------------------------------------------------------------

    def _nhwc(self, x: Any, attrs: WindowAttrs) -> Any:
        """``x`` channels-last (NHWC, or NDHWC for the 3-D ops)."""
        return x if attrs.channels_last else self.xp.moveaxis(x, 1, -1)

    @staticmethod
    def _spatial(x: Any, attrs: WindowAttrs) -> tuple[int, ...]:
        return tuple(int(x.shape[a]) for a in attrs.spatial_axes)

    def _padded(self, x: Any, window: Window, value: Any = 0) -> Any:
        if not window.padded:
            return x
        pads = list(zip(window.pad_before, window.pad_after, strict=True))
        return self.xp.pad(x, [(0, 0), *pads, (0, 0)], constant_values=value)

    @staticmethod
    def _taps(
        x: Any, window_hw: tuple[int, ...], attrs: WindowAttrs, out_hw: tuple[int, ...]
    ) -> Iterator[tuple[tuple[int, ...], Any]]:
        """Each window position ((i, j), or (i, j, k) in 3-D) and the strided slice of
        what it sees over every output position."""
        for position in np.ndindex(*window_hw):
            spans = (
                slice(i * dl, i * dl + (out - 1) * st + 1, st)
                for i, dl, out, st in zip(
                    position, attrs.dilations, out_hw, attrs.strides, strict=True
                )
            )
            yield position, x[(slice(None), *spans, slice(None))]

    def _store(self, ctx: OpKernelContext, attrs: WindowAttrs, y: Any, index: int = 0) -> None:
        y = y if attrs.channels_last else self.xp.moveaxis(y, -1, 1)
        out = ctx.allocate_output(index, tuple(int(s) for s in y.shape))
        out[...] = y

    @staticmethod
    def _check4(ctx: OpKernelContext, x: Any, what: str = "input", rank: int = 4) -> None:
        if x.ndim != rank:
            raise ctx.fail(f"{what} must be {rank}-D, got shape {list(x.shape)}")

    @staticmethod
    def _filter_hw(ctx: OpKernelContext, f: Any) -> tuple[int, int]:
        if f.ndim != 4:
            raise ctx.fail(f"filter must be 4-D, got shape {list(f.shape)}")
        if f.shape[0] < 1 or f.shape[1] < 1:
            raise ctx.fail(f"the filter's spatial size must be positive, got shape {list(f.shape)}")
        return int(f.shape[0]), int(f.shape[1])

    # -- convolutions --------------------------------------------------------------------

    def conv2d(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        attrs = window_attrs(ctx)
        x, f = ctx.input(0), ctx.input(1)
        self._check4(ctx, x)
        kh, kw = self._filter_hw(ctx, f)
        channels = int(x.shape[attrs.channel_axis])
        group_depth, out_depth = int(f.shape[2]), int(f.shape[3])
        if group_depth == 0 or channels % group_depth or out_depth % (channels // group_depth or 1):
            raise ctx.fail(
                f"input depth {channels} must be a multiple of the filter's input depth "
                f"{group_depth}, and the filter's output depth {out_depth} of the group count"
            )
        window = attrs.window(ctx, self._spatial(x, attrs), (kh, kw))
        dtype = _compute_dtype(x.dtype)
        padded = self._padded(self._nhwc(x, attrs).astype(dtype, copy=False), window)
        n, (oh, ow) = int(x.shape[0]), window.output_hw
        cols = xp.empty((n, oh, ow, kh, kw, channels), dtype)
        for (i, j), tap in self._taps(padded, (kh, kw), attrs, (oh, ow)):
            cols[:, :, :, i, j, :] = tap
        rows, groups = n * oh * ow, channels // group_depth
        per_group = out_depth // groups
        weights = f.astype(dtype, copy=False).reshape(kh, kw, group_depth, groups, per_group)
        grouped = cols.reshape(rows, kh, kw, groups, group_depth).transpose(3, 0, 1, 2, 4)
        product = xp.matmul(
            grouped.reshape(groups, rows, kh * kw * group_depth),
            weights.transpose(3, 0, 1, 2, 4).reshape(groups, kh * kw * group_depth, per_group),
        )
        self._store(ctx, attrs, product.transpose(1, 0, 2).reshape(n, oh, ow, out_depth))

    def conv3d(self, ctx: OpKernelContext) -> None:
        """TensorFlow's CPU Conv3D (no groups): an im2col matrix of the KD * KH * KW taps,
        then one matmul."""
        xp = self.xp
        attrs = window_attrs(ctx)
        x, f = ctx.input(0), ctx.input(1)
        self._check4(ctx, x, rank=5)
        self._check4(ctx, f, "filter", rank=5)
        channels, out_depth = int(x.shape[attrs.channel_axis]), int(f.shape[4])
        if channels != int(f.shape[3]):
            raise ctx.fail(f"input and filter must have the same depth: {channels} vs {f.shape[3]}")
        if f.size == 0:
            raise ctx.fail(
                f"filter must not have zero elements (i.e. all dimensions must be non-zero), "
                f"got shape {list(f.shape)}"
            )
        kernel = tuple(int(k) for k in f.shape[:3])
        window = attrs.window(ctx, self._spatial(x, attrs), kernel)
        dtype = _compute_dtype(x.dtype)
        padded = self._padded(self._nhwc(x, attrs).astype(dtype, copy=False), window)
        n, out_hw = int(x.shape[0]), window.output_hw
        cols = xp.empty((n, *out_hw, *kernel, channels), dtype)
        for position, tap in self._taps(padded, kernel, attrs, out_hw):
            cols[(slice(None), slice(None), slice(None), slice(None), *position)] = tap
        taps = kernel[0] * kernel[1] * kernel[2]
        product = xp.matmul(
            cols.reshape(-1, taps * channels),
            f.astype(dtype, copy=False).reshape(taps * channels, out_depth),
        )
        self._store(ctx, attrs, product.reshape(n, *out_hw, out_depth))

    def depthwise_conv2d(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        attrs = window_attrs(ctx)
        x, f = ctx.input(0), ctx.input(1)
        self._check4(ctx, x)
        kh, kw = self._filter_hw(ctx, f)
        channels, multiplier = int(x.shape[attrs.channel_axis]), int(f.shape[3])
        if f.shape[2] != channels:
            raise ctx.fail(
                f"input depth {channels} must equal the filter's in_channels {f.shape[2]}"
            )
        window = attrs.window(ctx, self._spatial(x, attrs), (kh, kw))
        dtype = _compute_dtype(x.dtype)
        padded = self._padded(self._nhwc(x, attrs).astype(dtype, copy=False), window)
        weights = f.astype(dtype, copy=False)
        n, (oh, ow) = int(x.shape[0]), window.output_hw
        total = xp.zeros((n, oh, ow, channels, multiplier), dtype)
        for (i, j), tap in self._taps(padded, (kh, kw), attrs, (oh, ow)):
            total += tap[..., None] * weights[i, j]
        self._store(ctx, attrs, total.reshape(n, oh, ow, channels * multiplier))

    def conv2d_backprop_input(self, ctx: OpKernelContext) -> None:
        attrs = window_attrs(ctx)
        f, dy = ctx.input(1), ctx.input(2)
        self._check4(ctx, dy, "out_backprop")
        kh, kw = self._filter_hw(ctx, f)
        sizes = [int(v) for v in host_input(ctx, 0).reshape(-1)]
        dy = self._nhwc(dy, attrs)
        if len(sizes) == 2:
            n, h, w, c = int(dy.shape[0]), sizes[0], sizes[1], int(f.shape[2])
        elif len(sizes) == 4 and min(sizes) >= 0:
            n, h, w, c = sizes if attrs.channels_last else (sizes[0], sizes[2], sizes[3], sizes[1])
        else:
            raise ctx.fail(f"input_sizes must be 4 (or 2) non-negative sizes, got {sizes}")
        window = attrs.window(ctx, (h, w), (kh, kw))
        oh, ow = window.output_hw
        if tuple(int(s) for s in dy.shape) != (n, oh, ow, int(f.shape[3])):
            raise ctx.fail(
                f"out_backprop has shape {list(dy.shape)} (NHWC), but input_sizes {sizes} and "
                f"filter {list(f.shape)} give {[n, oh, ow, int(f.shape[3])]}"
            )
        group_depth, out_depth = int(f.shape[2]), int(f.shape[3])
        # TensorFlow's rule (Conv2D's groups); an input of no channels takes any filter.
        if (c or group_depth) and (
            group_depth == 0 or c % group_depth or out_depth % (c // group_depth or 1)
        ):
            raise ctx.fail(
                f"input depth {c} must be a multiple of the filter's input depth "
                f"{group_depth}, and the filter's output depth {out_depth} of the group count"
            )
        self._store(ctx, attrs, self._transpose_correlate(dy, f, attrs, window, (n, h, w, c)))

    def _transpose_correlate(
        self, dy: Any, f: Any, attrs: WindowAttrs, window: Window, x_shape: tuple[int, ...]
    ) -> Any:
        """The input gradient, channels last, of a convolution of an input of shape
        ``x_shape`` ([N, *spatial, C]) with filter [*window, C / G, C_out] (G groups, 1
        unless C is a multiple of the filter's input depth), from channels-last ``dy``: one
        matmul gives every tap's contribution (grouped: one batched matmul, a product per
        group); each tap adds its share onto a canvas as big as the padded input through
        one strided slice, and the padding is cropped off."""
        xp = self.xp
        n, *spatial, c = x_shape
        *kernel, group_depth, out_depth = (int(s) for s in f.shape)
        dtype = _compute_dtype(dy.dtype)
        out = window.output_hw
        canvas = xp.zeros((n, *attrs.gradient_canvas(window, kernel, spatial), c), dtype)
        if dy.size and f.size and canvas.size:
            grads = dy.astype(dtype, copy=False).reshape(-1, out_depth)
            weights = f.astype(dtype, copy=False)
            groups = c // group_depth
            if groups == 1:
                product = xp.matmul(grads, weights.reshape(-1, out_depth).T)
            else:
                # Group g: its C_out / G columns of dy times its filter columns give its
                # C / G input channels at every tap: [G, rows, C_out / G] @ [G, C_out / G,
                # taps * C / G], laid out as [rows, taps, G, C / G] (channel g * C / G + j).
                per_group, taps_count = out_depth // groups, int(np.prod(kernel))
                stacked = xp.matmul(
                    grads.reshape(-1, groups, per_group).transpose(1, 0, 2),
                    weights.reshape(taps_count, group_depth, groups, per_group)
                    .transpose(2, 3, 0, 1)
                    .reshape(groups, per_group, taps_count * group_depth),
                )
                product = stacked.reshape(groups, -1, taps_count, group_depth).transpose(1, 2, 0, 3)
            taps = product.reshape(n, *out, *kernel, c)
            lead = (slice(None),) * (1 + len(out))
            for position, tap in self._taps(canvas, tuple(kernel), attrs, out):
                tap += taps[(*lead, *position)]
        crop = (slice(b, b + size) for b, size in zip(window.pad_before, spatial, strict=True))
        return canvas[(slice(None), *crop, slice(None))]

    def conv3d_backprop_input(self, ctx: OpKernelContext) -> None:
        """TensorFlow's Conv3DBackpropInputV2: ``_transpose_correlate`` after its checks
        (``WindowAttrs.backprop_input_window``)."""
        attrs = window_attrs(ctx)
        f, dy = ctx.input(1), ctx.input(2)
        sizes = [int(v) for v in host_input(ctx, 0).reshape(-1)]
        x_shape, window = attrs.backprop_input_window(
            ctx, sizes, [int(s) for s in f.shape], [int(s) for s in dy.shape]
        )
        grad = self._transpose_correlate(self._nhwc(dy, attrs), f, attrs, window, x_shape)
        self._store(ctx, attrs, grad)

    # -- pooling ---------------------------------------------------------------------------

    def _pool(self, ctx: OpKernelContext) -> tuple[WindowAttrs, Any, Window]:
        attrs = window_attrs(ctx, pooling=True)
        x = ctx.input(0)
        self._check4(ctx, x, rank=attrs.rank + 2)
        return attrs, self._nhwc(x, attrs), attrs.pool_window(ctx, self._spatial(x, attrs))

    def max_pool(self, ctx: OpKernelContext) -> None:
        attrs, x, window = self._pool(ctx)
        padded = self._padded(x, window, _lowest(x.dtype))
        out = self.xp.full((x.shape[0], *window.output_hw, x.shape[-1]), _lowest(x.dtype), x.dtype)
        for _, tap in self._taps(padded, attrs.ksize, attrs, window.output_hw):
            self.xp.maximum(out, tap, out=out)  # NaN propagates
        self._store(ctx, attrs, out)

    def avg_pool(self, ctx: OpKernelContext) -> None:
        attrs, x, window = self._pool(ctx)
        dtype = _compute_dtype(x.dtype)
        padded = self._padded(x.astype(dtype, copy=False), window)
        total = self.xp.zeros((x.shape[0], *window.output_hw, x.shape[-1]), dtype)
        for _, tap in self._taps(padded, attrs.ksize, attrs, window.output_hw):
            total += tap
        counts = attrs.pool_divisor(window, [int(n) for n in x.shape[1:-1]])
        divisor = self.xp.asarray(counts.astype(dtype))
        total /= divisor[..., None]
        self._store(ctx, attrs, total)

    def max_pool_with_argmax(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        attrs, x, window = self._pool(ctx)
        n, h, w, c = (int(s) for s in x.shape)
        (oh, ow), (top, left) = window.output_hw, window.pad_before
        (kh, kw), (sh, sw) = attrs.ksize, attrs.strides
        padded = self._padded(x, window, _lowest(x.dtype))
        taps = [tap for _, tap in self._taps(padded, (kh, kw), attrs, (oh, ow))]
        cells = xp.stack(taps, axis=-1)  # [N, OH, OW, C, KH * KW]
        best = cells.max(axis=-1) if cells.size else xp.zeros((n, oh, ow, c), x.dtype)
        hits = cells == best[..., None]
        if np.dtype(x.dtype).kind == "f":
            hits |= xp.isnan(cells) & xp.isnan(best)[..., None]
        rows = xp.arange(oh)[:, None] * sh - top + xp.arange(kh)[None, :]
        cols = xp.arange(ow)[:, None] * sw - left + xp.arange(kw)[None, :]
        real = ((rows >= 0) & (rows < h))[:, None, :, None] & ((cols >= 0) & (cols < w))[
            None, :, None, :
        ]
        hits &= real.reshape(oh, ow, kh * kw)[None, :, :, None, :]
        first = (
            hits.astype(np.int8).argmax(axis=-1)
            if hits.size
            else xp.zeros((n, oh, ow, c), np.int64)
        )
        in_y = xp.arange(oh)[None, :, None, None] * sh - top + first // kw
        in_x = xp.arange(ow)[None, None, :, None] * sw - left + first % kw
        index = (in_y * w + in_x) * c + xp.arange(c)
        if ctx.attr("include_batch_in_index"):
            index = index + xp.arange(n)[:, None, None, None] * (h * w * c)
        ctx.allocate_output(0, best.shape)[...] = best
        ctx.allocate_output(1, index.shape)[...] = index

    # -- normalisation ---------------------------------------------------------------------

    def fused_batch_norm(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        x, scale, offset = ctx.input(0), ctx.input(1), ctx.input(2)
        data_format = str(ctx.attr("data_format"))
        rank = 5 if data_format in ("NDHWC", "NCDHW") else 4
        if x.ndim != rank:
            raise ctx.fail(f"x must be {rank}-D for data_format {data_format}, got {list(x.shape)}")
        channel_axis = rank - 1 if data_format.endswith("C") else 1
        depth = int(x.shape[channel_axis])
        training = bool(ctx.attr("is_training"))
        factor = float(ctx.attr("exponential_avg_factor"))
        epsilon = np.float32(ctx.attr("epsilon"))
        for index, name in ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")):
            needed = index < 3 or not training or factor != 1
            if needed and tuple(ctx.input(index).shape) != (depth,):
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
                mean = xp.full((depth,), np.nan, np.float32)
                variance = mean.copy()
            else:
                mean = xf.mean(axis=axes, dtype=np.float32)
                variance = xp.square(xf - mean.reshape(shape)).mean(axis=axes, dtype=np.float32)
            unbiased = variance * np.float32(count / max(count - 1, 1))
            if factor == 1:
                running = (mean, unbiased)
            else:
                keep, f32 = np.float32(1 - factor), np.float32(factor)
                running = (
                    keep * ctx.input(3) + f32 * mean,
                    keep * ctx.input(4) + f32 * unbiased,
                )
        else:
            mean, variance = ctx.input(3), ctx.input(4)
            running = (mean, variance)
        # variance + epsilon of 0 (epsilon 0 allowed, as TF): inf gain, NaN where x - mean
        # is 0 too. numpy in tests would warn (an error there); CuPy never warns.
        with np.errstate(all="ignore"):
            gain = (scale / xp.sqrt(variance + epsilon)).astype(np.float32)
            y = (xf - mean.reshape(shape)) * gain.reshape(shape) + offset.reshape(shape)
        ctx.allocate_output(0, x.shape)[...] = y
        for index, value in enumerate((*running, mean, variance), start=1):
            ctx.allocate_output(index, (depth,))[...] = value
        ctx.allocate_output(5, ())[...] = 0

    def lrn(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        x = ctx.input(0)
        self._check4(ctx, x)
        radius = int(ctx.attr("depth_radius"))
        if radius < 0:
            raise ctx.fail(f"depth_radius must be non-negative, got {radius}")
        bias, alpha, beta = (float(ctx.attr(a)) for a in ("bias", "alpha", "beta"))
        xf = x.astype(np.float32, copy=False)
        squares = xp.pad(xf * xf, ((0, 0), (0, 0), (0, 0), (radius, radius)))
        depth = int(x.shape[3])
        window = xp.zeros(xf.shape, np.float32)
        for k in range(2 * radius + 1):  # over the channel window's taps, not the pixels
            window += squares[..., k : k + depth]
        y = xf * xp.power(bias + alpha * window, np.float32(-beta))
        ctx.allocate_output(0, x.shape)[...] = y


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""
    k = _Kernels(xp)

    def gpu(op: str, *types: str, **kw: Any) -> Any:
        allowed = tuple(d for d in t.ALL if d.name in types)
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints={"T": allowed}, **kw)

    floats = ("float16", "float32", "float64")
    pool_types = (*floats, "int32", "int64", "uint8", "int16", "int8", "uint16")
    gpu("Conv2D", *floats, "int32")(k.conv2d)
    gpu("DepthwiseConv2dNative", *floats)(k.depthwise_conv2d)
    gpu("Conv2DBackpropInput", *floats, "int32", host_memory=["input_sizes"])(
        k.conv2d_backprop_input
    )
    gpu("MaxPool", *pool_types)(k.max_pool)
    gpu("AvgPool", *floats)(k.avg_pool)
    gpu("Conv3D", *floats)(k.conv3d)
    gpu("Conv3DBackpropInputV2", *floats, host_memory=["input_sizes"])(k.conv3d_backprop_input)
    gpu("MaxPool3D", "float16", "float32")(k.max_pool)
    gpu("AvgPool3D", *floats)(k.avg_pool)
    gpu("MaxPoolWithArgmax", *pool_types, "uint32", "uint64")(k.max_pool_with_argmax)
    gpu("FusedBatchNormV3", "float16", "float32")(k.fused_batch_norm)
    gpu("LRN", "float16", "float32")(k.lrn)
