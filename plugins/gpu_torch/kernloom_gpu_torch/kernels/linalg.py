"""Batched linear algebra kernels with torch (BatchMatMulV2, Einsum, the band and diagonal
ops, the determinants, inverse, Cholesky and solvers).

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

The band and diagonal ops (every dtype) are a masked ``torch.where`` and one indexed
gather/scatter with ``kernloom.plugin.DiagBand``'s positions. The decompositions are
``torch.linalg``'s batched ``_ex`` routines, whose per-matrix info gives TensorFlow's
answers without an exception for the batch: the inverse and MatrixSolve factor once
(``lu_factor_ex``) and fail where a pivot is zero or NaN (Eigen's check); Cholesky
writes NaN in the lower triangle of a matrix ``cholesky_ex`` finds not positive definite;
MatrixTriangularSolve is ``solve_triangular``, which broadcasts the batch dimensions.
"""

from __future__ import annotations

from typing import Any

import torch

from kernloom.plugin import (
    DiagBand,
    EinsumEquation,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    band_limits,
    band_mask,
    batch_matmul_shape,
    diag_range,
    matrix_diag_size,
    solve_shape,
    square_batch,
    triangular_solve_shape,
)
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels import packed_matmul
from kernloom_gpu_torch.kernels._util import (
    cpu_kernel,
    host_input,
    output,
    tensor_input,
    tensor_inputs,
)

__all__ = ["CPU_BATCH_MATMUL_PRIORITY", "LINALG_TYPES", "register"]

GPU = "GPU"
BACKEND = "torch"
CPU_LABEL = "torch"
LINALG_TYPES = (*d.FLOATS, *t.COMPLEX)
DECOMPOSITION_TYPES = tuple(x for x in LINALG_TYPES if x.name != "float16")
"""TensorFlow's CPU kernels' dtypes for the determinants, Cholesky and solvers (no half)."""
INVERSE_TYPES = LINALG_TYPES
"""MatrixInverse also takes float16 (inverted in float32)."""
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


# -- MatrixBandPart and the diagonal ops --------------------------------------------------------


def _matrices(ctx: OpKernelContext, x: torch.Tensor) -> tuple[int, int]:
    if x.dim() < 2:
        raise ctx.fail(f"input must be at least 2-dim, received shape: {list(x.shape)}")
    return int(x.shape[-2]), int(x.shape[-1])


def _scalar(ctx: OpKernelContext, name: str, value: torch.Tensor) -> torch.Tensor:
    if value.dim() != 0:
        raise ctx.fail(f"{name} must be a scalar, received shape {list(value.shape)}")
    return value


def _indices(band: DiagBand, device: torch.device) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(v).to(device) for v in band.indices())


def band_part(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    rows, cols = _matrices(ctx, x)
    lower, upper = band_limits(ctx, rows, cols, host_input(ctx, 1), host_input(ctx, 2))
    mask = torch.from_numpy(band_mask(rows, cols, lower, upper)).to(x.device)
    out = output(ctx, 0, x.shape)
    torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device), out=out)


def diag_part(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    padding = _scalar(ctx, "padding_value", tensor_input(ctx, 2))
    rows, cols = _matrices(ctx, x)
    align = str(ctx.attr("align"))
    band = DiagBand.checked(ctx, rows, cols, *diag_range(ctx, host_input(ctx, 1)), align)
    batch = tuple(x.shape[:-2])
    packed = output(ctx, 0, band.packed_shape(batch)).view(*batch, band.num_diags, band.max_len)
    packed.copy_(padding.expand(packed.shape))
    i, p, r, c = _indices(band, x.device)
    packed[..., i, p] = x[..., r, c]


def set_diag(ctx: OpKernelContext) -> None:
    x, diagonal = tensor_input(ctx, 0), tensor_input(ctx, 1)
    rows, cols = _matrices(ctx, x)
    align = str(ctx.attr("align"))
    band = DiagBand.checked(ctx, rows, cols, *diag_range(ctx, host_input(ctx, 2)), align)
    batch = band.check_diagonal(ctx, tuple(x.shape), tuple(diagonal.shape))
    out = output(ctx, 0, x.shape)
    out.copy_(x)
    i, p, r, c = _indices(band, x.device)
    out[..., r, c] = diagonal.reshape(*batch, band.num_diags, band.max_len)[..., i, p]


def matrix_diag(ctx: OpKernelContext) -> None:
    diagonal = tensor_input(ctx, 0)
    lower, upper = diag_range(ctx, host_input(ctx, 1))
    num_rows, num_cols = host_input(ctx, 2), host_input(ctx, 3)
    for name, value in (("num_rows", num_rows), ("num_cols", num_cols)):
        if value.ndim != 0:
            raise ctx.fail(f"{name} must be a scalar, received shape {list(value.shape)}")
    padding = _scalar(ctx, "padding_value", tensor_input(ctx, 4))
    shape = tuple(diagonal.shape)
    rows, cols = matrix_diag_size(ctx, shape, lower, upper, int(num_rows), int(num_cols))
    band = DiagBand(rows, cols, lower, upper, str(ctx.attr("align")))
    batch = shape[: -2 if band.num_diags > 1 else -1]
    out = output(ctx, 0, (*batch, rows, cols))
    out.copy_(padding.expand(out.shape))
    i, p, r, c = _indices(band, diagonal.device)
    out[..., r, c] = diagonal.reshape(*batch, band.num_diags, band.max_len)[..., i, p]


# -- the decompositions and solvers --------------------------------------------------------------


def _undefined(a: torch.Tensor) -> tuple[torch.Tensor, complex | float]:
    """Per matrix, where TensorFlow's determinant is NaN (a NaN entry; complex: any entry
    not finite), and that NaN."""
    if a.is_complex():
        return ~torch.isfinite(a).all(-1).all(-1), complex(float("nan"), float("nan"))
    return torch.isnan(a).any(-1).any(-1), float("nan")


def determinant(ctx: OpKernelContext) -> None:
    a = tensor_input(ctx, 0)
    out = output(ctx, 0, square_batch(ctx, tuple(a.shape)))
    if out.numel() == 0:
        return
    if a.shape[-1] == 0:
        out.fill_(1)
        return
    undefined, nan = _undefined(a)
    out.copy_(torch.linalg.det(a).masked_fill(undefined, nan))


def log_determinant(ctx: OpKernelContext) -> None:
    a = tensor_input(ctx, 0)
    batch = square_batch(ctx, tuple(a.shape))
    sign, log_abs = output(ctx, 0, batch), output(ctx, 1, batch)
    if sign.numel() == 0:
        return
    if a.shape[-1] == 0:
        sign.fill_(1)
        log_abs.fill_(0)
        return
    s, la = torch.linalg.slogdet(a)
    undefined, nan = _undefined(a)
    sign.copy_(s.masked_fill(undefined, nan))
    log_abs.copy_(la.masked_fill(undefined, float("nan")))


def _factor(ctx: OpKernelContext, m: torch.Tensor, message: str) -> tuple[torch.Tensor, ...]:
    """The LU factors of every matrix; an error if any pivot is zero or NaN (Eigen's test,
    ``min |pivot| > 0``, which a NaN fails)."""
    lu, pivots, _ = torch.linalg.lu_factor_ex(m)
    if not bool((lu.diagonal(dim1=-2, dim2=-1).abs() > 0).all()):
        raise ctx.fail(message)
    return lu, pivots


def inverse(ctx: OpKernelContext) -> None:
    a = tensor_input(ctx, 0)
    square_batch(ctx, tuple(a.shape))
    out = output(ctx, 0, a.shape)
    if out.numel() == 0:
        return
    m = a.mH if ctx.attr("adjoint") else a
    if m.dtype == torch.float16:  # no half LU: float32, rounded once
        m = m.float()
    lu, pivots = _factor(ctx, m, "Input is not invertible.")
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device).expand(m.shape)
    out.copy_(torch.linalg.lu_solve(lu, pivots, eye))


