"""ONNX sequences (SequenceConstruct, SequenceAt, SplitToSequence, SequenceMap...) and
Identity, resolved at import.

kernloom graphs carry tensors only, so a sequence is a tuple of kernloom tensors in the
conversion context (``kernloom.onnx._values.OnnxSequence``), its length known at import.
Every op on it is resolved while the graph is built: SequenceAt picks a tensor,
SequenceInsert makes a longer tuple, ConcatFromSequence becomes one ConcatV2 or Pack,
SplitToSequence one SplitV, and SequenceMap converts its body once per element, inline.

Deliberate limits: a position (SequenceAt, SequenceInsert, SequenceErase) and
SplitToSequence's ``split`` must be known at import (a constant, an initializer, or a
value folded from them, such as an unrolled Loop's iteration number), since they decide
which tensors the sequence holds; a value fed or computed at run time is an import error
naming the node. Out-of-range positions are import errors too, where onnx's runtime fails
when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx._values import OnnxOptional, OnnxSequence, Value
from kernloom.onnx.ops._helpers import axis_of, ints, rank_of
from kernloom.onnx.ops.control_flow import subgraph_values

__all__: list[str] = []

Values = Sequence[Value | None]


def _position(
    node: OnnxNode, ctx: ConversionContext, index: int, length: int, *, end_ok: bool
) -> int:
    """The position input ``index`` as an index into a sequence of ``length`` tensors:
    known at import, in [-length, length - 1] (or up to ``length`` where ``end_ok``:
    SequenceInsert's position may be the end)."""
    value = ctx.static_input(index)
    if value is None:
        raise node.fail(
            f"position (input {index}) must be known at import (a constant or an "
            "initializer): kernloom resolves sequences at import, so a position fed or "
            "computed at run time is not supported"
        )
    if np.size(value) != 1 or not np.issubdtype(np.asarray(value).dtype, np.integer):
        raise node.fail(f"position (input {index}) must be one integer, got {value!r}")
    position = int(np.asarray(value).reshape(()))
    high = length if end_ok else length - 1
    if not -length <= position <= high:
        raise node.fail(
            f"position {position} is out of range for a sequence of {length} tensor(s) "
            f"(allowed: {-length} to {high})"
        )
    return position + length if position < 0 else position


def _same_dtype(node: OnnxNode, sequence: OnnxSequence, tensor: Tensor, what: str) -> None:
    if tensor.dtype != sequence.dtype:
        raise node.fail(
            f"{what} is {tensor.dtype.name}; the sequence holds {sequence.dtype.name} tensors"
        )


@converter("SequenceConstruct", 11)
def _construct(node: OnnxNode, ctx: ConversionContext) -> Values:
    tensors = ctx.inputs()
    if not tensors:
        raise node.fail("SequenceConstruct takes at least one tensor (SequenceEmpty makes none)")
    dtypes = sorted({t.dtype.name for t in tensors})
    if len(dtypes) > 1:
        raise node.fail(f"its inputs must share one element type, got {dtypes}")
    return [OnnxSequence(tuple(tensors), tensors[0].dtype)]


@converter("SequenceEmpty", 11, attrs=("dtype",))
def _empty(node: OnnxNode, ctx: ConversionContext) -> Values:
    dtype = kernloom_dtype(int(node.attr("dtype", 1)), f"ONNX node {node.describe()}: dtype")
    return [OnnxSequence((), dtype)]


@converter("SequenceLength", 11)
def _length(node: OnnxNode, ctx: ConversionContext) -> Values:
    length = np.int64(len(ctx.sequence(0).items))
    if node.outputs and node.outputs[0]:
        ctx.static[node.outputs[0]] = np.asarray(length)
    return [ctx.const(length)]


@converter("SequenceAt", 11)
def _at(node: OnnxNode, ctx: ConversionContext) -> Values:
    sequence = ctx.sequence(0)
    position = _position(node, ctx, 1, len(sequence.items), end_ok=False)
    return [sequence.items[position]]


@converter("SequenceInsert", 11)
def _insert(node: OnnxNode, ctx: ConversionContext) -> Values:
    sequence = ctx.sequence(0)
    tensor = ctx.input(1)
    _same_dtype(node, sequence, tensor, "the tensor (input 1)")
    items = list(sequence.items)
    position = len(items)
    if ctx.has_input(2):
        position = _position(node, ctx, 2, len(items), end_ok=True)
    items.insert(position, tensor)
    return [OnnxSequence(tuple(items), sequence.dtype)]


@converter("SequenceErase", 11)
def _erase(node: OnnxNode, ctx: ConversionContext) -> Values:
    sequence = ctx.sequence(0)
    items = list(sequence.items)
    if not items:
        raise node.fail("the sequence is empty: there is nothing to erase")
    position = len(items) - 1
    if ctx.has_input(1):
        position = _position(node, ctx, 1, len(items), end_ok=False)
    del items[position]
    return [OnnxSequence(tuple(items), sequence.dtype)]


@converter("ConcatFromSequence", 11, attrs=("axis", "new_axis"))
def _concat(node: OnnxNode, ctx: ConversionContext) -> Values:
    sequence = ctx.sequence(0)
    if not sequence.items:
        raise node.fail("the sequence is empty: there is nothing to concatenate")
    rank = rank_of(node, sequence.items[0], "sequence's first tensor")
    stacked = int(node.attr("new_axis", 0)) == 1
    axis = axis_of(node, int(node.attr("axis")), rank + 1 if stacked else rank)
    if stacked:
        return [ops.pack(list(sequence.items), axis=axis)]
    if len(sequence.items) == 1:
        return [ops.identity(sequence.items[0])]
    return [ops.concat_v2(list(sequence.items), ctx.const(np.int32(axis)))]


@converter("SplitToSequence", 11, attrs=("axis", "keepdims"))
def _split(node: OnnxNode, ctx: ConversionContext) -> Values:
    x = ctx.input(0)
    axis = axis_of(node, int(node.attr("axis", 0)), rank_of(node, x))
    size = None if x.shape.rank is None else x.shape.as_list()[axis]
    if ctx.has_input(1):
        split = ctx.static_input(1)
        fed = ctx.input(1)
        count_known = fed.shape.as_list()[0] if fed.shape.rank == 1 else None
        if split is None and count_known is not None:
            # Sizes fed at run time, but as many as the split's static shape says: the
            # sequence's length is known at import, the sizes are SplitV's at run time.
            count = int(count_known)
            sizes_t = ops.cast(fed, DstT=d.int64)
            pieces = ops.split_v(x, sizes_t, ctx.const(np.int32(axis)), num_split=count)
            parts = list(pieces) if isinstance(pieces, Sequence) else [pieces]
            return [OnnxSequence(tuple(parts), x.dtype)]
        if split is None:
            raise node.fail(
                "split (input 1) must be known at import (a constant or an initializer), or "
                "be a 1-D tensor of a static length: it decides how many tensors the "
                "sequence holds, which kernloom resolves at import"
            )
        if np.ndim(split) == 0:
            chunk = int(split)
            if chunk <= 0:
                raise node.fail(f"split {chunk} must be positive")
            if size is None:
                raise node.fail(f"dimension {axis} of the input must be known at import")
            sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
        else:
            sizes = ints(split)
            if any(s < 0 for s in sizes):
                raise node.fail(f"split {sizes} has a negative size")
            if size is not None and sum(sizes) != size:
                raise node.fail(f"split {sizes} sums to {sum(sizes)}; dimension {axis} is {size}")
        keep = True
    else:
        if size is None:
            raise node.fail(f"dimension {axis} of the input must be known at import")
        sizes = [1] * size
        keep = int(node.attr("keepdims", 1)) == 1
    if not sizes:
        return [OnnxSequence((), x.dtype)]
    if len(sizes) == 1:
        parts = [ops.identity(x)]
    else:
        split_parts = ops.split_v(
            x, ctx.int64s(sizes), ctx.const(np.int32(axis)), num_split=len(sizes)
        )
        parts = list(split_parts) if isinstance(split_parts, Sequence) else [split_parts]
    if not keep:
        parts = [ops.squeeze(part, squeeze_dims=[axis]) for part in parts]
    return [OnnxSequence(tuple(parts), x.dtype)]


@converter("SequenceMap", 17, attrs=("body",))
def _map(node: OnnxNode, ctx: ConversionContext) -> Values:
    """The body converted once per element, inline: its outputs' i-th values form the
    i-th tensors of the output sequences."""
    first = ctx.sequence(0)
    length = len(first.items)
    given = [ctx.value(i) for i in range(len(node.inputs)) if ctx.has_input(i)]
    for index, value in enumerate(given):
        if isinstance(value, OnnxOptional):
            raise node.fail(
                f"input {index} is an optional; SequenceMap takes sequences and tensors"
            )
        if isinstance(value, OnnxSequence) and len(value.items) != length:
            raise node.fail(
                f"input {index} is a sequence of {len(value.items)} tensor(s); input 0 has "
                f"{length}: the sequences must have the same length"
            )
    body = node.attr("body")
    names = [value.name for value in body.input]
    if len(names) != len(given):
        raise node.fail(f"the body takes {len(names)} input(s); the node gives {len(given)}")
    outputs: list[list[Tensor]] = [[] for _ in body.output]
    for position in range(length):
        bound = {
            name: value.items[position] if isinstance(value, OnnxSequence) else value
            for name, value in zip(names, given, strict=True)
        }
        for index, result in enumerate(subgraph_values(ctx, node, "body", bound)):
            if not isinstance(result, Tensor):
                raise node.fail(f"the body's output {index} must be a tensor")
            outputs[index].append(result)
    dtypes = [_output_dtype(node, ctx, body.output[i], values) for i, values in enumerate(outputs)]
    return [
        OnnxSequence(tuple(values), dtype) for values, dtype in zip(outputs, dtypes, strict=True)
    ]


def _output_dtype(
    node: OnnxNode, ctx: ConversionContext, value: object, tensors: list[Tensor]
) -> d.DType:
    """An output sequence's element type: its tensors', or for an empty one the body's
    declared output type."""
    if tensors:
        return tensors[0].dtype
    elem = getattr(getattr(getattr(value, "type", None), "tensor_type", None), "elem_type", 0)
    if not elem:
        raise node.fail("the input sequences are empty and the body declares no output type")
    return kernloom_dtype(int(elem), f"ONNX node {node.describe()}: the body's output")


@converter("Identity", 1)
def _identity(node: OnnxNode, ctx: ConversionContext) -> Values:
    """A tensor's Identity, which keeps what is known at import (an unrolled Loop's
    ``cond_out = Identity(cond_in)``); a sequence's or optional's is the value itself."""
    value = ctx.value(0)
    if not isinstance(value, Tensor):
        return [value]
    known = ctx.static.get(node.inputs[0])
    if known is not None and node.outputs and node.outputs[0]:
        ctx.static[node.outputs[0]] = known
    return [ops.identity(value)]
