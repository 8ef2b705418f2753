"""Array kernels: constants, placeholders, identity, reshaping and rearranging."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom import KernelLibrary, OpKernel, OpKernelContext
from kernloom.ops import types as t
from kernloom_cpu_numpy.kernels._util import axes_of

__all__ = ["register"]

CPU = "CPU"


class PlaceholderKernel(OpKernel):
    is_expensive = False

    def compute(self, ctx: OpKernelContext) -> None:
        raise ctx.fail(
            f"placeholder must be fed: pass a {ctx.attr('dtype')} value of shape "
            f"{ctx.attr('shape')} for it in feed_dict"
        )


def no_op(ctx: OpKernelContext) -> None:
    return None


def reshape(ctx: OpKernelContext) -> None:
    x, shape = ctx.input(0), ctx.input(1)
    if np.ndim(shape) != 1:
        raise ctx.fail(f"shape must be a vector, got a tensor of shape {list(np.shape(shape))}")
    dims = [int(d) for d in shape]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise ctx.fail(f"shape {dims} may hold at most one -1 and no other negative value")
    known = int(np.prod([d for d in dims if d != -1]))
    if -1 in dims:
        if known == 0 or x.size % known:
            raise ctx.fail(f"cannot reshape {x.size} elements into {dims}")
        dims[dims.index(-1)] = x.size // known
    elif known != x.size:
        raise ctx.fail(
            f"cannot reshape a tensor of shape {list(x.shape)} ({x.size} elements) into {dims}"
        )
    ctx.set_output(0, x.reshape(dims))


def transpose(ctx: OpKernelContext) -> None:
    x, perm = ctx.input(0), [int(p) for p in np.asarray(ctx.input(1)).reshape(-1)]
    if sorted(perm) != list(range(x.ndim)):
        raise ctx.fail(f"perm {perm} is not a permutation of the {x.ndim} dimensions of the input")
    out = ctx.allocate_output(0, tuple(x.shape[p] for p in perm))
    np.copyto(out, np.transpose(x, perm))


def concat(ctx: OpKernelContext) -> None:
    values = ctx.input_list("values")
    rank = values[0].ndim
    if rank == 0:
        raise ctx.fail("cannot concatenate scalars; reshape them to vectors first")
    (axis,) = axes_of(ctx, ctx.input("axis"), rank, "axis")
    for i, v in enumerate(values):
        if v.ndim != rank or any(
            v.shape[d] != values[0].shape[d] for d in range(rank) if d != axis
        ):
            raise ctx.fail(
                f"values[{i}] has shape {list(v.shape)}, incompatible with values[0]'s "
                f"{list(values[0].shape)} for concatenation along axis {axis}"
            )
    shape = list(values[0].shape)
    shape[axis] = sum(v.shape[axis] for v in values)
    out = ctx.allocate_output(0, tuple(shape))
    np.concatenate(values, axis=axis, out=out)


def fill(ctx: OpKernelContext) -> None:
    dims, value = ctx.input(0), ctx.input(1)
    if np.ndim(value) != 0:
        raise ctx.fail(f"value must be a scalar, got shape {list(np.shape(value))}")
    shape = tuple(int(d) for d in np.asarray(dims).reshape(-1))
    if any(d < 0 for d in shape):
        raise ctx.fail(f"dims {list(shape)} has a negative dimension")
    ctx.allocate_output(0, shape).fill(value)


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

    cpu("Placeholder")(PlaceholderKernel)
    cpu("NoOp", expensive=False)(no_op)
    cpu("Reshape", host_memory=["shape"], expensive=False)(reshape)
    cpu("Transpose", host_memory=["perm"])(transpose)
    cpu("ConcatV2", host_memory=["axis"])(concat)
    cpu("Fill", host_memory=["dims"])(fill)
    cpu("ZerosLike", type_constraints={"T": t.ALL})(_filled(0))
    cpu("OnesLike", type_constraints={"T": t.ALL})(_filled(1))
    cpu("Shape", host_memory=["output"], expensive=False)(shape)
