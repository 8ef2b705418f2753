"""Run-time checks every backend's kernels make, written once.

Shape inference catches most mistakes when a graph is built, but shapes can be unknown
until a value arrives, so kernels check again. The rules (what broadcasts, which axes are
legal, what a reshape may do) belong to the op, not to numpy, CuPy or torch: these
helpers take plain shapes (tuples) and host-memory values, raise ``ctx.fail(...)`` with the
same message on every device, and return what the kernel needs to compute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kernloom.framework.op_kernel import OpKernelContext

__all__ = [
    "add_n_shape",
    "argmax_axis",
    "axes_of",
    "bias_channel",
    "broadcast_shape",
    "check_permutation",
    "concat_shape",
    "fill_dims",
    "matmul_shape",
    "reduced_shape",
    "reshape_dims",
]

Shape = tuple[int, ...]


def axes_of(ctx: OpKernelContext, value: Any, rank: int, what: str) -> Shape:
    """Axes from a host-memory scalar or vector input, normalised, sorted and checked."""
    axes = [int(a) for a in np.asarray(value).reshape(-1)]
    for axis in axes:
        if not -rank <= axis < max(rank, 1):
            raise ctx.fail(f"{what} {axis} is out of range for an input of rank {rank}")
    return tuple(sorted({a % rank if rank else 0 for a in axes}))


def broadcast_shape(ctx: OpKernelContext, *shapes: Sequence[int]) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        raise ctx.fail(
            f"shapes {', '.join(str(list(s)) for s in shapes)} cannot be broadcast together"
        ) from None


def reduced_shape(shape: Sequence[int], axes: Shape, keep_dims: bool) -> Shape:
    """The output shape of a reduction over ``axes`` (already normalised)."""
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep_dims or i not in axes)


def matmul_shape(
    ctx: OpKernelContext, a: Sequence[int], b: Sequence[int], transpose_a: bool, transpose_b: bool
) -> Shape:
    """``[m, n]`` of the product, after checking both operands are matrices that fit."""
    if len(a) != 2 or len(b) != 2:
        raise ctx.fail(f"MatMul takes matrices, got shapes {list(a)} and {list(b)}")
    ta = (a[1], a[0]) if transpose_a else tuple(a)
    tb = (b[1], b[0]) if transpose_b else tuple(b)
    if ta[1] != tb[0]:
        raise ctx.fail(f"inner dimensions differ: {list(ta)} x {list(tb)} (after transposes)")
    return (ta[0], tb[1])


def bias_channel(
    ctx: OpKernelContext, value: Sequence[int], bias: Sequence[int], data_format: str
) -> int:
    """The dimension of ``value`` the bias runs along."""
    if len(value) < 2 or len(bias) != 1:
        raise ctx.fail(
            f"value must have rank >= 2 and bias rank 1, got {list(value)} and {list(bias)}"
        )
    channel = len(value) - 1 if data_format == "NHWC" else 1
    if value[channel] != bias[0]:
        raise ctx.fail(
            f"bias has {bias[0]} elements but value dimension {channel} is {value[channel]}"
        )
    return channel


def reshape_dims(ctx: OpKernelContext, shape: Sequence[int], target: Any) -> list[int]:
    """The complete target shape (its ``-1`` resolved) for a value of ``shape``."""
    if np.ndim(target) != 1:
        raise ctx.fail(f"shape must be a vector, got a tensor of shape {list(np.shape(target))}")
    size = math.prod(shape)
    dims = [int(d) for d in np.asarray(target)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise ctx.fail(f"shape {dims} may hold at most one -1 and no other negative value")
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or size % known:
            raise ctx.fail(f"cannot reshape {size} elements into {dims}")
        dims[dims.index(-1)] = size // known
    elif known != size:
        raise ctx.fail(
            f"cannot reshape a tensor of shape {list(shape)} ({size} elements) into {dims}"
        )
    return dims


def check_permutation(ctx: OpKernelContext, rank: int, perm: Any) -> list[int]:
    dims = [int(p) for p in np.asarray(perm).reshape(-1)]
    if sorted(dims) != list(range(rank)):
        raise ctx.fail(f"perm {dims} is not a permutation of the {rank} dimensions of the input")
    return dims


def concat_shape(
    ctx: OpKernelContext, shapes: Sequence[Sequence[int]], axis_value: Any
) -> tuple[int, Shape]:
    """The (normalised) axis and the output shape of concatenating values of ``shapes``."""
    rank = len(shapes[0])
    if rank == 0:
        raise ctx.fail("cannot concatenate scalars; reshape them to vectors first")
    (axis,) = axes_of(ctx, axis_value, rank, "axis")
    first = shapes[0]
    for i, s in enumerate(shapes):
        if len(s) != rank or any(s[d] != first[d] for d in range(rank) if d != axis):
            raise ctx.fail(
                f"values[{i}] has shape {list(s)}, incompatible with values[0]'s "
                f"{list(first)} for concatenation along axis {axis}"
            )
    out = list(first)
    out[axis] = sum(s[axis] for s in shapes)
    return axis, tuple(out)


def fill_dims(ctx: OpKernelContext, dims: Any, value_shape: Sequence[int]) -> Shape:
    if len(value_shape) != 0:
        raise ctx.fail(f"value must be a scalar, got shape {list(value_shape)}")
    shape = tuple(int(d) for d in np.asarray(dims).reshape(-1))
    if any(d < 0 for d in shape):
        raise ctx.fail(f"dims {list(shape)} has a negative dimension")
    return shape


def argmax_axis(ctx: OpKernelContext, shape: Sequence[int], dimension: Any) -> int:
    rank = len(shape)
    if rank == 0:
        raise ctx.fail("ArgMax needs a tensor of rank >= 1")
    if np.ndim(dimension) != 0:
        raise ctx.fail("dimension must be a scalar")
    (axis,) = axes_of(ctx, dimension, rank, "dimension")
    if shape[axis] == 0:
        raise ctx.fail(f"cannot take ArgMax over dimension {axis}, which has size 0")
    return axis


def add_n_shape(ctx: OpKernelContext, shapes: Sequence[Sequence[int]]) -> Shape:
    first = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        if tuple(s) != first:
            raise ctx.fail(f"input {i} has shape {list(s)}, input 0 has {list(first)}")
    return first
