"""Array ops: constants, placeholders, identity and the ops that rearrange tensors.

dtypes: every op here takes every kernloom dtype (numbers and bool) unless said otherwise;
shape, axis and permutation inputs are int32 or int64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from kernloom.dtypes import bool_
from kernloom.errors import InvalidArgumentError
from kernloom.framework.indexing_checks import (
    broadcast_to_shape,
    expand_dims_axis,
    gather_nd_shape,
    gather_shape,
    one_hot_axis,
    pack_axis,
    pad_amounts,
    range_size,
    reverse_axes,
    scatter_nd_shape,
    slice_spec,
    space_batch_spec,
    split_sizes,
    squeeze_shape,
    strided_slice_spec,
    tile_shape,
)
from kernloom.framework.kernel_checks import tf_reshape_dims
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import (
    InferenceContext,
    broadcast_binary_shape,
    normalize_axis,
    unchanged_shape,
)
from kernloom.op_library.types import ALL, INDEX, NUMBERS, spec
from kernloom.shapes import Dim, TensorShape

__all__ = ["STRIDED_SLICE_MASKS", "define"]

_R = TypeVar("_R")


def _const_shape(ctx: InferenceContext) -> None:
    value = ctx.attr("value")
    if value.dtype != ctx.attr("dtype").numpy_dtype:
        raise ctx.fail(f"value has dtype {value.dtype}, but attr dtype is {ctx.attr('dtype')}")
    ctx.set_output(0, list(value.shape))


def _placeholder_shape(ctx: InferenceContext) -> None:
    ctx.set_output(0, ctx.attr("shape"))


def _shape_of(ctx: InferenceContext) -> None:
    rank = ctx.input_shape(0).rank
    ctx.set_output(0, [rank])


def _unknown_from_shape_vector(ctx: InferenceContext, index: int) -> TensorShape:
    """The output shape when input ``index`` (a shape vector) is not known until run time:
    the partly known shape it holds where it is a ``Shape``'s output, else its length,
    if known, as the output's rank."""
    partial = ctx.input_shape_value(index)
    if partial is not None:
        return partial
    vector = ctx.input_shape(index)
    return TensorShape.unknown(vector[0]) if vector.rank == 1 else TensorShape(None)


def _shape_vector(ctx: InferenceContext, index: int, name: str) -> list[int] | None:
    """Input ``index`` (``name``: a vector of dimensions, as TensorFlow's shape functions
    ask; the kernels also take a scalar, the legacy spelling of a vector of one, when the
    shape is only known at run time) as ints; None, with the output's shape set as far as
    it is known, when its value is only known at run time."""
    if ctx.input_shape(index).rank not in (None, 1):
        raise ctx.fail(f"{name} must be a vector, got a tensor of shape {ctx.input_shape(index)}")
    value = ctx.input_value(index)
    if value is None:
        ctx.set_output(0, _unknown_from_shape_vector(ctx, index))
        return None
    return [int(x) for x in np.asarray(value).reshape(-1)]


def _reshape_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    target_dims = _shape_vector(ctx, 1, "shape")
    if target_dims is None:
        return
    if target_dims.count(-1) > 1:
        raise ctx.fail(f"only one dimension of shape {target_dims} may be -1")
    if any(x < -1 for x in target_dims):
        raise ctx.fail(f"shape {target_dims} has a negative dimension other than -1")
    if source.num_elements() is not None and source.dims is not None:
        dims = tf_reshape_dims([int(n or 0) for n in source.dims], target_dims)
        if isinstance(dims, str):
            raise ctx.fail(dims)
        ctx.set_output(0, dims)
        return
    ctx.set_output(0, [None if x == -1 else x for x in target_dims])


def _transpose_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    perm = ctx.input_value(1)
    if ctx.input_shape(1).rank not in (None, 1):
        raise ctx.fail(f"perm must be a vector, got shape {ctx.input_shape(1)}")
    if perm is None:
        ctx.set_output(0, TensorShape.unknown(source.rank) if source.rank is not None else None)
        return
    if np.ndim(perm) != 1:
        raise ctx.fail(f"perm must be a vector, got shape {list(np.shape(perm))}")
    given = [int(p) for p in np.asarray(perm)]
    rank = len(given)
    if source.rank is not None and source.rank != rank:
        raise ctx.fail(f"perm {given} has {rank} entries for a tensor of rank {source.rank}")
    # Negative entries count from the end, as TensorFlow's kernel reads them.
    perm_list = [p % rank if -rank <= p < 0 else p for p in given]
    if sorted(perm_list) != list(range(rank)):
        raise ctx.fail(f"perm {perm_list} is not a permutation of 0..{rank - 1}")
    ctx.set_output(0, [source[p] for p in perm_list] if source.rank is not None else [None] * rank)


