"""Shape and indexing kernels (Pad, GatherV2, StridedSlice, Split, Pack, Tile, OneHot...).

The reference kernels. The rules (bounds, masks, sizes) come from
``kernloom.plugin.indexing_checks``, shared with the shape functions and the GPU
kernels. Ops that only select part of their input (Slice, StridedSlice with positive
strides, Split, Unpack) or only relabel its dimensions (Squeeze, ExpandDims) return a
numpy view: the view holds a reference to its input, so the executor never hands that
input to another kernel to overwrite while the view lives, and a view never owns its
memory, so it is never overwritten itself.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from kernloom.plugin import (
    InvalidArgumentError,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    broadcast_shape,
    same_layout_output,
)
from kernloom.plugin import indexing_checks as ic
from kernloom.plugin import types as t

__all__ = ["register"]

WHERE_SCALAR = (
    "Where takes a tensor of rank 1 or more (TensorFlow's kernel refuses a scalar); "
    "reshape it to [1]"
)

SCATTER_DEPTH_0 = (
    "Indices and updates specified for empty output shape: indices.shape[-1] is 0 (as "
    "TensorFlow's kernel, ScatterNd takes no index vectors of length 0)"
)

CPU = "CPU"
Array = np.ndarray[Any, Any]
MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _ints(ctx: OpKernelContext, index: int, what: str, rank: int | None = 1) -> list[int]:
    return ic.checked(ctx, ic.int_list, ctx.input(index), what, rank=rank)


def _scalar(ctx: OpKernelContext, index: int, what: str) -> int:
    return _ints(ctx, index, what, rank=0)[0]


# -- padding --------------------------------------------------------------------------------


def pad(ctx: OpKernelContext) -> None:
    """Into the input's memory order where that is not C order (``same_layout_output``):
    an NCHW image in NHWC memory (a convolution's) padded into C order is copied a value at
    a time, and the convolution or pooling that reads it converts it back (ShuffleNet's
    padded ONNX AveragePools, a Pad before a VALID AvgPool: 62 -> 41 µs a Pad at two
    threads, and the AvgPool no longer converts its input)."""
    x = ctx.input(0)
    pairs, shape = ic.checked(ctx, ic.pad_amounts, x.shape, ctx.input(1))
    fill: Any = 0
    if ctx.num_inputs == 3:
        constant = ctx.input(2)
        if np.ndim(constant) != 0:
            shape_text = list(np.shape(constant))
            raise ctx.fail(f"constant_values must be a scalar, got shape {shape_text}")
        fill = constant
    out = same_layout_output(ctx, [x], shape)
    if out is None:
        out = ctx.allocate_output(0, shape)
    out[tuple(slice(b, b + d) for (b, _), d in zip(pairs, x.shape, strict=True))] = x
    _fill_borders(out, pairs, fill)


def _fill_borders(out: Array, pairs: list[tuple[int, int]], fill: Any) -> None:
    """Write ``fill`` into the padding only (one slab per side and dimension; the slabs
    overlap at the corners), so that each output element is written about once."""
    for axis, (before, after) in enumerate(pairs):
        lead = (slice(None),) * axis
        if before:
            out[(*lead, slice(0, before))] = fill
        if after:
            out[(*lead, slice(out.shape[axis] - after, None))] = fill


def mirror_pad(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    mode = ctx.attr("mode")
    pairs, shape = ic.checked(ctx, ic.pad_amounts, x.shape, ctx.input(1), mode)
    out = ctx.allocate_output(0, shape)
    if x.ndim == 0:  # np.pad takes no empty pad widths: a scalar is padded by nothing
        out[...] = x
    elif out.size:
        out[...] = np.pad(x, pairs, mode="reflect" if mode == "REFLECT" else "symmetric")


# -- gathers and scatters -------------------------------------------------------------------


def _check_range(ctx: OpKernelContext, indices: Array, limit: int) -> None:
    bad = (indices < 0) | (indices >= limit)
    if bad.any():
        raise ctx.fail(str(ic.index_error(indices, bad, "", limit)))


def gather_v2(ctx: OpKernelContext) -> None:
    params, indices = ctx.input(0), ctx.input(1)
    axis, batch_dims, shape = ic.checked(
        ctx,
        ic.gather_shape,
        params.shape,
        indices.shape,
        _scalar(ctx, 2, "axis"),
        int(ctx.attr("batch_dims")),
    )
    _check_range(ctx, indices, params.shape[axis])
    out = ctx.allocate_output(0, shape)
    if out.size == 0:
        return
    if batch_dims == 0:
        np.take(params, indices, axis=axis, out=out, mode="wrap")  # checked: wrap never acts
        return
    batch = math.prod(params.shape[:batch_dims])
    outer = math.prod(params.shape[batch_dims:axis])
    flat_params = params.reshape(batch, outer, params.shape[axis], -1)
    flat_indices = indices.reshape(batch, 1, -1)
    rows = np.arange(batch).reshape(batch, 1, 1)
    columns = np.arange(outer).reshape(1, outer, 1)
    out.reshape(batch, outer, flat_indices.shape[-1], -1)[...] = flat_params[
        rows, columns, flat_indices
    ]


def _index_rows(
    ctx: OpKernelContext, indices: Array, limits: tuple[int, ...], what: str
) -> tuple[Array, Array | None]:
    """Index vectors (the last dimension of indices) as linear offsets into ``limits``,
    and which of them are in range: None when all are. Out-of-range vectors are an error
    unless the node's bad_indices_policy is IGNORE (their offsets are then 0)."""
    rows = indices.reshape(math.prod(indices.shape[:-1]), len(limits))
    bad = ((rows < 0) | (rows >= np.asarray(limits, dtype=np.int64))).any(axis=1)
    valid: Array | None = None
    if bad.any():
        if ctx.attr("bad_indices_policy") != "IGNORE":
            where = bad.reshape(indices.shape[:-1])
            raise ctx.fail(str(ic.index_error(indices, where, what, limits)))
        valid = np.logical_not(bad)
        rows = np.where(valid[:, None], rows, 0)
    if not limits:
        return np.zeros(rows.shape[0], np.int64), valid
    offsets = np.ravel_multi_index(tuple(rows.T), limits) if math.prod(limits) else rows[:, 0]
    return np.asarray(offsets, dtype=np.int64), valid


def gather_nd(ctx: OpKernelContext) -> None:
    params, indices = ctx.input(0), ctx.input(1)
    shape = ic.known(ic.checked(ctx, ic.gather_nd_shape, params.shape, indices.shape))
    limits = params.shape[: indices.shape[-1]]
    offsets, valid = _index_rows(ctx, indices, limits, "param shape")
    out = ctx.allocate_output(0, shape)
    if out.size == 0:
        return
    rows = out.reshape(offsets.size, -1)
    if valid is None:
        rows[...] = params.reshape(math.prod(limits), -1)[offsets]
    else:  # IGNORE: zeros for the index vectors out of range
        rows.fill(0)
        if valid.any():
            rows[valid] = params.reshape(math.prod(limits), -1)[offsets[valid]]


def scatter_nd(ctx: OpKernelContext) -> None:
    indices, updates = ctx.input(0), ctx.input(1)
    shape = _ints(ctx, 2, "shape")
    ic.checked(ctx, ic.scatter_nd_shape, indices.shape, updates.shape, shape)
    depth = indices.shape[-1]
    if depth == 0:
        raise ctx.fail(SCATTER_DEPTH_0)
    out = ctx.allocate_output(0, tuple(shape))
    out.fill(0)
    offsets, valid = _index_rows(ctx, indices, tuple(shape[:depth]), "shape")
    if out.size == 0 or offsets.size == 0:
        return
    flat = out.reshape(math.prod(shape[:depth]), -1)
    rows = updates.reshape(offsets.size, -1)
    if valid is not None:  # IGNORE: out-of-range rows are skipped
        offsets, rows = offsets[valid], rows[valid]
    # Rows with a target of their own are written directly; rows that share a target add
    # up with np.add.at (in index order: the sort is stable). ``out`` starts at zero.
    order = np.argsort(offsets, kind="stable")
    targets = offsets[order]
    same = targets[1:] == targets[:-1]
    shared = np.r_[same, False] | np.r_[False, same]
    flat[targets[~shared]] = rows[order[~shared]]
    if shared.any():
        np.add.at(flat, targets[shared], rows[order[shared]])  # bool: add is logical or


# -- slicing ---------------------------------------------------------------------------------


def slice_(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    begin, shape = ic.checked(
        ctx, ic.slice_spec, x.shape, _ints(ctx, 1, "begin"), _ints(ctx, 2, "size")
    )
    ctx.set_output(
        0, x[tuple(slice(b, b + s) for b, s in zip(begin, ic.known(shape), strict=True))]
    )


@functools.lru_cache(maxsize=1024)
def _strided_slice_spec(
    shape: tuple[int, ...],
    begin: tuple[int, ...],
    end: tuple[int, ...],
    strides: tuple[int, ...],
    masks: tuple[int, ...],
) -> ic.StridedSliceSpec:
    """The spec of one slice of one shape, computed once: the same constant slice of the
    same shape runs every step (errors are raised, never cached)."""
    return ic.strided_slice_spec(shape, begin, end, strides, **dict(zip(MASKS, masks, strict=True)))


def strided_slice(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    spec = ic.checked(
        ctx,
        _strided_slice_spec,
        x.shape,
        tuple(_ints(ctx, 1, "begin")),
        tuple(_ints(ctx, 2, "end")),
        tuple(_ints(ctx, 3, "strides")),
        tuple(int(ctx.attr(mask)) for mask in MASKS),
    )
    view = x[spec.slices()]
    if spec.has_negative_stride:  # a copy: negative strides are no layout for other kernels
        out = ctx.allocate_output(0, spec.final_shape)
        out[...] = view.reshape(spec.final_shape)
        return
    ctx.set_output(0, view.reshape(spec.final_shape))


def _split_into(ctx: OpKernelContext, x: Array, axis: int, sizes: list[int | None]) -> None:
    start = 0
    lead = (slice(None),) * axis
    for i, size in enumerate(sizes):
        assert size is not None
        ctx.set_output(i, x[(*lead, slice(start, start + size))])
        start += size


def split(ctx: OpKernelContext) -> None:
    x = ctx.input(1)
    axis, sizes = ic.checked(
        ctx, ic.split_sizes, x.shape, _scalar(ctx, 0, "split_dim"), int(ctx.attr("num_split"))
    )
    _split_into(ctx, x, axis, sizes)


def split_v(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    axis, sizes = ic.checked(
        ctx,
        ic.split_sizes,
        x.shape,
        _scalar(ctx, 2, "split_dim"),
        int(ctx.attr("num_split")),
        _ints(ctx, 1, "size_splits"),
    )
    _split_into(ctx, x, axis, sizes)


def unpack(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    num = int(ctx.attr("num"))
    axis = ic.checked(ctx, ic.pack_axis, int(ctx.attr("axis")), x.ndim)
    if x.shape[axis] != num:
        raise ctx.fail(f"Input shape axis {axis} must equal {num}, got shape {list(x.shape)}")
    lead = (slice(None),) * axis
    for i in range(num):
        ctx.set_output(i, x[(*lead, i)])


# -- reshaping ---------------------------------------------------------------------------------


class Squeeze(OpKernel):
    """A view of the input without the size-1 axes asked for; the direct entry (no
    context) makes it where the axes are valid, ``compute`` explains the rest."""

    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._dims = [int(d) for d in ctx.attr("squeeze_dims")]

    def compute(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        shape = ic.checked(ctx, ic.squeeze_shape, x.shape, self._dims)
        assert shape is not None
        ctx.set_output(0, x.reshape(shape))

    def direct(self, reuse: int, x: Any) -> Any:
        try:
            shape = ic.squeeze_shape(x.shape, self._dims)
        except InvalidArgumentError:
            return NotImplemented
        return NotImplemented if shape is None else x.reshape(shape)


def expand_dims(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    axis = ic.checked(ctx, ic.expand_dims_axis, x.ndim, ctx.input(1))
    ctx.set_output(0, x.reshape((*x.shape[:axis], 1, *x.shape[axis:])))


def _expand_dims_direct(reuse: int, x: Any, dim: Any) -> Any:
    """ExpandDims's direct entry: the view, where ``dim`` is valid (``compute`` explains
    the rest)."""
    try:
        axis = ic.expand_dims_axis(x.ndim, dim)
    except InvalidArgumentError:
        return NotImplemented
    return x.reshape((*x.shape[:axis], 1, *x.shape[axis:]))


def pack(ctx: OpKernelContext) -> None:
    values = ctx.input_list("values")
    first = values[0].shape
    for i, v in enumerate(values):
        if v.shape != first:
            raise ctx.fail(
                f"Shapes of all inputs must match: values[0].shape = {list(first)} != "
                f"values[{i}].shape = {list(v.shape)}"
            )
    axis = ic.checked(ctx, ic.pack_axis, int(ctx.attr("axis")), len(first) + 1)
    out = ctx.allocate_output(0, (*first[:axis], len(values), *first[axis:]))
    np.stack(values, axis=axis, out=out)


def tile(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    multiples = _ints(ctx, 1, "multiples")
    shape = ic.checked(ctx, ic.tile_shape, x.shape, multiples)
    out = ctx.allocate_output(0, shape)
    if out.size == 0:
        return
    # out as [m0, d0, m1, d1, ...]: each copy of x is one broadcast of it.
    interleaved = [n for pair in zip(multiples, x.shape, strict=True) for n in pair]
    spread = x.reshape([n for d in x.shape for n in (1, d)])
    out.reshape(interleaved)[...] = spread


def broadcast_to(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    shape = ic.checked(ctx, ic.broadcast_to_shape, x.shape, _ints(ctx, 1, "shape"))
    np.copyto(ctx.allocate_output(0, shape), x)


def reverse_v2(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    axes = ic.checked(ctx, ic.reverse_axes, x.ndim, _ints(ctx, 1, "axis"))
    np.copyto(ctx.allocate_output(0, x.shape), np.flip(x, axes) if axes else x)


# -- sizes, sequences, selections ---------------------------------------------------------------


def size(ctx: OpKernelContext) -> None:
    ctx.allocate_output(0, ())[...] = ctx.input(0).size


def rank(ctx: OpKernelContext) -> None:
    ctx.allocate_output(0, ())[...] = ctx.input(0).ndim


def range_(ctx: OpKernelContext) -> None:
    start, limit, delta = (ctx.input(i) for i in range(3))
    for name, value in (("start", start), ("limit", limit), ("delta", delta)):
        if np.ndim(value) != 0:
            raise ctx.fail(f"{name} must be a scalar, not shape {list(np.shape(value))}")
    start, limit, delta = (np.asarray(v).reshape(())[()] for v in (start, limit, delta))
    n = ic.checked(ctx, ic.range_size, start, limit, delta)
    out = ctx.allocate_output(0, (n,))
    with np.errstate(all="ignore"):  # start + i * delta in the output's type, as TensorFlow
        np.multiply(np.arange(n, dtype=out.dtype), delta, out=out)
        out += start


def one_hot(ctx: OpKernelContext) -> None:
    indices, on, off = ctx.input(0), ctx.input(2), ctx.input(3)
    depth = _scalar(ctx, 1, "depth")
    if depth < 0:
        raise ctx.fail(f"depth must be non-negative, got: {depth}")
    for name, value in (("on_value", on), ("off_value", off)):
        if np.ndim(value) != 0:
            raise ctx.fail(f"{name} must be a scalar, but got shape {list(np.shape(value))}")
    axis = ic.checked(ctx, ic.one_hot_axis, int(ctx.attr("axis")), indices.ndim)
    out = ctx.allocate_output(0, (*indices.shape[:axis], depth, *indices.shape[axis:]))
    last = np.moveaxis(out, axis, -1)  # a view of out with the depth dimension last
    last[...] = off
    hot = (indices >= 0) & (indices < depth)  # other indices leave a row of off_value
    if indices.ndim == 0:
        if hot:
            last[int(indices)] = on
        return
    last[(*np.nonzero(hot), indices[hot])] = on


def where(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    if x.ndim == 0:
        raise ctx.fail(WHERE_SCALAR)
    found = np.argwhere(x)
    ctx.allocate_output(0, found.shape)[...] = found


class SelectV2(OpKernel):
    """``then`` where ``condition``, else ``otherwise``, all three broadcast. Its direct
    entry needs no context: it writes into ``otherwise`` where nothing else holds it and
    it has the result's shape (read whole before anything of it is overwritten), else
    into a new counted buffer; shapes that do not broadcast go to ``compute``."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._allocate = ctx.device.allocate
        self._dtype = self.signature.output_dtypes[0]

    def compute(self, ctx: OpKernelContext) -> None:
        condition, then, otherwise = ctx.input(0), ctx.input(1), ctx.input(2)
        shape = broadcast_shape(ctx, condition.shape, then.shape, otherwise.shape)
        out = ctx.allocate_output(0, shape)
        np.copyto(out, otherwise)
        np.copyto(out, then, where=condition)

    def direct(self, reuse: int, condition: Any, then: Any, otherwise: Any) -> Any:
        shape = then.shape
        if condition.shape != shape or otherwise.shape != shape:
            try:
                shape = np.broadcast_shapes(condition.shape, shape, otherwise.shape)
            except ValueError:
                return NotImplemented
        if (
            reuse & 4
            and otherwise.shape == shape
            and otherwise.base is None
            and otherwise.flags.writeable
        ):
            np.copyto(otherwise, then, where=condition)
            return otherwise
        out = self._allocate(shape, self._dtype)
        np.copyto(out, otherwise)
        np.copyto(out, then, where=condition)
        return out


def stop_gradient(ctx: OpKernelContext) -> None:
    ctx.forward_input_to_output(0, 0)


def unique(ctx: OpKernelContext) -> None:
    """Distinct values in order of first appearance; every NaN is its own value."""
    x = ctx.input(0)
    if x.ndim != 1:
        raise ctx.fail(f"unique expects a 1D vector, got shape {list(x.shape)}")
    _, first, inverse = np.unique(x, return_index=True, return_inverse=True, equal_nan=False)
    order = np.argsort(first, kind="stable")  # the distinct values by first appearance
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    y = ctx.allocate_output(0, (order.size,))
    y[...] = x[first[order]]
    ctx.allocate_output(1, x.shape)[...] = position[inverse.reshape(-1)]


def placeholder_with_default(ctx: OpKernelContext) -> None:
    ctx.forward_input_to_output(0, 0)  # a fed value replaces the node before it runs


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def cpu(op: str, *host: str, **kw: Any) -> Any:
        return lib.kernel(op, device=CPU, backend="numpy", host_memory=list(host), **kw)

    cpu("Pad", "paddings")(pad)
    cpu("PadV2", "paddings")(pad)
    cpu("MirrorPad", "paddings")(mirror_pad)
    cpu("GatherV2", "axis")(gather_v2)
    cpu("GatherNd")(gather_nd)
    cpu("ScatterNd", "shape")(scatter_nd)
    cpu("Slice", "begin", "size", expensive=False)(slice_)
    cpu("StridedSlice", "begin", "end", "strides")(strided_slice)
    cpu("Split", "split_dim", expensive=False)(split)
    cpu("SplitV", "size_splits", "split_dim", expensive=False)(split_v)
    cpu("Unpack", expensive=False)(unpack)
    cpu("Squeeze")(Squeeze)
    cpu("ExpandDims", "dim", expensive=False, direct=_expand_dims_direct)(expand_dims)
    cpu("Pack")(pack)
    cpu("Tile", "multiples")(tile)
    cpu("BroadcastTo", "shape")(broadcast_to)
    cpu("ReverseV2", "axis")(reverse_v2)
    cpu("Size", "output", expensive=False)(size)
    cpu("Rank", "output", expensive=False)(rank)
    cpu("Range", "start", "limit", "delta")(range_)
    cpu("OneHot", "depth")(one_hot)
    # No float16: TensorFlow's CPU has no such Where kernel.
    cpu("Where", type_constraints={"T": tuple(x for x in t.ALL if x.name != "float16")})(where)
    cpu("SelectV2", type_constraints={"T": t.OP_TYPES})(SelectV2)
    cpu("StopGradient", expensive=False)(stop_gradient)
    cpu("PlaceholderWithDefault", expensive=False)(placeholder_with_default)
    # No complex: TensorFlow has no CPU Unique for it.
    cpu("Unique", type_constraints={"T": tuple(x for x in t.ALL if not x.is_complex)})(unique)
