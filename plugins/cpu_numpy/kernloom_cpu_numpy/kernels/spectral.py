"""The FFT ops: FFT, IFFT, FFT2D, IFFT2D, RFFT, IRFFT with ``numpy.fft``.

numpy's pocketfft transforms complex64 (float32) in single precision and complex128 in
double, as TensorFlow's DUCC kernels do; the result is cast to the op's output dtype where
numpy widens. Shapes and errors are ``spectral_checks``'s (TensorFlow's): RFFT crops its
input to fft_length, IRFFT to fft_length // 2 + 1 frequencies, and an empty input (or an
fft_length of 0) gives an output of zeros of the output's shape (TensorFlow leaves such
an output uninitialised).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext, spectral_checks
from kernloom.plugin import indexing_checks as ic

__all__ = ["register"]

CPU = "CPU"
COMPLEX: dict[str, Any] = {
    "FFT": np.fft.fft,
    "IFFT": np.fft.ifft,
    "FFT2D": np.fft.fft2,
    "IFFT2D": np.fft.ifft2,
}


def complex_fft(op: str) -> Any:
    transform = COMPLEX[op]

    def compute(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        ic.checked(ctx, spectral_checks.spectral_shape, op, x.shape, None)
        out = ctx.allocate_output(0, x.shape)
        if x.size == 0:
            return
        out[...] = transform(x)

    compute.__qualname__ = op.lower()
    return compute


def real_fft(op: str) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        shape, n = ic.checked(ctx, spectral_checks.real_fft_plan, op, x.shape, ctx.input(1))
        out = ctx.allocate_output(0, shape)
        if out.size == 0:
            return
        if x.size == 0:
            out.fill(0)
            return
        if op == "RFFT":
            out[...] = np.fft.rfft(x[..., :n], n)
        else:
            out[...] = np.fft.irfft(x[..., : n // 2 + 1], n)

    compute.__qualname__ = op.lower()
    return compute


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""
    for op in COMPLEX:
        lib.kernel(op, device=CPU, backend="numpy")(complex_fft(op))
    for op in ("RFFT", "IRFFT"):
        lib.kernel(op, device=CPU, backend="numpy", host_memory=["fft_length"])(real_fft(op))