def _concat_shape(ctx: InferenceContext) -> None:
    n = ctx.num_inputs - 1
    shapes = [ctx.input_shape(i) for i in range(n)]
    axis_value = ctx.input_value(n)
    ranks = {s.rank for s in shapes if s.rank is not None}
    if len(ranks) > 1:
        raise ctx.fail(f"all values must have the same rank, got ranks {sorted(ranks)}")
    if not ranks:
        ctx.set_output(0, None)
        return
    rank = ranks.pop()
    if rank == 0:
        raise ctx.fail("cannot concatenate scalars; reshape them to vectors first")
    if axis_value is None:
        ctx.set_output(0, TensorShape.unknown(rank))
        return
    if np.ndim(axis_value) != 0:
        raise ctx.fail(f"axis must be a scalar, got shape {list(np.shape(axis_value))}")
    axis = normalize_axis(int(np.asarray(axis_value)), rank, ctx)
    out: list[Dim] = []
    for i in range(rank):
        column = [s[i] if s.rank is not None else None for s in shapes]
        if i == axis:
            out.append(None if any(c is None for c in column) else sum(c or 0 for c in column))
        else:
            merged = TensorShape([None])
            for c in column:
                merged = ctx.merge(merged, TensorShape([c]), f"dimension {i} of the values")
            out.append(merged[0])
    ctx.set_output(0, out)


def _fill_shape(ctx: InferenceContext) -> None:
    # As TensorFlow's shape function: a vector dims and a scalar value (its kernel also
    # takes the legacy forms, scalar dims and a value of shape [1], when shapes are unknown).
    if ctx.input_shape(1).rank not in (0, None):
        raise ctx.fail(f"value must be a scalar, got shape {ctx.input_shape(1)}")
    dims_list = _shape_vector(ctx, 0, "dims")
    if dims_list is None:
        return
    if any(x < 0 for x in dims_list):
        raise ctx.fail(f"dims {dims_list} has a negative dimension")
    ctx.set_output(0, dims_list)


def define(lib: OpLibrary) -> None:
    all_types = spec(ALL)
    index = spec(INDEX)
    (
        lib.register_op("Const")
        .output("output: dtype")
        .attr("value: tensor")
        .attr("dtype: type")
        .shape_fn(_const_shape)
        .doc("A constant tensor, held in the graph.")
    )
    (
        lib.register_op("Placeholder")
        .output("output: dtype")
        .attr("dtype: type")
        .attr("shape: shape = ?")
        .shape_fn(_placeholder_shape)
        .doc("A value fed at run time; running it without a feed is an error.")
    )
    (
        lib.register_op("Identity")
        .input("input: T")
        .output("output: T")
        .attr(f"T: {all_types}")
        .shape_fn(unchanged_shape)
        .doc("The input, unchanged (its buffer is shared, not copied).")
    )
    lib.register_op("NoOp").doc("Does nothing; a target for control dependencies.")
    (
        lib.register_op("Reshape")
        .input("tensor: T")
        .input("shape: Tshape")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"Tshape: {index} = int32")
        .shape_fn(_reshape_shape)
        .doc(
            "The same elements in a new shape; one dimension may be -1 (inferred).",
            "As TensorFlow: zeros in shape are left out when the -1 is inferred, so an "
            "empty [0, 3] reshapes to [-1, 0] as [3, 0]. When the shape is only known at run "
            "time the kernel also takes a scalar shape (TensorFlow's legacy vector of one).",
        )
    )
    (
        lib.register_op("Transpose")
        .input("x: T")
        .input("perm: Tperm")
        .output("y: T")
        .attr(f"T: {all_types}")
        .attr(f"Tperm: {index} = int32")
        .shape_fn(_transpose_shape)
        .doc(
            "Permute dimensions: y.shape[i] = x.shape[perm[i]].",
            "perm is a vector; a negative entry counts from the end (-1: the last), as "
            "TensorFlow's kernel reads it.",
        )
    )
    (
        lib.register_op("ConcatV2")
        .input("values: N * T")
        .input("axis: Tidx")
        .output("output: T")
        .attr("N: int >= 2")
        .attr(f"T: {all_types}")
        .attr(f"Tidx: {index} = int32")
        .shape_fn(_concat_shape)
        .doc("Join tensors along an existing axis (negative counts from the end).")
    )
    (
        lib.register_op("Fill")
        .input("dims: index_type")
        .input("value: T")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"index_type: {index} = int32")
        .shape_fn(_fill_shape)
        .doc(
            "A tensor of shape dims with every element equal to the scalar value.",
            "When shapes are only known at run time the kernel also takes TensorFlow's "
            "legacy forms: a value of shape [1] and scalar dims.",
        )
    )
    (
        lib.register_op("ZerosLike")
        .input("x: T")
        .output("y: T")
        .attr(f"T: {all_types}")
        .shape_fn(unchanged_shape)
        .doc("Zeros (False for bool) with x's shape and dtype.")
    )
    (
        lib.register_op("OnesLike")
        .input("x: T")
        .output("y: T")
        .attr(f"T: {all_types}")
        .shape_fn(unchanged_shape)
        .doc("Ones (True for bool) with x's shape and dtype.")
    )
    (
        lib.register_op("Shape")
        .input("input: T")
        .output("output: out_type")
        .attr(f"T: {all_types}")
        .attr(f"out_type: {index} = int32")
        .shape_fn(_shape_of)
        .doc("The shape of input as a vector (always produced in host memory).")
    )
    define_indexing(lib)
    _define_space_batch(lib)


