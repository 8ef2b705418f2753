"""Reductions, MatMul, BiasAdd, ArgMax, Softmax and LogSoftmax with torch.

torch reads an empty ``dim`` as "every dimension" and refuses max/min over an empty
dimension; TensorFlow's meaning (no reduction; the identity, -inf for Max) is kept here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import torch

from kernloom.plugin import (
    OpKernelContext,
    argmax_axis,
    bias_channel,
    matmul_shape,
    reduced_shape,
    reduction_axes,
)
from kernloom_gpu_torch.kernels._util import host_input, output, tensor_input

__all__ = [
    "along_last_axis",
    "arg_max",
    "bias_add",
    "log_softmax",
    "matmul",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_sum",
    "softmax",
]

Reduction = tuple[torch.Tensor, tuple[int, ...], torch.Tensor]


def _reduction(ctx: OpKernelContext) -> Reduction:
    """The input, the axes, and the output viewed with the reduced dimensions kept."""
    x = tensor_input(ctx, 0)
    axes = reduction_axes(ctx, host_input(ctx, 1), x.ndim)
    out = output(ctx, 0, reduced_shape(x.shape, axes, bool(ctx.attr("keep_dims"))))
    return x, axes, out.view(reduced_shape(x.shape, axes, True))


def _one_element(x: torch.Tensor, axes: tuple[int, ...]) -> bool:
    """Whether each output reduces one element (or no axes at all). TensorFlow drops reduced
    dimensions of size 1 first, so that is a copy there: Sum and Mean of -0.0 stay -0.0,
    where torch's accumulator, starting at 0, gives +0.0."""
    return math.prod(x.shape[a] for a in axes) == 1


def reduce_sum(ctx: OpKernelContext) -> None:
    x, axes, out = _reduction(ctx)
    if _one_element(x, axes):
        out.copy_(x)
        return
    torch.sum(x, dim=axes, keepdim=True, dtype=x.dtype, out=out)


def reduce_mean(ctx: OpKernelContext) -> None:
    x, axes, out = _reduction(ctx)
    if _one_element(x, axes):
        out.copy_(x)
    elif x.is_complex() and math.prod(x.shape[a] for a in axes) == 0:
        out.zero_()  # TensorFlow's complex mean of nothing is 0 (its float mean NaN)
    elif x.is_floating_point() or x.is_complex():
        torch.mean(x, dim=axes, keepdim=True, out=out)
    else:
        count = math.prod(x.shape[a] for a in axes)
        if count == 0:
            out.zero_()
            return
        # TensorFlow sums 8-, 16- and 32-bit integers in 64 bits (uint8 [200, 100] -> 150);
        # torch has int64 sums for every integer type (uint64 wraps as int64 would).
        total = torch.sum(x, dim=axes, keepdim=True, dtype=torch.int64)
        out.copy_(torch.div(total, count, rounding_mode="trunc"))  # TF truncates toward 0


def _extreme(fn: Callable[..., torch.Tensor], lowest: bool) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x, axes, out = _reduction(ctx)
        if not axes:
            out.copy_(x)
        elif x.numel() == 0:  # the reduction's identity: -inf for Max, as in TensorFlow
            if x.is_floating_point():
                out.fill_(-math.inf if lowest else math.inf)
            else:
                out.fill_(torch.iinfo(x.dtype).min if lowest else torch.iinfo(x.dtype).max)
        else:
            fn(x, dim=axes, keepdim=True, out=out)

    return compute


reduce_max = _extreme(torch.amax, lowest=True)
reduce_min = _extreme(torch.amin, lowest=False)


def matmul(ctx: OpKernelContext) -> None:
    a, b = tensor_input(ctx, 0), tensor_input(ctx, 1)
    ta, tb = bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b"))
    shape = matmul_shape(ctx, a.shape, b.shape, ta, tb)
    torch.matmul(a.T if ta else a, b.T if tb else b, out=output(ctx, 0, shape))


def bias_add(ctx: OpKernelContext) -> None:
    value, bias = tensor_input(ctx, 0), tensor_input(ctx, 1)
    channel = bias_channel(ctx, value.shape, bias.shape, ctx.attr("data_format"))
    shaped = bias.reshape([-1 if i == channel else 1 for i in range(value.ndim)])
    torch.add(value, shaped, out=output(ctx, 0, value.shape))


def arg_max(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    axis = argmax_axis(ctx, x.shape, host_input(ctx, 1))
    if x.is_floating_point():  # NaN and -inf count as the lowest finite value (TF's Eigen)
        x = torch.fmax(x, torch.tensor(torch.finfo(x.dtype).min, dtype=x.dtype))
    elif x.dtype == torch.bool:
        x = x.to(torch.uint8)
    out = output(ctx, 0, [n for i, n in enumerate(x.shape) if i != axis])
    out.copy_(torch.argmax(x, dim=axis))  # the first of equal maxima


def _logits(ctx: OpKernelContext) -> torch.Tensor:
    x = tensor_input(ctx, 0)
    if x.ndim == 0:
        raise ctx.fail("logits must have rank >= 1")
    return x


SHORT_ROW: Final = 16
"""torch's CPU softmax along a last axis shorter than its vector width goes row by row,
slowly; the same rows taken as the columns of the transpose (softmax over dim 0, one
vector across many rows) are far faster: [4096, 8] 425 against 45 µs, [4096, 4] 158
against 22, one thread; from 16 columns on the row kernel wins ([4096, 16] 56 against 81)."""

TRANSPOSED_MIN_SIZE: Final = 8192
"""...and only for this many elements or more. Below, the two transposes cost more than
they save where it counts, in a graph, with the caches just flushed by the op before: a
classifier's [256, 10] softmax after an MLP's last product took 26 µs the direct way and
61 through the transpose (5 against 17-27 in a warm loop; ``benchmarks/OPTIMIZER.md``)."""


def along_last_axis(
    fn: Callable[..., torch.Tensor], x: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``fn(x, -1)`` (into ``out`` where given), on the CPU for a short last axis of many
    rows as ``fn`` over dim 0 of the transposed rows (same values: each row is still
    normalized on its own). The result keeps the input's layout (torch's softmax allocates
    like its input), so the transpose back is contiguous and the reshape a view."""
    n = x.shape[-1]
    if (
        n < SHORT_ROW
        and x.numel() >= TRANSPOSED_MIN_SIZE
        and x.device.type == "cpu"
        and x.is_contiguous()
    ):
        rows = x if x.ndim == 2 else x.reshape(-1, n)
        y = fn(rows.t(), 0).t().reshape(x.shape)
        return y if out is None else out.copy_(y)
    return fn(x, -1) if out is None else fn(x, -1, out=out)


def softmax(ctx: OpKernelContext) -> None:
    x = _logits(ctx)
    along_last_axis(torch.softmax, x, output(ctx, 0, x.shape))


def log_softmax(ctx: OpKernelContext) -> None:
    x = _logits(ctx)
    along_last_axis(torch.log_softmax, x, output(ctx, 0, x.shape))
