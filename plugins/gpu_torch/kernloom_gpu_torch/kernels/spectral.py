"""The FFT ops on the torch GPU: FFT, IFFT, FFT2D, IFFT2D, RFFT, IRFFT with ``torch.fft``.

``torch.fft`` keeps complex64 in single precision and complex128 in double (cuFFT on a
GPU), as TensorFlow's GPU kernels do. Shapes and errors are ``spectral_checks``'s
(TensorFlow's): RFFT crops its input to fft_length, IRFFT to fft_length // 2 + 1
frequencies (the imaginary parts of the zero-frequency and Nyquist terms ignored,
as on TensorFlow's CPU); an empty input (or an fft_length of 0) gives zeros of the output's shape,
since torch refuses a transform of length 0. fft_length lives in host memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernloom.plugin import KernelLibrary, OpKernelContext, spectral_checks
from kernloom.plugin import indexing_checks as ic
from kernloom_gpu_torch.kernels._util import host_input, output, tensor_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "torch"
COMPLEX: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "FFT": lambda x: torch.fft.fft(x, dim=-1),
    "IFFT": lambda x: torch.fft.ifft(x, dim=-1),
    "FFT2D": lambda x: torch.fft.fft2(x, dim=(-2, -1)),
    "IFFT2D": lambda x: torch.fft.ifft2(x, dim=(-2, -1)),
}


def complex_fft(op: str) -> Any:
    transform = COMPLEX[op]

    def compute(ctx: OpKernelContext) -> None:
        x = tensor_input(ctx, 0)
        ic.checked(ctx, spectral_checks.spectral_shape, op, tuple(x.shape), None)
        out = output(ctx, 0, x.shape)
        if x.numel() > 0:
            out.copy_(transform(x))

    compute.__qualname__ = op.lower()
    return compute


def hermitian_ends(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x`` with the imaginary parts of its zero-frequency term (and, for an even ``n``,
    its Nyquist term) set to 0: TensorFlow's CPU kernel (pocketfft) ignores them, while
    cuFFT's complex-to-real transform reads them."""
    x = x.clone()
    ends = [0, n // 2] if n % 2 == 0 else [0]
    x[..., ends] = x[..., ends].real.to(x.dtype)
    return x


def real_fft(op: str) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x = tensor_input(ctx, 0)
        lengths = host_input(ctx, 1)
        shape, n = ic.checked(ctx, spectral_checks.real_fft_plan, op, tuple(x.shape), lengths)
        out = output(ctx, 0, shape)
        if out.numel() == 0:
            return
        if x.numel() == 0:
            out.zero_()
            return
        if op == "RFFT":
            out.copy_(torch.fft.rfft(x[..., :n], n, dim=-1))
        else:
            out.copy_(torch.fft.irfft(hermitian_ends(x[..., : n // 2 + 1], n), n, dim=-1))

    compute.__qualname__ = op.lower()
    return compute


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""
    for op in COMPLEX:
        lib.kernel(op, device=GPU, backend=BACKEND)(complex_fft(op))
    for op in ("RFFT", "IRFFT"):
        lib.kernel(op, device=GPU, backend=BACKEND, host_memory=["fft_length"])(real_fft(op))