def cholesky(ctx: OpKernelContext) -> None:
    a = tensor_input(ctx, 0)
    square_batch(ctx, tuple(a.shape))
    out = output(ctx, 0, a.shape)
    if out.numel() == 0:
        return
    hermitian = torch.tril(a) + torch.tril(a, -1).mH  # the lower triangle is all it reads
    factor, info = torch.linalg.cholesky_ex(hermitian)
    n = a.shape[-1]
    lower = torch.ones(n, n, dtype=torch.bool, device=a.device).tril()
    bad = (info != 0)[..., None, None] & lower
    out.copy_(torch.tril(factor).masked_fill(bad, float("nan")))


def solve(ctx: OpKernelContext) -> None:
    matrix, rhs = tensor_input(ctx, 0), tensor_input(ctx, 1)
    out = output(ctx, 0, solve_shape(ctx, tuple(matrix.shape), tuple(rhs.shape)))
    if out.numel() == 0:
        return
    lu, pivots = _factor(ctx, matrix, "Input matrix is not invertible.")
    out.copy_(torch.linalg.lu_solve(lu, pivots, rhs, adjoint=bool(ctx.attr("adjoint"))))


def triangular_solve(ctx: OpKernelContext) -> None:
    matrix, rhs = tensor_input(ctx, 0), tensor_input(ctx, 1)
    out = output(ctx, 0, triangular_solve_shape(ctx, tuple(matrix.shape), tuple(rhs.shape)))
    if out.numel() == 0:
        return
    lower = bool(ctx.attr("lower"))
    t = torch.tril(matrix) if lower else torch.triu(matrix)
    if ctx.attr("adjoint"):
        t, lower = t.mH, not lower
    out.copy_(torch.linalg.solve_triangular(t, rhs, upper=not lower))


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``: the GPU's, and BatchMatMulV2 on the CPU."""

    def kernel(op: str, device: str, backend: str, **kw: Any) -> Any:
        types = {"T": LINALG_TYPES}
        return lib.kernel(op, device=device, backend=backend, type_constraints=types, **kw)

    kernel("BatchMatMulV2", GPU, BACKEND)(torch_batch_matmul)
    kernel("Einsum", GPU, BACKEND)(Einsum)

    def gpu(op: str, types: tuple[Any, ...], *host: str) -> Any:
        return lib.kernel(
            op,
            device=GPU,
            backend=BACKEND,
            type_constraints={"T": types},
            host_memory=list(host),
        )

    gpu("MatrixBandPart", d.ALL, "num_lower", "num_upper")(band_part)
    gpu("MatrixDiagV3", d.ALL, "k", "num_rows", "num_cols")(matrix_diag)
    gpu("MatrixDiagPartV3", d.ALL, "k")(diag_part)
    gpu("MatrixSetDiagV3", d.ALL, "k")(set_diag)
    gpu("MatrixDeterminant", DECOMPOSITION_TYPES)(determinant)
    gpu("LogMatrixDeterminant", DECOMPOSITION_TYPES)(log_determinant)
    gpu("MatrixInverse", INVERSE_TYPES)(inverse)
    gpu("Cholesky", DECOMPOSITION_TYPES)(cholesky)
    gpu("MatrixSolve", DECOMPOSITION_TYPES)(solve)
    gpu("MatrixTriangularSolve", DECOMPOSITION_TYPES)(triangular_solve)
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
