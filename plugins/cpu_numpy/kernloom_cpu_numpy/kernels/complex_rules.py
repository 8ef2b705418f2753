"""Complex arithmetic as TensorFlow's CPU kernels do it, where infinite or NaN parts make
the formulas differ from numpy's.

TensorFlow's elementwise kernels run Eigen's packet code over complex numbers: a product
is the schoolbook ``(ac - bd) + i(ad + bc)`` (numpy's complex128 product recovers
infinities as C99 Annex G does, so ``(big + inf j)^2`` is ``-inf + inf j`` there, ``nan + inf
j`` in TensorFlow); a quotient is Eigen's ``pdiv_complex``, which scales the divisor by the
larger magnitude of its parts. Rsqrt, Expm1, Log1p and Sigmoid follow Eigen's scalar
formulas (``complex_rsqrt``, ``expm1_impl``, the generic ``log1p``, ``1 / (1 + exp(-x))``
with ``std::complex`` division).

Eigen finishes an array whose length is not a multiple of the packet size with scalar
code, where ``std::complex`` multiplication and division follow Annex G; these functions
take the packet rule for every element, so only such a tail element can still differ
(a documented deviation, like Cast's). On finite values every formula here agrees with
numpy's to rounding.

Every function takes its inputs and ``out`` and reads everything before writing, so
``out`` may be an input (the executors' in-place reuse).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array
from kernloom_cpu_numpy.kernels.elementwise import (
    binary_kernel,
    unary_kernel,
)

__all__ = [
    "BINARY",
    "UNARY",
    "div_no_nan",
    "divide",
    "expm1",
    "log1p",
    "multiply",
    "reciprocal",
    "register",
    "rsqrt",
    "sigmoid",
    "square",
    "squared_difference",
]


def _parts(x: Any) -> tuple[Array, Array]:
    z = np.asarray(x)
    return z.real, z.imag


def _into(out: Array, real: Array, imag: Array) -> Array:
    out.real = real
    out.imag = imag
    return out


def _product(a: Array, b: Array, c: Array, d: Array) -> tuple[Array, Array]:
    return a * c - b * d, a * d + b * c


def multiply(x: Array, y: Array, out: Array) -> Array:
    """Eigen's packet product: no recovery of infinities from NaN parts."""
    a, b = _parts(x)
    c, d = _parts(y)
    return _into(out, *_product(a, b, c, d))


def square(x: Array, out: Array) -> Array:
    a, b = _parts(x)
    return _into(out, *_product(a, b, a, b))


def squared_difference(x: Array, y: Array, out: Array) -> Array:
    """``conj(x - y) * (x - y)`` with the packet product (TensorFlow's definition)."""
    diff = np.subtract(x, y)
    a, b = diff.real, diff.imag
    return _into(out, *_product(a, -b, a, b))


def _larger(p: Array, q: Array) -> Array:
    """SSE's ``max(q, p)`` (Eigen's ``pmax(p, q)``): ``p`` where either is NaN."""
    return np.where(np.isnan(p) | np.isnan(q), p, np.maximum(p, q))


def _quotient(a: Array, b: Array, c: Array, d: Array) -> tuple[Array, Array]:
    """Eigen's ``pdiv_complex``: (a + bi) / (c + di), the divisor scaled by the larger of
    |c| and |d| (taken per lane, so a NaN part scales only itself)."""
    abs_c, abs_d = np.abs(c), np.abs(d)
    scale_c, scale_d = _larger(abs_c, abs_d), _larger(abs_d, abs_c)
    cs, ds = c / scale_c, d / scale_d
    cs2, ds2 = cs * cs, ds * ds
    real, imag = _product(a, b, cs, -ds)
    return real / (cs2 + ds2) / scale_c, imag / (ds2 + cs2) / scale_d


def divide(x: Array, y: Array, out: Array) -> Array:
    a, b = _parts(x)
    c, d = _parts(y)
    return _into(out, *_quotient(a, b, c, d))


def div_no_nan(x: Array, y: Array, out: Array) -> Array:
    zero = np.asarray(y) == 0
    divide(x, y, out)
    np.copyto(out, 0, where=zero)
    return out


