"""ONNX's Unique, composed of kernloom ops.

kernloom's Unique (TensorFlow's) gives a vector's distinct values in the order they first
appear and each element's index among them; ONNX wants more: the first occurrence of each
value, the counts, by default the values sorted, and optionally unique slices along an
axis. Every output here is exact -- no float keys, no hashing of rows:

* without an axis, Unique's values are distinct, so a TopKV2 over all of them orders them
  with no ties (its descending order reversed), and segment reductions give the first
  occurrences and the counts;
* with an axis, the slices are compared pairwise (an [N, N] equality matrix, and for
  sorting an [U, U, M] lexicographic comparison): memory quadratic in the number of slices,
  meant for the small tensors Unique sees in models.

As TensorFlow's Unique, a NaN equals nothing, so each NaN is a value of its own, where onnx's
reference (numpy) gathers all NaNs into one. Complex values fail at import: nothing orders
them, and kernloom's Unique kernel takes real and bool values only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import axis_of, rank_of

Result = Sequence[Tensor | None]


class _Found:
    """Unique's four ONNX outputs, in first-occurrence order until sorted."""

    __slots__ = ("counts", "first", "inverse", "values")

    def __init__(self, values: Tensor, first: Tensor, inverse: Tensor, counts: Tensor) -> None:
        self.values = values
        """The distinct values (or slices, stacked on axis 0)."""
        self.first = first
        """Where each distinct value first appears in the input (int64)."""
        self.inverse = inverse
        """For each input element (or slice), its value's index in ``values`` (int64)."""
        self.counts = counts
        """How often each distinct value appears (int64)."""

    def reordered(self, ctx: ConversionContext, order: Tensor) -> _Found:
        """The same outputs with the distinct values taken in ``order`` (a permutation)."""
        zero = ctx.const(np.int32(0))
        count = ops.size(order, out_type=d.int64)
        # rank[order[i]] = i: where each old position went.
        rank = ops.scatter_nd(
            ops.expand_dims(order, ctx.const(np.int32(1))),
            ops.range(ctx.const(np.int64(0)), count, ctx.const(np.int64(1))),
            ops.reshape(count, ctx.int64s([1])),
        )
        return _Found(
            ops.gather_v2(self.values, order, zero),
            ops.gather_v2(self.first, order, zero),
            ops.gather_v2(rank, self.inverse, zero),
            ops.gather_v2(self.counts, order, zero),
        )


def _ordered(x: Tensor) -> Tensor:
    """x in a dtype that compares and sorts (bool as uint8; the others as they are)."""
    return ops.cast(x, DstT=d.uint8) if x.dtype == d.bool_ else x


def _tallies(ctx: ConversionContext, inverse: Tensor, count: Tensor) -> tuple[Tensor, Tensor]:
    """(first occurrence, count) of each of ``count`` values, from each element's index."""
    size = ops.size(inverse, out_type=d.int64)
    positions = ops.range(ctx.const(np.int64(0)), size, ctx.const(np.int64(1)))
    first = ops.unsorted_segment_min(positions, inverse, count)
    counts = ops.unsorted_segment_sum(ops.ones_like(inverse), inverse, count)
    return first, counts


def _flat_unique(ctx: ConversionContext, x: Tensor, sort: bool) -> _Found:
    """Unique over all of x's elements (no axis)."""
    values, inverse = ops.unique(ops.reshape(x, ctx.int64s([-1])), out_idx=d.int64)
    count = ops.size(values, out_type=d.int64)
    first, counts = _tallies(ctx, inverse, count)
    found = _Found(values, first, inverse, counts)
    if not sort:
        return found
    # Distinct values: TopKV2's descending order has no ties; reversed, it is ascending.
    _, descending = ops.top_kv2(_ordered(values), ops.cast(count, DstT=d.int32), index_type=d.int64)
    return found.reordered(ctx, ops.reverse_v2(descending, ctx.int32s([0])))


