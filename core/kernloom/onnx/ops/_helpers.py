"""Small subgraphs the converters share: shapes, flattening, axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.builder import apply_op
from kernloom.graph.graph import Node
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode

__all__ = [
    "axis_of",
    "flatten2d",
    "rank_of",
    "shape_of",
    "static_dims",
]


def static_dims(x: Tensor) -> list[int] | None:
    """x's dimensions when all are known at import time."""
    if x.shape.rank is None or not x.shape.is_fully_defined():
        return None
    return [int(v) for v in x.shape.as_tuple()]


def rank_of(node: OnnxNode, x: Tensor, what: str = "input") -> int:
    """x's rank, which the op is built for at import: unknown, an error that says how the
    model can give it (every converter that needs a rank asks here)."""
    rank = x.shape.rank
    if rank is None:
        raise node.fail(
            f"the rank of the {what} must be known at import time: declare the shapes of "
            "the model's graph inputs (their rank at least; a dimension may be symbolic), "
            "from which kernloom infers every value's; where a value's rank still cannot "
            "be inferred (a Reshape to a shape computed at run time), give it a "
            "value_info with its rank (onnx.shape_inference.infer_shapes(model) adds "
            "those where onnx can infer them)"
        )
    return rank


def axis_of(node: OnnxNode, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise node.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def shape_of(ctx: ConversionContext, x: Tensor) -> Tensor:
    """x's shape as an int64 vector: a constant when known, else a Shape node."""
    dims = static_dims(x)
    if dims is not None:
        return ctx.int64s(dims)
    return ops.shape(x, out_type=d.int64)


def flatten2d(ctx: ConversionContext, node: OnnxNode, x: Tensor, axis: int) -> Tensor:
    """x as a matrix [prod(shape[:axis]), prod(shape[axis:])] (ONNX's Flatten)."""
    rank = rank_of(node, x)
    axis = axis if axis >= 0 else axis + rank
    if not 0 <= axis <= rank:
        raise node.fail(f"axis {axis} is out of range for rank {rank}")
    dims = static_dims(x)
    if dims is not None:
        outer = int(np.prod(dims[:axis], dtype=np.int64))
        inner = int(np.prod(dims[axis:], dtype=np.int64))
        return ops.reshape(x, ctx.int64s([outer, inner]))
    shape = ops.shape(x, out_type=d.int64)
    zero = ctx.int64s([0])
    cut = ctx.int64s([axis])
    end = ctx.int64s([rank])
    one = ctx.int64s([1])
    outer_dims = ops.strided_slice(shape, zero, cut, one)
    inner_dims = ops.strided_slice(shape, cut, end, one)
    outer = ops.prod(outer_dims, ctx.int32s([0]), keep_dims=True)
    inner = ops.prod(inner_dims, ctx.int32s([0]), keep_dims=True)
    return ops.reshape(x, ops.concat_v2([outer, inner], ctx.const(np.int32(0))))


def ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def same_dtype(ctx: ConversionContext, x: Tensor, y: Tensor) -> Tensor:
    """y cast to x's dtype when they differ (ONNX ops that allow mixed types)."""
    return y if y.dtype == x.dtype else ops.cast(y, DstT=x.dtype)


def pairs(pads: Sequence[int]) -> list[list[int]]:
    """ONNX pads [b1, b2, ..., e1, e2, ...] as [[b1, e1], [b2, e2], ...]."""
    half = len(pads) // 2
    return [[int(pads[i]), int(pads[i + half])] for i in range(half)]


def run_time_check(holds: Tensor, data: list[Tensor], message: str, name: str) -> Node:
    """An Assert that fails with ``message`` (naming the ONNX node: the caller's words)
    when ``holds`` is false at run time: for what the import could not decide. The caller
    makes what depends on it wait for it (``control_dependencies([check])``)."""
    check = apply_op("Assert", [holds, data], {"_message": message}, name=name)
    assert isinstance(check, Node)  # an Assert has no outputs: its node
    return check
