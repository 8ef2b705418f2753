"""The rules of TensorFlow's FFT ops (FFT, IFFT, FFT2D, IFFT2D, RFFT, IRFFT), written once
for the shape functions and every backend's kernels.

The raw ops transform the innermost one or two dimensions. RFFT and IRFFT take an
``fft_length``: RFFT uses the first ``fft_length`` values of the innermost dimension
(cropping a longer one) and IRFFT the first ``fft_length // 2 + 1`` frequencies; a shorter
input is TensorFlow's error (``tf.signal.rfft`` zero-pads before it calls the op, the op
itself never does). Messages are TensorFlow's (core/kernels/fft_ops.cc, spectral_ops.cc).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from kernloom.errors import InvalidArgumentError

__all__ = [
    "FFT_RANK",
    "REAL_PAIRS",
    "check_real_types",
    "fft_lengths",
    "real_fft_plan",
    "spectral_shape",
]

Dim = int | None

FFT_RANK: Final = {"FFT": 1, "IFFT": 1, "FFT2D": 2, "IFFT2D": 2, "RFFT": 1, "IRFFT": 1}
"""How many innermost dimensions each op transforms."""
REAL_PAIRS: Final = {"float32": "complex64", "float64": "complex128"}
"""The (Treal, Tcomplex) pairs TensorFlow's real FFT kernels take."""


def check_real_types(op: str, real: str, complex_: str) -> None:
    """RFFT and IRFFT pair float32 with complex64 and float64 with complex128 (TensorFlow's
    kernels fail on another pair with 'Wrong types for forward real FFT'). The fix named is
    the attr that is not the input's: RFFT's Tcomplex, IRFFT's Treal."""
    if REAL_PAIRS.get(real) != complex_:
        fix = (
            f"Tcomplex={REAL_PAIRS[real]}"
            if op == "RFFT"
            else "Treal=" + {v: k for k, v in REAL_PAIRS.items()}[complex_]
        )
        raise InvalidArgumentError(
            f"{op} pairs Treal=float32 with Tcomplex=complex64 and float64 with complex128, "
            f"not Treal={real} with Tcomplex={complex_}: set {fix}"
        )


def fft_lengths(
    op: str, value: np.ndarray | None, length_shape: Sequence[Dim] | None
) -> tuple[int, ...] | None:
    """The checked ``fft_length`` (None where its value is unknown)."""
    rank = FFT_RANK[op]
    if length_shape is not None and (len(length_shape) != 1 or length_shape[0] not in (None, rank)):
        raise InvalidArgumentError(f"fft_length must have shape [{rank}]")
    if value is None:
        return None
    lengths = tuple(int(v) for v in np.asarray(value).reshape(-1))
    for i, length in enumerate(lengths):
        if length < 0:
            raise InvalidArgumentError(f"fft_length[{i}] must >= 0, but got: {length}")
    return lengths


def _shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def spectral_shape(op: str, shape: Sequence[Dim], lengths: tuple[int, ...] | None) -> list[Dim]:
    """The output shape of ``op`` on an input of ``shape`` (dims may be unknown), with
    TensorFlow's errors: a rank below the transform's, and (for a non-empty input) an
    innermost dimension shorter than RFFT's ``fft_length`` or IRFFT's
    ``fft_length // 2 + 1``."""
    rank = FFT_RANK[op]
    if len(shape) < rank:
        raise InvalidArgumentError(
            f"Input must have rank of at least {rank} but got: {_shape_text(shape)}"
        )
    out = list(shape)
    if op not in ("RFFT", "IRFFT"):
        return out
    if lengths is None:
        out[-1] = None
        return out
    (length,) = lengths
    needed = length if op == "RFFT" else length // 2 + 1
    inner = shape[-1]
    empty = any(d == 0 for d in shape)
    if inner is not None and not empty and inner < needed:
        raise InvalidArgumentError(
            f"Input dimension {len(shape) - 1} must have length of at least {needed} but "
            f"got: {inner}"
        )
    out[-1] = length // 2 + 1 if op == "RFFT" and length != 0 else length
    return out


def real_fft_plan(
    op: str, shape: Sequence[int], fft_length: np.ndarray[Any, Any]
) -> tuple[tuple[int, ...], int]:
    """For a kernel of RFFT or IRFFT: the output's (complete) shape and the transform's
    length, checked as the shape function checks them."""
    lengths = fft_lengths(op, fft_length, np.shape(fft_length))
    assert lengths is not None  # a value was given
    out = spectral_shape(op, shape, lengths)
    return tuple(d for d in out if d is not None), lengths[0]
