"""The grid of the differential suite: for each op, the inputs and attrs to run both in
kernloom and in TensorFlow, over dtypes, shapes (scalar, empty, broadcast), edge values
(NaN, +-inf, -0.0, subnormals, integer limits) and attrs. Plain numpy, no TensorFlow.

An input listed in ``DiffCase.host`` is a value the op reads when it runs (an axis, a
shape, a permutation): in the static mode it is a constant, so both shape functions see
it; in the dynamic mode every input is a placeholder of unknown shape.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

FLOATS = (np.float16, np.float32, np.float64)
SIGNED = (np.int8, np.int16, np.int32, np.int64)
UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)
INTS = SIGNED + UNSIGNED
COMPLEX = (np.complex64, np.complex128)
ALL = FLOATS + INTS + COMPLEX + (np.bool_,)


@dataclass
class DiffCase:
    op: str
    inputs: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    host: frozenset[int] = frozenset()
    id: str = ""
    approximate: bool = False
    """Values compared within a few ulps (transcendental functions) instead of exactly."""
    factorised: bool = False
    """Values of a factorisation (determinant, inverse, solve): compared within
    ``runners.LINALG_TOLERANCE``, as LAPACK and Eigen sum in different orders."""

    @property
    def has_nonfinite_complex(self) -> bool:
        return any(
            np.asarray(v).dtype.kind == "c" and not np.all(np.isfinite(v))
            for item in self.inputs
            for v in (item if isinstance(item, list) else [item])
        )

    @property
    def has_subnormal(self) -> bool:
        for item in self.inputs:
            for value in item if isinstance(item, list) else [item]:
                array = np.asarray(value)
                if array.dtype.kind in "fc":
                    magnitude = np.abs(array[np.isfinite(array)])
                    tiny = np.finfo(array.dtype).tiny
                    if np.any((magnitude > 0) & (magnitude < tiny)):
                        return True
        return False


RNG = np.random.default_rng(21)


def sample(shape: tuple[int, ...], dtype: Any) -> Array:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return RNG.random(shape) < 0.5
    if dt.kind in "iu":
        low = 0 if dt.kind == "u" else -9
        return RNG.integers(low, 10, size=shape).astype(dt)
    values = RNG.standard_normal(shape) * 3
    if dt.kind == "c":
        values = values + 1j * RNG.standard_normal(shape)
    return np.asarray(values).astype(dt)


def edges(dtype: Any) -> Array:
    """The values that tell implementations apart, as a vector."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return np.array([True, False])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        values = [info.min, info.max, 0, 1, 7, info.max - 1]
        if dt.kind == "i":
            values += [-1, -7, info.min + 1]
        return np.array(values, dt)
    real = np.finfo(dt.type(0).real.dtype if dt.kind == "c" else dt)
    floats = [np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, -1.5, 2.5, 1.0, real.max, -real.max]
    if dt.kind == "c":
        return np.array(
            [complex(f, g) for f, g in zip(floats, floats[3:] + floats[:3], strict=True)], dt
        )
    return np.array(floats, dt)


def subnormals(dtype: Any) -> Array:
    dt = np.dtype(dtype)
    tiny = np.finfo(dt).tiny
    return np.array([tiny / 4, -tiny / 2, tiny * 2], dt)


# -- elementwise ------------------------------------------------------------------------------

UNARY_OPS: dict[str, tuple[Any, ...]] = {
    "Abs": FLOATS + SIGNED,
    "Neg": FLOATS + SIGNED + COMPLEX,
    "Square": FLOATS + INTS + COMPLEX,
    "Sign": FLOATS + SIGNED + COMPLEX,
    "Floor": FLOATS,
    "Ceil": FLOATS,
    "Round": FLOATS + SIGNED,
    "Relu": FLOATS + INTS,
    "Relu6": FLOATS + INTS,
    "Identity": ALL,
    "StopGradient": ALL,
    "ZerosLike": ALL,
    "OnesLike": ALL,
    "IsNan": FLOATS,
    "IsInf": FLOATS,
    "IsFinite": FLOATS,
    "LogicalNot": (np.bool_,),
    "Invert": INTS,
    "Rint": (np.float32, np.float64),
}
APPROXIMATE_UNARY_OPS: dict[str, tuple[Any, ...]] = {
    "Reciprocal": FLOATS + COMPLEX + SIGNED,  # TF's float32 reciprocal is 1 ulp off
    "Exp": FLOATS + COMPLEX,
    "Log": FLOATS + COMPLEX,
    "Sqrt": FLOATS + COMPLEX,
    "Rsqrt": FLOATS + COMPLEX,
    "Tanh": FLOATS + COMPLEX,
    "Sigmoid": FLOATS + COMPLEX,
    "Sin": FLOATS + COMPLEX,
    "Cos": FLOATS + COMPLEX,
    "Atan": FLOATS + COMPLEX + SIGNED,
    # Signed integers too: TensorFlow's op defs refuse them, so both must raise.
    "Tan": FLOATS + COMPLEX + SIGNED,
    "Asin": FLOATS + COMPLEX + SIGNED,
    "Acos": FLOATS + COMPLEX + SIGNED,
    "Sinh": FLOATS + COMPLEX + SIGNED,
    "Cosh": FLOATS + COMPLEX + SIGNED,
    "Asinh": FLOATS + COMPLEX + SIGNED,
    "Acosh": FLOATS + COMPLEX + SIGNED,
    "Atanh": FLOATS + COMPLEX + SIGNED,
    "Erfc": FLOATS + COMPLEX,  # (complex: both must raise)
    "Expm1": FLOATS + COMPLEX,
    "Log1p": FLOATS + COMPLEX,
    "Erf": FLOATS,
    "Elu": FLOATS,
    "Selu": FLOATS,
    "Softplus": FLOATS,
    "Softsign": FLOATS,
    "LeakyRelu": FLOATS,
}
BINARY_OPS: dict[str, tuple[Any, ...]] = {
    "Add": FLOATS + INTS + COMPLEX,
    "AddV2": FLOATS + INTS + COMPLEX,
    "Sub": FLOATS + INTS + COMPLEX,
    "Mul": FLOATS + INTS + COMPLEX,
    "Div": FLOATS + INTS + COMPLEX,
    "RealDiv": FLOATS + COMPLEX,
    "DivNoNan": FLOATS + COMPLEX,
    "FloorDiv": FLOATS + INTS,
    "FloorMod": FLOATS + INTS,
    "Maximum": FLOATS + INTS,
    "Minimum": FLOATS + INTS,
    "SquaredDifference": (*FLOATS, np.int32, np.int64, *COMPLEX),
    "Equal": ALL,
    "NotEqual": ALL,
    "Less": FLOATS + INTS,
    "LessEqual": FLOATS + INTS,
    "Greater": FLOATS + INTS,
    "GreaterEqual": FLOATS + INTS,
    "LogicalAnd": (np.bool_,),
    "LogicalOr": (np.bool_,),
    "BitwiseAnd": INTS,
    "BitwiseOr": INTS,
    "BitwiseXor": INTS,
    "LeftShift": INTS,  # the edges shift by negative and too large amounts: TF clamps them
    "RightShift": INTS,
    "TruncateDiv": FLOATS + INTS,
    "TruncateMod": (np.float32, np.float64, np.int32, np.int64),
    "Mod": (np.float32, np.float64, np.int32, np.int64),
    "Xdivy": FLOATS,
}
APPROXIMATE_BINARY_OPS: dict[str, tuple[Any, ...]] = {
    "Pow": FLOATS + INTS + COMPLEX,
    "Xlogy": FLOATS,  # (a log: within a few ulps)
    "Xlog1py": FLOATS,
    "Atan2": (*FLOATS, np.int32, np.complex64),  # (y, x); int32 and complex: both raise
}

