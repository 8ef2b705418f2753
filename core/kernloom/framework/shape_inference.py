"""Shape inference: what a shape function sees while a graph is built.

A shape function reads input shapes (partially known), attrs and, where an input is a
constant known at build time (``Reshape``'s shape, ``Sum``'s axis), its value; it sets
one shape per output. A contradiction is reported through ``ctx.fail`` so that the
error names the node, the op and the shapes involved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, final

import numpy as np

from kernloom.dtypes import DType
from kernloom.errors import InvalidArgumentError
from kernloom.framework.op_def import OpDef
from kernloom.shapes import Dim, TensorShape, as_shape

__all__ = [
    "InferenceContext",
    "broadcast_binary_shape",
    "broadcast_shapes",
    "infer_shapes",
    "normalize_axis",
    "reduction_shape",
    "unchanged_shape",
]


@final
class InferenceContext:
    """The inputs of one node, as far as they are known before it runs."""

    def __init__(
        self,
        op_def: OpDef,
        node: str,
        attrs: Mapping[str, Any],
        input_shapes: Sequence[TensorShape],
        input_dtypes: Sequence[DType],
        input_values: Sequence[np.ndarray[Any, Any] | None] | None = None,
        input_shape_values: Sequence[TensorShape | None] | None = None,
    ) -> None:
        self.op_def = op_def
        self.node = node
        self.attrs = attrs
        self._shapes = [as_shape(s) for s in input_shapes]
        self._dtypes = list(input_dtypes)
        self._values = (
            list(input_values) if input_values is not None else [None] * len(self._shapes)
        )
        self._shape_values = (
            list(input_shape_values)
            if input_shape_values is not None
            else [None] * len(self._shapes)
        )
        self._outputs: list[TensorShape | None] = [None] * len(op_def.output_dtypes(attrs))

    @property
    def num_inputs(self) -> int:
        return len(self._shapes)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def input_shape(self, index: int) -> TensorShape:
        return self._shapes[index]

    def input_dtype(self, index: int) -> DType:
        return self._dtypes[index]

    def input_value(self, index: int) -> np.ndarray[Any, Any] | None:
        """The input's value when it is a constant known at build time, else None."""
        return self._values[index]

    def input_shape_value(self, index: int) -> TensorShape | None:
        """The input's value as a partly known shape, where it is a ``Shape`` of a tensor
        whose shape is partly known (TensorFlow's ``MakeShapeFromShapeTensor``): a
        ``reshape(x, shape(h))`` has h's shape, ``(?, 8, 8, 4)``, not ``(?, ?, ?, ?)``.
        None where nothing is known of it that way."""
        return self._shape_values[index]

    def attr(self, name: str) -> Any:
        return self.attrs[name]

    def set_output(self, index: int, shape: object) -> None:
        self._outputs[index] = as_shape(shape)

    def fail(self, message: str) -> InvalidArgumentError:
        """An error naming this node, its op and its input shapes; ``raise ctx.fail(...)``."""
        shapes = ", ".join(str(s) for s in self._shapes)
        return InvalidArgumentError(
            f"node {self.node!r} (op {self.op_def.name}): {message} (input shapes: {shapes})"
        )

    def merge(self, a: TensorShape, b: TensorShape, what: str) -> TensorShape:
        try:
            return a.merge_with(b)
        except InvalidArgumentError:
            raise self.fail(f"{what}: {a} and {b} are not compatible") from None

    def outputs(self) -> list[TensorShape]:
        return [s if s is not None else TensorShape(None) for s in self._outputs]


def infer_shapes(ctx: InferenceContext) -> list[TensorShape]:
    """Run the op's shape function (unknown shapes when it has none)."""
    if ctx.op_def.shape_fn is not None:
        try:
            ctx.op_def.shape_fn(ctx)
        except InvalidArgumentError:
            raise
        except Exception as exc:  # a shape function's own bug must still name the node
            raise ctx.fail(f"shape inference failed: {type(exc).__name__}: {exc}") from exc
    return ctx.outputs()


# -- common shape functions ------------------------------------------------------------------


def unchanged_shape(ctx: InferenceContext) -> None:
    """Output 0 has input 0's shape (elementwise unary ops)."""
    ctx.set_output(0, ctx.input_shape(0))


def broadcast_shapes(shapes: Sequence[TensorShape], ctx: InferenceContext) -> TensorShape:
    """numpy broadcasting over partially known shapes; an unknown dim that meets a known
    one other than 1 becomes that one (as TensorFlow's BroadcastBinaryOpShapeFn does)."""
    if any(s.rank is None for s in shapes):
        return TensorShape(None)
    rank = max((s.rank or 0) for s in shapes)
    dims: list[Dim] = []
    for position in range(rank):
        column = [
            s[s.rank - rank + position] if (s.rank or 0) - rank + position >= 0 else 1
            for s in shapes
            if s.rank is not None
        ]
        known = {d for d in column if d is not None and d != 1}
        if len(known) > 1:
            raise ctx.fail(
                f"shapes {', '.join(str(s) for s in shapes)} cannot be broadcast together "
                f"(dimension {position - rank} is {' vs '.join(str(d) for d in sorted(known))})"
            )
        if known:
            dims.append(known.pop())
        elif any(d is None for d in column):
            dims.append(None)
        else:
            dims.append(1)
    return TensorShape(dims)


def broadcast_binary_shape(ctx: InferenceContext) -> None:
    ctx.set_output(0, broadcast_shapes([ctx.input_shape(i) for i in range(ctx.num_inputs)], ctx))


def normalize_axis(axis: int, rank: int, ctx: InferenceContext) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def reduction_shape(ctx: InferenceContext) -> None:
    """Input 0 reduced over the axes in input 1 (a constant when known), keep_dims attr."""
    shape = ctx.input_shape(0)
    keep = bool(ctx.attr("keep_dims"))
    axes_value = ctx.input_value(1)
    if shape.rank is None:
        ctx.set_output(0, None)
        return
    if axes_value is None:
        # Axes unknown until run time: the rank is known only when dimensions are kept.
        ctx.set_output(0, TensorShape.unknown(shape.rank) if keep else None)
        return
    axes = {normalize_axis(int(a), shape.rank, ctx) for a in np.asarray(axes_value).reshape(-1)}
    dims = [1 if i in axes else d for i, d in enumerate(shape.dims or ()) if keep or i not in axes]
    ctx.set_output(0, dims)
