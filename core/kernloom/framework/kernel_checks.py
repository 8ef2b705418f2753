"""Run-time checks every backend's kernels make, written once.

Shape inference catches most mistakes when a graph is built, but shapes can be unknown
until a value arrives, so kernels check again. The rules (what broadcasts, which axes are
legal, what a reshape may do) belong to the op, not to numpy, CuPy or torch: these
helpers take plain shapes (tuples) and host-memory values, raise ``ctx.fail(...)`` with the
same message on every device, and return what the kernel needs to compute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from kernloom.framework.op_kernel import OpKernelContext

__all__ = [
    "add_n_shape",
    "argmax_axis",
    "axes_of",
    "bias_channel",
    "bitcast_dims",
    "broadcast_shape",
    "check_bias",
    "check_permutation",
    "concat_shape",
    "fill_dims",
    "matmul_shape",
    "reduced_shape",
    "reduction_axes",
    "reshape_dims",
    "select_condition_shape",
    "tf_reshape_dims",
]

Shape = tuple[int, ...]


class Fails(Protocol):
    """A kernel's or a shape function's context: what names the node in an error."""

    def fail(self, message: str) -> Exception: ...


def axes_of(ctx: OpKernelContext, value: Any, rank: int, what: str) -> Shape:
    """Axes from a host-memory scalar or vector input, normalised, sorted and checked."""
    axes = [int(a) for a in np.asarray(value).reshape(-1)]
    for axis in axes:
        if not -rank <= axis < max(rank, 1):
            raise ctx.fail(f"{what} {axis} is out of range for an input of rank {rank}")
    return tuple(sorted({a % rank if rank else 0 for a in axes}))


def reduction_axes(ctx: OpKernelContext, value: Any, rank: int) -> Shape:
    """The axes of a reduction (Sum, Mean, Max, ...), as TensorFlow's kernel checks them:
    each in [-rank, rank) (so a scalar input has no axis 0), no axis twice. Any shape of
    axes is read flat, as its kernel does (its shape function wants a scalar or vector)."""
    axes = [int(a) for a in np.asarray(value).reshape(-1)]
    seen: set[int] = set()
    for axis in axes:
        if not -rank <= axis < rank:
            raise ctx.fail(f"reduction index {axis} is out of range for an input of rank {rank}")
        if axis % rank in seen:
            raise ctx.fail(
                f"Invalid reduction arguments: axes {axes} contain dimension {axis % rank} twice"
            )
        seen.add(axis % rank)
    return tuple(sorted(seen))


def broadcast_shape(ctx: OpKernelContext, *shapes: Sequence[int]) -> Shape:
    """The shape ``shapes`` broadcast to (numpy's rule, as TensorFlow's binary ops), or the
    node's error. Two equal shapes, or one of them a scalar's, are answered without numpy's
    ``broadcast_shapes`` (about 1 µs, a quarter of a small elementwise node's step)."""
    if len(shapes) == 2:
        a, b = shapes
        if a == b or not b:
            return tuple(a)
        if not a:
            return tuple(b)
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        raise ctx.fail(
            f"shapes {', '.join(str(list(s)) for s in shapes)} cannot be broadcast together"
        ) from None


def reduced_shape(shape: Sequence[int], axes: Shape, keep_dims: bool) -> Shape:
    """The output shape of a reduction over ``axes`` (already normalised)."""
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep_dims or i not in axes)


def matmul_shape(
    ctx: OpKernelContext, a: Sequence[int], b: Sequence[int], transpose_a: bool, transpose_b: bool
) -> Shape:
    """``[m, n]`` of the product, after checking both operands are matrices that fit."""
    if len(a) != 2 or len(b) != 2:
        raise ctx.fail(f"MatMul takes matrices, got shapes {list(a)} and {list(b)}")
    ta = (a[1], a[0]) if transpose_a else tuple(a)
    tb = (b[1], b[0]) if transpose_b else tuple(b)
    if ta[1] != tb[0]:
        raise ctx.fail(f"inner dimensions differ: {list(ta)} x {list(tb)} (after transposes)")
    return (ta[0], tb[1])


