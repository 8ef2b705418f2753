"""Batched linear algebra kernels (BatchMatMulV2, Einsum).

Written over the array module ``xp`` (CuPy; numpy in tests). BatchMatMulV2 is one
``xp.matmul`` into the output (cuBLAS batched GEMM on CuPy; CuPy also multiplies integer
matrices). Einsum parses its equation once per kernel and runs ``xp.einsum`` on the
plan's subscripts; an output that repeats a label is written along the diagonal of a
zeroed buffer through a strided view.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

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

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
BATCH_MATMUL_TYPES = tuple(d for d in t.NUMBERS if d is not kl.int8)
"""TensorFlow's list: every number type but int8 (and bfloat16, which numpy lacks)."""


def _einsum_kernel(xp: ModuleType) -> type[OpKernel]:
    class Einsum(OpKernel):
        """The equation is parsed once per kernel; each run checks the shapes against it."""

        def __init__(self, ctx: OpKernelConstruction) -> None:
            super().__init__(ctx)
            self._equation = EinsumEquation.parse(ctx, str(ctx.attr("equation")))

        def compute(self, ctx: OpKernelContext) -> None:
            inputs = ctx.input_list("inputs")
            plan = self._equation.plan(ctx, [x.shape for x in inputs])
            out = ctx.allocate_output(0, plan.shape)
            result = xp.einsum(plan.subscripts, *inputs, optimize=len(inputs) > 1)
            if plan.inflate is None:
                xp.copyto(out, result)
                return
            out.fill(0)
            strides = plan.diagonal_strides(out.strides)
            xp.copyto(xp.lib.stride_tricks.as_strided(out, plan.unique_shape, strides), result)

    Einsum.__qualname__ = f"{xp.__name__}_Einsum"
    return Einsum


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""

    def adjoint(a: Any) -> Any:
        swapped = xp.swapaxes(a, -1, -2)
        return xp.conj(swapped) if a.dtype.kind == "c" else swapped

    def batch_matmul(ctx: OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        adj_x, adj_y = bool(ctx.attr("adj_x")), bool(ctx.attr("adj_y"))
        out = ctx.allocate_output(0, batch_matmul_shape(ctx, x.shape, y.shape, adj_x, adj_y))
        xp.matmul(adjoint(x) if adj_x else x, adjoint(y) if adj_y else y, out=out)

    def gpu(op: str, types: tuple[Any, ...] | None) -> Any:
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints={"T": types})

    gpu("BatchMatMulV2", BATCH_MATMUL_TYPES)(batch_matmul)
    gpu("Einsum", t.OP_TYPES)(_einsum_kernel(xp))
