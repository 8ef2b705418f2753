"""Reductions and orderings: Prod, All, Any, ArgMin, Cumsum, Cumprod, TopKV2.

Axes, ``k`` and the scan axis are host-memory inputs, checked here with the messages the
other backends give. ArgMin skips NaN as TensorFlow's Eigen reduction does (its
accumulator starts at the type's highest finite value and only a smaller value, or an
equal one at a lower index, replaces it); TopKV2 orders with one stable sort per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import (
    KernelLibrary,
    OpKernelContext,
    axes_of,
    reduced_shape,
    reduction_axes,
    tf_cast,
)
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array

__all__ = ["register"]

CPU = "CPU"
_PARTITION_RATIO = 8


def _kept(x: Array, axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _reduction(fn: Any) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        axes = reduction_axes(ctx, ctx.input(1), x.ndim)
        out = ctx.allocate_output(0, reduced_shape(x.shape, axes, bool(ctx.attr("keep_dims"))))
        fn(x, axis=axes, keepdims=True, out=out.reshape(_kept(x, axes)))

    return compute


def _euclidean_norm(x: Array, axis: tuple[int, ...], keepdims: bool, out: Array) -> None:
    """sqrt(sum(x * conj(x))), the sum in x's type (TensorFlow's: float32 squares may
    overflow, integer ones wrap); an integer root truncated as TF's cast does."""
    if x.dtype.kind == "c":  # |x|^2 as reals: x * conj(x) may keep a rounding's imaginary part
        squares = np.square(x.real) + np.square(x.imag)
        np.copyto(out, np.sqrt(np.sum(squares, axis=axis, keepdims=keepdims)))
        return
    total = np.sum(x * x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    if x.dtype.kind in "iu":
        np.copyto(out, tf_cast(np, np.sqrt(total.astype(np.float64)), x.dtype))
    else:
        np.sqrt(total, out=out)


def scalar_axis(ctx: OpKernelContext, shape: tuple[int, ...], value: Any, op: str) -> int:
    """The normalised axis of ArgMin, Cumsum or Cumprod, from a host-memory scalar."""
    rank = len(shape)
    if np.ndim(value) != 0:
        raise ctx.fail(f"axis must be a scalar, got shape {list(np.shape(value))}")
    if rank == 0:
        raise ctx.fail(f"{op} needs a tensor of rank >= 1")
    (axis,) = axes_of(ctx, value, rank, "axis")
    return axis


def arg_min(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    axis = scalar_axis(ctx, x.shape, ctx.input(1), "ArgMin")
    if x.shape[axis] == 0:
        raise ctx.fail(f"cannot take ArgMin over dimension {axis}, which has size 0")
    if x.dtype.kind == "f":
        # NaN and +inf never replace TF's accumulator (it starts at the highest finite
        # value), so both count as that value: fmin maps NaN and inf to it.
        x = np.fmin(x, np.finfo(x.dtype).max)
    out = ctx.allocate_output(0, tuple(d for i, d in enumerate(x.shape) if i != axis))
    out[...] = np.argmin(x, axis=axis)


def cumsum(ctx: OpKernelContext) -> None:
    out = _scan(ctx, "Cumsum", np.cumsum, 0)
    if out.dtype.kind in "fc":
        # TF's scan starts its accumulator at +0, so no sum is -0.0 (numpy's starts at the
        # first element: cumsum([-0.0]) is -0.0 there, +0.0 in TF).
        out += 0


def cumprod(ctx: OpKernelContext) -> None:
    _scan(ctx, "Cumprod", np.cumprod, 1)  # (a product's zeros keep their signs, as TF's)


def _scan(ctx: OpKernelContext, op: str, fn: Any, identity: int) -> Array:
    """Cumsum's and Cumprod's shared walk: ``fn`` along the axis (reversed for ``reverse``),
    and for ``exclusive`` ``identity`` first, then ``fn`` of all but the last element (not
    the inclusive result undone, which rounds differently for floats)."""
    x = ctx.input(0)
    axis = scalar_axis(ctx, x.shape, ctx.input(1), op)
    out: Array = ctx.allocate_output(0, x.shape)
    if ctx.attr("reverse"):
        x, view = np.flip(x, axis), np.flip(out, axis)
    else:
        view = out
    if not ctx.attr("exclusive"):
        fn(x, axis=axis, dtype=x.dtype, out=view)
        return out
    head = [slice(None)] * x.ndim
    head[axis] = slice(0, 1)
    view[tuple(head)] = identity
    rest, body = list(head), list(head)
    rest[axis], body[axis] = slice(1, None), slice(0, -1)
    fn(x[tuple(body)], axis=axis, dtype=x.dtype, out=view[tuple(rest)])
    return out


def sorted_indices(x: Array, k: int) -> Array:
    """The indices of the k largest values along the last axis, largest first, equal values
    lower index first, NaN above everything: a stable ascending sort of the reversed row,
    read backwards."""
    n = x.shape[-1]
    order: Array = np.argsort(x[..., ::-1], axis=-1, kind="stable")
    top: Array = n - 1 - order[..., ::-1][..., :k]
    return top


def top_k_indices(x: Array, k: int) -> Array:
    """``sorted_indices(x, k)``; for k much smaller than a row, the k are picked first in
    linear time (a partition finds the k-th largest value; the values above it and the
    lowest-index ones equal to it are kept) and only they are sorted."""
    n = x.shape[-1]
    if k * _PARTITION_RATIO >= n:
        return sorted_indices(x, k)
    rows = x.reshape(-1, n)
    kth = np.partition(rows, n - k, axis=-1)[:, n - k : n - k + 1]  # NaN partitions last
    if rows.dtype.kind == "f":
        is_nan, kth_nan = np.isnan(rows), np.isnan(kth)
        above = ~kth_nan & ((rows > kth) | is_nan)
        level = np.where(kth_nan, is_nan, rows == kth)
    else:
        above, level = rows > kth, rows == kth
    missing = k - np.count_nonzero(above, axis=-1, keepdims=True)
    chosen = above | (level & (np.cumsum(level, axis=-1) <= missing))
    picked = np.nonzero(chosen)[1].reshape(-1, k)  # exactly k a row, in index order
    order = sorted_indices(np.take_along_axis(rows, picked, axis=-1), k)
    found: Array = np.take_along_axis(picked, order, axis=-1)
    return found.reshape(*x.shape[:-1], k)


def top_k(ctx: OpKernelContext) -> None:
    x, k_value = ctx.input(0), ctx.input(1)
    if np.ndim(k_value) != 0:
        raise ctx.fail(f"k must be a scalar, got shape {list(np.shape(k_value))}")
    k = int(k_value)
    if k < 0:
        raise ctx.fail(f"k must be >= 0, got {k}")
    if x.ndim == 0:
        raise ctx.fail("input must have rank >= 1 (top k runs over the last dimension)")
    if x.shape[-1] < k:
        raise ctx.fail(f"input must have at least k columns: had {x.shape[-1]}, needed {k}")
    shape = (*x.shape[:-1], k)
    values, indices = ctx.allocate_output(0, shape), ctx.allocate_output(1, shape)
    if k == 0 or values.size == 0:
        return
    found = top_k_indices(x, k)
    indices[...] = found
    values[...] = np.take_along_axis(x, found, axis=-1)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def cpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        constraints = {"T": types} if types else None
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints=constraints, **kw)

    reduction = {"host_memory": ["reduction_indices"]}
    cpu("Prod", t.OP_TYPES, **reduction)(_reduction(np.prod))
    cpu("EuclideanNorm", t.OP_TYPES, **reduction)(_reduction(_euclidean_norm))
    cpu("All", (), **reduction)(_reduction(np.all))
    cpu("Any", (), **reduction)(_reduction(np.any))
    cpu("ArgMin", t.OP_TYPES, host_memory=["dimension"])(arg_min)
    cpu("Cumsum", t.OP_TYPES, host_memory=["axis"])(cumsum)
    cpu("Cumprod", t.OP_TYPES, host_memory=["axis"])(cumprod)
    cpu("TopKV2", t.OP_TYPES, host_memory=["k"])(top_k)
