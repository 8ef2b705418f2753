"""Segment reductions: UnsortedSegment{Sum,Max,Min,Prod}, Segment{Sum,Mean,Max,Min,Prod}.

One vectorised scatter per op (``np.add.at``, ``np.maximum.at``...: duplicates reduce in
data order, as TensorFlow's CPU loop over the rows does) into an output filled with the
reduction's start value. The rules and messages (ids a prefix of data's shape, ids past
num_segments, sorted ids) are ``indexing_checks``'s, shared with the shape functions and
the GPU kernels.

Start values are TensorFlow's: the unsorted max/min start from the dtype's lowest/highest
finite value (what an empty segment holds), the sorted ones from -inf/+inf (Eigen's
reducers) and give an empty segment 0 (1 for SegmentProd). NaN in max/min follows
TensorFlow's fold ``acc = x unless x < acc``: only the values after a segment's last NaN
count (the first of them replaces the NaN whatever it is: the start value no longer
counts), and the segment is NaN when a NaN is its last value (``_without_nan_prefix``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext
from kernloom.plugin import indexing_checks as ic
from kernloom_cpu_numpy.kernels._util import Array

__all__ = ["register"]

CPU = "CPU"
UFUNCS: dict[str, np.ufunc] = {
    "Sum": np.add,
    "Prod": np.multiply,
    "Max": np.maximum,
    "Min": np.minimum,
}


def _without_nan_prefix(
    rows: Array, ids: Array, count: int, kind: str
) -> tuple[Array, Array | None, Array | None]:
    """TensorFlow's NaN rule for max/min, vectorised. After a NaN, ``x < acc`` is false,
    so the next value replaces the accumulator whatever it is: the segment's result is
    the plain max of the values after its last NaN (the start value no longer counts:
    min(NaN, inf) is inf, not the highest finite value), or NaN if a NaN ends it.
    Returns the rows with every value at or before its segment's last NaN (per column)
    set to max's identity (-inf; min's +inf), the mask of the (segment, column) pairs
    that hold a NaN, and the mask of those a NaN ends; None, None where none is NaN."""
    nan = np.isnan(rows)
    if not nan.any():
        return rows, None, None
    position = np.arange(ids.size)
    last_nan = np.full((count, rows.shape[1]), -1, np.int64)
    np.maximum.at(last_nan, ids, np.where(nan, position[:, None], -1))
    last_row = np.full(count, -1, np.int64)
    np.maximum.at(last_row, ids, position)
    identity = rows.dtype.type(-np.inf if kind == "Max" else np.inf)
    kept = np.where(position[:, None] <= last_nan[ids], identity, rows)
    return kept, last_nan >= 0, (last_nan >= 0) & (last_nan == last_row[:, None])


def segment_reduce(data: Array, ids: Array, count: int, kind: str, *, finite: bool) -> Array:
    """``count`` rows, row i the ``kind`` reduction of the slices of ``data`` whose id
    is i (negative ids dropped), as a (count, slice size) array."""
    inner = math.prod(data.shape[ids.ndim :])
    rows = data.reshape(ids.size, inner)
    flat = ids.reshape(-1).astype(np.intp, copy=False)
    keep = flat >= 0
    if not keep.all():
        flat, rows = flat[keep], rows[keep]
    start = ic.segment_start(data.dtype, kind, finite=finite)
    out = np.full((count, inner), start, dtype=data.dtype)
    ends_nan = None
    if kind in ("Max", "Min") and data.dtype.kind == "f":
        rows, has_nan, ends_nan = _without_nan_prefix(rows, flat, count, kind)
        if has_nan is not None:
            out[has_nan] = -np.inf if kind == "Max" else np.inf
    with np.errstate(all="ignore"):  # integer products wrap, as in TensorFlow
        UFUNCS[kind].at(out, flat, rows)
    if ends_nan is not None:
        out[ends_nan] = np.nan
    return out


def _rows(out: Array) -> Array:
    """``out`` as (segments, slice size), empty shapes included."""
    return out.reshape(out.shape[0], math.prod(out.shape[1:]))


def unsorted_segment(kind: str) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        data, ids = ctx.input(0), ctx.input(1)
        count_value = np.asarray(ctx.input(2))
        if count_value.ndim != 0:
            raise ctx.fail(f"num_segments should be a scalar, not shape {list(count_value.shape)}")
        count = int(count_value)
        shape = ic.checked(ctx, ic.unsorted_segment_shape, data.shape, ids.shape, count)
        out = ctx.allocate_output(0, ic.known(shape))
        if data.size == 0:  # TensorFlow returns before looking at the ids
            out.fill(ic.segment_start(data.dtype, kind, finite=True))
            return
        error = ic.segment_id_error(ids, count)
        if error is not None:
            raise ctx.fail(str(error))
        _rows(out)[...] = segment_reduce(data, ids, count, kind, finite=True)

    compute.__qualname__ = f"unsorted_segment_{kind.lower()}"
    return compute


def _mean(data: Array, ids: Array, count: int) -> Array:
    """Sum over count, per segment; integers divide truncating toward zero (C++'s /), an
    empty segment is 0."""
    total = segment_reduce(data, ids, count, "Sum", finite=False)
    counts = np.bincount(ids, minlength=count).reshape(count, 1)
    if data.dtype.kind in "iu":
        size = np.maximum(counts, 1).astype(data.dtype)
        quotient = np.abs(total) // size if data.dtype.kind == "i" else total // size
        truncated: Array = np.where(total < 0, -quotient, quotient).astype(data.dtype)
        return truncated
    with np.errstate(all="ignore"):
        mean: Array = np.where(counts > 0, total / np.maximum(counts, 1).astype(data.dtype), 0)
    return mean


def sorted_segment(kind: str) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        data, ids = ctx.input(0), ctx.input(1)
        ic.checked(ctx, ic.segment_shape, data.shape, ids.shape)
        count = ic.checked(ctx, ic.sorted_segment_rows, ids)
        out = ctx.allocate_output(0, (count, *data.shape[1:]))
        if out.size == 0:
            return
        flat = ids.astype(np.intp, copy=False)
        if kind == "Mean":
            _rows(out)[...] = _mean(data, flat, count)
            return
        values = segment_reduce(data, flat, count, kind, finite=False)
        if kind != "Prod":  # TensorFlow's empty segment: 0, and 1 for the product
            values[np.bincount(flat, minlength=count) == 0] = 0
        _rows(out)[...] = values

    compute.__qualname__ = f"segment_{kind.lower()}"
    return compute


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""
    for kind in ("Sum", "Prod", "Max", "Min"):
        lib.kernel(
            f"UnsortedSegment{kind}", device=CPU, backend="numpy", host_memory=["num_segments"]
        )(unsorted_segment(kind))
    for kind in ("Sum", "Mean", "Prod", "Max", "Min"):
        lib.kernel(f"Segment{kind}", device=CPU, backend="numpy")(sorted_segment(kind))
