"""Reference cases: activations, unary math, division, comparison, logic and the
reductions and orderings real models need (issue 18), plus AddV2, Div and DivNoNan.

Every reference is a second formulation, never the kernels' code: per-element Python
(``math``/``cmath``, Python integers for integer arithmetic, wrapped back to the dtype),
TensorFlow's rules written as loops (ArgMin's Eigen reducer, TopKV2's ordering, ClipByValue's
std::min/std::max), or numpy in float64 by another formula. Inputs cover every dtype each
op's kernels take, scalar, empty and broadcast shapes, NaN, inf, -0.0 and integer limits.
"""

from __future__ import annotations

import cmath
import functools
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.op_library import types as t
from kernloom.testing.cases.case import Array, Case, reduction_cases, sample

__all__ = ["cases"]

SHAPE_PAIRS = [((2, 3), (2, 3)), ((2, 3), (3,)), ((), (2, 3)), ((0, 3), (1, 3)), ((4, 1), (1, 5))]
UNARY_SHAPES = [(2, 3), (), (0,), (3, 1, 2)]
FLOAT_EDGES = [np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-4, 20.0, -20.0]
SIGNED_INTEGERS = tuple(d for d in t.SIGNED if d.is_integer)
SIGNED_REALS = (*t.FLOATS, *SIGNED_INTEGERS)
CLIP_TYPES = tuple(d for d in t.REALS if d.name not in ("uint32", "uint64"))
"""ClipByValue's types on every device: TensorFlow's CPU has no uint32 or uint64 kernel."""
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def cases() -> Iterator[Case]:
    yield from _unary_cases()
    yield from _binary_cases()
    yield from _logic_cases()
    yield from _reduction_cases()
    yield from _ordering_cases()


# -- helpers -----------------------------------------------------------------------------------


def _elementwise(fn: Callable[..., Any], dtype: Any = None) -> Callable[..., Array]:
    """``fn`` on Python scalars, element by element, in float64/complex128 (or ``dtype``)."""

    def apply(*arrays: Array) -> Array:
        first = arrays[0]
        wide = dtype or (np.complex128 if first.dtype.kind == "c" else np.float64)
        broadcast = np.broadcast_arrays(*(np.asarray(a) for a in arrays))
        flat = [b.astype(wide).reshape(-1).tolist() for b in broadcast]
        values = [fn(*items) for items in zip(*flat, strict=True)]
        shape = broadcast[0].shape if broadcast else ()
        return np.array(values, dtype=wide).reshape(shape)

    return apply


def _as(dtype: Any, fn: Callable[..., Array]) -> Callable[..., Array]:
    """``fn``'s result cast to ``dtype`` (the op's output type)."""

    def ref(*arrays: Array) -> Array:
        return np.asarray(fn(*arrays)).astype(dtype)

    return ref


def _same(fn: Callable[..., Array]) -> Callable[..., Array]:
    """``fn``'s result cast to the first input's dtype."""

    def ref(*arrays: Array) -> Array:
        return np.asarray(fn(*arrays)).astype(np.asarray(arrays[0]).dtype)

    return ref


def _wrapped(values: list[int], dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array:
    """Python integers wrapped into ``dtype`` (two's complement), as C++ arithmetic wraps."""
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    return np.array(
        [(v - int(info.min)) % span + int(info.min) for v in values], dtype=dtype
    ).reshape(shape)


def _integer_op(fn: Callable[[int, int], int]) -> Callable[..., Array]:
    def ref(x: Array, y: Array) -> Array:
        bx, by = np.broadcast_arrays(x, y)
        values = [fn(int(a), int(b)) for a, b in zip(bx.reshape(-1), by.reshape(-1), strict=True)]
        return _wrapped(values, x.dtype, bx.shape)

    return ref


def _edges(dtype: kl.DType) -> Array:
    np_dtype = dtype.numpy_dtype
    if dtype.is_floating:
        return np.array(FLOAT_EDGES, dtype=np_dtype)
    if dtype.is_complex:
        # No 0 or inf: backends and cmath disagree on 1/0j and sin(inf + 0j) (TF too).
        return np.array([1 + 1j, -2.5 - 0.5j, 1e-3j, 0.5 - 2j], dtype=np_dtype)
    info = np.iinfo(np_dtype)
    return np.array(sorted({int(info.min), int(info.max), 0, 1, 6, 7}), dtype=np_dtype)


def _nonzero(shape: tuple[int, ...], dtype: kl.DType) -> Array:
    values = sample(shape, dtype, small=True)
    if values.size:
        values[values == 0] = 1
    return values


# -- unary -------------------------------------------------------------------------------------


def _sign(v: Any) -> Any:
    if isinstance(v, complex):
        return 0j if v == 0 else v / abs(v)
    return v if v != v or v == 0 else math.copysign(1.0, v)


def _round_half_even(v: float) -> float:
    return float(round(v)) if math.isfinite(v) else v  # Python rounds halves to even


def _floor(v: float) -> float:
    return float(math.floor(v)) if math.isfinite(v) else v


def _ceil(v: float) -> float:
    return float(math.ceil(v)) if math.isfinite(v) else v


def _softplus(v: float) -> float:
    return v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v))


