"""Convolution, pooling and normalisation ops (TensorFlow's nn_ops: Conv2D, pools, batch norm).

The window geometry (output sizes, TF's padding) is computed here once, by ``window_attrs``
and ``WindowAttrs.window``, for the shape functions and for every backend's kernels (through
``kernloom.plugin``), so that an output size or a padding never differs between devices.

The 3-D ops (Conv3D, Conv3DBackpropInputV2, MaxPool3D, AvgPool3D) share that geometry: a
data_format of NDHWC or NCDHW gives three spatial dimensions.

Deviations from TensorFlow, all deliberate: kernloom has no bfloat16 or quantized types, so
those are left out of the dtype sets; Conv2D and the pools run NCHW on the CPU as well
(TF's CPU kernels take NHWC only), and so do Conv3D and the 3-D pools NCDHW (TF's
Eigen CPU kernels take NDHWC only; its oneDNN build runs NCDHW too); pooling over the batch
or depth dimension is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kernloom.framework.op_def import OpDefBuilder, OpLibrary
from kernloom.framework.shape_inference import InferenceContext
from kernloom.shapes import Dim, TensorShape

__all__ = ["Window", "Window2D", "WindowAttrs", "define", "window_attrs"]

CONV_TYPES = "{float16, float32, float64, int32}"
FLOAT_TYPES = "{float16, float32, float64}"
FLOAT16_32 = "{float16, float32}"
POOL_TYPES = "{float16, float32, float64, int32, int64, uint8, int16, int8, uint16}"
ARGMAX_TYPES = (
    "{float32, float64, int32, uint8, int16, int8, int64, uint16, float16, uint32, uint64}"
)


class _Context(Protocol):
    """What the geometry needs of a context: shape inference's, a kernel's or a
    construction's (each reads attrs and makes an error that names the node)."""

    def attr(self, name: str) -> Any: ...

    def fail(self, message: str) -> Exception: ...


@dataclass(frozen=True, slots=True)
class Window:
    """Where the windows of a window op fall on one input: for each spatial dimension (H
    then W; D, H, W for the 3-D ops), the output size and the padding before and after
    (TF's SAME puts the odd pad at the end)."""

    output_hw: tuple[int, ...]
    pad_before: tuple[int, ...]
    pad_after: tuple[int, ...]

    @property
    def padded(self) -> bool:
        return any(self.pad_before) or any(self.pad_after)


Window2D = Window
"""``Window``'s name before the 3-D window ops (plugin API 1.x): plugins written against it
keep working."""


