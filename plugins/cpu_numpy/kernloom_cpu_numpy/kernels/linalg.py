"""Batched linear algebra kernels (BatchMatMulV2, Einsum, the band and diagonal ops, the
determinants, inverse, Cholesky and solvers).

BatchMatMulV2 is one ``np.matmul`` (BLAS per matrix, numpy's broadcasting of the batch
axes) into the output buffer. Einsum parses its equation once, when the kernel is built.
A two-operand contraction is one ``np.matmul`` after a transpose and reshape of each
operand (TensorFlow's own strategy: batch, free and contracted axes), because
``np.einsum``'s optimiser reaches BLAS only without batch axes and loops in C otherwise
(attention's ``bhqd,bhkd->bhqk``); the rest (diagonals, one-sided sums, one operand) is
``np.einsum``. An output that repeats a label is written along the diagonal of a zeroed
buffer through a strided view.

The band and diagonal ops are one masked copy or one fancy-indexed gather/scatter over the
whole batch, with the positions ``kernloom.plugin.DiagBand`` lists. The decompositions
call ``numpy.linalg``'s batched (gufunc) routines once per op; TensorFlow's edge rules are
applied around them: NaN in a matrix makes its determinant NaN and the inverse or solve
an error (LAPACK's pivot search lets a NaN pivot pass, Eigen's check does not), Cholesky
of a matrix that is not positive definite is NaN in its lower triangle instead of
numpy's error for the whole batch. numpy has no triangular solve: it is substitution row
by row, each step one batched product (a loop over rows, not matrices).
"""

from __future__ import annotations

import math
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
from kernloom_cpu_numpy.kernels._util import Array

__all__ = ["BATCH_MATMUL_TYPES", "register"]

CPU = "CPU"
BATCH_MATMUL_TYPES = tuple(d for d in t.NUMBERS if d is not kl.int8)
"""TensorFlow's list: every number type but int8 (and bfloat16, which numpy lacks)."""
DECOMPOSITION_TYPES = (kl.float32, kl.float64, kl.complex64, kl.complex128)
"""The dtypes TensorFlow's CPU has determinant, Cholesky and solver kernels for (its op
defs add float16, which has none there: the node is refused, here too)."""
INVERSE_TYPES = (kl.float16, *DECOMPOSITION_TYPES)
"""MatrixInverse: TensorFlow's CPU inverts float16 too."""


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


# -- MatrixBandPart and the diagonal ops --------------------------------------------------------


def _align(ctx: OpKernelContext) -> str:
    return str(ctx.attr("align"))


def _matrices(ctx: OpKernelContext, x: Array, name: str = "input") -> tuple[int, int]:
    if x.ndim < 2:
        raise ctx.fail(f"{name} must be at least 2-dim, received shape: {list(x.shape)}")
    return int(x.shape[-2]), int(x.shape[-1])


def _scalar_value(ctx: OpKernelContext, name: str, value: Array) -> Array:
    if np.ndim(value) != 0:
        raise ctx.fail(f"{name} must be a scalar, received shape {list(np.shape(value))}")
    return value


