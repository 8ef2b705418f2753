"""Batched linear algebra kernels (BatchMatMulV2, Einsum).

BatchMatMulV2 is one ``np.matmul`` (BLAS per matrix, numpy's broadcasting of the batch
axes) into the output buffer. Einsum parses its equation once, when the kernel is built.
A two-operand contraction is one ``np.matmul`` after a transpose and reshape of each
operand (TensorFlow's own strategy: batch, free and contracted axes), because
``np.einsum``'s optimiser reaches BLAS only without batch axes and loops in C otherwise
(attention's ``bhqd,bhkd->bhqk``); the rest (diagonals, one-sided sums, one operand) is
``np.einsum``. An output that repeats a label is written along the diagonal of a zeroed
buffer through a strided view.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.plugin import (
    EinsumEquation,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    batch_matmul_shape,
)
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array

__all__ = ["BATCH_MATMUL_TYPES", "register"]

CPU = "CPU"
BATCH_MATMUL_TYPES = tuple(d for d in t.NUMBERS if d is not kl.int8)
"""TensorFlow's list: every number type but int8 (and bfloat16, which numpy lacks)."""


def adjoint(a: Array) -> Array:
    """The conjugate transpose of the last two axes (a view unless a is complex)."""
    swapped = a.swapaxes(-1, -2)
    return np.conjugate(swapped) if a.dtype.kind == "c" else swapped


def batch_matmul(ctx: OpKernelContext) -> None:
    x, y = ctx.input(0), ctx.input(1)
    adj_x, adj_y = bool(ctx.attr("adj_x")), bool(ctx.attr("adj_y"))
    out = ctx.allocate_output(0, batch_matmul_shape(ctx, x.shape, y.shape, adj_x, adj_y))
    a, b = (adjoint(x) if adj_x else x), (adjoint(y) if adj_y else y)
    if x.dtype == np.float16:  # numpy has no half GEMM: BLAS in float32, rounded once
        np.matmul(a.astype(np.float32), b.astype(np.float32), out=out, casting="same_kind")
        return
    np.matmul(a, b, out=out)


def _tokens(subscript: str) -> list[str]:
    """A subscript's axes: its letters, with the ellipsis as the one token '.'."""
    head, found, tail = subscript.partition("...")
    return [*head, *(["."] if found else []), *tail]


def _axes(tokens: list[str], ndim: int) -> tuple[dict[str, int], list[int]]:
    """Each label's axis in an operand of ``ndim``, and the axes its ellipsis covers."""
    covered = ndim - len(tokens) + 1 if "." in tokens else 0
    axes: dict[str, int] = {}
    ellipsis: list[int] = []
    axis = 0
    for token in tokens:
        if token == ".":
            ellipsis = list(range(axis, axis + covered))
            axis += covered
        else:
            axes[token] = axis
            axis += 1
    return axes, ellipsis


def contract_by_matmul(subscripts: str, x: Array, y: Array) -> Array | None:
    """``np.einsum(subscripts, x, y)`` as one ``np.matmul`` of ``x`` arranged as
    ``[..., batch, free, contracted]`` and ``y`` as ``[..., batch, contracted, free]`` (the
    ellipsis axes broadcast as matmul's batch axes do); None where that does not apply:
    nothing contracted, a label repeated within an operand, or one summed on one side."""
    left, output = subscripts.split("->")
    first, second = left.split(",")
    tx, ty, to = _tokens(first), _tokens(second), _tokens(output)
    if len(set(tx)) != len(tx) or len(set(ty)) != len(ty):
        return None
    lx, ly = [a for a in tx if a != "."], [a for a in ty if a != "."]
    contracted = [a for a in lx if a in ly and a not in to]
    if not contracted or any(a not in to for a in lx + ly if (a in lx) != (a in ly)):
        return None
    batch = [a for a in lx if a in ly and a in to]
    free_x, free_y = [a for a in lx if a not in ly], [a for a in ly if a not in lx]
    ax, ex = _axes(tx, x.ndim)
    ay, ey = _axes(ty, y.ndim)
    size = {a: x.shape[i] for a, i in ax.items()} | {a: y.shape[i] for a, i in ay.items()}

    def count(labels: list[str]) -> int:
        return math.prod(size[a] for a in labels)

    x_order, y_order = batch + free_x + contracted, batch + contracted + free_y
    x3 = x.transpose([*ex, *(ax[a] for a in x_order)]).reshape(
        (*(x.shape[e] for e in ex), count(batch), count(free_x), count(contracted))
    )
    y3 = y.transpose([*ey, *(ay[a] for a in y_order)]).reshape(
        (*(y.shape[e] for e in ey), count(batch), count(contracted), count(free_y))
    )
    product: Array = np.matmul(x3, y3)
    ellipsis = product.shape[:-3]
    product = product.reshape((*ellipsis, *(size[a] for a in batch + free_x + free_y)))
    names = batch + free_x + free_y
    order: list[int] = []
    for token in to:
        if token == ".":
            order += range(len(ellipsis))
        else:
            order.append(len(ellipsis) + names.index(token))
    return product.transpose(order)


class Einsum(OpKernel):
    """The equation is parsed once per kernel; each run checks the shapes against it."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._equation = EinsumEquation.parse(ctx, str(ctx.attr("equation")))

    def compute(self, ctx: OpKernelContext) -> None:
        inputs = ctx.input_list("inputs")
        plan = self._equation.plan(ctx, [x.shape for x in inputs])
        out = ctx.allocate_output(0, plan.shape)
        if out.dtype == np.float16:  # no half GEMM in numpy: float32, rounded once at the end
            inputs = [x.astype(np.float32) for x in inputs]
        result = contract_by_matmul(plan.subscripts, *inputs) if len(inputs) == 2 else None
        if result is None:
            result = np.einsum(plan.subscripts, *inputs, optimize=len(inputs) > 1)
        if plan.inflate is None:
            np.copyto(out, result)
            return
        out.fill(0)
        strides = plan.diagonal_strides(out.strides)
        diagonal = np.lib.stride_tricks.as_strided(out, plan.unique_shape, strides)
        np.copyto(diagonal, result)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def cpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints={"T": types}, **kw)

    cpu("BatchMatMulV2", BATCH_MATMUL_TYPES)(batch_matmul)
    cpu("Einsum", t.OP_TYPES)(Einsum)