@dataclass(frozen=True, slots=True)
class WindowAttrs:
    """A window op's attrs, checked once: layout, window (pools), strides, dilations
    (convolutions), padding and explicit paddings, each per spatial dimension (H, W for
    the 2-D ops; D, H, W for the 3-D ones)."""

    channels_last: bool
    ksize: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    padding: str
    explicit: tuple[tuple[int, int], ...]

    @property
    def rank(self) -> int:
        """The number of spatial dimensions: 2, or 3 for NDHWC and NCDHW."""
        return len(self.strides)

    @property
    def spatial_axes(self) -> tuple[int, ...]:
        first = 1 if self.channels_last else 2
        return tuple(range(first, first + self.rank))

    @property
    def channel_axis(self) -> int:
        return self.rank + 1 if self.channels_last else 1

    @property
    def _names(self) -> str:
        return "HW" if self.rank == 2 else "DHW"

    def window(
        self, ctx: _Context, input_hw: Sequence[int], window_hw: Sequence[int] | None = None
    ) -> Window:
        """The geometry on an input of spatial size ``input_hw``; ``window_hw`` is the
        filter's size for convolutions (the pools' is ``ksize``: ``pool_window``)."""
        window = tuple(window_hw) if window_hw is not None else self.ksize
        axes = [
            _axis(
                ctx,
                self._names[axis],
                int(input_hw[axis]),
                int(window[axis]),
                self.strides[axis],
                self.dilations[axis],
                self.padding,
                self.explicit[axis],
            )
            for axis in range(self.rank)
        ]
        return Window(
            tuple(a[0] for a in axes), tuple(a[1] for a in axes), tuple(a[2] for a in axes)
        )

    def pool_window(self, ctx: _Context, input_hw: Sequence[int]) -> Window:
        """A pool's geometry (``window`` over ``ksize``); its explicit padding must be
        narrower than the window, as TensorFlow's pooling kernels require (a window of
        padding alone has no element to pool)."""
        window = self.window(ctx, input_hw, self.ksize)
        for side, pads in (("Left", window.pad_before), ("Right", window.pad_after)):
            for pad, size in zip(pads, self.ksize, strict=True):
                if pad >= size:
                    raise ctx.fail(
                        f"{side} padding {pad} needs to be smaller than the window size {size}"
                    )
        return window

    def gradient_canvas(
        self, window: Window, kernel: Sequence[int], input_hw: Sequence[int]
    ) -> list[int]:
        """The spatial sizes of the canvas an input gradient is scattered onto: the padded
        input, or as far as the last window reaches when that is further (a VALID window
        that does not end on the input's last element); the kernels crop the padding off
        it (``pad_before`` on, ``input_hw`` long)."""
        return [
            max((o - 1) * s + (k - 1) * dl + 1, before + size)
            for o, s, k, dl, before, size in zip(
                window.output_hw,
                self.strides,
                kernel,
                self.dilations,
                window.pad_before,
                input_hw,
                strict=True,
            )
        ]

    def pool_divisor(self, window: Window, input_hw: Sequence[int]) -> np.ndarray[Any, Any]:
        """How many real (unpadded) elements each output position's window covers, shape
        ``window.output_hw`` (int64): the divisor of TensorFlow's AvgPool, which never
        counts padding. Per axis ``min(start + ksize, size) - max(start, 0)``, then the
        outer product over the spatial axes; small, computed on the host."""
        total: np.ndarray[Any, Any] = np.ones((), np.int64)
        for axis, size in enumerate(input_hw):
            start = np.arange(window.output_hw[axis]) * self.strides[axis]
            start -= window.pad_before[axis]
            counts = np.minimum(start + self.ksize[axis], int(size)) - np.maximum(start, 0)
            total = np.multiply.outer(total, counts)
        return total

    def backprop_input_window(
        self,
        ctx: _Context,
        input_sizes: Sequence[int],
        filter_shape: Sequence[int],
        out_backprop_shape: Sequence[int],
    ) -> tuple[tuple[int, ...], Window]:
        """Conv3DBackpropInputV2's checks, in TensorFlow's order and words, for every
        backend's kernel: ``input_sizes`` (the forward input's shape, in data_format order),
        the filter [*window, C, C_out] and out_backprop (data_format order) must agree as
        a forward convolution's input, filter and output do. Returns the input's shape
        channels last ([N, *spatial, C]) and the forward window over it (its padding is
        what the gradient crops off)."""
        dims = self.rank + 2
        sizes = [int(v) for v in input_sizes]
        if len(sizes) != dims:
            raise ctx.fail(f"input_sizes must have {dims} entries (the input's shape), got {sizes}")
        if any(v < 0 for v in sizes):
            raise ctx.fail(f"input_sizes must be non-negative, got {sizes}")
        for what, shape in (("filter", filter_shape), ("out_backprop", out_backprop_shape)):
            if len(shape) != dims:
                raise ctx.fail(f"{what} must be {dims}-D, got shape {list(shape)}")
        x = self._channels_last(sizes)
        dy = self._channels_last([int(v) for v in out_backprop_shape])
        if x[0] != dy[0]:
            raise ctx.fail(
                f"input and out_backprop must have the same batch size: input_sizes gives "
                f"{x[0]}, out_backprop has {dy[0]}"
            )
        *kernel, in_depth, out_depth = (int(v) for v in filter_shape)
        window = self.window(ctx, x[1:-1], kernel)
        for axis in range(self.rank):
            actual, computed = dy[1 + axis], window.output_hw[axis]
            if actual != computed:
                raise ctx.fail(
                    f"Size of out_backprop doesn't match computed: its {self._names[axis]} "
                    f"size is {actual}, but an input of {x[1 + axis]} with a filter of "
                    f"{kernel[axis]}, stride {self.strides[axis]}, dilation "
                    f"{self.dilations[axis]} and {self.padding} padding gives {computed}"
                )
        if x[-1] != in_depth:
            raise ctx.fail(
                f"input and filter must have the same number of channels. Got {x[-1]} for "
                f"input (input_sizes) and {in_depth} for filter"
            )
        if dy[-1] != out_depth:
            raise ctx.fail(
                f"out_backprop and filter must have the same number of channels. Got "
                f"{dy[-1]} for out_backprop and {out_depth} for filter"
            )
        if in_depth == 0:
            raise ctx.fail("filter depth must be strictly greater than zero")
        return tuple(x), window

    def _channels_last(self, shape: list[int]) -> list[int]:
        return shape if self.channels_last else [shape[0], *shape[2:], shape[1]]

    def output_dims(
        self, ctx: _Context, input_hw: Sequence[Dim], window_hw: Sequence[Dim]
    ) -> list[Dim]:
        """Output spatial sizes where known (shape inference: unknown stays unknown)."""
        out: list[Dim] = []
        for axis in range(self.rank):
            size, window = input_hw[axis], window_hw[axis]
            if size is None or window is None:
                out.append(None)
                continue
            out.append(
                _axis(
                    ctx,
                    self._names[axis],
                    size,
                    window,
                    self.strides[axis],
                    self.dilations[axis],
                    self.padding,
                    self.explicit[axis],
                )[0]
            )
        return out


