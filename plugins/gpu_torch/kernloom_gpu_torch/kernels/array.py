"""Array kernels with torch: reshaping, rearranging, filling, Shape; and the CPU's
default ``ConcatV2`` and ``Transpose`` for large float tensors (``CpuConcat``,
``cpu_transpose``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from kernloom.plugin import (
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    bitcast_dims,
    check_permutation,
    concat_output,
    concat_shape,
    fill_dims,
    reshape_dims,
    transpose_output,
)
from kernloom_gpu_torch.dtypes import torch_dtype
from kernloom_gpu_torch.kernels._util import (
    host_input,
    intra_op_threads,
    kept_per_shapes,
    output,
    result,
    tensor,
    tensor_input,
    tensor_inputs,
    use_threads,
)

__all__ = [
    "KEEP_LAYOUT",
    "SMALL_CONCAT",
    "CpuConcat",
    "bitcast",
    "concat",
    "cpu_transpose",
    "fill",
    "ones_like",
    "reshape",
    "shape",
    "transpose",
    "zeros_like",
]

SMALL_CONCAT: int = 1 << 17
"""Outputs of fewer elements than this are joined by numpy: a torch call costs more than
the copy (NHWC concatenations at two threads: numpy 7.8 µs and torch 10.3 for 100 K
elements, 20.8 and 18.7 for 200 K). Read on every call: ``benchmarks/bench_layout.py
--change torch-concat`` raises it to measure what torch saves."""

SMALL_TRANSPOSE: int = 1 << 14
"""Transposes of fewer elements than this are copied by numpy, larger ones by torch on the
intra-op threads (a ShuffleNet channel shuffle at two threads, numpy / torch: 276 / 72 µs
for [1, 4, 28, 56, 56], 37 / 13 for [1, 4, 68, 14, 14], 17 / 11 for [1, 4, 136, 7, 7]).
Read on every call, as ``SMALL_CONCAT``."""

KEEP_LAYOUT: bool = True
"""Whether ``CpuConcat`` and ``cpu_transpose`` keep their inputs' layout, as the numpy CPU
kernels' ``KEEP_LAYOUT`` (read on every call: ``benchmarks/bench_layout.py`` turns them
off)."""


def reshape(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    result(ctx, 0, x.reshape(reshape_dims(ctx, x.shape, host_input(ctx, 1))))


def bitcast(ctx: OpKernelContext) -> None:
    """``Tensor.view(dtype)``, which scales the last dimension by in_size / out_size (on
    a contiguous tensor; a scalar becomes a vector): the reshape then splits or drops it,
    as TensorFlow's shape rule says."""
    x = tensor_input(ctx, 0)
    source, target = ctx.attr("T"), ctx.attr("type")
    dims = [int(n or 0) for n in bitcast_dims(ctx, tuple(x.shape), source, target)]
    rows = x.contiguous() if x.ndim else x.reshape(1)
    result(ctx, 0, rows.view(torch_dtype(target)).reshape(dims))


def transpose(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    perm = check_permutation(ctx, x.ndim, host_input(ctx, 1))
    output(ctx, 0, [x.shape[p] for p in perm]).copy_(x.permute(perm))


def concat(ctx: OpKernelContext) -> None:
    values = tensor_inputs(ctx, "values")
    axis, shape = concat_shape(ctx, [v.shape for v in values], host_input(ctx, len(values)))
    torch.cat(values, dim=axis, out=output(ctx, 0, shape))


class CpuConcat(OpKernel):
    """``ConcatV2`` on the numpy CPU device: ``torch.cat`` on the session's intra-op
    threads, into the inputs' shared memory order (``concat_output``) or C order. NCHW
    images in NHWC memory joined along channels copy a short run per pixel, which numpy
    does on one thread: [1, 224, 56, 56] and [1, 32, 56, 56] took 76 µs in numpy and 39 in
    torch at two threads (DenseNet-121 makes 58 such concatenations a run). The axis and
    output shape are kept per input shapes and axis (checked once: 6 µs a call)."""

    intra_op_parallel = True

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._shapes: dict[tuple[Any, ...], tuple[int, tuple[int, ...], int]] = {}

    def compute(self, ctx: OpKernelContext) -> None:
        values = ctx.input_list("values")
        axis_value = ctx.input("axis")
        shapes = tuple(v.shape for v in values)
        key = (shapes, axis_value.tobytes(), axis_value.shape)
        axis, shape, size = kept_per_shapes(
            self._shapes, key, lambda: _concat_plan(ctx, shapes, axis_value)
        )
        if size < SMALL_CONCAT:
            join = _numpy_cat
        else:
            use_threads(intra_op_threads(ctx))  # a copy: the team's flush mode is moot
            join = _torch_cat
        if not (KEEP_LAYOUT and concat_output(ctx, values, axis, shape, join)):
            join(values, axis, ctx.allocate_output(0, shape))


def _concat_plan(
    ctx: OpKernelContext, shapes: tuple[tuple[int, ...], ...], axis_value: Any
) -> tuple[int, tuple[int, ...], int]:
    """The normalised axis, the output's shape (checked) and its size."""
    axis, shape = concat_shape(ctx, shapes, axis_value)
    return axis, tuple(shape), math.prod(shape)


def _numpy_cat(values: list[Any], axis: int, out: Any) -> None:
    np.concatenate(values, axis=axis, out=out)


def _torch_cat(values: list[Any], axis: int, out: Any) -> None:
    torch.cat([tensor(v) for v in values], dim=axis, out=tensor(out))


def cpu_transpose(ctx: OpKernelContext) -> None:
    """``Transpose`` on the numpy CPU device: the numpy kernel's view or layout
    (``transpose_output``), the copy by torch on the session's intra-op threads above
    ``SMALL_TRANSPOSE`` elements (numpy copies on one thread, a short run at a time when the
    input is an NHWC-memory image)."""
    x = ctx.input(0)
    perm = check_permutation(ctx, x.ndim, ctx.input(1))
    copy = None
    if x.size >= SMALL_TRANSPOSE:
        use_threads(intra_op_threads(ctx))  # a copy: the team's flush mode is moot
        copy = _torch_copy
    transpose_output(ctx, x, perm, KEEP_LAYOUT, copy)


def _torch_copy(out: Any, source: Any) -> None:
    tensor(out).copy_(tensor(source))


def fill(ctx: OpKernelContext) -> None:
    value = tensor_input(ctx, 1)
    out = output(ctx, 0, fill_dims(ctx, host_input(ctx, 0), value.shape))
    out.fill_(value.reshape(()))  # a value of shape [1] is TensorFlow's legacy scalar


def zeros_like(ctx: OpKernelContext) -> None:
    output(ctx, 0, tensor_input(ctx, 0).shape).zero_()


def ones_like(ctx: OpKernelContext) -> None:
    output(ctx, 0, tensor_input(ctx, 0).shape).fill_(1)


def shape(ctx: OpKernelContext) -> None:
    dims = tuple(ctx.input(0).shape)
    ctx.set_output(0, np.array(dims, ctx.signature.output_dtypes[0].numpy_dtype).reshape(-1))
