"""Reference cases for the bitwise ops and Cumprod: numpy computed directly, with
TensorFlow's rule for a shift amount that is negative or the bit width or more (its CPU
kernels clamp it to ``[0, bits - 1]``), on every integer dtype, broadcasting included."""

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