def _axis(
    ctx: _Context,
    name: str,
    size: int,
    window: int,
    stride: int,
    dilation: int,
    padding: str,
    explicit: tuple[int, int],
) -> tuple[int, int, int]:
    """(output size, pad before, pad after) of one spatial axis, as TF's
    GetWindowedOutputSizeVerbose computes them."""
    effective = (window - 1) * dilation + 1
    if padding == "VALID":
        out, low, high = (size - effective + stride) // stride, 0, 0
    elif padding == "SAME":
        out = (size + stride - 1) // stride
        needed = max((out - 1) * stride + effective - size, 0)
        low, high = needed // 2, needed - needed // 2
    else:
        low, high = explicit
        out = (size + low + high - effective + stride) // stride
    if out < 0 or (padding != "SAME" and size + low + high < effective):
        raise ctx.fail(
            f"computed output size would be negative: the {name} dimension is {size} "
            f"(padded {size + low + high}) but the window spans {effective}"
        )
    return out, low, high


def _per_dimension(ctx: _Context, name: str, channels_last: bool, rank: int) -> tuple[int, ...]:
    """The spatial entries of a (rank + 2)-entry attr that must be 1 for batch and
    channels."""
    values = [int(v) for v in ctx.attr(name)]
    if len(values) != rank + 2:
        raise ctx.fail(f"{name} must have {rank + 2} entries (one per dimension), got {values}")
    if any(v < 1 for v in values):
        raise ctx.fail(f"{name} must be positive, got {values}")
    batch, channel = (values[0], values[-1]) if channels_last else (values[0], values[1])
    if batch != 1 or channel != 1:
        where = "H and W" if rank == 2 else "D, H and W"
        raise ctx.fail(
            f"{name} {values}: the batch and channel entries must be 1 "
            f"(windows move over {where} only)"
        )
    return tuple(values[1:-1]) if channels_last else tuple(values[2:])


_THREE_D = ("NDHWC", "NCDHW")


def window_attrs(ctx: _Context, *, pooling: bool = False) -> WindowAttrs:
    """Check and read a window op's attrs (``ksize`` for the pools, ``dilations`` for the
    convolutions); a bad value fails naming the node. A data_format of NDHWC or NCDHW makes
    it 3-D (Conv3D and the 3-D pools)."""
    data_format = str(ctx.attr("data_format")) if _has(ctx, "data_format") else "NHWC"
    channels_last = data_format in ("NHWC", "NDHWC")
    rank = 3 if data_format in _THREE_D else 2
    strides = _per_dimension(ctx, "strides", channels_last, rank)
    ones = (1,) * rank
    ksize = _per_dimension(ctx, "ksize", channels_last, rank) if pooling else ones
    dilations = _per_dimension(ctx, "dilations", channels_last, rank) if not pooling else ones
    padding = str(ctx.attr("padding"))
    pads = [int(p) for p in ctx.attr("explicit_paddings")] if _has(ctx, "explicit_paddings") else []
    explicit: tuple[tuple[int, int], ...] = ((0, 0),) * rank
    if padding == "EXPLICIT":
        dims = rank + 2
        if len(pads) != 2 * dims:
            raise ctx.fail(
                f"explicit_paddings must have {2 * dims} entries (before and after for each of "
                f"the {dims} dimensions) when padding is EXPLICIT, got {pads}"
            )
        if any(p < 0 for p in pads):
            raise ctx.fail(f"explicit_paddings must be non-negative, got {pads}")
        n, c = (0, dims - 1) if channels_last else (0, 1)
        if pads[2 * n] or pads[2 * n + 1] or pads[2 * c] or pads[2 * c + 1]:
            raise ctx.fail(
                f"explicit_paddings {pads}: the batch and channel dimensions cannot be padded"
            )
        first = 1 if channels_last else 2
        explicit = tuple((pads[2 * a], pads[2 * a + 1]) for a in range(first, first + rank))
    elif pads:
        raise ctx.fail(
            f"explicit_paddings must be empty unless padding is EXPLICIT (padding is "
            f"{padding}, explicit_paddings {pads})"
        )
    return WindowAttrs(channels_last, ksize, strides, dilations, padding, explicit)


