"""Indexing ONNX ops: GatherElements, GatherND, ScatterND, ScatterElements, OneHot,
TopK, CumSum, Trilu, EyeLike, NonZero, Hardmax, Einsum.

Element-wise gathers and scatters become GatherNd / ScatterNd over a full coordinate
grid built from Range ops, so indices are never read at import time.

The scatter reductions max, min and mul are exact segment reductions: each index tuple
becomes one linear position of data's first dimensions (the tuples' length), and the
updates of a position are combined by UnsortedSegmentMax / Min / Prod over those positions;
max and min then meet the data where a position was hit (a position no update hits keeps
its data: the segment ops' empty values, the dtype's lowest or highest, never reach the
output), mul multiplies the data by the product (1 where nothing hit). As ONNX's reference
applies the updates one after another, a float product may differ from it in the last bit
(the updates are multiplied together first, then into the data).

GatherND with batch_dims b prefixes each index tuple with its b batch coordinates (a grid
of Ranges) and gathers from the whole tensor. Every index ONNX lets count from the end is
wrapped (i < 0 becomes i + dim) before the kernloom op, which refuses it.

TopK's smallest k (largest=0) are TopKV2's largest of a key that reverses the order
exactly: ~x for integers, a key made of the bits for floats (NaN last, as onnxruntime).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import axis_of, flatten2d, rank_of, shape_of, static_dims

Result = Sequence[Tensor | None]


def _i32(ctx: ConversionContext, value: int) -> Tensor:
    return ctx.const(np.int32(value))


def _scalar(ctx: ConversionContext, t: Tensor, dtype: d.DType = d.int64) -> Tensor:
    t = ops.reshape(t, ctx.int64s([]))
    return t if t.dtype == dtype else ops.cast(t, DstT=dtype)


def _wrap_negative(ctx: ConversionContext, indices: Tensor, size: Tensor) -> Tensor:
    """ONNX indices may count from the end: i < 0 becomes i + size."""
    indices = ops.cast(indices, DstT=d.int64) if indices.dtype != d.int64 else indices
    return ops.select_v2(
        ops.less(indices, ctx.const(np.int64(0))), ops.add_v2(indices, size), indices
    )


def _dim(ctx: ConversionContext, x: Tensor, axis: int) -> Tensor:
    return ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), _i32(ctx, 0))


def _coordinates(
    ctx: ConversionContext, node: OnnxNode, indices: Tensor, axis: int, data: Tensor
) -> Tensor:
    """For each element of ``indices``: its own coordinates, with ``axis`` replaced by the
    (wrapped) index -- GatherElements' and ScatterElements' full coordinate grid."""
    rank = rank_of(node, indices, "indices")
    index_shape = shape_of(ctx, indices)
    wrapped = _wrap_negative(ctx, indices, _dim(ctx, data, axis))
    parts = []
    for j in range(rank):
        if j == axis:
            parts.append(wrapped)
            continue
        size = ops.gather_v2(index_shape, ctx.const(np.int64(j)), _i32(ctx, 0))
        line = ops.range(ctx.const(np.int64(0)), size, ctx.const(np.int64(1)))
        shape = [1] * rank
        shape[j] = -1
        along = ops.reshape(line, ctx.int64s(shape))
        parts.append(ops.mul(along, ops.ones_like(wrapped)))
    return ops.pack(parts, axis=-1) if rank else ops.expand_dims(wrapped, _i32(ctx, -1))


@converter("GatherElements", 11, attrs=("axis",))
def _gather_elements(node: OnnxNode, ctx: ConversionContext) -> Result:
    data, indices = ctx.input(0), ctx.input(1)
    axis = axis_of(node, int(node.attr("axis", 0)), rank_of(node, data))
    return [ops.gather_nd(data, _coordinates(ctx, node, indices, axis, data))]


_SEGMENT_REDUCTIONS: dict[str, Callable[..., Tensor]] = {
    "max": ops.unsorted_segment_max,
    "min": ops.unsorted_segment_min,
    "mul": ops.unsorted_segment_prod,
}


def _scatter_reduced(
    ctx: ConversionContext,
    node: OnnxNode,
    data: Tensor,
    where: Tensor,
    updates: Tensor,
    reduction: str,
) -> Tensor:
    """data with the updates of each index tuple of ``where`` ([..., k], wrapped) combined
    into it by ``reduction`` (max, min or mul): segment reductions over the tuples' linear
    positions in data's first k dimensions, each position a row of the trailing slice."""
    zero = _i32(ctx, 0)
    shape = shape_of(ctx, data)
    depth = ops.slice(
        ops.shape(where, out_type=d.int64),
        ctx.int64s([rank_of(node, where, "indices") - 1]),
        ctx.int64s([1]),
    )
    lead = ops.slice(shape, ctx.int64s([0]), depth)
    tail = ops.slice(shape, depth, ctx.int64s([-1]))
    positions = ops.prod(lead, ctx.int32s([0]), keep_dims=True)
    width = ops.prod(tail, ctx.int32s([0]), keep_dims=True)  # 1 when the tuples are full
    strides = ops.cumprod(lead, zero, exclusive=True, reverse=True)
    linear = ops.reshape(ops.sum(ops.mul(where, strides), ctx.int32s([-1])), ctx.int64s([-1]))
    rows = ops.reshape(data, ops.concat_v2([positions, width], zero))
    values = ops.reshape(updates, ops.concat_v2([ctx.int64s([-1]), width], zero))
    count = ops.reshape(positions, ctx.int64s([]))
    combined = _SEGMENT_REDUCTIONS[reduction](values, linear, count)
    if reduction == "mul":
        merged = ops.mul(rows, combined)  # an untouched row is multiplied by exactly 1
    else:
        hits = ops.unsorted_segment_sum(ops.ones_like(linear), linear, count)
        touched = ops.expand_dims(ops.greater(hits, ctx.const(np.int64(0))), _i32(ctx, 1))
        meet = ops.maximum if reduction == "max" else ops.minimum
        merged = ops.select_v2(touched, meet(rows, combined), rows)
    return ops.reshape(merged, shape)