def _row_unique(ctx: ConversionContext, rows: Tensor, sort: bool) -> _Found:
    """Unique rows of a matrix [N, M], compared pairwise (exact; quadratic in N)."""
    zero, one = ctx.const(np.int64(0)), ctx.const(np.int64(1))
    i32 = ctx.const(np.int32(0))
    keyed = _ordered(rows)
    same = ops.all(
        ops.equal(ops.expand_dims(keyed, ctx.const(np.int32(1))), ops.expand_dims(keyed, i32)),
        ctx.int32s([2]),
    )  # [N, N]: row i equals row j
    # Each row's first equal row (argmax finds the first true), and whether it is its own.
    first_of = ops.arg_max(ops.cast(same, DstT=d.int32), ctx.const(np.int32(1)))
    size = ops.size(first_of, out_type=d.int64)
    own = ops.equal(first_of, ops.range(zero, size, one))
    keys = ops.reshape(ops.where(own), ctx.int64s([-1]))
    slot = ops.sub(ops.cumsum(ops.cast(own, DstT=d.int64), i32), one)
    inverse = ops.gather_v2(slot, first_of, i32)
    count = ops.size(keys, out_type=d.int64)
    _, counts = _tallies(ctx, inverse, count)
    found = _Found(ops.gather_v2(rows, keys, i32), keys, inverse, counts)
    if not sort:
        return found
    return found.reordered(ctx, _lexicographic_order(ctx, ops.gather_v2(keyed, keys, i32)))


def _lexicographic_order(ctx: ConversionContext, rows: Tensor) -> Tensor:
    """The permutation that sorts distinct rows [U, M] lexicographically, ascending."""
    a = ops.expand_dims(rows, ctx.const(np.int32(1)))  # row i, against
    b = ops.expand_dims(rows, ctx.const(np.int32(0)))  # row j
    # Row i < row j: at some column they first differ, and there i's value is smaller.
    equal_before = ops.cumprod(
        ops.cast(ops.equal(a, b), DstT=d.int64), ctx.const(np.int32(2)), exclusive=True
    )
    decided = ops.logical_and(ops.less(a, b), ops.equal(equal_before, ctx.const(np.int64(1))))
    less = ops.any(decided, ctx.int32s([2]))  # [U, U]
    # A row's place is how many rows are smaller; order is the inverse of that.
    place = ops.sum(ops.cast(less, DstT=d.int64), ctx.int32s([0]))
    count = ops.size(place, out_type=d.int64)
    return ops.scatter_nd(
        ops.expand_dims(place, ctx.const(np.int32(1))),
        ops.range(ctx.const(np.int64(0)), count, ctx.const(np.int64(1))),
        ops.reshape(count, ctx.int64s([1])),
    )


def _axis_unique(ctx: ConversionContext, node: OnnxNode, x: Tensor, sort: bool) -> _Found:
    """Unique slices along ``axis``: x moved so that the axis leads, flattened to rows,
    and the unique rows put back into x's layout."""
    rank = rank_of(node, x)
    axis = axis_of(node, int(node.attr("axis")), rank)
    perm = [axis, *(i for i in range(rank) if i != axis)]
    moved = x if axis == 0 else ops.transpose(x, ctx.int32s(perm))
    dims = ops.shape(moved, out_type=d.int64)
    lead, inner = (
        ops.slice(dims, ctx.int64s([0]), ctx.int64s([1])),
        ops.slice(dims, ctx.int64s([1]), ctx.int64s([-1])),
    )
    width = ops.prod(inner, ctx.int32s([0]), keep_dims=True)  # 1 for a vector
    rows = ops.reshape(moved, ops.concat_v2([lead, width], ctx.const(np.int32(0))))
    found = _row_unique(ctx, rows, sort)
    count = ops.reshape(ops.size(found.first, out_type=d.int64), ctx.int64s([1]))
    shape = ops.concat_v2([count, inner], ctx.const(np.int32(0)))
    values = ops.reshape(found.values, shape)
    if axis != 0:
        values = ops.transpose(values, ctx.int32s([int(i) for i in np.argsort(perm)]))
    return _Found(values, found.first, found.inverse, found.counts)


@converter("Unique", 11, attrs=("axis", "sorted"))
def _unique(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    sort = bool(int(node.attr("sorted", 1)))
    if x.dtype.is_complex:
        # Nothing orders them, and kernloom's Unique kernel takes real values only.
        raise node.fail(f"{x.dtype.name} values are not supported (real and bool ones are)")
    if node.attr("axis") is None:
        found = _flat_unique(ctx, x, sort)
    else:
        found = _axis_unique(ctx, node, x, sort)
    outputs = [found.values, found.first, found.inverse, found.counts]
    return outputs[: len(node.outputs)]


__all__: list[str] = []
