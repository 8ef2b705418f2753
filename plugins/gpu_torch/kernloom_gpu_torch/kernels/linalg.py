"""Batched linear algebra kernels with torch (BatchMatMulV2, Einsum).

On the torch GPU: floating and complex types (CUDA has no integer matrix products, so
integer BatchMatMulV2 and Einsum nodes stay on the CPU, as integer MatMuls do).

On the numpy CPU device, BatchMatMulV2 is also registered as a CPU kernel that runs
torch on zero-copy ``torch.from_numpy`` views of the numpy buffers: labelled ``torch``
always, and unlabelled at ``CPU_BATCH_MATMUL_PRIORITY`` (above numpy's 0) where torch's
batched product is MKL's and the CPU is Intel's (``packed_matmul.GEMM_LIBRARY``):
``benchmarks/bench_batch_matmul.py`` measured it faster than the numpy kernel on attention
shapes at one thread on an Intel Xeon (0.3x-1.0x of its time), and 2x slower on an AMD
EPYC (1.24x-1.32x of numpy direct against the numpy kernel's 0.53x-0.72x), where MKL runs
its slow path (``benchmarks/BATCH_MATMUL.md``).
"""

from __future__ import annotations

from typing import Any

import torch

from kernloom.plugin import (
    EinsumEquation,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    batch_matmul_shape,
)
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels import packed_matmul
from kernloom_gpu_torch.kernels._util import cpu_kernel, output, tensor_input, tensor_inputs

__all__ = ["CPU_BATCH_MATMUL_PRIORITY", "LINALG_TYPES", "register"]

GPU = "GPU"
BACKEND = "torch"
CPU_LABEL = "torch"
LINALG_TYPES = (*d.FLOATS, *t.COMPLEX)
CPU_BATCH_MATMUL_PRIORITY = 1
"""Above the numpy kernel's 0: the default CPU BatchMatMulV2 where this plugin is installed
on an Intel CPU (module docstring)."""


def _adjoint(a: torch.Tensor) -> torch.Tensor:
    """The conjugate transpose of the last two axes, as a view (torch's lazy conjugation)."""
    return a.mH


def torch_batch_matmul(ctx: OpKernelContext) -> None:
    x, y = tensor_input(ctx, 0), tensor_input(ctx, 1)
    adj_x, adj_y = bool(ctx.attr("adj_x")), bool(ctx.attr("adj_y"))
    shape = batch_matmul_shape(ctx, tuple(x.shape), tuple(y.shape), adj_x, adj_y)
    out = output(ctx, 0, shape)
    if out.numel() == 0:
        return
    torch.matmul(_adjoint(x) if adj_x else x, _adjoint(y) if adj_y else y, out=out)


class Einsum(OpKernel):
    """The equation is parsed once per kernel; ``torch.einsum`` computes the plan's
    subscripts, and a repeated output label is written along a strided diagonal view."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._equation = EinsumEquation.parse(ctx, str(ctx.attr("equation")))

    def compute(self, ctx: OpKernelContext) -> None:
        inputs = tensor_inputs(ctx, "inputs")
        plan = self._equation.plan(ctx, [tuple(x.shape) for x in inputs])
        out = output(ctx, 0, plan.shape)
        result = torch.einsum(plan.subscripts, *inputs)
        if plan.inflate is None:
            out.copy_(result)
            return
        out.zero_()
        strides = plan.diagonal_strides(out.stride())
        torch.as_strided(out, plan.unique_shape, strides).copy_(result)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``: the GPU's, and BatchMatMulV2 on the CPU."""

    def kernel(op: str, device: str, backend: str, **kw: Any) -> Any:
        types = {"T": LINALG_TYPES}
        return lib.kernel(op, device=device, backend=backend, type_constraints=types, **kw)

    kernel("BatchMatMulV2", GPU, BACKEND)(torch_batch_matmul)
    kernel("Einsum", GPU, BACKEND)(Einsum)
    types = {"T": LINALG_TYPES}
    cpu_kernel(lib, "BatchMatMulV2", torch_batch_matmul, type_constraints=types, label=CPU_LABEL)
    if packed_matmul.GEMM_LIBRARY == packed_matmul.MKL:
        cpu_kernel(
            lib,
            "BatchMatMulV2",
            torch_batch_matmul,
            type_constraints=types,
            priority=CPU_BATCH_MATMUL_PRIORITY,
        )