def _safe(fn: Callable[[float], float], fallback: Callable[..., Any]) -> Callable[[float], float]:
    """``fn`` on a Python float; numpy's IEEE answer (``fallback``) where ``math`` raises
    instead (log1p(-2), sin(inf)...)."""

    def apply(v: float) -> float:
        if v != v:
            return v
        try:
            return fn(v)
        except (ValueError, OverflowError, ZeroDivisionError):
            with np.errstate(all="ignore"):
                return float(fallback(np.float64(v)))

    return apply


def _ieee_div(a: Any, b: Any) -> Any:
    """a / b with IEEE results for a zero divisor (Python raises)."""
    with np.errstate(all="ignore"):
        if isinstance(a, complex) or isinstance(b, complex):
            return complex(np.complex128(a) / np.complex128(b))
        return float(np.float64(a) / np.float64(b))


def _wide(x: Array) -> Any:
    return np.complex128 if x.dtype.kind == "c" else np.float64


UnaryRow = tuple[str, Callable[..., Array], tuple[kl.DType, ...], str]


def _unary_table() -> list[UnaryRow]:
    real = _elementwise
    return [
        ("Relu6", _same(lambda x: np.minimum(np.maximum(x, 0), 6)), t.REALS, "any"),
        ("Elu", _same(real(lambda v: math.expm1(v) if v < 0 else v)), t.FLOATS, "any"),
        (
            "Selu",
            _same(real(lambda v: SELU_SCALE * (SELU_ALPHA * math.expm1(v) if v < 0 else v))),
            t.FLOATS,
            "any",
        ),
        ("Softplus", _same(real(_softplus)), t.FLOATS, "any"),
        ("Softsign", _same(real(lambda v: v / (abs(v) + 1))), t.FLOATS, "any"),
        ("Erf", _same(real(math.erf)), t.FLOATS, "any"),
        (
            "Rsqrt",
            _same(
                _complex_or_real(
                    lambda z: 1 / cmath.sqrt(z),
                    _safe(lambda v: 1 / math.sqrt(v), lambda v: 1 / np.sqrt(v)),
                )
            ),
            t.INEXACT,
            "positive",
        ),
        ("Reciprocal", _same(real(lambda v: _ieee_div(1, v))), t.INEXACT, "any"),
        ("Abs", _same(lambda x: np.where(x < 0, -x, x)), SIGNED_REALS, "any"),
        ("Sign", _same(real(_sign)), t.SIGNED, "any"),
        ("Floor", _same(real(_floor)), t.FLOATS, "any"),
        ("Ceil", _same(real(_ceil)), t.FLOATS, "any"),
        ("Round", _same(real(_round_half_even)), t.FLOATS, "any"),
        (
            "Round",
            lambda x: x.copy(),
            tuple(d for d in SIGNED_INTEGERS if d.name in ("int32", "int64")),
            "any",
        ),
        ("Sin", _same(_complex_or_real(cmath.sin, _safe(math.sin, np.sin))), t.INEXACT, "any"),
        ("Cos", _same(_complex_or_real(cmath.cos, _safe(math.cos, np.cos))), t.INEXACT, "any"),
        ("Atan", _same(_complex_or_real(cmath.atan, math.atan)), t.INEXACT, "any"),
        *_trigonometric_table(),
        (
            "Expm1",
            _same(_complex_or_real(lambda z: cmath.exp(z) - 1, _safe(math.expm1, np.expm1))),
            t.INEXACT,
            "any",
        ),
        (
            "Log1p",
            _same(_complex_or_real(lambda z: cmath.log(1 + z), _safe(math.log1p, np.log1p))),
            t.INEXACT,
            "positive",
        ),
        ("IsNan", _as(np.bool_, lambda x: x != x), t.FLOATS, "any"),
        ("IsInf", _as(np.bool_, lambda x: (x == np.inf) | (x == -np.inf)), t.FLOATS, "any"),
        (
            "IsFinite",
            _as(np.bool_, lambda x: (x == x) & (x != np.inf) & (x != -np.inf)),
            t.FLOATS,
            "any",
        ),
    ]


def _nan(v: float) -> float:
    return math.nan


def _signed_inf(v: float) -> float:
    return math.copysign(math.inf, v)


def _atanh_edge(v: float) -> float:
    """Where ``math.atanh`` raises: +-inf at +-1 (the pole), NaN beyond."""
    return math.copysign(math.inf, v) if abs(v) == 1 else math.nan


def _ieee(fn: Callable[[float], float], edge: Callable[[float], float]) -> Callable[[float], float]:
    """``fn`` on a Python float; ``edge(v)`` where ``math`` raises instead of returning
    C99's answer (NaN outside the domain, +-inf on overflow or at a pole), so that the
    reference owes nothing to numpy's ufuncs."""

    def apply(v: float) -> float:
        if v != v:
            return v
        try:
            return fn(v)
        except (ValueError, OverflowError):
            return edge(v)

    return apply