UNARY_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (2, 3))
BINARY_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((), (2, 3)),
    ((2, 1), (1, 3)),
    ((0, 3), (3,)),
    ((2, 3), (4,)),  # cannot broadcast: both must raise
)
DIVISIONS = ("Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Mod")


def _unary_cases() -> Iterator[DiffCase]:
    for approximate, table in ((False, UNARY_OPS), (True, APPROXIMATE_UNARY_OPS)):
        for op, types in table.items():
            for dtype in types:
                name = np.dtype(dtype).name
                for shape in UNARY_SHAPES:
                    yield DiffCase(
                        op,
                        [sample(shape, dtype)],
                        id=f"{op}-{name}-{shape}",
                        approximate=approximate,
                    )
                yield DiffCase(op, [edges(dtype)], id=f"{op}-{name}-edges", approximate=approximate)
                if np.dtype(dtype).kind == "f" and op not in ("Exp", "Expm1", "Sin", "Cos"):
                    yield DiffCase(
                        op,
                        [subnormals(dtype)],
                        id=f"{op}-{name}-subnormal",
                        approximate=approximate,
                    )


def _edge_pairs(dtype: Any, op: str) -> tuple[Array, Array]:
    """Every pair of edge values: x repeats each, y cycles through them."""
    values = edges(dtype)
    x, y = np.repeat(values, values.size), np.tile(values, values.size)
    if op in DIVISIONS and np.dtype(dtype).kind in "iu":
        keep = y != 0  # an integer division by zero fails the whole op; tested apart
        if np.dtype(dtype).kind == "i":
            # INT_MIN / -1 traps (SIGFPE) in TensorFlow's CPU kernel: it would kill the suite.
            keep &= ~((x == np.iinfo(dtype).min) & (y == -1))
        x, y = x[keep], y[keep]
    if op == "Pow" and np.dtype(dtype).kind == "i":
        keep = y >= 0  # a negative integer exponent is an error; tested apart
        x, y = x[keep], y[keep]
    return x, y


def _binary_cases() -> Iterator[DiffCase]:
    for approximate, table in ((False, BINARY_OPS), (True, APPROXIMATE_BINARY_OPS)):
        for op, types in table.items():
            for dtype in types:
                name = np.dtype(dtype).name
                for sx, sy in BINARY_SHAPES:
                    x, y = sample(sx, dtype), sample(sy, dtype)
                    if op in (*DIVISIONS, "Pow") and np.dtype(dtype).kind in "iu":
                        y = np.abs(y) % 5 + 1 if op != "Pow" else np.abs(y) % 4
                        y = y.astype(dtype)
                    yield DiffCase(op, [x, y], id=f"{op}-{name}-{sx}-{sy}", approximate=approximate)
                x, y = _edge_pairs(dtype, op)
                yield DiffCase(op, [x, y], id=f"{op}-{name}-edges", approximate=approximate)
                if np.dtype(dtype).kind == "f":
                    s = subnormals(dtype)
                    yield DiffCase(
                        op,
                        [s, s[::-1].copy()],
                        id=f"{op}-{name}-subnormal",
                        approximate=approximate,
                    )
                if op in DIVISIONS and np.dtype(dtype).kind in "iu":
                    zero = np.array([4, 0], dtype)
                    yield DiffCase(op, [zero, zero[::-1].copy()], id=f"{op}-{name}-by-zero")
                if op == "Pow" and np.dtype(dtype).kind == "i":
                    yield DiffCase(
                        op,
                        [np.array([2], dtype), np.array([-1], dtype)],
                        id=f"{op}-{name}-negative-exponent",
                    )
    for op in ("Equal", "NotEqual"):
        for flag in (True, False):
            yield DiffCase(
                op,
                [sample((2, 3), np.float32), sample((4,), np.float32)],
                {"incompatible_shape_error": flag},
                id=f"{op}-incompatible-{flag}",
            )


