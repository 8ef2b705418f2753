"""ONNX's reductions (ReduceSum, ReduceMean, ... ArgMax): axes as attribute before
opset 13 (18 for most), as an optional input after; ``noop_with_empty_axes``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter, schema_versions
from kernloom.onnx.ops._helpers import axis_of, ints, rank_of

Result = Sequence[Tensor | None]
Reducer = Callable[[ConversionContext, Tensor, Tensor, bool], Tensor]


def _plain(fn: Callable[..., Tensor]) -> Reducer:
    return lambda ctx, x, axes, keep: fn(x, axes, keep_dims=keep)


def _logical(fn: Callable[..., Tensor], boolean: Callable[..., Tensor]) -> Reducer:
    """Max and Min of booleans are Any and All."""

    def reduce_(ctx: ConversionContext, x: Tensor, axes: Tensor, keep: bool) -> Tensor:
        return (boolean if x.dtype == d.bool_ else fn)(x, axes, keep_dims=keep)

    return reduce_


def _l1(ctx: ConversionContext, x: Tensor, axes: Tensor, keep: bool) -> Tensor:
    return ops.sum(ops.abs(x), axes, keep_dims=keep)


def _l2(ctx: ConversionContext, x: Tensor, axes: Tensor, keep: bool) -> Tensor:
    return (
        ops.sqrt(ops.sum(ops.square(x), axes, keep_dims=keep))
        if x.dtype.is_floating
        else (
            ops.cast(
                ops.sqrt(ops.cast(ops.sum(ops.square(x), axes, keep_dims=keep), DstT=d.float64)),
                DstT=x.dtype,
            )
        )
    )


def _sum_square(ctx: ConversionContext, x: Tensor, axes: Tensor, keep: bool) -> Tensor:
    return ops.sum(ops.square(x), axes, keep_dims=keep)


def _log_sum(ctx: ConversionContext, x: Tensor, axes: Tensor, keep: bool) -> Tensor:
    return ops.log(ops.sum(x, axes, keep_dims=keep))


def _log_sum_exp(ctx: ConversionContext, x: Tensor, axes: Tensor, keep: bool) -> Tensor:
    # max + log(sum(exp(x - max))): no overflow for large x.
    top = ops.max(x, axes, keep_dims=True)
    finite = ops.select_v2(ops.is_finite(top), top, ops.zeros_like(top))
    summed = ops.sum(ops.exp(ops.sub(x, finite)), axes, keep_dims=True)
    out = ops.add_v2(ops.log(summed), finite)
    return out if keep else ops.sum(out, axes, keep_dims=False)


_REDUCERS: dict[str, tuple[Reducer, int]] = {
    "ReduceSum": (_plain(ops.sum), 13),
    "ReduceMean": (_plain(ops.mean), 18),
    "ReduceMax": (_logical(ops.max, ops.any), 18),
    "ReduceMin": (_logical(ops.min, ops.all), 18),
    "ReduceProd": (_plain(ops.prod), 18),
    "ReduceL1": (_l1, 18),
    "ReduceL2": (_l2, 18),
    "ReduceSumSquare": (_sum_square, 18),
    "ReduceLogSum": (_log_sum, 18),
    "ReduceLogSumExp": (_log_sum_exp, 18),
}


_PLAIN = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})
"""The reductions that are the identity over an empty set of axes."""


def _reduce(node: OnnxNode, ctx: ConversionContext, fn: Reducer, axes_input: bool) -> Result:
    x = ctx.input(0)
    rank = rank_of(node, x)
    keep = bool(int(node.attr("keepdims", 1)))
    if axes_input and ctx.has_input(1) and ctx.static_input(1) is None:
        given = ctx.input(1)
        length = given.shape.as_list()[0] if given.shape.rank == 1 else None
        if length != 0:
            wrapped = ops.floor_mod(
                ops.cast(given, DstT=d.int64), ctx.const(np.int64(max(rank, 1)))
            )
            if length is None and not int(node.attr("noop_with_empty_axes", 0)):
                # Axes empty at run time mean every axis: append them all when size is 0.
                empty = ops.cast(
                    ops.equal(ops.size(given, out_type=d.int64), ctx.const(np.int64(0))),
                    DstT=d.int64,
                )
                count = ops.reshape(ops.mul(empty, ctx.const(np.int64(rank))), ctx.int64s([1]))
                every = ops.slice(ctx.int64s(list(range(rank))), ctx.int64s([0]), count)
                wrapped = ops.concat_v2([wrapped, every], ctx.const(np.int32(0)))
            return [fn(ctx, x, wrapped, keep)]
    if axes_input:
        axes = ints(ctx.static_input(1)) if ctx.static_input(1) is not None else None
    else:
        raw = node.attr("axes")
        axes = None if raw is None else ints(raw)
    if not axes:
        if axes_input and int(node.attr("noop_with_empty_axes", 0)):
            if node.op_type in _PLAIN:
                return [ops.identity(x)]
            # A reduction over no axes: the composite's other steps still apply
            # (ReduceSumSquare squares, ReduceLogSum takes the log, ReduceL1 the abs...).
            return [fn(ctx, x, ctx.int32s([]), keep)]
        axes = list(range(rank))
    normalized = sorted({axis_of(node, a, max(rank, 1)) for a in axes}) if rank else []
    return [fn(ctx, x, ctx.int32s(normalized), keep)]


def _register(op_type: str, fn: Reducer, input_from: int) -> None:
    @converter(op_type, 1, input_from - 1, attrs=("axes", "keepdims"))
    def legacy(node: OnnxNode, ctx: ConversionContext) -> Result:
        return _reduce(node, ctx, fn, axes_input=False)

    if schema_versions(op_type, input_from):

        @converter(op_type, input_from, attrs=("keepdims", "noop_with_empty_axes"))
        def current(node: OnnxNode, ctx: ConversionContext) -> Result:
            return _reduce(node, ctx, fn, axes_input=True)


for _op, (_fn, _since) in _REDUCERS.items():
    _register(_op, _fn, _since)


def _arg(node: OnnxNode, ctx: ConversionContext, fn: Callable[..., Tensor]) -> Result:
    x = ctx.input(0)
    rank = rank_of(node, x)
    axis = axis_of(node, int(node.attr("axis", 0)), rank)
    if int(node.attr("select_last_index", 0)):
        flipped = ops.reverse_v2(x, ctx.int32s([axis]))
        index = fn(flipped, ctx.const(np.int32(axis)), output_type=d.int64)
        size = ctx.const(np.int64(x.shape.as_list()[axis] or 0))
        if x.shape.as_list()[axis] is None:
            raise node.fail("select_last_index needs the axis' size at import time")
        index = ops.sub(ops.sub(size, ctx.const(np.int64(1))), index)
    else:
        index = fn(x, ctx.const(np.int32(axis)), output_type=d.int64)
    if int(node.attr("keepdims", 1)):
        index = ops.expand_dims(index, ctx.const(np.int32(axis)))
    return [index]


converter("ArgMax", 1, attrs=("axis", "keepdims", "select_last_index"))(
    functools.partial(_arg, fn=ops.arg_max)
)


converter("ArgMin", 1, attrs=("axis", "keepdims", "select_last_index"))(
    functools.partial(_arg, fn=ops.arg_min)
)


__all__: list[str] = []