def _space_batch_shape(ctx: InferenceContext) -> None:
    """SpaceToBatchND's and BatchToSpaceND's shape, as TensorFlow's shape function: the
    block's rank and size must be known; with its values and the paddings' (crops') the
    kernels' own rule gives the shape, with the block's alone the batch dimension (and the
    kernels' divisibility check), else only the rank and the dimensions after the block."""
    to_batch = ctx.op_def.name == "SpaceToBatchND"
    what = "paddings" if to_batch else "crops"
    source, block, amounts = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
    if block.rank != 1:
        raise ctx.fail("block_shape must have rank 1.")
    m = block[0]
    if m is None:
        raise ctx.fail("block_shape must have known size.")
    if amounts.rank is not None and (
        amounts.rank != 2 or amounts[0] not in (None, m) or amounts[1] not in (None, 2)
    ):
        raise ctx.fail(f"{what} should have shape [{m}, 2] instead of {amounts}")
    if source.rank is None:
        ctx.set_output(0, None)
        return
    if source.rank < 1 + m:
        raise ctx.fail(f"input rank should be >= {1 + m} instead of {source.rank}")
    dims = source.dims or ()
    block_value, amount_value = ctx.input_value(1), ctx.input_value(2)
    if block_value is not None and amount_value is not None:
        found = _rule(ctx, space_batch_spec, dims, block_value, amount_value, to_batch=to_batch)
        ctx.set_output(0, list(found.shape))
        return
    batch: Dim = None
    if block_value is not None:  # the batch only: the kernels' rule with no padding
        zero = np.zeros((m, 2), np.int64)
        known = _rule(ctx, space_batch_spec, dims, block_value, zero, to_batch=to_batch)
        batch = known.shape[0]
    ctx.set_output(0, [batch, *([None] * m), *dims[1 + m :]])


def _define_space_batch(lib: OpLibrary) -> None:
    """SpaceToBatchND and BatchToSpaceND, with TensorFlow's op defs: every type (its CPU
    kernels, and so kernloom's, take the real numbers only: a complex or bool node finds
    no kernel, as in TensorFlow), block_shape and paddings/crops int32 or int64."""
    index = spec(INDEX)
    for op, amounts, doc, detail in (
        (
            "SpaceToBatchND",
            "paddings",
            "Zero-pad the M spatial dimensions after the batch (paddings[i] = [before, "
            "after]), cut each into blocks of block_shape[i] and move the positions within "
            "a block into the batch: output shape [batch * prod(block_shape)] + "
            "[padded[i] / block_shape[i]] + the remaining dimensions.",
            "The output batch index is (offset within the block, row-major over the block "
            "dimensions) * batch + input batch index, TensorFlow's layout. Block sizes must "
            "be >= 1, paddings >= 0, and each padded size a multiple of its block size; "
            "block_shape's size must be known when the node is built (TensorFlow's shape "
            "function asks the same).",
        ),
        (
            "BatchToSpaceND",
            "crops",
            "SpaceToBatchND's inverse: split the batch into prod(block_shape) groups, "
            "interleave them into the M spatial dimensions (size[i] * block_shape[i]) and "
            "crop crops[i] = [before, after] from each.",
            "The input batch must be a multiple of prod(block_shape) (which must be "
            "positive), crops >= 0 and no larger than the uncropped size; block_shape's "
            "size must be known when the node is built, as in TensorFlow.",
        ),
    ):
        (
            lib.register_op(op)
            .input("input: T")
            .input("block_shape: Tblock_shape")
            .input(f"{amounts}: T{amounts}")
            .output("output: T")
            .attr(f"T: {spec(ALL)}")
            .attr(f"Tblock_shape: {index} = int32")
            .attr(f"T{amounts}: {index} = int32")
            .shape_fn(_space_batch_shape)
            .doc(doc, detail)
        )


# -- shape and indexing ops (issue 18) --------------------------------------------------------


