"""ONNX's DeformConv (2-D), composed of kernloom gathers, arithmetic and a batched matmul.

A deformable convolution is a grouped convolution whose taps do not sit on the regular
grid: each output position and kernel tap reads the input at the regular tap position
plus a learned offset, sampled bilinearly with zeros outside the image, and optionally
scaled by a mask (DCNv2). The graph builds it as onnx's reference does, in three steps:

* the sampling points: the regular tap positions ``-pad + stride * out + dilation * tap``
  are a float64 constant [kh, kw, oh, ow] made at import (so the input's spatial sizes
  must be known then); the offsets are added per batch and offset group, in float64 as the
  reference, so that the floor of a coordinate sees the same value;
* the samples: the four corners of each point, each one GatherV2 (``batch_dims`` over the
  batch and the offset group) from the input viewed as [N, offset_group, H * W, C / og],
  weighted by its bilinear weight, which is 0 for a corner outside the image; the sum
  times the mask gives the columns of an im2col;
* the convolution: the columns regrouped as [N, group, oh * ow, C / group * kh * kw]
  contracted with the weights [group, OC / group, C / group * kh * kw] (BatchMatMulV2),
  then the bias.

The blend and the contraction run in float32 (float64 for float64 input; float16 input is
computed in float32 and rounded at the end). Only 2-D inputs are converted (onnx's node
suite and reference evaluator are 2-D only).

Deviations from onnx's reference: its GridSample rounds the sampling coordinates to
float32, also for float64 input; here they stay float64, so float64 results are the more
exact (they differ from the reference by about 1e-6 relative). For an input axis of
length 1 the reference normalizes coordinates for GridSample by dividing by
``length - 1`` and fails; here, as in onnxruntime, such an axis is sampled like any other
(its one row, zeros beside it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import ints, rank_of, static_dims

Result = Sequence[Tensor | None]
F64, I64 = d.float64, d.int64

_FLOATS = (d.float16, d.float32, d.float64)


class _Geometry:
    """The convolution's sizes and attributes, checked at import."""

    def __init__(self, node: OnnxNode, x: Tensor, w: Tensor) -> None:
        if rank_of(node, x, "input X") != 4:
            raise node.fail(
                f"only 2-D deformable convolution is supported: X must have rank 4 "
                f"(N, C, H, W), not {x.shape.rank}"
            )
        if x.dtype not in _FLOATS:
            raise node.fail(f"X must be a float tensor, not {x.dtype.name}")
        w_dims = static_dims(w)
        if w_dims is None or len(w_dims) != 4:
            raise node.fail(
                f"the shape of W must be known at import and have rank 4 "
                f"(OC, C / group, kh, kw), not {w.shape}"
            )
        x_dims = x.shape.as_list()
        if x_dims[2] is None or x_dims[3] is None:
            raise node.fail(
                f"the spatial sizes of X (H, W) must be known at import to build the "
                f"sampling grid, not {x.shape}; give the model's input a fixed H and W"
            )
        self.height, self.width = int(x_dims[2]), int(x_dims[3])
        self.group = int(node.attr("group", 1))
        self.offset_group = int(node.attr("offset_group", 1))
        if self.group < 1 or self.offset_group < 1:
            raise node.fail(
                f"group and offset_group must be positive, not {self.group} and {self.offset_group}"
            )
        self.out_channels, self.group_channels = w_dims[0], w_dims[1]
        self.channels = self.group_channels * self.group
        kernel = ints(node.attr("kernel_shape", w_dims[2:]))
        if kernel != w_dims[2:]:
            raise node.fail(f"kernel_shape {kernel} does not match W's shape {w_dims}")
        self.kh, self.kw = kernel
        if x_dims[1] is not None and int(x_dims[1]) != self.channels:
            raise node.fail(
                f"X has {x_dims[1]} channels but W of shape {w_dims} with group={self.group} "
                f"needs {self.channels}"
            )
        if self.out_channels % self.group:
            raise node.fail(
                f"W's {self.out_channels} output channels do not divide into group={self.group}"
            )
        if self.channels % self.offset_group:
            raise node.fail(
                f"the {self.channels} input channels do not divide into "
                f"offset_group={self.offset_group}"
            )
        self.dilations = ints(node.attr("dilations", [1, 1]))
        self.strides = ints(node.attr("strides", [1, 1]))
        self.pads = ints(node.attr("pads", [0, 0, 0, 0]))
        if len(self.dilations) != 2 or len(self.strides) != 2 or len(self.pads) != 4:
            raise node.fail(
                f"dilations and strides need 2 values and pads 4 (2-D), not "
                f"{self.dilations}, {self.strides}, {self.pads}"
            )
        if min(self.dilations) < 1 or min(self.strides) < 1 or min(self.pads) < 0:
            raise node.fail(
                f"dilations and strides must be positive and pads not negative, not "
                f"{self.dilations}, {self.strides}, {self.pads}"
            )
        sizes = []
        for axis, (length, k) in enumerate(((self.height, self.kh), (self.width, self.kw))):
            span = (k - 1) * self.dilations[axis] + 1
            room = length + self.pads[axis] + self.pads[axis + 2] - span
            if room < 0:
                raise node.fail(
                    f"the kernel spans {span} along spatial axis {axis} (with dilations) but "
                    f"the padded input has only {length + self.pads[axis] + self.pads[axis + 2]}"
                )
            sizes.append(room // self.strides[axis] + 1)
        self.oh, self.ow = sizes

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    def check_shape(self, node: OnnxNode, t: Tensor, name: str, per_group: int) -> None:
        """An offset or mask tensor must be [N, offset_group * per_group, oh, ow]."""
        want = [self.offset_group * per_group, self.oh, self.ow]
        if t.shape.rank is not None and t.shape.rank != 4:
            raise node.fail(f"{name} must have rank 4 (N, {want[0]}, oh, ow), not {t.shape}")
        if t.shape.rank is None:
            return
        got = t.shape.as_list()[1:]
        for have, need in zip(got, want, strict=True):
            if have is not None and int(have) != need:
                raise node.fail(
                    f"{name} must have shape (N, {want[0]}, {self.oh}, {self.ow}) for X "
                    f"{self.height}x{self.width}, kernel {self.kh}x{self.kw} and "
                    f"offset_group={self.offset_group}, not {t.shape}"
                )

    def base_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """The regular tap positions (y, x), each float64 [kh, kw, oh, ow]."""
        tap_y = np.arange(self.kh).reshape(-1, 1, 1, 1) * self.dilations[0]
        tap_x = np.arange(self.kw).reshape(1, -1, 1, 1) * self.dilations[1]
        out_y = np.arange(self.oh).reshape(1, 1, -1, 1) * self.strides[0] - self.pads[0]
        out_x = np.arange(self.ow).reshape(1, 1, 1, -1) * self.strides[1] - self.pads[1]
        shape = (self.kh, self.kw, self.oh, self.ow)
        y = np.broadcast_to(tap_y + out_y, shape).astype(np.float64)
        x = np.broadcast_to(tap_x + out_x, shape).astype(np.float64)
        return y, x


@converter(
    "DeformConv",
    19,
    attrs=("dilations", "group", "kernel_shape", "offset_group", "pads", "strides"),
)
def _deform_conv(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    bias, mask = ctx.optional(3), ctx.optional(4)
    g = _Geometry(node, x, w)
    g.check_shape(node, offset, "offset", 2 * g.taps)
    if mask is not None:
        g.check_shape(node, mask, "mask", g.taps)
    if bias is not None:
        dims = static_dims(bias)
        if dims is not None and dims != [g.out_channels]:
            raise node.fail(f"B must have shape ({g.out_channels},) (OC), not {bias.shape}")
    work = F64 if x.dtype == F64 else d.float32
    og, points = g.offset_group, g.taps * g.oh * g.ow

    def c64(v: int) -> Tensor:
        return ctx.const(np.int64(v))

    def as_work(t: Tensor) -> Tensor:
        return t if t.dtype == work else ops.cast(t, DstT=work)

    # The sampling points [N, og, kh, kw, oh, ow], float64.
    moved = ops.reshape(ops.cast(offset, DstT=F64), ctx.int64s([-1, og, g.kh, g.kw, 2, g.oh, g.ow]))
    base_y, base_x = g.base_grid()
    axis4 = ctx.const(np.int32(4))
    y = ops.add_v2(ops.gather_v2(moved, c64(0), axis4), ctx.const(base_y, F64))
    xs = ops.add_v2(ops.gather_v2(moved, c64(1), axis4), ctx.const(base_x, F64))

    # The input as [N, og, H * W, C / og]: one row per pixel, gathered per (batch, og).
    pixels = ops.transpose(
        ops.reshape(as_work(x), ctx.int64s([-1, og, g.channels // og, g.height * g.width])),
        ctx.int32s([0, 1, 3, 2]),
    )
    y0, x0 = ops.floor(y), ops.floor(xs)
    fy, fx = as_work(ops.sub(y, y0)), as_work(ops.sub(xs, x0))
    y0i, x0i = ops.cast(y0, DstT=I64), ops.cast(x0, DstT=I64)
    one = ctx.const_like(1.0, fy)
    rows_y = [(y0i, ops.sub(one, fy)), (ops.add_v2(y0i, c64(1)), fy)]
    cols_x = [(x0i, ops.sub(one, fx)), (ops.add_v2(x0i, c64(1)), fx)]
    flat_shape = ctx.int64s([-1, og, points])
    zero, last_y, last_x = c64(0), c64(g.height - 1), c64(g.width - 1)
    samples: Tensor | None = None
    for yi, wy in rows_y:
        for xi, wx in cols_x:
            inside = ops.logical_and(
                ops.logical_and(ops.greater_equal(yi, zero), ops.less(yi, c64(g.height))),
                ops.logical_and(ops.greater_equal(xi, zero), ops.less(xi, c64(g.width))),
            )
            at = ops.add_v2(
                ops.mul(ops.minimum(ops.maximum(yi, zero), last_y), c64(g.width)),
                ops.minimum(ops.maximum(xi, zero), last_x),
            )
            weight = ops.mul(wy, wx)
            weight = ops.select_v2(inside, weight, ops.zeros_like(weight))
            values = ops.gather_v2(
                pixels, ops.reshape(at, flat_shape), ctx.const(np.int32(2)), batch_dims=2
            )  # [N, og, P, C / og]
            weight = ops.expand_dims(ops.reshape(weight, flat_shape), ctx.const(np.int32(-1)))
            term = ops.mul(values, weight)
            samples = term if samples is None else ops.add_v2(samples, term)
    assert samples is not None
    if mask is not None:
        scale = ops.reshape(as_work(mask), ctx.int64s([-1, og, points, 1]))
        samples = ops.mul(samples, scale)

    # im2col: [N, og, K, oh*ow, C/og] -> [N, oh*ow, C, K] -> [N, group, oh*ow, C/group*K].
    spots = g.oh * g.ow
    split = ops.reshape(samples, ctx.int64s([-1, og, g.taps, spots, g.channels // og]))
    columns = ops.reshape(
        ops.transpose(split, ctx.int32s([0, 3, 1, 4, 2])),
        ctx.int64s([-1, spots, g.group, g.group_channels * g.taps]),
    )
    columns = ops.transpose(columns, ctx.int32s([0, 2, 1, 3]))
    per_group = g.out_channels // g.group
    kernels = ops.reshape(
        as_work(w), ctx.int64s([1, g.group, per_group, g.group_channels * g.taps])
    )
    out = ops.batch_mat_mul_v2(columns, kernels, adj_y=True)  # [N, group, oh*ow, OC/group]
    out = ops.reshape(
        ops.transpose(out, ctx.int32s([0, 1, 3, 2])),
        ctx.int64s([-1, g.out_channels, g.oh, g.ow]),
    )
    if bias is not None:
        out = ops.add_v2(out, ops.reshape(as_work(bias), ctx.int64s([1, -1, 1, 1])))
    return [out if out.dtype == x.dtype else ops.cast(out, DstT=x.dtype)]


__all__: list[str] = []
