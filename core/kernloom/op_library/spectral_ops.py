"""TensorFlow's FFT ops: FFT, IFFT, FFT2D, IFFT2D, RFFT, IRFFT (spectral_ops.cc).

The complex transforms take complex64 or complex128 and keep it; RFFT maps float32 to
complex64 and float64 to complex128, IRFFT back (another pair of its two type attrs is an
error when the node is built: TensorFlow's kernels refuse it at run time). Each transforms
the innermost dimension (FFT2D, IFFT2D: the two innermost). The rules and messages are
``kernloom.framework.spectral_checks``'s, shared with the kernels.
"""

from __future__ import annotations

from collections.abc import Callable

from kernloom.errors import InvalidArgumentError
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext
from kernloom.framework.spectral_checks import check_real_types, fft_lengths, spectral_shape

__all__ = ["define"]

COMPLEX_ATTR = "Tcomplex: {complex64, complex128} = complex64"
REAL_ATTR = "Treal: {float32, float64} = float32"

COMPLEX_OPS = (
    ("FFT", "fast Fourier transform over the innermost dimension"),
    ("IFFT", "inverse fast Fourier transform over the innermost dimension (scaled by 1/n)"),
    ("FFT2D", "2-D fast Fourier transform over the two innermost dimensions"),
    ("IFFT2D", "2-D inverse fast Fourier transform over the two innermost dimensions"),
)


def _shape_fn(op: str) -> Callable[[InferenceContext], None]:
    """The shape function of ``op``: ``spectral_shape`` on its input and fft_length."""

    def shape(ctx: InferenceContext) -> None:
        try:
            if op in ("RFFT", "IRFFT"):
                check_real_types(op, ctx.attr("Treal").name, ctx.attr("Tcomplex").name)
                lengths = fft_lengths(op, ctx.input_value(1), ctx.input_shape(1).dims)
            else:
                lengths = None
            dims = ctx.input_shape(0).dims
            if dims is None:
                ctx.set_output(0, None)
                return
            ctx.set_output(0, spectral_shape(op, dims, lengths))
        except InvalidArgumentError as exc:
            raise ctx.fail(str(exc)) from None

    return shape


def define(lib: OpLibrary) -> None:
    for op, what in COMPLEX_OPS:
        (
            lib.register_op(op)
            .input("input: Tcomplex")
            .output("output: Tcomplex")
            .attr(COMPLEX_ATTR)
            .shape_fn(_shape_fn(op))
            .doc(
                f"The {what}.",
                "Same shape and dtype as input; an empty input gives an empty output.",
            )
        )
    (
        lib.register_op("RFFT")
        .input("input: Treal")
        .input("fft_length: int32")
        .output("output: Tcomplex")
        .attr(REAL_ATTR)
        .attr(COMPLEX_ATTR)
        .shape_fn(_shape_fn("RFFT"))
        .doc(
            "The fast Fourier transform of a real signal over the innermost dimension: the "
            "fft_length // 2 + 1 unique frequencies (fft_length 0: none).",
            "Uses the first fft_length values of the innermost dimension; a shorter one is "
            "an error (tf.signal.rfft zero-pads it first, as this op does not). float32 "
            "gives complex64, float64 complex128.",
        )
    )
    (
        lib.register_op("IRFFT")
        .input("input: Tcomplex")
        .input("fft_length: int32")
        .output("output: Treal")
        .attr(REAL_ATTR)
        .attr(COMPLEX_ATTR)
        .shape_fn(_shape_fn("IRFFT"))
        .doc(
            "The inverse of RFFT: a real signal of fft_length values from the first "
            "fft_length // 2 + 1 frequencies of the innermost dimension.",
            "A shorter innermost dimension is an error; the imaginary parts of the "
            "zero-frequency term (and, for an even fft_length, of the Nyquist term) are "
            "ignored. complex64 gives float32, complex128 float64.",
        )
    )
