"""Batched linear algebra kernels (BatchMatMulV2, Einsum, the band and diagonal ops, the
determinants, inverse, Cholesky and solvers).

Written over the array module ``xp`` (CuPy; numpy in tests). BatchMatMulV2 is one
``xp.matmul`` into the output (cuBLAS batched GEMM on CuPy; CuPy also multiplies integer
matrices). Einsum parses its equation once per kernel and runs ``xp.einsum`` on the
plan's subscripts; an output that repeats a label is written along the diagonal of a
zeroed buffer through a strided view.

The band and diagonal ops are one masked copy or one indexed gather/scatter with
``kernloom.plugin.DiagBand``'s positions. The decompositions are ``xp.linalg``'s batched
routines. CuPy's do not raise for a singular or indefinite matrix (its ``linalg`` check
is off by default) where numpy's raise for the whole batch, so TensorFlow's rules are
tested without their exceptions: a matrix is singular where ``slogdet``'s sign is 0 or
NaN (the inverse and MatrixSolve fail), not positive definite where its smallest
eigenvalue is not positive (Cholesky writes NaN in its lower triangle; one more batched
pass, paid only by Cholesky). There is no triangular solve in both modules: substitution
row by row, each step one batched product.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

import kernloom as kl
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

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
BATCH_MATMUL_TYPES = tuple(d for d in t.NUMBERS if d is not kl.int8)
"""TensorFlow's list: every number type but int8 (and bfloat16, which numpy lacks)."""
DECOMPOSITION_TYPES = (kl.float32, kl.float64, kl.complex64, kl.complex128)
"""TensorFlow's CPU kernels' dtypes for the determinants, Cholesky and solvers (no half)."""
INVERSE_TYPES = (kl.float16, *DECOMPOSITION_TYPES)
"""MatrixInverse also takes float16 (inverted in float32)."""


def _host(value: Any) -> np.ndarray[Any, Any]:
    """A host-memory input as numpy (one produced on the device is copied off it)."""
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    return np.asarray(value.get() if hasattr(value, "get") else value)


