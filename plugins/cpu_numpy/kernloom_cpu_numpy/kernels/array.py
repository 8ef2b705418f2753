"""Array kernels: constants, placeholders, identity, reshaping and rearranging."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import (
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    check_permutation,
    concat_output,
    concat_shape,
    fill_dims,
    reshape_dims,
    tf_reshape_dims,
    transpose_output,
)
from kernloom.plugin import types as t

__all__ = ["register"]

CPU = "CPU"

KEEP_LAYOUT: bool = True
"""Whether Concat and Transpose keep their inputs' layout, an NHWC-memory image's (read on
every call: ``benchmarks/bench_layout.py`` sets it False to measure what keeping it saves)."""


class Reshape(OpKernel):
    """``x.reshape``: a view wherever numpy can make one (always for C order; for an NCHW
    image in NHWC memory, whenever the split or merged axes stay adjacent in memory).

    The direct entry (no context) reshapes where the target shape is valid and the result
    is a view, and keeps the complete target worked out for a constant shape array (the
    same read-only object every run) and an input shape: a ShuffleNet run has 33
    Reshapes, which took 6.4 µs a node through the context and the checks."""

    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._kept: tuple[Any, tuple[int, ...], list[int]] | None = None
        self.direct = self._direct

    def compute(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        ctx.set_output(0, x.reshape(reshape_dims(ctx, x.shape, ctx.input(1))))

    def _direct(self, reuse: int, x: Any, target: Any) -> Any:
        kept = self._kept
        if kept is not None and kept[0] is target and kept[1] == x.shape:
            dims = kept[2]
        else:
            if np.ndim(target) > 1:
                return NotImplemented  # compute explains
            found = tf_reshape_dims(x.shape, [int(d) for d in np.asarray(target).reshape(-1)])
            if isinstance(found, str):
                return NotImplemented
            dims = found
            if isinstance(target, np.ndarray) and not target.flags.writeable:
                self._kept = (target, x.shape, dims)
        y = x.reshape(dims)
        if x.flags.c_contiguous or np.may_share_memory(y, x):
            return y
        return NotImplemented  # a copy: compute makes it, as the context's output


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

    cpu("Reshape", host_memory=["shape"])(Reshape)
    cpu("Transpose", host_memory=["perm"])(transpose)
    cpu("ConcatV2", host_memory=["axis"])(concat)
    cpu("Fill", host_memory=["dims"])(fill)
    cpu("ZerosLike", type_constraints={"T": t.OP_TYPES})(_filled(0))
    cpu("OnesLike", type_constraints={"T": t.OP_TYPES})(_filled(1))
    cpu("Shape", host_memory=["output"], expensive=False)(shape)