def _trigonometric_table() -> list[UnaryRow]:
    """Tan, the inverse and hyperbolic functions and Erfc: cmath for complex, math for the
    rest (math raises where C99 answers NaN or +-inf; ``_ieee`` gives those answers)."""

    def both(complex_fn: Callable[[complex], complex], real_fn: Callable[[float], float]) -> Any:
        return _same(_complex_or_real(complex_fn, real_fn))

    return [
        ("Tan", both(cmath.tan, _ieee(math.tan, _nan)), t.INEXACT, "any"),
        ("Asin", both(cmath.asin, _ieee(math.asin, _nan)), t.INEXACT, "any"),
        ("Acos", both(cmath.acos, _ieee(math.acos, _nan)), t.INEXACT, "any"),
        ("Sinh", both(cmath.sinh, _ieee(math.sinh, _signed_inf)), t.INEXACT, "any"),
        ("Cosh", both(cmath.cosh, _ieee(math.cosh, lambda v: math.inf)), t.INEXACT, "any"),
        ("Asinh", both(cmath.asinh, math.asinh), t.INEXACT, "any"),
        ("Acosh", both(cmath.acosh, _ieee(math.acosh, _nan)), t.INEXACT, "positive"),
        ("Atanh", both(cmath.atanh, _ieee(math.atanh, _atanh_edge)), t.INEXACT, "any"),
        ("Erfc", _same(_elementwise(math.erfc)), t.FLOATS, "any"),
    ]


def _complex_or_real(
    complex_fn: Callable[[complex], complex], real_fn: Callable[[float], float]
) -> Callable[..., Array]:
    def ref(x: Array) -> Array:
        return _elementwise(complex_fn if x.dtype.kind == "c" else real_fn)(x)

    return ref


def _unary_cases() -> Iterator[Case]:
    for op, ref, types, domain in _unary_table():
        for dtype in types:
            for shape in UNARY_SHAPES:
                x = sample(shape, dtype, positive=domain == "positive")
                yield Case(op, [x], reference=ref, id=f"{op}-{dtype}-{shape}")
            yield Case(op, [_edges(dtype)], reference=ref, id=f"{op}-{dtype}-edges")
    for alpha in (0.2, 0.01, 1.5):
        for dtype in t.FLOATS:
            x = np.concatenate([sample((5,), dtype), _edges(dtype)])
            yield Case(
                "LeakyRelu",
                [x],
                {"alpha": alpha},
                # alpha is a float attr: 32 bits, as TF reads it (0.2 is 0.2000000029...).
                reference=lambda x, a=alpha: np.where(
                    x > 0, x, x * x.dtype.type(np.float32(a))
                ).astype(x.dtype),
                id=f"LeakyRelu-{dtype}-{alpha}",
            )
    yield Case(
        "LeakyRelu",
        [np.array([-1.0, 2.0], np.float32)],
        reference=lambda x: np.array([-0.2, 2.0], np.float32),
        id="LeakyRelu-default-alpha",
    )
    yield Case(
        "Round",
        [np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.4999, -3.5], np.float64)],
        reference=lambda x: np.array([0.0, 2.0, 2.0, -0.0, -2.0, 3.0, -4.0]),
        id="Round-bankers-by-hand",
    )
    yield Case(
        "Relu6",
        [np.array([-3, 0, 5, 6, 7, 127], np.int8)],
        reference=lambda x: np.array([0, 0, 5, 6, 6, 6], np.int8),
        id="Relu6-int8-by-hand",
    )
    yield from _trigonometric_cases()


INF, NAN, PI = math.inf, math.nan, math.pi
TRIG_BY_HAND: list[tuple[str, list[float], list[float]]] = [
    # (op, x, the values worked by hand: C99 Annex F's special cases and exact points)
    ("Tan", [-0.0, 0.0, PI / 4, INF, -INF, NAN], [-0.0, 0.0, 1.0, NAN, NAN, NAN]),
    (
        "Asin",
        [-0.0, 0.0, 1.0, -1.0, 0.5, 2.0, -1.5, INF, -INF, NAN],
        [-0.0, 0.0, PI / 2, -PI / 2, PI / 6, NAN, NAN, NAN, NAN, NAN],
    ),
    (
        "Acos",
        [1.0, -1.0, 0.0, -0.0, 0.5, 1.5, -2.0, INF, NAN],
        [0.0, PI, PI / 2, PI / 2, PI / 3, NAN, NAN, NAN, NAN],
    ),
    (
        "Sinh",
        [-0.0, 0.0, 1.0, 1000.0, -1000.0, INF, -INF, NAN],
        [-0.0, 0.0, (math.e - 1 / math.e) / 2, INF, -INF, INF, -INF, NAN],
    ),
    (
        "Cosh",
        [0.0, -0.0, 1.0, 1000.0, -1000.0, INF, -INF, NAN],
        [1.0, 1.0, (math.e + 1 / math.e) / 2, INF, INF, INF, INF, NAN],
    ),
    (
        "Asinh",
        [-0.0, 0.0, 1.0, -1.0, INF, -INF, NAN],
        [-0.0, 0.0, math.log(1 + 2**0.5), -math.log(1 + 2**0.5), INF, -INF, NAN],
    ),
    (
        "Acosh",
        [1.0, 2.0, 0.5, 0.0, -1.0, INF, -INF, NAN],
        [0.0, math.log(2 + 3**0.5), NAN, NAN, NAN, INF, NAN, NAN],
    ),
    (
        "Atanh",
        [1.0, -1.0, -0.0, 0.0, 0.5, 2.0, -1.5, INF, NAN],
        [INF, -INF, -0.0, 0.0, math.log(3) / 2, NAN, NAN, NAN, NAN],
    ),
    (
        "Erfc",
        [0.0, -0.0, INF, -INF, NAN, 30.0, -30.0, 300.0],
        [1.0, 1.0, 0.0, 2.0, NAN, 0.0, 2.0, 0.0],  # erfc(30) = 2.6e-393: below float64
    ),
]
"""Values every float dtype represents the same way, so one list serves float16 to
float64 (1000 overflows sinh and cosh in each)."""