def _rule(ctx: InferenceContext, rule: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
    """A shared rule of ``indexing_checks`` at graph-building time, naming the node."""
    try:
        return rule(*args, **kwargs)
    except InvalidArgumentError as exc:
        raise ctx.fail(str(exc)) from None


def _with_rank(ctx: InferenceContext, index: int, rank: int, what: str) -> TensorShape:
    shape = ctx.input_shape(index)
    if shape.rank is not None and shape.rank != rank:
        kind = {0: "a scalar", 1: "a vector", 2: "a matrix"}[rank]
        raise ctx.fail(f"{what} must be {kind}, got shape {shape}")
    return shape


def _known_ints(ctx: InferenceContext, index: int) -> list[int] | None:
    value = ctx.input_value(index)
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _known_scalar(ctx: InferenceContext, index: int, what: str) -> int | None:
    _with_rank(ctx, index, 0, what)
    values = _known_ints(ctx, index)
    return None if values is None else values[0]


def _pad_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    paddings = _with_rank(ctx, 1, 2, "paddings")
    if paddings.rank is not None and paddings[1] not in (None, 2):
        raise ctx.fail(f"paddings must have shape [rank, 2], got {paddings}")
    rank = source.rank
    if paddings.rank is not None and paddings[0] is not None:
        if rank is not None and rank != paddings[0]:
            raise ctx.fail(
                f"paddings {paddings} has {paddings[0]} rows for an input of rank {rank}"
            )
        rank = paddings[0]
    if ctx.op_def.name == "PadV2":
        _with_rank(ctx, 2, 0, "constant_values")
    value = ctx.input_value(1)
    if rank is None:
        ctx.set_output(0, None)
        return
    dims = source.dims if source.rank is not None else (None,) * rank
    if value is None:
        ctx.set_output(0, TensorShape.unknown(rank))
        return
    mode = ctx.attr("mode") if ctx.op_def.name == "MirrorPad" else None
    _, out = _rule(ctx, pad_amounts, dims, value, mode)
    ctx.set_output(0, out)


def _gather_v2_shape(ctx: InferenceContext) -> None:
    params, indices = ctx.input_shape(0), ctx.input_shape(1)
    if params.rank == 0:
        raise ctx.fail("params must be at least 1 dimensional")
    axis = _known_scalar(ctx, 2, "axis")
    batch_dims = int(ctx.attr("batch_dims"))
    if params.rank is None or indices.rank is None:
        ctx.set_output(0, None)
        return
    if axis is None:
        batch = batch_dims + indices.rank if batch_dims < 0 else batch_dims
        ctx.set_output(0, TensorShape.unknown(params.rank + indices.rank - 1 - batch))
        return
    _, _, out = _rule(ctx, gather_shape, params.dims, indices.dims, axis, batch_dims)
    ctx.set_output(0, out)


def _gather_nd_shape(ctx: InferenceContext) -> None:
    params, indices = ctx.input_shape(0), ctx.input_shape(1)
    if params.rank is None or indices.rank is None:
        ctx.set_output(0, None)
        return
    ctx.set_output(0, _rule(ctx, gather_nd_shape, params.dims, indices.dims))


def _scatter_nd_shape(ctx: InferenceContext) -> None:
    indices, updates = ctx.input_shape(0), ctx.input_shape(1)
    _with_rank(ctx, 2, 1, "shape")
    if indices.rank == 0:
        raise ctx.fail("indices must be at least a vector")
    if updates.rank == 0:
        raise ctx.fail("updates must be at least a vector")
    shape = _known_ints(ctx, 2)
    if shape is None:
        ctx.set_output(0, _unknown_from_shape_vector(ctx, 2))
        return
    if indices.rank is not None and updates.rank is not None:
        _rule(ctx, scatter_nd_shape, indices.dims, updates.dims, shape)
    elif any(d < 0 for d in shape):
        raise ctx.fail(f"shape {shape} has a negative dimension")
    ctx.set_output(0, shape)


def _slice_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    begin_shape = _with_rank(ctx, 1, 1, "begin")
    size_shape = _with_rank(ctx, 2, 1, "size")
    merged = ctx.merge(begin_shape, size_shape, "begin and size")
    rank = source.rank
    if merged.rank is not None and merged[0] is not None:
        if rank is not None and rank != merged[0]:
            raise ctx.fail(f"begin and size have {merged[0]} elements for an input of rank {rank}")
        rank = merged[0]
    if rank is None:
        ctx.set_output(0, None)
        return
    begin, size = _known_ints(ctx, 1), _known_ints(ctx, 2)
    if size is None:
        ctx.set_output(0, TensorShape.unknown(rank))
        return
    dims = source.dims if source.rank is not None else (None,) * rank
    if begin is None:
        out = [None if s == -1 else s for s in size]
        if any(s < -1 for s in size):
            raise ctx.fail(f"size {size}: sizes cannot be < -1")
        ctx.set_output(0, out)
        return
    _, shape = _rule(ctx, slice_spec, dims, begin, size)
    ctx.set_output(0, shape)


def _strided_slice_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    lengths = [_with_rank(ctx, i, 1, what) for i, what in enumerate(("begin", "end", "strides"), 1)]
    merged = ctx.merge(ctx.merge(lengths[0], lengths[1], "begin and end"), lengths[2], "strides")
    strides = _known_ints(ctx, 3)
    if source.rank is None or strides is None or merged.rank is None:
        ctx.set_output(0, None)
        return
    spec = _rule(
        ctx,
        strided_slice_spec,
        source.dims,
        _known_ints(ctx, 1),
        _known_ints(ctx, 2),
        strides,
        **{mask: int(ctx.attr(mask)) for mask in STRIDED_SLICE_MASKS},
    )
    ctx.set_output(0, spec.final_shape)


def _split_shape(ctx: InferenceContext) -> None:
    is_v = ctx.op_def.name == "SplitV"
    axis_index, value_index = (2, 0) if is_v else (0, 1)
    source = ctx.input_shape(value_index)
    axis = _known_scalar(ctx, axis_index, "split_dim")
    num = int(ctx.attr("num_split"))
    sizes = None
    if is_v:
        _with_rank(ctx, 1, 1, "size_splits")
        sizes = _known_ints(ctx, 1)
    if source.rank == 0:
        raise ctx.fail("Can't split scalars")
    outputs: list[object]
    if source.rank is None:
        outputs = [None] * num
    elif axis is None:
        outputs = [TensorShape.unknown(source.rank)] * num
    else:
        dims = list(source.dims or ())
        pieces: list[Dim]
        if is_v and sizes is None:
            axis, pieces = normalize_axis(axis, source.rank, ctx), [None] * num
        else:
            axis, pieces = _rule(ctx, split_sizes, dims, axis, num, sizes)
        outputs = [[*dims[:axis], piece, *dims[axis + 1 :]] for piece in pieces]
    for i, shape in enumerate(outputs):
        ctx.set_output(i, shape)


def _squeeze_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    if source.rank is None:
        ctx.set_output(0, None)
        return
    ctx.set_output(0, _rule(ctx, squeeze_shape, source.dims, list(ctx.attr("squeeze_dims"))))


def _expand_dims_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    dim = ctx.input_value(1)
    if dim is not None and np.size(dim) != 1:
        raise ctx.fail(f"'dim' must be a tensor with a single value, got {np.size(dim)} values")
    if dim is None or source.rank is None:
        ctx.set_output(0, TensorShape.unknown(source.rank + 1) if source.rank is not None else None)
        return
    axis = _rule(ctx, expand_dims_axis, source.rank, dim)
    dims = list(source.dims or ())
    ctx.set_output(0, [*dims[:axis], 1, *dims[axis:]])


def _pack_shape(ctx: InferenceContext) -> None:
    merged = TensorShape(None)
    for i in range(ctx.num_inputs):
        merged = ctx.merge(merged, ctx.input_shape(i), f"values[{i}]")
    if merged.rank is None:
        ctx.set_output(0, None)
        return
    axis = _rule(ctx, pack_axis, int(ctx.attr("axis")), merged.rank + 1)
    dims = list(merged.dims or ())
    ctx.set_output(0, [*dims[:axis], ctx.num_inputs, *dims[axis:]])


def _unpack_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    num = int(ctx.attr("num"))
    if source.rank is None:
        for i in range(num):
            ctx.set_output(i, None)
        return
    axis = _rule(ctx, pack_axis, int(ctx.attr("axis")), source.rank)
    if source[axis] is not None and source[axis] != num:
        raise ctx.fail(
            f"Dimension {axis} of value has size {source[axis]}, but num is {num}: "
            f"unpacking yields one output per element along axis"
        )
    dims = [d for i, d in enumerate(source.dims or ()) if i != axis]
    for i in range(num):
        ctx.set_output(i, dims)


def _tile_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    multiples_shape = _with_rank(ctx, 1, 1, "multiples")
    multiples = _known_ints(ctx, 1)
    rank = source.rank
    if multiples_shape.rank is not None and multiples_shape[0] is not None:
        if rank is not None and rank != multiples_shape[0]:
            raise ctx.fail(
                f"Expected multiples argument to be a vector of length {rank} but got "
                f"length {multiples_shape[0]}"
            )
        rank = multiples_shape[0]
    if rank is None:
        ctx.set_output(0, None)
        return
    if multiples is None:
        ctx.set_output(0, TensorShape.unknown(rank))
        return
    dims = source.dims if source.rank is not None else (None,) * rank
    ctx.set_output(0, _rule(ctx, tile_shape, dims, multiples))


def _broadcast_to_shape(ctx: InferenceContext) -> None:
    _with_rank(ctx, 1, 1, "shape")
    target = _known_ints(ctx, 1)
    if target is None:
        ctx.set_output(0, _unknown_from_shape_vector(ctx, 1))
        return
    source = ctx.input_shape(0)
    if source.rank is None:
        ctx.set_output(0, target)
        return
    ctx.set_output(0, _rule(ctx, broadcast_to_shape, source.dims, target))


def _placeholder_with_default_shape(ctx: InferenceContext) -> None:
    """The declared shape (it may be less precise than the default's, so that a feed of
    another size fits); the default must be compatible with it."""
    declared = TensorShape(ctx.attr("shape"))
    ctx.merge(ctx.input_shape(0), declared, "the default (input) and attr shape")
    ctx.set_output(0, declared)


def _unique_shape(ctx: InferenceContext) -> None:
    x = _with_rank(ctx, 0, 1, "x")
    ctx.set_output(0, [None])
    ctx.set_output(1, x if x.rank is not None else [None])


def _scalar_shape(ctx: InferenceContext) -> None:
    ctx.set_output(0, [])


def _range_shape(ctx: InferenceContext) -> None:
    values = []
    for index, name in enumerate(("start", "limit", "delta")):
        _with_rank(ctx, index, 0, name)
        values.append(ctx.input_value(index))
    if any(v is None for v in values):
        ctx.set_output(0, [None])
        return
    start, limit, delta = (np.asarray(v).reshape(())[()] for v in values)
    ctx.set_output(0, [_rule(ctx, range_size, start, limit, delta)])


def _one_hot_shape(ctx: InferenceContext) -> None:
    indices = ctx.input_shape(0)
    depth = _known_scalar(ctx, 1, "depth")
    _with_rank(ctx, 2, 0, "on_value")
    _with_rank(ctx, 3, 0, "off_value")
    if depth is not None and depth < 0:
        raise ctx.fail(f"depth must be non-negative, got: {depth}")
    axis = int(ctx.attr("axis"))
    if axis < -1:
        raise ctx.fail(f"axis must be >= -1, got {axis}")
    if indices.rank is None:
        ctx.set_output(0, None)
        return
    position = _rule(ctx, one_hot_axis, axis, indices.rank)
    dims = list(indices.dims or ())
    ctx.set_output(0, [*dims[:position], depth, *dims[position:]])


def _where_shape(ctx: InferenceContext) -> None:
    ctx.set_output(0, [None, ctx.input_shape(0).rank])


def _reverse_shape(ctx: InferenceContext) -> None:
    source = ctx.input_shape(0)
    _with_rank(ctx, 1, 1, "axis")
    axes = _known_ints(ctx, 1)
    if axes is not None and source.rank is not None:
        _rule(ctx, reverse_axes, source.rank, axes)
    ctx.set_output(0, source)


BAD_INDICES_POLICIES = "{'', 'DEFAULT', 'ERROR', 'IGNORE'}"
"""TensorFlow's policies for out-of-range gather/scatter indices (GatherNd, ScatterNd)."""

STRIDED_SLICE_MASKS = (
    "begin_mask",
    "end_mask",
    "ellipsis_mask",
    "new_axis_mask",
    "shrink_axis_mask",
)


def define_indexing(lib: OpLibrary) -> None:
    """The shape and indexing ops (issue 18), with TensorFlow's OpDef names."""
    all_types = spec(ALL)
    index = spec(INDEX)
    for op, extra, doc in (
        ("Pad", [], "Pad with zeros: paddings[i] = [before, after] for dimension i."),
        (
            "PadV2",
            ["constant_values: T"],
            "Pad with the scalar constant_values: paddings[i] = [before, after].",
        ),
        (
            "MirrorPad",
            [],
            "Pad with a mirror of the input: REFLECT leaves the edge out (at most dim - 1 "
            "per side), SYMMETRIC repeats it (at most dim).",
        ),
    ):
        builder = lib.register_op(op).input("input: T").input("paddings: Tpaddings")
        for arg in extra:
            builder.input(arg)
        builder.output("output: T").attr(f"T: {all_types}").attr(f"Tpaddings: {index} = int32")
        if op == "MirrorPad":
            builder.attr("mode: {'REFLECT', 'SYMMETRIC'}")
        builder.shape_fn(_pad_shape).doc(doc)
    (
        lib.register_op("GatherV2")
        .input("params: Tparams")
        .input("indices: Tindices")
        .input("axis: Taxis")
        .attr("batch_dims: int = 0")
        .output("output: Tparams")
        .attr(f"Tparams: {all_types}")
        .attr(f"Tindices: {index}")
        .attr(f"Taxis: {index}")
        .shape_fn(_gather_v2_shape)
        .doc(
            "Gather slices of params along axis: output = params[:axis] + "
            "indices[batch_dims:] + params[axis + 1:] in shape.",
            "The first batch_dims dimensions of params and indices are batch dimensions. "
            "An index out of [0, params.shape[axis]) is an error on the CPU (naming the "
            "index); the GPU kernels give zeros for it, as TensorFlow's GPU kernel does.",
        )
    )
    (
        lib.register_op("GatherNd")
        .input("params: Tparams")
        .input("indices: Tindices")
        .output("output: Tparams")
        .attr(f"Tparams: {all_types}")
        .attr(f"Tindices: {index}")
        .attr(f"bad_indices_policy: {BAD_INDICES_POLICIES} = ''")
        .shape_fn(_gather_nd_shape)
        .doc(
            "Gather slices of params addressed by the last dimension of indices: output "
            "shape is indices.shape[:-1] + params.shape[indices.shape[-1]:].",
            "bad_indices_policy: '' or DEFAULT (an out-of-range index is an error on the "
            "CPU and gives zeros on the GPU, as in TensorFlow), ERROR (CPU only), IGNORE "
            "(zeros everywhere). TensorFlow takes any string and rejects others when the "
            "kernel runs; here the allowed values are checked when the node is built.",
        )
    )
    (
        lib.register_op("ScatterNd")
        .input("indices: Tindices")
        .input("updates: T")
        .input("shape: Tindices")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"Tindices: {index}")
        .attr(f"bad_indices_policy: {BAD_INDICES_POLICIES} = ''")
        .shape_fn(_scatter_nd_shape)
        .doc(
            "A zero tensor of the given shape with updates added at indices (duplicate "
            "indices add up).",
            "bad_indices_policy: '' or DEFAULT (an out-of-range index is an error on the "
            "CPU and is skipped on the GPU, as in TensorFlow), ERROR (CPU only), IGNORE "
            "(skipped everywhere); the allowed values are checked when the node is built.",
        )
    )
    (
        lib.register_op("Slice")
        .input("input: T")
        .input("begin: Index")
        .input("size: Index")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"Index: {index}")
        .shape_fn(_slice_shape)
        .doc("The block of input starting at begin with the given size (-1: to the end).")
    )
    builder = (
        lib.register_op("StridedSlice")
        .input("input: T")
        .input("begin: Index")
        .input("end: Index")
        .input("strides: Index")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"Index: {index}")
    )
    for mask in STRIDED_SLICE_MASKS:
        builder.attr(f"{mask}: int = 0")
    builder.shape_fn(_strided_slice_shape).doc(
        "Python's basic slicing (x[b0:e0:s0, b1:e1:s1, ...]) with TensorFlow's masks: "
        "bit i of begin_mask/end_mask ignores begin[i]/end[i], ellipsis_mask marks an "
        "ellipsis, new_axis_mask inserts a dimension of 1, shrink_axis_mask takes the "
        "single index begin[i] and drops the dimension."
    )
    (
        lib.register_op("Split")
        .input("split_dim: int32")
        .input("value: T")
        .output("output: num_split * T")
        .attr("num_split: int >= 1")
        .attr(f"T: {all_types}")
        .shape_fn(_split_shape)
        .doc(
            "Split value into num_split equal pieces along split_dim.",
            "The inputs keep TensorFlow's OpDef names (split_dim; tf.raw_ops calls it axis).",
        )
    )
    (
        lib.register_op("SplitV")
        .input("value: T")
        .input("size_splits: Tlen")
        .input("split_dim: int32")
        .output("output: num_split * T")
        .attr("num_split: int >= 1")
        .attr(f"T: {all_types}")
        .attr("Tlen: {int8, int32, int64} = int64")
        .shape_fn(_split_shape)
        .doc(
            "Split value along split_dim into pieces of the sizes in size_splits (one may "
            "be -1: what is left).",
            "The inputs keep TensorFlow's OpDef names (split_dim; tf.raw_ops calls it axis).",
        )
    )
    (
        lib.register_op("Squeeze")
        .input("input: T")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr("squeeze_dims: list(int) >= 0 = []")
        .shape_fn(_squeeze_shape)
        .doc(
            "Remove dimensions of size 1: those in squeeze_dims (each must be 1), or all.",
            "The attr keeps TensorFlow's OpDef name squeeze_dims (tf.raw_ops calls it axis).",
        )
    )
    (
        lib.register_op("ExpandDims")
        .input("input: T")
        .input("dim: Tdim")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"Tdim: {index} = int32")
        .shape_fn(_expand_dims_shape)
        .doc("Insert a dimension of 1 at index dim (in [-rank - 1, rank]).")
    )
    (
        lib.register_op("Pack")
        .input("values: N * T")
        .output("output: T")
        .attr("N: int >= 1")
        .attr(f"T: {all_types}")
        .attr("axis: int = 0")
        .shape_fn(_pack_shape)
        .doc("Stack N tensors of one shape along a new dimension axis.")
    )
    (
        lib.register_op("Unpack")
        .input("value: T")
        .output("output: num * T")
        .attr("num: int >= 0")
        .attr(f"T: {all_types}")
        .attr("axis: int = 0")
        .shape_fn(_unpack_shape)
        .doc("Split value along axis into num tensors, dropping that dimension.")
    )
    (
        lib.register_op("Tile")
        .input("input: T")
        .input("multiples: Tmultiples")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"Tmultiples: {index} = int32")
        .shape_fn(_tile_shape)
        .doc("Repeat input multiples[i] times along dimension i.")
    )
    (
        lib.register_op("BroadcastTo")
        .input("input: T")
        .input("shape: Tidx")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr(f"Tidx: {index} = int32")
        .shape_fn(_broadcast_to_shape)
        .doc("input broadcast (numpy rules) to the given shape.")
    )
    (
        lib.register_op("Size")
        .input("input: T")
        .output("output: out_type")
        .attr(f"T: {all_types}")
        .attr(f"out_type: {index} = int32")
        .shape_fn(_scalar_shape)
        .doc("The number of elements of input (produced in host memory).")
    )
    (
        lib.register_op("Rank")
        .input("input: T")
        .output("output: int32")
        .attr(f"T: {all_types}")
        .shape_fn(_scalar_shape)
        .doc("The number of dimensions of input (int32, in host memory; as TF, no out_type).")
    )
    (
        lib.register_op("Range")
        .input("start: Tidx")
        .input("limit: Tidx")
        .input("delta: Tidx")
        .output("output: Tidx")
        .attr(
            "Tidx: {float16, float32, float64, int8, int16, int32, int64, uint16, uint32} = int32"
        )
        .shape_fn(_range_shape)
        .doc(
            "start, start + delta, ... up to but excluding limit; delta 0 is an error.",
            "The length is ceil((limit - start) / delta), in integers for integer types. "
            "int8, int16, uint16 and uint32 are computed (TensorFlow's CPU has no kernel for "
            "them).",
        )
    )
    (
        lib.register_op("OneHot")
        .input("indices: TI")
        .input("depth: int32")
        .input("on_value: T")
        .input("off_value: T")
        .attr("axis: int = -1")
        .output("output: T")
        .attr(f"T: {all_types}")
        .attr("TI: {uint8, int8, int32, int64} = int64")
        .shape_fn(_one_hot_shape)
        .doc(
            "on_value where the new dimension (at axis, -1: last) equals the index, "
            "off_value elsewhere; indices outside [0, depth) give rows of off_value."
        )
    )
    (
        lib.register_op("Where")
        .input("input: T")
        .output("index: int64")
        .attr(f"T: {spec((*NUMBERS, bool_))} = bool")
        .shape_fn(_where_shape)
        .doc(
            "The coordinates of the true (non-zero) elements of input, in row-major order: "
            "an int64 matrix [n, rank(input)]; n is known only when it runs.",
            "A scalar is refused when it runs, as by TensorFlow's kernel; the CPU has no "
            "float16 kernel, as TensorFlow's (the GPU plugins take float16).",
        )
    )
    (
        lib.register_op("SelectV2")
        .input("condition: bool")
        .input("t: T")
        .input("e: T")
        .output("output: T")
        .attr(f"T: {all_types}")
        .shape_fn(broadcast_binary_shape)
        .doc("t where condition holds, e elsewhere; the three inputs broadcast together.")
    )
    (
        lib.register_op("ReverseV2")
        .input("tensor: T")
        .input("axis: Tidx")
        .output("output: T")
        .attr(f"Tidx: {index} = int32")
        .attr(f"T: {all_types}")
        .shape_fn(_reverse_shape)
        .doc("Reverse the order of elements along each dimension in axis.")
    )
    (
        lib.register_op("PlaceholderWithDefault")
        .input("input: dtype")
        .output("output: dtype")
        .attr(f"dtype: {all_types}")
        .attr("shape: shape")
        .shape_fn(_placeholder_with_default_shape)
        .doc(
            "input, unless the output is fed: a placeholder with a default value.",
            "shape may be less precise than input's (a feed of another size then fits).",
        )
    )
    (
        lib.register_op("Unique")
        .input("x: T")
        .output("y: T")
        .output("idx: out_idx")
        .attr(f"T: {all_types}")
        .attr(f"out_idx: {index} = int32")
        .shape_fn(_unique_shape)
        .doc(
            "The distinct values of the vector x in the order they first appear (y), and "
            "for each element of x the index of its value in y (idx): x == y[idx].",
            "NaN equals nothing, not even itself, so every NaN is a value of its own "
            "(TensorFlow's hash map compares with ==).",
        )
    )
    (
        lib.register_op("StopGradient")
        .input("input: T")
        .output("output: T")
        .attr(f"T: {all_types}")
        .shape_fn(unchanged_shape)
        .doc("The input, unchanged (an identity when running; it only matters to gradients).")
    )