def _has(ctx: _Context, name: str) -> bool:
    """MaxPoolWithArgmax has no data_format, AvgPool no explicit_paddings. A kernel's
    context or construction says so from its signature: the refused lookup builds an error
    (7 µs, on every call of a pooling kernel, which reads its attrs each time)."""
    signature = getattr(ctx, "signature", None)
    if signature is not None:
        return name in signature.attrs
    try:
        ctx.attr(name)
    except LookupError:  # NotFoundError from a kernel context, KeyError from inference
        return False
    return True


# -- shape functions ------------------------------------------------------------------------


def _rank4(ctx: InferenceContext, index: int, what: str, rank: int = 4) -> TensorShape:
    shape = ctx.input_shape(index)
    if shape.rank is None:
        return TensorShape.unknown(rank)
    if shape.rank != rank:
        raise ctx.fail(f"{what} must be {rank}-D, got shape {shape}")
    return shape


def _layout(attrs: WindowAttrs, batch: Dim, hw: Sequence[Dim], channels: Dim) -> list[Dim]:
    if attrs.channels_last:
        return [batch, *hw, channels]
    return [batch, channels, *hw]


def _dims(attrs: WindowAttrs, shape: TensorShape) -> tuple[Dim, list[Dim], Dim]:
    return shape[0], [shape[a] for a in attrs.spatial_axes], shape[attrs.channel_axis]


def _filter4(ctx: InferenceContext, index: int) -> TensorShape:
    f = _rank4(ctx, index, "filter")
    if f[0] == 0 or f[1] == 0:
        raise ctx.fail(f"the filter's spatial size must be positive, got shape {f}")
    return f


def _conv2d_shape(ctx: InferenceContext) -> None:
    attrs = window_attrs(ctx)
    x = _rank4(ctx, 0, "input")
    f = _filter4(ctx, 1)
    batch, hw, channels = _dims(attrs, x)
    if channels is not None:
        _check_groups(ctx, channels, f)
    ctx.set_output(0, _layout(attrs, batch, attrs.output_dims(ctx, hw, [f[0], f[1]]), f[3]))