def _trigonometric_cases() -> Iterator[Case]:
    for op, x, expected in TRIG_BY_HAND:
        for dtype in t.FLOATS:
            np_dtype = dtype.numpy_dtype
            yield Case(
                op,
                [np.array(x, np_dtype)],
                reference=lambda x, e=expected: np.array(e, x.dtype),
                id=f"{op}-{dtype}-by-hand",
            )
    for dtype in t.FLOATS:
        np_dtype = dtype.numpy_dtype
        inside = np.linspace(-0.95, 0.95, 9).astype(np_dtype)  # the domain of all three
        for op, fn in (("Asin", math.asin), ("Acos", math.acos), ("Atanh", math.atanh)):
            yield Case(op, [inside], reference=_same(_elementwise(fn)), id=f"{op}-{dtype}-domain")
        above_one = (1 + np.abs(sample((2, 3), dtype))).astype(np_dtype)
        yield Case(
            "Acosh",
            [above_one],
            reference=_same(_elementwise(math.acosh)),
            id=f"Acosh-{dtype}-domain",
        )
        # float16 overflows sinh past 11.1, float32 past 89.4: the values around each.
        near = np.array([11.0, 11.5, 89.0, 89.5, -89.5], np_dtype)
        for op, fn in (("Sinh", math.sinh), ("Cosh", math.cosh)):
            yield Case(op, [near], reference=_same(_elementwise(fn)), id=f"{op}-{dtype}-overflow")
        tail = np.array([0.5, 1.0, 2.0, 5.0, 9.0, 15.0, 26.0, -3.0, -0.25], np_dtype)
        yield Case(
            "Erfc", [tail], reference=_same(_elementwise(math.erfc)), id=f"Erfc-{dtype}-tail"
        )
    yield from _atan2_cases()


def _atan2_cases() -> Iterator[Case]:
    """Atan2(y, x): samples over the broadcast shapes (a scalar and a vector operand
    included), every pair of IEEE edge values, and atan2's special cases by hand."""
    reference = _same(_elementwise(math.atan2))  # CPython's atan2: C99 Annex F
    for dtype in t.FLOATS:
        for sy, sx in SHAPE_PAIRS:
            y, x = sample(sy, dtype), sample(sx, dtype)
            yield Case("Atan2", [y, x], reference=reference, id=f"Atan2-{dtype}-{sy}-{sx}")
        values = np.array([NAN, INF, -INF, -0.0, 0.0, 1.0, -1.0, 0.5], dtype.numpy_dtype)
        y, x = np.repeat(values, values.size), np.tile(values, values.size)
        yield Case("Atan2", [y, x], reference=reference, id=f"Atan2-{dtype}-edge-pairs")
    yield Case(
        "Atan2",
        [
            np.array([0.0, -0.0, 0.0, -0.0, INF, -INF, 1.0, -1.0, 1.0, INF, NAN, 0.0]),
            np.array([-0.0, -0.0, 0.0, 0.0, -INF, -INF, -INF, -INF, INF, 1.0, 0.0, NAN]),
        ],
        reference=lambda y, x: np.array(
            [PI, -PI, 0.0, -0.0, 3 * PI / 4, -3 * PI / 4, PI, -PI, 0.0, PI / 2, NAN, NAN]
        ),
        id="Atan2-special-cases-by-hand",
    )
    yield Case(
        "Atan2",
        [np.float32(1.0), np.array([1.0, -1.0, 0.0], np.float32)],
        reference=lambda y, x: np.array([PI / 4, 3 * PI / 4, PI / 2], np.float32),
        id="Atan2-scalar-y-by-hand",
    )


# -- binary arithmetic ---------------------------------------------------------------------------


def _trunc_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _division(dtype: Any, fn: Callable[[Any, Any], Any]) -> Callable[..., Array]:
    """Floats and complex divide in the input's own dtype (IEEE division), then ``fn``."""

    def ref(x: Array, y: Array) -> Array:
        quotient = np.true_divide(x, y)
        return _elementwise(fn, dtype)(quotient, y)

    return ref


def _float_floor_mod(a: float, b: float) -> float:
    if b == 0 or a != a or b != b or math.isinf(a):
        return math.nan
    remainder = math.fmod(a, b)
    if remainder != 0 and (b < 0) != (remainder < 0):
        remainder += b
    return remainder


def _div_no_nan(x: Array, y: Array) -> Array:
    quotient = _elementwise(lambda a, b: 0 if b == 0 else _ieee_div(a, b), _wide(x))(x, y)
    return quotient.astype(x.dtype)


def _squared_difference(x: Array, y: Array) -> Array:
    if x.dtype.kind in "iu":
        return _integer_op(lambda a, b: (a - b) * (a - b))(x, y)
    difference = _elementwise(lambda a, b: (a - b) * (a - b).conjugate(), _wide(x))(x, y)
    return difference.astype(x.dtype)


