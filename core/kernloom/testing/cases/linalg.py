"""Reference cases: MatrixBandPart, the V3 diagonal ops, the determinants, inverse,
Cholesky and the solvers.

Every reference is a second formulation that shares no code with the kernels, in a wide
type (float64 / complex128), matrix by matrix: the band keeps (m, n) by its two
inequalities; the diagonal ops walk the matrix's positions (the kernels walk the
diagonals) with TensorFlow's documented index formula; the determinant is Leibniz's
permutation expansion (no LU), the inverse the adjugate over it, the solves that inverse
times rhs, Cholesky the Cholesky-Banachiewicz recurrence written out. A few cases carry
values worked by hand (``*-by-hand``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = ["cases", "leibniz_det", "reference_inverse"]

DECOMPOSITION_TYPES = (kl.float32, kl.float64, kl.complex64, kl.complex128)
ALIGNS = ("RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT")


def _wide(a: Array) -> Array:
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _matrices(a: Array) -> Iterator[tuple[int, ...]]:
    """The batch indices of ``[..., M, N]``."""
    return np.ndindex(*a.shape[:-2])


# -- band and diagonals --------------------------------------------------------------------------


def _band(lower: int, upper: int) -> Callable[..., Array]:
    def reference(x: Array, *_: Any) -> Array:
        out = np.zeros_like(x)
        for b in _matrices(x):
            for m, n in np.ndindex(*x.shape[-2:]):
                if (lower < 0 or m - n <= lower) and (upper < 0 or n - m <= upper):
                    out[(*b, m, n)] = x[(*b, m, n)]
        return out

    return reference


def _diag_len(rows: int, cols: int, d: int) -> int:
    return max(min(rows + min(d, 0), cols - max(d, 0)), 0)


def _slot(rows: int, cols: int, lo: int, hi: int, align: str, m: int, n: int) -> tuple[int, int]:
    """TensorFlow's documented packed position of matrix element (m, n), on diagonal n - m:
    row ``hi - d``, column ``n - max(d, 0) + offset`` (offset 0 for a left-aligned one)."""
    d = n - m
    longest = min(rows + min(hi, 0), cols - max(lo, 0))
    left = (d >= 0 and align.startswith("LEFT")) or (d <= 0 and align.endswith("LEFT"))
    offset = 0 if left else longest - _diag_len(rows, cols, d)
    return hi - d, n - max(d, 0) + offset


def _diag_part(lo: int, hi: int, align: str) -> Callable[..., Array]:
    def reference(x: Array, k: Array, padding: Array) -> Array:
        rows, cols = x.shape[-2:]
        longest = min(rows + min(hi, 0), cols - max(lo, 0))
        packed = np.full((*x.shape[:-2], hi - lo + 1, longest), padding, x.dtype)
        for b in _matrices(x):
            for m, n in np.ndindex(rows, cols):
                if lo <= n - m <= hi:
                    packed[(*b, *_slot(rows, cols, lo, hi, align, m, n))] = x[(*b, m, n)]
        return packed[..., 0, :] if lo == hi else packed

    return reference


def _set_diag(lo: int, hi: int, align: str) -> Callable[..., Array]:
    def reference(x: Array, diagonal: Array, k: Array) -> Array:
        rows, cols = x.shape[-2:]
        packed = diagonal[..., None, :] if lo == hi else diagonal
        out = x.copy()
        for b in _matrices(x):
            for m, n in np.ndindex(rows, cols):
                if lo <= n - m <= hi:
                    out[(*b, m, n)] = packed[(*b, *_slot(rows, cols, lo, hi, align, m, n))]
        return out

    return reference


def _matrix_diag(lo: int, hi: int, rows: int, cols: int, align: str) -> Callable[..., Array]:
    def reference(diagonal: Array, *host_and_padding: Any) -> Array:
        packed = diagonal[..., None, :] if lo == hi else diagonal
        padding = host_and_padding[-1]
        out = np.full((*packed.shape[:-2], rows, cols), padding, diagonal.dtype)
        for b in np.ndindex(*packed.shape[:-2]):
            for m, n in np.ndindex(rows, cols):
                if lo <= n - m <= hi:
                    out[(*b, m, n)] = packed[(*b, *_slot(rows, cols, lo, hi, align, m, n))]
        return out

    return reference


def _band_cases() -> Iterator[Case]:
    for dtype in (kl.float32, kl.int32, kl.bool_, kl.complex64, kl.uint8, kl.float64):
        x = sample((2, 3, 4), dtype)
        for lower, upper in ((0, 0), (1, -1), (-1, 0), (-1, -1), (2, 1), (3, 4)):
            for index in (np.int32, np.int64):
                yield Case(
                    "MatrixBandPart",
                    [x, np.asarray(lower, index), np.asarray(upper, index)],
                    reference=_band(lower, upper),
                    id=f"MatrixBandPart-{dtype}-{lower}-{upper}-{np.dtype(index).name}",
                )
    yield Case(
        "MatrixBandPart",
        [np.zeros((0, 2, 2), np.float32), np.asarray(0, np.int64), np.asarray(0, np.int64)],
        reference=lambda x, *_: np.zeros((0, 2, 2), np.float32),
        id="MatrixBandPart-empty-batch",
    )
    upper_triangle = np.array([[1, 2, 3], [0, 5, 6], [0, 0, 9]], np.float32)
    yield Case(
        "MatrixBandPart",
        [np.arange(1, 10, dtype=np.float32).reshape(3, 3), np.int64(0), np.int64(-1)],
        reference=lambda *_: upper_triangle,
        id="MatrixBandPart-upper-triangle-by-hand",
    )


def _diag_cases() -> Iterator[Case]:
    ranges = ((0, 0), (1, 1), (-1, -1), (-1, 1), (0, 2), (-2, -1))
    for dtype in (kl.float32, kl.int64, kl.bool_, kl.complex128):
        x = sample((2, 3, 4), dtype)
        rows, cols = 3, 4
        for lo, hi in ranges:
            for align in ALIGNS if dtype == kl.float32 else ("RIGHT_LEFT",):
                k = np.asarray(lo if lo == hi else [lo, hi], np.int32)
                name = f"{dtype}-{lo}-{hi}-{align}"
                padding = sample((), dtype)
                yield Case(
                    "MatrixDiagPartV3",
                    [x, k, padding],
                    {"align": align},
                    reference=_diag_part(lo, hi, align),
                    id=f"MatrixDiagPartV3-{name}",
                )
                longest = min(rows + min(hi, 0), cols - max(lo, 0))
                packed = (2, *((hi - lo + 1,) if hi > lo else ()), longest)
                diagonal = sample(packed, dtype)
                yield Case(
                    "MatrixSetDiagV3",
                    [x, diagonal, k],
                    {"align": align},
                    reference=_set_diag(lo, hi, align),
                    id=f"MatrixSetDiagV3-{name}",
                )
                # The smallest matrices the diagonals fit: rows fixed, columns inferred.
                min_rows, min_cols = longest - min(hi, 0), longest + max(lo, 0)
                size = max(min_rows, min_cols)
                for num_rows, num_cols, out_rows, out_cols in (
                    (-1, -1, size, size),
                    (min_rows, -1, min_rows, min_cols),
                    (-1, min_cols + 2, min_rows, min_cols + 2),
                ):
                    yield Case(
                        "MatrixDiagV3",
                        [diagonal, k, np.int32(num_rows), np.int32(num_cols), padding],
                        {"align": align},
                        reference=_matrix_diag(lo, hi, out_rows, out_cols, align),
                        id=f"MatrixDiagV3-{name}-{num_rows}-{num_cols}",
                    )
    square = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    for align, expected in (
        ("RIGHT_LEFT", [[0, 2, 6], [1, 5, 9], [4, 8, 0]]),
        ("LEFT_RIGHT", [[2, 6, 0], [1, 5, 9], [0, 4, 8]]),
    ):
        yield Case(
            "MatrixDiagPartV3",
            [square, np.array([-1, 1], np.int32), np.float32(0)],
            {"align": align},
            reference=lambda *_, e=expected: np.array(e, np.float32),
            id=f"MatrixDiagPartV3-{align}-by-hand",
        )
    yield Case(
        "MatrixDiagV3",
        [np.array([1, 2], np.float32), np.int32(1), np.int32(-1), np.int32(-1), np.float32(7)],
        reference=lambda *_: np.array([[7, 1, 7], [7, 7, 2], [7, 7, 7]], np.float32),
        id="MatrixDiagV3-superdiagonal-by-hand",
    )


# -- determinants, inverse, Cholesky, solvers ----------------------------------------------------


def _permutation_sign(p: tuple[int, ...]) -> int:
    inversions = sum(1 for i, j in itertools.combinations(range(len(p)), 2) if p[i] > p[j])
    return -1 if inversions % 2 else 1


def leibniz_det(a: Array) -> Any:
    """The determinant of one matrix by the permutation expansion (1 for 0 x 0)."""
    n = a.shape[0]
    return sum(
        _permutation_sign(p) * math.prod((a[i, p[i]] for i in range(n)), start=1)
        for p in itertools.permutations(range(n))
    )


def _batched(fn: Callable[[Array], Any], a: Array, tail: tuple[int, ...]) -> Array:
    wide = _wide(a)
    out = np.zeros((*a.shape[:-2], *tail), wide.dtype)
    for b in _matrices(a):
        out[b] = fn(wide[b])
    return out


def _det(a: Array) -> Array:
    return _batched(leibniz_det, a, ()).astype(a.dtype)


def _log_det(a: Array) -> tuple[Array, Array]:
    det = _batched(leibniz_det, a, ())
    magnitude = np.abs(det)
    sign = np.where(magnitude == 0, 0, det / np.where(magnitude == 0, 1, magnitude))
    with np.errstate(divide="ignore"):
        log = np.log(magnitude)
    return sign.astype(a.dtype), log.astype(a.dtype)


def _adjugate_inverse(m: Array) -> Array:
    n = m.shape[0]
    det = leibniz_det(m)
    out = np.zeros_like(m)
    for i, j in np.ndindex(n, n):
        minor = np.delete(np.delete(m, i, axis=0), j, axis=1)
        out[j, i] = (-1) ** (i + j) * leibniz_det(minor) / det
    return out


def reference_inverse(adjoint: bool) -> Callable[[Array], Array]:
    def reference(a: Array) -> Array:
        m = np.conj(np.swapaxes(a, -1, -2)) if adjoint else a
        n = a.shape[-1]
        return _batched(_adjugate_inverse, m, (n, n)).astype(a.dtype)

    return reference


def _cholesky_one(a: Array) -> Array:
    """Cholesky-Banachiewicz on the lower triangle; NaN there if a pivot is not positive."""
    n = a.shape[0]
    out = np.zeros_like(a)
    for i in range(n):
        for j in range(i + 1):
            s = a[i, j] - sum(out[i, k] * np.conj(out[j, k]) for k in range(j))
            if i == j:
                if not s.real > 0:
                    return np.where(np.tri(n, dtype=bool), np.nan, 0).astype(a.dtype)
                out[i, i] = math.sqrt(s.real)
            else:
                out[i, j] = s / out[j, j]
    return out


def _cholesky(a: Array) -> Array:
    n = a.shape[-1]
    return _batched(_cholesky_one, a, (n, n)).astype(a.dtype)


def _solve(adjoint: bool) -> Callable[[Array, Array], Array]:
    def reference(matrix: Array, rhs: Array) -> Array:
        inverse = reference_inverse(adjoint)(_wide(matrix))
        product: Array = np.matmul(inverse, _wide(rhs))
        return product.astype(matrix.dtype)

    return reference


def _triangular_solve(lower: bool, adjoint: bool) -> Callable[[Array, Array], Array]:
    def reference(matrix: Array, rhs: Array) -> Array:
        t = np.tril(_wide(matrix)) if lower else np.triu(_wide(matrix))
        inverse = reference_inverse(adjoint)(t)
        product: Array = np.matmul(inverse, _wide(rhs))
        return product.astype(matrix.dtype)

    return reference


def _well_conditioned(shape: tuple[int, ...], dtype: kl.DType) -> Array:
    n = shape[-1]
    return (sample(shape, dtype, small=True) + 4 * np.eye(n)).astype(dtype.numpy_dtype)


def _positive_definite(shape: tuple[int, ...], dtype: kl.DType) -> Array:
    a = sample(shape, dtype, small=True)
    product = a @ np.conj(np.swapaxes(a, -1, -2))
    return (product + shape[-1] * np.eye(shape[-1])).astype(dtype.numpy_dtype)


def _decomposition_cases() -> Iterator[Case]:
    for dtype in DECOMPOSITION_TYPES:
        for shape in ((3, 3), (2, 4, 4), (1, 1), (2, 0, 0), (0, 3, 3)):
            a = _well_conditioned(shape, dtype)
            name = f"{dtype}-{shape}"
            yield Case("MatrixDeterminant", [a], reference=_det, id=f"MatrixDeterminant-{name}")
            yield Case(
                "LogMatrixDeterminant",
                [a],
                reference=_log_det,
                id=f"LogMatrixDeterminant-{name}",
            )
            for adjoint in (False, True):
                yield Case(
                    "MatrixInverse",
                    [a],
                    {"adjoint": adjoint},
                    reference=reference_inverse(adjoint),
                    id=f"MatrixInverse-{name}-{adjoint}",
                )
            spd = _positive_definite(shape, dtype)
            spd_upper_junk = spd + np.triu(np.full_like(spd, 50), 1)  # never read
            yield Case("Cholesky", [spd_upper_junk], reference=_cholesky, id=f"Cholesky-{name}")
            rhs = sample((*shape[:-1], 2), dtype, small=True)
            for adjoint in (False, True):
                yield Case(
                    "MatrixSolve",
                    [a, rhs],
                    {"adjoint": adjoint},
                    reference=_solve(adjoint),
                    id=f"MatrixSolve-{name}-{adjoint}",
                )
                for lower in (True, False):
                    yield Case(
                        "MatrixTriangularSolve",
                        [a, rhs],
                        {"lower": lower, "adjoint": adjoint},
                        reference=_triangular_solve(lower, adjoint),
                        id=f"MatrixTriangularSolve-{name}-{lower}-{adjoint}",
                    )
        singular = np.array([[1, 2], [2, 4]], dtype.numpy_dtype)
        yield Case(
            "MatrixDeterminant",
            [singular],
            reference=lambda a: np.zeros((), a.dtype),
            id=f"MatrixDeterminant-{dtype}-singular",
        )
        yield Case(
            "LogMatrixDeterminant",
            [np.stack([singular, np.eye(2, dtype=dtype.numpy_dtype)])],
            reference=lambda a: (np.array([0, 1], a.dtype), np.array([-np.inf, 0], a.dtype)),
            id=f"LogMatrixDeterminant-{dtype}-singular",
        )
        not_pd = np.stack([np.eye(2), np.array([[1, 2], [2, 1]])]).astype(dtype.numpy_dtype)
        yield Case("Cholesky", [not_pd], reference=_cholesky, id=f"Cholesky-{dtype}-not-pd")
        # TensorFlow 2's broadcasting of the batch dimensions: [3, 1] against [4].
        yield Case(
            "MatrixTriangularSolve",
            [_well_conditioned((3, 1, 3, 3), dtype), sample((4, 3, 2), dtype, small=True)],
            {"lower": True, "adjoint": False},
            reference=lambda m, r: _triangular_solve(True, False)(
                np.broadcast_to(m, (3, 4, 3, 3)), np.broadcast_to(r, (3, 4, 3, 2))
            ),
            id=f"MatrixTriangularSolve-{dtype}-broadcast",
        )
    a = np.array([[1, 2], [3, 4]], np.float64)
    yield Case("MatrixDeterminant", [a], reference=lambda _: np.float64(-2), id="Det-by-hand")
    yield Case(
        "MatrixInverse",
        [a],
        reference=lambda _: np.array([[-2, 1], [1.5, -0.5]]),
        id="MatrixInverse-by-hand",
    )
    yield Case(
        "Cholesky",
        [np.array([[4, 0], [2, 5]], np.float64)],
        reference=lambda _: np.array([[2, 0], [1, 2]], np.float64),
        id="Cholesky-by-hand",
    )
    yield Case(
        "MatrixInverse",
        [np.array([[2, 0], [0, 4]], np.float16)],
        reference=lambda _: np.array([[0.5, 0], [0, 0.25]], np.float16),
        id="MatrixInverse-float16-by-hand",
    )
    yield Case(
        "MatrixTriangularSolve",
        [np.array([[0, 0], [1, 1]], np.float64), np.ones((2, 1))],
        {"lower": True, "adjoint": False},
        reference=lambda *_: np.array([[np.inf], [-np.inf]]),
        id="MatrixTriangularSolve-zero-pivot-by-hand",
    )


def cases() -> Iterator[Case]:
    yield from _band_cases()
    yield from _diag_cases()
    yield from _decomposition_cases()