def _check_groups(ctx: InferenceContext, channels: int, f: TensorShape) -> None:
    """TensorFlow's grouped convolution rule: the input depth a multiple of the filter's
    input depth, the filter's output depth a multiple of the number of groups."""
    if f[2] is None:
        return
    if f[2] == 0 or channels % f[2]:
        raise ctx.fail(
            f"input depth {channels} must be a multiple of the filter's input depth {f[2]}"
        )
    if f[3] is not None and f[3] % (channels // f[2]):
        raise ctx.fail(
            f"the filter's output depth {f[3]} must be a multiple of the number of "
            f"groups {channels // f[2]}"
        )


def _conv3d_shape(ctx: InferenceContext) -> None:
    """TF's Conv3DShape: input depth a multiple of the filter's (the CPU kernel then asks
    for equality), output depth the filter's."""
    attrs = window_attrs(ctx)
    x = _rank4(ctx, 0, "input", 5)
    f = _rank4(ctx, 1, "filter", 5)
    batch, dhw, channels = _dims(attrs, x)
    if channels is not None and f[3] is not None and (f[3] == 0 or channels % f[3]):
        raise ctx.fail(
            f"Depth of input ({channels}) is not a multiple of input depth of filter ({f[3]})"
        )
    out = attrs.output_dims(ctx, dhw, [f[0], f[1], f[2]])
    ctx.set_output(0, _layout(attrs, batch, out, f[4]))


def _depthwise_shape(ctx: InferenceContext) -> None:
    attrs = window_attrs(ctx)
    x = _rank4(ctx, 0, "input")
    f = _filter4(ctx, 1)
    batch, hw, channels = _dims(attrs, x)
    if channels is not None and f[2] is not None and channels != f[2]:
        raise ctx.fail(f"input depth {channels} must equal the filter's in_channels {f[2]}")
    depth = channels if channels is not None else f[2]
    out_channels = depth * f[3] if depth is not None and f[3] is not None else None
    ctx.set_output(0, _layout(attrs, batch, attrs.output_dims(ctx, hw, [f[0], f[1]]), out_channels))


def _backprop_input_shape(ctx: InferenceContext) -> None:
    attrs = window_attrs(ctx)
    sizes_shape = ctx.input_shape(0)
    if sizes_shape.rank not in (None, 1) or sizes_shape[0] not in (None, 2, 4):
        raise ctx.fail(f"input_sizes must be a vector of 4 (or 2) sizes, got shape {sizes_shape}")
    f = _filter4(ctx, 1)
    dy = _rank4(ctx, 2, "out_backprop")
    batch, _, dy_channels = _dims(attrs, dy)
    if dy_channels is not None and f[3] is not None and dy_channels != f[3]:
        raise ctx.fail(
            f"out_backprop depth {dy_channels} must equal the filter's output depth {f[3]}"
        )
    sizes = ctx.input_value(0)
    if sizes is None:
        ctx.set_output(0, _layout(attrs, batch, [None, None], None))
        return
    values = [int(v) for v in np.asarray(sizes).reshape(-1)]
    if len(values) not in (2, 4) or any(v < 0 for v in values):
        raise ctx.fail(f"input_sizes must be 4 (or 2) non-negative sizes, got {values}")
    if len(values) == 4:
        shape = TensorShape(values)
        size_batch, hw, channels = _dims(attrs, shape)
        batch = size_batch
    else:
        hw, channels = [values[0], values[1]], f[2]
    if channels:  # Conv2D's groups; no channels take any filter
        _check_groups(ctx, channels, f)
    _, dy_hw, _ = _dims(attrs, dy)
    expected = attrs.output_dims(ctx, hw, [f[0], f[1]])
    for axis in range(2):
        if dy_hw[axis] is not None and expected[axis] is not None and dy_hw[axis] != expected[axis]:
            raise ctx.fail(
                f"out_backprop's {'HW'[axis]} size {dy_hw[axis]} does not match the "
                f"{expected[axis]} that input_sizes {values} and the filter give"
            )
    ctx.set_output(0, _layout(attrs, batch, hw, channels))


def _backprop_input3d_shape(ctx: InferenceContext) -> None:
    """Conv3DBackpropInputV2: the output has the shape input_sizes holds. Where every shape
    is known at build time, the kernels' checks (``WindowAttrs.backprop_input_window``)
    run here already, so a mismatch fails when the node is built."""
    attrs = window_attrs(ctx)
    sizes_shape = ctx.input_shape(0)
    if sizes_shape.rank not in (None, 1) or sizes_shape[0] not in (None, 5):
        raise ctx.fail(
            f"input_sizes must have 5 entries (the input's shape), got shape {sizes_shape}"
        )
    f = _rank4(ctx, 1, "filter", 5)
    dy = _rank4(ctx, 2, "out_backprop", 5)
    sizes = ctx.input_value(0)
    if sizes is None:
        ctx.set_output(0, _layout(attrs, dy[0], [None, None, None], f[3]))
        return
    values = [int(v) for v in np.asarray(sizes).reshape(-1)]
    if f.is_fully_defined() and dy.is_fully_defined():
        attrs.backprop_input_window(ctx, values, f.as_tuple(), dy.as_tuple())
    elif len(values) != 5 or any(v < 0 for v in values):
        raise ctx.fail(f"input_sizes must be 5 non-negative sizes, got {values}")
    ctx.set_output(0, values)


def _pool_shape(ctx: InferenceContext) -> None:
    attrs = window_attrs(ctx, pooling=True)
    x = _rank4(ctx, 0, "input", attrs.rank + 2)
    batch, hw, channels = _dims(attrs, x)
    out = _layout(attrs, batch, attrs.output_dims(ctx, hw, list(attrs.ksize)), channels)
    for index in range(ctx.num_outputs):
        ctx.set_output(index, out)


def _batch_norm_shape(ctx: InferenceContext) -> None:
    x = ctx.input_shape(0)
    data_format = str(ctx.attr("data_format"))
    rank = 5 if data_format in ("NDHWC", "NCDHW") else 4
    if x.rank is not None and x.rank != rank:
        raise ctx.fail(f"x must be {rank}-D for data_format {data_format}, got shape {x}")
    channel_axis = -1 if data_format.endswith("C") else 1
    channels = x[channel_axis] if x.rank is not None else None
    training = bool(ctx.attr("is_training"))
    factor = float(ctx.attr("exponential_avg_factor"))
    for index, name in ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")):
        shape = ctx.input_shape(index)
        if shape.rank is None:
            continue
        if shape.rank != 1:
            raise ctx.fail(f"{name} must be a vector, got shape {shape}")
        if index >= 3 and training and factor == 1.0:
            continue  # ignored: the batch's statistics are used
        if shape[0] is not None and channels is not None and shape[0] != channels:
            raise ctx.fail(f"{name} has {shape[0]} entries for {channels} channels")
        channels = channels if channels is not None else shape[0]
    ctx.set_output(0, x if x.rank is not None else TensorShape.unknown(rank))
    for index in range(1, 5):
        ctx.set_output(index, [channels])
    ctx.set_output(5, [])


def _lrn_shape(ctx: InferenceContext) -> None:
    x = _rank4(ctx, 0, "input")
    if int(ctx.attr("depth_radius")) < 0:
        raise ctx.fail(f"depth_radius must be non-negative, got {ctx.attr('depth_radius')}")
    ctx.set_output(0, x)


# -- the ops ---------------------------------------------------------------------------------


_LAYOUT = "data_format: {'NHWC', 'NCHW'} = 'NHWC'"


def _convolution(lib: OpLibrary, name: str, types: str, *, cudnn: bool = True) -> OpDefBuilder:
    """``name`` with the attrs of TensorFlow's 2-D convolutions: T, strides (the
    ``use_cudnn_on_gpu`` flag it ignores), padding SAME, VALID or EXPLICIT with
    explicit_paddings, data_format and dilations; the caller adds inputs and the rest."""
    builder = lib.register_op(name).attr(f"T: {types}").attr("strides: list(int)")
    if cudnn:
        builder = builder.attr("use_cudnn_on_gpu: bool = true")
    return (
        builder.attr("padding: {'SAME', 'VALID', 'EXPLICIT'}")
        .attr("explicit_paddings: list(int) = []")
        .attr(_LAYOUT)
        .attr("dilations: list(int) = [1, 1, 1, 1]")
    )


def _define_3d(lib: OpLibrary) -> None:
    """TensorFlow's 3-D window ops: SAME or VALID padding only (no EXPLICIT), NDHWC or
    NCDHW."""
    layout = "data_format: {'NDHWC', 'NCDHW'} = 'NDHWC'"
    (
        lib.register_op("Conv3D")
        .input("input: T")
        .input("filter: T")
        .output("output: T")
        .attr("T: {float16, float32, float64}")
        .attr("strides: list(int) >= 5")
        .attr("padding: {'SAME', 'VALID'}")
        .attr(layout)
        .attr("dilations: list(int) = [1, 1, 1, 1, 1]")
        .shape_fn(_conv3d_shape)
        .doc(
            "3-D cross-correlation of input [N, D, H, W, C] (or NCDHW) with filter "
            "[KD, KH, KW, C, C_out].",
            "Padding as Conv2D's, per spatial dimension. The input's depth must equal the "
            "filter's input depth (TensorFlow's CPU kernel: no groups). bfloat16 is left out "
            "(kernloom has none). Deviations (docs/tensorflow_fidelity.md): dilations work "
            "for every type (TensorFlow 2.21's CPU dilates float32 only); an empty batch "
            "gives the filter's output channels (TensorFlow: the input's, a bug); NCDHW "
            "runs on the CPU.",
        )
    )
    (
        lib.register_op("Conv3DBackpropInputV2")
        .input("input_sizes: Tshape")
        .input("filter: T")
        .input("out_backprop: T")
        .output("output: T")
        .attr("T: {float16, float32, float64}")
        .attr("strides: list(int) >= 5")
        .attr("padding: {'SAME', 'VALID'}")
        .attr(layout)
        .attr("dilations: list(int) = [1, 1, 1, 1, 1]")
        .attr("Tshape: {int32, int64} = int32")
        .shape_fn(_backprop_input3d_shape)
        .doc(
            "The gradient of Conv3D with respect to its input (a 3-D transposed "
            "convolution): output has shape input_sizes.",
            "input_sizes (host memory) holds the forward input's 5 sizes in data_format "
            "order; filter is the forward convolution's [KD, KH, KW, C, C_out] and "
            "out_backprop its output's gradient. Each out_backprop element adds itself "
            "times the filter's taps back onto the input positions its window covered; "
            "padding is cropped off. bfloat16 is left out (kernloom has none). Deviations "
            "(docs/tensorflow_fidelity.md): NCDHW and dilations run on the CPU for every "
            "type (TensorFlow 2.21's Eigen CPU kernel takes neither; its oneDNN kernel "
            "both, float32 only); a VALID window wider than the input is refused as "
            "Conv3D refuses it (TensorFlow returns zeros).",
        )
    )
    for name, types, what in (
        ("MaxPool3D", FLOAT16_32, "maximum"),
        ("AvgPool3D", FLOAT_TYPES, "mean"),
    ):
        (
            lib.register_op(name)
            .input("input: T")
            .output("output: T")
            .attr("ksize: list(int) >= 5")
            .attr("strides: list(int) >= 5")
            .attr("padding: {'SAME', 'VALID'}")
            .attr(layout)
            .attr(f"T: {types}")
            .shape_fn(_pool_shape)
            .doc(
                f"The {what} over each ksize window of input [N, D, H, W, C] (or NCDHW).",
                "As the 2-D pool: padding never wins a maximum and is never counted in a "
                "mean's divisor. bfloat16 is left out (kernloom has none). TensorFlow "
                "2.21's CPU has kernels for float32 only; kernloom computes every type the "
                "op allows (docs/tensorflow_fidelity.md), and NCDHW.",
            )
        )


def define(lib: OpLibrary) -> None:
    _define_3d(lib)
    explicit = "explicit_paddings: list(int) = []"
    layout = _LAYOUT
    (
        _convolution(lib, "Conv2D", CONV_TYPES)
        .input("input: T")
        .input("filter: T")
        .output("output: T")
        .shape_fn(_conv2d_shape)
        .doc(
            "2-D cross-correlation of input [N, H, W, C] (or NCHW) with filter "
            "[KH, KW, C / groups, C_out].",
            "SAME pads (out - 1) * stride + (k - 1) * dilation + 1 - in in total, the odd one "
            "at the end; EXPLICIT takes explicit_paddings (before, after per dimension, in "
            "data_format order). Grouped when C is a multiple of the filter's input depth. "
            "bfloat16 is left out (kernloom has none).",
        )
    )
    (
        _convolution(lib, "DepthwiseConv2dNative", FLOAT_TYPES, cudnn=False)
        .input("input: T")
        .input("filter: T")
        .output("output: T")
        .shape_fn(_depthwise_shape)
        .doc(
            "Each input channel c convolved with filter[:, :, c, m] for every multiplier m; "
            "output channel c * M + m.",
            "Padding as Conv2D's.",
        )
    )
    (
        _convolution(lib, "Conv2DBackpropInput", CONV_TYPES)
        .input("input_sizes: int32")
        .input("filter: T")
        .input("out_backprop: T")
        .output("output: T")
        .shape_fn(_backprop_input_shape)
        .doc(
            "The gradient of Conv2D with respect to its input (a transposed convolution): "
            "output has shape input_sizes.",
            "input_sizes (host memory) holds the 4 sizes of the input, or only its H and W "
            "(batch from out_backprop, channels from the filter). Grouped as Conv2D when the "
            "input depth C is a multiple of the filter's input depth (filter "
            "[KH, KW, C / groups, C_out], C_out a multiple of groups): the gradient of the "
            "grouped Conv2D, as TensorFlow 2.21's default (oneDNN) CPU kernel computes it.",
        )
    )
    pool_padding = "padding: {'SAME', 'VALID', 'EXPLICIT'}"
    (
        lib.register_op("MaxPool")
        .input("input: T")
        .output("output: T")
        .attr(f"T: {POOL_TYPES} = float32")
        .attr("ksize: list(int)")
        .attr("strides: list(int)")
        .attr(pool_padding)
        .attr(explicit)
        .attr(layout)
        .shape_fn(_pool_shape)
        .doc(
            "The maximum over each ksize window; padding never wins (it is -inf) and NaN "
            "propagates (TensorFlow's CPU kernel skips a NaN unless it comes first in the "
            "window, and gives -FLT_MAX for a window of -inf alone).",
            "EXPLICIT padding must be narrower than the window on each side, as in TensorFlow. "
            "NCHW_VECT_C and qint8 are left out; bfloat16 too (kernloom has none).",
        )
    )
    (
        lib.register_op("AvgPool")
        .input("value: T")
        .output("output: T")
        .attr("ksize: list(int)")
        .attr("strides: list(int)")
        .attr("padding: {'SAME', 'VALID'}")
        .attr(layout)
        .attr(f"T: {FLOAT_TYPES}")
        .shape_fn(_pool_shape)
        .doc(
            "The mean over each ksize window; with SAME padding the divisor counts only the "
            "real elements in the window, never the padding (as TensorFlow does)."
        )
    )
    (
        lib.register_op("MaxPoolWithArgmax")
        .input("input: T")
        .output("output: T")
        .output("argmax: Targmax")
        .attr("ksize: list(int)")
        .attr("strides: list(int)")
        .attr("Targmax: {int32, int64} = int64")
        .attr("padding: {'SAME', 'VALID'}")
        .attr("include_batch_in_index: bool = false")
        .attr(f"T: {ARGMAX_TYPES}")
        .shape_fn(_pool_shape)
        .doc(
            "MaxPool over NHWC input, and where each maximum came from as a flattened index: "
            "(y * W + x) * C + c, or ((b * H + y) * W + x) * C + c with include_batch_in_index.",
            "Ties go to the first element in row-major window order (TF's CPU kernel); a "
            "window holding NaN gives NaN and the index of its first NaN (TensorFlow's CPU "
            "kernel skips a NaN unless it comes first).",
        )
    )
    (
        lib.register_op("FusedBatchNormV3")
        .input("x: T")
        .input("scale: U")
        .input("offset: U")
        .input("mean: U")
        .input("variance: U")
        .output("y: T")
        .output("batch_mean: U")
        .output("batch_variance: U")
        .output("reserve_space_1: U")
        .output("reserve_space_2: U")
        .output("reserve_space_3: U")
        .attr("T: {float16, float32}")
        .attr("U: {float32}")
        .attr("epsilon: float = 0.0001")
        .attr("exponential_avg_factor: float = 1.0")
        .attr("data_format: {'NHWC', 'NCHW', 'NDHWC', 'NCDHW'} = 'NHWC'")
        .attr("is_training: bool = true")
        .shape_fn(_batch_norm_shape)
        .doc(
            "y = (x - mean) / sqrt(variance + epsilon) * scale + offset, per channel.",
            "is_training: mean and variance are the batch's (biased variance in y); "
            "batch_mean and batch_variance are the running statistics "
            "(1 - f) * old + f * batch with f = exponential_avg_factor, the variance "
            "unbiased (n / (n - 1)); reserve_space_1/2 are the batch mean and biased "
            "variance; an empty x gives NaN statistics. Inference: the given mean and "
            "variance are used and returned as batch_mean/batch_variance and as "
            "reserve_space_1/2 (TF leaves those unspecified). reserve_space_3 is a scalar 0.",
        )
    )
    (
        lib.register_op("LRN")
        .input("input: T")
        .output("output: T")
        .attr("depth_radius: int = 5")
        .attr("bias: float = 1.0")
        .attr("alpha: float = 1.0")
        .attr("beta: float = 0.5")
        .attr("T: {float16, float32} = float32")
        .shape_fn(_lrn_shape)
        .doc(
            "Local response normalisation over the last dimension: input / (bias + alpha * "
            "sum(input[..., d - r : d + r + 1] ** 2)) ** beta. An inf or NaN reaches only "
            "the channels whose window holds it (TensorFlow's CPU kernel, summing through a "
            "band matrix or a running sum, also makes NaN of others)."
        )
    )
