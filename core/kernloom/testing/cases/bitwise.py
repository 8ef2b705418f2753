"""Reference cases for the ops added with TensorFlow's bitwise family: the bitwise ops and
Cumprod (numpy computed directly, with TensorFlow's rule for a shift amount that is
negative or the bit width or more: its CPU kernels clamp it to ``[0, bits - 1]``),
TruncateDiv, TruncateMod, Mod, Xdivy, Xlogy, Xlog1py and Rint; and Bitcast (the input's
bytes read back with ``np.frombuffer``, shaped by TensorFlow's rule written out)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = ["cases"]

INTEGERS = (kl.int8, kl.int16, kl.int32, kl.int64, kl.uint8, kl.uint16, kl.uint32, kl.uint64)
SHAPES = (((2, 3), (2, 3)), ((2, 3), (3,)), ((), (4,)), ((0, 3), (3,)))


def _clamped(shift: Callable[..., Any]) -> Callable[[Array, Array], Array]:
    def reference(x: Array, y: Array) -> Array:
        bits = x.dtype.itemsize * 8
        amount = np.clip(y.astype(np.int64), 0, bits - 1).astype(x.dtype)
        return np.asarray(shift(x, amount), x.dtype)

    return reference


BINARY: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("BitwiseAnd", np.bitwise_and),
    ("BitwiseOr", np.bitwise_or),
    ("BitwiseXor", np.bitwise_xor),
    ("LeftShift", _clamped(np.left_shift)),
    ("RightShift", _clamped(np.right_shift)),
)


def cases() -> Iterator[Case]:
    yield from _bitwise_cases()
    yield from more_cases()
    yield from bitcast_cases()


BITCAST_TYPES = (
    kl.float16, kl.float32, kl.float64, kl.int8, kl.int16, kl.int32, kl.int64,
    kl.uint8, kl.uint16, kl.uint32, kl.uint64, kl.complex64, kl.complex128,
)  # fmt: skip


def _bitcast(target: kl.DType) -> Callable[[Array], Array]:
    """The bytes of x (C order, little-endian as stored) as ``target``: a narrower type
    gets a last axis of in/out values, a wider one loses the last axis it consumes."""

    def reference(x: Array) -> Array:
        out = target.numpy_dtype
        values = np.frombuffer(np.ascontiguousarray(x).tobytes(), dtype=out).copy()
        ratio_in, ratio_out = x.dtype.itemsize, out.itemsize
        if ratio_in == ratio_out:
            return values.reshape(x.shape)
        if ratio_in > ratio_out:
            return values.reshape(*x.shape, ratio_in // ratio_out)
        return values.reshape(x.shape[:-1])

    return reference


def bitcast_cases() -> Iterator[Case]:
    """Every pair of types, on a shape that fits (a wider type needs a last dimension of
    out_size / in_size): a matrix, a scalar, an empty tensor; a transposed input (its
    bytes in C order of the logical array)."""
    for source in BITCAST_TYPES:
        in_size = source.numpy_dtype.itemsize
        for target in BITCAST_TYPES:
            out_size = target.numpy_dtype.itemsize
            last = max(out_size // in_size, 1)
            cid = f"Bitcast-{source}-to-{target}"
            x = sample((2, 3, last), source)
            yield Case("Bitcast", [x], {"type": target}, reference=_bitcast(target), id=cid)
            empty = np.zeros((0, last), source.numpy_dtype)
            yield Case(
                "Bitcast", [empty], {"type": target}, reference=_bitcast(target), id=f"{cid}-empty"
            )
            if last == 1:
                scalar = sample((), source)
                yield Case(
                    "Bitcast",
                    [scalar],
                    {"type": target},
                    reference=_bitcast(target),
                    id=f"{cid}-scalar",
                )
    transposed = np.arange(24, dtype=np.int32).reshape(2, 4, 3).transpose(2, 1, 0)
    for target in (kl.uint8, kl.float32, kl.int64):
        yield Case(
            "Bitcast",
            [transposed],
            {"type": target},
            reference=_bitcast(target),
            id=f"Bitcast-int32-to-{target}-transposed",
        )


def _bitwise_cases() -> Iterator[Case]:
    for dtype in INTEGERS:
        np_dtype = dtype.numpy_dtype
        bits = np_dtype.itemsize * 8
        for op, fn in BINARY:
            for sx, sy in SHAPES:
                x, y = sample(sx, dtype), sample(sy, dtype)
                if op.endswith("Shift"):  # amounts around the width, negative ones too
                    low = -2 if np_dtype.kind == "i" else 0
                    y = np.resize(np.arange(low, bits + 3), sy).astype(np_dtype)
                yield Case(op, [x, y], reference=fn, id=f"{op}-{dtype}-{sx}-{sy}")
        x = sample((2, 3), dtype)
        yield Case("Invert", [x], reference=np.invert, id=f"Invert-{dtype}")
    for dtype in (kl.float32, kl.float64, kl.int32, kl.int64):
        x = sample((2, 3), dtype)
        for exclusive in (False, True):
            for reverse in (False, True):
                yield Case(
                    "Cumprod",
                    [x, np.int32(1)],
                    {"exclusive": exclusive, "reverse": reverse},
                    reference=_cumprod(exclusive, reverse),
                    id=f"Cumprod-{dtype}-exclusive={exclusive}-reverse={reverse}",
                )


def _cumprod(exclusive: bool, reverse: bool) -> Callable[[Array, Any], Array]:
    def reference(x: Array, axis: Any) -> Array:
        values = x[:, ::-1] if reverse else x
        if exclusive:
            values = np.concatenate([np.ones_like(values[:, :1]), values[:, :-1]], axis=1)
        product = np.cumprod(values, axis=1, dtype=x.dtype)
        return product[:, ::-1] if reverse else product

    return reference


def more_cases() -> Iterator[Case]:
    """TruncateDiv, TruncateMod, Mod (C's truncating division and remainder), Xdivy, Xlogy,
    Xlog1py (0 wherever x is 0, its sign kept) and Rint (halves to even): numpy directly."""
    with np.errstate(all="ignore"):
        for dtype in (kl.float32, kl.float64, kl.int32, kl.int64):
            np_dtype = dtype.numpy_dtype
            x = sample((2, 3), dtype)
            y = np.array([[2, -3, 5], [-2, 7, 3]], np_dtype)
            yield Case(
                "TruncateDiv",
                [x, y],
                reference=_truncate_div,
                id=f"TruncateDiv-{dtype}",
            )
            for op in ("TruncateMod", "Mod"):
                yield Case(op, [x, y], reference=np.fmod, id=f"{op}-{dtype}")
        for dtype in (kl.float32, kl.float64):
            np_dtype = dtype.numpy_dtype
            x = np.array([[1.5, 0.0, -0.0, -2.0, 3.0, np.nan]], np_dtype)
            y = np.array([[2.0, 0.0, np.nan, 0.5, -1.0, 1.0]], np_dtype)
            for op, fn in (
                ("Xdivy", np.true_divide),
                ("Xlogy", _times_log),
                ("Xlog1py", _times_log1p),
            ):
                yield Case(op, [x, y], reference=_keeping_zeros(fn), id=f"{op}-{dtype}")
            halves = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 2.4, np.nan, np.inf, -0.0], np_dtype)
            yield Case("Rint", [halves], reference=np.rint, id=f"Rint-{dtype}")
        for dtype in (kl.float32, kl.float64, kl.int32, kl.complex64):
            x = sample((2, 3), dtype)
            for keep in (False, True):
                yield Case(
                    "EuclideanNorm",
                    [x, np.array([1], np.int32)],
                    {"keep_dims": keep},
                    reference=_norm(keep),
                    id=f"EuclideanNorm-{dtype}-keep_dims={keep}",
                )


def _truncate_div(x: Array, y: Array) -> Array:
    quotient: Array
    if x.dtype.kind in "iu":
        quotient = np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))
    else:
        quotient = np.trunc(x / y)
    return quotient.astype(x.dtype)


def _times_log(x: Array, y: Array) -> Array:
    return x * np.log(y)


def _times_log1p(x: Array, y: Array) -> Array:
    return x * np.log1p(y)


def _keeping_zeros(fn: Callable[[Array, Array], Array]) -> Callable[[Array, Array], Array]:
    def reference(x: Array, y: Array) -> Array:
        with np.errstate(all="ignore"):
            result: Array = np.where(x == 0, x * 0, fn(x, y)).astype(x.dtype)
        return result

    return reference


def _norm(keep: bool) -> Callable[[Array, Any], Array]:
    def reference(x: Array, axis: Any) -> Array:
        total = np.sum(np.abs(x) ** 2, axis=1, keepdims=keep)
        root: Array = np.sqrt(total.astype(np.float64))
        return (np.trunc(root) if x.dtype.kind in "iu" else root).astype(x.dtype)

    return reference