class _Linalg:
    """The band, diagonal and decomposition kernels over the array module ``xp``."""

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp

    # -- MatrixBandPart and the diagonal ops ----------------------------------------------------

    @staticmethod
    def _matrices(ctx: OpKernelContext, x: Any) -> tuple[int, int]:
        if x.ndim < 2:
            raise ctx.fail(f"input must be at least 2-dim, received shape: {list(x.shape)}")
        return int(x.shape[-2]), int(x.shape[-1])

    @staticmethod
    def _scalar(ctx: OpKernelContext, name: str, value: Any) -> Any:
        if value.ndim != 0:
            raise ctx.fail(f"{name} must be a scalar, received shape {list(value.shape)}")
        return value

    def _indices(self, band: DiagBand) -> tuple[Any, ...]:
        return tuple(self.xp.asarray(v) for v in band.indices())

    def band_part(self, ctx: OpKernelContext) -> None:
        xp, x = self.xp, ctx.input(0)
        rows, cols = self._matrices(ctx, x)
        lower, upper = band_limits(ctx, rows, cols, _host(ctx.input(1)), _host(ctx.input(2)))
        out = ctx.allocate_output(0, x.shape)
        out.fill(0)
        xp.copyto(out, x, where=xp.asarray(band_mask(rows, cols, lower, upper)))

    def diag_part(self, ctx: OpKernelContext) -> None:
        xp, x = self.xp, ctx.input(0)
        padding = self._scalar(ctx, "padding_value", ctx.input(2))
        rows, cols = self._matrices(ctx, x)
        align = str(ctx.attr("align"))
        band = DiagBand.checked(ctx, rows, cols, *diag_range(ctx, _host(ctx.input(1))), align)
        batch = tuple(x.shape[:-2])
        packed = xp.empty((*batch, band.num_diags, band.max_len), x.dtype)
        packed[...] = padding
        i, p, r, c = self._indices(band)
        packed[..., i, p] = x[..., r, c]
        out = ctx.allocate_output(0, band.packed_shape(batch))
        xp.copyto(out, packed.reshape(out.shape))

    def set_diag(self, ctx: OpKernelContext) -> None:
        xp, x, diagonal = self.xp, ctx.input(0), ctx.input(1)
        rows, cols = self._matrices(ctx, x)
        align = str(ctx.attr("align"))
        band = DiagBand.checked(ctx, rows, cols, *diag_range(ctx, _host(ctx.input(2))), align)
        batch = band.check_diagonal(ctx, tuple(x.shape), tuple(diagonal.shape))
        out = ctx.allocate_output(0, x.shape)
        xp.copyto(out, x)
        i, p, r, c = self._indices(band)
        out[..., r, c] = diagonal.reshape(*batch, band.num_diags, band.max_len)[..., i, p]

    def matrix_diag(self, ctx: OpKernelContext) -> None:
        diagonal = ctx.input(0)
        lower, upper = diag_range(ctx, _host(ctx.input(1)))
        num_rows, num_cols = _host(ctx.input(2)), _host(ctx.input(3))
        for name, value in (("num_rows", num_rows), ("num_cols", num_cols)):
            if value.ndim != 0:
                raise ctx.fail(f"{name} must be a scalar, received shape {list(value.shape)}")
        padding = self._scalar(ctx, "padding_value", ctx.input(4))
        shape = tuple(diagonal.shape)
        rows, cols = matrix_diag_size(ctx, shape, lower, upper, int(num_rows), int(num_cols))
        band = DiagBand(rows, cols, lower, upper, str(ctx.attr("align")))
        batch = shape[: -2 if band.num_diags > 1 else -1]
        out = ctx.allocate_output(0, (*batch, rows, cols))
        out[...] = padding
        i, p, r, c = self._indices(band)
        out[..., r, c] = diagonal.reshape(*batch, band.num_diags, band.max_len)[..., i, p]

    # -- the decompositions and solvers ----------------------------------------------------------

    def _adjoint(self, a: Any) -> Any:
        swapped = self.xp.swapaxes(a, -1, -2)
        return self.xp.conj(swapped) if a.dtype.kind == "c" else swapped

    def _undefined(self, a: Any) -> tuple[Any, Any]:
        """Per matrix, where TensorFlow's determinant is NaN (a NaN entry; complex: any
        entry not finite), and that NaN."""
        xp = self.xp
        if a.dtype.kind == "c":
            return ~xp.isfinite(a).all(axis=(-2, -1)), complex(np.nan, np.nan)
        return xp.isnan(a).any(axis=(-2, -1)), np.nan

    def determinant(self, ctx: OpKernelContext) -> None:
        xp, a = self.xp, ctx.input(0)
        out = ctx.allocate_output(0, square_batch(ctx, a.shape))
        if out.size == 0:
            return
        if a.shape[-1] == 0:
            out.fill(1)
            return
        with np.errstate(all="ignore"):
            det = xp.linalg.det(a)
        undefined, nan = self._undefined(a)
        xp.copyto(out, xp.where(undefined, nan, det), casting="same_kind")

    def log_determinant(self, ctx: OpKernelContext) -> None:
        xp, a = self.xp, ctx.input(0)
        batch = square_batch(ctx, a.shape)
        sign, log_abs = ctx.allocate_output(0, batch), ctx.allocate_output(1, batch)
        if sign.size == 0:
            return
        if a.shape[-1] == 0:
            sign.fill(1)
            log_abs.fill(0)
            return
        with np.errstate(all="ignore"):
            s, la = xp.linalg.slogdet(a)
        undefined, nan = self._undefined(a)
        xp.copyto(sign, xp.where(undefined, nan, s), casting="same_kind")
        xp.copyto(log_abs, xp.where(undefined, np.nan, la), casting="same_kind")

    def _check_invertible(self, ctx: OpKernelContext, m: Any, message: str) -> None:
        """Fail where any matrix is singular: a zero pivot (slogdet's sign 0) or NaN."""
        xp = self.xp
        with np.errstate(all="ignore"):
            sign, _ = xp.linalg.slogdet(m)
        if bool(((sign == 0) | xp.isnan(sign) | xp.isnan(m).any(axis=(-2, -1))).any()):
            raise ctx.fail(message)

    def inverse(self, ctx: OpKernelContext) -> None:
        xp, a = self.xp, ctx.input(0)
        square_batch(ctx, a.shape)
        out = ctx.allocate_output(0, a.shape)
        if out.size == 0:
            return
        m = self._adjoint(a) if ctx.attr("adjoint") else a
        if m.dtype == np.float16:  # no half LU: float32, rounded once
            m = m.astype(np.float32)
        self._check_invertible(ctx, m, "Input is not invertible.")
        xp.copyto(out, xp.linalg.inv(m), casting="same_kind")

    def _cholesky_or_none(self, m: Any) -> Any:
        try:
            return self.xp.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            return None

    def cholesky(self, ctx: OpKernelContext) -> None:
        xp, a = self.xp, ctx.input(0)
        square_batch(ctx, a.shape)
        out = ctx.allocate_output(0, a.shape)
        if out.size == 0:
            return
        n = a.shape[-1]
        hermitian = xp.tril(a) + self._adjoint(xp.tril(a, -1))  # only the lower triangle
        eye = xp.eye(n, dtype=a.dtype)
        bad = xp.isnan(hermitian).any(axis=(-2, -1))
        work = xp.where(bad[..., None, None], eye, hermitian)
        with np.errstate(all="ignore"):
            bad |= ~(xp.linalg.eigvalsh(work)[..., 0] > 0)
        work = xp.where(bad[..., None, None], eye, work)
        factor = self._cholesky_or_none(work)
        if factor is None:  # borderline ones (eigvalsh > 0, a pivot <= 0): sorted out singly
            flat, flat_bad = work.reshape(-1, n, n), bad.reshape(-1)
            for index in range(flat.shape[0]):
                if not bool(flat_bad[index]):
                    flat_bad[index] = self._cholesky_or_none(flat[index]) is None
            factor = xp.linalg.cholesky(xp.where(bad[..., None, None], eye, work))
        lower = xp.tri(n, dtype=bool)
        xp.copyto(out, xp.where(bad[..., None, None] & lower, np.nan, factor), casting="same_kind")

    def solve(self, ctx: OpKernelContext) -> None:
        xp, matrix, rhs = self.xp, ctx.input(0), ctx.input(1)
        out = ctx.allocate_output(0, solve_shape(ctx, matrix.shape, rhs.shape))
        if out.size == 0:
            return
        m = self._adjoint(matrix) if ctx.attr("adjoint") else matrix
        self._check_invertible(ctx, m, "Input matrix is not invertible.")
        xp.copyto(out, xp.linalg.solve(m, rhs), casting="same_kind")

    def triangular_solve(self, ctx: OpKernelContext) -> None:
        xp, matrix, rhs = self.xp, ctx.input(0), ctx.input(1)
        shape = triangular_solve_shape(ctx, matrix.shape, rhs.shape)
        out = ctx.allocate_output(0, shape)
        if out.size == 0:
            return
        lower = bool(ctx.attr("lower"))
        t = xp.tril(matrix) if lower else xp.triu(matrix)
        if ctx.attr("adjoint"):
            t, lower = self._adjoint(t), not lower
        n = shape[-2]
        t = xp.broadcast_to(t, (*shape[:-2], n, n))
        b = xp.broadcast_to(rhs, shape)
        with np.errstate(all="ignore"):  # a zero pivot gives +-inf or NaN, as in TensorFlow
            for i in range(n) if lower else range(n - 1, -1, -1):
                done = slice(0, i) if lower else slice(i + 1, n)
                known = xp.matmul(t[..., i : i + 1, done], out[..., done, :])
                out[..., i : i + 1, :] = (b[..., i : i + 1, :] - known) / t[
                    ..., i : i + 1, i : i + 1
                ]

    def table(self) -> list[tuple[str, Any, tuple[Any, ...] | None, tuple[str, ...]]]:
        """(op, kernel, dtypes, host-memory args)."""
        return [
            ("MatrixBandPart", self.band_part, None, ("num_lower", "num_upper")),
            ("MatrixDiagV3", self.matrix_diag, None, ("k", "num_rows", "num_cols")),
            ("MatrixDiagPartV3", self.diag_part, None, ("k",)),
            ("MatrixSetDiagV3", self.set_diag, None, ("k",)),
            ("MatrixDeterminant", self.determinant, DECOMPOSITION_TYPES, ()),
            ("LogMatrixDeterminant", self.log_determinant, DECOMPOSITION_TYPES, ()),
            ("MatrixInverse", self.inverse, INVERSE_TYPES, ()),
            ("Cholesky", self.cholesky, DECOMPOSITION_TYPES, ()),
            ("MatrixSolve", self.solve, DECOMPOSITION_TYPES, ()),
            ("MatrixTriangularSolve", self.triangular_solve, DECOMPOSITION_TYPES, ()),
        ]


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
    for op, kernel, types, host in _Linalg(xp).table():
        lib.kernel(
            op,
            device=GPU,
            backend=BACKEND,
            type_constraints={"T": types},
            host_memory=list(host),
        )(kernel)