def bias_channel(
    ctx: OpKernelContext, value: Sequence[int], bias: Sequence[int], data_format: str
) -> int:
    """The dimension of ``value`` the bias runs along: the last, or 1 for NCHW. A matrix
    has its channels last either way (TensorFlow's kernel; its shape function refuses a
    matrix in NCHW)."""
    if len(value) < 2 or len(bias) != 1:
        raise ctx.fail(
            f"value must have rank >= 2 and bias rank 1, got {list(value)} and {list(bias)}"
        )
    channel = 1 if data_format == "NCHW" and len(value) > 2 else len(value) - 1
    if value[channel] != bias[0]:
        raise ctx.fail(
            f"bias has shape {tuple(bias)}; it needs ({value[channel]},), one value per entry "
            f"of value dimension {channel}"
        )
    return channel


def check_bias(ctx: Any, bias: Sequence[int], channels: int) -> None:
    """A fused op's bias: one value per output channel (column). ``ctx`` is anything with
    ``fail`` (a kernel's context, or a wrapper naming part of a fused node). The same words
    as ``bias_channel``'s for the same mistake, fused or not."""
    if tuple(int(d) for d in bias) != (channels,):
        raise ctx.fail(f"bias has shape {tuple(int(d) for d in bias)}; it needs ({channels},)")


def reshape_dims(ctx: OpKernelContext, shape: Sequence[int], target: Any) -> list[int]:
    """The complete target shape (its ``-1`` resolved) for a value of ``shape``."""
    if np.ndim(target) > 1:
        raise ctx.fail(f"shape must be a vector, got a tensor of shape {list(np.shape(target))}")
    # A scalar shape is TensorFlow's legacy spelling of a vector of one.
    dims = tf_reshape_dims(shape, [int(d) for d in np.asarray(target).reshape(-1)])
    if isinstance(dims, str):
        raise ctx.fail(dims)
    return dims


def tf_reshape_dims(shape: Sequence[int], target: Sequence[int]) -> list[int] | str:
    """TensorFlow's reshape rule (``reshape_op.h``): the complete target shape, or why not.

    A zero in ``target`` is left out of the product, and so are the input's zero
    dimensions when ``target`` has one, so that the ``-1`` of ``[0, 3] -> [-1, 0]`` is
    still 3 (numpy refuses that reshape)."""
    dims = list(target)
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        return f"shape {dims} may hold at most one -1 and no other negative value"
    size = math.prod(shape)
    if -1 in dims:
        has_zero = 0 in dims
        product = math.prod(d for d in dims if d > 0)
        elements = math.prod(n for n in shape if n > 0 or not has_zero)
        input_has_zero = has_zero and 0 in shape
        missing = elements // product
        if not input_has_zero and elements != product * missing:
            return (
                f"cannot reshape {size} elements into {dims} (from shape {list(shape)}): "
                f"{size} is not a multiple of {product}"
            )
        dims[dims.index(-1)] = missing
    if math.prod(dims) != size:
        return f"cannot reshape a tensor of shape {list(shape)} ({size} elements) into {dims}"
    return dims


def select_condition_shape(
    ctx: OpKernelContext, condition: Sequence[int], then: Sequence[int], otherwise: Sequence[int]
) -> Shape:
    """TensorFlow's ``Select`` (not ``SelectV2``): ``then`` and ``otherwise`` have one shape,
    and the condition is a scalar, has that shape, or is a vector that picks rows (its
    length the first dimension of ``then``). The shape the condition broadcasts as."""
    if tuple(then) != tuple(otherwise):
        raise ctx.fail(
            f"'then' and 'else' must have the same shape, got {list(then)} and {list(otherwise)}"
        )
    if len(condition) == 0 or tuple(condition) == tuple(then):
        return tuple(condition)
    if len(condition) == 1 and len(then) > 1:
        if condition[0] != then[0]:
            raise ctx.fail(
                f"Number of batches of 'then' must match size of 'cond', but saw: "
                f"{then[0]} vs. {condition[0]}"
            )
        return (condition[0],) + (1,) * (len(then) - 1)
    raise ctx.fail(
        f"condition of shape {list(condition)} must be a scalar, a vector of length "
        f"then.shape[0] or have then's shape {list(then)} (SelectV2 broadcasts)"
    )


