"""Shape and layout ONNX ops: Reshape, Flatten, Concat, Transpose, (Un)Squeeze, Shape,
Constant, ConstantOfShape, Gather, Slice, Split, Expand, Tile, Pad...

Where an opset turned an attribute into an input (Reshape-5, Squeeze-13, Slice-10,
Split-13, Pad-11...), the input must be known at import time unless the kernloom op
takes it as a tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.builder import control_dependencies
from kernloom.graph.control_flow import cond
from kernloom.graph.graph import constant_value
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx._small_types import coded_array
from kernloom.onnx._values import OnnxCoded
from kernloom.onnx.ops._helpers import (
    axis_of,
    flatten2d,
    ints,
    rank_of,
    run_time_check,
    shape_of,
    static_dims,
)

Result = Sequence[Tensor | None]


def _known(ctx: ConversionContext, node: OnnxNode, index: int, value: np.ndarray[Any, Any]) -> None:
    """Record output ``index``'s value as known at import time."""
    if index < len(node.outputs) and node.outputs[index]:
        ctx.static[node.outputs[index]] = value


@converter(
    "Constant",
    1,
    attrs=(
        "value",
        "value_float",
        "value_floats",
        "value_int",
        "value_ints",
        "sparse_value",
        "value_string",
        "value_strings",
    ),
)
def _constant(node: OnnxNode, ctx: ConversionContext) -> Sequence[Tensor | OnnxCoded | None]:
    for name, dtype in (
        ("value", None),
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if name in node.attrs:
            value = np.asarray(node.attrs[name], dtype=dtype)
            coded = coded_array(value)
            if coded is not None:  # a small type kernloom has no dtype for: its codes
                return [OnnxCoded(ctx.const(coded[0]), coded[1])]
            _known(ctx, node, 0, value)
            return [ctx.const(value, d.as_dtype(value.dtype))]
    raise node.fail(f"attribute(s) {sorted(node.attrs)} are not supported (strings, sparse)")


@converter("ConstantOfShape", 9, attrs=("value",))
def _constant_of_shape(node: OnnxNode, ctx: ConversionContext) -> Sequence[Tensor | OnnxCoded]:
    value = node.attr("value")
    scalar = np.asarray(value).reshape(-1)[0] if value is not None else np.float32(0)
    coded = coded_array(np.asarray(scalar))
    if coded is not None:  # a small type (float8, int4...): filled with its code
        codes, elem_type = coded
        return [OnnxCoded(_filled(node, ctx, codes.reshape(()), known=False), elem_type)]
    return [_filled(node, ctx, scalar)]


def _filled(node: OnnxNode, ctx: ConversionContext, scalar: Any, known: bool = True) -> Tensor:
    """A tensor of input 0's shape filled with ``scalar``: a constant when the shape is
    known at import (recorded as the output's value with ``known``), else a Fill."""
    shape = ctx.static_input(0)
    if shape is not None:
        # A shape known at import makes the result a constant, as an initializer would be
        # (the light models build their weights this way); later converters see its value.
        filled = np.full(ints(shape), scalar, dtype=np.asarray(scalar).dtype)
        if known:
            _known(ctx, node, 0, filled)
        return ctx.const(filled, d.as_dtype(filled.dtype))
    fill_value = ctx.const(np.asarray(scalar), d.as_dtype(np.asarray(scalar).dtype))
    return ops.fill(ctx.input(0), fill_value)


@converter("Shape", 1, attrs=("start", "end"))
def _shape(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    rank = x.shape.rank
    start, end = int(node.attr("start", 0)), node.attr("end")
    dims = static_dims(x)
    if dims is not None:
        chosen = np.asarray(dims[slice(start, None if end is None else int(end))], dtype=np.int64)
        _known(ctx, node, 0, chosen)
        return [ctx.const(chosen)]
    full = ops.shape(x, out_type=d.int64)
    if start == 0 and end is None:
        return [full]
    if rank is None:
        raise node.fail("start/end need the input's rank at import time")
    stop = rank if end is None else int(end)
    # As a Python slice: a negative bound counts from the end, then both are clamped.
    begin, stop = (
        max(min(start + rank if start < 0 else start, rank), 0),
        max(min(stop + rank if stop < 0 else stop, rank), 0),
    )
    return [ops.strided_slice(full, ctx.int64s([begin]), ctx.int64s([stop]), ctx.int64s([1]))]


@converter("Size", 1)
def _size(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    if x.shape.is_fully_defined():
        # Known at import, as Shape's is: an If on it takes its branch at import.
        count = np.asarray(x.shape.num_elements(), dtype=np.int64)
        _known(ctx, node, 0, count)
        return [ctx.const(count)]
    return [ops.size(x, out_type=d.int64)]


@converter("Reshape", 5, attrs=("allowzero",))
def _reshape(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    allowzero = bool(int(node.attr("allowzero", 0)))
    known = ctx.static_input(1)
    if known is None:
        return [ops.reshape(x, _runtime_shape(ctx, node, x, ctx.input(1), allowzero))]
    shape = ints(known)
    if not allowzero and 0 in shape:
        dims = x.shape.as_list() if x.shape.rank is not None else None
        if dims is None or any(dims[i] is None for i, v in enumerate(shape) if v == 0):
            return [ops.reshape(x, _runtime_shape(ctx, node, x, ctx.const(known), allowzero))]
        shape = [int(dims[i]) if v == 0 else v for i, v in enumerate(shape)]  # type: ignore[arg-type]
    return [ops.reshape(x, ctx.int64s(shape))]


def _runtime_shape(
    ctx: ConversionContext, node: OnnxNode, x: Tensor, shape: Tensor, allowzero: bool
) -> Tensor:
    """A shape computed at run time, where a 0 copies x's dimension unless allowzero."""
    shape = ops.cast(shape, DstT=d.int64) if shape.dtype != d.int64 else shape
    if allowzero:
        return shape
    # x's dimensions, padded with zeros to the shape's length, where the shape says 0.
    padded = ops.concat_v2([shape_of(ctx, x), ops.zeros_like(shape)], ctx.const(np.int32(0)))
    length = ops.reshape(ops.size(shape, out_type=d.int64), ctx.int64s([1]))
    copied = ops.slice(padded, ctx.int64s([0]), length)
    is_zero = ops.equal(shape, ctx.const(np.int64(0)))
    return ops.select_v2(is_zero, copied, shape)


@converter("Flatten", 1, attrs=("axis",))
def _flatten(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [flatten2d(ctx, node, ctx.input(0), int(node.attr("axis", 1)))]


@converter("Concat", 4, attrs=("axis",))
def _concat(node: OnnxNode, ctx: ConversionContext) -> Result:
    values = ctx.inputs()
    rank = rank_of(node, values[0], "first input")
    axis = axis_of(node, int(node.attr("axis")), max(rank, 1))
    statics = [ctx.static_input(i) for i in range(len(node.inputs))]
    if all(s is not None for s in statics):
        _known(ctx, node, 0, np.concatenate([s for s in statics if s is not None], axis=axis))
    if len(values) == 1:
        return [ops.identity(values[0])]
    return [ops.concat_v2(values, ctx.const(np.int32(axis)))]


@converter("Transpose", 1, attrs=("perm",))
def _transpose(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    perm = node.attr("perm")
    if perm is None:
        perm = list(reversed(range(rank_of(node, x))))
    return [ops.transpose(x, ctx.int32s(ints(perm)))]


def _axes(node: OnnxNode, ctx: ConversionContext, as_input: bool) -> list[int] | None:
    if as_input:
        if not ctx.has_input(1):
            return None
        return ints(ctx.required_static(1, "axes"))
    axes = node.attr("axes")
    return None if axes is None else ints(axes)


def _axis_mask(ctx: ConversionContext, node: OnnxNode, rank: int) -> Tensor:
    """An int64 [rank] vector: 1 at the axes of input 1 (a run-time tensor), else 0."""
    axes = ops.cast(ctx.input(1), DstT=d.int64)
    wrapped = ops.floor_mod(axes, ctx.const(np.int64(rank)))
    ones = ops.ones_like(wrapped)
    return ops.scatter_nd(
        ops.expand_dims(wrapped, ctx.const(np.int32(1))), ones, ctx.int64s([rank])
    )


def _runtime_squeeze(node: OnnxNode, ctx: ConversionContext, x: Tensor) -> Tensor:
    rank = rank_of(node, x)
    keep = ops.equal(_axis_mask(ctx, node, rank), ctx.const(np.int64(0)))
    kept = ops.gather_nd(shape_of(ctx, x), ops.where(keep))
    return ops.reshape(x, kept)


def _runtime_unsqueeze(node: OnnxNode, ctx: ConversionContext, x: Tensor) -> Tensor:
    count = ctx.input(1).shape.as_list()
    if len(count) != 1 or count[0] is None:
        raise node.fail("the axes input needs a length known at import time")
    out_rank = rank_of(node, x) + int(count[0])
    mask = _axis_mask(ctx, node, out_rank)
    # Old dimension i goes to the i-th position that is not a new axis.
    source = ops.maximum(
        ops.sub(
            ops.cumsum(ops.sub(ctx.const(np.int64(1)), mask), ctx.const(np.int32(0))),
            ctx.const(np.int64(1)),
        ),
        ctx.const(np.int64(0)),
    )
    xs = ops.concat_v2([shape_of(ctx, x), ctx.int64s([1])], ctx.const(np.int32(0)))
    dims = ops.select_v2(
        ops.equal(mask, ctx.const(np.int64(1))),
        ops.ones_like(mask),
        ops.gather_v2(xs, source, ctx.const(np.int32(0))),
    )
    return ops.reshape(x, dims)


def _squeeze(node: OnnxNode, ctx: ConversionContext, as_input: bool) -> Result:
    x = ctx.input(0)
    if as_input and ctx.has_input(1) and ctx.static_input(1) is None:
        return [_runtime_squeeze(node, ctx, x)]
    axes = _axes(node, ctx, as_input)
    if axes is None:
        # ONNX drops every dimension that is 1 when the graph runs: with a dimension
        # unknown at import, so is the result's rank (onnx's own shape inference gives up
        # there too). A batch of 1 at run time is squeezed like any other.
        return [ops.squeeze(x)]
    rank = rank_of(node, x)
    return [ops.squeeze(x, squeeze_dims=sorted(axis_of(node, a, rank) for a in axes))]


converter("Squeeze", 1, 11, attrs=("axes",))(functools.partial(_squeeze, as_input=False))


converter("Squeeze", 13)(functools.partial(_squeeze, as_input=True))


def _unsqueeze(node: OnnxNode, ctx: ConversionContext, as_input: bool) -> Result:
    x = ctx.input(0)
    if as_input and ctx.has_input(1) and ctx.static_input(1) is None:
        return [_runtime_unsqueeze(node, ctx, x)]
    axes = _axes(node, ctx, as_input)
    if axes is None:
        raise node.fail("axes are required")
    out_rank = rank_of(node, x) + len(axes)
    normalized = sorted(axis_of(node, a, out_rank) for a in axes)
    dims: list[int | None] = list(x.shape.as_list())
    for a in normalized:
        dims.insert(a, 1)
    full = [int(v) for v in dims if v is not None]
    if len(full) == len(dims):
        y = ops.reshape(x, ctx.int64s(full))
    else:
        y = x
        for a in normalized:
            y = ops.expand_dims(y, ctx.const(np.int32(a)))
    known = ctx.static_input(0)
    if known is not None:
        # (from the value's own shape: x's static shape may know less than its value)
        _known(ctx, node, 0, np.expand_dims(known, tuple(normalized)))
    return [y]


converter("Unsqueeze", 1, 11, attrs=("axes",))(functools.partial(_unsqueeze, as_input=False))


converter("Unsqueeze", 13)(functools.partial(_unsqueeze, as_input=True))


@converter("Gather", 1, attrs=("axis",))
def _gather(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, indices = ctx.input(0), ctx.input(1)
    rank = rank_of(node, x)
    axis = axis_of(node, int(node.attr("axis", 0)), rank)
    # ONNX allows negative indices (counted from the end); TF does not: wrap them.
    if indices.dtype.is_integer and not indices.dtype.is_unsigned:
        size = ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), ctx.const(np.int32(0)))
        size = ops.cast(size, DstT=indices.dtype) if indices.dtype != d.int64 else size
        negative = ops.less(indices, ctx.const_like(0, indices))
        indices = ops.select_v2(negative, ops.add_v2(indices, size), indices)
    return [ops.gather_v2(x, indices, ctx.const(np.int32(axis)))]


@converter("Expand", 8)
def _expand(node: OnnxNode, ctx: ConversionContext) -> Result:
    # ONNX's Expand broadcasts both ways (a 1 in the shape keeps x's dimension).
    x = ctx.input(0)
    shape = ctx.input(1)
    if x.dtype.is_bool:
        return [ops.logical_and(x, ops.fill(shape, ctx.const(np.bool_(True))))]
    return [ops.mul(x, ops.fill(shape, ctx.const_like(1, x)))]


@converter("Tile", 6)
def _tile(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [ops.tile(ctx.input(0), ctx.input(1))]


@converter("Slice", 10)
def _slice(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    if any(ctx.has_input(i) and ctx.static_input(i) is None for i in range(1, 5)):
        return [_runtime_slice(node, ctx, x, _fed_bounds(ctx))]
    starts = ints(ctx.required_static(1, "starts"))
    ends = ints(ctx.required_static(2, "ends"))
    rank = rank_of(node, x)
    axes = ints(ctx.required_static(3, "axes")) if ctx.has_input(3) else list(range(len(starts)))
    steps = ints(ctx.required_static(4, "steps")) if ctx.has_input(4) else [1] * len(starts)
    if _start_may_pass_the_front(x, rank, starts, axes, steps):
        bounds = [ctx.int64s(v) for v in (starts, ends, axes, steps)]
        return [_runtime_slice(node, ctx, x, _SliceBounds(*bounds))]
    return [_strided(ctx, node, x, rank, starts, ends, axes, steps)]


@converter("Slice", 1, 1, attrs=("starts", "ends", "axes"))
def _slice_1(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    starts, ends = ints(node.attr("starts")), ints(node.attr("ends"))
    rank = rank_of(node, x)
    axes = ints(node.attr("axes", list(range(len(starts)))))
    return [_strided(ctx, node, x, rank, starts, ends, axes, [1] * len(starts))]


def _start_may_pass_the_front(
    x: Tensor, rank: int, starts: list[int], axes: list[int], steps: list[int]
) -> bool:
    """Whether a start known at import may lie below -dim on an axis stepped backwards
    whose size is known only at run time. ONNX clamps such a start to 0 (the slice takes
    x[0]), where StridedSlice clamps it to -1 (before the front: nothing); with the size
    known, ``_strided`` clamps it, and a start of -1 is in range for any size but 0 (where
    the result is empty either way)."""
    dims = x.shape.as_list()
    return any(
        step < 0 and start < -1 and dims[axis % rank] is None
        for start, axis, step in zip(starts, axes, steps, strict=True)
        if -rank <= axis < rank
    )


class _SliceBounds(NamedTuple):
    """A Slice's starts, ends, axes and steps as tensors; axes and steps may be absent."""

    starts: Tensor
    ends: Tensor
    axes: Tensor | None
    steps: Tensor | None


def _fed_bounds(ctx: ConversionContext) -> _SliceBounds:
    """Inputs 1 to 4 of a Slice, as int64 tensors (some computed at run time)."""

    def vec(index: int) -> Tensor:
        return ops.cast(ctx.input(index), DstT=d.int64)

    return _SliceBounds(
        vec(1),
        vec(2),
        vec(3) if ctx.has_input(3) else None,
        vec(4) if ctx.has_input(4) else None,
    )


def _runtime_slice(
    node: OnnxNode, ctx: ConversionContext, x: Tensor, bounds: _SliceBounds
) -> Tensor:
    """Slice with starts/ends/axes/steps computed at run time (or with a start whose
    clamping needs a size known only then): ONNX's clamping done in the graph, then one
    StridedSlice over every dimension (no masks needed)."""
    rank = rank_of(node, x)
    starts, ends = bounds.starts, bounds.ends
    count = starts.shape.as_list()[0] if starts.shape.rank == 1 else None
    if count is None:
        raise node.fail("starts needs a length known at import time")
    axes = bounds.axes if bounds.axes is not None else ctx.int64s(list(range(count)))
    steps = bounds.steps if bounds.steps is not None else ctx.int64s([1] * count)
    where = ops.expand_dims(ops.floor_mod(axes, ctx.const(np.int64(rank))), ctx.const(np.int32(1)))
    full = ctx.int64s([rank])
    big = 2**62

    def spread(values: Tensor, default: int) -> Tensor:
        shifted = ops.sub(values, ctx.const(np.int64(default)))
        return ops.add_v2(ops.scatter_nd(where, shifted, full), ctx.const(np.int64(default)))

    begin, end = spread(starts, 0), spread(ends, big)
    step = _static_steps(node, ctx, count, rank)
    if step is None:
        step = spread(steps, 1)
    dims = shape_of(ctx, x)
    zero, one = ctx.const(np.int64(0)), ctx.const(np.int64(1))

    def wrap(v: Tensor) -> Tensor:
        return ops.select_v2(ops.less(v, zero), ops.add_v2(v, dims), v)

    def clamp(v: Tensor, low: Tensor, high: Tensor) -> Tensor:
        return ops.minimum(ops.maximum(v, low), high)

    forward = ops.greater(step, zero)
    minus_one = ops.neg(ops.ones_like(dims))
    last = ops.sub(dims, one)
    begin = ops.select_v2(forward, clamp(wrap(begin), zero, dims), clamp(wrap(begin), zero, last))
    end = ops.select_v2(forward, clamp(wrap(end), zero, dims), clamp(wrap(end), minus_one, last))
    # StridedSlice reads a negative end as counted from the back: -dim - 1 means "past 0".
    end = ops.select_v2(
        ops.logical_and(ops.logical_not(forward), ops.equal(end, minus_one)),
        ops.sub(ops.neg(dims), one),
        end,
    )
    return ops.strided_slice(x, begin, end, step)


def _static_steps(node: OnnxNode, ctx: ConversionContext, count: int, rank: int) -> Tensor | None:
    """The per-dimension strides as a constant where axes and steps are known at import
    (only starts or ends come at run time): StridedSlice's shape inference needs constant
    strides to keep the input's rank, which the nodes after the slice may need (the
    expanded RotaryEmbedding's Unsqueeze of a slice whose end is a head size). None
    where they are not known."""
    axes = ctx.static_input(3) if ctx.has_input(3) else np.arange(count)
    steps = ctx.static_input(4) if ctx.has_input(4) else np.ones(count, np.int64)
    if axes is None or steps is None:
        return None
    strides = [1] * rank
    for axis, step in zip(ints(axes), ints(steps), strict=True):
        if step == 0:
            raise node.fail("a slice step of 0 is invalid")
        strides[axis_of(node, axis, rank)] = step
    return ctx.int64s(strides)


def _strided(
    ctx: ConversionContext,
    node: OnnxNode,
    x: Tensor,
    rank: int,
    starts: list[int],
    ends: list[int],
    axes: list[int],
    steps: list[int],
) -> Tensor:
    """Slice with every bound known at import: one StridedSlice of constants. Where
    the two clamp differently -- a start below -dim on an axis stepped backwards: ONNX
    starts at 0, StridedSlice before it -- the start is clamped here (the caller takes
    the run-time path where that axis's size is unknown)."""
    begin, end, stride = [0] * rank, [0] * rank, [1] * rank
    begin_mask = end_mask = (1 << rank) - 1
    big = 2**62
    dims = x.shape.as_list()
    for start, stop, axis, step in zip(starts, ends, axes, steps, strict=True):
        a = axis_of(node, axis, rank)
        if step == 0:
            raise node.fail("a slice step of 0 is invalid")
        size = dims[a]
        if step < 0 and size is not None and start < -size:
            start = -size  # x[0], the first element ONNX takes stepping back from there
        # Clamp ONNX's huge sentinels into what int64 StridedSlice accepts.
        begin[a], end[a], stride[a] = max(min(start, big), -big), max(min(stop, big), -big), step
        begin_mask &= ~(1 << a)
        end_mask &= ~(1 << a)
        if step < 0 and stop <= -big:
            end_mask |= 1 << a
    return ops.strided_slice(
        x,
        ctx.int64s(begin),
        ctx.int64s(end),
        ctx.int64s(stride),
        begin_mask=begin_mask,
        end_mask=end_mask,
    )


def _split(node: OnnxNode, ctx: ConversionContext, sizes: list[int] | None) -> Result:
    x = ctx.input(0)
    rank = rank_of(node, x)
    axis = axis_of(node, int(node.attr("axis", 0)), rank)
    count = len(node.outputs)
    if sizes is None:
        dims = x.shape.as_list()
        total = dims[axis]
        num = node.attr("num_outputs")
        if num is not None and total is not None and total % int(num) != 0:
            chunk = -(-int(total) // int(num))
            sizes = [chunk] * (int(num) - 1) + [int(total) - chunk * (int(num) - 1)]
        elif num is not None and total is None:
            # The size is known at run time only: ceil(size / num) per output, the last
            # one what remains (a size that num does not divide is allowed from 18 on).
            return _split_runtime(ctx, x, axis, int(num))
        else:
            parts = ops.split(ctx.const(np.int32(axis)), x, num_split=count)
            return list(parts) if count > 1 else [parts]
    parts = ops.split_v(x, ctx.int64s(sizes), ctx.const(np.int32(axis)), num_split=len(sizes))
    return list(parts) if len(sizes) > 1 else [parts]


def _split_runtime(ctx: ConversionContext, x: Tensor, axis: int, num: int) -> Result:
    size = ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), ctx.const(np.int32(0)))
    count = ctx.const(np.int64(num))
    chunk = ops.floor_div(ops.add_v2(size, ctx.const(np.int64(num - 1))), count)
    last = ops.sub(size, ops.mul(chunk, ctx.const(np.int64(num - 1))))
    sizes = ops.concat_v2(
        [ops.fill(ctx.int64s([num - 1]), chunk), ops.reshape(last, ctx.int64s([1]))],
        ctx.const(np.int32(0)),
    )
    parts = ops.split_v(x, sizes, ctx.const(np.int32(axis)), num_split=num)
    return list(parts) if num > 1 else [parts]


@converter("Split", 2, 11, attrs=("axis", "split"))
def _split_2(node: OnnxNode, ctx: ConversionContext) -> Result:
    split = node.attr("split")
    return _split(node, ctx, None if split is None else ints(split))


@converter("Split", 13, attrs=("axis", "num_outputs"))
def _split_13(node: OnnxNode, ctx: ConversionContext) -> Result:
    if ctx.has_input(1) and ctx.static_input(1) is None:
        x = ctx.input(0)
        axis = axis_of(node, int(node.attr("axis", 0)), rank_of(node, x))
        count = len(node.outputs)
        sizes_t = ops.cast(ctx.input(1), DstT=d.int64)
        parts = ops.split_v(x, sizes_t, ctx.const(np.int32(axis)), num_split=count)
        return list(parts) if count > 1 else [parts]
    sizes = ints(ctx.required_static(1, "split")) if ctx.has_input(1) else None
    return _split(node, ctx, sizes)


def _pad(node: OnnxNode, ctx: ConversionContext, pads: list[int], value: Tensor | None) -> Result:
    x = ctx.input(0)
    rank = rank_of(node, x)
    if len(pads) != 2 * rank:
        raise node.fail(f"pads has {len(pads)} values; {2 * rank} expected")
    if any(p < 0 for p in pads):
        # Negative pads remove elements: cropped first, then padded (as onnxruntime), so
        # that reflect, edge and wrap read the cropped tensor's borders.
        crop = [max(-p, 0) for p in pads]
        end_mask = sum(1 << i for i in range(rank) if crop[rank + i] == 0)
        x = ops.strided_slice(
            x,
            ctx.int64s(crop[:rank]),
            ctx.int64s([-c for c in crop[rank:]]),
            ctx.int64s([1] * rank),
            end_mask=end_mask,
        )
        pads = [max(p, 0) for p in pads]
    paddings = ctx.const(np.asarray([[pads[i], pads[i + rank]] for i in range(rank)], np.int64))
    return [_pad_tensor(node, ctx, x, paddings, value)]


@converter("Pad", 2, 2, attrs=("mode", "pads", "value"))
def _pad_2(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    value = float(node.attr("value", 0.0))
    return _pad(node, ctx, ints(node.attr("pads")), ctx.const_like(value, x) if value else None)


@converter("Pad", 11, attrs=("mode",))
def _pad_11(node: OnnxNode, ctx: ConversionContext) -> Result:
    value = ctx.optional(2)
    known = ctx.static_input(1)
    if known is not None and not ctx.has_input(3):
        return _pad(node, ctx, ints(known), value)
    x = ctx.input(0)
    rank = rank_of(node, x)
    pads = ops.cast(ctx.input(1), DstT=d.int64)
    if ctx.has_input(3):
        # Pads for some axes only: scatter them into a [2 * rank] vector of zeros.
        axes = ops.floor_mod(ops.cast(ctx.input(3), DstT=d.int64), ctx.const(np.int64(rank)))
        where = ops.expand_dims(
            ops.concat_v2(
                [axes, ops.add_v2(axes, ctx.const(np.int64(rank)))], ctx.const(np.int32(0))
            ),
            ctx.const(np.int32(1)),
        )
        pads = ops.scatter_nd(where, pads, ctx.int64s([2 * rank]))
    # Negative pads crop first (see _pad): x[crop_begin : size - crop_end], then the
    # positive pads.
    zero = ctx.const(np.int64(0))
    crop = ops.reshape(ops.maximum(ops.neg(pads), zero), ctx.int64s([2, rank]))
    zero32 = ctx.const(np.int32(0))
    crop_begin = ops.gather_v2(crop, zero, zero32)
    crop_end = ops.gather_v2(crop, ctx.const(np.int64(1)), zero32)
    x = ops.strided_slice(
        x, crop_begin, ops.sub(shape_of(ctx, x), crop_end), ctx.int64s([1] * rank)
    )
    pads = ops.maximum(pads, zero)
    paddings = ops.transpose(ops.reshape(pads, ctx.int64s([2, rank])), ctx.int32s([1, 0]))
    return [_pad_tensor(node, ctx, x, paddings, value)]


def _pad_tensor(
    node: OnnxNode, ctx: ConversionContext, x: Tensor, paddings: Tensor, value: Tensor | None
) -> Tensor:
    mode = str(node.attr("mode", "constant"))
    if mode == "constant":
        if value is None:
            return ops.pad(x, paddings)
        return ops.pad_v2(x, paddings, ops.reshape(value, ctx.int64s([])))
    if mode == "reflect":
        return _reflect_pad(node, ctx, x, paddings)
    if mode in ("edge", "wrap"):
        return _gather_pad(node, ctx, x, paddings, wrap=mode == "wrap")
    raise node.fail(f"mode={mode!r} is not supported (constant, reflect, edge, wrap are)")


def _reflect_pad(node: OnnxNode, ctx: ConversionContext, x: Tensor, paddings: Tensor) -> Tensor:
    """Reflect padding: MirrorPad where x is not empty. MirrorPad refuses an empty axis
    even with no pads (TensorFlow's rule: pads at most size - 1), where ONNX pads an
    empty tensor to the padded empty shape as long as no empty axis gets pads (there is
    nothing to reflect). So an empty x -- known at import, or decided at run time by a
    cond where a dimension is unknown -- gives zeros of the padded shape directly."""
    rank = rank_of(node, x)
    dims = x.shape.as_list()
    known = constant_value(paddings)
    if known is not None:
        _check_reflectable(node, dims, [[int(v) for v in pair] for pair in known])
    if all(v is not None and v > 0 for v in dims):
        return ops.mirror_pad(x, paddings, mode="REFLECT")
    sizes = static_dims(x)
    if sizes is not None and known is not None:
        padded = [v + int(sum(pair)) for v, pair in zip(sizes, known, strict=True)]
        return ctx.const(np.zeros(padded, x.dtype.numpy_dtype), x.dtype)  # empty
    empty = ops.equal(ops.size(x, out_type=d.int64), ctx.const(np.int64(0)))
    merged: Tensor = cond(
        empty,
        lambda: _empty_padded(node, ctx, x, paddings, rank),
        lambda: ops.mirror_pad(x, paddings, mode="REFLECT"),
        name="reflect",
    )
    if known is not None:
        # What MirrorPad's shape inference gives outside a cond (inside, its paddings
        # come through a Switch and are no constant), and neither branch knows alone.
        padded_dims = [
            None if v is None else int(v) + int(sum(pair))
            for v, pair in zip(dims, known, strict=True)
        ]
        ctx.graph.set_output_shape(merged, padded_dims)
    return merged


def _check_reflectable(node: OnnxNode, dims: list[int | None], pads: list[list[int]]) -> None:
    """Reflect pads on an axis known to be empty: nothing to reflect (onnxruntime and
    onnx's reference refuse it too)."""
    for axis, (size, pair) in enumerate(zip(dims, pads, strict=True)):
        if size == 0 and any(pair):
            raise node.fail(
                f"reflect pads {pair} on axis {axis}, of size 0: an empty axis has nothing "
                "to reflect; give it no pads, or pad it in constant mode"
            )


def _empty_padded(
    node: OnnxNode, ctx: ConversionContext, x: Tensor, paddings: Tensor, rank: int
) -> Tensor:
    """Zeros of x's shape plus its pads, for an empty x, once a check has found no pads
    on an empty axis (naming the node, as the import does where it knows the sizes)."""
    dims = ops.shape(x, out_type=d.int64)
    pads = ops.cast(paddings, DstT=d.int64) if paddings.dtype != d.int64 else paddings
    total = ops.sum(pads, ctx.int32s([1]))
    fine = ops.logical_or(
        ops.greater(dims, ctx.const(np.int64(0))), ops.equal(total, ctx.const(np.int64(0)))
    )
    check = run_time_check(
        ops.all(fine, ctx.int32s([0])),
        [dims, total],
        f"ONNX node {node.describe()}: reflect pads on an axis of size 0 (input shape and "
        "pads per axis follow): an empty axis has nothing to reflect; give it no pads, or "
        "pad it in constant or edge mode",
        "reflect_check",
    )
    with control_dependencies([check]):
        return ops.fill(ops.add_v2(dims, total), ctx.const_like(0, x))


def _gather_pad(
    node: OnnxNode, ctx: ConversionContext, x: Tensor, paddings: Tensor, *, wrap: bool
) -> Tensor:
    """Edge and wrap padding: per axis, gather the indices -before .. size+after-1, clamped
    into the axis (edge) or taken modulo its size (wrap)."""
    rank = rank_of(node, x)
    paddings = ops.cast(paddings, DstT=d.int64) if paddings.dtype != d.int64 else paddings
    zero32, one = ctx.const(np.int32(0)), ctx.const(np.int64(1))
    out = x
    for axis in range(rank):
        size = ops.gather_v2(shape_of(ctx, x), ctx.const(np.int64(axis)), zero32)
        pair = ops.gather_v2(paddings, ctx.const(np.int64(axis)), zero32)
        before = ops.gather_v2(pair, ctx.const(np.int64(0)), zero32)
        after = ops.gather_v2(pair, ctx.const(np.int64(1)), zero32)
        index = ops.range(ops.neg(before), ops.add_v2(size, after), one)
        if wrap:
            index = ops.floor_mod(index, size)
        else:
            index = ops.minimum(ops.maximum(index, ctx.const(np.int64(0))), ops.sub(size, one))
        out = ops.gather_v2(out, index, ctx.const(np.int32(axis)))
    return out


def _crop_pad_axes(node: OnnxNode, ctx: ConversionContext, rank: int, count: int) -> list[int]:
    """CenterCropPad's axes, wrapped and checked: one per value of the shape input."""
    axes = node.attr("axes")
    chosen = list(range(rank)) if axes is None else [axis_of(node, a, rank) for a in ints(axes)]
    if len(set(chosen)) != len(chosen):
        raise node.fail(f"axes {ints(axes)} repeat an axis")
    if count != len(chosen):
        raise node.fail(f"shape has {count} values but there are {len(chosen)} axes")
    return chosen


def _static_crop_pad(
    ctx: ConversionContext, x: Tensor, dims: list[int], target: list[int]
) -> Tensor:
    """Crop then pad with every size known: a StridedSlice and a Pad of constants."""
    crop = [max(n - t, 0) for n, t in zip(dims, target, strict=True)]
    begin = [c // 2 for c in crop]
    end = [n - c + b for n, c, b in zip(dims, crop, begin, strict=True)]
    if any(crop):
        x = ops.strided_slice(x, ctx.int64s(begin), ctx.int64s(end), ctx.int64s([1] * len(dims)))
    grow = [max(t - n, 0) for n, t in zip(dims, target, strict=True)]
    if not any(grow):
        return x if any(crop) else ops.identity(x)
    paddings = np.asarray([[g // 2, g - g // 2] for g in grow], dtype=np.int64)
    return ops.pad(x, ctx.const(paddings))


def _runtime_crop_pad(ctx: ConversionContext, x: Tensor, target: Tensor) -> Tensor:
    """Crop then pad with sizes known at run time: ``target`` is the full output shape."""
    dims = shape_of(ctx, x)
    zero, two = ctx.const(np.int64(0)), ctx.const(np.int64(2))
    crop = ops.maximum(ops.sub(dims, target), zero)
    x = ops.slice(x, ops.floor_div(crop, two), ops.minimum(dims, target))
    grow = ops.maximum(ops.sub(target, dims), zero)
    before = ops.floor_div(grow, two)
    return ops.pad(x, ops.pack([before, ops.sub(grow, before)], axis=1))


@converter("CenterCropPad", 18, attrs=("axes",))
def _center_crop_pad(node: OnnxNode, ctx: ConversionContext) -> Result:
    """Each chosen axis cropped or zero-padded about its centre to the target size; the
    odd element goes to the end side (floor of half the difference at the start), as
    onnx's reference does."""
    x = ctx.input(0)
    rank = rank_of(node, x)
    count = ctx.input(1).shape.as_list()
    if len(count) != 1 or count[0] is None:
        raise node.fail("the shape input needs a length known at import time")
    axes = _crop_pad_axes(node, ctx, rank, int(count[0]))
    known, dims = ctx.static_input(1), static_dims(x)
    if known is not None and dims is not None:
        target = list(dims)
        for axis, size in zip(axes, ints(known), strict=True):
            if size < 0:
                raise node.fail(f"shape {ints(known)} has a negative size")
            target[axis] = size
        return [_static_crop_pad(ctx, x, dims, target)]
    # The full target: x's own dimension where no axis names it, else the shape's value.
    shape = ops.cast(ctx.input(1), DstT=d.int64)
    pick = [rank + axes.index(i) if i in axes else i for i in range(rank)]
    joined = ops.concat_v2([shape_of(ctx, x), shape], ctx.const(np.int32(0)))
    return [
        _runtime_crop_pad(ctx, x, ops.gather_v2(joined, ctx.int64s(pick), ctx.const(np.int32(0))))
    ]


def _scalar_like(ctx: ConversionContext, x: Tensor) -> Tensor:
    """``x`` as a scalar when it is a vector of one element (by its static shape)."""
    if x.shape.rank == 1 and x.shape.as_list() == [1]:
        return ops.reshape(x, ctx.int64s([]))
    return x


@converter("Range", 11)
def _range(node: OnnxNode, ctx: ConversionContext) -> Result:
    # ONNX's count is max(ceil((limit - start) / delta), 0): a limit on the wrong side of
    # start gives an empty range, where kernloom's Range (TensorFlow's) fails. Such a
    # limit becomes start. A one-element vector counts as a scalar, as onnxruntime's
    # "scalar like" check takes it (the expanded AffineGrid's limit is a Split's [1]).
    start, limit, delta = (_scalar_like(ctx, ctx.input(i)) for i in range(3))
    zero = ctx.const_like(0, delta)
    backwards = ops.logical_or(
        ops.logical_and(ops.greater(delta, zero), ops.less(limit, start)),
        ops.logical_and(ops.less(delta, zero), ops.greater(limit, start)),
    )
    return [ops.range(start, ops.select_v2(backwards, start, limit), delta)]


__all__: list[str] = []
