"""Convolution, pooling, normalization and the matrix ops of ONNX's NN family.

ONNX images are NCHW. Conv and MaxPool map to kernloom's Conv2D / MaxPool with
``data_format="NCHW"`` (the kernels take it directly), asymmetric ``pads`` to EXPLICIT
padding. 3-D inputs (NCDHW) map to Conv3D / MaxPool3D / AvgPool3D, which have no EXPLICIT
padding in TensorFlow: their pads become a Pad (the lowest value for MaxPool) and the op
runs VALID; a 3-D Conv with group > 1 is refused (TF's Conv3D has no groups). A 3-D
ConvTranspose runs Conv3DBackpropInputV2 VALID and slices its pads off (groups one by one,
as in 2-D). TF's pools
have no dilations: a dilated MaxPool, AveragePool or LpPool (1-D to 3-D) gathers each window
tap as one strided slice and reduces their stack (exact, kernel-volume slices).

AveragePool has no EXPLICIT padding in TensorFlow, so pads and ``ceil_mode`` become a Pad
and a VALID AvgPool, divided by the count of the elements each window covers (an AvgPool of
a padded mask) where ``count_include_pad`` says so; pads that are TensorFlow's SAME padding,
not counted, are SAME. MaxPool's Indices output (undilated 1-D and 2-D only) is built in
``detection`` (MaxPoolWithArgmax, its NHWC indices turned into ONNX's).

Pads that depend on spatial sizes the model leaves dynamic (auto_pad=SAME_UPPER or
SAME_LOWER, or ceil_mode, at a stride above 1: torch's exports with dynamic H and W,
tf2onnx's with dynamic image sizes) are computed at run time from the input's Shape and
applied as a Pad before a VALID op (``_run_time_paddings``); a SAME_UPPER Conv, and an
undilated SAME_UPPER pool that leaves the padding out, is TensorFlow's SAME, which computes
the same pads itself. At stride 1 those pads never depend on the sizes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import axis_of, flatten2d, ints, rank_of, shape_of, static_dims
from kernloom.onnx.ops.detection import max_pool_indices
from kernloom.shapes import TensorShape

Result = Sequence[Tensor | None]

_WINDOW_ATTRS = ("auto_pad", "kernel_shape", "pads", "strides", "dilations")


# -- windows --------------------------------------------------------------------------------


_SAME = ("SAME_UPPER", "SAME_LOWER")

Pads = tuple[list[int], list[int]]
"""Pads at the start and at the end of each spatial axis, known at import time."""


def _auto_pad(node: OnnxNode) -> str:
    auto_pad = str(node.attr("auto_pad", "NOTSET"))
    if auto_pad not in (*_SAME, "VALID", "NOTSET"):
        raise node.fail(
            f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )
    return auto_pad


def _declared_pads(node: OnnxNode, auto_pad: str, n: int) -> tuple[list[int], list[int]]:
    """The ``pads`` attribute as (starts, ends) under auto_pad=NOTSET; zeros under VALID,
    and under SAME, whose pads ``_axis_pads`` computes."""
    if auto_pad != "NOTSET":
        return [0] * n, [0] * n
    pads = ints(node.attr("pads", [0] * (2 * n)))
    if len(pads) != 2 * n:
        raise node.fail(f"pads has {len(pads)} values; {2 * n} expected")
    return pads[:n], pads[n:]


def _axis_pads(
    auto_pad: str,
    size: int | None,
    window: tuple[int, int, int],
    declared: tuple[int, int],
    ceil_mode: bool,
) -> tuple[int, int] | None:
    """One spatial axis's (start, end) pads for its ``window`` (kernel, stride, dilation);
    None where they depend on its size and that is unknown at import time. At stride 1
    they never do: SAME pads (kernel - 1) * dilation in all, and ceil_mode adds nothing
    (every window of stride 1 ends inside the padded input)."""
    kernel, stride, dilation = window
    effective = (kernel - 1) * dilation + 1
    if auto_pad in _SAME:
        if stride == 1:
            total = effective - 1
        elif size is None:
            return None
        else:
            total = max((-(-size // stride) - 1) * stride + effective - size, 0)
        small, large = total // 2, total - total // 2
        return (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    begin, end = declared
    if not ceil_mode or stride == 1:
        return begin, end
    if size is None:
        return None
    span = size + begin + end - effective
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + begin:
        out -= 1  # the last window would start in the padding (as onnxruntime)
    return begin, end + max((out - 1) * stride + effective - (size + begin + end), 0)


def _spatial_pads(
    node: OnnxNode,
    in_dims: Sequence[int | None],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool = False,
) -> Pads | None:
    """ONNX's (pads at the start, pads at the end) per spatial dimension, or None where
    they depend on spatial sizes known at run time only (``_run_time_paddings`` computes
    them there).

    The end pads include what ``ceil_mode`` adds to reach the last, partial window.
    """
    auto_pad = _auto_pad(node)
    starts, ends = _declared_pads(node, auto_pad, len(kernel))
    begin, end = [], []
    for size, k, s, dl, b, e in zip(in_dims, kernel, strides, dilations, starts, ends, strict=True):
        pair = _axis_pads(auto_pad, size, (k, s, dl), (b, e), ceil_mode)
        if pair is None:
            return None
        begin.append(pair[0])
        end.append(pair[1])
    return begin, end


def _run_time_paddings(
    ctx: ConversionContext,
    node: OnnxNode,
    x4: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    squeezed: bool,
) -> Tensor:
    """Pad's int32 [rank, 2] paddings of ``x4`` (NCHW or NCDHW) where ``_spatial_pads``
    cannot tell them at import: its arithmetic (SAME, or ceil_mode's end extra) done on
    x4's run-time shape, so that a model exported with dynamic image sizes imports.
    ``kernel``, ``strides`` and ``dilations`` are x4's (a 1-D input's unit H first);
    N, C and that H get no pads."""
    lead, rank = 2 + int(squeezed), 2 + len(kernel)
    spatial = slice(int(squeezed), None)
    shape = ops.shape(x4, out_type=d.int32)
    sizes = ops.strided_slice(shape, ctx.int32s([lead]), ctx.int32s([rank]), ctx.int32s([1]))
    effective = [
        (k - 1) * dl + 1 for k, dl in zip(kernel[spatial], dilations[spatial], strict=True)
    ]
    window = (effective, list(strides[spatial]))
    auto_pad = _auto_pad(node)
    if auto_pad in _SAME:
        begin, end = _same_pads_at_run_time(ctx, sizes, window, upper=auto_pad == "SAME_UPPER")
    else:
        declared = _declared_pads(node, auto_pad, rank - lead)
        begin, end = _ceil_pads_at_run_time(ctx, sizes, window, declared)
    rows = ops.pack([begin, end], axis=1)
    return ops.concat_v2([ctx.const(np.zeros((lead, 2), np.int32)), rows], _i32(0))


def _same_pads_at_run_time(
    ctx: ConversionContext, sizes: Tensor, window: tuple[list[int], list[int]], *, upper: bool
) -> tuple[Tensor, Tensor]:
    """SAME's (starts, ends) for the run-time spatial ``sizes`` under ``window`` (effective
    kernel sizes, strides): ``_axis_pads``'s, ceil(size / stride) windows and the padding
    they need, the odd one at the end (UPPER) or at the start (LOWER)."""
    effective, strides = window
    stride = ctx.int32s(strides)
    out = ops.floor_div(ops.add_v2(sizes, ctx.int32s([s - 1 for s in strides])), stride)
    reach = ops.add_v2(ops.mul(ops.sub(out, ctx.int32s([1])), stride), ctx.int32s(effective))
    total = ops.maximum(ops.sub(reach, sizes), ctx.int32s([0] * len(strides)))
    small = ops.floor_div(total, ctx.int32s([2]))
    large = ops.sub(total, small)
    return (small, large) if upper else (large, small)


def _ceil_pads_at_run_time(
    ctx: ConversionContext,
    sizes: Tensor,
    window: tuple[list[int], list[int]],
    declared: Pads,
) -> tuple[Tensor, Tensor]:
    """ceil_mode's (starts, ends) for the run-time spatial ``sizes`` under ``window``
    (effective kernel sizes, strides): ``_axis_pads``'s, the ``declared`` pads with the end
    ones grown to reach the last, partial window, unless that window would start in the
    end padding (then there is none: onnxruntime's and torch's rule)."""
    effective, strides = window
    stride, reach_of = ctx.int32s(strides), ctx.int32s(effective)
    begin, declared_end = ctx.int32s(declared[0]), ctx.int32s(declared[1])
    before = ops.add_v2(sizes, begin)  # a window must start before this
    padded = ops.add_v2(before, declared_end)
    # the last window's index: ceil((padded - effective) / stride)
    round_up = ctx.int32s([s - 1 for s in strides])
    last = ops.floor_div(ops.add_v2(ops.sub(padded, reach_of), round_up), stride)
    in_pad = ops.greater_equal(ops.mul(last, stride), before)
    last = ops.sub(last, ops.cast(in_pad, DstT=d.int32))
    reach = ops.add_v2(ops.mul(last, stride), reach_of)
    extra = ops.maximum(ops.sub(reach, padded), ctx.int32s([0] * len(strides)))
    return begin, ops.add_v2(declared_end, extra)


def _padded(
    ctx: ConversionContext,
    x4: Tensor,
    paddings: Tensor,
    squeezed: bool,
    fill: Tensor | None = None,
) -> Tensor:
    """x4 padded by run-time ``paddings`` (with ``fill``, else zeros): its batch, channels
    and a 1-D input's unit H, which are not padded, stay as known as they were."""
    y = ops.pad(x4, paddings) if fill is None else ops.pad_v2(x4, paddings, fill)
    dims = x4.shape.as_list()
    lead = 2 + int(squeezed)
    _known_shape(y, [*dims[:lead], *(None,) * (len(dims) - lead)])
    return y