def check_permutation(ctx: OpKernelContext, rank: int, perm: Any) -> list[int]:
    """Transpose's ``perm``: a vector of the ``rank`` dimensions, each once; negative
    entries count from the end, as TensorFlow's kernel reads them."""
    if np.ndim(perm) != 1:
        raise ctx.fail(f"perm must be a vector, got shape {list(np.shape(perm))}")
    given = [int(p) for p in np.asarray(perm)]
    if len(given) != rank or any(not -rank <= p < rank for p in given):
        raise ctx.fail(f"perm {given} is not a permutation of the {rank} dimensions of the input")
    dims = [p % rank for p in given]
    if sorted(dims) != list(range(rank)):
        raise ctx.fail(f"perm {dims} is not a permutation of the {rank} dimensions of the input")
    return dims


def concat_shape(
    ctx: OpKernelContext, shapes: Sequence[Sequence[int]], axis_value: Any
) -> tuple[int, Shape]:
    """The (normalised) axis and the output shape of concatenating values of ``shapes``."""
    rank = len(shapes[0])
    if rank == 0:
        raise ctx.fail("cannot concatenate scalars; reshape them to vectors first")
    (axis,) = axes_of(ctx, axis_value, rank, "axis")
    first = shapes[0]
    for i, s in enumerate(shapes):
        if len(s) != rank or any(s[d] != first[d] for d in range(rank) if d != axis):
            raise ctx.fail(
                f"values[{i}] has shape {list(s)}, incompatible with values[0]'s "
                f"{list(first)} for concatenation along axis {axis}"
            )
    out = list(first)
    out[axis] = sum(s[axis] for s in shapes)
    return axis, tuple(out)


def fill_dims(ctx: OpKernelContext, dims: Any, value_shape: Sequence[int]) -> Shape:
    """Fill's output shape. As TensorFlow's kernel, a value of shape [1] is a scalar and
    scalar dims a vector of one (legacy forms; the shape function wants rank 0 and 1)."""
    if len(value_shape) != 0 and tuple(value_shape) != (1,):
        raise ctx.fail(f"value must be a scalar, got shape {list(value_shape)}")
    if np.ndim(dims) > 1:
        raise ctx.fail(f"dims must be a vector, got shape {list(np.shape(dims))}")
    shape = tuple(int(d) for d in np.asarray(dims).reshape(-1))
    if any(d < 0 for d in shape):
        raise ctx.fail(f"dims {list(shape)} has a negative dimension")
    return shape


def argmax_axis(ctx: OpKernelContext, shape: Sequence[int], dimension: Any) -> int:
    rank = len(shape)
    if rank == 0:
        raise ctx.fail("ArgMax needs a tensor of rank >= 1")
    if np.ndim(dimension) != 0:
        raise ctx.fail("dimension must be a scalar")
    (axis,) = axes_of(ctx, dimension, rank, "dimension")
    if shape[axis] == 0:
        raise ctx.fail(f"cannot take ArgMax over dimension {axis}, which has size 0")
    return axis


def add_n_shape(ctx: OpKernelContext, shapes: Sequence[Sequence[int]]) -> Shape:
    first = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        if tuple(s) != first:
            raise ctx.fail(f"input {i} has shape {list(s)}, input 0 has {list(first)}")
    return first


def bitcast_dims(
    ctx: Fails, shape: Sequence[int | None], source: Any, target: Any
) -> list[int | None]:
    """Bitcast's output shape (TensorFlow's rule) for dtypes ``source`` -> ``target``:
    the same for types of one size; a narrower target appends ``in_size / out_size``; a
    wider one needs a last dimension of ``out_size / in_size`` and drops it. A dimension
    not known yet (None, when a graph is built) is taken to fit."""
    in_size, out_size = source.numpy_dtype.itemsize, target.numpy_dtype.itemsize
    if in_size == out_size:
        return list(shape)
    if in_size > out_size:
        return [*shape, in_size // out_size]
    ratio = out_size // in_size
    if not shape or (shape[-1] is not None and shape[-1] != ratio):
        found = "a scalar" if not shape else f"of shape {list(shape)}"
        raise ctx.fail(
            f"Bitcast from {source.name} to {target.name} needs an input whose last "
            f"dimension is {ratio} (the {source.name} values of one {target.name}); the "
            f"input is {found}"
        )
    return list(shape[:-1])
