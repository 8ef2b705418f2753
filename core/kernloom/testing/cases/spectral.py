"""Reference cases: FFT, IFFT, FFT2D, IFFT2D, RFFT, IRFFT.

References are ``numpy.fft`` in double precision (complex128 whatever the case's dtype,
then cast to the op's output dtype), over the slices TensorFlow's ops use: RFFT's first
fft_length values, IRFFT's first fft_length // 2 + 1 frequencies. A few cases carry values
worked by hand (``*-by-hand``); empty inputs give empty (or zero) outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = ["cases"]

COMPLEX_REFERENCES: dict[str, Callable[[Array], Array]] = {
    "FFT": np.fft.fft,
    "IFFT": np.fft.ifft,
    "FFT2D": np.fft.fft2,
    "IFFT2D": np.fft.ifft2,
}


def _complex(op: str) -> Callable[[Array], Array]:
    def reference(x: Array) -> Array:
        if x.size == 0:
            return np.zeros(x.shape, x.dtype)
        return np.asarray(COMPLEX_REFERENCES[op](x.astype(np.complex128))).astype(x.dtype)

    return reference


def _rfft(x: Array, fft_length: Array) -> Array:
    n = int(fft_length[0])
    out_dtype = np.complex64 if x.dtype == np.float32 else np.complex128
    shape = (*x.shape[:-1], n // 2 + 1 if n else 0)
    if x.size == 0 or n == 0:
        return np.zeros(shape, out_dtype)
    return np.fft.rfft(x[..., :n].astype(np.float64)).astype(out_dtype)


def _irfft(x: Array, fft_length: Array) -> Array:
    n = int(fft_length[0])
    out_dtype = np.float32 if x.dtype == np.complex64 else np.float64
    if x.size == 0 or n == 0:
        return np.zeros((*x.shape[:-1], n), out_dtype)
    return np.fft.irfft(x[..., : n // 2 + 1].astype(np.complex128), n).astype(out_dtype)


def _length(n: int) -> Array:
    return np.array([n], np.int32)


def _complex_cases() -> Iterator[Case]:
    shapes: dict[str, list[tuple[int, ...]]] = {
        "FFT": [(5,), (2, 3, 8), (1, 1), (0, 3), (2, 0)],
        "FFT2D": [(3, 4), (2, 3, 5), (1, 1), (0, 2, 2), (2, 0, 3)],
    }
    for op in COMPLEX_REFERENCES:
        for dtype in (kl.complex64, kl.complex128):
            for shape in shapes[op.removeprefix("I")]:
                name = "x".join(map(str, shape))
                yield Case(
                    op,
                    [sample(shape, dtype)],
                    reference=_complex(op),
                    id=f"{op}-{dtype}-{name}",
                )


def _real_cases() -> Iterator[Case]:
    # (input's shape, fft_length): equal, cropped, odd, length 1, empty input, length 0
    rfft = [((8,), 8), ((2, 7), 7), ((3, 9), 6), ((2, 5), 1), ((0, 4), 4), ((2, 0), 3), ((2, 3), 0)]
    # (frequencies, fft_length): even and odd lengths, cropped frequencies, empty
    irfft = [
        ((5,), 8),
        ((2, 4), 7),
        ((3, 9), 6),
        ((2, 3), 1),
        ((0, 3), 4),
        ((2, 0), 5),
        ((2, 3), 0),
    ]
    for real in (kl.float32, kl.float64):
        complex_ = kl.complex64 if real == kl.float32 else kl.complex128
        attrs: dict[str, Any] = {"Treal": real, "Tcomplex": complex_}
        for shape, n in rfft:
            yield Case(
                "RFFT",
                [sample(shape, real), _length(n)],
                attrs,
                reference=_rfft,
                id=f"RFFT-{real}-{'x'.join(map(str, shape))}-{n}",
            )
        for shape, n in irfft:
            yield Case(
                "IRFFT",
                [sample(shape, complex_), _length(n)],
                attrs,
                reference=_irfft,
                id=f"IRFFT-{complex_}-{'x'.join(map(str, shape))}-{n}",
            )


def _by_hand() -> Iterator[Case]:
    ramp = np.array([0, 1, 2, 3], np.complex64)
    yield Case(
        "FFT",
        [ramp],
        reference=lambda x: np.array([6, -2 + 2j, -2, -2 - 2j], np.complex64),
        id="FFT-ramp-by-hand",
    )
    yield Case(
        "IFFT2D",
        [np.array([[4, 0], [0, 0]], np.complex128)],
        reference=lambda x: np.ones((2, 2), np.complex128),
        id="IFFT2D-impulse-by-hand",
    )
    yield Case(
        "RFFT",
        [np.arange(6, dtype=np.float32), _length(4)],  # only [0, 1, 2, 3] is transformed
        reference=lambda *_: np.array([6, -2 + 2j, -2], np.complex64),
        id="RFFT-cropped-by-hand",
    )
    # The imaginary parts of the zero-frequency and Nyquist terms are ignored.
    yield Case(
        "IRFFT",
        [np.array([1 + 5j, 2 + 1j, 3 + 7j], np.complex64), _length(4)],
        reference=lambda *_: np.array([2, -1, 0, 0], np.float32),
        id="IRFFT-hermitian-ends-by-hand",
    )


def cases() -> Iterator[Case]:
    yield from _complex_cases()
    yield from _real_cases()
    yield from _by_hand()