def _run_time_input(
    ctx: ConversionContext,
    node: OnnxNode,
    x4: Tensor,
    window: tuple[Sequence[int], Sequence[int], Sequence[int]],
    squeezed: bool,
    *,
    same: bool,
    lowest: bool = False,
) -> tuple[Tensor, str]:
    """(input, padding) of a window op whose pads depend on spatial sizes known at run time
    only. SAME_UPPER is TensorFlow's SAME (the same pads; nothing computed) where the op
    can run it (``same``); else x4 padded at run time (``_run_time_paddings``; with the
    lowest value of its dtype where ``lowest``, else zeros), VALID."""
    if same and _auto_pad(node) == "SAME_UPPER":
        return x4, "SAME"
    paddings = _run_time_paddings(ctx, node, x4, *window, squeezed)
    fill = _lowest(ctx, x4) if lowest else None
    return _padded(ctx, x4, paddings, squeezed, fill), "VALID"


def _x4_pads(
    node: OnnxNode,
    x4: Tensor,
    window: tuple[Sequence[int], Sequence[int], Sequence[int]],
    squeezed: bool,
    ceil_mode: bool = False,
) -> Pads | None:
    """``_spatial_pads`` of x4's spatial axes for its ``window`` (kernel, strides and
    dilations, a 1-D input's unit H first, which gets no pads); None where they are known
    at run time only."""
    kernel, strides, dilations = (list(v[int(squeezed) :]) for v in window)
    in_dims = x4.shape.as_list()[2 + int(squeezed) :]
    pads = _spatial_pads(node, in_dims, kernel, strides, dilations, ceil_mode)
    if pads is None or not squeezed:
        return pads
    return [0, *pads[0]], [0, *pads[1]]


def _window_attrs(node: OnnxNode, x: Tensor, kernel: Sequence[int]) -> tuple[list[int], list[int]]:
    n = len(kernel)
    strides = ints(node.attr("strides", [1] * n))
    dilations = ints(node.attr("dilations", [1] * n))
    if len(strides) != n or len(dilations) != n:
        raise node.fail(f"strides and dilations need {n} values (one per spatial dimension)")
    return strides, dilations


def _to_4d(node: OnnxNode, x: Tensor, what: str) -> tuple[Tensor, bool]:
    """A 1-D window op's [N, C, L] input as [N, C, 1, L]; 2-D and 3-D inputs pass
    through."""
    rank = rank_of(node, x, what)
    if rank in (4, 5):
        return x, False
    if rank == 3:
        return ops.expand_dims(x, _i32(2)), True
    raise node.fail(
        f"{what} of rank {rank}: only 1-D, 2-D and 3-D windows (rank 3 to 5) are supported"
    )


def _paddings(ctx: ConversionContext, begin: Sequence[int], end: Sequence[int]) -> Tensor:
    """Pad's paddings for an NC... tensor: none on N and C, (begin, end) on the rest."""
    pairs = [[0, 0], [0, 0], *([b, e] for b, e in zip(begin, end, strict=True))]
    return ctx.int32s(pairs)  # type: ignore[arg-type]