# -- reductions and orderings ----------------------------------------------------------------

REDUCTIONS: dict[str, tuple[Any, ...]] = {
    "Sum": FLOATS + INTS + COMPLEX,
    "Mean": FLOATS + INTS + COMPLEX,
    "Prod": FLOATS + INTS + COMPLEX,
    "EuclideanNorm": FLOATS + INTS + COMPLEX,
    "Max": FLOATS + INTS,
    "Min": FLOATS + INTS,
    "All": (np.bool_,),
    "Any": (np.bool_,),
}
AXES: tuple[Any, ...] = (
    [],
    [0],
    [1, -1],
    [0, 1, 2],
    np.int32(1),
    [0, 0],  # duplicated: both raise
    [1, -2],  # duplicated after wrapping
    [3],  # out of range
    [[0]],  # rank 2: TF's shape function refuses it, its kernel reads it flat
)


def _reduction_cases() -> Iterator[DiffCase]:
    for op, types in REDUCTIONS.items():
        for dtype in types:
            name = np.dtype(dtype).name
            x = sample((2, 3, 4), dtype)
            for axes, keep in itertools.product(AXES, (False, True)):
                yield DiffCase(
                    op,
                    [x, np.asarray(axes, np.int32)],
                    {"keep_dims": keep},
                    host=frozenset({1}),
                    id=f"{op}-{name}-{np.asarray(axes).tolist()}-{keep}",
                    approximate=op in ("Mean", "Sum", "Prod", "EuclideanNorm")
                    and np.dtype(dtype).kind in "fc",
                )
            for shape, axes in (((), []), ((), [0]), ((0, 3), [0]), ((0, 3), [1])):
                yield DiffCase(
                    op,
                    [sample(shape, dtype), np.asarray(axes, np.int32)],
                    host=frozenset({1}),
                    id=f"{op}-{name}-{shape}-{axes}",
                )
            if np.dtype(dtype).kind in "iuf" and op in ("Sum", "Mean", "Max", "Min"):
                limits = edges(dtype)
                limits = limits[~np.isnan(limits)] if limits.dtype.kind == "f" else limits
                yield DiffCase(
                    op,
                    [np.repeat(limits, 3), np.array([0], np.int32)],
                    host=frozenset({1}),
                    id=f"{op}-{name}-limits",
                    approximate=op == "Mean" and np.dtype(dtype).kind == "f",
                )
    for dtype, value, count in ((np.uint8, 200, 2), (np.int8, 100, 300), (np.int32, 2**31 - 1, 2)):
        yield DiffCase(
            "Mean",
            [np.full(count, value, dtype), np.array([0], np.int32)],
            host=frozenset({1}),
            id=f"Mean-wide-{np.dtype(dtype).name}",
        )


def _arg_cases() -> Iterator[DiffCase]:
    for op in ("ArgMax", "ArgMin"):
        for dtype in FLOATS + INTS + (np.bool_,):
            name = np.dtype(dtype).name
            x = sample((3, 4), dtype)
            for dim, out in itertools.product((0, 1, -1, 2), (np.int32, np.int64)):
                yield DiffCase(
                    op,
                    [x, np.int32(dim)],
                    {"output_type": np.dtype(out)},
                    host=frozenset({1}),
                    id=f"{op}-{name}-{dim}-{np.dtype(out).name}",
                )
            e = edges(dtype)
            yield DiffCase(op, [e, np.int32(0)], host=frozenset({1}), id=f"{op}-{name}-edges")
            yield DiffCase(
                op, [sample((), dtype), np.int32(0)], host=frozenset({1}), id=f"{op}-{name}-scalar"
            )
            yield DiffCase(
                op,
                [sample((0, 3), dtype), np.int32(0)],
                host=frozenset({1}),
                id=f"{op}-{name}-empty",
            )
        for values in ([np.nan, np.nan], [1.0, np.nan, 3.0, np.nan], [-np.inf, np.nan, -np.inf]):
            yield DiffCase(
                op,
                [np.array(values, np.float32), np.int32(0)],
                host=frozenset({1}),
                id=f"{op}-nan-{values}",
            )


# -- conversions and rearrangements --------------------------------------------------------


def _cast_cases() -> Iterator[DiffCase]:
    for src, dst in itertools.product(ALL, ALL):
        x = edges(src)
        for truncate in (False, True):
            yield DiffCase(
                "Cast",
                [x],
                {"DstT": np.dtype(dst), "Truncate": truncate},
                id=f"Cast-{np.dtype(src).name}-{np.dtype(dst).name}-{truncate}",
            )
        yield DiffCase(
            "Cast",
            [sample((2, 3), src) * (50 if np.dtype(src).kind in "fc" else 1)],
            {"DstT": np.dtype(dst)},
            id=f"Cast-{np.dtype(src).name}-{np.dtype(dst).name}-sample",
        )


