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
    transpose_output,
)
from kernloom.plugin import types as t

__all__ = ["register"]

CPU = "CPU"

KEEP_LAYOUT: bool = True
"""Whether Concat and Transpose keep their inputs' layout, an NHWC-memory image's (read on
every call: ``benchmarks/bench_layout.py`` sets it False to measure what keeping it saves)."""


def reshape(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    ctx.set_output(0, x.reshape(reshape_dims(ctx, x.shape, ctx.input(1))))


def transpose(ctx: OpKernelContext) -> None:
    """A view where the permuted input is C order or an NCHW image in NHWC memory (as the
    ONNX importer's transposes around an LRN give), else a copy in the input's memory order
    (``transpose_output``)."""
    x = ctx.input(0)
    transpose_output(ctx, x, check_permutation(ctx, x.ndim, ctx.input(1)), KEEP_LAYOUT)


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
