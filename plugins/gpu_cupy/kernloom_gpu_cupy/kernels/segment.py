"""Segment reductions: UnsortedSegment{Sum,Max,Min,Prod} and Segment{Sum,Mean,Max,Min,Prod}.

Written over the array module ``xp`` (CuPy; numpy in tests). CUDA's atomics cover few
types and no product, so the reduction sorts the rows by id (stably: data order within a
segment) and runs a segmented inclusive scan by doubling (log2(n) vectorised passes, each
combining a row with the one ``step`` before it when both share an id); each segment's
last row then holds its reduction. Every dtype of the op defs works the same way.

TensorFlow's start values and NaN rule, as the CPU kernels: an empty unsorted max (min)
holds the dtype's lowest (highest) finite value, the sorted ops give an empty segment 0
(1 for the product) and start max/min from -inf/+inf; only the values after a segment's
last NaN count (the start value no longer does), and a NaN that ends a segment makes it
NaN. As TensorFlow's GPU kernels,
the unsorted ops drop ids past num_segments (checking would synchronise); the sorted ops
copy their ids to the host once to size the output, as TensorFlow's GPU kernel copies
the last id, and check them there with the CPU's messages.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import KernelDefBuilder, KernelLibrary, OpKernelContext
from kernloom.plugin import indexing_checks as ic
from kernloom_gpu_cupy.kernels._host import host_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"


class _Kernels:
    """The kernels, bound to one array module ``xp`` (CuPy, or numpy in tests)."""

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp
        self.ufuncs = {
            "Sum": xp.add,
            "Prod": xp.multiply,
            "Max": xp.maximum,
            "Min": xp.minimum,
        }

    def _scan(self, values: Any, ids: Any, fn: Any) -> Any:
        """The segmented inclusive scan of ``values`` (rows sorted by ``ids``) under
        ``fn``: row i combines every row of its segment up to i, earlier rows first."""
        xp = self.xp
        step, n = 1, values.shape[0]
        while step < n:
            same = (ids[step:] == ids[:-step])[:, None]
            values[step:] = xp.where(same, fn(values[:-step], values[step:]), values[step:])
            step *= 2
        return values

    def reduce(self, rows: Any, target: Any, count: int, kind: str, start: Any) -> Any:
        """(count, slice size): row i the ``kind`` reduction, from ``start``, of the
        ``rows`` whose ``target`` is i; targets == count (dropped ids) are cut off."""
        xp = self.xp
        out = xp.full((count + 1, rows.shape[1]), start, dtype=rows.dtype)
        n = rows.shape[0]
        if n == 0 or rows.shape[1] == 0:
            return out[:count]
        order = xp.argsort(target, kind="stable")
        ids, values = target[order], rows[order]
        ends = xp.flatnonzero(xp.concatenate([ids[1:] != ids[:-1], xp.ones(1, dtype=bool)]))
        fn = self.ufuncs[kind]
        ends_nan = None
        if kind in ("Max", "Min") and rows.dtype.kind == "f":
            # TensorFlow's fold: the values at or before a segment's last NaN are dropped.
            marks = xp.where(xp.isnan(values), order[:, None], -1)
            last_nan = self._scan(marks, ids, xp.maximum)[ends]
            segment = xp.cumsum(xp.concatenate([xp.zeros(1, dtype=np.int64), ids[1:] != ids[:-1]]))
            # After a NaN the next value replaces the accumulator whatever it is, so the
            # values up to the last NaN, and the start value, give way to the identity.
            identity = rows.dtype.type(-np.inf if kind == "Max" else np.inf)
            values = xp.where(order[:, None] <= last_nan[segment], identity, values)
            has_nan = last_nan >= 0
            ends_nan = last_nan == order[ends][:, None]
        with np.errstate(all="ignore"):  # numpy in tests: integer products wrap
            scanned = self._scan(values, ids, fn)[ends]
            reduced = fn(rows.dtype.type(start), scanned)
        if ends_nan is not None:
            reduced = xp.where(has_nan, scanned, reduced)
            reduced = xp.where(ends_nan, rows.dtype.type(np.nan), reduced)
        out[ids[ends]] = reduced
        return out[:count]

    def unsorted(self, kind: str) -> Any:
        def compute(ctx: OpKernelContext) -> None:
            data, ids = ctx.input(0), ctx.input(1)
            count_value = host_input(ctx, 2)
            if count_value.ndim != 0:
                raise ctx.fail(
                    f"num_segments should be a scalar, not shape {list(count_value.shape)}"
                )
            count = int(count_value)
            shape = ic.checked(ctx, ic.unsorted_segment_shape, data.shape, ids.shape, count)
            out = ctx.allocate_output(0, ic.known(shape))
            flat = ids.reshape(-1).astype(np.int64)
            target = self.xp.where((flat >= 0) & (flat < count), flat, count)
            rows = data.reshape(flat.size, math.prod(data.shape[ids.ndim :]))
            start = ic.segment_start(data.dtype, kind, finite=True)
            out.reshape(count, rows.shape[1])[...] = self.reduce(rows, target, count, kind, start)

        compute.__qualname__ = f"cupy_unsorted_segment_{kind.lower()}"
        return compute

    def sorted(self, kind: str) -> Any:
        def compute(ctx: OpKernelContext) -> None:
            xp = self.xp
            data, ids = ctx.input(0), ctx.input(1)
            ic.checked(ctx, ic.segment_shape, data.shape, ids.shape)
            count = ic.checked(ctx, ic.sorted_segment_rows, host_input(ctx, 1))
            out = ctx.allocate_output(0, (count, *data.shape[1:]))
            if out.size == 0:
                return
            target = ids.astype(np.int64)
            rows = data.reshape(target.size, math.prod(data.shape[1:]))
            reduction = "Sum" if kind == "Mean" else kind
            start = ic.segment_start(data.dtype, reduction, finite=False)
            values = self.reduce(rows, target, count, reduction, start)
            counts = xp.bincount(target, minlength=count)[:, None]
            if kind == "Mean":
                size = xp.maximum(counts, 1).astype(data.dtype)
                if data.dtype.kind in "iu":  # C++'s integer division: toward zero
                    quotient = (xp.abs(values) if data.dtype.kind == "i" else values) // size
                    values = xp.where(values < 0, -quotient, quotient).astype(data.dtype)
                else:
                    values = values / size
            if kind != "Prod":  # TensorFlow's empty segment: 0 (the product's: 1)
                values = xp.where(counts == 0, data.dtype.type(0), values)
            out.reshape(count, rows.shape[1])[...] = values

        compute.__qualname__ = f"cupy_segment_{kind.lower()}"
        return compute


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""
    kernels = _Kernels(xp)
    for kind in ("Sum", "Prod", "Max", "Min"):
        spec = KernelDefBuilder(f"UnsortedSegment{kind}").device(GPU).backend(BACKEND)
        lib.kernel(spec.host_memory("num_segments"))(kernels.unsorted(kind))
    for kind in ("Sum", "Mean", "Prod", "Max", "Min"):
        spec = KernelDefBuilder(f"Segment{kind}").device(GPU).backend(BACKEND)
        lib.kernel(spec)(kernels.sorted(kind))  # every type of the op def
