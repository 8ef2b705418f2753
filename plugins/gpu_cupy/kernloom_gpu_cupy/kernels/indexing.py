"""Shape and indexing kernels (Pad, GatherV2, StridedSlice, Split, Pack, Tile, OneHot...).

Written over the array module ``xp`` (CuPy; numpy in tests). The rules come from
``kernloom.plugin.indexing_checks``, shared with the CPU kernels and shape functions.

As TensorFlow's GPU kernels, gathers give zeros for out-of-range indices and ScatterNd
skips them: checking would cost a device-to-host copy and a stream synchronisation per
call. ScatterNd adds with ``add.at`` (CuPy 12 or newer) in the types CUDA's atomic add
supports (see ``_scatter_add``).

Selecting ops (Slice, StridedSlice with positive strides, Split, Unpack) and reshaping
ops (Squeeze, ExpandDims) return views of their input, which hold a reference to it and
never own memory, so nothing overwrites either while the other lives.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import KernelDefBuilder, KernelLibrary, OpKernelContext, broadcast_shape
from kernloom.plugin import indexing_checks as ic
from kernloom.plugin import types as kl_types
from kernloom_gpu_cupy.kernels._host import host_input

__all__ = ["register"]

WHERE_SCALAR = (
    "Where takes a tensor of rank 1 or more (TensorFlow's kernel refuses a scalar); "
    "reshape it to [1]"
)

GPU = "GPU"
BACKEND = "cupy"
GPU_POLICIES = ("", "DEFAULT", "IGNORE")
"""The bad_indices_policy values the GPU kernels take: ERROR would need every index
checked (a device synchronisation), so such nodes find no GPU kernel and go to the CPU."""
MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
Kernel = Callable[[OpKernelContext], None]


def _ints(ctx: OpKernelContext, index: int, what: str, rank: int | None = 1) -> list[int]:
    return ic.checked(ctx, ic.int_list, host_input(ctx, index), what, rank=rank)


def _scalar(ctx: OpKernelContext, index: int, what: str) -> int:
    return _ints(ctx, index, what, rank=0)[0]


class _Kernels:
    """The kernels, bound to one array module ``xp``."""

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp

    # -- padding ------------------------------------------------------------------------------

    def pad(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        pairs, shape = ic.checked(ctx, ic.pad_amounts, x.shape, host_input(ctx, 1))
        fill: Any = 0
        if ctx.num_inputs == 3:
            fill = ctx.input(2)  # a 0-d device array: no trip to the host
            if fill.ndim != 0:
                raise ctx.fail(f"constant_values must be a scalar, got shape {list(fill.shape)}")
        out = ctx.allocate_output(0, shape)
        out[tuple(slice(b, b + d) for (b, _), d in zip(pairs, x.shape, strict=True))] = x
        for axis, (before, after) in enumerate(pairs):  # the padding only, slab by slab
            lead = (slice(None),) * axis
            if before:
                out[(*lead, slice(0, before))] = fill
            if after:
                out[(*lead, slice(out.shape[axis] - after, None))] = fill

    def mirror_pad(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        mode = ctx.attr("mode")
        pairs, shape = ic.checked(ctx, ic.pad_amounts, x.shape, host_input(ctx, 1), mode)
        out = ctx.allocate_output(0, shape)
        if out.size:
            out[...] = self.xp.pad(x, pairs, mode="reflect" if mode == "REFLECT" else "symmetric")

    # -- gathers and scatters -----------------------------------------------------------------

    def _in_range(self, indices: Any, limit: Any) -> tuple[Any, Any]:
        """(valid mask, indices with every invalid one replaced by 0)."""
        valid = (indices >= 0) & (indices < limit)
        return valid, self.xp.where(valid, indices, 0)

    def gather_v2(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        params, indices = ctx.input(0), ctx.input(1)
        axis, batch_dims, shape = ic.checked(
            ctx,
            ic.gather_shape,
            params.shape,
            indices.shape,
            _scalar(ctx, 2, "axis"),
            int(ctx.attr("batch_dims")),
        )
        out = ctx.allocate_output(0, shape)
        if out.size == 0:
            return
        limit = params.shape[axis]
        if limit == 0:
            out.fill(0)
            return
        valid, safe = self._in_range(indices, limit)
        batch = math.prod(params.shape[:batch_dims])
        outer = math.prod(params.shape[batch_dims:axis])
        flat_params = params.reshape(batch, outer, limit, -1)
        flat_safe = safe.reshape(batch, 1, -1)
        rows = xp.arange(batch).reshape(batch, 1, 1)
        columns = xp.arange(outer).reshape(1, outer, 1)
        gathered = flat_params[rows, columns, flat_safe]  # [batch, outer, n, inner]
        keep = valid.reshape(batch, 1, -1, 1)
        out.reshape(gathered.shape)[...] = xp.where(keep, gathered, xp.zeros((), out.dtype))

    def _offsets(self, indices: Any, limits: tuple[int, ...]) -> tuple[Any, Any]:
        """(valid rows, linear offsets with invalid rows at 0) of the index vectors."""
        xp = self.xp
        rows = indices.reshape(math.prod(indices.shape[:-1]), len(limits))
        offsets = xp.zeros(rows.shape[0], dtype=np.int64)
        valid = xp.ones(rows.shape[0], dtype=bool)
        stride = 1
        for k in range(len(limits) - 1, -1, -1):
            column = rows[:, k].astype(np.int64)
            valid &= (column >= 0) & (column < limits[k])
            offsets += column * stride
            stride *= limits[k]
        return valid, xp.where(valid, offsets, 0)

    def gather_nd(self, ctx: OpKernelContext) -> None:
        params, indices = ctx.input(0), ctx.input(1)
        shape = ic.checked(ctx, ic.gather_nd_shape, params.shape, indices.shape)
        assert shape is not None
        limits = tuple(params.shape[: indices.shape[-1]])
        out = ctx.allocate_output(0, shape)
        if out.size == 0:
            return
        if math.prod(limits) == 0:
            out.fill(0)
            return
        valid, offsets = self._offsets(indices, limits)
        gathered = params.reshape(math.prod(limits), -1)[offsets]
        zero = self.xp.zeros((), out.dtype)
        out.reshape(gathered.shape)[...] = self.xp.where(valid[:, None], gathered, zero)

    def scatter_nd(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        indices, updates = ctx.input(0), ctx.input(1)
        shape = _ints(ctx, 2, "shape")
        ic.checked(ctx, ic.scatter_nd_shape, indices.shape, updates.shape, shape)
        limits = tuple(shape[: indices.shape[-1]])
        out = ctx.allocate_output(0, tuple(shape))
        out.fill(0)
        if out.size == 0 or math.prod(indices.shape[:-1]) == 0:
            return
        valid, offsets = self._offsets(indices, limits)
        # Skipped rows add zero at offset 0 (where, not a product: NaN * 0 is NaN).
        rows = xp.where(valid[:, None], updates.reshape(offsets.size, -1), xp.zeros((), out.dtype))
        flat = out.reshape(math.prod(limits), -1)
        self._scatter_add(flat, offsets, rows)

    def _scatter_add(self, flat: Any, offsets: Any, rows: Any) -> None:
        """``flat[offsets] += rows`` with duplicates adding up, through ``add.at`` in the
        types CUDA's atomic add has: integers as their two's-complement bits in uint64
        (the same sums, wrapping as TensorFlow's), complex as pairs of floats, float16
        in float32, bool as counts of true updates."""
        xp = self.xp
        kind = flat.dtype.kind
        if kind == "b":
            counts = xp.zeros(flat.shape, dtype=np.int32)
            xp.add.at(counts, offsets, rows.astype(np.int32))
            xp.not_equal(counts, 0, out=flat)
        elif kind in "iu":
            bits = xp.zeros(flat.shape, dtype=np.uint64)
            xp.add.at(bits, offsets, rows.astype(np.int64).view(np.uint64))
            flat[...] = bits.view(np.int64).astype(flat.dtype)
        elif kind == "c":
            part = np.float32 if flat.dtype == np.complex64 else np.float64
            xp.add.at(flat.view(part), offsets, xp.ascontiguousarray(rows).view(part))
        elif flat.dtype == np.float16:
            wide = xp.zeros(flat.shape, dtype=np.float32)
            xp.add.at(wide, offsets, rows.astype(np.float32))
            flat[...] = wide
        else:
            xp.add.at(flat, offsets, rows)

    # -- slicing -------------------------------------------------------------------------------

    def slice(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        begin, shape = ic.checked(
            ctx, ic.slice_spec, x.shape, _ints(ctx, 1, "begin"), _ints(ctx, 2, "size")
        )
        ctx.set_output(
            0, x[tuple(slice(b, b + s) for b, s in zip(begin, ic.known(shape), strict=True))]
        )

    def strided_slice(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        spec = ic.checked(
            ctx,
            ic.strided_slice_spec,
            x.shape,
            _ints(ctx, 1, "begin"),
            _ints(ctx, 2, "end"),
            _ints(ctx, 3, "strides"),
            **{mask: int(ctx.attr(mask)) for mask in MASKS},
        )
        view = x[spec.slices()]
        if spec.has_negative_stride:
            out = ctx.allocate_output(0, spec.final_shape)
            out[...] = view.reshape(spec.final_shape)
            return
        ctx.set_output(0, view.reshape(spec.final_shape))

    def _split_into(self, ctx: OpKernelContext, x: Any, axis: int, sizes: list[int | None]) -> None:
        start = 0
        lead = (slice(None),) * axis
        for i, size in enumerate(sizes):
            assert size is not None
            ctx.set_output(i, x[(*lead, slice(start, start + size))])
            start += size

    def split(self, ctx: OpKernelContext) -> None:
        x = ctx.input(1)
        axis, sizes = ic.checked(
            ctx, ic.split_sizes, x.shape, _scalar(ctx, 0, "split_dim"), int(ctx.attr("num_split"))
        )
        self._split_into(ctx, x, axis, sizes)

    def split_v(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        axis, sizes = ic.checked(
            ctx,
            ic.split_sizes,
            x.shape,
            _scalar(ctx, 2, "split_dim"),
            int(ctx.attr("num_split")),
            _ints(ctx, 1, "size_splits"),
        )
        self._split_into(ctx, x, axis, sizes)

    def unpack(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        num = int(ctx.attr("num"))
        axis = ic.checked(ctx, ic.pack_axis, int(ctx.attr("axis")), x.ndim)
        if x.shape[axis] != num:
            raise ctx.fail(f"Input shape axis {axis} must equal {num}, got shape {list(x.shape)}")
        lead = (slice(None),) * axis
        for i in range(num):
            ctx.set_output(i, x[(*lead, i)])

    # -- reshaping -------------------------------------------------------------------------------

    def squeeze(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        shape = ic.checked(ctx, ic.squeeze_shape, x.shape, list(ctx.attr("squeeze_dims")))
        assert shape is not None
        ctx.set_output(0, x.reshape(shape))

    def expand_dims(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        axis = ic.checked(ctx, ic.expand_dims_axis, x.ndim, host_input(ctx, 1))
        ctx.set_output(0, x.reshape((*x.shape[:axis], 1, *x.shape[axis:])))

    def pack(self, ctx: OpKernelContext) -> None:
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
        expanded = [v.reshape((*first[:axis], 1, *first[axis:])) for v in values]
        self.xp.concatenate(expanded, axis=axis, out=out)

    def tile(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        multiples = _ints(ctx, 1, "multiples")
        out = ctx.allocate_output(0, ic.checked(ctx, ic.tile_shape, x.shape, multiples))
        if out.size == 0:
            return
        interleaved = [n for pair in zip(multiples, x.shape, strict=True) for n in pair]
        out.reshape(interleaved)[...] = x.reshape([n for d in x.shape for n in (1, d)])

    def broadcast_to(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        shape = ic.checked(ctx, ic.broadcast_to_shape, x.shape, _ints(ctx, 1, "shape"))
        self.xp.copyto(ctx.allocate_output(0, shape), x)

    def reverse_v2(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        axes = ic.checked(ctx, ic.reverse_axes, x.ndim, _ints(ctx, 1, "axis"))
        self.xp.copyto(ctx.allocate_output(0, x.shape), self.xp.flip(x, axes) if axes else x)

    # -- sizes, sequences, selections -------------------------------------------------------------

    def size(self, ctx: OpKernelContext) -> None:
        ctx.allocate_output(0, ())[...] = math.prod(ctx.input(0).shape)

    def rank(self, ctx: OpKernelContext) -> None:
        ctx.allocate_output(0, ())[...] = len(ctx.input(0).shape)

    def range(self, ctx: OpKernelContext) -> None:
        values = [host_input(ctx, i) for i in range(3)]
        for name, value in zip(("start", "limit", "delta"), values, strict=True):
            if value.ndim != 0:
                raise ctx.fail(f"{name} must be a scalar, not shape {list(value.shape)}")
        start, limit, delta = (v.reshape(())[()] for v in values)
        n = ic.checked(ctx, ic.range_size, start, limit, delta)
        out = ctx.allocate_output(0, (n,))
        with np.errstate(all="ignore"):
            self.xp.multiply(self.xp.arange(n, dtype=out.dtype), delta, out=out)
            out += start

    def one_hot(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        indices, on, off = ctx.input(0), ctx.input(2), ctx.input(3)
        depth = _scalar(ctx, 1, "depth")
        if depth < 0:
            raise ctx.fail(f"depth must be non-negative, got: {depth}")
        for name, value in (("on_value", on), ("off_value", off)):
            if value.ndim != 0:
                raise ctx.fail(f"{name} must be a scalar, but got shape {list(value.shape)}")
        axis = ic.checked(ctx, ic.one_hot_axis, int(ctx.attr("axis")), indices.ndim)
        out = ctx.allocate_output(0, (*indices.shape[:axis], depth, *indices.shape[axis:]))
        last = xp.moveaxis(out, axis, -1)
        xp.copyto(last, off)
        xp.copyto(last, on, where=indices[..., None] == xp.arange(depth))

    def where(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        if x.ndim == 0:
            raise ctx.fail(WHERE_SCALAR)
        found = self.xp.argwhere(x)
        ctx.allocate_output(0, found.shape)[...] = found

    def select_v2(self, ctx: OpKernelContext) -> None:
        condition, then, otherwise = ctx.input(0), ctx.input(1), ctx.input(2)
        out = ctx.allocate_output(
            0, broadcast_shape(ctx, condition.shape, then.shape, otherwise.shape)
        )
        self.xp.copyto(out, otherwise)
        self.xp.copyto(out, then, where=condition)

    @staticmethod
    def stop_gradient(ctx: OpKernelContext) -> None:
        ctx.forward_input_to_output(0, 0)

    def unique(self, ctx: OpKernelContext) -> None:
        """Distinct values in order of first appearance; every NaN is its own value."""
        xp, x = self.xp, ctx.input(0)
        if x.ndim != 1:
            raise ctx.fail(f"unique expects a 1D vector, got shape {list(x.shape)}")
        _, first, inverse = xp.unique(x, return_index=True, return_inverse=True, equal_nan=False)
        order = xp.argsort(first, kind="stable")
        position = xp.empty_like(order)
        position[order] = xp.arange(order.size)
        ctx.allocate_output(0, (int(order.size),))[...] = x[first[order]]
        ctx.allocate_output(1, x.shape)[...] = position[inverse.reshape(-1)]

    # -- the table ------------------------------------------------------------------------------

    def table(self) -> list[tuple[str, Kernel, tuple[str, ...], bool]]:
        """(op, kernel, host-memory args, expensive)."""
        return [
            ("Pad", self.pad, ("paddings",), True),
            ("PadV2", self.pad, ("paddings",), True),
            ("MirrorPad", self.mirror_pad, ("paddings",), True),
            ("GatherV2", self.gather_v2, ("axis",), True),
            ("GatherNd", self.gather_nd, (), True),
            ("ScatterNd", self.scatter_nd, ("shape",), True),
            ("Slice", self.slice, ("begin", "size"), False),
            ("StridedSlice", self.strided_slice, ("begin", "end", "strides"), True),
            ("Split", self.split, ("split_dim",), False),
            ("SplitV", self.split_v, ("size_splits", "split_dim"), False),
            ("Unpack", self.unpack, (), False),
            ("Squeeze", self.squeeze, (), False),
            ("ExpandDims", self.expand_dims, ("dim",), False),
            ("Pack", self.pack, (), True),
            ("Tile", self.tile, ("multiples",), True),
            ("BroadcastTo", self.broadcast_to, ("shape",), True),
            ("ReverseV2", self.reverse_v2, ("axis",), True),
            ("Size", self.size, ("output",), False),
            ("Rank", self.rank, ("output",), False),
            ("Range", self.range, ("start", "limit", "delta"), True),
            ("OneHot", self.one_hot, ("depth",), True),
            ("Where", self.where, (), True),
            ("SelectV2", self.select_v2, (), True),
            ("StopGradient", self.stop_gradient, (), False),
            ("PlaceholderWithDefault", self.stop_gradient, (), False),  # forwards its input
            ("Unique", self.unique, (), True),
        ]


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""
    for op, kernel, host, expensive in _Kernels(xp).table():
        spec = KernelDefBuilder(op).device(GPU).backend(BACKEND).host_memory(*host)
        if op in ("GatherNd", "ScatterNd"):
            spec.attr_constraint("bad_indices_policy", list(GPU_POLICIES))
        if op == "Unique":  # no complex: TensorFlow has no CPU Unique for it
            spec.type_constraint("T", [x for x in kl_types.ALL if not x.is_complex])
        lib.kernel(spec, expensive=expensive)(kernel)