def _binary_cases() -> Iterator[Case]:
    for dtype in t.NUMBERS:
        for sx, sy in SHAPE_PAIRS:
            x, y = sample(sx, dtype), sample(sy, dtype)
            ref: Callable[..., Array] = (
                _integer_op(lambda a, b: a + b)
                if dtype.is_integer
                else _same(lambda x, y: x.astype(_wide(x)) + y)
            )
            yield Case("AddV2", [x, y], reference=ref, id=f"AddV2-{dtype}-{sx}-{sy}")
    for dtype in t.NUMBERS:
        for sx, sy in SHAPE_PAIRS:
            x, y = sample(sx, dtype), _nonzero(sy, dtype)
            div_ref = (
                _integer_op(_trunc_div)
                if dtype.is_integer
                else _same(_division(None, lambda q, _: q))
            )
            yield Case("Div", [x, y], reference=div_ref, id=f"Div-{dtype}-{sx}-{sy}")
    for dtype in t.REALS:
        for sx, sy in SHAPE_PAIRS:
            x, y = sample(sx, dtype), _nonzero(sy, dtype)
            yield Case(
                "FloorDiv",
                [x, y],
                reference=_integer_op(lambda a, b: a // b)
                if dtype.is_integer
                else _same(_division(np.float64, lambda q, _: _floor(q))),
                id=f"FloorDiv-{dtype}-{sx}-{sy}",
            )
            yield Case(
                "FloorMod",
                [x, y],
                reference=_integer_op(lambda a, b: a % b)
                if dtype.is_integer
                else _same(_elementwise(_float_floor_mod)),
                id=f"FloorMod-{dtype}-{sx}-{sy}",
            )
    for dtype in (*t.FLOATS, *t.INDEX, *t.COMPLEX):
        for sx, sy in SHAPE_PAIRS:
            x, y = sample(sx, dtype), sample(sy, dtype)
            yield Case(
                "SquaredDifference",
                [x, y],
                reference=_squared_difference,
                id=f"SquaredDifference-{dtype}-{sx}-{sy}",
            )
    for dtype in t.INEXACT:
        for sx, sy in SHAPE_PAIRS:
            x, y = sample(sx, dtype), sample(sy, dtype, small=True)
            if y.size:
                y.reshape(-1)[::2] = 0  # every other divisor is 0
            yield Case("DivNoNan", [x, y], reference=_div_no_nan, id=f"DivNoNan-{dtype}-{sx}-{sy}")
    yield from _division_edges()


def _division_edges() -> Iterator[Case]:
    for dtype in t.FLOATS:
        np_dtype = dtype.numpy_dtype
        x = np.array([1.0, -1.0, 0.0, np.nan, np.inf, -np.inf, 7.0, -7.0, -4.0, 1.0], np_dtype)
        y = np.array([0.0, 0.0, 0.0, 2.0, 2.0, 0.0, np.inf, np.inf, 2.0, -np.inf], np_dtype)
        yield Case(
            "FloorDiv",
            [x, y],
            reference=_same(_division(np.float64, lambda q, _: _floor(q))),
            id=f"FloorDiv-{dtype}-edges",
        )
        yield Case(
            "FloorMod",
            [x, y],
            reference=_same(_elementwise(_float_floor_mod)),
            id=f"FloorMod-{dtype}-edges",
        )
        yield Case(
            "DivNoNan",
            [np.array([np.nan, np.inf, 1.0, 1.0], np_dtype), np.array([0, 0, 0, 4], np_dtype)],
            reference=lambda x, y: np.array([0, 0, 0, 0.25], x.dtype),
            id=f"DivNoNan-{dtype}-nan-over-zero-is-zero",
        )
    # TF's floor(x / y): float32 1 / 0.1 rounds to exactly 10, numpy's // says 9.
    yield Case(
        "FloorDiv",
        [np.array([1.0], np.float32), np.array([0.1], np.float32)],
        reference=lambda x, y: np.array([10.0], np.float32),
        id="FloorDiv-float-is-floor-of-quotient",
    )
    for dtype in SIGNED_INTEGERS:
        info = np.iinfo(dtype.numpy_dtype)
        x = np.array([info.min, info.max, -7, 7, -7, 7, info.min, 0], dtype.numpy_dtype)
        y = np.array([1, -1, 2, 2, -2, -2, -1, -3], dtype.numpy_dtype)
        for op, fn in (
            ("FloorDiv", lambda a, b: a // b),
            ("FloorMod", lambda a, b: a % b),
            ("Div", _trunc_div),
        ):
            yield Case(op, [x, y], reference=_integer_op(fn), id=f"{op}-{dtype}-limits")
    yield Case(
        "FloorMod",
        [np.array([7, -7, 7, -7], np.int32), np.array([3, 3, -3, -3], np.int32)],
        reference=lambda x, y: np.array([1, 2, -2, -1], np.int32),
        id="FloorMod-int-sign-of-divisor-by-hand",
    )
    yield Case(
        "Div",
        [np.array([7, -7, 7, -7], np.int64), np.array([2, 2, -2, -2], np.int64)],
        reference=lambda x, y: np.array([3, -3, -3, 3], np.int64),
        id="Div-int-truncates-by-hand",
    )


# -- comparison and logic ------------------------------------------------------------------------


def _clip_reference(x: Array, low: Array, high: Array) -> Array:
    """TF's std::max(std::min(x, high), low), element by element."""
    bx, bl, bh = np.broadcast_arrays(x, low, high)
    out = []
    flat = (b.reshape(-1).tolist() for b in (bx, bl, bh))
    for v, lo, hi in zip(*flat, strict=True):
        v = hi if hi < v else v
        out.append(lo if v < lo else v)
    return np.array(out, dtype=x.dtype).reshape(x.shape)


def _logic_cases() -> Iterator[Case]:
    for dtype in t.ALL:
        for sx, sy in SHAPE_PAIRS[:4]:
            x, y = sample(sx, dtype, small=True), sample(sy, dtype, small=True)
            yield Case(
                "NotEqual",
                [x, y],
                reference=lambda x, y: ~(x == y),
                id=f"NotEqual-{dtype}-{sx}-{sy}",
            )
    yield Case(
        "NotEqual",
        [np.array([1.0, np.nan, -0.0]), np.array([1.0, np.nan, 0.0])],
        reference=lambda x, y: np.array([False, True, False]),
        id="NotEqual-nan-and-signed-zero",
    )
    yield Case(
        "NotEqual",
        [np.zeros((2, 3), np.int32), np.zeros((4,), np.int32)],
        {"incompatible_shape_error": False},
        reference=lambda x, y: np.array(True),
        id="NotEqual-incompatible-shapes-are-not-equal",
    )
    yield Case(
        "NotEqual",
        [np.zeros((2, 3), np.int32), np.ones((3,), np.int32)],
        {"incompatible_shape_error": False},
        reference=lambda x, y: np.ones((2, 3), bool),
        id="NotEqual-compatible-without-error",
    )
    for op, fn in (
        ("GreaterEqual", lambda x, y: (x > y) | (x == y)),
        ("LessEqual", lambda x, y: (x < y) | (x == y)),
    ):
        for dtype in t.REALS:
            for sx, sy in SHAPE_PAIRS[:4]:
                x, y = sample(sx, dtype, small=True), sample(sy, dtype, small=True)
                yield Case(op, [x, y], reference=fn, id=f"{op}-{dtype}-{sx}-{sy}")
        yield Case(
            op,
            [np.array([1.0, np.nan, -0.0, np.inf]), np.array([np.nan, 1.0, 0.0, np.inf])],
            reference=fn,
            id=f"{op}-nan",
        )
    for sx, sy in SHAPE_PAIRS:
        x, y = sample(sx, kl.bool_), sample(sy, kl.bool_)
        yield Case("LogicalAnd", [x, y], reference=lambda x, y: x & y, id=f"LogicalAnd-{sx}-{sy}")
        yield Case("LogicalOr", [x, y], reference=lambda x, y: x | y, id=f"LogicalOr-{sx}-{sy}")
    for shape in UNARY_SHAPES:
        yield Case(
            "LogicalNot",
            [sample(shape, kl.bool_)],
            reference=lambda x: ~x,
            id=f"LogicalNot-{shape}",
        )
    for dtype in CLIP_TYPES:
        x = sample((2, 3), dtype)
        low, high = np.asarray(1, dtype.numpy_dtype), np.asarray(4, dtype.numpy_dtype)
        yield Case(
            "ClipByValue", [x, low, high], reference=_clip_reference, id=f"ClipByValue-{dtype}"
        )
        yield Case(
            "ClipByValue",
            [x, sample((2, 3), dtype, small=True), high],
            reference=_clip_reference,
            id=f"ClipByValue-{dtype}-tensor-min",
        )
    for dtype in t.FLOATS:
        np_dtype = dtype.numpy_dtype
        yield Case(
            "ClipByValue",
            [
                np.array([np.nan, -np.inf, np.inf, -0.0, 5.0, 0.5], np_dtype),
                np.array([0.0, 0.0, np.nan, 0.0, 3.0, np.nan], np_dtype),
                np.array([1.0, 1.0, 1.0, np.nan, 1.0, 0.25], np_dtype),
            ],
            reference=_clip_reference,
            id=f"ClipByValue-{dtype}-nan-and-crossed-bounds",
        )
    yield Case(
        "ClipByValue",
        [np.array([-5, 0, 5, 9], np.int32), np.int32(0), np.int32(4)],
        reference=lambda t, lo, hi: np.array([0, 0, 4, 4], np.int32),
        id="ClipByValue-by-hand",
    )
    yield Case(
        "ClipByValue",
        [np.zeros((0, 2), np.float32), np.float32(0), np.float32(1)],
        reference=lambda t, lo, hi: np.zeros((0, 2), np.float32),
        id="ClipByValue-empty",
    )


# -- reductions ----------------------------------------------------------------------------------


def _reduce_reference(op: str, axes: Any, keep: bool) -> Callable[..., Array]:
    def ref(x: Array, _: Array) -> Array:
        axis = tuple(sorted({a % x.ndim for a in np.atleast_1d(axes).tolist()}))
        if op == "All":
            return np.asarray(np.sum(~x, axis=axis, keepdims=keep) == 0)
        if op == "Any":
            return np.asarray(np.sum(x, axis=axis, keepdims=keep) > 0)
        if x.dtype.kind in "iu":  # Python integers, wrapped: C++ products wrap
            moved = np.moveaxis(x, axis, tuple(range(x.ndim - len(axis), x.ndim)))
            rows = moved.reshape(*moved.shape[: x.ndim - len(axis)], -1)
            products = [math.prod(int(v) for v in row) for row in rows.reshape(-1, rows.shape[-1])]
            shape = tuple(
                1 if i in axis else d for i, d in enumerate(x.shape) if keep or i not in axis
            )
            return _wrapped(products, x.dtype, shape)
        wide = np.complex128 if x.dtype.kind == "c" else np.float64
        product = np.prod(x.astype(wide), axis=axis, keepdims=keep)
        return np.asarray(product).astype(x.dtype)

    return ref


def _reduction_cases() -> Iterator[Case]:
    for op, types in (("Prod", t.NUMBERS), ("All", (kl.bool_,)), ("Any", (kl.bool_,))):
        for dtype in types:
            x = sample((2, 3, 4), dtype, small=True)
            yield from reduction_cases(op, x, dtype, functools.partial(_reduce_reference, op))
    yield Case(
        "Prod",
        [np.zeros((0, 3), np.float32), np.array([0], np.int64)],
        reference=lambda x, a: np.ones(3, np.float32),
        id="Prod-empty-is-one",
    )
    yield Case(
        "Prod",
        [np.array([[np.nan, 2.0], [np.inf, 0.0]]), np.array([1], np.int32)],
        reference=lambda x, a: np.array([np.nan, np.nan]),
        id="Prod-nan-and-inf-times-zero",
    )
    yield Case(
        "Prod",
        [np.array([100, 3], np.int8), np.array([0], np.int32)],
        reference=lambda x, a: np.array(44, np.int8),  # 300 wraps to 44
        id="Prod-int8-wraps",
    )
    yield Case(
        "All",
        [np.zeros((0, 2), bool), np.array([0], np.int32)],
        reference=lambda x, a: np.ones(2, bool),
        id="All-empty-is-true",
    )
    yield Case(
        "Any",
        [np.zeros((0, 2), bool), np.array([0], np.int32)],
        reference=lambda x, a: np.zeros(2, bool),
        id="Any-empty-is-false",
    )


# -- orderings: ArgMin, Cumsum, TopKV2 -------------------------------------------------------


def _tf_arg_min(row: list[Any], highest: Any) -> int:
    """TF's Eigen ArgMin reducer: starts at (0, highest); a smaller value, or an equal one
    at a lower index, replaces the accumulator. NaN compares false and never does."""
    best_index, best = 0, highest
    for i, v in enumerate(row):
        if v < best or (v == best and i < best_index):
            best_index, best = i, v
    return best_index


def _arg_min_reference(axis: int, out: kl.DType) -> Callable[..., Array]:
    def ref(x: Array, _: Array) -> Array:
        if x.dtype.kind == "f":
            highest: Any = float(np.finfo(x.dtype).max)
        elif x.dtype.kind == "b":
            highest = True
        else:
            highest = int(np.iinfo(x.dtype).max)
        moved = np.moveaxis(x, axis, -1)
        rows = moved.reshape(-1, moved.shape[-1]).tolist()
        found = [_tf_arg_min(row, highest) for row in rows]
        return np.array(found, dtype=out.numpy_dtype).reshape(moved.shape[:-1])

    return ref


def _cumsum_reference(axis: int, exclusive: bool, reverse: bool) -> Callable[..., Array]:
    def ref(x: Array, _: Array) -> Array:
        moved = np.moveaxis(x, axis, -1)
        rows = moved.reshape(-1, moved.shape[-1]).tolist()
        sums = []
        for row in rows:
            values = row[::-1] if reverse else row
            running = list(itertools.accumulate(values))
            if exclusive:
                running = [0, *running[:-1]] if running else []
            sums.append(running[::-1] if reverse else running)
        if x.dtype.kind in "iu":
            flat = [int(v) for row in sums for v in row]
            result = _wrapped(flat, x.dtype, moved.shape)
        else:
            wide = np.complex128 if x.dtype.kind == "c" else np.float64
            result = np.array(sums, dtype=wide).reshape(moved.shape).astype(x.dtype)
        return np.moveaxis(result, -1, axis)

    return ref


def _top_k_reference(k: int, index_type: kl.DType) -> Callable[..., tuple[Array, Array]]:
    def ref(x: Array, _: Array) -> tuple[Array, Array]:
        rows = x.reshape(-1, x.shape[-1]).tolist()
        picked = []
        for row in rows:  # largest first, NaN above everything, then lower index first
            order = sorted(range(len(row)), key=lambda i: (row[i] == row[i], -row[i], i))
            picked.append(order[:k])
        shape = (*x.shape[:-1], k)
        indices = np.array(picked, dtype=np.int64).reshape(shape)
        values = np.array(
            [[row[i] for i in chosen] for row, chosen in zip(rows, picked, strict=True)],
            dtype=x.dtype,
        ).reshape(shape)
        return values, indices.astype(index_type.numpy_dtype)

    return ref


def _ordering_cases() -> Iterator[Case]:
    for dtype in (*t.REALS, kl.bool_):
        x = sample((3, 4), dtype, small=True)
        for axis, out in ((0, kl.int64), (1, kl.int32), (-1, kl.int64)):  # TF: no int16 output
            yield Case(
                "ArgMin",
                [x, np.int32(axis)],
                {"output_type": out},
                reference=_arg_min_reference(axis % 2, out),
                id=f"ArgMin-{dtype}-{axis}-{out}",
            )
    for dtype in t.FLOATS:
        top = float(np.finfo(dtype.numpy_dtype).max)
        x = np.array(
            [
                [np.nan, 3.0, 1.0, 1.0],
                [np.nan, np.nan, np.nan, np.nan],
                [np.inf, top, np.nan, np.inf],
                [-0.0, 0.0, -np.inf, -np.inf],
            ],
            dtype.numpy_dtype,
        )
        yield Case(
            "ArgMin",
            [x, np.int64(1)],
            {"Tidx": kl.int64},
            reference=_arg_min_reference(1, kl.int64),
            id=f"ArgMin-{dtype}-nan-inf",
        )
    yield Case(
        "ArgMin",
        [np.array([[np.nan, 5.0, 2.0, 2.0], [7.0, np.nan, np.nan, 7.0]]), np.int32(1)],
        reference=lambda x, a: np.array([2, 0], np.int64),
        id="ArgMin-nan-skipped-by-hand",
    )
    for dtype in t.NUMBERS:
        x = sample((2, 3, 4), dtype, small=True)
        for axis in (0, 2, -2):
            for exclusive, reverse in itertools.product((False, True), repeat=2):
                yield Case(
                    "Cumsum",
                    [x, np.int32(axis)],
                    {"exclusive": exclusive, "reverse": reverse},
                    reference=_cumsum_reference(axis % 3, exclusive, reverse),
                    id=f"Cumsum-{dtype}-{axis}-{exclusive}-{reverse}",
                )
    yield Case(
        "Cumsum",
        [np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.int64(0)],
        {"exclusive": True, "reverse": True, "Tidx": kl.int64},
        reference=lambda x, a: np.array([9.0, 7.0, 4.0, 0.0], np.float32),
        id="Cumsum-exclusive-reverse-by-hand",
    )
    yield Case(
        "Cumsum",
        [np.zeros((2, 0), np.int32), np.int32(1)],
        {"exclusive": True},
        reference=lambda x, a: np.zeros((2, 0), np.int32),
        id="Cumsum-empty",
    )
    yield Case(
        "Cumsum",
        [np.array([100, 100, -56], np.int8), np.int32(0)],
        reference=lambda x, a: np.array([100, -56, -112], np.int8),
        id="Cumsum-int8-wraps",
    )
    for dtype in t.REALS:
        x = sample((3, 6), dtype, small=True)  # small values: many ties
        for k in (0, 1, 3, 6):
            yield Case(
                "TopKV2",
                [x, np.int32(k)],
                reference=_top_k_reference(k, kl.int32),
                id=f"TopKV2-{dtype}-{k}",
            )
    for dtype in (kl.float16, kl.float64, kl.int8, kl.int64, kl.uint8, kl.uint32):
        x = sample((4, 41), dtype, small=True)  # long rows, small k: many ties at the k-th
        for k in (1, 3, 5):
            yield Case(
                "TopKV2",
                [x, np.int32(k)],
                reference=_top_k_reference(k, kl.int32),
                id=f"TopKV2-long-{dtype}-{k}",
            )
    long_row = sample((3, 40), kl.float32, small=True).round()
    long_row[0, [3, 17, 30]] = np.nan
    long_row[1, :] = np.nan
    long_row[2, ::3] = np.inf
    for k in (1, 2, 4):
        yield Case(
            "TopKV2",
            [long_row, np.int32(k)],
            reference=_top_k_reference(k, kl.int32),
            id=f"TopKV2-long-nan-inf-{k}",
        )
    x = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, -0.0, 0.0, np.inf]])
    for k, index_type, unsorted in ((3, kl.int32, False), (8, kl.int64, True), (2, kl.int16, True)):
        yield Case(
            "TopKV2",
            [x, np.int64(k)],
            {"index_type": index_type, "sorted": not unsorted},
            reference=_top_k_reference(k, index_type),
            id=f"TopKV2-nan-ties-{k}-{index_type}",
        )
    yield Case(
        "TopKV2",
        [np.array([1, 2, 98, 1, 1, 99, 3, 1, 3, 96, 4, 1], np.int32), np.int32(3)],
        reference=lambda x, k: (np.array([99, 98, 96], np.int32), np.array([5, 2, 9], np.int32)),
        id="TopKV2-tf-doc-example",
    )
    yield Case(
        "TopKV2",
        [np.zeros((0, 4), np.float32), np.int32(2)],
        reference=lambda x, k: (np.zeros((0, 2), np.float32), np.zeros((0, 2), np.int32)),
        id="TopKV2-empty-rows",
    )
    yield Case(
        "TopKV2",
        [sample((2, 3, 5), kl.float32), np.int32(2)],
        reference=_top_k_reference(2, kl.int32),
        id="TopKV2-rank-3",
    )