def band_part(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    rows, cols = _matrices(ctx, x)
    lower, upper = band_limits(ctx, rows, cols, ctx.input(1), ctx.input(2))
    out = ctx.allocate_output(0, x.shape)
    out.fill(0)
    np.copyto(out, x, where=band_mask(rows, cols, lower, upper))


def diag_part(ctx: OpKernelContext) -> None:
    x, k = ctx.input(0), ctx.input(1)
    padding = _scalar_value(ctx, "padding_value", ctx.input(2))
    rows, cols = _matrices(ctx, x)
    band = DiagBand.checked(ctx, rows, cols, *diag_range(ctx, k), _align(ctx))
    batch = x.shape[:-2]
    packed = np.full((*batch, band.num_diags, band.max_len), padding, x.dtype)
    i, p, r, c = band.indices()
    packed[..., i, p] = x[..., r, c]
    np.copyto(
        ctx.allocate_output(0, band.packed_shape(batch)), packed.reshape(band.packed_shape(batch))
    )


def set_diag(ctx: OpKernelContext) -> None:
    x, diagonal, k = ctx.input(0), ctx.input(1), ctx.input(2)
    rows, cols = _matrices(ctx, x)
    band = DiagBand.checked(ctx, rows, cols, *diag_range(ctx, k), _align(ctx))
    batch = band.check_diagonal(ctx, tuple(x.shape), tuple(diagonal.shape))
    out = ctx.allocate_output(0, x.shape)
    np.copyto(out, x)
    i, p, r, c = band.indices()
    out[..., r, c] = diagonal.reshape(*batch, band.num_diags, band.max_len)[..., i, p]


def matrix_diag(ctx: OpKernelContext) -> None:
    diagonal, k = ctx.input(0), ctx.input(1)
    num_rows = int(_scalar_value(ctx, "num_rows", ctx.input(2)))
    num_cols = int(_scalar_value(ctx, "num_cols", ctx.input(3)))
    padding = _scalar_value(ctx, "padding_value", ctx.input(4))
    lower, upper = diag_range(ctx, k)
    rows, cols = matrix_diag_size(ctx, diagonal.shape, lower, upper, num_rows, num_cols)
    band = DiagBand(rows, cols, lower, upper, _align(ctx))
    batch = diagonal.shape[: -2 if band.num_diags > 1 else -1]
    out = ctx.allocate_output(0, (*batch, rows, cols))
    out.fill(padding)
    i, p, r, c = band.indices()
    out[..., r, c] = diagonal.reshape(*batch, band.num_diags, band.max_len)[..., i, p]


# -- the decompositions and solvers --------------------------------------------------------------


def _has_nan(a: Array) -> Array:
    """Per matrix: does it hold a NaN (in either part, for complex)?"""
    return np.asarray(np.isnan(a).any(axis=(-2, -1)))


def _undefined(a: Array) -> tuple[Array, Any]:
    """Per matrix, where TensorFlow's determinant is NaN, and that NaN in a's dtype: a NaN
    entry; for complex, any entry that is not finite (Eigen's complex pivot quotients
    inf / inf are NaN, in both parts)."""
    if a.dtype.kind == "c":
        return np.asarray(~np.isfinite(a).all(axis=(-2, -1))), complex(np.nan, np.nan)
    return _has_nan(a), np.nan


def determinant(ctx: OpKernelContext) -> None:
    a = ctx.input(0)
    out = ctx.allocate_output(0, square_batch(ctx, a.shape))
    if a.shape[-1] == 0:  # the empty product
        out.fill(1)
        return
    with np.errstate(all="ignore"):  # overflow to +-inf is the answer, as in TensorFlow
        det = np.linalg.det(a)
    undefined, nan = _undefined(a)
    np.copyto(out, np.where(undefined, nan, det), casting="same_kind")


def log_determinant(ctx: OpKernelContext) -> None:
    a = ctx.input(0)
    batch = square_batch(ctx, a.shape)
    sign, log_abs = ctx.allocate_output(0, batch), ctx.allocate_output(1, batch)
    if a.shape[-1] == 0:
        sign.fill(1)
        log_abs.fill(0)
        return
    with np.errstate(all="ignore"):
        s, la = np.linalg.slogdet(a)
    undefined, nan = _undefined(a)
    np.copyto(sign, np.where(undefined, nan, s), casting="same_kind")
    np.copyto(log_abs, np.where(undefined, np.nan, la), casting="same_kind")


def inverse(ctx: OpKernelContext) -> None:
    a = ctx.input(0)
    square_batch(ctx, a.shape)
    out = ctx.allocate_output(0, a.shape)
    if out.size == 0:
        return
    m = adjoint(a) if ctx.attr("adjoint") else a
    if m.dtype == np.float16:  # LAPACK has no half: float32, rounded once
        m = m.astype(np.float32)
    if _has_nan(m).any():
        raise ctx.fail("Input is not invertible.")
    try:
        result = np.linalg.inv(m)
    except np.linalg.LinAlgError:
        raise ctx.fail("Input is not invertible.") from None
    np.copyto(out, result, casting="same_kind")


def _cholesky_or_none(m: Array) -> Array | None:
    try:
        return np.linalg.cholesky(m)
    except np.linalg.LinAlgError:
        return None


def cholesky(ctx: OpKernelContext) -> None:
    a = ctx.input(0)
    square_batch(ctx, a.shape)
    out = ctx.allocate_output(0, a.shape)
    if out.size == 0:
        return
    n = a.shape[-1]
    hermitian = np.tril(a) + adjoint(np.tril(a, -1))  # the lower triangle is all it reads
    eye = np.eye(n, dtype=a.dtype)
    bad = _has_nan(hermitian)
    work = np.where(bad[..., None, None], eye, hermitian)
    factor = _cholesky_or_none(work)
    if factor is None:  # which matrices are not positive definite: one more batched pass
        with np.errstate(all="ignore"):
            smallest = np.linalg.eigvalsh(work)[..., 0]
        bad |= ~(smallest > 0)
        work = np.where(bad[..., None, None], eye, work)
        factor = _cholesky_or_none(work)
    if factor is None:  # borderline ones (eigvalsh > 0, a pivot <= 0): sorted out singly
        flat, flat_bad = work.reshape(-1, n, n), bad.reshape(-1)
        for index in np.flatnonzero(~flat_bad):
            flat_bad[index] = _cholesky_or_none(flat[index]) is None
        work = np.where(bad[..., None, None], eye, work)
        factor = np.linalg.cholesky(work)
    lower = np.tri(n, dtype=bool)
    np.copyto(out, np.where(bad[..., None, None] & lower, np.nan, factor), casting="same_kind")


def solve(ctx: OpKernelContext) -> None:
    matrix, rhs = ctx.input(0), ctx.input(1)
    out = ctx.allocate_output(0, solve_shape(ctx, matrix.shape, rhs.shape))
    if out.size == 0:
        return
    m = adjoint(matrix) if ctx.attr("adjoint") else matrix
    if _has_nan(m).any():
        raise ctx.fail("Input matrix is not invertible.")
    try:
        result = np.linalg.solve(m, rhs)
    except np.linalg.LinAlgError:
        raise ctx.fail("Input matrix is not invertible.") from None
    np.copyto(out, result, casting="same_kind")


def triangular_substitution(t: Array, b: Array, lower: bool, out: Array) -> None:
    """``out`` = X with T X = b for triangular T (lower or upper, already broadcast to
    ``b``'s batch): one row of X per step, each a batched product with the rows solved
    before it. A zero pivot divides by zero (+-inf, NaN), as TensorFlow's solver does."""
    n = t.shape[-1]
    with np.errstate(all="ignore"):
        for i in range(n) if lower else range(n - 1, -1, -1):
            done = slice(0, i) if lower else slice(i + 1, n)
            known = np.matmul(t[..., i : i + 1, done], out[..., done, :])
            out[..., i : i + 1, :] = (b[..., i : i + 1, :] - known) / t[..., i : i + 1, i : i + 1]


def triangular_solve(ctx: OpKernelContext) -> None:
    matrix, rhs = ctx.input(0), ctx.input(1)
    shape = triangular_solve_shape(ctx, matrix.shape, rhs.shape)
    out = ctx.allocate_output(0, shape)
    if out.size == 0:
        return
    lower = bool(ctx.attr("lower"))
    t = np.tril(matrix) if lower else np.triu(matrix)
    if ctx.attr("adjoint"):
        t, lower = adjoint(t), not lower
    n = shape[-2]
    t = np.broadcast_to(t, (*shape[:-2], n, n))
    triangular_substitution(t, np.broadcast_to(rhs, shape), lower, out)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def cpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints={"T": types}, **kw)

    cpu("BatchMatMulV2", BATCH_MATMUL_TYPES)(batch_matmul)
    cpu("Einsum", t.OP_TYPES)(Einsum)
    cpu("MatrixBandPart", t.OP_TYPES, host_memory=["num_lower", "num_upper"])(band_part)
    cpu("MatrixDiagV3", t.OP_TYPES, host_memory=["k", "num_rows", "num_cols"])(matrix_diag)
    cpu("MatrixDiagPartV3", t.OP_TYPES, host_memory=["k"])(diag_part)
    cpu("MatrixSetDiagV3", t.OP_TYPES, host_memory=["k"])(set_diag)
    cpu("MatrixDeterminant", DECOMPOSITION_TYPES)(determinant)
    cpu("LogMatrixDeterminant", DECOMPOSITION_TYPES)(log_determinant)
    cpu("MatrixInverse", INVERSE_TYPES)(inverse)
    cpu("Cholesky", DECOMPOSITION_TYPES)(cholesky)
    cpu("MatrixSolve", DECOMPOSITION_TYPES)(solve)
    cpu("MatrixTriangularSolve", DECOMPOSITION_TYPES)(triangular_solve)