def _window_reduce(
    ctx: ConversionContext,
    x: Tensor,
    kind: str,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    padding: str = "VALID",
) -> Tensor:
    """The maximum (``kind="max"``) or mean of each VALID window of the (already padded)
    NCHW or NCDHW ``x`` (or of each SAME window: undilated only). Undilated: TF's pool.
    Dilated (TF's pools have none): the window taps gathered one strided slice each (tap t
    of axis a starts at t * dilation and ends where the last window's tap does), stacked
    and reduced: exact, at kernel-volume slices."""
    rank = len(kernel)
    if all(dl == 1 for dl in dilations):
        pool = {
            ("max", 2): ops.max_pool,
            ("max", 3): ops.max_pool3d,
            ("mean", 2): ops.avg_pool,
            ("mean", 3): ops.avg_pool3d,
        }[kind, rank]
        return pool(
            x,
            ksize=[1, 1, *kernel],
            strides=[1, 1, *strides],
            padding=padding,
            data_format="NCHW" if rank == 2 else "NCDHW",
        )
    assert padding == "VALID", "a dilated pool's pads come as a Pad"
    taps = []
    for tap in np.ndindex(*kernel):
        begin, end, end_mask = [0, 0], [0, 0], 0b11
        for axis, (t, k, dl) in enumerate(zip(tap, kernel, dilations, strict=True)):
            after = (k - 1 - t) * dl  # how far the window reaches past this tap
            begin.append(t * dl)
            end.append(-after)
            if after == 0:
                end_mask |= 1 << (axis + 2)
        taps.append(
            ops.strided_slice(
                x,
                ctx.int32s(begin),
                ctx.int32s(end),
                ctx.int32s([1, 1, *strides]),
                end_mask=end_mask,
            )
        )
    reduce = ops.max if kind == "max" else ops.mean
    return reduce(ops.pack(taps, axis=0), ctx.int32s([0]))


def _i32(value: int) -> Any:
    return np.int32(value)


# -- Conv -----------------------------------------------------------------------------------


