"""Reference cases of the original 53 standard ops (math, array, nn basics)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.op_library import types as t
from kernloom.testing.cases.case import Array, Case, reduction_cases, sample

__all__ = ["cases", "reference_softmax"]

SHAPE_PAIRS = [((2, 3), (2, 3)), ((2, 3), (3,)), ((), (2, 3)), ((0, 3), (1, 3)), ((4, 1), (1, 5))]
UNARY_SHAPES = [(2, 3), (), (0,), (3, 1, 2)]


def cases() -> Iterator[Case]:
    binary: list[tuple[str, Callable[..., Any], tuple[kl.DType, ...]]] = [
        # TF's Add has no uint16/32/64 (AddV2 has) and its Pow no unsigned types.
        (
            "Add",
            np.add,
            tuple(d for d in t.NUMBERS if d.name not in ("uint16", "uint32", "uint64")),
        ),
        ("Sub", np.subtract, t.NUMBERS),
        ("Mul", np.multiply, t.NUMBERS),
        ("RealDiv", np.true_divide, t.INEXACT),
        ("Maximum", np.maximum, t.REALS),
        ("Minimum", np.minimum, t.REALS),
        ("Pow", np.power, tuple(d for d in t.NUMBERS if not d.is_unsigned)),
    ]
    for op, fn, types in binary:
        for dtype in types:
            for sx, sy in SHAPE_PAIRS:
                x = sample(sx, dtype, small=op == "Pow")
                y = sample(sy, dtype, positive=op in ("Pow", "RealDiv"), small=op == "Pow")
                yield Case(op, [x, y], reference=fn, id=f"{op}-{dtype}-{sx}-{sy}")
    unary: list[tuple[str, Callable[..., Any], tuple[kl.DType, ...], bool]] = [
        ("Neg", np.negative, t.SIGNED, False),
        ("Exp", np.exp, t.INEXACT, False),
        ("Log", np.log, t.INEXACT, True),
        ("Sqrt", np.sqrt, t.INEXACT, True),
        ("Square", np.square, t.NUMBERS, False),
        ("Tanh", np.tanh, t.INEXACT, False),
        (
            "Sigmoid",
            lambda x: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype),
            t.FLOATS,
            False,
        ),
        ("Relu", lambda x: np.maximum(x, 0).astype(x.dtype), t.REALS, False),  # NaN stays
    ]
    for op, fn, types, positive in unary:
        for dtype in types:
            for shape in UNARY_SHAPES:
                yield Case(
                    op,
                    [sample(shape, dtype, positive=positive)],
                    reference=fn,
                    id=f"{op}-{dtype}-{shape}",
                )
    for op, fn, types in (
        ("Equal", np.equal, t.ALL),
        ("Less", np.less, t.REALS),
        ("Greater", np.greater, t.REALS),
    ):
        for dtype in types:
            for sx, sy in SHAPE_PAIRS[:3]:
                x = sample(sx, dtype, small=True)
                yield Case(
                    op,
                    [x, sample(sy, dtype, small=True)],
                    reference=fn,
                    id=f"{op}-{dtype}-{sx}-{sy}",
                )
        yield Case(
            op, [np.array([1.0, np.nan]), np.array([1.0, np.nan])], reference=fn, id=f"{op}-nan"
        )
    for dtype in (kl.float32, kl.int64, kl.bool_, kl.complex64):
        c = sample((2, 3), kl.bool_)
        a, b = sample((2, 3), dtype), sample((2, 3), dtype)
        yield Case(
            "Select", [c, a, b], reference=lambda c, a, b: np.where(c, a, b), id=f"Select-{dtype}"
        )
        # TensorFlow's Select (not SelectV2): a vector condition picks whole rows.
        rows = np.array([True, False, True])
        a, b = sample((3, 2, 2), dtype), sample((3, 2, 2), dtype)
        yield Case(
            "Select",
            [rows, a, b],
            reference=lambda c, a, b: np.stack([a[i] if c[i] else b[i] for i in range(len(c))]),
            id=f"Select-rows-{dtype}",
        )
    yield Case(
        "Select",
        [np.array(True), np.ones((2, 2)), np.zeros((2, 2))],
        reference=lambda c, a, b: a if c else b,
        id="Select-scalar-condition",
    )
    for dtype in (kl.float32, kl.int32, kl.uint8, kl.complex128):
        for n in (1, 2, 4):
            values = [sample((2, 3), dtype) for _ in range(n)]
            yield Case(
                "AddN",
                [values],
                reference=lambda v: np.sum(np.stack(v), axis=0).astype(v[0].dtype),
                id=f"AddN-{dtype}-{n}",
            )
    yield Case(
        "AddN",
        [[np.zeros((0, 2), np.float32)] * 3],
        reference=lambda v: np.zeros((0, 2), np.float32),
        id="AddN-empty",
    )
    for dtype in (kl.float16, kl.float32, kl.float64, kl.int32, kl.int64, kl.complex64):
        for ta in (False, True):
            for tb in (False, True):
                a = sample((3, 4) if not ta else (4, 3), dtype, small=True)
                b = sample((4, 5) if not tb else (5, 4), dtype, small=True)
                attrs = {"transpose_a": ta, "transpose_b": tb}

                def ref(a: Array, b: Array, ta: bool = ta, tb: bool = tb) -> Array:
                    wide = np.complex128 if a.dtype.kind == "c" else np.float64
                    return (
                        (a.T if ta else a).astype(wide) @ (b.T if tb else b).astype(wide)
                    ).astype(a.dtype)

                for label in ("", "einsum", "blocked"):
                    yield Case(
                        "MatMul",
                        [a, b],
                        attrs,
                        ref,
                        label,
                        id=f"MatMul-{dtype}-{ta}-{tb}-{label or 'default'}",
                    )
    yield Case(
        "MatMul",
        [np.zeros((0, 3), np.float32), np.ones((3, 2), np.float32)],
        reference=lambda a, b: np.zeros((0, 2), np.float32),
        id="MatMul-empty",
    )
    big_a, big_b = sample((70, 33), kl.float64), sample((33, 9), kl.float64)
    yield Case(
        "MatMul",
        [big_a, big_b],
        reference=lambda a, b: a @ b,
        label="blocked",
        id="MatMul-blocked-sharded",
    )
    for dtype in (kl.float32, kl.int32):
        value = sample((2, 3, 4), dtype)
        yield Case(
            "BiasAdd",
            [value, sample((4,), dtype)],
            reference=lambda v, b: v + b,
            id=f"BiasAdd-NHWC-{dtype}",
        )
        yield Case(
            "BiasAdd",
            [value, sample((3,), dtype)],
            {"data_format": "NCHW"},
            reference=lambda v, b: v + b.reshape(3, 1),
            id=f"BiasAdd-NCHW-{dtype}",
        )
    reductions: list[tuple[str, Callable[..., Any], tuple[kl.DType, ...]]] = [
        ("Sum", np.sum, (kl.float32, kl.float64, kl.int32, kl.uint8, kl.complex64)),
        ("Mean", None, (kl.float32, kl.float64, kl.int32, kl.int64)),  # type: ignore[list-item]
        ("Max", np.max, (kl.float32, kl.int16, kl.uint32)),
        ("Min", np.min, (kl.float64, kl.int8)),
    ]
    for op, fn, types in reductions:
        for dtype in types:
            x = sample((2, 3, 4), dtype)
            reference = functools.partial(_reduction_reference, op, fn)
            yield from reduction_cases(op, x, dtype, reference)
    yield Case(
        "Sum",
        [np.zeros((0, 3), np.float32), np.array([0], np.int64)],
        reference=lambda x, a: np.zeros(3, np.float32),
        id="Sum-empty-int64-axis",
    )
    yield Case(
        "Max",
        [np.zeros((0, 3), np.float32), np.array([0])],
        reference=lambda x, a: np.full(3, -np.inf, np.float32),
        id="Max-empty-is-lowest",
    )
    yield Case(
        "Mean",
        [np.array([-3, -4, 4], np.int32), np.array([0], np.int32)],
        reference=lambda x, a: np.array(-1, np.int32),
        id="Mean-int-truncates-toward-zero",
    )
    for dtype in (kl.float16, kl.float32, kl.float64):
        for shape in ((2, 5), (3,), (2, 0), (1, 2, 3)):
            logits = sample(shape, dtype) * 10
            yield Case("Softmax", [logits], reference=_softmax, id=f"Softmax-{dtype}-{shape}")
            yield Case(
                "Softmax",
                [logits],
                reference=_softmax,
                label="logsumexp",
                id=f"Softmax-lse-{dtype}-{shape}",
            )
            yield Case(
                "LogSoftmax", [logits], reference=_log_softmax, id=f"LogSoftmax-{dtype}-{shape}"
            )
    yield Case(
        "Softmax",
        [np.array([1000.0, 1000.0, -1000.0])],
        reference=_softmax,
        id="Softmax-large-logits",
    )
    for dtype in (kl.float32, kl.int32, kl.bool_):
        x = sample((2, 3), dtype)
        yield Case("Identity", [x], reference=lambda x: x, id=f"Identity-{dtype}")
        yield Case("ZerosLike", [x], reference=np.zeros_like, id=f"ZerosLike-{dtype}")
        yield Case("OnesLike", [x], reference=np.ones_like, id=f"OnesLike-{dtype}")
        yield Case(
            "Shape", [x], reference=lambda x: np.array(x.shape, np.int32), id=f"Shape-{dtype}"
        )
        yield Case(
            "Const", [], {"value": x, "dtype": dtype}, reference=lambda x=x: x, id=f"Const-{dtype}"
        )
    yield Case(
        "Shape",
        [np.zeros((2, 0, 3))],
        {"out_type": kl.int64},
        reference=lambda x: np.array([2, 0, 3], np.int64),
        id="Shape-int64",
    )
    yield Case(
        "Shape", [np.float32(1)], reference=lambda x: np.zeros(0, np.int32), id="Shape-scalar"
    )
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for target in ([6, 4], [-1], [4, -1, 2], [2, 3, 4], [24, 1]):
        yield Case(
            "Reshape",
            [x, np.array(target, np.int32)],
            reference=lambda x, s: x.reshape(s),
            id=f"Reshape-{target}",
        )
    yield Case(
        "Reshape",
        [np.zeros((0, 3)), np.array([3, 0], np.int64)],
        reference=lambda x, s: x.reshape(3, 0),
        id="Reshape-empty",
    )
    for perm in ([1, 0, 2], [2, 1, 0], [0, 1, 2]):
        yield Case(
            "Transpose",
            [x, np.array(perm, np.int32)],
            reference=np.transpose,
            id=f"Transpose-{perm}",
        )
    for axis in (0, 1, -1):
        values = [x, x[:, :, :2] if axis in (-1, 2) else (x[:, :1] if axis == 1 else x[:1])]
        yield Case(
            "ConcatV2",
            [values, np.int32(axis)],
            reference=lambda v, a: np.concatenate(v, axis=int(a)),
            id=f"ConcatV2-{axis}",
        )
    yield Case(
        "ConcatV2",
        [[np.ones(2, np.int64), np.zeros(0, np.int64), np.ones(3, np.int64)], np.int64(0)],
        reference=lambda v, a: np.concatenate(v),
        id="ConcatV2-three-with-empty",
    )
    fill_values: tuple[tuple[kl.DType, object], ...] = (
        (kl.float32, 2.5),
        (kl.int64, 7),
        (kl.bool_, True),
    )
    for dtype, fill in fill_values:
        scalar = np.asarray(fill, dtype.numpy_dtype)
        yield Case(
            "Fill",
            [np.array([2, 3], np.int32), scalar],
            reference=lambda d, v: np.full(d, v),
            id=f"Fill-{dtype}",
        )
    yield Case(
        "Fill",
        [np.array([], np.int32), np.float64(1.5)],
        reference=lambda d, v: np.array(1.5),
        id="Fill-scalar",
    )
    for src, dst in (
        (kl.float32, kl.int32),
        (kl.int64, kl.float16),
        (kl.float64, kl.bool_),
        (kl.bool_, kl.float32),
        (kl.int32, kl.int32),
        (kl.complex64, kl.float32),
        (kl.uint8, kl.int8),
    ):
        x = sample((2, 3), src)
        yield Case(
            "Cast",
            [x],
            {"DstT": dst},
            reference=lambda x, dst=dst: _cast(x, dst),
            id=f"Cast-{src}-{dst}",
        )
    for dtype in (kl.float32, kl.int32, kl.uint8):
        x = sample((3, 4), dtype)
        for axis, out_type in ((0, kl.int64), (1, kl.int32), (-1, kl.int64)):
            yield Case(
                "ArgMax",
                [x, np.int32(axis)],
                {"output_type": out_type},
                reference=lambda x, a, o=out_type: np.argmax(x, axis=int(a)).astype(o.numpy_dtype),
                id=f"ArgMax-{dtype}-{axis}",
            )


def _cast(x: Array, dst: kl.DType) -> Array:
    if x.dtype.kind == "c" and not dst.is_complex:
        x = x.real
    return x.astype(dst.numpy_dtype)


def reference_softmax(x: Array, *, log: bool = False) -> Array:
    """Softmax (or LogSoftmax) over the last axis in float64, with TensorFlow's special
    values: a row with NaN or +inf is all NaN, a row of -inf is NaN, -inf logits get 0."""
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        shifted = wide - wide.max(axis=-1, keepdims=True, initial=-np.inf)
        log_sum = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        out: Array = shifted - log_sum if log else np.exp(shifted - log_sum)
    return out


def _softmax(x: Array) -> Any:
    return reference_softmax(x).astype(x.dtype)


def _log_softmax(x: Array) -> Any:
    return reference_softmax(x, log=True).astype(x.dtype)


def _reduction_reference(
    op: str, fn: Callable[..., Any] | None, axes: Any, keep: bool
) -> Callable[..., Any]:
    def ref(x: Array, _: Array) -> Any:
        axis = tuple(np.atleast_1d(axes).tolist())
        if op == "Mean":
            if x.dtype.kind in "iu":
                total = np.sum(x.astype(np.int64), axis=axis, keepdims=keep)
                count = int(np.prod([x.shape[a] for a in axis])) if axis else 1
                return (np.sign(total) * (np.abs(total) // count)).astype(x.dtype)
            return np.mean(x.astype(np.float64), axis=axis, keepdims=keep).astype(x.dtype)
        assert fn is not None
        return np.asarray(fn(x, axis=axis, keepdims=keep)).astype(x.dtype)

    return ref
