"""Array kernels: constants, placeholders, identity, reshaping and rearranging."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import (
    KernelLibrary,
    OpKernelContext,
    check_permutation,
    concat_output,
    concat_shape,
    fill_dims,
    reshape_dims,
)
from kernloom.plugin import types as t

__all__ = ["register"]

CPU = "CPU"

KEEP_LAYOUT: bool = True
"""Whether Concat and Transpose keep an NHWC-memory image's layout (read on every call:
``benchmarks/bench_layout.py`` sets it False to measure what keeping it saves)."""


def reshape(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    ctx.set_output(0, x.reshape(reshape_dims(ctx, x.shape, ctx.input(1))))


def transpose(ctx: OpKernelContext) -> None:
    """A copy in C order, except where the permuted input already is in C order (an NCHW
    image in NHWC memory permuted to NHWC, as the ONNX importer does around an LRN; a
    permutation that moves only axes of size 1) or is an NCHW image in NHWC memory (the
    LRN's NHWC result permuted back): then the view itself, as a ``Reshape``'s output is
    one (a view is never overwritten in place, and a fetched one is copied)."""
    x = ctx.input(0)
    perm = check_permutation(ctx, x.ndim, ctx.input(1))
    permuted = np.transpose(x, perm)
    if permuted.flags.c_contiguous or (KEEP_LAYOUT and _channels_last(permuted)):
        ctx.set_output(0, permuted)
        return
    out = ctx.allocate_output(0, permuted.shape)
    np.copyto(out, permuted)


def _channels_last(x: Any) -> bool:
    """An NCHW image in NHWC memory: the layout the torch plugin's convolutions and
    poolings give and take, which every CPU kernel reads (``kernloom.plugin.memory_order``)."""
    return bool(x.ndim == 4 and x.transpose(0, 2, 3, 1).flags.c_contiguous)


def concat(ctx: OpKernelContext) -> None:
    """Into the inputs' shared memory order where they have one other than C order
    (``concat_output``), else C order."""
    values = ctx.input_list("values")
    axis, shape = concat_shape(ctx, [v.shape for v in values], ctx.input("axis"))
    if KEEP_LAYOUT and concat_output(ctx, values, axis, shape):
        return
    out = ctx.allocate_output(0, shape)
    np.concatenate(values, axis=axis, out=out)


def fill(ctx: OpKernelContext) -> None:
    value = ctx.input(1)
    out = ctx.allocate_output(0, fill_dims(ctx, ctx.input(0), np.shape(value)))
    out.fill(value.reshape(()))  # a value of shape [1] is TensorFlow's legacy scalar


def _filled(fill_value: Any) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        ctx.forward_input_or_allocate_output([0], 0, x.shape).fill(fill_value)

    return compute


def shape(ctx: OpKernelContext) -> None:
    out = ctx.allocate_output(0, (ctx.input(0).ndim,))
    out[...] = ctx.input(0).shape


def register(lib: KernelLibrary) -> None:
    def cpu(op: str, **kw: Any) -> Any:
        return lib.kernel(op, device=CPU, backend="numpy", **kw)

    cpu("Reshape", host_memory=["shape"], expensive=False)(reshape)
    cpu("Transpose", host_memory=["perm"])(transpose)
    cpu("ConcatV2", host_memory=["axis"])(concat)
    cpu("Fill", host_memory=["dims"])(fill)
    cpu("ZerosLike", type_constraints={"T": t.OP_TYPES})(_filled(0))
    cpu("OnesLike", type_constraints={"T": t.OP_TYPES})(_filled(1))
    cpu("Shape", host_memory=["output"], expensive=False)(shape)
