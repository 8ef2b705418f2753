"""Convolution, pooling and normalisation kernels (Conv2D, Conv3D, pools, FusedBatchNormV3,
LRN).

The same functions run on the torch GPU and, through zero-copy ``torch.from_numpy`` views,
on the numpy CPU device (``register_cpu``). An NHWC tensor seen as NCHW with ``permute``
has torch's channels_last strides, which its convolution and pooling take without a copy,
and their output permuted back is contiguous NHWC again.

TF's padding is asymmetric (SAME puts the odd pad at the end) and torch's is not: a
symmetric pad is passed to torch, an asymmetric one is made with ``F.pad`` first. Integer
convolutions run in float64 (CUDA has no integer convolution; exact below 2**53) and
float16 ones in float32 on the CPU, rounded once at the end. The 3-D ops (Conv3D, its input
gradient and the 3-D pools) share the pooling kernels and helpers, through ``F.conv3d``,
``F.conv_transpose3d`` and the 3-D pools.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
import torch
import torch.nn.functional as F

from kernloom.plugin import (
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    Window,
    WindowAttrs,
    window_attrs,
)
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import (
    cpu_kernel,
    host_input,
    output,
    result,
    tensor_input,
)

__all__ = [
    "CPU_LABELLED_OPS",
    "CPU_PREFERRED_OPS",
    "filter_weights",
    "pad_input",
    "register",
    "register_cpu",
]

Kernel = Callable[[OpKernelContext], None] | type[OpKernel]


def _compute(x: torch.Tensor) -> torch.Tensor:
    """The dtype to compute in: float64 for integers, float32 for float16 on the CPU."""
    if not (x.is_floating_point() or x.is_complex()):
        return x.to(torch.float64)
    if x.dtype == torch.float16 and x.device.type == "cpu":
        return x.float()
    return x


def _nchw(x: torch.Tensor, attrs: WindowAttrs) -> torch.Tensor:
    """``x`` channels-first (NCHW, or NCDHW for the 3-D ops): a view."""
    return x.movedim(-1, 1) if attrs.channels_last else x


def _spatial(x: torch.Tensor, attrs: WindowAttrs) -> tuple[int, ...]:
    return tuple(int(x.shape[a]) for a in attrs.spatial_axes)


def pad_input(x: torch.Tensor, window: Window, value: float = 0.0) -> torch.Tensor:
    """NCHW ``x`` with the window's (possibly asymmetric) padding, in ``x``'s memory order:
    ``F.pad`` of a channels_last view returns a contiguous NCHW tensor, on which torch's
    convolution is 2x and its depthwise convolution 4x slower (ResNet's stem, MobileNet)."""
    if not window.padded:
        return x
    if x.dim() != 4:  # the 3-D ops: F.pad takes the last dimension's pads first
        pairs = zip(reversed(window.pad_before), reversed(window.pad_after), strict=True)
        return F.pad(x, [p for pair in pairs for p in pair], value=value)
    (top, left), (bottom, right) = window.pad_before, window.pad_after
    if x.is_contiguous() or not x.is_contiguous(memory_format=torch.channels_last):
        return F.pad(x, (left, right, top, bottom), value=value)
    n, c, h, w = (int(s) for s in x.shape)
    out = x.new_full((n, h + top + bottom, w + left + right, c), value)
    out[:, top : top + h, left : left + w, :] = x.permute(0, 2, 3, 1)
    return out.permute(0, 3, 1, 2)


def _symmetric(window: Window) -> tuple[int, ...] | None:
    """The padding to hand torch when TF's is symmetric, else None."""
    return window.pad_before if window.pad_before == window.pad_after else None


def _store(ctx: OpKernelContext, attrs: WindowAttrs, y: torch.Tensor, index: int = 0) -> None:
    """Output ``index`` from an NCHW result, in the op's layout and dtype; zero-copy when
    the result already has the layout's memory order."""
    y = y.movedim(1, -1) if attrs.channels_last else y
    dtype = d.torch_dtype(ctx.signature.output_dtypes[index])
    if not (dtype.is_floating_point or dtype.is_complex) and y.is_floating_point():
        y = y.round().to(torch.int64)  # wraps into int32 as TF's integer arithmetic does
    if y.dtype == dtype and (y.is_contiguous() or _host_channels_last(ctx, y)):
        result(ctx, index, y)
        return
    output(ctx, index, y.shape).copy_(y)


def _host_channels_last(ctx: OpKernelContext, y: torch.Tensor) -> bool:
    """An NCHW result in channels_last memory on the numpy CPU device: adopted as it is
    (an NCHW array with NHWC strides, see ``onednn``), not transposed into a new buffer."""
    return (
        ctx.device.backend != "torch"
        and y.dim() == 4
        and y.is_contiguous(memory_format=torch.channels_last)
    )


def filter_weights(f: torch.Tensor) -> torch.Tensor:
    """TF's [KH, KW, C_in, C_out] filter as torch's [C_out, C_in, KH, KW] in channels_last
    memory order (a permuted view sends torch's CPU convolution to a slow path, 4x on a 1x1
    layer). One 2-D transpose, [KH*KW*C_in, C_out] -> [C_out, KH*KW*C_in]: 4x cheaper than
    copying the 4-D permutation, which costs more than the convolution on ResNet's last
    stage."""
    kh, kw, c_in, c_out = (int(s) for s in f.shape)
    flat = _compute(f).reshape(kh * kw * c_in, c_out).t().contiguous()
    return flat.reshape(c_out, kh, kw, c_in).permute(0, 3, 1, 2)


def _pointwise(x: torch.Tensor, f: torch.Tensor, attrs: WindowAttrs) -> torch.Tensor:
    """A 1x1 convolution of NHWC ``x`` (no padding) as one matrix product with the filter
    as it is: no weight copy (9x faster than the convolution on ResNet's 1x1 layers)."""
    stride_h, stride_w = attrs.strides
    picked = x[:, ::stride_h, ::stride_w, :] if (stride_h, stride_w) != (1, 1) else x
    n, h, w, c = (int(s) for s in picked.shape)
    product = _compute(picked).reshape(n * h * w, c) @ _compute(f).reshape(c, -1)
    return product.reshape(n, h, w, -1).permute(0, 3, 1, 2)


def _im2col(x: torch.Tensor, f: torch.Tensor, attrs: WindowAttrs, window: Window) -> Any:
    """The convolution of NHWC ``x`` as one product of its im2col matrix (a strided view of
    the padded input, gathered once) with the filter as it is, returned NCHW. Cheaper than
    torch's convolution when the filter is larger than the im2col matrix (late ResNet
    stages: torch's layout needs a transposed copy of the filter on every call)."""
    kh, kw, c, c_out = (int(s) for s in f.shape)
    padded = pad_input(_compute(x).permute(0, 3, 1, 2), window).permute(0, 2, 3, 1)
    sn, sh, sw, sc = padded.stride()
    (stride_h, stride_w), (dil_h, dil_w) = attrs.strides, attrs.dilations
    n, (oh, ow) = int(x.shape[0]), window.output_hw
    cols = padded.as_strided(
        (n, oh, ow, kh, kw, c),
        (sn, sh * stride_h, sw * stride_w, sh * dil_h, sw * dil_w, sc),
    )
    product = cols.reshape(n * oh * ow, kh * kw * c) @ _compute(f).reshape(kh * kw * c, c_out)
    return product.reshape(n, oh, ow, c_out).permute(0, 3, 1, 2)


def _input4(ctx: OpKernelContext, x: torch.Tensor, what: str = "input", rank: int = 4) -> None:
    if x.dim() != rank:
        raise ctx.fail(f"{what} must be {rank}-D, got shape {list(x.shape)}")


def _filter(ctx: OpKernelContext, index: int) -> torch.Tensor:
    f = tensor_input(ctx, index)
    if f.dim() != 4:
        raise ctx.fail(f"filter must be 4-D, got shape {list(f.shape)}")
    if f.shape[0] < 1 or f.shape[1] < 1:
        raise ctx.fail(f"the filter's spatial size must be positive, got shape {list(f.shape)}")
    return f


def _zeros(ctx: OpKernelContext, attrs: WindowAttrs, n: int, hw: Sequence[int], c: int) -> None:
    shape = (n, *hw, c) if attrs.channels_last else (n, c, *hw)
    output(ctx, 0, shape).zero_()


def conv2d(ctx: OpKernelContext) -> None:
    attrs = window_attrs(ctx)
    x, f = tensor_input(ctx, 0), _filter(ctx, 1)
    _input4(ctx, x)
    channels = int(x.shape[attrs.channel_axis])
    group_depth, out_depth = int(f.shape[2]), int(f.shape[3])
    if group_depth == 0 or channels % group_depth or out_depth % (channels // group_depth or 1):
        raise ctx.fail(
            f"input depth {channels} must be a multiple of the filter's input depth "
            f"{group_depth}, and the filter's output depth {out_depth} of the group count"
        )
    if f.numel() == 0:  # TensorFlow's Conv2D refuses a filter of no elements
        raise ctx.fail(
            f"filter must not have zero elements (i.e. all dimensions must be non-zero), "
            f"got shape {list(f.shape)}"
        )
    window = attrs.window(ctx, _spatial(x, attrs), (int(f.shape[0]), int(f.shape[1])))
    if x.numel() == 0:
        _zeros(ctx, attrs, int(x.shape[0]), window.output_hw, out_depth)
        return
    if attrs.channels_last and group_depth == channels:
        if f.shape[:2] == (1, 1) and not window.padded:
            _store(ctx, attrs, _pointwise(x, f, attrs))
            return
        if int(x.shape[0]) * window.output_hw[0] * window.output_hw[1] < out_depth:
            _store(ctx, attrs, _im2col(x, f, attrs, window))
            return
    padding = _symmetric(window)
    xc = _compute(_nchw(x, attrs))
    y = F.conv2d(
        xc if padding is not None else pad_input(xc, window),
        filter_weights(f),
        stride=attrs.strides,
        padding=padding or 0,
        dilation=attrs.dilations,
        groups=channels // group_depth,
    )
    _store(ctx, attrs, y)


def conv3d(ctx: OpKernelContext) -> None:
    """TensorFlow's CPU Conv3D (no groups) through ``F.conv3d``; asymmetric SAME padding
    is made with ``F.pad`` first."""
    attrs = window_attrs(ctx)
    x, f = tensor_input(ctx, 0), tensor_input(ctx, 1)
    _input4(ctx, x, rank=5)
    _input4(ctx, f, "filter", rank=5)
    channels = int(x.shape[attrs.channel_axis])
    if channels != int(f.shape[3]):
        raise ctx.fail(f"input and filter must have the same depth: {channels} vs {f.shape[3]}")
    if f.numel() == 0:
        raise ctx.fail(
            f"filter must not have zero elements (i.e. all dimensions must be non-zero), "
            f"got shape {list(f.shape)}"
        )
    window = attrs.window(ctx, _spatial(x, attrs), tuple(int(k) for k in f.shape[:3]))
    if x.numel() == 0:
        _zeros(ctx, attrs, int(x.shape[0]), window.output_hw, int(f.shape[4]))
        return
    padding = _symmetric(window)
    xc = _compute(_nchw(x, attrs))
    y = F.conv3d(
        xc if padding is not None else pad_input(xc, window),
        _compute(f).permute(4, 3, 0, 1, 2).contiguous(),
        stride=attrs.strides,
        padding=padding or 0,
        dilation=attrs.dilations,
    )
    _store(ctx, attrs, y)


def depthwise_conv2d(ctx: OpKernelContext) -> None:
    attrs = window_attrs(ctx)
    x, f = tensor_input(ctx, 0), _filter(ctx, 1)
    _input4(ctx, x)
    channels, multiplier = int(x.shape[attrs.channel_axis]), int(f.shape[3])
    if f.shape[2] != channels:
        raise ctx.fail(f"input depth {channels} must equal the filter's in_channels {f.shape[2]}")
    window = attrs.window(ctx, _spatial(x, attrs), (int(f.shape[0]), int(f.shape[1])))
    if x.numel() == 0 or f.numel() == 0:
        _zeros(ctx, attrs, int(x.shape[0]), window.output_hw, channels * multiplier)
        return
    padding = _symmetric(window)
    xc = _compute(_nchw(x, attrs))
    weights = _compute(f).permute(2, 3, 0, 1).reshape(channels * multiplier, 1, *f.shape[:2])
    weights = weights.contiguous()
    y = F.conv2d(
        xc if padding is not None else pad_input(xc, window),
        weights,
        stride=attrs.strides,
        padding=padding or 0,
        dilation=attrs.dilations,
        groups=channels,
    )
    _store(ctx, attrs, y)


def conv2d_backprop_input(ctx: OpKernelContext) -> None:
    """``conv_transpose2d`` without padding gives the whole padded input's gradient; TF's
    (asymmetric) padding is then cropped off, and rows no window reached are zeros. Grouped
    as Conv2D when the input depth is a multiple of the filter's input depth."""
    attrs = window_attrs(ctx)
    f, dy = _filter(ctx, 1), tensor_input(ctx, 2)
    _input4(ctx, dy, "out_backprop")
    sizes = [int(v) for v in host_input(ctx, 0).reshape(-1)]
    dy_hw = _spatial(dy, attrs)
    if len(sizes) == 2:
        n, h, w, c = int(dy.shape[0]), sizes[0], sizes[1], int(f.shape[2])
    elif len(sizes) == 4 and min(sizes) >= 0:
        n, h, w, c = sizes if attrs.channels_last else (sizes[0], sizes[2], sizes[3], sizes[1])
    else:
        raise ctx.fail(f"input_sizes must be 4 (or 2) non-negative sizes, got {sizes}")
    window = attrs.window(ctx, (h, w), (int(f.shape[0]), int(f.shape[1])))
    dy_depth = int(dy.shape[attrs.channel_axis])
    if (int(dy.shape[0]), *dy_hw) != (n, *window.output_hw) or dy_depth != f.shape[3]:
        raise ctx.fail(
            f"out_backprop has shape {list(dy.shape)}, but input_sizes {sizes} and filter "
            f"{list(f.shape)} give N={n}, H, W={list(window.output_hw)}, C={f.shape[3]}"
        )
    group_depth, out_depth = int(f.shape[2]), int(f.shape[3])
    # TensorFlow's rule (Conv2D's groups); an input of no channels takes any filter.
    if (c or group_depth) and (
        group_depth == 0 or c % group_depth or out_depth % (c // group_depth or 1)
    ):
        raise ctx.fail(
            f"input depth {c} must be a multiple of the filter's input depth {group_depth}, "
            f"and the filter's output depth {out_depth} of the group count"
        )
    if dy.numel() == 0 or f.numel() == 0 or h * w == 0 or c == 0:
        _zeros(ctx, attrs, n, (h, w), c)
        return
    weights = filter_weights(f)  # [C_out, C / G, KH, KW]: conv_transpose2d's grouped layout
    _store(ctx, attrs, _transpose_conv(dy, weights, attrs, window, (h, w), c // group_depth))


def _transpose_conv(
    dy: torch.Tensor,
    weights: torch.Tensor,
    attrs: WindowAttrs,
    window: Window,
    spatial: Sequence[int],
    groups: int = 1,
) -> torch.Tensor:
    """The input gradient, NCHW (NCDHW), of a convolution with torch's ``weights``
    [C_out, C / groups, *window]: ``conv_transpose2d``/``3d`` without padding gives the
    whole padded input's gradient; TF's (asymmetric) padding is then cropped off, and rows
    no window reached (a stride that skips the last ones) are padded back as zeros."""
    transpose = F.conv_transpose2d if attrs.rank == 2 else F.conv_transpose3d
    full = transpose(
        _compute(_nchw(dy, attrs)),
        weights,
        stride=attrs.strides,
        dilation=attrs.dilations,
        groups=groups,
    )
    pads: list[int] = []  # F.pad: the last dimension's (before, after) first
    for before, size, have in reversed(
        list(zip(window.pad_before, spatial, full.shape[2:], strict=True))
    ):
        pads += [-before, before + size - int(have)]
    return F.pad(full, pads)


def conv3d_backprop_input(ctx: OpKernelContext) -> None:
    """TensorFlow's Conv3DBackpropInputV2 through ``conv_transpose3d``, after its checks
    (``WindowAttrs.backprop_input_window``)."""
    attrs = window_attrs(ctx)
    f, dy = tensor_input(ctx, 1), tensor_input(ctx, 2)
    sizes = [int(v) for v in host_input(ctx, 0).reshape(-1)]
    shape = [int(s) for s in f.shape]
    (n, *spatial, c), window = attrs.backprop_input_window(
        ctx, sizes, shape, [int(s) for s in dy.shape]
    )
    if dy.numel() == 0 or f.numel() == 0 or 0 in spatial:
        _zeros(ctx, attrs, n, spatial, c)
        return
    weights = _compute(f).permute(4, 3, 0, 1, 2).contiguous()  # [C_out, C, KD, KH, KW]
    _store(ctx, attrs, _transpose_conv(dy, weights, attrs, window, spatial))


def _lowest(x: torch.Tensor) -> float:
    return float("-inf") if x.is_floating_point() else float(torch.iinfo(x.dtype).min)


def _pool_input(ctx: OpKernelContext) -> tuple[WindowAttrs, torch.Tensor, Window]:
    attrs = window_attrs(ctx, pooling=True)
    x = tensor_input(ctx, 0)
    _input4(ctx, x, rank=attrs.rank + 2)
    return attrs, x, attrs.pool_window(ctx, _spatial(x, attrs))


def max_pool(ctx: OpKernelContext) -> None:
    attrs, x, window = _pool_input(ctx)
    if x.numel() == 0:
        _zeros(ctx, attrs, int(x.shape[0]), window.output_hw, int(x.shape[attrs.channel_axis]))
        return
    xc = _nchw(x, attrs)
    if xc.dtype == torch.float16 and xc.device.type == "cpu":
        xc = xc.float()
    elif xc.dtype in _NARROW_INTEGERS and xc.device.type == "cpu":
        # torch's CPU max pooling keeps its argmax in the input's type: past 127 positions
        # per image an int8 input failed ("input_depth * input_height * input_width <=
        # integer_t max"). A maximum is exact in int32; _store casts it back.
        xc = xc.to(torch.int32)
    own = _torch_padding(attrs, window, _spatial(x, attrs))
    if own is not None:  # no padded copy: torch's padding never wins either
        padding, ceil_mode = own
        y = _MAX_POOL[attrs.rank](
            _pooling_layout(xc), attrs.ksize, attrs.strides, padding, ceil_mode=ceil_mode
        )
    else:
        padded = _pooling_layout(pad_input(xc, window, _lowest(xc)))
        y = _MAX_POOL[attrs.rank](padded, attrs.ksize, attrs.strides)
    _store(ctx, attrs, y)


_NARROW_INTEGERS: Final = frozenset({torch.int8, torch.uint8, torch.int16})
_MAX_POOL: Final[dict[int, Any]] = {2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL: Final[dict[int, Any]] = {2: F.avg_pool2d, 3: F.avg_pool3d}


def _pooling_layout(x: torch.Tensor) -> torch.Tensor:
    """``x`` as torch's CPU pooling wants it: channels-last. Its channels-first kernels ran
    5-10x slower (max 3x3/1 over [1, 192, 27, 27], two threads: 1.33 ms, against 0.15
    through a channels-last copy and back; average 0.47 against 0.07), so an NCHW graph's
    tensor is copied into that layout first; an NHWC graph's (a permuted view) has it."""
    layout = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
    if x.device.type != "cpu" or x.is_contiguous(memory_format=layout):
        return x
    return x.contiguous(memory_format=layout)


def _torch_padding(
    attrs: WindowAttrs, window: Window, input_hw: tuple[int, ...]
) -> tuple[tuple[int, ...], bool] | None:
    """(padding, ceil_mode) making torch's pooling windows TF's, without a padded copy:
    TF's padding when symmetric (torch allows up to half the window), or, when TF pads only
    at the end, none with ceil_mode (torch's last window may then overhang the input)."""
    k, s = attrs.ksize, attrs.strides
    if window.pad_before == window.pad_after:
        if all(2 * p <= w for p, w in zip(window.pad_before, k, strict=True)):
            return window.pad_before, False
        return None
    if any(window.pad_before):
        return None
    ceil = tuple(-(-(size - w) // st) + 1 for size, w, st in zip(input_hw, k, s, strict=True))
    return ((0,) * attrs.rank, True) if ceil == window.output_hw else None


def avg_pool(ctx: OpKernelContext) -> None:
    attrs, x, window = _pool_input(ctx)
    if x.numel() == 0:
        _zeros(ctx, attrs, int(x.shape[0]), window.output_hw, int(x.shape[attrs.channel_axis]))
        return
    xc = _compute(_nchw(x, attrs))
    own = _torch_padding(attrs, window, _spatial(x, attrs))
    if own is not None:  # the divisor counts real elements only, as TF's
        padding, ceil_mode = own
        y = _AVG_POOL[attrs.rank](
            _pooling_layout(xc),
            attrs.ksize,
            attrs.strides,
            padding,
            ceil_mode=ceil_mode,
            count_include_pad=False,
        )
        _store(ctx, attrs, y)
        return
    padded = _pooling_layout(pad_input(xc, window))
    total = _AVG_POOL[attrs.rank](padded, attrs.ksize, attrs.strides, divisor_override=1)
    counts = attrs.pool_divisor(window, _spatial(x, attrs))
    divisor = torch.as_tensor(counts, dtype=total.dtype, device=total.device)
    _store(ctx, attrs, total / divisor)


def max_pool_with_argmax(ctx: OpKernelContext) -> None:
    """Over the window view of the padded input: the maximum, then the first element (row
    major in the window) equal to it that is not padding (the first NaN for NaN)."""
    attrs, x, window = _pool_input(ctx)
    n, h, w, c = (int(s) for s in x.shape)
    (oh, ow), (top, left) = window.output_hw, window.pad_before
    (kh, kw), (sh, sw) = attrs.ksize, attrs.strides
    padded = pad_input(x.permute(0, 3, 1, 2), window, _lowest(x)).permute(0, 2, 3, 1)
    cells = padded.unfold(1, kh, sh).unfold(2, kw, sw).reshape(n, oh, ow, c, kh * kw)
    best = (
        cells.amax(dim=-1)
        if cells.numel()
        else torch.zeros((n, oh, ow, c), dtype=x.dtype, device=x.device)
    )
    hits = cells == best[..., None]
    if x.is_floating_point():
        hits |= torch.isnan(cells) & torch.isnan(best)[..., None]
    dev = x.device
    rows = torch.arange(oh, device=dev)[:, None] * sh - top + torch.arange(kh, device=dev)
    cols = torch.arange(ow, device=dev)[:, None] * sw - left + torch.arange(kw, device=dev)
    real = ((rows >= 0) & (rows < h))[:, None, :, None] & ((cols >= 0) & (cols < w))[None, :, None]
    hits &= real.reshape(oh, ow, kh * kw)[None, :, :, None, :]
    first = hits.to(torch.int32).argmax(dim=-1) if hits.numel() else best.to(torch.int64)
    in_y = torch.arange(oh, device=dev)[None, :, None, None] * sh - top + first // kw
    in_x = torch.arange(ow, device=dev)[None, None, :, None] * sw - left + first % kw
    index = (in_y * w + in_x) * c + torch.arange(c, device=dev)
    if ctx.attr("include_batch_in_index"):
        index = index + torch.arange(n, device=dev)[:, None, None, None] * (h * w * c)
    output(ctx, 0, best.shape).copy_(best)
    output(ctx, 1, index.shape).copy_(index)


def _normalize(
    xf: torch.Tensor,
    statistics: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    epsilon: float,
    shape: list[int],
) -> torch.Tensor:
    """Inference's ``(x - mean) * gain + offset`` with ``gain = scale / sqrt(variance +
    epsilon)``, each step rounded to float32 in the numpy kernel's order, so that its
    values are numpy's and TensorFlow's: +inf, NaN (0 * inf) and -inf where ``variance +
    epsilon`` is 0. ``F.batch_norm``'s ``x * gain + (offset - mean * gain)`` made NaN of
    all three (inf - inf) and cancels badly where the gain is large. The result keeps
    ``xf``'s memory order (an NCHW tensor in channels-last memory stays so)."""
    mean, variance, scale, offset = (s.float() for s in statistics)
    gain = scale / torch.sqrt(variance + float(np.float32(epsilon)))
    y = torch.sub(xf, mean.reshape(shape))
    y.mul_(gain.reshape(shape))
    return y.add_(offset.reshape(shape))


def fused_batch_norm(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    scale, offset = tensor_input(ctx, 1), tensor_input(ctx, 2)
    data_format = str(ctx.attr("data_format"))
    rank = 5 if data_format in ("NDHWC", "NCDHW") else 4
    if x.dim() != rank:
        raise ctx.fail(f"x must be {rank}-D for data_format {data_format}, got {list(x.shape)}")
    channel_axis = rank - 1 if data_format.endswith("C") else 1
    depth = int(x.shape[channel_axis])
    training = bool(ctx.attr("is_training"))
    factor = float(ctx.attr("exponential_avg_factor"))
    epsilon = float(ctx.attr("epsilon"))
    for index, name in ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")):
        if (index < 3 or not training or factor != 1) and tuple(ctx.input(index).shape) != (depth,):
            raise ctx.fail(
                f"{name} must have shape [{depth}] (one entry per channel), got "
                f"{list(ctx.input(index).shape)}"
            )
    xf = x.float()
    shape = [1] * rank
    shape[channel_axis] = depth
    count = x.numel() // depth if depth else 0
    if training and count > 1 and epsilon > 0:
        # torch's fused training pass, with momentum 1 so that its running statistics are
        # the batch's mean and unbiased variance; TF's averages are then per-channel sums.
        mean = torch.zeros(depth, device=x.device)
        unbiased = torch.zeros(depth, device=x.device)
        moved = xf.movedim(channel_axis, 1)
        y = F.batch_norm(moved, mean, unbiased, scale, offset, True, 1.0, epsilon)
        y = y.movedim(1, channel_axis)
        variance = unbiased * ((count - 1) / count)
        if factor == 1:
            running = (mean, unbiased)
        else:
            running = (
                (1 - factor) * tensor_input(ctx, 3) + factor * mean,
                (1 - factor) * tensor_input(ctx, 4) + factor * unbiased,
            )
    elif training:
        # One element per channel (unbiased = biased), none (NaN, as TF), or an epsilon of
        # 0 (or below), which torch's batch_norm refuses in training: the statistics from
        # var_mean, y as the numpy kernel's (inf and NaN where variance + epsilon is 0).
        axes = [a for a in range(rank) if a != channel_axis]
        if count == 0:
            mean = torch.full((depth,), float("nan"), device=x.device)
            variance = mean.clone()
        else:
            variance, mean = torch.var_mean(xf, dim=axes, correction=0)
        unbiased = variance * (count / (count - 1)) if count > 1 else variance
        if factor == 1:
            running = (mean, unbiased)
        else:
            old_mean, old_var = tensor_input(ctx, 3), tensor_input(ctx, 4)
            running = (
                (1 - factor) * old_mean + factor * mean,
                (1 - factor) * old_var + factor * unbiased,
            )
        y = _normalize(xf, (mean, variance, scale, offset), epsilon, shape)
    else:
        mean, variance = tensor_input(ctx, 3), tensor_input(ctx, 4)
        running = (mean, variance)
        if count == 0:  # TensorFlow's kernel: NaN statistics for an empty x, inference too
            nan = torch.full((depth,), float("nan"), device=x.device)
            running = (nan, nan)
        y = _normalize(xf, (mean, variance, scale, offset), epsilon, shape)
    dtype = d.torch_dtype(ctx.signature.output_dtypes[0])
    # A channels-last result (an NCHW graph's convolution output in, as oneDNN writes it)
    # is kept as it is: copying it to C order cost 0.27 ms on [1, 128, 56, 56], ten times
    # the normalization, and the next convolution wants channels-last again.
    if y.dtype == dtype and (
        y.is_contiguous() or y.is_contiguous(memory_format=torch.channels_last)
    ):
        result(ctx, 0, y)
    else:
        output(ctx, 0, x.shape).copy_(y)
    statistics = (*running, mean, variance)
    if ctx.device.backend == "torch":
        for index, value in enumerate(statistics, start=1):
            output(ctx, index, (depth,)).copy_(value)
        output(ctx, 5, ()).zero_()
    else:  # host arrays: numpy's copies cost a fraction of a torch call each
        for index, value in enumerate(statistics, start=1):
            np.copyto(ctx.allocate_output(index, (depth,)), value.numpy(), "unsafe")
        ctx.allocate_output(5, ()).fill(0)


SLIDING_SUM_RADIUS: Final = 8
"""Up to this ``depth_radius`` each channel's window of squares is summed as ``2r + 1`` adds
of shifted slices (the numpy kernel's rule, and its float32 sums); wider windows take a
float64 prefix sum, whose cost does not grow with the radius. Inception v1's two LRNs
(radius 2 on [1, 55, 55, 64] and [1, 55, 55, 192], two threads): 233 and 704 µs, against
619 and 1566 for the numpy kernel and 1730 and 5423 through torch's own
``local_response_norm`` (an average pooling over a 5-D view)."""


class LocalResponseNorm(OpKernel):
    """TensorFlow's LRN over the last axis: ``x / (bias + alpha * sqr_sum) ** beta``, in
    float32 (float16 input too, as TensorFlow's CPU kernel computes it), each pass over
    the tensor one multi-threaded torch call.

    The sliding window's buffers (the zero-padded squares, the sums, a root) are kept per
    input shape and reused: fresh multi-megabyte temporaries cost a page fault per 4 KiB
    (glibc hands their memory back), and Inception v1's two LRNs took 1,640 faults a run.
    Each concurrent run takes its own set (``_take``/``_give``)."""

    intra_op_parallel = True

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._radius = int(ctx.attr("depth_radius"))
        self._bias, self._alpha, self._beta = (
            float(ctx.attr(a)) for a in ("bias", "alpha", "beta")
        )
        self._spare: list[_Scratch] = []
        self._lock = threading.Lock()

    def compute(self, ctx: OpKernelContext) -> None:
        x = tensor_input(ctx, 0)
        _input4(ctx, x)
        if self._radius < 0:
            raise ctx.fail(f"depth_radius must be non-negative, got {self._radius}")
        out = output(ctx, 0, x.shape)
        if x.numel() == 0:
            return
        xf = x.float()
        if self._radius > SLIDING_SUM_RADIUS:
            window = _prefix_window_sums(xf * xf, self._radius)
            self._finish(xf, window, torch.empty_like(window), out)
            return
        scratch = self._take(xf)
        try:
            window = scratch.window_sums(xf, self._radius)
            self._finish(xf, window, scratch.root, out)
        finally:
            self._give(scratch)

    def _finish(
        self, xf: torch.Tensor, window: torch.Tensor, root: torch.Tensor, out: torch.Tensor
    ) -> None:
        window.mul_(self._alpha).add_(self._bias)
        _negative_power_(window, self._beta, root)
        if out.dtype == torch.float32:
            torch.mul(xf, window, out=out)
        else:
            out.copy_(window.mul_(xf))

    def _take(self, xf: torch.Tensor) -> _Scratch:
        key = (tuple(xf.shape), xf.device)
        with self._lock:
            for i, scratch in enumerate(self._spare):
                if scratch.key == key:
                    return self._spare.pop(i)
        return _Scratch(key, self._radius)

    def _give(self, scratch: _Scratch) -> None:
        with self._lock:
            if len(self._spare) < _SPARE_SETS:
                self._spare.append(scratch)


_SPARE_SETS: Final = 4
"""Scratch sets an LRN kernel keeps (shapes, or runs at once)."""


class _Scratch:
    """One run's buffers for a sliding window of ``radius`` over inputs of one shape."""

    __slots__ = ("key", "padded", "root", "window")

    def __init__(self, key: tuple[tuple[int, ...], torch.device], radius: int) -> None:
        shape, device = key
        self.key = key
        # The squares go between zero borders that stay zero.
        f32 = torch.float32
        self.padded = torch.zeros((*shape[:-1], shape[-1] + 2 * radius), dtype=f32, device=device)
        # (radius 0: no borders, and the squares are the sums)
        self.window = torch.empty(shape, dtype=f32, device=device) if radius else self.padded
        self.root = torch.empty(shape, dtype=f32, device=device)

    def window_sums(self, xf: torch.Tensor, radius: int) -> torch.Tensor:
        """For each channel (last axis), the sum of the squares of ``xf`` over the
        channels within ``radius`` of it, in ``self.window``."""
        depth = int(xf.shape[-1])
        padded = self.padded
        torch.mul(xf, xf, out=padded[..., radius : radius + depth])
        if radius == 0:
            return padded  # rewritten every call
        window = torch.add(padded[..., :depth], padded[..., 1 : 1 + depth], out=self.window)
        for j in range(2, 2 * radius + 1):
            window.add_(padded[..., j : j + depth])
        return window


def _prefix_window_sums(squares: torch.Tensor, radius: int) -> torch.Tensor:
    """The window sums beyond ``SLIDING_SUM_RADIUS``: a float64 prefix sum, whose cost does
    not grow with the radius, in a new float32 tensor."""
    depth = int(squares.shape[-1])
    prefix = F.pad(torch.cumsum(squares, dim=-1, dtype=torch.float64), (1, 0))
    channels = torch.arange(depth, device=squares.device)
    high = torch.clamp(channels + radius + 1, max=depth)
    low = torch.clamp(channels - radius, min=0)
    return (prefix.index_select(-1, high) - prefix.index_select(-1, low)).float()


def _negative_power_(base: torch.Tensor, beta: float, root: torch.Tensor) -> None:
    """``base ** -beta`` in place, with square roots for the exponents LRN is used with
    (0.5, its default; 0.75, AlexNet's and GoogLeNet's; 1), as the numpy kernel does;
    ``root`` is scratch of ``base``'s shape."""
    if beta == 0.5:
        base.sqrt_()
    elif beta == 0.75:
        torch.sqrt(base, out=root)
        base.sqrt_().sqrt_().mul_(root)  # base ** 0.25 * base ** 0.5
    elif beta != 1.0:
        base.pow_(-beta)
        return
    base.reciprocal_()


def _types(*names: str) -> tuple[Any, ...]:
    return d.supported(tuple(kt for kt in t.ALL if kt.name in names))


_FLOATS = ("float16", "float32", "float64")
KERNELS: Final[tuple[tuple[str, Kernel, dict[str, Any]], ...]] = (
    ("Conv2D", conv2d, {"type_constraints": {"T": t.OP_TYPES}}),
    ("DepthwiseConv2dNative", depthwise_conv2d, {"type_constraints": {"T": t.OP_TYPES}}),
    (
        "Conv2DBackpropInput",
        conv2d_backprop_input,
        {"type_constraints": {"T": _types(*_FLOATS, "int32")}, "host_memory": ["input_sizes"]},
    ),
    (
        "MaxPool",
        max_pool,
        {"type_constraints": {"T": _types(*_FLOATS, "int32", "int64", "uint8", "int16", "int8")}},
    ),
    ("AvgPool", avg_pool, {"type_constraints": {"T": t.OP_TYPES}}),
    ("Conv3D", conv3d, {"type_constraints": {"T": t.OP_TYPES}}),
    (
        "Conv3DBackpropInputV2",
        conv3d_backprop_input,
        {"type_constraints": {"T": t.OP_TYPES}, "host_memory": ["input_sizes"]},
    ),
    ("MaxPool3D", max_pool, {"type_constraints": {"T": t.OP_TYPES}}),
    ("AvgPool3D", avg_pool, {"type_constraints": {"T": t.OP_TYPES}}),
    ("MaxPoolWithArgmax", max_pool_with_argmax, {"type_constraints": {"T": d.REALS}}),
    (
        "FusedBatchNormV3",
        fused_batch_norm,
        {"type_constraints": {"T": _types("float16", "float32")}},
    ),
    ("LRN", LocalResponseNorm, {"type_constraints": {"T": t.OP_TYPES}}),
)

CPU_LABELLED_OPS: Final = (
    "Conv2D",
    "DepthwiseConv2dNative",
    "Conv2DBackpropInput",
    "MaxPool",
    "AvgPool",
    "FusedBatchNormV3",
    "LRN",
)
"""This family's ops whose torch kernels are also registered on the numpy CPU device."""

# Which torch CPU kernels become the default (unlabelled, above numpy's priority 0): those
# benchmarks/bench_conv.py measured faster than the numpy kernels, single-threaded CPU time,
# float32 NHWC, 2026-11-23 (numpy time / torch kernel time; full tables in
# benchmarks/CONV.md):
#   Conv2D, ResNet-50's 23 distinct layers: 1.25x in total at batch 1, 1.48x at batch 8
#     (stem and early 3x3 layers 1.6-3.2x, late layers 0.9-1.5x);
#   DepthwiseConv2dNative, 4 MobileNet layers: 1.5-6.3x at batch 1, 1.3-9.0x at batch 8;
#   Conv2DBackpropInput 3x3 and 3x3/2: 1.7x and 1.0x at batch 1, 3.6x and 1.5x at batch 8;
#   MaxPool 3x3/2: 1.9x and 2.8x; AvgPool: 1.7-2.1x and 1.7-4.1x;
#   FusedBatchNormV3: inference 2.3x and 2.3x, training 2.0x and 3.0x.
# All six won, so all six are preferred. LRN joined 2026-11-26: 2.2-2.7x at two threads
# (``SLIDING_SUM_RADIUS``).
CPU_PREFERRED_OPS: Final[tuple[str, ...]] = CPU_LABELLED_OPS
"""Of those, the ones registered unlabelled above numpy's priority (see ``register_cpu``)."""

CPU_PRIORITY: Final = 1
"""Above the numpy kernels' default 0: where installed and preferred, torch's kernel wins."""


def register(lib: KernelLibrary) -> None:
    """This family's kernels on the torch GPU, and on the numpy CPU device."""
    for op, kernel, keywords in KERNELS:
        lib.kernel(op, device="GPU", backend="torch", **keywords)(kernel)
    register_cpu(lib)


def register_cpu(lib: KernelLibrary) -> None:
    """The CPU kernel library: each op of ``CPU_LABELLED_OPS`` labelled ``torch``, and those
    of ``CPU_PREFERRED_OPS`` once more unlabelled at ``CPU_PRIORITY``, so that installing
    this plugin makes them the CPU default."""
    for op, kernel, keywords in KERNELS:
        if op in CPU_LABELLED_OPS:
            cpu_kernel(lib, op, kernel, label="torch", **keywords)
        if op in CPU_PREFERRED_OPS:
            cpu_kernel(lib, op, kernel, priority=CPU_PRIORITY, **keywords)
