"""Activations (Relu6, Elu, Selu, LeakyRelu, Softplus, Softsign) and unary math (Erf,
Erfc, Rsqrt, Reciprocal, Abs, Sign, Floor, Ceil, Round, Sin, Cos, Tan, Asin, Acos, Atan,
Sinh, Cosh, Asinh, Acosh, Atanh, Expm1, Log1p, IsNan, IsInf, IsFinite).

Every function here takes ``(x, out)`` and is safe when ``out`` is ``x`` (each reads what
it needs before it writes), so the same function serves ``compute`` (into a forwarded
input or a new buffer) and the direct entry (in place). numpy has no erf: ``erf`` below
sums its series (small |x|) and a continued fraction of erfc (large |x|) in float64,
vectorised, to about 1e-15; ``erfc`` takes the same two, the fraction from |x| = 1 on,
where 1 - erf(x) would lose the digits of a small erfc (erfc(5) is 1.5e-12).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernel, OpKernelConstruction, OpKernelContext
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array
from kernloom_cpu_numpy.kernels.elementwise import _unary_in_place, predicate_kernel, unary_kernel

__all__ = ["erf", "erfc", "register"]

CPU = "CPU"
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
ERF_TERMS = {8: (36, 24, 2.5), 4: (20, 8, 2.0), 2: (20, 8, 2.0)}
"""Per input itemsize: series terms, continued-fraction depth and the |x| where the second
takes over, measured against ``math.erf`` over [-7, 7]: at most 1.3e-15 relative error for
float64, 3e-8 for float32 and float16."""


def erf(x: Array) -> Array:
    """The error function of ``x``, computed in float64 (a new float64 array)."""
    terms, depth, limit = ERF_TERMS[x.dtype.itemsize]
    wide = np.asarray(x, np.float64)
    a = np.abs(wide)
    out = np.empty_like(a)
    small = a < limit
    # erf(a) = 2/sqrt(pi) exp(-a^2) sum_n (2a^2)^n a / (1*3*...*(2n+1)): positive terms only.
    s = a[small]
    term, total, twice_square = s.copy(), s.copy(), 2 * s * s
    for n in range(1, terms):
        term *= twice_square / (2 * n + 1)
        total += term
    out[small] = (2 / math.sqrt(math.pi)) * np.exp(-s * s) * total
    # erfc(b) = exp(-b^2) / sqrt(pi) / (b + (1/2) / (b + 1 / (b + (3/2) / (b + ...)))).
    large = ~small
    b = a[large]
    fraction = b.copy()
    for k in range(depth, 0, -1):
        fraction = b + (k / 2) / fraction
    out[large] = 1 - np.exp(-b * b) / math.sqrt(math.pi) / fraction
    return np.copysign(out, wide, out=out)


ERFC_DEPTH = {8: 150, 4: 60, 2: 60}
"""Per input itemsize: the continued fraction's depth for erfc at |x| >= 1 (it converges
slowest at 1), measured against ``math.erfc`` over [1, 27]: at most 1e-14 relative error
for float64, 3e-9 for float32 and float16."""
_SPLIT = 134217729.0
"""2**27 + 1: Veltkamp's constant, which splits a float64 into two 26-bit halves."""


def erfc(x: Array) -> Array:
    """1 - erf(x) without the cancellation, computed in float64 (a new float64 array).

    Below |x| = 1, 1 - erf(x) (erfc is at least 0.157 there, so nothing cancels); above,
    erfc(|x|) from the continued fraction, with exp(-b^2) taken as exp(-hi^2) exp(-(2 hi
    + lo) lo) for b = hi + lo (b^2 rounded whole would cost digits of the result where it
    is tiny), and erfc(-b) = 2 - erfc(b). Past b = 30 the result underflows to 0."""
    wide = np.asarray(x, np.float64)
    a = np.abs(wide)
    out = np.empty_like(a)
    small = a < 1
    out[small] = 1 - erf(wide[small])
    large = ~small  # NaN included: it stays NaN through the fraction
    b = np.minimum(a[large], 30.0)  # (inf too: erfc(30) is already 0 in float64)
    fraction = b.copy()
    for k in range(ERFC_DEPTH[x.dtype.itemsize], 0, -1):
        fraction = b + (k / 2) / fraction
    head = b * _SPLIT - (b * _SPLIT - b)
    tail = b - head
    value = np.exp(-head * head) * np.exp(-(2 * head + tail) * tail) / math.sqrt(math.pi)
    value /= fraction
    out[large] = np.where(wide[large] < 0, 2 - value, value)
    return out


def _erfc(x: Array, out: Array) -> Array:
    np.copyto(out, erfc(x), casting="unsafe")
    return out


def _erf(x: Array, out: Array) -> Array:
    np.copyto(out, erf(x), casting="unsafe")
    return out


def _relu6(x: Array, out: Array) -> Array:
    return np.clip(x, 0, 6, out=out)  # NaN stays NaN


def _negative_mask(x: Array, out: Array) -> Array:
    """``x < 0`` (read before ``out`` is written), with ``x`` copied into ``out``."""
    mask = x < 0
    if out is not x:
        np.copyto(out, x)
    return mask