def _random_bytes(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> Array:
    """Values of random bit patterns (NaNs, infinities and subnormals among the floats)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    count = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return rng.integers(0, 256, size=count, dtype=np.uint8).view(dt).reshape(shape)


def _bitcast_cases() -> Iterator[DiffCase]:
    """Every pair of types (bool, which neither takes, included): random bit patterns
    shaped to fit (a wider type consumes a last dimension of out_size / in_size), the edge
    values where the type does not widen, and inputs whose last dimension does not fit.
    Its own generator: the cases after these keep their samples."""
    rng = np.random.default_rng(21)
    for src, dst in itertools.product(ALL, ALL):
        ratio = max(np.dtype(dst).itemsize // np.dtype(src).itemsize, 1)
        name = f"Bitcast-{np.dtype(src).name}-{np.dtype(dst).name}"
        attrs = {"type": np.dtype(dst)}
        x = _random_bytes(rng, (2, 3, ratio), src)
        yield DiffCase("Bitcast", [x], attrs, id=f"{name}-bits")
        if ratio == 1:
            yield DiffCase("Bitcast", [edges(src)], attrs, id=f"{name}-edges")
            yield DiffCase("Bitcast", [np.asarray(x[0, 0, 0])], attrs, id=f"{name}-scalar")
        else:
            bad = _random_bytes(rng, (2, ratio + 1), src)
            yield DiffCase("Bitcast", [bad], attrs, id=f"{name}-bad")
            yield DiffCase("Bitcast", [np.asarray(bad[0, 0])], attrs, id=f"{name}-bad-scalar")


def _window3d_cases() -> Iterator[DiffCase]:
    """Conv3D, MaxPool3D and AvgPool3D in NDHWC (TensorFlow's CPU layout): VALID and SAME
    (odd pads at the end), strides along every spatial axis, Conv3D's dilations, windows
    wider than a padded edge; the dtypes TensorFlow 2.21's CPU has kernels for (Conv3D
    float16/32/64, dilated float32 only; the pools float32 only -- the others are
    documented in docs/tensorflow_fidelity.md: kernloom computes them). Integer-valued
    inputs, so that the convolutions' sums are exact in any order. Its own generator: the
    cases before these keep their samples."""
    rng = np.random.default_rng(33)

    def values(shape: tuple[int, ...], dtype: Any) -> Array:
        return rng.integers(-4, 5, size=shape).astype(dtype)

    geometries = [
        ("VALID", [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]),
        ("SAME", [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]),
        ("SAME", [1, 2, 1, 2, 1], [1, 1, 1, 1, 1]),
        ("VALID", [1, 1, 2, 3, 1], [1, 1, 1, 1, 1]),
        ("SAME", [1, 1, 1, 1, 1], [1, 2, 1, 2, 1]),
        ("VALID", [1, 1, 1, 1, 1], [1, 1, 2, 1, 1]),
    ]
    for dtype in (np.float16, np.float32, np.float64):
        name = np.dtype(dtype).name
        for k, (padding, strides, dilations) in enumerate(geometries):
            dilated = dilations != [1, 1, 1, 1, 1]
            if dilated and dtype != np.float32:
                continue
            x = values((2, 4, 5, 6, 3), dtype)
            f = values((2, 3, 2, 3, 2), dtype)
            attrs = {"strides": strides, "padding": padding, "dilations": dilations}
            yield DiffCase("Conv3D", [x, f], attrs, id=f"Conv3D-{name}-{k}")
            if dilated or dtype != np.float32:
                continue
            for op in ("MaxPool3D", "AvgPool3D"):
                for ksize in ([1, 2, 2, 2, 1], [1, 3, 1, 4, 1]):
                    pool = {"ksize": ksize, "strides": strides, "padding": padding}
                    size = "x".join(map(str, ksize[1:4]))
                    yield DiffCase(op, [x], pool, id=f"{op}-{name}-{k}-{size}")
        empty = np.zeros((0, 4, 5, 6, 3), dtype)
        yield DiffCase(
            "Conv3D",
            [empty, values((2, 2, 2, 3, 2), dtype)],
            {"strides": [1] * 5, "padding": "SAME"},
            id=f"Conv3D-{name}-empty",
        )


def _conv3d_backprop_input_cases() -> Iterator[DiffCase]:
    """Conv3DBackpropInputV2 (tf.nn.conv3d_transpose's op) in NDHWC: VALID and SAME with
    strides that skip the input's last rows, odd SAME totals, int32 and int64 input_sizes,
    an empty batch; float16/32/64 undilated (TensorFlow 2.21's Eigen CPU kernel takes no
    dilations, its oneDNN build float32 only: dilated float32 cases too). Integer-valued
    inputs, so that the sums are exact in any order. Its own generator: the cases before
    these keep their samples."""
    rng = np.random.default_rng(34)

    def values(shape: tuple[int, ...], dtype: Any) -> Array:
        return rng.integers(-4, 5, size=shape).astype(dtype)

    def out_size(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
        span = (k - 1) * dilation + 1
        return -(-size // stride) if padding == "SAME" else (size - span) // stride + 1

    sizes, kernel = [2, 4, 5, 6, 3], (2, 3, 2)
    geometries = [
        ("VALID", [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]),
        ("SAME", [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]),
        ("SAME", [1, 2, 1, 2, 1], [1, 1, 1, 1, 1]),
        ("VALID", [1, 1, 2, 3, 1], [1, 1, 1, 1, 1]),
        ("SAME", [1, 3, 2, 2, 1], [1, 1, 1, 1, 1]),
        ("SAME", [1, 1, 1, 1, 1], [1, 2, 1, 2, 1]),
        ("VALID", [1, 1, 1, 1, 1], [1, 1, 2, 1, 1]),
    ]
    for dtype in (np.float16, np.float32, np.float64):
        name = np.dtype(dtype).name
        for k, (padding, strides, dilations) in enumerate(geometries):
            if dilations != [1, 1, 1, 1, 1] and dtype != np.float32:
                continue
            out = [
                out_size(size, kk, s, dl, padding)
                for size, kk, s, dl in zip(
                    sizes[1:4], kernel, strides[1:4], dilations[1:4], strict=True
                )
            ]
            f = values((*kernel, 3, 2), dtype)
            dy = values((2, *out, 2), dtype)
            shape_type = np.int64 if k % 2 else np.int32
            attrs = {"strides": strides, "padding": padding, "dilations": dilations}
            yield DiffCase(
                "Conv3DBackpropInputV2",
                [np.array(sizes, shape_type), f, dy],
                attrs,
                host=frozenset({0}),
                id=f"Conv3DBackpropInputV2-{name}-{k}",
            )
        yield DiffCase(
            "Conv3DBackpropInputV2",
            [
                np.array([0, 4, 5, 6, 3], np.int32),
                values((*kernel, 3, 2), dtype),
                np.zeros((0, 4, 5, 6, 2), dtype),
            ],
            {"strides": [1] * 5, "padding": "SAME"},
            host=frozenset({0}),
            id=f"Conv3DBackpropInputV2-{name}-empty",
        )


def _select_cases() -> Iterator[DiffCase]:
    shapes = (
        ((2, 3), (2, 3), (2, 3)),
        ((), (2, 3), (2, 3)),
        ((2,), (2, 3), (2, 3)),
        ((3,), (3,), (3,)),
        ((2, 1), (2, 3), (2, 3)),
        ((3,), (2, 3), (2, 3)),
        ((2, 3), (2, 3), (3,)),
        ((2,), (2, 0), (2, 0)),
        ((1,), (1, 2), (1, 2)),
    )
    for op in ("Select", "SelectV2"):
        for dtype in (np.float32, np.int64, np.bool_, np.complex64, np.uint8):
            for sc, st, se in shapes:
                yield DiffCase(
                    op,
                    [sample(sc, np.bool_), sample(st, dtype), sample(se, dtype)],
                    id=f"{op}-{np.dtype(dtype).name}-{sc}-{st}-{se}",
                )


def _shape_op_cases() -> Iterator[DiffCase]:
    x = sample((2, 3, 4), np.float32)
    for target in ([6, 4], [-1], [4, -1, 2], [24, 1], [5, -1], [-1, -1], [7], [], [2, -2, 6]):
        yield DiffCase(
            "Reshape",
            [x, np.array(target, np.int32)],
            host=frozenset({1}),
            id=f"Reshape-{target}",
        )
    for shape, target in (
        ((0, 3), [-1, 0]),
        ((2, 0, 3), [-1, 0, 2]),
        ((2, 0, 3), [-1, 0, 5]),
        ((2, 0), [0, -1]),
        ((0,), [-1]),
        ((0, 3), [-1, 3]),
        ((1,), 1),
        ((1,), -1),
        ((), []),
        ((1,), [[1]]),
    ):
        yield DiffCase(
            "Reshape",
            [sample(shape, np.int32), np.array(target, np.int32)],
            host=frozenset({1}),
            id=f"Reshape-{shape}-{target}",
        )
    for perm in ([1, 0, 2], [2, 1, 0], [-1, 0, 1], [0, -1, -2], [0, 1], [0, 0, 1], [3, 0, 1]):
        yield DiffCase(
            "Transpose",
            [x, np.array(perm, np.int32)],
            host=frozenset({1}),
            id=f"Transpose-{perm}",
        )
    yield DiffCase(
        "Transpose",
        [x[0], np.array([[1, 0]], np.int32)],
        host=frozenset({1}),
        id="Transpose-rank-2-perm",
    )
    for dims, value in (
        ([2, 3], np.float32(1.5)),
        ([0, 3], np.int64(7)),
        ([], np.bool_(True)),
        ([2], np.array([3.0], np.float32)),
        (2, np.float32(3.0)),
        ([2], np.array([1, 2], np.int32)),
        ([-1, 2], np.float32(1)),
    ):
        yield DiffCase(
            "Fill",
            [np.array(dims, np.int32), value],
            host=frozenset({0}),
            id=f"Fill-{dims}-{np.shape(value)}",
        )
    for data_format, shape in itertools.product(
        ("NHWC", "NCHW"), ((2, 3), (2, 3, 4), (2, 3, 4, 5), (3,))
    ):
        for bias_len in (3, shape[-1]):
            yield DiffCase(
                "BiasAdd",
                [sample(shape, np.float32), sample((bias_len,), np.float32)],
                {"data_format": data_format},
                id=f"BiasAdd-{data_format}-{shape}-{bias_len}",
            )
    for ta, tb, ga in itertools.product((False, True), (False, True), (False, True)):
        a, b = sample((2, 3), np.float64), sample((3, 2), np.float64)
        yield DiffCase(
            "MatMul",
            [a.T.copy() if ta else a, b.T.copy() if tb else b],
            {"transpose_a": ta, "transpose_b": tb, "grad_a": ga, "grad_b": ga},
            id=f"MatMul-{ta}-{tb}-{ga}",
            approximate=True,
        )
    for dtype in (np.float32, np.int32, np.int64, np.complex64):
        yield DiffCase(
            "MatMul",
            [sample((2, 3), dtype), sample((4, 2), dtype)],
            id=f"MatMul-mismatch-{np.dtype(dtype).name}",
        )
        yield DiffCase(
            "MatMul",
            [sample((0, 3), dtype), sample((3, 2), dtype)],
            id=f"MatMul-empty-{np.dtype(dtype).name}",
        )


def _new_op_cases() -> Iterator[DiffCase]:
    for dtype in (np.int32, np.float32, np.float64, np.bool_, np.uint8, np.complex64, np.int64):
        for x in (sample((8,), dtype), edges(dtype), sample((0,), dtype), sample((2, 2), dtype)):
            for out_idx in (np.int32, np.int64):
                yield DiffCase(
                    "Unique",
                    [x],
                    {"out_idx": np.dtype(out_idx)},
                    id=f"Unique-{np.dtype(dtype).name}-{x.shape}-{np.dtype(out_idx).name}",
                )
    for dtype in (np.float32, np.int64, np.bool_):
        value = sample((2, 3), dtype)
        for shape in ([2, 3], [None, 3], None, [3, 2]):
            yield DiffCase(
                "PlaceholderWithDefault",
                [value],
                {"dtype": np.dtype(dtype), "shape": shape},
                id=f"PlaceholderWithDefault-{np.dtype(dtype).name}-{shape}",
            )


def _bicubic_cases() -> Iterator[DiffCase]:
    """ResizeBicubic over its dtypes, the three coordinate modes, up- and downsampling,
    1-pixel sides, edge values (NaN and infinities spread through the 4x4 taps), an
    empty batch and the run-time errors (bad sizes, an empty image, both modes)."""
    modes = [(False, False), (True, False), (False, True)]
    sizes = [
        ((2, 4, 5, 3), (7, 3)),
        ((1, 6, 7, 2), (3, 9)),
        ((1, 1, 1, 2), (3, 4)),
        ((1, 5, 1, 1), (1, 4)),
        ((0, 2, 2, 1), (3, 3)),
    ]
    dtypes = (*FLOATS, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64)
    for dtype, (shape, size), (align, half) in itertools.product(dtypes, sizes, modes):
        yield DiffCase(
            "ResizeBicubic",
            [sample(shape, dtype), np.array(size, np.int32)],
            {"align_corners": align, "half_pixel_centers": half},
            host=frozenset({1}),
            id=f"ResizeBicubic-{np.dtype(dtype).name}-{shape}-{size}-ac{int(align)}-hp{int(half)}",
        )
    for dtype in (*FLOATS, np.int8, np.uint16, np.int64):
        values = edges(dtype)
        image = np.resize(values, (1, 2, values.size, 1))
        for align, half in modes:
            yield DiffCase(
                "ResizeBicubic",
                [image, np.array([3, 2 * values.size + 1], np.int32)],
                {"align_corners": align, "half_pixel_centers": half},
                host=frozenset({1}),
                id=f"ResizeBicubic-{np.dtype(dtype).name}-edges-ac{int(align)}-hp{int(half)}",
            )
    image = sample((1, 3, 3, 1), np.float32)
    for size, attrs in (
        ((0, 2), {}),
        ((2, -1), {}),
        ((2, 2), {"align_corners": True, "half_pixel_centers": True}),
    ):
        yield DiffCase(
            "ResizeBicubic",
            [image, np.array(size, np.int32)],
            attrs,
            host=frozenset({1}),
            id=f"ResizeBicubic-bad-{size}-{len(attrs)}",
        )
    yield DiffCase(
        "ResizeBicubic",
        [np.zeros((1, 0, 2, 1), np.float32), np.array([2, 2], np.int32)],
        host=frozenset({1}),
        id="ResizeBicubic-empty-image",
    )


def _crop_and_resize_cases() -> Iterator[DiffCase]:
    """CropAndResize over its dtypes and both methods: boxes covering the image, a point,
    flipped, partly outside (extrapolated), crops of 1 (the box's centre); edge values;
    no boxes; and the errors (box_ind outside the batch, non-finite boxes, mismatched
    counts, bad crop sizes, an empty image)."""
    boxes = np.array(
        [
            [0, 0, 1, 1],
            [0.5, 0.5, 0.5, 0.5],
            [1, 1, 0, 0],
            [-0.3, 0.2, 1.4, 0.9],
            [0.1, 0.25, 0.6, 0.8],
            [0.33, -1.0, 0.34, 2.0],
        ],
        np.float32,
    )
    box_ind = np.array([1, 0, 1, 0, 1, 1], np.int32)
    dtypes = (*FLOATS, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64)
    shapes = [(2, 4, 5, 3), (2, 1, 1, 2), (2, 7, 3, 1)]
    for dtype, shape, size, method in itertools.product(
        dtypes, shapes, [(3, 4), (1, 1), (5, 1), (1, 6)], ("bilinear", "nearest")
    ):
        yield DiffCase(
            "CropAndResize",
            [sample(shape, dtype), boxes, box_ind, np.array(size, np.int32)],
            {"method": method, "extrapolation_value": -2.5 if size == (3, 4) else 0.0},
            host=frozenset({3}),
            id=f"CropAndResize-{np.dtype(dtype).name}-{shape}-{size}-{method}",
        )
    for dtype in (*FLOATS, np.int64, np.uint16):
        values = edges(dtype)
        image = np.resize(values, (2, 2, values.size, 1))
        for method in ("bilinear", "nearest"):
            yield DiffCase(
                "CropAndResize",
                [image, boxes, box_ind, np.array([3, 2 * values.size + 1], np.int32)],
                {"method": method},
                host=frozenset({3}),
                id=f"CropAndResize-{np.dtype(dtype).name}-edges-{method}",
            )
    image = sample((2, 3, 3, 2), np.float32)
    yield DiffCase(
        "CropAndResize",
        [image, np.zeros((0, 4), np.float32), np.zeros(0, np.int32), np.array([2, 3], np.int32)],
        host=frozenset({3}),
        id="CropAndResize-no-boxes",
    )
    bad: list[tuple[str, Array, Array, tuple[int, ...]]] = [
        ("box-ind-high", boxes[:2], np.array([0, 2], np.int32), (2, 2)),
        ("box-ind-negative", boxes[:2], np.array([-1, 0], np.int32), (2, 2)),
        ("nan-box", np.array([[0, 0, np.nan, 1]], np.float32), np.zeros(1, np.int32), (2, 2)),
        ("inf-box", np.array([[0, -np.inf, 1, 1]], np.float32), np.zeros(1, np.int32), (2, 2)),
        ("counts", boxes[:2], np.zeros(3, np.int32), (2, 2)),
        ("columns", np.zeros((2, 3), np.float32), np.zeros(2, np.int32), (2, 2)),
        ("zero-size", boxes[:2], np.zeros(2, np.int32), (0, 2)),
        ("size-rank", boxes[:2], np.zeros(2, np.int32), (2, 2, 2)),
    ]
    for name, bad_boxes, bad_ind, size in bad:
        yield DiffCase(
            "CropAndResize",
            [image, bad_boxes, bad_ind, np.array(size, np.int32)],
            host=frozenset({3}),
            id=f"CropAndResize-bad-{name}",
        )
    yield DiffCase(
        "CropAndResize",
        [
            np.zeros((1, 0, 2, 1), np.float32),
            boxes[:1],
            np.zeros(1, np.int32),
            np.array([2, 2], np.int32),
        ],
        host=frozenset({3}),
        id="CropAndResize-empty-image",
    )


def _type_list_cases() -> Iterator[DiffCase]:
    """IdentityN and Assert: lists of tensors of different dtypes (``T: list(type)``)."""
    lists: tuple[tuple[tuple[Any, tuple[int, ...]], ...], ...] = (
        ((np.float32, (2, 3)),),
        ((np.float32, (2, 3)), (np.int64, ())),
        ((np.bool_, (4,)), (np.complex64, (0, 2)), (np.uint8, (1,))),
        ((np.float16, ()), (np.float64, (3,)), (np.int8, (2, 2)), (np.uint64, (0,))),
    )
    for dtype in ALL:
        yield DiffCase(
            "IdentityN", [[edges(dtype), sample((), dtype)]], id=f"IdentityN-{np.dtype(dtype).name}"
        )
    for i, items in enumerate(lists):
        data = [sample(shape, dtype) for dtype, shape in items]
        yield DiffCase("IdentityN", [data], id=f"IdentityN-list-{i}")
        for condition in (True, False, [True], [False], [True, True], [[False]]):
            for summarize in (3, 1, -1):
                yield DiffCase(
                    "Assert",
                    [np.array(condition), data],
                    {"summarize": summarize},
                    id=f"Assert-{i}-{condition}-{summarize}",
                )


# -- linear algebra ---------------------------------------------------------------------------

BAND_TYPES = (np.float32, np.int64, np.bool_, np.complex64, np.float16, np.uint8)
DECOMPOSITION_TYPES = (np.float32, np.float64, np.complex64, np.complex128)
ALIGNS = ("RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT")


def _well_conditioned(shape: tuple[int, ...], dtype: Any) -> Array:
    """Matrices whose diagonal dominates: far from singular, so that every solver agrees."""
    n = shape[-1]
    values = sample(shape, dtype).astype(np.result_type(dtype, np.float32)) / 3
    return (values + 4 * np.eye(n)).astype(dtype)


def _positive_definite(shape: tuple[int, ...], dtype: Any) -> Array:
    a = sample(shape, dtype) / 3
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _band_cases() -> Iterator[DiffCase]:
    limits = ((0, 0), (1, -1), (-1, 0), (-1, -1), (2, 1), (-5, 3), (5, 0), (0, 5))
    for dtype in BAND_TYPES:
        for shape in ((3, 4), (2, 4, 3), (0, 2, 2)):
            x = sample(shape, dtype)
            for index in (np.int32, np.int64):
                for lower, upper in limits:
                    yield DiffCase(
                        "MatrixBandPart",
                        [x, np.asarray(lower, index), np.asarray(upper, index)],
                        host=frozenset({1, 2}),
                        id=f"MatrixBandPart-{np.dtype(dtype).name}-{shape}-{lower}-{upper}-"
                        f"{np.dtype(index).name}",
                    )
    x = sample((3, 3), np.float32)
    for bad in ([sample((3,), np.float32), 0, 0], [x, np.array([0], np.int64), 0]):
        yield DiffCase(
            "MatrixBandPart",
            [np.asarray(bad[0]), np.asarray(bad[1], np.int64), np.asarray(bad[2], np.int64)],
            host=frozenset({1, 2}),
            id=f"MatrixBandPart-bad-{np.shape(bad[0])}-{np.shape(bad[1])}",
        )


def _packed_length(rows: int, cols: int, lower: int, upper: int) -> int:
    return min(rows + min(upper, 0), cols - max(lower, 0))


def _diag_cases() -> Iterator[DiffCase]:
    ks: tuple[Any, ...] = (0, 1, -1, [-1, 1], [0, 2], [-2, -1], [1, 1], [1, 0], [4, 4], [[0]])
    for dtype in (np.float32, np.int32, np.bool_, np.complex64):
        for shape in ((3, 4), (2, 4, 3), (3, 3)):
            x = sample(shape, dtype)
            rows, cols = shape[-2:]
            for k in ks if dtype == np.float32 else (0, [-1, 1]):
                for align in ALIGNS if dtype == np.float32 else ("RIGHT_LEFT",):
                    name = f"{np.dtype(dtype).name}-{shape}-{k}-{align}"
                    yield DiffCase(
                        "MatrixDiagPartV3",
                        [x, np.asarray(k, np.int32), sample((), dtype)],
                        {"align": align},
                        host=frozenset({1}),
                        id=f"MatrixDiagPartV3-{name}",
                    )
                    flat = np.asarray(k).reshape(-1)
                    if np.ndim(k) > 1 or flat[0] > flat[-1]:
                        continue
                    lower, upper = int(flat[0]), int(flat[-1])
                    length = max(_packed_length(rows, cols, lower, upper), 0)
                    count = upper - lower + 1
                    packed = (*shape[:-2], *((count,) if count > 1 else ()), length)
                    diagonal = sample(packed, dtype)
                    yield DiffCase(
                        "MatrixSetDiagV3",
                        [x, diagonal, np.asarray(k, np.int32)],
                        {"align": align},
                        host=frozenset({2}),
                        id=f"MatrixSetDiagV3-{name}",
                    )
                    for size in (
                        (-1, -1),
                        (rows, -1),
                        (-1, cols),
                        (rows, cols),
                        (rows + 1, cols + 1),
                    ):
                        yield DiffCase(
                            "MatrixDiagV3",
                            [
                                diagonal,
                                np.asarray(k, np.int32),
                                np.asarray(size[0], np.int32),
                                np.asarray(size[1], np.int32),
                                sample((), dtype),
                            ],
                            {"align": align},
                            host=frozenset({1, 2, 3}),
                            id=f"MatrixDiagV3-{name}-{size}",
                        )
    x = sample((3, 4), np.float32)
    yield DiffCase(
        "MatrixSetDiagV3",
        [x, sample((4,), np.float32), np.asarray(0, np.int32)],
        host=frozenset({2}),
        id="MatrixSetDiagV3-wrong-diagonal-shape",
    )
    yield DiffCase(
        "MatrixDiagPartV3",
        [x, np.asarray(0, np.int32), sample((2,), np.float32)],
        host=frozenset({1}),
        id="MatrixDiagPartV3-vector-padding",
    )


def _decomposition_cases() -> Iterator[DiffCase]:
    for dtype in (*DECOMPOSITION_TYPES, np.float16, np.int32):
        name = np.dtype(dtype).name
        inputs = [
            ("well", _well_conditioned((3, 3), dtype)),
            ("batch", _well_conditioned((2, 4, 4), dtype)),
            ("one", _well_conditioned((1, 1), dtype)),
            ("empty", np.zeros((2, 0, 0), dtype)),
            ("empty-batch", np.zeros((0, 3, 3), dtype)),
            ("singular", np.array([[1, 2], [2, 4]], dtype)),
            ("zeros", np.zeros((2, 2), dtype)),
            ("non-square", sample((2, 3), dtype)),
            ("vector", sample((3,), dtype)),
        ]
        if np.dtype(dtype).kind in "fc":
            inputs.append(("nan", np.array([[np.nan, 1], [1, 1]], dtype)))
            inputs.append(("inf", np.array([[np.inf, 1], [1, 1]], dtype)))
        for what, a in inputs:
            for op in ("MatrixDeterminant", "LogMatrixDeterminant", "MatrixInverse"):
                attrs: list[dict[str, Any]] = [{}]
                if op == "MatrixInverse":
                    attrs = [{"adjoint": False}, {"adjoint": True}]
                if op == "MatrixInverse" and what == "inf":
                    continue  # Eigen and LAPACK pivot an infinite column differently
                for attr in attrs:
                    yield DiffCase(op, [a], attr, id=f"{op}-{name}-{what}-{attr}", factorised=True)
        for what, a in (
            ("pd", _positive_definite((3, 3), dtype)),
            ("pd-batch", _positive_definite((2, 4, 4), dtype)),
            ("empty", np.zeros((2, 0, 0), dtype)),
            ("non-pd", np.array([[1, 2], [2, 1]], dtype)),
            ("non-square", sample((2, 3), dtype)),
        ):
            if what == "pd" and np.dtype(dtype).kind in "fc":  # the upper triangle is not read
                a = a + np.triu(np.ones_like(a), 1) * 100
            yield DiffCase("Cholesky", [a], id=f"Cholesky-{name}-{what}", factorised=True)
        a, b = _well_conditioned((2, 3, 3), dtype), sample((2, 3, 2), dtype)
        for adjoint in (False, True):
            for what, args in (
                ("batch", [a, b]),
                ("one", [a[0], b[0, :, :1]]),
                ("empty-rhs", [a, b[..., :0]]),
                ("empty", [np.zeros((0, 0), dtype), sample((0, 2), dtype)]),
                ("singular", [np.array([[1, 2], [2, 4]], dtype), sample((2, 1), dtype)]),
                ("broadcast", [a, b[:1]]),
                ("rank", [a[0], b[0, :, 0]]),
                ("rows", [a[0], sample((4, 1), dtype)]),
            ):
                yield DiffCase(
                    "MatrixSolve",
                    args,
                    {"adjoint": adjoint},
                    id=f"MatrixSolve-{name}-{what}-{adjoint}",
                    factorised=True,
                )
            for lower in (True, False):
                for what, args in (
                    ("batch", [a, b]),
                    (
                        "broadcast",
                        [_well_conditioned((3, 1, 3, 3), dtype), sample((4, 3, 2), dtype)],
                    ),
                    ("broadcast-rhs", [a[0], sample((5, 3, 1), dtype)]),
                    ("bad-broadcast", [a, sample((3, 3, 2), dtype)]),
                    ("empty", [np.zeros((0, 0), dtype), sample((0, 2), dtype)]),
                    ("zero-pivot", [np.array([[0, 0], [1, 1]], dtype), np.ones((2, 1), dtype)]),
                    ("rows", [a[0], sample((4, 1), dtype)]),
                ):
                    yield DiffCase(
                        "MatrixTriangularSolve",
                        args,
                        {"lower": lower, "adjoint": adjoint},
                        id=f"MatrixTriangularSolve-{name}-{what}-{lower}-{adjoint}",
                        factorised=True,
                    )


def _linalg_cases() -> Iterator[DiffCase]:
    yield from _band_cases()
    yield from _diag_cases()
    yield from _decomposition_cases()


def cases() -> Iterator[DiffCase]:
    """The whole grid, in a fixed order."""
    yield from _unary_cases()
    yield from _binary_cases()
    yield from _reduction_cases()
    yield from _arg_cases()
    yield from _cast_cases()
    yield from _select_cases()
    yield from _shape_op_cases()
    yield from _new_op_cases()
    yield from _bicubic_cases()
    yield from _crop_and_resize_cases()
    yield from _type_list_cases()
    yield from _linalg_cases()
    yield from _bitcast_cases()  # last: the cases above keep their random samples
    yield from _window3d_cases()  # (its own generator too)
    yield from _conv3d_backprop_input_cases()  # (and these)
