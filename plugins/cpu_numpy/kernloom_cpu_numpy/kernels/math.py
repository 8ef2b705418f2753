"""Reductions, MatMul, BiasAdd, ArgMax.

No kernel here sets ``np.errstate``: every kernel runs inside the device's compute scope,
which ignores floating-point errors once per step (overflow is inf, as in TensorFlow).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernloom.plugin import (
    InvalidArgumentError,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    argmax_axis,
    bias_channel,
    matmul_shape,
    reduced_shape,
    reduction_axes,
)
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array, highest, lowest

__all__ = ["register"]

CPU = "CPU"


def _reduce_into(ctx: OpKernelContext) -> tuple[Array, tuple[int, ...], Array]:
    x = ctx.input(0)
    axes = reduction_axes(ctx, ctx.input(1), x.ndim)
    shape = reduced_shape(x.shape, axes, bool(ctx.attr("keep_dims")))
    return x, axes, ctx.allocate_output(0, shape)


def reduce_sum(ctx: OpKernelContext) -> None:
    x, axes, out = _reduce_into(ctx)
    target = out.reshape(_kept(x, axes))
    if _count(x, axes) == 1:
        np.copyto(target, x)  # nothing to add: a copy, as in TF (-0.0 stays -0.0)
        return
    np.sum(x, axis=axes, keepdims=True, out=target)


def _kept(x: Array, axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _count(x: Array, axes: tuple[int, ...]) -> int:
    """How many elements each output reduces. TensorFlow drops reduced dimensions of size 1
    first, so a reduction of one element (or of no axes) is a copy of the input: Sum and
    Mean of -0.0 are -0.0 there, where an accumulator starting at 0 would give +0.0."""
    return math.prod(x.shape[a] for a in axes)


def reduce_mean(ctx: OpKernelContext) -> None:
    x, axes, out = _reduce_into(ctx)
    count = _count(x, axes)
    target = out.reshape(_kept(x, axes))
    if count == 1:
        np.copyto(target, x)
    elif x.dtype.kind in "iu":
        if count == 0:
            target[...] = 0
            return
        # TensorFlow sums 8-, 16- and 32-bit integers in 64 bits (int64 itself wraps), so
        # uint8 [200, 100] has mean 150; the quotient always fits the input's type.
        wide = np.uint64 if x.dtype.kind == "u" else np.int64
        total = np.sum(x, axis=axes, keepdims=True, dtype=wide)
        quotient = total // wide(count)
        # Floor division rounds toward -inf; TensorFlow's integer mean truncates toward 0.
        quotient += ((total % wide(count)) != 0) & (total < 0)
        target[...] = quotient.astype(x.dtype)
    elif count == 0:  # TensorFlow's complex mean of nothing is 0, its float mean NaN
        target[...] = 0 if x.dtype.kind == "c" else np.nan  # (np.mean would warn)
    else:
        np.mean(x, axis=axes, keepdims=True, out=target)


def _extreme(fn: Any, initial: Any) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x, axes, out = _reduce_into(ctx)
        # `initial` makes an empty reduction give the identity (-inf for Max), as in TF.
        fn(x, axis=axes, keepdims=True, out=out.reshape(_kept(x, axes)), initial=initial(x.dtype))

    return compute


class MatMul(OpKernel):
    """``np.matmul`` into a counted buffer. The transposes are read once, here, and the
    direct entry runs the product without a context: a layer of an MLP is one call."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._transpose_a = bool(ctx.attr("transpose_a"))
        self._transpose_b = bool(ctx.attr("transpose_b"))
        self._allocate = ctx.device.allocate
        self._dtype = self.signature.output_dtypes[0]
        self.direct = self._direct

    def compute(self, ctx: OpKernelContext) -> None:
        a, b = _matmul_operands(ctx)
        out = ctx.allocate_output(0, (a.shape[0], b.shape[1]))
        np.matmul(a, b, out=out)

    def _direct(self, reuse: int, a: Array, b: Array) -> Any:
        if self._transpose_a:
            a = a.T
        if self._transpose_b:
            b = b.T
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            return NotImplemented  # compute explains what does not fit
        out = self._allocate((a.shape[0], b.shape[1]), self._dtype)
        np.matmul(a, b, out=out)
        return out


def _matmul_operands(ctx: OpKernelContext) -> tuple[Array, Array]:
    a, b = ctx.input(0), ctx.input(1)
    ta, tb = bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b"))
    matmul_shape(ctx, a.shape, b.shape, ta, tb)
    return (a.T if ta else a), (b.T if tb else b)


class BiasAdd(OpKernel):
    """``value + bias`` along the channel dimension. With channels last (NHWC; a matrix
    in either format) the bias broadcasts as it is, so the kernel has a direct entry and
    an in-place form (``np.add`` after the bias check) for the straight line, as ``Add``
    has: a chain of small BiasAdds costs what ``np.add`` does, not a context's ~3 µs."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._format = str(ctx.attr("data_format"))
        if self._format != "NCHW":
            self.direct = self._in_place
            self.inplace_form = _add_bias_last

    def _in_place(self, reuse: int, value: Array, bias: Array) -> Any:
        if (
            reuse & 1
            and value.ndim >= 2
            and bias.shape == value.shape[-1:]
            and value.base is None
            and value.flags.writeable
        ):
            return np.add(value, bias, out=value)
        return NotImplemented  # compute explains a bad shape, or allocates

    def compute(self, ctx: OpKernelContext) -> None:
        value, bias = ctx.input(0), ctx.input(1)
        channel = bias_channel(ctx, value.shape, bias.shape, self._format)
        shaped = bias.reshape([-1 if i == channel else 1 for i in range(value.ndim)])
        out = ctx.forward_input_or_allocate_output([0], 0, value.shape)
        np.add(value, shaped, out=out)


def _add_bias_last(value: Array, bias: Array, out: Array) -> None:
    """BiasAdd's in-place form (channels last): the kernel's check, then ``np.add``. (The
    straight line calls it only where the static shapes fix ``value``'s rank, which
    BiasAdd's shape function checked; a bias of unknown static shape is checked here.)"""
    if bias.shape != value.shape[-1:]:
        raise InvalidArgumentError(
            f"BiasAdd: value must have rank >= 2 and bias its last dimension's length, got "
            f"shapes {list(value.shape)} and {list(bias.shape)}"
        )
    np.add(value, bias, out=out)


def arg_max(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    axis = argmax_axis(ctx, x.shape, ctx.input(1))
    if x.dtype.kind == "f":
        # NaN and -inf never replace TF's accumulator (it starts at the lowest finite
        # value), so both count as that value: fmax maps NaN and -inf to it.
        x = np.fmax(x, np.finfo(x.dtype).min)
    out = ctx.allocate_output(0, tuple(d for i, d in enumerate(x.shape) if i != axis))
    out[...] = np.argmax(x, axis=axis)


def register(lib: KernelLibrary) -> None:
    def cpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints={"T": types}, **kw)

    cpu("Sum", t.OP_TYPES, host_memory=["reduction_indices"])(reduce_sum)
    cpu("Mean", t.OP_TYPES, host_memory=["reduction_indices"])(reduce_mean)
    cpu("Max", t.OP_TYPES, host_memory=["reduction_indices"])(_extreme(np.max, lowest))
    cpu("Min", t.OP_TYPES, host_memory=["reduction_indices"])(_extreme(np.min, highest))
    cpu("MatMul", t.OP_TYPES)(MatMul)
    cpu("BiasAdd", t.OP_TYPES)(BiasAdd)
    cpu("ArgMax", t.OP_TYPES, host_memory=["dimension"])(arg_max)