def _elu(x: Array, out: Array) -> Array:
    mask = _negative_mask(x, out)
    return np.expm1(out, out=out, where=mask)


def _selu(x: Array, out: Array) -> Array:
    mask = _negative_mask(x, out)
    np.expm1(out, out=out, where=mask)
    np.multiply(out, SELU_ALPHA, out=out, where=mask)
    out *= SELU_SCALE
    return out


def _softplus(x: Array, out: Array) -> Array:
    # TF's thresholds: x itself above -log(eps) - 2, exp(x) below log(eps) + 2.
    threshold = math.log(np.finfo(x.dtype).eps) + 2
    exp = np.exp(x)
    np.copyto(out, np.where(x > -threshold, x, np.where(x < threshold, exp, np.log1p(exp))))
    return out


def _softsign(x: Array, out: Array) -> Array:
    denominator = np.abs(x)
    denominator += 1
    return np.divide(x, denominator, out=out)


def _rsqrt(x: Array, out: Array) -> Array:
    np.sqrt(x, out=out)
    return np.reciprocal(out, out=out)


def _round(x: Array, out: Array) -> Array:
    return np.rint(x, out=out)  # halves to even, as TF


def _identity(x: Array, out: Array) -> Array:
    if out is not x:
        np.copyto(out, x)
    return out


class LeakyRelu(OpKernel):
    """x where x > 0 else alpha * x; alpha is read once, for the direct entry as well."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._alpha = float(np.float32(ctx.attr("alpha")))  # TF's float attr: 32 bits
        self.direct = _unary_in_place(self._apply)

    def _apply(self, x: Array, out: Array) -> Array:
        mask = x <= 0  # x > 0 keeps x; NaN is not > 0 and becomes alpha * NaN = NaN
        if out is not x:
            np.copyto(out, x)
        np.multiply(out, out.dtype.type(self._alpha), out=out, where=mask)
        return out

    def compute(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        self._apply(x, ctx.forward_input_or_allocate_output([0], 0, x.shape))


SIGNED_REALS = (*t.FLOATS, *(d for d in t.SIGNED if d.is_integer))

UNARY: tuple[tuple[str, Callable[..., Any], tuple[Any, ...] | None], ...] = (
    ("Relu6", _relu6, t.OP_TYPES),
    ("Elu", _elu, t.OP_TYPES),
    ("Selu", _selu, t.OP_TYPES),
    ("Softplus", _softplus, t.OP_TYPES),
    ("Softsign", _softsign, t.OP_TYPES),
    ("Erf", _erf, t.OP_TYPES),
    ("Rsqrt", _rsqrt, t.FLOATS),  # complex: complex_rules
    ("Reciprocal", np.reciprocal, t.FLOATS),  # 1 / x (floats only: no integer truncation)
    ("Abs", np.absolute, SIGNED_REALS),
    ("Sign", np.sign, t.OP_TYPES),  # complex: x / |x| (numpy 2); NaN: NaN
    ("Floor", np.floor, t.OP_TYPES),
    ("Ceil", np.ceil, t.OP_TYPES),
    ("Round", _round, t.FLOATS),
    ("Sin", np.sin, t.OP_TYPES),
    ("Cos", np.cos, t.OP_TYPES),
    ("Atan", np.arctan, t.OP_TYPES),  # floating and complex, as TF 2.21's CPU
    # TensorFlow's CPU has floating and complex kernels for all of these (its op defs'
    # lists): numpy's ufuncs follow C99 on edges (asin(-0.0) = -0.0, acosh(x < 1) = NaN,
    # atanh(+-1) = +-inf) and its complex branches (principal values).
    ("Tan", np.tan, t.OP_TYPES),
    ("Asin", np.arcsin, t.OP_TYPES),
    ("Acos", np.arccos, t.OP_TYPES),
    ("Sinh", np.sinh, t.OP_TYPES),
    ("Cosh", np.cosh, t.OP_TYPES),
    ("Asinh", np.arcsinh, t.OP_TYPES),
    ("Acosh", np.arccosh, t.OP_TYPES),
    ("Atanh", np.arctanh, t.OP_TYPES),
    ("Erfc", _erfc, t.OP_TYPES),
    ("Expm1", np.expm1, t.FLOATS),
    ("Log1p", np.log1p, t.FLOATS),
)
PREDICATES: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("IsNan", np.isnan),
    ("IsInf", np.isinf),
    ("IsFinite", np.isfinite),
)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def cpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints={"T": types}, **kw)

    # Each function is its own in-place form (``f(x, out)``, safe with ``out`` as ``x``):
    # the compiled straight line calls it directly where it may overwrite the input.
    for op, fn, types in UNARY:
        cpu(op, types)(unary_kernel(fn))
    # Rounding an integer changes nothing: the output is the input's buffer.
    # TensorFlow has no CPU Round for int8 and int16; so neither does kernloom.
    integers = tuple(d for d in SIGNED_REALS if d.name in ("int32", "int64"))
    cpu("Round", integers)(unary_kernel(_identity))
    for op, fn in PREDICATES:
        cpu(op, t.FLOATS)(predicate_kernel(fn))
    cpu("LeakyRelu", t.OP_TYPES)(LeakyRelu)
