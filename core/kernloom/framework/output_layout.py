"""An output laid out in memory as a kernel's inputs are: for elementwise kernels and
concatenations over host (numpy) arrays whose inputs are not in C order.

An NCHW image in NHWC memory (as the torch plugin's oneDNN convolutions give) read by an
elementwise kernel writing C order would stream through its inputs with a stride, and the
next convolution would have to transpose it back; written in the inputs' order, neither.
The same holds for a concatenation of such images (Inception's and DenseNet's channel
concats): in C order each input is transposed on the way in, and each reader of the
result (a convolution, a pooling) transposes it back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kernloom.framework.op_kernel import OpKernelContext

__all__ = [
    "Concatenate",
    "Copy",
    "concat_output",
    "elementwise_output",
    "memory_order",
    "same_layout_output",
    "transpose_output",
]

Array = np.ndarray[Any, Any]


def same_layout_output(ctx: OpKernelContext, whole: Sequence[Array], shape: Any) -> Array | None:
    """An output laid out in memory as the full-shape inputs are, where they all share one
    layout other than C order (``memory_order``; an NCHW image in NHWC memory, as the torch
    plugin's convolutions give): written in that order, the ufuncs stream through every
    operand, and the next convolution gets its layout back without a transpose. None
    otherwise (C order, a sliced view with gaps, layouts that differ)."""
    order = memory_order(whole)
    return None if order is None else _output_in_order(ctx, order, shape)


def elementwise_output(
    ctx: OpKernelContext,
    inputs: Sequence[Array],
    shape: Any,
    shapes: Sequence[tuple[int, ...]] | None = None,
) -> Array:
    """The output of an elementwise kernel over host arrays: laid out as its inputs of the
    output's shape are (``same_layout_output``), else the buffer of one of them that
    nothing else holds, else a new C-order buffer. ``shapes``: the inputs' shapes, where
    the kernel has them already (a numpy array makes a new tuple each time it is asked:
    0.1 µs an input, on a fused node of 1000 constant operands)."""
    shape = tuple(shape)
    if shapes is None:
        shapes = [x.shape for x in inputs]
    whole = [i for i, s in enumerate(shapes) if s == shape]
    out = same_layout_output(ctx, [inputs[i] for i in whole], shape)
    return out if out is not None else ctx.forward_input_or_allocate_output(whole, 0, shape)


def memory_order(arrays: Sequence[Array]) -> list[int] | None:
    """The axis order in which every array of ``arrays`` is C-contiguous (``x.transpose(
    order)`` is a C-order array), when they share one other than C order: e.g. ``[0, 2, 3,
    1]`` for NCHW images in NHWC memory. None for C order, empty arrays, or no shared order."""
    if not arrays or arrays[0].ndim < 2 or arrays[0].flags.c_contiguous:
        return None
    first = arrays[0]
    if first.size == 0 or min(first.strides) <= 0:
        return None
    order = sorted(range(first.ndim), key=lambda axis: -first.strides[axis])
    for x in arrays:
        if x.size == 0 or x.ndim != first.ndim or not x.transpose(order).flags.c_contiguous:
            return None
    return order


Concatenate = Callable[[list[Array], int, Array], object]
"""``(values, axis, out)``: joins C-contiguous ``values`` along ``axis`` into ``out``."""


def concat_output(
    ctx: OpKernelContext,
    values: Sequence[Array],
    axis: int,
    shape: Any,
    concatenate: Concatenate | None = None,
) -> bool:
    """Concatenate ``values`` along ``axis`` into output 0 of ``shape`` laid out in their
    shared memory order (``memory_order``); False, with nothing done, when they share
    none (the kernel then writes C order). ``concatenate`` does the copying (numpy's by
    default; a kernel passes its library's, as the torch plugin passes ``torch.cat``)."""
    order = memory_order(values)
    if order is None:
        return False
    out = _output_in_order(ctx, order, shape)
    joined, axis_in_order = [v.transpose(order) for v in values], order.index(axis)
    if concatenate is None:
        np.concatenate(joined, axis=axis_in_order, out=out.transpose(order))
    else:
        concatenate(joined, axis_in_order, out.transpose(order))
    return True


Copy = Callable[[Array, Array], object]
"""``(out, source)``: copies ``source`` into ``out`` of the same shape."""


def transpose_output(
    ctx: OpKernelContext, x: Array, perm: Sequence[int], keep_layout: bool, copy: Copy | None = None
) -> None:
    """Output 0: ``x`` with its axes permuted by ``perm``.

    A view where that is already C order, or (``keep_layout``) an NCHW image in NHWC
    memory, as a ``Reshape``'s output is a view (a view is never overwritten in place, and
    a fetched one is copied). Otherwise a copy, by ``copy`` (numpy's by default), laid out
    (``keep_layout``) with its axes in the input's memory order where that is not C order
    (``memory_order``), else in C order. Keeping the order is what makes a channel shuffle
    of an NHWC-memory image (ShuffleNet's Reshape, Transpose, Reshape) cost one copy: its
    result stays NHWC, so the Reshape after it is a view and the next convolution reads it
    as it is; in C order the shuffle's result is NCHW, which that convolution converts back."""
    permuted = x.transpose(perm)
    if permuted.flags.c_contiguous or (keep_layout and _channels_last(permuted)):
        ctx.set_output(0, permuted)
        return
    order = memory_order([x]) if keep_layout else None
    if order is None:
        out = ctx.allocate_output(0, permuted.shape)
    else:
        out = _output_in_order(ctx, order, permuted.shape)
    if copy is None:
        np.copyto(out, permuted)
    else:
        copy(out, permuted)


def _channels_last(x: Array) -> bool:
    """An NCHW image in NHWC memory: the layout the torch plugin's convolutions and
    poolings give and take, which every CPU kernel reads."""
    return bool(x.ndim == 4 and x.transpose(0, 2, 3, 1).flags.c_contiguous)


def _output_in_order(ctx: OpKernelContext, order: list[int], shape: Any) -> Array:
    """Output 0 of ``shape``, set now, stored with its axes in ``order``."""
    buffer = ctx.allocate_temp(tuple(shape[a] for a in order), ctx.signature.output_dtypes[0])
    # The inverse permutation in Python: np.argsort of a short list costs 2 µs more, on
    # every concatenation and elementwise kernel of an NHWC-memory model.
    out: Array = buffer.transpose(sorted(range(len(order)), key=order.__getitem__))
    ctx.set_output(0, out)
    return out
