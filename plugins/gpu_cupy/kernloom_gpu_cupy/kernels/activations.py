"""Activation and unary math kernels (Relu6, Elu, Selu, LeakyRelu, Softplus, Softsign,
Erf, Erfc, Rsqrt, Reciprocal, Abs, Sign, Floor, Ceil, Round, Sin, Cos, Tan, Asin, Acos,
Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Expm1, Log1p, IsNan, IsInf, IsFinite).

Written over the array module ``xp`` (CuPy; numpy in tests), with ``xp.where`` rather than
ufuncs' ``where=`` (CuPy's ufuncs have none). ``erf`` is computed from its series and a
continued fraction of erfc in float64, as the numpy plugin does, so that the stand-in
(numpy has no erf) runs the same code as a real GPU; ``erfc`` too (the fraction from
|x| = 1 on, where 1 - erf(x) would lose a small erfc's digits).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext
from kernloom.plugin import types as t

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
ERF_TERMS = {8: (36, 24, 2.5), 4: (20, 8, 2.0), 2: (20, 8, 2.0)}
"""Per input itemsize: series terms, continued-fraction depth and the |x| where the second
takes over (at most 1.3e-15 relative error for float64, 3e-8 for float32 and float16)."""
SIGNED_REALS = tuple(d for d in t.SIGNED if not d.is_complex)
ERFC_DEPTH = {8: 150, 4: 60, 2: 60}
"""Per input itemsize: the continued fraction's depth for erfc at |x| >= 1 (at most 1e-14
relative error for float64, 3e-9 for float32 and float16; the numpy plugin's)."""
_SPLIT = 134217729.0
"""2**27 + 1: Veltkamp's constant, which splits a float64 into two 26-bit halves."""
_ROUND_TYPES = tuple(d for d in SIGNED_REALS if d.name not in ("int8", "int16"))  # as TF's CPU


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""

    def erf(x: Any) -> Any:
        terms, depth, limit = ERF_TERMS[x.dtype.itemsize]
        a = xp.abs(x.astype(np.float64))
        small = a < limit
        s = xp.where(small, a, 0.0)
        term, total, twice_square = s.copy(), s.copy(), 2 * s * s
        for n in range(1, terms):
            term *= twice_square / (2 * n + 1)
            total += term
        series = (2 / math.sqrt(math.pi)) * xp.exp(-s * s) * total
        b = xp.where(small, 3.0, a)
        fraction = b.copy()
        for k in range(depth, 0, -1):
            fraction = b + (k / 2) / fraction
        tail = 1 - xp.exp(-b * b) / math.sqrt(math.pi) / fraction
        return xp.copysign(xp.where(small, series, tail), x.astype(np.float64))

    def erfc(x: Any) -> Any:
        """1 - erf(x) below |x| = 1; above, erfc(|x|) from the continued fraction with
        exp(-b^2) split as exp(-hi^2) exp(-(2 hi + lo) lo) (b^2 rounded whole would cost
        a tiny result digits), and erfc(-b) = 2 - erfc(b)."""
        wide = x.astype(np.float64)
        a = xp.abs(wide)
        small = a < 1
        b = xp.where(small, 1.0, xp.minimum(a, 30.0))  # NaN stays NaN; erfc(30) is 0
        fraction = b.copy()
        for k in range(ERFC_DEPTH[x.dtype.itemsize], 0, -1):
            fraction = b + (k / 2) / fraction
        head = b * _SPLIT - (b * _SPLIT - b)
        tail = b - head
        value = xp.exp(-head * head) * xp.exp(-(2 * head + tail) * tail) / math.sqrt(math.pi)
        value = value / fraction
        return xp.where(small, 1 - erf(wide), xp.where(wide < 0, 2 - value, value))

    def elu(x: Any) -> Any:
        return xp.where(x < 0, xp.expm1(x), x)

    def selu(x: Any) -> Any:
        return xp.where(x < 0, xp.expm1(x) * x.dtype.type(SELU_ALPHA), x) * x.dtype.type(SELU_SCALE)

    def softplus(x: Any) -> Any:
        threshold = math.log(np.finfo(x.dtype).eps) + 2  # TF's thresholds
        exp = xp.exp(x)
        return xp.where(x > -threshold, x, xp.where(x < threshold, exp, xp.log1p(exp)))

    def softsign(x: Any) -> Any:
        return x / (xp.abs(x) + 1)

    def rsqrt(x: Any) -> Any:
        return 1 / xp.sqrt(x)

    def reciprocal(x: Any) -> Any:
        return 1 / x

    def relu6(x: Any) -> Any:
        return xp.clip(x, 0, 6)  # NaN stays NaN

    def round_half_even(x: Any) -> Any:
        return xp.rint(x) if x.dtype.kind in "fc" else x

    def sign(x: Any) -> Any:
        if x.dtype.kind == "c":  # x / |x|, 0 at 0 (numpy 2 and CuPy spell it differently)
            magnitude = xp.abs(x)
            return xp.where(magnitude == 0, 0, x / xp.where(magnitude == 0, 1, magnitude))
        return xp.sign(x)  # NaN stays NaN

    def unary(fn: Callable[[Any], Any]) -> Callable[[OpKernelContext], None]:
        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            out = ctx.allocate_output(0, x.shape)
            with np.errstate(all="ignore"):  # numpy in tests; CuPy never warns
                xp.copyto(out, fn(x), casting="unsafe")

        compute.__qualname__ = f"cupy_{getattr(fn, '__name__', 'unary')}"
        return compute

    def leaky_relu(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        alpha = x.dtype.type(np.float32(ctx.attr("alpha")))  # TF's float attr: 32 bits
        xp.copyto(ctx.allocate_output(0, x.shape), xp.where(x > 0, x, x * alpha))

    table: tuple[tuple[str, Callable[[Any], Any], tuple[Any, ...] | None], ...] = (
        ("Relu6", relu6, t.OP_TYPES),
        ("Elu", elu, t.OP_TYPES),
        ("Selu", selu, t.OP_TYPES),
        ("Softplus", softplus, t.OP_TYPES),
        ("Softsign", softsign, t.OP_TYPES),
        ("Erf", erf, t.OP_TYPES),
        ("Rsqrt", rsqrt, t.OP_TYPES),
        ("Reciprocal", reciprocal, t.INEXACT),
        ("Abs", xp.abs, SIGNED_REALS),
        ("Sign", sign, t.OP_TYPES),
        ("Floor", xp.floor, t.OP_TYPES),
        ("Ceil", xp.ceil, t.OP_TYPES),
        ("Round", round_half_even, _ROUND_TYPES),
        ("Sin", xp.sin, t.OP_TYPES),
        ("Cos", xp.cos, t.OP_TYPES),
        ("Atan", xp.arctan, t.OP_TYPES),  # floating and complex, as TF 2.21's CPU
        # Floating and complex, as TensorFlow's CPU kernels (Erfc: floating, its op def's).
        ("Tan", xp.tan, t.OP_TYPES),
        ("Asin", xp.arcsin, t.OP_TYPES),
        ("Acos", xp.arccos, t.OP_TYPES),
        ("Sinh", xp.sinh, t.OP_TYPES),
        ("Cosh", xp.cosh, t.OP_TYPES),
        ("Asinh", xp.arcsinh, t.OP_TYPES),
        ("Acosh", xp.arccosh, t.OP_TYPES),
        ("Atanh", xp.arctanh, t.OP_TYPES),
        ("Erfc", erfc, t.OP_TYPES),
        ("Expm1", xp.expm1, t.OP_TYPES),
        ("Log1p", xp.log1p, t.OP_TYPES),
        ("IsNan", xp.isnan, t.OP_TYPES),
        ("IsInf", xp.isinf, t.OP_TYPES),
        ("IsFinite", xp.isfinite, t.OP_TYPES),
    )
    for op, fn, types in table:
        lib.kernel(op, device=GPU, backend=BACKEND, type_constraints={"T": types})(unary(fn))
    lib.kernel("LeakyRelu", device=GPU, backend=BACKEND, type_constraints={"T": t.OP_TYPES})(
        leaky_relu
    )