@converter("Conv", 1, attrs=(*_WINDOW_ATTRS, "group"))
def _conv(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [convolve(node, ctx, ctx.input(0), ctx.input(1), ctx.static_input(1), ctx.optional(2))]


def convolve(
    node: OnnxNode,
    ctx: ConversionContext,
    x: Tensor,
    w: Tensor,
    w_static: np.ndarray[Any, Any] | None,
    bias: Tensor | None,
) -> Tensor:
    """ONNX's Conv of x by w (``w_static``: w's value where known at import time) under
    the node's window attributes, plus bias: also the core of ConvInteger and QLinearConv."""
    x4, squeezed = _to_4d(node, x, "input X")
    if x4.shape.rank == 5:
        return _convolve3d(node, ctx, x4, w, w_static, bias)
    if w_static is not None:
        kernel_w = w_static if w_static.ndim == 4 else w_static[:, :, None, :]
        kernel = list(kernel_w.shape[2:])
        filt = ctx.const_like(np.ascontiguousarray(kernel_w.transpose(2, 3, 1, 0)), w)
    else:
        w_dims = static_dims(w)
        if w_dims is None:
            raise node.fail("the weight's shape must be known at import time")
        w4 = w if len(w_dims) == 4 else ops.expand_dims(w, _i32(2))
        kernel = w_dims[2:] if len(w_dims) == 4 else [1, w_dims[2]]
        filt = ops.transpose(w4, ctx.int32s([2, 3, 1, 0]))
    declared = node.attr("kernel_shape")
    if declared is not None and ints(declared) != (kernel if not squeezed else kernel[1:]):
        raise node.fail(f"kernel_shape {ints(declared)} differs from the weight's {kernel}")
    strides, dilations = _window_attrs(node, x, kernel if not squeezed else kernel[1:])
    if squeezed:
        strides, dilations = [1, *strides], [1, *dilations]
    window = {"strides": [1, 1, *strides], "data_format": "NCHW", "dilations": [1, 1, *dilations]}
    pads = _x4_pads(node, x4, (kernel, strides, dilations), squeezed)
    if pads is None:
        # SAME_UPPER as TF's SAME (its geometry is ONNX's, dilations included)
        x_in, padding = _run_time_input(
            ctx, node, x4, (kernel, strides, dilations), squeezed, same=True
        )
        y = ops.conv2d(x_in, filt, padding=padding, **window)
    else:
        begin, end = pads
        y = ops.conv2d(
            x4,
            filt,
            padding="EXPLICIT",
            explicit_paddings=[0, 0, 0, 0, begin[0], end[0], begin[1], end[1]],
            **window,
        )
    if bias is not None:
        y = ops.bias_add(y, bias, data_format="NCHW")
    if squeezed:
        y = ops.squeeze(y, squeeze_dims=[2])
    return y


def _convolve3d(
    node: OnnxNode,
    ctx: ConversionContext,
    x: Tensor,
    w: Tensor,
    w_static: np.ndarray[Any, Any] | None,
    bias: Tensor | None,
) -> Tensor:
    """A 3-D Conv: TF's Conv3D has no EXPLICIT padding and no groups, so the pads become a
    Pad and the convolution VALID; group > 1 is refused."""
    if int(node.attr("group", 1)) != 1:
        raise node.fail(f"group={node.attr('group')}: 3-D convolution supports group=1 only")
    if not x.dtype.is_floating:
        raise node.fail(
            f"a 3-D convolution of {x.dtype.name}: only 1-D and 2-D windows take integers "
            f"(TF's Conv3D is float16, float32 or float64 only)"
        )
    if w_static is not None:
        kernel = list(w_static.shape[2:])
        filt = ctx.const_like(np.ascontiguousarray(w_static.transpose(2, 3, 4, 1, 0)), w)
    else:
        w_dims = static_dims(w)
        if w_dims is None:
            raise node.fail("the weight's shape must be known at import time")
        kernel = w_dims[2:]
        filt = ops.transpose(w, ctx.int32s([2, 3, 4, 1, 0]))
    declared = node.attr("kernel_shape")
    if declared is not None and ints(declared) != kernel:
        raise node.fail(f"kernel_shape {ints(declared)} differs from the weight's {kernel}")
    strides, dilations = _window_attrs(node, x, kernel)
    pads = _x4_pads(node, x, (kernel, strides, dilations), False)
    if pads is None:
        padded, padding = _run_time_input(
            ctx, node, x, (kernel, strides, dilations), False, same=True
        )
    else:
        begin, end = pads
        padded = ops.pad(x, _paddings(ctx, begin, end)) if any(begin) or any(end) else x
        padding = "VALID"
    y = ops.conv3d(
        padded,
        filt,
        strides=[1, 1, *strides],
        padding=padding,
        data_format="NCDHW",
        dilations=[1, 1, *dilations],
    )
    return ops.bias_add(y, bias, data_format="NCHW") if bias is not None else y


# -- pooling --------------------------------------------------------------------------------


def _pool_setup(
    node: OnnxNode, ctx: ConversionContext
) -> tuple[Tensor, bool, list[int], list[int], list[int], Pads | None]:
    """(input as NCHW or NCDHW, whether a 1-D input was given a unit H, kernel, strides,
    dilations, pads at the start and at the end (with what ceil_mode adds): None where
    they are known at run time only)."""
    x4, squeezed = _to_4d(node, ctx.input(0), "input X")
    rank = x4.shape.rank
    kernel = ints(node.attr("kernel_shape"))
    strides, dilations = _window_attrs(node, x4, kernel)
    if squeezed:
        kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
    if rank is None or len(kernel) != rank - 2:
        raise node.fail(f"kernel_shape {kernel} does not match the input's rank {rank}")
    ceil_mode = bool(node.attr("ceil_mode", 0))
    pads = _x4_pads(node, x4, (kernel, strides, dilations), squeezed, ceil_mode)
    return x4, squeezed, kernel, strides, dilations, pads


def _unsqueezed(y: Tensor, squeezed: bool) -> Tensor:
    return ops.squeeze(y, squeeze_dims=[2]) if squeezed else y


def _lowest(ctx: ConversionContext, x: Tensor) -> Tensor:
    """The lowest value of x's dtype, what MaxPool pads with (no window's maximum)."""
    lowest = (
        -np.inf
        if x.dtype.is_floating
        else x.dtype.numpy_dtype.type(np.iinfo(x.dtype.numpy_dtype).min)
    )
    return ctx.const_like(lowest, x)


@converter("MaxPool", 1, attrs=(*_WINDOW_ATTRS, "ceil_mode", "storage_order"))
def _max_pool(node: OnnxNode, ctx: ConversionContext) -> Result:
    x4, squeezed, kernel, strides, dilations, pads = _pool_setup(node, ctx)
    plain = len(kernel) == 2 and all(dl == 1 for dl in dilations)
    if len(node.outputs) > 1 and node.outputs[1]:
        if not plain:
            raise node.fail("the Indices output is supported for undilated 1-D and 2-D pooling")
        if pads is None:
            y, indices = _max_pool_indices_run_time(node, ctx, x4, kernel, strides, squeezed)
        else:
            y, indices = max_pool_indices(node, ctx, x4, kernel, strides, *pads)
        return [_unsqueezed(y, squeezed), _unsqueezed(indices, squeezed)]
    if pads is None:
        undilated = all(dl == 1 for dl in dilations)
        window = (kernel, strides, dilations)
        x_in, padding = _run_time_input(
            ctx, node, x4, window, squeezed, same=undilated, lowest=True
        )
        y = _window_reduce(ctx, x_in, "max", kernel, strides, dilations, padding)
        return [_unsqueezed(y, squeezed)]
    begin, end = pads
    if not plain:  # TF's 3-D pool has no EXPLICIT padding: pad with the lowest value
        padded = ops.pad_v2(x4, _paddings(ctx, begin, end), _lowest(ctx, x4))
        return [
            _unsqueezed(_window_reduce(ctx, padded, "max", kernel, strides, dilations), squeezed)
        ]
    y = ops.max_pool(
        x4,
        ksize=[1, 1, *kernel],
        strides=[1, 1, *strides],
        padding="EXPLICIT",
        explicit_paddings=[0, 0, 0, 0, begin[0], end[0], begin[1], end[1]],
        data_format="NCHW",
    )
    return [_unsqueezed(y, squeezed)]


def _max_pool_indices_run_time(
    node: OnnxNode,
    ctx: ConversionContext,
    x4: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    squeezed: bool,
) -> tuple[Tensor, Tensor]:
    """MaxPool's (Y, Indices) where the pads are known at run time only:
    ``max_pool_indices`` (which takes pads known at import) of x4 padded at run time with
    the lowest value, its indices into that padded input mapped back onto x4's."""
    paddings = _run_time_paddings(ctx, node, x4, kernel, strides, [1, 1], squeezed)
    padded = _padded(ctx, x4, paddings, squeezed, _lowest(ctx, x4))
    y, flat = max_pool_indices(node, ctx, padded, kernel, strides, [0, 0], [0, 0])
    _, _, height_p, width_p = _dims_64(ctx, padded)
    _, _, height, width = _dims_64(ctx, x4)
    top = ops.cast(ops.slice(paddings, ctx.int32s([2, 0]), ctx.int32s([1, 1])), DstT=d.int64)
    left = ops.cast(ops.slice(paddings, ctx.int32s([3, 0]), ctx.int32s([1, 1])), DstT=d.int64)
    area = ops.mul(height_p, width_p)
    plane, within = ops.floor_div(flat, area), ops.floor_mod(flat, area)
    row_major = int(node.attr("storage_order", 0)) == 0  # (max_pool_indices checked it)
    if row_major:
        row, column = ops.floor_div(within, width_p), ops.floor_mod(within, width_p)
    else:
        row, column = ops.floor_mod(within, height_p), ops.floor_div(within, height_p)
    row, column = ops.sub(row, top), ops.sub(column, left)
    if row_major:
        within = ops.add_v2(ops.mul(row, width), column)
    else:
        within = ops.add_v2(row, ops.mul(column, height))
    return y, ops.add_v2(ops.mul(plane, ops.mul(height, width)), within)


def _dims_64(ctx: ConversionContext, x: Tensor) -> list[Tensor]:
    """x's dimensions as [1] int64 tensors: constants where known at import time."""
    return [ctx.int64s([v]) if isinstance(v, int) else v for v in _dims(ctx, x)]


@converter("AveragePool", 1, attrs=(*_WINDOW_ATTRS, "ceil_mode", "count_include_pad"))
def _average_pool(node: OnnxNode, ctx: ConversionContext) -> Result:
    x4, squeezed, kernel, strides, dilations, pads = _pool_setup(node, ctx)
    if pads is None:
        y = _average_pool_run_time(node, ctx, x4, (kernel, strides, dilations), squeezed)
        return [_unsqueezed(y, squeezed)]
    begin, end = pads

    def mean(x: Tensor) -> Tensor:
        return _window_reduce(ctx, x, "mean", kernel, strides, dilations)

    if not any(begin) and not any(end):
        return [_unsqueezed(mean(x4), squeezed)]
    include = bool(node.attr("count_include_pad", 0))
    window = {"ksize": [1, 1, *kernel], "strides": [1, 1, *strides], "data_format": "NCHW"}
    if (
        not include
        and len(kernel) == 2
        and all(dl == 1 for dl in dilations)
        and _same_pads(x4, kernel, strides) == (begin, end)
    ):
        # TensorFlow's SAME pooling leaves the padding out of each window's count: one op
        # where the general form is a Pad, two AvgPools and a division (Inception v2's
        # 3x3/1 pools with pads of 1).
        return [_unsqueezed(ops.avg_pool(x4, padding="SAME", **window), squeezed)]
    # The declared pads (what count_include_pad may count) and the ceil_mode extra (never).
    declared_end = list(end)
    if bool(node.attr("ceil_mode", 0)):
        declared = _x4_pads(node, x4, (kernel, strides, dilations), squeezed)
        assert declared is not None  # (known where the pads with ceil_mode's extra are)
        declared_end = declared[1]
    paddings = _paddings(ctx, begin, end)
    summed = mean(ops.pad(x4, paddings))
    if include and declared_end == end:
        return [_unsqueezed(summed, squeezed)]
    ones = ops.ones_like(x4)
    if include:
        ones = ops.pad_v2(ones, _paddings(ctx, begin, declared_end), ctx.const_like(1, x4))
        extra = [e - d for e, d in zip(end, declared_end, strict=True)]
        mask = ops.pad(ones, _paddings(ctx, [0] * len(end), extra))
    else:
        mask = ops.pad(ones, paddings)
    return [_unsqueezed(ops.real_div(summed, mean(mask)), squeezed)]


def _average_pool_run_time(
    node: OnnxNode,
    ctx: ConversionContext,
    x4: Tensor,
    window: tuple[Sequence[int], Sequence[int], Sequence[int]],
    squeezed: bool,
) -> Tensor:
    """AveragePool whose pads depend on spatial sizes known at run time only. Undilated
    SAME_UPPER without count_include_pad is TensorFlow's SAME AvgPool (which leaves the
    padding out of each window's count); else, as with pads known at import, the mean of
    the padded input over the mean of a padded mask of what each window counts: the
    input, and with count_include_pad the declared pads (all of SAME's), never what
    ceil_mode adds."""
    kernel, strides, dilations = window
    include = bool(node.attr("count_include_pad", 0))
    auto_pad = _auto_pad(node)

    def mean(x: Tensor, padding: str = "VALID") -> Tensor:
        return _window_reduce(ctx, x, "mean", kernel, strides, dilations, padding)

    if not include and auto_pad == "SAME_UPPER" and all(dl == 1 for dl in dilations):
        return mean(x4, "SAME")
    full = _run_time_paddings(ctx, node, x4, *window, squeezed)
    summed = mean(_padded(ctx, x4, full, squeezed))
    if include and auto_pad in _SAME:
        return summed
    ones = ops.ones_like(x4)
    if include:  # the declared pads count, ceil_mode's extra end pads (full's rest) do not
        starts, ends = _declared_pads(node, auto_pad, len(kernel) - int(squeezed))
        lead = [0] * int(squeezed)
        declared = _paddings(ctx, [*lead, *starts], [*lead, *ends])
        counted = ops.pad_v2(ones, declared, ctx.const_like(1, x4))
        mask = _padded(ctx, counted, ops.sub(full, declared), squeezed)
    else:
        mask = _padded(ctx, ones, full, squeezed)
    return ops.real_div(summed, mean(mask))


def _same_pads(
    x4: Tensor, kernel: Sequence[int], strides: Sequence[int]
) -> tuple[list[int], list[int]] | None:
    """TensorFlow's SAME padding (before, after) per spatial dimension of ``x4``, where its
    spatial sizes are known: an output of ``ceil(size / stride)``, the total padding split
    with the odd one at the end."""
    dims = x4.shape.as_list()[2:] if x4.shape.rank == 4 else [None, None]
    begin, end = [], []
    for size, k, s in zip(dims, kernel, strides, strict=True):
        if size is None:
            return None
        total = max((-(-size // s) - 1) * s + k - size, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin, end


def _global(node: OnnxNode, ctx: ConversionContext, reducer: Any) -> Result:
    x = ctx.input(0)
    rank = rank_of(node, x, "input X")
    if rank < 3:
        raise node.fail(f"the input needs rank >= 3 (N, C, spatial...), got {rank}")
    return [reducer(x, ctx.int32s(list(range(2, rank))), keep_dims=True)]


converter("GlobalAveragePool", 1)(functools.partial(_global, reducer=ops.mean))


converter("GlobalMaxPool", 1)(functools.partial(_global, reducer=ops.max))


# -- softmax --------------------------------------------------------------------------------


def _softmax(node: OnnxNode, ctx: ConversionContext, fn: Any, legacy: bool) -> Result:
    x = ctx.input(0)
    rank = rank_of(node, x, "input")
    axis = axis_of(node, int(node.attr("axis", 1 if legacy else -1)), rank)
    if axis == rank - 1:
        return [fn(x)]
    if legacy:
        # Before opset 13: the input coerced to 2-D at axis, normalized over the second.
        flat = flatten2d(ctx, node, x, axis)
        shape = (
            ops.shape(x, out_type=d.int64)
            if static_dims(x) is None
            else ctx.int64s(static_dims(x) or [])
        )
        return [ops.reshape(fn(flat), shape)]
    perm = [i for i in range(rank) if i != axis] + [axis]
    inverse = list(np.argsort(perm))
    moved = fn(ops.transpose(x, ctx.int32s(perm)))
    return [ops.transpose(moved, ctx.int32s([int(i) for i in inverse]))]


converter("Softmax", 1, 11, attrs=("axis",))(
    functools.partial(_softmax, fn=ops.softmax, legacy=True)
)


converter("Softmax", 13, attrs=("axis",))(functools.partial(_softmax, fn=ops.softmax, legacy=False))


converter("LogSoftmax", 1, 11, attrs=("axis",))(
    functools.partial(_softmax, fn=ops.log_softmax, legacy=True)
)


converter("LogSoftmax", 13, attrs=("axis",))(
    functools.partial(_softmax, fn=ops.log_softmax, legacy=False)
)


# -- matrices -------------------------------------------------------------------------------


@converter("Gemm", 7, attrs=("alpha", "beta", "transA", "transB"))
def _gemm(node: OnnxNode, ctx: ConversionContext) -> Result:
    a, b = ctx.input(0), ctx.input(1)
    c = ctx.optional(2)
    y = ops.mat_mul(
        a, b, transpose_a=bool(node.attr("transA", 0)), transpose_b=bool(node.attr("transB", 0))
    )
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if alpha != 1.0:
        y = ops.mul(y, ctx.const_like(alpha, y))
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = ops.mul(c, ctx.const_like(beta, c))
        y = ops.add_v2(y, c)
    return [y]


@converter("MatMul", 1)
def _matmul(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [matrix_product(node, ctx.input(0), ctx.input(1))]


def matrix_product(node: OnnxNode, a: Tensor, b: Tensor) -> Tensor:
    """ONNX's MatMul (numpy's matmul: 1-D operands, broadcast batch axes) of a and b: also
    the core of MatMulInteger and QLinearMatMul."""
    ra, rb = rank_of(node, a, "input A"), rank_of(node, b, "input B")
    if ra == 2 and rb == 2:
        return ops.mat_mul(a, b)
    a2 = ops.expand_dims(a, _i32(0)) if ra == 1 else a
    b2 = ops.expand_dims(b, _i32(1)) if rb == 1 else b
    y = ops.batch_mat_mul_v2(a2, b2)
    squeeze = []
    out_rank = max(ra if ra > 1 else 2, rb if rb > 1 else 2)
    if ra == 1:
        squeeze.append(out_rank - 2)
    if rb == 1:
        squeeze.append(out_rank - 1)
    return ops.squeeze(y, squeeze_dims=squeeze) if squeeze else y


__all__ = ["convolve", "matrix_product"]


def _rearrange(node: OnnxNode, ctx: ConversionContext, to_depth: bool) -> Result:
    x = ctx.input(0)
    if rank_of(node, x) != 4:
        raise node.fail("only rank-4 (NCHW) inputs are supported")
    block = int(node.attr("blocksize"))
    mode = str(node.attr("mode", "DCR"))
    if mode == "CRD":
        return [_rearrange_crd(node, ctx, x, block, to_depth)]
    nhwc = ops.transpose(x, ctx.int32s([0, 2, 3, 1]))
    fn = ops.space_to_depth if to_depth else ops.depth_to_space
    return [ops.transpose(fn(nhwc, block_size=block), ctx.int32s([0, 3, 1, 2]))]


Dim = int | Tensor
"""A dimension known at import time, or a run-time [1] int64 vector (``_dims``)."""


def _rearrange_crd(
    node: OnnxNode, ctx: ConversionContext, x: Tensor, block: int, to_depth: bool
) -> Tensor:
    """mode=CRD (channel, row, column: the channels of a block adjacent) as Reshape,
    Transpose, Reshape. The batch is -1 in the shapes; a channel or spatial size not
    known at import time comes from x's shape at run time."""
    _, c, h, w = _dims(ctx, x)
    area = block * block
    if to_depth:
        for name, size in (("height", h), ("width", w)):
            if isinstance(size, int) and size % block:
                raise node.fail(f"the input's {name} {size} is not a multiple of {block}")
        hb, wb = _scaled(ctx, h, 1, block), _scaled(ctx, w, 1, block)
        split: list[Dim] = [-1, c, hb, block, wb, block]
        perm = [0, 1, 3, 5, 2, 4]
        joined: list[Dim] = [-1, _scaled(ctx, c, area, 1), hb, wb]
    else:
        if isinstance(c, int) and c % area:
            raise node.fail(f"the input's {c} channels are not a multiple of {block}**2")
        cb = _scaled(ctx, c, 1, area)
        split = [-1, cb, block, block, h, w]
        perm = [0, 1, 4, 2, 5, 3]
        joined = [-1, cb, _scaled(ctx, h, block, 1), _scaled(ctx, w, block, 1)]
    y = ops.reshape(x, _shape_vector(ctx, split))
    y = ops.reshape(ops.transpose(y, ctx.int32s(perm)), _shape_vector(ctx, joined))
    batch = x.shape.as_list()[0]
    _known_shape(y, [batch, *(v if isinstance(v, int) else None for v in joined[1:])])
    return y


def _dims(ctx: ConversionContext, x: Tensor) -> list[Dim]:
    """x's dimensions: ints where known at import time, else [1] slices of its Shape."""
    shape: Tensor | None = None
    dims: list[Dim] = []
    for axis, size in enumerate(x.shape.as_list()):
        if size is not None:
            dims.append(size)
            continue
        if shape is None:
            shape = ops.shape(x, out_type=d.int64)
        dims.append(
            ops.strided_slice(shape, ctx.int64s([axis]), ctx.int64s([axis + 1]), ctx.int64s([1]))
        )
    return dims


def _scaled(ctx: ConversionContext, size: Dim, times: int, over: int) -> Dim:
    """size * times // over, at import time where size is known."""
    if isinstance(size, int):
        return size * times // over
    if times != 1:
        size = ops.mul(size, ctx.int64s([times]))
    return ops.floor_div(size, ctx.int64s([over])) if over != 1 else size


def _shape_vector(ctx: ConversionContext, dims: Sequence[Dim]) -> Tensor:
    """An int64 shape vector of ``dims``: a constant where all are known."""
    if all(isinstance(v, int) for v in dims):
        return ctx.int64s([int(v) for v in dims if isinstance(v, int)])
    parts = [ctx.int64s([v]) if isinstance(v, int) else v for v in dims]
    return ops.concat_v2(parts, _i32(0))


converter("SpaceToDepth", 1, attrs=("blocksize", "mode"))(
    functools.partial(_rearrange, to_depth=True)
)


converter("DepthToSpace", 1, attrs=("blocksize", "mode"))(
    functools.partial(_rearrange, to_depth=False)
)


@converter("LpPool", 11, attrs=(*_WINDOW_ATTRS, "ceil_mode", "p"))
def _lp_pool(node: OnnxNode, ctx: ConversionContext) -> Result:
    """(sum over the window of |x| ** p) ** (1 / p): a VALID AvgPool of the zero-padded
    powers, times the window's area. Also LpPool-1 (p a float) and LpPool-2 (p an int),
    which have no dilations or ceil_mode, for opsets 1 to 10."""
    x4, squeezed, kernel, strides, dilations, pads = _pool_setup(node, ctx)
    p = float(node.attr("p", 2))
    powered = ops.pow(ops.abs(x4), ctx.const_like(p, x4))
    if pads is None:
        window = (kernel, strides, dilations)
        paddings = _run_time_paddings(ctx, node, x4, *window, squeezed)
        padded = _padded(ctx, powered, paddings, squeezed)
    else:
        padded = ops.pad(powered, _paddings(ctx, *pads))
    mean = _window_reduce(ctx, padded, "mean", kernel, strides, dilations)
    total = ops.mul(mean, ctx.const_like(float(np.prod(kernel)), mean))
    return [_unsqueezed(ops.pow(total, ctx.const_like(1 / p, total)), squeezed)]


converter("LpPool", 1, 10, attrs=("auto_pad", "kernel_shape", "pads", "strides", "p"))(_lp_pool)


@converter("GlobalLpPool", 2, attrs=("p",))
def _global_lp_pool(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    p = float(node.attr("p", 2))
    rank = rank_of(node, x, "input X")
    total = ops.sum(
        ops.pow(ops.abs(x), ctx.const_like(p, x)), ctx.int32s(list(range(2, rank))), keep_dims=True
    )
    return [ops.pow(total, ctx.const_like(1 / p, total))]


# -- ConvTranspose --------------------------------------------------------------------------


def _transpose_pads(
    node: OnnxNode,
    in_dims: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    output_padding: Sequence[int],
    *,
    unit_h: bool = False,
) -> tuple[list[int], list[int], list[int]]:
    """(pads at the start, at the end, output sizes) of a transposed convolution.
    ``unit_h``: a 1-D one, run with a unit H axis first, which its ``pads`` and
    ``output_shape`` do not list."""
    n = len(kernel)
    lead = int(unit_h)
    effective = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations, strict=True)]
    full = [
        s * (i - 1) + op + e
        for s, i, op, e in zip(strides, in_dims, output_padding, effective, strict=True)
    ]
    auto_pad = str(node.attr("auto_pad", "NOTSET"))
    output_shape = node.attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = (
            [1] * lead + ints(output_shape)[-(n - lead) :]
            if output_shape is not None
            else [i * s for i, s in zip(in_dims, strides, strict=True)]
        )
        totals = [f - w for f, w in zip(full, wanted, strict=True)]
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in totals]
        else:
            begin = [t - t // 2 for t in totals]
        end = [t - b for t, b in zip(totals, begin, strict=True)]
        return begin, end, list(wanted)
    if auto_pad == "VALID":
        return [0] * n, [0] * n, full
    pads = ints(node.attr("pads", [0] * (2 * (n - lead))))
    if len(pads) != 2 * (n - lead):
        raise node.fail(f"pads has {len(pads)} values; {2 * (n - lead)} expected")
    begin, end = [0] * lead + pads[: n - lead], [0] * lead + pads[n - lead :]
    sizes = [f - b - e for f, b, e in zip(full, begin, end, strict=True)]
    return begin, end, sizes


@converter("ConvTranspose", 1, attrs=(*_WINDOW_ATTRS, "group", "output_padding", "output_shape"))
def _conv_transpose(node: OnnxNode, ctx: ConversionContext) -> Result:
    """The gradient of a convolution with respect to its input (Conv2DBackpropInput, or
    Conv3DBackpropInputV2 for 3-D inputs); groups run one by one and are concatenated
    along the channels. 1-D and 2-D: the weight's shape must be known at import time, the
    input's batch, channels and spatial sizes may be known at run time only (the output's
    sizes are then computed there)."""
    x, w = ctx.input(0), ctx.input(1)
    bias = ctx.optional(2)
    groups = int(node.attr("group", 1))
    x4, squeezed = _to_4d(node, x, "input X")
    if x4.shape.rank == 5:
        return [_conv_transpose3d(node, ctx, x4, w, bias, groups)]
    w_static = ctx.static_input(1)
    w_dims = static_dims(w)
    if w_dims is None:
        raise node.fail(f"the weight's shape must be known at import time, got {w.shape}")
    w4 = w if len(w_dims) == 4 else ops.expand_dims(w, _i32(2))
    kernel = w_dims[2:] if len(w_dims) == 4 else [1, w_dims[2]]
    if w_static is not None:
        kernel_w = w_static if w_static.ndim == 4 else w_static[:, :, None, :]
        filt = ctx.const_like(np.ascontiguousarray(kernel_w.transpose(2, 3, 1, 0)), w)
    else:
        filt = ops.transpose(w4, ctx.int32s([2, 3, 1, 0]))
    spatial = len(kernel) - int(squeezed)
    strides = ints(node.attr("strides", [1] * spatial))
    dilations = ints(node.attr("dilations", [1] * spatial))
    output_padding = ints(node.attr("output_padding", [0] * spatial))
    if squeezed:
        strides, dilations, output_padding = [1, *strides], [1, *dilations], [0, *output_padding]
    x_dims = x4.shape.as_list()
    channels, out_channels = w_dims[0], w_dims[1]
    if x_dims[1] is not None and x_dims[1] != channels:
        raise node.fail(
            f"the input has {x_dims[1]} channels, but the weight (shape {w_dims}) takes {channels}"
        )
    if channels % groups:
        raise node.fail(f"group={groups} does not divide the {channels} input channels")
    in_hw = x_dims[2:]
    known_hw = None if None in in_hw else [int(v) for v in in_hw if v is not None]
    window = (kernel, strides, dilations, output_padding)
    wanted: list[int] | None = None
    if known_hw is not None:
        begin, end, _ = _transpose_pads(node, known_hw, *window, unit_h=squeezed)
    elif node.attr("output_shape") is None:
        # Explicit pads, VALID and SAME (an output of input * stride, a total padding of
        # output_padding + (kernel - 1) * dilation + 1 - stride) do not depend on the
        # input's sizes: any size gives them.
        begin, end, _ = _transpose_pads(node, [1, 1], *window, unit_h=squeezed)
    else:
        # output_shape: pads that depend on the input's sizes, applied at run time after a
        # transposed convolution without any.
        begin, end = [0, 0], [0, 0]
        wanted = _transpose_pads(node, [1, 1], *window, unit_h=squeezed)[2]
    # An output larger than the full transposed convolution: zeros around it.
    grow = [[max(-b, 0), max(-e, 0)] for b, e in zip(begin, end, strict=True)]
    begin, end = [max(b, 0) for b in begin], [max(e, 0) for e in end]
    # The size of the convolution's output per axis: stride * input + offset.
    offsets = [
        op + (k - 1) * dl + 1 - s - b - e
        for op, k, dl, s, b, e in zip(
            output_padding, kernel, dilations, strides, begin, end, strict=True
        )
    ]
    computed = [
        None if i is None else s * i + o for i, s, o in zip(in_hw, strides, offsets, strict=True)
    ]
    if known_hw is not None:
        input_sizes = ctx.int32s([int(v) for v in computed if v is not None])
    else:
        hw = ops.strided_slice(
            ops.shape(x4, out_type=d.int32), ctx.int32s([2]), ctx.int32s([4]), ctx.int32s([1])
        )
        input_sizes = ops.add_v2(ops.mul(hw, ctx.int32s(strides)), ctx.int32s(offsets))
    # input_sizes holds H and W only: the batch comes from the input, at run time.
    xs = [x4] if groups == 1 else list(ops.split(_i32(1), x4, num_split=groups))
    filters = [filt] if groups == 1 else list(ops.split(_i32(3), filt, num_split=groups))
    parts = [
        ops.conv2d_backprop_input(
            input_sizes,
            f,
            xg,
            strides=[1, 1, *strides],
            padding="EXPLICIT",
            explicit_paddings=[0, 0, 0, 0, begin[0], end[0], begin[1], end[1]],
            data_format="NCHW",
            dilations=[1, 1, *dilations],
        )
        for xg, f in zip(xs, filters, strict=True)
    ]
    for part in parts:
        _known_shape(part, [x_dims[0], out_channels, *computed])
    y = parts[0] if groups == 1 else ops.concat_v2(parts, _i32(1))
    if any(v for g in grow for v in g):
        y = ops.pad(y, ctx.int64s([[0, 0], [0, 0], *grow]))  # type: ignore[list-item]
    if wanted is not None:
        y = _cropped(ctx, node, y, input_sizes, wanted)
        _known_shape(y, [x_dims[0], out_channels * groups, *wanted])
    if bias is not None:
        y = ops.bias_add(y, bias, data_format="NCHW")
    return [_unsqueezed(y, squeezed)]


def _cropped(
    ctx: ConversionContext, node: OnnxNode, y: Tensor, sizes: Tensor, wanted: Sequence[int]
) -> Tensor:
    """The output_shape window of a transposed convolution ``y`` made without pads, its
    spatial ``sizes`` known at run time only: ``_transpose_pads``'s pads, computed there
    (zeros added where the window is larger)."""
    totals = ops.sub(sizes, ctx.int32s(list(wanted)))
    half = ops.floor_div(totals, ctx.int32s([2, 2]))
    upper = str(node.attr("auto_pad", "NOTSET")) == "SAME_UPPER"
    begin = half if upper else ops.sub(totals, half)
    end = ops.sub(totals, begin)
    zero = ctx.int32s([0, 0])
    grow = ops.pack([ops.maximum(ops.neg(begin), zero), ops.maximum(ops.neg(end), zero)], axis=1)
    padded = ops.pad(y, ops.concat_v2([ctx.const(np.zeros((2, 2), np.int32)), grow], _i32(0)))
    start = ops.concat_v2([ctx.int32s([0, 0]), ops.maximum(begin, zero)], _i32(0))
    return ops.slice(padded, start, ctx.int32s([-1, -1, *wanted]))


def _known_shape(y: Tensor, dims: Sequence[int | None]) -> None:
    """Give ``y``, the output of a node this converter built, the dimensions ``dims`` that
    the import knows (None: unknown) where its inference left them unknown (a size computed
    at run time); its values are unchanged."""
    known = y.shape.merge_with(TensorShape(list(dims)))
    if known != y.shape:
        y.graph.set_output_shape(y, known)


def _conv_transpose3d(
    node: OnnxNode, ctx: ConversionContext, x: Tensor, w: Tensor, bias: Tensor | None, groups: int
) -> Tensor:
    """A 3-D ConvTranspose through Conv3DBackpropInputV2, which has no EXPLICIT padding: it
    runs VALID onto the smallest input its windows fit, s * (i - 1) + (k - 1) * d + 1 per
    axis, of which ONNX's output (``_transpose_pads``) is a window: the pads are sliced off,
    output_padding and a larger output_shape padded on as zeros (no window reaches them).
    The batch may be unknown until run time; channels and spatial sizes may not."""
    if not x.dtype.is_floating:
        raise node.fail(
            f"a 3-D transposed convolution of {x.dtype.name}: only 1-D and 2-D windows take "
            f"integers (TF's Conv3DBackpropInputV2 is float16, float32 or float64 only)"
        )
    w_dims, x_dims = static_dims(w), x.shape.as_list()
    if w_dims is None or any(v is None for v in x_dims[1:]):
        raise node.fail(
            "the weight's shape and the input's channels and spatial sizes must be known at "
            "import time"
        )
    kernel, channels = w_dims[2:], int(x_dims[1])  # type: ignore[arg-type]
    declared = node.attr("kernel_shape")
    if declared is not None and ints(declared) != kernel:
        raise node.fail(f"kernel_shape {ints(declared)} differs from the weight's {kernel}")
    if channels % groups or w_dims[0] != channels:
        raise node.fail(f"group={groups} does not divide the {channels} input channels")
    w_static = ctx.static_input(1)
    if w_static is not None:
        filt = ctx.const_like(np.ascontiguousarray(w_static.transpose(2, 3, 4, 1, 0)), w)
    else:
        filt = ops.transpose(w, ctx.int32s([2, 3, 4, 1, 0]))
    strides, dilations = _window_attrs(node, x, kernel)
    output_padding = ints(node.attr("output_padding", [0, 0, 0]))
    if len(output_padding) != 3:
        raise node.fail(f"output_padding has {len(output_padding)} values; 3 expected")
    in_dims = [int(v) for v in x_dims[2:]]  # type: ignore[arg-type]
    begin, _, sizes = _transpose_pads(node, in_dims, kernel, strides, dilations, output_padding)
    if any(size < 0 for size in sizes):
        raise node.fail(f"the pads leave a negative output size: {sizes}")
    base = [
        s * (i - 1) + (k - 1) * dl + 1
        for s, i, k, dl in zip(strides, in_dims, kernel, dilations, strict=True)
    ]
    out_channels = w_dims[1] * groups
    batch = x_dims[0]
    if batch is not None:
        input_sizes = ctx.int32s([batch, w_dims[1], *base])
    else:
        leading = ops.slice(shape_of(ctx, x), ctx.int32s([0]), ctx.int32s([1]))
        rest = ops.cast(ctx.int32s([w_dims[1], *base]), DstT=leading.dtype)
        input_sizes = ops.concat_v2([leading, rest], _i32(0))
    xs = [x] if groups == 1 else list(ops.split(_i32(1), x, num_split=groups))
    filters = [filt] if groups == 1 else list(ops.split(_i32(4), filt, num_split=groups))
    parts = [
        ops.conv3d_backprop_input_v2(
            input_sizes,
            f,
            xg,
            strides=[1, 1, *strides],
            padding="VALID",
            data_format="NCDHW",
            dilations=[1, 1, *dilations],
        )
        for xg, f in zip(xs, filters, strict=True)
    ]
    y = parts[0] if groups == 1 else ops.concat_v2(parts, _i32(1))
    # ONNX's output spans [begin, begin + size) of the gradient's [0, base) on each axis.
    lows = [min(max(b, 0), full) for b, full in zip(begin, base, strict=True)]
    highs = [
        max(min(b + size, full), low)
        for b, size, full, low in zip(begin, sizes, base, lows, strict=True)
    ]
    if lows != [0, 0, 0] or highs != base:
        widths = [h - lo for h, lo in zip(highs, lows, strict=True)]
        y = ops.slice(y, ctx.int32s([0, 0, *lows]), ctx.int32s([-1, out_channels, *widths]))
    before = [min(max(-b, 0), size) for b, size in zip(begin, sizes, strict=True)]
    after = [
        size - bf - (h - lo) for size, bf, h, lo in zip(sizes, before, highs, lows, strict=True)
    ]
    if any(before) or any(after):
        y = ops.pad(y, _paddings(ctx, before, after))
    return ops.bias_add(y, bias, data_format="NCHW") if bias is not None else y