def reciprocal(x: Array, out: Array) -> Array:
    c, d = _parts(x)
    one = np.ones_like(c)
    return _into(out, *_quotient(one, np.zeros_like(c), c, d))


def rsqrt(x: Array, out: Array) -> Array:
    """Eigen's ``complex_rsqrt``: 0 where a part is infinite, (inf, nan) at 0."""
    re, im = _parts(x)
    abs_z = np.hypot(re, im)
    w = np.sqrt(0.5 * (np.abs(re) + abs_z))
    woz = w / abs_z
    toward = np.where(im < 0, woz, -woz)
    real = np.where(re > 0, woz, np.abs(im) / (2 * w * abs_z))
    imag = np.where(re > 0, -im / (2 * w * abs_z), toward)
    real = np.where(re == 0, woz, real)
    infinite = np.isinf(re) | np.isinf(im)
    real = np.where(infinite, 0, real)
    imag = np.where(infinite, 0, imag)
    zero = abs_z == 0
    real = np.where(zero, np.inf, real)
    imag = np.where(zero, np.nan, imag)
    return _into(out, real, imag)


def expm1(x: Array, out: Array) -> Array:
    """Eigen's ``expm1_impl``: ``expm1(a) - 2 e^a sin(b/2)^2 + i e^a sin(b)``."""
    a, b = _parts(x)
    em1 = np.expm1(a)
    e = em1 + 1
    half = np.sin(b / 2)
    return _into(out, em1 - 2 * e * half * half, e * np.sin(b))


def log1p(x: Array, out: Array) -> Array:
    """Eigen's generic ``log1p``: ``x * (log(u) / (u - 1))`` with ``u = 1 + x`` (x itself
    where u is 1 or log(u) is u), so a huge part gives what that quotient gives (a tiny
    imaginary part, flushed terms included) rather than the exact ``atan2``."""
    u = np.add(x, 1)
    log_u = np.log(u)
    keep = (u == 1) | (u == log_u)
    a, b = _parts(x)
    # numpy's quotient takes 1 / denominator first, which flushes to zero for a huge
    # divisor; Eigen's scales the divisor instead, and so keeps the tiny quotient.
    back = u - 1  # not x: the rounding of 1 + x is what the quotient corrects for
    q_real, q_imag = _quotient(log_u.real, log_u.imag, back.real, back.imag)
    real, imag = _product(a, b, q_real, q_imag)
    _into(out, np.where(keep, a, real), np.where(keep, b, imag))
    return out


def sigmoid(x: Array, out: Array) -> Array:
    """``1 / (1 + exp(-x))``; Annex G division makes 1 / (a part infinite) zero."""
    denominator = np.exp(np.negative(x))
    denominator += 1
    infinite = np.isinf(denominator.real) | np.isinf(denominator.imag)
    np.divide(1, denominator, out=out)
    np.copyto(out, 0, where=infinite)
    return out


BINARY: tuple[tuple[str, Any], ...] = (
    ("Mul", multiply),
    ("Div", divide),
    ("RealDiv", divide),
    ("DivNoNan", div_no_nan),
    ("SquaredDifference", squared_difference),
)
UNARY: tuple[tuple[str, Any], ...] = (
    ("Square", square),
    ("Reciprocal", reciprocal),
    ("Rsqrt", rsqrt),
    ("Expm1", expm1),
    ("Log1p", log1p),
    ("Sigmoid", sigmoid),
)
"""The ops whose complex kernels are these; their other kernels leave complex out."""


def register(lib: KernelLibrary) -> None:
    """The complex64/complex128 kernels of the ops in ``BINARY`` and ``UNARY``."""

    def cpu(op: str, **kw: Any) -> Any:
        return lib.kernel(
            op, device="CPU", backend="numpy", type_constraints={"T": t.COMPLEX}, **kw
        )

    for op, fn in BINARY:
        cpu(op)(binary_kernel(fn, form=False))
    for op, fn in UNARY:
        cpu(op)(unary_kernel(fn, form=False))
