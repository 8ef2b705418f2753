"""Reference cases for bugs the rest of the table let through, found by planting them in a
device plugin (``tests/test_conformance_kit_mutants.py``): a one-element or 0-d operand
treated as a scalar, NaN turned into a number by Maximum and Minimum, integer overflow that
saturates instead of wrapping, the mean of an empty tensor, inputs that are not
contiguous in memory.

``error_cases()`` (with those of the families that keep their own, such as detection) are
inputs an op must reject with ``InvalidArgumentError`` (TensorFlow's
``InvalidArgument``), not with whatever exception the kernel happened to raise; they have
no reference and are not part of ``cases()``: the kit runs them with placeholders of
unknown shape, so that the kernel, not shape inference, meets the bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample
from kernloom.testing.cases.detection import error_cases as detection_error_cases

__all__ = ["cases", "error_cases"]

BROADCAST_EDGES = [((2, 3), (1,)), ((1,), ()), ((2, 3), ()), ((2, 3), (1, 1, 1)), ((), (1,))]
"""Shape pairs where one operand has a single element: its shape still counts."""
WRAPPING_TYPES = (kl.int8, kl.int16, kl.int32, kl.int64, kl.uint8)


def cases() -> Iterator[Case]:
    yield from _broadcast_cases()
    yield from _nan_cases()
    yield from _wrapping_cases()
    yield from _empty_reduction_cases()
    yield from _non_contiguous_cases()


def _broadcast_cases() -> Iterator[Case]:
    binary: list[tuple[str, Callable[..., Any]]] = [
        ("Add", np.add),
        ("AddV2", np.add),
        ("Sub", np.subtract),
        ("Mul", np.multiply),
        ("Maximum", np.maximum),
        ("Minimum", np.minimum),
    ]
    for op, fn in binary:
        for sx, sy in BROADCAST_EDGES:
            x, y = sample(sx, kl.float64), sample(sy, kl.float64)
            yield Case(op, [x, y], reference=fn, id=f"{op}-float64-{sx}-{sy}-one-element")


def _nan_cases() -> Iterator[Case]:
    # TensorFlow's Relu, Maximum and Minimum propagate NaN (Eigen's scalar_max_op).
    for dtype in (np.float32, np.float64):
        name = np.dtype(dtype).name
        x = np.array([np.nan, -np.inf, np.inf, -1.5, 0.0, 2.5, np.nan], dtype)
        yield Case("Relu", [x], reference=lambda a: np.maximum(a, 0), id=f"Relu-{name}-nan")
        y = np.array([1.0, np.nan, np.nan, 2.0, -np.inf, np.inf, -1.0], dtype)
        for op, fn in (("Maximum", np.maximum), ("Minimum", np.minimum)):
            yield Case(op, [x, y], reference=fn, id=f"{op}-{name}-nan")


def _wrapped(values: list[int], dtype: np.dtype[Any]) -> Array:
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    return np.array([(v - int(info.min)) % span + int(info.min) for v in values], dtype)


def _wrapping_cases() -> Iterator[Case]:
    # C++ integer arithmetic wraps around (two's complement), as TensorFlow's kernels do.
    for dtype in WRAPPING_TYPES:
        np_dtype = dtype.numpy_dtype
        info = np.iinfo(np_dtype)
        x = np.array([info.max, info.min, info.max, info.min + 1, 100 % int(info.max)], np_dtype)
        y = np.array([1, 1 if dtype.is_unsigned else -1, info.max, 2, 3], np_dtype)
        for op, fn in (
            ("Add", lambda a, b: a + b),
            ("Sub", lambda a, b: a - b),
            ("Mul", lambda a, b: a * b),
        ):

            def reference(a: Array, b: Array, fn: Callable[[int, int], int] = fn) -> Array:
                return _wrapped([fn(int(p), int(q)) for p, q in zip(a, b, strict=True)], a.dtype)

            yield Case(op, [x, y], reference=reference, id=f"{op}-{dtype}-wraps")


def _empty_reduction_cases() -> Iterator[Case]:
    empty = np.zeros((0, 3), np.float32)
    axis = np.array([0], np.int32)
    for keep in (False, True):
        shape = (1, 3) if keep else (3,)
        suffix = "-keep_dims" if keep else ""
        yield Case(
            "Mean",
            [empty, axis],
            {"keep_dims": keep},
            reference=lambda x, a, shape=shape: np.full(shape, np.nan, np.float32),
            id=f"Mean-float32-empty{suffix}",  # 0 / 0: NaN, as in TensorFlow
        )
        yield Case(
            "Sum",
            [empty, axis],
            {"keep_dims": keep},
            reference=lambda x, a, shape=shape: np.zeros(shape, np.float32),
            id=f"Sum-float32-empty{suffix}",
        )


def _non_contiguous_cases() -> Iterator[Case]:
    # Fed as they are: on a device whose memory is host memory the kernel receives these
    # very arrays, strides and all.
    transposed = sample((3, 2), kl.float64).T
    strided = sample((2, 6), kl.float64)[:, ::2]
    yield Case("Add", [transposed, strided], reference=np.add, id="Add-float64-non-contiguous")
    yield Case("Mul", [strided, transposed], reference=np.multiply, id="Mul-float64-non-contiguous")
    # Nothing to clamp: still a new buffer, not the input handed back.
    yield Case(
        "Relu",
        [np.abs(sample((2, 3), kl.float32))],
        reference=lambda x: x.copy(),
        id="Relu-float32-non-negative",
    )
    yield Case(
        "Relu",
        [sample((4, 3), kl.float32).T],
        reference=lambda x: np.maximum(x, 0),
        id="Relu-float32-non-contiguous",
    )
    yield Case(
        "MatMul",
        [sample((4, 3), kl.float32, small=True).T, sample((4, 10), kl.float32)[:, ::2]],
        reference=lambda a, b: (a.astype(np.float64) @ b).astype(np.float32),
        id="MatMul-float32-non-contiguous",
    )
    yield Case(
        "Sum",
        [sample((4, 3, 2), kl.float32).transpose(2, 1, 0), np.array([1], np.int32)],
        {"keep_dims": False},
        reference=lambda x, a: np.sum(x.astype(np.float64), axis=1).astype(np.float32),
        id="Sum-float32-non-contiguous",
    )


def error_cases() -> Iterator[Case]:
    """Inputs each op must reject with ``InvalidArgumentError``."""
    f32 = np.ones((2, 3), np.float32)
    yield Case("MatMul", [f32, np.ones((4, 5), np.float32)], id="MatMul-error-inner-dims")
    yield Case("Sum", [f32, np.array([5], np.int32)], id="Sum-error-axis-out-of-range")
    yield Case("Mean", [f32, np.array([-3], np.int32)], id="Mean-error-axis-out-of-range")
    divisor = np.array([1, 0], np.int32)
    yield Case("FloorDiv", [np.ones(2, np.int32), divisor], id="FloorDiv-error-int-by-zero")
    yield Case("FloorMod", [np.ones(2, np.int32), divisor], id="FloorMod-error-int-by-zero")
    yield Case("Reshape", [f32, np.array([4, 2], np.int32)], id="Reshape-error-element-count")
    yield Case(
        "Bitcast",
        [np.ones((2, 3), np.uint8)],
        {"type": kl.int32},
        id="Bitcast-error-last-dimension-not-the-size-ratio",
    )
    yield Case("Bitcast", [np.float16(1)], {"type": kl.float32}, id="Bitcast-error-scalar-widened")
    singular = np.array([[[1, 2], [2, 4]], [[1, 0], [0, 1]]], np.float64)
    yield Case("MatrixInverse", [singular], id="MatrixInverse-error-singular")
    yield Case("MatrixSolve", [singular, np.ones((2, 2, 1))], id="MatrixSolve-error-singular")
    yield Case("MatrixDeterminant", [f32], id="MatrixDeterminant-error-not-square")
    yield Case(
        "MatrixBandPart",
        [f32, np.int64(3), np.int64(0)],
        id="MatrixBandPart-error-num-lower-above-rows",
    )
    yield Case(
        "MatrixDiagPartV3",
        [f32, np.int32(3), np.float32(0)],
        id="MatrixDiagPartV3-error-k-out-of-bound",
    )
    yield from detection_error_cases()