def _scatter_into(
    ctx: ConversionContext, node: OnnxNode, data: Tensor, where: Tensor, updates: Tensor
) -> Tensor:
    reduction = str(node.attr("reduction", "none"))
    shape = shape_of(ctx, data)
    if reduction == "add":
        return ops.add_v2(data, ops.scatter_nd(where, updates, shape))
    if reduction in _SEGMENT_REDUCTIONS:
        return _scatter_reduced(ctx, node, data, where, updates, reduction)
    if reduction != "none":
        raise node.fail(f"reduction={reduction!r} is not one of ONNX's none, add, mul, max and min")
    hit = ops.scatter_nd(where, ops.ones_like(updates), shape)
    keep = ops.equal(hit, ops.zeros_like(hit))
    return ops.select_v2(keep, data, ops.scatter_nd(where, updates, shape))


@converter("ScatterElements", 11, attrs=("axis", "reduction"))
def _scatter_elements(node: OnnxNode, ctx: ConversionContext) -> Result:
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    axis = axis_of(node, int(node.attr("axis", 0)), rank_of(node, data))
    return [_scatter_into(ctx, node, data, _coordinates(ctx, node, indices, axis, data), updates)]


@converter("Scatter", 9, 10, attrs=("axis",))
def _scatter(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _scatter_elements(node, ctx)


@converter("ScatterND", 11, attrs=("reduction",))
def _scatter_nd(node: OnnxNode, ctx: ConversionContext) -> Result:
    """Every reduction wraps the index tuples first: ONNX allows negative indices (-1 is
    the last), which kernloom's ScatterNd (none, add) and segment ops (mul, max, min)
    refuse at run time. Indices of rank 1 are one tuple, whose update may be a scalar,
    which ScatterNd refuses: the tuple and its update get a leading axis of 1."""
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    where = _wrap_tuples(ctx, indices, data, 0)
    if indices.shape.rank == 1:
        where, updates = (
            ops.expand_dims(where, _i32(ctx, 0)),
            ops.expand_dims(updates, _i32(ctx, 0)),
        )
    return [_scatter_into(ctx, node, data, where, updates)]


def _wrap_tuples(ctx: ConversionContext, indices: Tensor, data: Tensor, skip: int) -> Tensor:
    """ONNX index tuples [..., q] may count from the end (-1 is the last); GatherNd's,
    ScatterNd's and the segment ops' may not: each wraps by data's q dimensions after the
    first ``skip``. q is read as the last dimension of indices' shape (a StridedSlice from
    the end), so indices of a rank unknown at import wrap too."""
    indices = ops.cast(indices, DstT=d.int64) if indices.dtype != d.int64 else indices
    depth = ops.strided_slice(
        ops.shape(indices, out_type=d.int64),
        ctx.int64s([-1]),
        ctx.int64s([0]),
        ctx.int64s([1]),
        end_mask=1,
    )
    sizes = ops.slice(shape_of(ctx, data), ctx.int64s([skip]), depth)
    return _wrap_negative(ctx, indices, sizes)


def _batch_coordinates(
    ctx: ConversionContext, node: OnnxNode, indices: Tensor, batch_dims: int
) -> Tensor:
    """For each index tuple of ``indices`` [B1..Bb, ..., q]: its own first ``batch_dims``
    coordinates, as [B1..Bb, ..., batch_dims] (int64)."""
    outer = rank_of(node, indices, "indices") - 1
    if not 0 <= batch_dims <= outer:
        raise node.fail(
            f"batch_dims={batch_dims} must lie in [0, {outer}] (the rank of indices less one)"
        )
    index_shape = ops.shape(indices, out_type=d.int64)
    base = ops.zeros_like(ops.gather_v2(indices, ctx.const(np.int64(0)), _i32(ctx, outer)))
    zero, one = ctx.const(np.int64(0)), ctx.const(np.int64(1))
    parts = []
    for j in range(batch_dims):
        line = ops.range(
            zero, ops.gather_v2(index_shape, ctx.const(np.int64(j)), _i32(ctx, 0)), one
        )
        dims = [1] * outer
        dims[j] = -1
        parts.append(ops.add_v2(ops.reshape(line, ctx.int64s(dims)), base))
    return ops.pack(parts, axis=-1)


@converter("GatherND", 11, attrs=("batch_dims",))
def _gather_nd(node: OnnxNode, ctx: ConversionContext) -> Result:
    data, indices = ctx.input(0), ctx.input(1)
    batch_dims = int(node.attr("batch_dims", 0))
    wrapped = _wrap_tuples(ctx, indices, data, batch_dims)
    if batch_dims == 0:
        return [ops.gather_nd(data, wrapped)]
    batches = _batch_coordinates(ctx, node, wrapped, batch_dims)
    return [ops.gather_nd(data, ops.concat_v2([batches, wrapped], _i32(ctx, -1)))]


@converter("OneHot", 9, attrs=("axis",))
def _one_hot(node: OnnxNode, ctx: ConversionContext) -> Result:
    indices, depth, values = ctx.input(0), ctx.input(1), ctx.input(2)
    depth64 = _scalar(ctx, depth)
    wrapped = _wrap_negative(ctx, ops.cast(indices, DstT=d.int64), depth64)
    off = ops.gather_v2(values, ctx.const(np.int64(0)), _i32(ctx, 0))
    on = ops.gather_v2(values, ctx.const(np.int64(1)), _i32(ctx, 0))
    axis = int(node.attr("axis", -1))
    if axis < -1:
        axis += rank_of(node, indices, "indices") + 1
    return [ops.one_hot(wrapped, _scalar(ctx, depth, d.int32), on, off, axis=axis)]


@converter("TopK", 1, 9, attrs=("axis", "k"))
def _top_k_1(node: OnnxNode, ctx: ConversionContext) -> Result:
    """TopK-1 (opsets 1 to 9): k is an attribute (a required one: the importer's schema
    check names a node without it); always the largest, sorted."""
    return _top_k_along(node, ctx, _i32(ctx, int(node.attr("k"))), largest=True)


@converter("TopK", 10, attrs=("axis", "largest", "sorted"))
def _top_k(node: OnnxNode, ctx: ConversionContext) -> Result:
    k = _scalar(ctx, ctx.input(1), d.int32)
    return _top_k_along(node, ctx, k, largest=bool(int(node.attr("largest", 1))))


def _top_k_along(node: OnnxNode, ctx: ConversionContext, k: Tensor, largest: bool) -> Result:
    """TopKV2 (which works on the last axis) with ``axis`` moved last and back; kernloom
    always returns the sorted order, which ONNX's sorted=0 allows too."""
    x = ctx.input(0)
    rank = rank_of(node, x)
    axis = axis_of(node, int(node.attr("axis", -1)), rank)
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = x if axis == rank - 1 else ops.transpose(x, ctx.int32s(perm))
    if largest:
        values, indices = ops.top_kv2(moved, k, sorted=True, index_type=d.int64)
    else:
        values, indices = _smallest_k(node, ctx, moved, k, rank)
    if axis != rank - 1:
        inverse = [int(i) for i in np.argsort(perm)]
        values = ops.transpose(values, ctx.int32s(inverse))
        indices = ops.transpose(indices, ctx.int32s(inverse))
    return [values, indices]


def _smallest_k(
    node: OnnxNode, ctx: ConversionContext, x: Tensor, k: Tensor, rank: int
) -> tuple[Tensor, Tensor]:
    """The k smallest along the last axis, ascending, ties to the lower index, NaN last
    (as onnxruntime and onnx's reference): TopKV2 (largest first, ties to the lower index)
    of a key that reverses the order exactly. -x does not: -INT_MIN wraps to INT_MIN, an
    unsigned type has no negation, and -NaN is still the largest NaN. An integer's key is
    ~x (-x - 1: no overflow, and order-reversing for unsigned types too), whose own ~ gives
    the values back; a float's key is built from its bits and the values are gathered from
    x by the indices (keeping -0.0 and NaN's payload)."""
    if x.dtype.is_integer:
        keys, indices = ops.top_kv2(ops.invert(x), k, sorted=True, index_type=d.int64)
        return ops.invert(keys), indices
    key = _descending_float_key(node, ctx, x)
    _, indices = ops.top_kv2(key, k, sorted=True, index_type=d.int64)
    values = ops.gather_v2(x, indices, _i32(ctx, rank - 1), batch_dims=rank - 1)
    return values, indices


_FLOAT_BITS: dict[d.DType, d.DType] = {
    d.float16: d.int16,
    d.float32: d.int32,
    d.float64: d.int64,
}
"""The signed integer of each float dtype's width (bfloat16 reaches converters as float32)."""


def _descending_float_key(node: OnnxNode, ctx: ConversionContext, x: Tensor) -> Tensor:
    """A signed integer per float whose descending order is x's ascending order with every
    NaN after +inf and -0.0 equal to 0.0 (their order then comes from the index). With b x's
    bits as a signed integer: b >= 0 (x >= +0.0) gives ~b = -b - 1, decreasing as x grows;
    b < 0 (x <= -0.0) gives its magnitude bits less one, (b & MAX) - 1, which grows as x
    falls and is -1 for -0.0, as ~0 is for +0.0; every NaN gets the integer minimum, which
    no number's key reaches (+inf's is -(bits of inf) - 1)."""
    bits_type = _FLOAT_BITS.get(x.dtype)
    if bits_type is None:
        raise node.fail(f"largest=0 is defined for integer and float types, not {x.dtype}")
    info = np.iinfo(bits_type.numpy_dtype)
    bits = ops.bitcast(x, type=bits_type)
    magnitude = ops.bitwise_and(bits, ctx.const(info.max, bits_type))
    below_zero = ops.sub(magnitude, ctx.const(1, bits_type))
    key = ops.select_v2(ops.less(bits, ctx.const(0, bits_type)), below_zero, ops.invert(bits))
    return ops.select_v2(ops.is_nan(x), ctx.const(info.min, bits_type), key)


@converter("CumSum", 11, attrs=("exclusive", "reverse"))
def _cumsum(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [_scan(node, ctx, ops.cumsum)]


@converter("CumProd", 26, attrs=("exclusive", "reverse"))
def _cumprod(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [_scan(node, ctx, ops.cumprod)]


def _scan(node: OnnxNode, ctx: ConversionContext, op: Callable[..., Tensor]) -> Tensor:
    return op(
        ctx.input(0),
        _scalar(ctx, ctx.input(1), d.int32),
        exclusive=bool(int(node.attr("exclusive", 0))),
        reverse=bool(int(node.attr("reverse", 0))),
    )


def _row_col(ctx: ConversionContext, node: OnnxNode, x: Tensor) -> tuple[Tensor, Tensor]:
    rank = rank_of(node, x)
    if rank < 2:
        raise node.fail("needs a tensor of rank >= 2")
    zero, one = ctx.const(np.int64(0)), ctx.const(np.int64(1))
    rows = ops.range(zero, _dim(ctx, x, rank - 2), one)
    cols = ops.range(zero, _dim(ctx, x, rank - 1), one)
    return ops.expand_dims(rows, _i32(ctx, 1)), ops.expand_dims(cols, _i32(ctx, 0))


@converter("Trilu", 14, attrs=("upper",))
def _trilu(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    k = _scalar(ctx, ctx.input(1)) if ctx.has_input(1) else ctx.const(np.int64(0))
    rows, cols = _row_col(ctx, node, x)
    offset = ops.sub(cols, rows)
    keep = ops.greater_equal(offset, k) if int(node.attr("upper", 1)) else ops.less_equal(offset, k)
    return [ops.select_v2(keep, x, ops.zeros_like(x))]


@converter("EyeLike", 9, attrs=("dtype", "k"))
def _eye_like(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    dtype = node.attr("dtype")
    target = x.dtype if dtype is None else kernloom_dtype(int(dtype), f"node {node.name!r}")
    rows, cols = _row_col(ctx, node, x)
    diagonal = ops.equal(ops.sub(cols, rows), ctx.const(np.int64(int(node.attr("k", 0)))))
    return [ops.cast(diagonal, DstT=target)]


@converter("NonZero", 9)
def _non_zero(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    truth = x if x.dtype == d.bool_ else ops.not_equal(x, ops.zeros_like(x))
    return [ops.transpose(ops.where(truth), ctx.int32s([1, 0]))]


@converter("Hardmax", 1, 12, attrs=("axis",))
def _hardmax_1(node: OnnxNode, ctx: ConversionContext) -> Result:
    """Hardmax-1 and -11 (opsets 1 to 12): x coerced to a matrix at ``axis`` (default 1;
    negative from the end, which Hardmax-11 allows), the hardmax taken over each row -- all
    the dimensions from ``axis`` on at once -- and the result shaped as x again."""
    x = ctx.input(0)
    rows = flatten2d(ctx, node, x, axis_of(node, int(node.attr("axis", 1)), rank_of(node, x)))
    return [ops.reshape(_one_hot_of_max(ctx, rows, 1), shape_of(ctx, x))]


@converter("Hardmax", 13, attrs=("axis",))
def _hardmax(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    axis = axis_of(node, int(node.attr("axis", -1)), rank_of(node, x))
    return [_one_hot_of_max(ctx, x, axis)]


def _one_hot_of_max(ctx: ConversionContext, x: Tensor, axis: int) -> Tensor:
    """1 at the first maximum along ``axis`` (ArgMax's choice), 0 elsewhere. ArgMax refuses
    an empty axis, whose hardmax is empty: where the axis may be empty (its length unknown
    at import, or 0), x gets one -inf after it, which no element loses to (ties go to the
    first), and an empty axis' index 0 is then past OneHot's depth 0."""
    dims = static_dims(x)
    depth = _scalar(ctx, _dim(ctx, x, axis), d.int32) if dims is None else _i32(ctx, dims[axis])
    if dims is None or dims[axis] == 0:
        paddings = np.zeros((x.shape.rank or 0, 2), np.int64)
        paddings[axis, 1] = 1
        x = ops.pad_v2(x, ctx.const(paddings), ctx.const_like(-np.inf, x))
    index = ops.arg_max(x, _i32(ctx, axis), output_type=d.int64)
    one, zero = ctx.const_like(1, x), ctx.const_like(0, x)
    return ops.one_hot(index, depth, one, zero, axis=axis)


def _window(node: OnnxNode, ctx: ConversionContext, terms: Sequence[float]) -> Result:
    """sum_k terms[k] * cos(2 pi k n / D) for n < size, D = size (periodic) or size - 1."""
    size = _scalar(ctx, ctx.input(0), d.int64)
    out = node.attr("output_datatype")
    target = d.float32 if out is None else kernloom_dtype(int(out), f"node {node.name!r}")
    n = ops.cast(ops.range(ctx.const(np.int64(0)), size, ctx.const(np.int64(1))), DstT=d.float64)
    length = ops.cast(size, DstT=d.float64)
    periodic = bool(int(node.attr("periodic", 1)))
    denominator = length if periodic else ops.sub(length, ctx.const(np.float64(1)))
    phase = ops.real_div(ops.mul(n, ctx.const(np.float64(2 * np.pi))), denominator)
    total = ops.mul(ops.ones_like(n), ctx.const(np.float64(terms[0])))
    for k, coefficient in enumerate(terms[1:], start=1):
        wave = ops.cos(ops.mul(phase, ctx.const(np.float64(k))))
        total = ops.add_v2(total, ops.mul(wave, ctx.const(np.float64(coefficient))))
    return [ops.cast(total, DstT=target)]


@converter("HannWindow", 17, attrs=("output_datatype", "periodic"))
def _hann(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _window(node, ctx, (0.5, -0.5))


@converter("HammingWindow", 17, attrs=("output_datatype", "periodic"))
def _hamming(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _window(node, ctx, (25 / 46, -21 / 46))


@converter("BlackmanWindow", 17, attrs=("output_datatype", "periodic"))
def _blackman(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _window(node, ctx, (0.42, -0.5, 0.08))


@converter("Einsum", 12, attrs=("equation",))
def _einsum(node: OnnxNode, ctx: ConversionContext) -> Result:
    equation = str(node.attr("equation")).replace(" ", "")
    if "->" not in equation:
        # Implicit output (numpy's rule): the letters used once, in alphabetical order.
        letters = [c for c in equation if c.isalpha()]
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        equation += "->" + ("..." if "..." in equation else "") + "".join(once)
    return [ops.einsum(ctx.inputs(), equation=equation)]


__all__: list[str] = []


@converter("ReverseSequence", 10, attrs=("batch_axis", "time_axis"))
def _reverse_sequence(node: OnnxNode, ctx: ConversionContext) -> Result:
    """kernloom has no ReverseSequence: a GatherNd whose time index is len - 1 - t for
    t < len (the batch entry's length) and t past it, so the tail stays in place."""
    x = ctx.input(0)
    rank = rank_of(node, x)
    if rank < 2:
        raise node.fail(f"needs a tensor of rank >= 2, not {rank}")
    batch_axis = axis_of(node, int(node.attr("batch_axis", 1)), rank)
    time_axis = axis_of(node, int(node.attr("time_axis", 0)), rank)
    if {batch_axis, time_axis} != {0, 1}:
        raise node.fail(
            f"batch_axis={batch_axis} and time_axis={time_axis} must be 0 and 1, one each"
        )
    zero, one = ctx.const(np.int64(0)), ctx.const(np.int64(1))
    lengths = ops.expand_dims(ops.cast(ctx.input(1), DstT=d.int64), _i32(ctx, 1))  # [B, 1]
    times = ops.expand_dims(ops.range(zero, _dim(ctx, x, time_axis), one), _i32(ctx, 0))
    flipped = ops.sub(ops.sub(lengths, one), times)
    source = ops.select_v2(ops.less(times, lengths), flipped, times)  # [B, T]
    batches = ops.reshape(ops.range(zero, _dim(ctx, x, batch_axis), one), ctx.int64s([-1, 1]))
    rows = ops.mul(batches, ops.ones_like(source))
    if time_axis == 0:
        # x is [T, B, ...]: the coordinate grid must be too.
        swap = ctx.int32s([1, 0])
        source, rows = ops.transpose(source, swap), ops.transpose(rows, swap)
    coords = [rows, source] if batch_axis == 0 else [source, rows]
    return [ops.gather_nd(x, ops.pack(coords, axis=-1))]


@converter("Compress", 9, attrs=("axis",))
def _compress(node: OnnxNode, ctx: ConversionContext) -> Result:
    """The slices where condition is true: a Where and a GatherV2 (a condition shorter
    than the axis leaves the rest out, as ONNX says)."""
    x, condition = ctx.input(0), ctx.input(1)
    axis = node.attr("axis")
    if axis is None:
        x = ops.reshape(x, ctx.int64s([-1]))
        axis = 0
    axis = axis_of(node, int(axis), rank_of(node, x))
    truth = condition if condition.dtype == d.bool_ else ops.cast(condition, DstT=d.bool_)
    chosen = ops.reshape(ops.where(truth), ctx.int64s([-1]))
    return [ops.gather_v2(x, chosen, _i32(ctx, axis))]
