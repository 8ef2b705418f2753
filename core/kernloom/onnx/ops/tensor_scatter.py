"""ONNX's TensorScatter (opset 24, the KV-cache update), as one batched gather.

Instead of scattering ``update`` into a copy of ``past_cache``, each cache position asks
where its value comes from: for batch ``b`` and cache position ``s`` along ``axis``, the
update row ``j = s - write_indices[b]`` (modulo the cache length in ``circular`` mode)
when ``0 <= j < sequence_length``, else the cache itself. ``update`` and ``past_cache``
are concatenated along ``axis`` ([.., L + M, ..]), so one index per (batch, position) --
``j`` or ``L + s`` -- picks either, and a GatherV2 with ``batch_dims=1`` takes the rows:
exact for every dtype, with sizes known at import or only at run time, and an empty
update leaves the cache as it was.

Deliberate deviations, where onnx's reference fails or wraps instead: in ``linear`` mode
the update rows that would land past the cache's end (``write_indices[b] + L > M``) are
dropped, and a negative write index writes from that (negative) position on, so only the
rows that land inside the cache are written -- numpy's reference wraps a negative index
from the end and raises an IndexError past it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import axis_of, rank_of, shape_of

Result = Sequence[Tensor | None]

_MODES = ("linear", "circular")


def _length(ctx: ConversionContext, x: Tensor, axis: int) -> Tensor:
    """x's size along ``axis`` as an int64 scalar (a constant when known)."""
    return ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), ctx.const(np.int32(0)))


@converter("TensorScatter", 24, attrs=("axis", "mode"))
def _tensor_scatter(node: OnnxNode, ctx: ConversionContext) -> Result:
    past, update = ctx.input(0), ctx.input(1)
    mode = str(node.attr("mode", "linear"))
    if mode not in _MODES:
        raise node.fail(f"mode={mode!r} is not supported (linear and circular are)")
    rank = rank_of(node, past, "past_cache")
    if rank_of(node, update, "update") != rank:
        raise node.fail(
            f"update has rank {update.shape.rank} but past_cache has rank {rank}; they must "
            "differ only in the size of the sequence axis"
        )
    axis = axis_of(node, int(node.attr("axis", -2)), rank)
    if axis == 0:
        raise node.fail("axis 0 is the batch axis; the sequence axis must be another one")
    if update.dtype != past.dtype:
        raise node.fail(f"update is {update.dtype.name} but past_cache is {past.dtype.name}")
    long = _length(ctx, past, axis)  # M: the cache's length
    short = _length(ctx, update, axis)  # L: the update's length
    zero, one = ctx.const(np.int64(0)), ctx.const(np.int64(1))
    positions = ops.range(zero, long, one)  # s, [M]
    batch = _length(ctx, past, 0)
    if ctx.has_input(2):
        starts = ops.cast(ctx.input(2), DstT=d.int64)
    else:
        starts = ops.fill(ops.reshape(batch, ctx.int64s([1])), zero)
    # j[b, s] = s - write_indices[b]: the update row that lands on cache position s.
    row = ops.sub(
        ops.expand_dims(positions, ctx.const(np.int32(0))),
        ops.expand_dims(starts, ctx.const(np.int32(1))),
    )
    if mode == "circular":
        # max(M, 1): an empty cache takes no row, and FloorMod must not divide by zero.
        row = ops.floor_mod(row, ops.maximum(long, one))
    written = ops.logical_and(ops.greater_equal(row, zero), ops.less(row, short))
    kept = ops.add_v2(ops.zeros_like(row), ops.add_v2(positions, short))  # L + s
    index = ops.select_v2(written, row, kept)
    rows = ops.concat_v2([update, past], ctx.const(np.int32(axis)))
    return [ops.gather_v2(rows, index, ctx.const(np.int32(axis)), batch_dims=1)]


__all__: list[str] = []
