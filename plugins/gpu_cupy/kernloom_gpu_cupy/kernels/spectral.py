"""The FFT ops on the CuPy GPU: FFT, IFFT, FFT2D, IFFT2D, RFFT, IRFFT with ``xp.fft``.

Written over the array module ``xp`` (CuPy, whose ``cupy.fft`` runs cuFFT in the input's
precision; numpy in tests). The result is cast to the op's output dtype where a backend
widens. Shapes and errors are ``spectral_checks``'s (TensorFlow's): RFFT crops its input
to fft_length, IRFFT to fft_length // 2 + 1 frequencies and ignores the imaginary parts of
the zero-frequency and (even fft_length) Nyquist terms, as TensorFlow's CPU kernel does
(cuFFT's complex-to-real transform would read them); an empty input (or an fft_length of
0) gives zeros of the output's shape. fft_length lives in host memory.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from kernloom.plugin import KernelLibrary, OpKernelContext, spectral_checks
from kernloom.plugin import indexing_checks as ic
from kernloom_gpu_cupy.kernels._host import host_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"


class _Kernels:
    """The kernels, bound to one array module ``xp`` (CuPy, or numpy in tests)."""

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp
        self.complex: dict[str, Callable[[Any], Any]] = {
            "FFT": xp.fft.fft,
            "IFFT": xp.fft.ifft,
            "FFT2D": xp.fft.fft2,
            "IFFT2D": xp.fft.ifft2,
        }

    def complex_fft(self, op: str) -> Callable[[OpKernelContext], None]:
        transform = self.complex[op]

        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            ic.checked(ctx, spectral_checks.spectral_shape, op, x.shape, None)
            out = ctx.allocate_output(0, x.shape)
            if x.size > 0:
                out[...] = transform(x).astype(out.dtype, copy=False)

        compute.__qualname__ = op.lower()
        return compute

    def real_fft(self, op: str) -> Callable[[OpKernelContext], None]:
        xp = self.xp

        def compute(ctx: OpKernelContext) -> None:
            x, lengths = ctx.input(0), host_input(ctx, 1)
            shape, n = ic.checked(ctx, spectral_checks.real_fft_plan, op, x.shape, lengths)
            out = ctx.allocate_output(0, shape)
            if out.size == 0:
                return
            if x.size == 0:
                out.fill(0)
                return
            if op == "RFFT":
                value = xp.fft.rfft(x[..., :n], n)
            else:
                spectrum = x[..., : n // 2 + 1].copy()
                ends = [0, n // 2] if n % 2 == 0 else [0]
                spectrum[..., ends] = spectrum[..., ends].real
                value = xp.fft.irfft(spectrum, n)
            out[...] = value.astype(out.dtype, copy=False)

        compute.__qualname__ = op.lower()
        return compute


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""
    kernels = _Kernels(xp)
    for op in ("FFT", "IFFT", "FFT2D", "IFFT2D"):
        lib.kernel(op, device=GPU, backend=BACKEND)(kernels.complex_fft(op))
    for op in ("RFFT", "IRFFT"):
        lib.kernel(op, device=GPU, backend=BACKEND, host_memory=["fft_length"])(
            kernels.real_fft(op)
        )
