"""ONNX's spectral ops -- DFT, STFT, MelWeightMatrix -- on kernloom's FFT ops.

ONNX holds a complex signal as a float tensor whose last dimension is 2 (real, imaginary)
and a real one with a last dimension of 1. The converters take the parts apart (Unpack),
join them into complex64 (complex128 for float64; float16 is computed in float32) as
``re + im * 1j``, move the transformed axis innermost, and call TensorFlow's FFT, IFFT,
RFFT or IRFFT; the result is split back by a Cast (the real part) and a Cast of
``z * -1j`` (the imaginary part), exact for finite values. ``dft_length`` crops the signal
or pads it with zeros (Slice, Pad), known at import time or only at run time.

The semantics are onnx's reference implementation's (onnx 1.23), which are wider than the
schema's words: a one-sided forward DFT of a complex signal is its full DFT cropped to
``dft_length // 2 + 1`` frequencies, and a one-sided inverse DFT of a real input treats it
as frequencies with zero imaginary parts.

Every length, step and axis may be known at import time or only at run time (the graph
then computes its shapes and permutations, and an Assert named after the rule, such as
``<node>/dft_length_must_be_positive``, checks what the import would have refused); the
input's rank and its last dimension (1 or 2) must be known at import time. bfloat16
signals are refused (kernloom has no bfloat16).

MelWeightMatrix is composed of elementwise ops over a [bins, mel bins] grid with onnx's
reference's arithmetic (the mel scale's ends in the edges' dtype, the rest in float64).
Where onnx's reference indexes past the spectrogram's bins (an IndexError, or a negative
bin counted from the end) the grid simply has no such row: filters are cut at its edges.

Non-finite values: the complex assembly multiplies by ``1j``, so an infinite part makes
NaN parts (as any DFT of an infinite value does in every frequency but one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.builder import control_dependencies
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import rank_of

__all__: list[str] = []

Result = Sequence[Tensor | None]
Length = int | Tensor
"""A transform's length: known at import time, or an int32 scalar tensor."""

COMPLEX_OF = {d.float32: d.complex64, d.float64: d.complex128}


@dataclass(frozen=True)
class _Signal:
    """A signal taken apart: real and (None for a real signal) imaginary parts, in the
    dtype the FFT runs in, with the transformed axis innermost."""

    real: Tensor
    imag: Tensor | None

    def fitted(self, ctx: ConversionContext, length: Length) -> tuple[Tensor, Tensor | None]:
        """Both parts cropped or zero-padded to ``length``."""
        imag = None if self.imag is None else _fit(ctx, self.imag, length)
        return _fit(ctx, self.real, length), imag


def _compute_dtype(node: OnnxNode, x: Tensor) -> d.DType:
    if x.dtype in COMPLEX_OF:
        return x.dtype
    if x.dtype == d.float16:
        return d.float32
    raise node.fail(f"{x.dtype.name} signals are not supported (float16, float32, float64 are)")


def _parts(ctx: ConversionContext, node: OnnxNode, x: Tensor) -> tuple[Tensor, Tensor | None]:
    """x's real and imaginary parts (the last dimension: 1 real, 2 complex)."""
    last = x.shape.dims[-1] if x.shape.dims else None
    if last not in (1, 2):
        raise node.fail(
            f"the input's last dimension is {'unknown' if last is None else last} at import "
            "time; it must be 1 (a real signal) or 2 (real and imaginary parts)"
        )
    if last == 1:
        return ops.squeeze(x, squeeze_dims=[-1]), None
    real, imag = ops.unpack(x, num=2, axis=-1)
    return real, imag


Axis = int | Tensor
"""The transformed axis among the signal's dimensions: known at import time, or an int32
scalar tensor already in [0, rank)."""


def _permutations(ctx: ConversionContext, axis: Axis, rank: int) -> tuple[Tensor, Tensor] | None:
    """(the permutation that moves ``axis`` last among ``rank`` dimensions, its inverse);
    None where the axis is already last."""
    if isinstance(axis, int):
        if axis == rank - 1:
            return None
        perm = [*(i for i in range(rank) if i != axis), axis]
        return ctx.int32s(perm), ctx.int32s([int(i) for i in np.argsort(perm)])
    one = ctx.const(np.int32(1))
    head = ops.range(ctx.const(np.int32(0)), ctx.const(np.int32(rank - 1)), one)
    shifted = ops.add_v2(head, ops.cast(ops.greater_equal(head, axis), DstT=d.int32))
    perm = ops.concat_v2([shifted, ops.reshape(axis, ctx.int32s([1]))], 0)
    every = ops.range(ctx.const(np.int32(0)), ctx.const(np.int32(rank)), one)
    back = ops.sub(every, ops.cast(ops.greater(every, axis), DstT=d.int32))
    inverse = ops.select_v2(ops.equal(every, axis), ctx.const(np.int32(rank - 1)), back)
    return perm, inverse


def _paddings(ctx: ConversionContext, rank: int, last: Sequence[int] = ()) -> Tensor:
    """Pad's paddings: none for ``rank`` dimensions, then ``last`` (a pair) if given."""
    pairs = [[0, 0]] * rank + ([list(last)] if last else [])
    return ctx.const(np.asarray(pairs, np.int32).reshape(-1, 2))


def _fit(ctx: ConversionContext, t: Tensor, length: Length) -> Tensor:
    """t's last dimension cropped or zero-padded to ``length``."""
    rank = t.shape.rank
    assert rank is not None
    inner = t.shape.dims[-1] if t.shape.dims else None
    if isinstance(length, int) and inner is not None:
        if length < inner:
            return ops.slice(t, ctx.int32s([0] * rank), ctx.int32s([-1] * (rank - 1) + [length]))
        if length > inner:
            return ops.pad(t, _paddings(ctx, rank - 1, [0, length - inner]))
        return t
    n = ctx.const(np.int32(length)) if isinstance(length, int) else length
    size = ops.gather_v2(ops.shape(t, out_type=d.int32), ctx.const(np.int32(rank - 1)), 0)
    missing = ops.maximum(ops.sub(n, size), ctx.const(np.int32(0)))
    end = ops.reshape(ops.pack([ctx.const(np.int32(0)), missing]), ctx.int32s([1, 2]))
    padded = ops.pad(t, ops.concat_v2([_paddings(ctx, rank - 1), end], 0))
    sizes = ops.concat_v2([ctx.int32s([-1] * (rank - 1)), ops.reshape(n, ctx.int32s([1]))], 0)
    return ops.slice(padded, ctx.int32s([0] * rank), sizes)


def _complex(ctx: ConversionContext, parts: tuple[Tensor, Tensor | None]) -> Tensor:
    """``real + imag * 1j`` (just ``real`` for a real signal) as complex."""
    real, imag = parts
    kind = COMPLEX_OF[real.dtype]
    z = ops.cast(real, DstT=kind)
    if imag is None:
        return z
    return ops.add_v2(
        z, ops.mul(ops.cast(imag, DstT=kind), ctx.const(np.asarray(1j, kind.numpy_dtype)))
    )


def _half(ctx: ConversionContext, length: Length) -> Length:
    """length // 2 + 1: the frequencies a real signal of ``length`` has."""
    if isinstance(length, int):
        return length // 2 + 1
    return ops.add_v2(ops.floor_div(length, ctx.const(np.int32(2))), ctx.const(np.int32(1)))


def _lengths(ctx: ConversionContext, length: Length) -> Tensor:
    """fft_length: an int32 vector of one."""
    if isinstance(length, int):
        return ctx.int32s([length])
    return ops.reshape(length, ctx.int32s([1]))


def _transform(
    ctx: ConversionContext, signal: _Signal, length: Length, inverse: bool, onesided: bool
) -> tuple[Tensor, bool]:
    """The DFT of the signal over its innermost axis: (the result, whether it is complex).
    onnx's reference's four cases: RFFT, IRFFT, and the full forward and inverse DFT."""
    real = signal.real
    if onesided and inverse:
        spectrum = _complex(ctx, signal.fitted(ctx, _half(ctx, length)))
        return ops.irfft(spectrum, _lengths(ctx, length), Treal=real.dtype), False
    if onesided and signal.imag is None:
        kind = COMPLEX_OF[real.dtype]
        return ops.rfft(_fit(ctx, real, length), _lengths(ctx, length), Tcomplex=kind), True
    z = _complex(ctx, signal.fitted(ctx, length))
    out = ops.ifft(z) if inverse else ops.fft(z)
    if onesided:  # a complex signal: its full DFT, cropped (onnx's reference)
        out = _fit(ctx, out, _half(ctx, length))
    return out, True


def _assembled(ctx: ConversionContext, out: Tensor, is_complex: bool, dtype: d.DType) -> Tensor:
    """ONNX's layout of a result: [..., 2] (real, imaginary) or [..., 1], in ``dtype``."""
    if is_complex:
        real_dtype = d.float32 if out.dtype == d.complex64 else d.float64
        minus_i = ctx.const(np.asarray(-1j, out.dtype.numpy_dtype))
        re = ops.cast(out, DstT=real_dtype)
        im = ops.cast(ops.mul(out, minus_i), DstT=real_dtype)
        result = ops.pack([re, im], axis=-1)
    else:
        result = ops.expand_dims(out, ctx.const(np.int32(-1)))
    return result if result.dtype == dtype else ops.cast(result, DstT=dtype)


def _scalar_input(ctx: ConversionContext, index: int) -> int | Tensor | None:
    """A scalar integer input: its value when known at import time, else an int32 scalar
    tensor; None when absent."""
    if not ctx.has_input(index):
        return None
    value = ctx.static_input(index)
    if value is not None:
        return int(np.asarray(value).reshape(-1)[0])
    return ops.reshape(ops.cast(ctx.input(index), DstT=d.int32), ctx.int32s([]))


def _checked(value: Tensor, ok: Tensor, what: str) -> Tensor:
    """``value`` once an Assert named ``what`` (in the node's name scope) has passed: a
    run-time value that breaks an import-time rule fails there, naming the rule
    (``assertion failed: [v]``)."""
    assert_op = ops.assert_  # TensorFlow's Assert (`assert` is a keyword)
    check = assert_op(ok, [value], name=what)  # in the node's name scope
    with control_dependencies([check]):
        return ops.identity(value)


def _positive(ctx: ConversionContext, node: OnnxNode, value: int | Tensor, what: str) -> Length:
    """A length or step that must be positive: checked now, or when the graph runs."""
    if isinstance(value, int):
        if value < 1:
            raise node.fail(f"{what} must be positive, not {value}")
        return value
    ok = ops.greater(value, ctx.const(np.int32(0)))
    return _checked(value, ok, f"{what}_must_be_positive")


def _signal_axis(ctx: ConversionContext, node: OnnxNode, axis: int | Tensor, rank: int) -> Axis:
    """ONNX's DFT axis (of the input's ``rank`` dimensions, in [-rank, -2] or
    [0, rank - 2]) as an axis of the signal's rank - 1 dimensions."""
    if isinstance(axis, Tensor):
        low, high = ctx.const(np.int32(-rank)), ctx.const(np.int32(rank - 2))
        ok = ops.logical_and(
            ops.greater_equal(axis, low),
            ops.logical_and(
                ops.less_equal(axis, high), ops.not_equal(axis, ctx.const(np.int32(-1)))
            ),
        )
        axis = _checked(axis, ok, f"axis_must_be_in_{-rank}_to_-2_or_0_to_{rank - 2}")
        return ops.floor_mod(axis, ctx.const(np.int32(rank)))
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise node.fail(
            f"axis {axis} is out of range for an input of rank {rank}: it must be in "
            f"[{-rank}, -2] or [0, {rank - 2}] (the last dimension holds the parts)"
        )
    return axis % rank


def _dft(
    ctx: ConversionContext,
    node: OnnxNode,
    x: Tensor,
    axis: int | Tensor,
    length: Length | None,
    inverse: bool,
    onesided: bool,
) -> Tensor:
    """ONNX's DFT of ``x`` ([..., 1] real or [..., 2] complex) over ``axis``, of
    ``length`` (None: the axis' size; twice the size less one for an IRFFT)."""
    rank = rank_of(node, x)
    if rank < 2:
        raise node.fail(f"the input must have rank 2 or more (a signal and its parts), not {rank}")
    signal_axis = _signal_axis(ctx, node, axis, rank)
    if length is not None:
        length = _positive(ctx, node, length, "dft_length")
    compute = _compute_dtype(node, x)
    real, imag = _parts(ctx, node, x if x.dtype == compute else ops.cast(x, DstT=compute))
    perms = _permutations(ctx, signal_axis, rank - 1)
    if perms is not None:
        real = ops.transpose(real, perms[0])
        imag = None if imag is None else ops.transpose(imag, perms[0])
    signal = _Signal(real, imag)
    if length is None:
        size: Length | None = real.shape.dims[-1] if real.shape.dims else None
        if size is None:
            shape = ops.shape(real, out_type=d.int32)
            size = ops.gather_v2(shape, ctx.const(np.int32(rank - 2)), 0)
        if onesided and inverse:  # IRFFT: an even length by default
            length = (
                2 * (size - 1)
                if isinstance(size, int)
                else ops.mul(ops.sub(size, ctx.const(np.int32(1))), ctx.const(np.int32(2)))
            )
        else:
            length = size
    out, is_complex = _transform(ctx, signal, length, inverse, onesided)
    if perms is not None:
        out = ops.transpose(out, perms[1])
    return _assembled(ctx, out, is_complex, x.dtype)


def _flags(node: OnnxNode) -> tuple[bool, bool]:
    return bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))


@converter("DFT", 17, 19, attrs=("axis", "inverse", "onesided"))
def _dft_17(node: OnnxNode, ctx: ConversionContext) -> Result:
    axis = int(node.attr("axis", 1))
    return [_dft(ctx, node, ctx.input(0), axis, _scalar_input(ctx, 1), *_flags(node))]


@converter("DFT", 20, attrs=("inverse", "onesided"))
def _dft_20(node: OnnxNode, ctx: ConversionContext) -> Result:
    axis = _scalar_input(ctx, 2)
    axis = -2 if axis is None else axis
    return [_dft(ctx, node, ctx.input(0), axis, _scalar_input(ctx, 1), *_flags(node))]


@converter("STFT", 17, attrs=("onesided",))
def _stft(node: OnnxNode, ctx: ConversionContext) -> Result:
    signal = ctx.input(0)
    if rank_of(node, signal, "signal") != 3:
        raise node.fail(
            f"the signal must have rank 3 ([batch, length, 1 or 2]), not {signal.shape}"
        )
    given = _scalar_input(ctx, 1)
    assert given is not None  # a required input
    step = _positive(ctx, node, given, "frame_step")
    window = ctx.optional(2)
    window_length: Length | None = None
    if window is not None:
        if window.shape.rank not in (None, 1):
            raise node.fail(f"the window must be a vector, not of shape {window.shape}")
        known = window.shape.dims[0] if window.shape.dims else None
        window_length = (
            int(known)
            if known is not None
            else ops.gather_v2(ops.shape(window, out_type=d.int32), ctx.const(np.int32(0)), 0)
        )
    frame_length = _scalar_input(ctx, 3)
    if frame_length is not None:
        frame_length = _positive(ctx, node, frame_length, "frame_length")
    if (
        isinstance(frame_length, int)
        and isinstance(window_length, int)
        and window_length != frame_length
    ):
        raise node.fail(
            f"the window's length {window_length} must equal frame_length {frame_length}"
        )
    if frame_length is None:
        frame_length = window_length
    if frame_length is None:
        known = signal.shape.dims[1] if signal.shape.dims else None
        frame_length = (
            int(known)
            if known is not None
            else ops.gather_v2(ops.shape(signal, out_type=d.int32), ctx.const(np.int32(1)), 0)
        )
    frames = _frames(ctx, node, signal, frame_length, step)  # [batch, frames, length, parts]
    if window is not None:
        weights = window if window.dtype == signal.dtype else ops.cast(window, DstT=signal.dtype)
        frames = ops.mul(frames, ops.reshape(weights, ctx.int32s([1, 1, -1, 1])))
    onesided = bool(node.attr("onesided", 1))
    return [_dft(ctx, node, frames, 2, frame_length, False, onesided)]


def _frames(
    ctx: ConversionContext, node: OnnxNode, signal: Tensor, frame_length: Length, step: Length
) -> Tensor:
    """The signal's frames [batch, frames, frame_length, parts]: frame f holds samples
    f * step ... f * step + frame_length - 1, for floor((length - frame_length) / step) + 1
    frames (a gather of the signal's axis 1; constant indices where all is known)."""
    signal_length = signal.shape.dims[1] if signal.shape.dims else None
    if isinstance(frame_length, int) and isinstance(step, int) and signal_length is not None:
        count = (signal_length - frame_length) // step + 1
        if count < 1:
            raise node.fail(
                f"the signal's length {signal_length} is shorter than frame_length {frame_length}"
            )
        starts = np.arange(count, dtype=np.int32)[:, None] * step
        index = ctx.const(starts + np.arange(frame_length, dtype=np.int32))
        return ops.gather_v2(signal, index, 1)

    def tensor(value: Length) -> Tensor:
        return ctx.const(np.int32(value)) if isinstance(value, int) else value

    zero, one = ctx.const(np.int32(0)), ctx.const(np.int32(1))
    length = ops.gather_v2(ops.shape(signal, out_type=d.int32), one, 0)
    count = ops.add_v2(ops.floor_div(ops.sub(length, tensor(frame_length)), tensor(step)), one)
    starts = ops.mul(ops.range(zero, count, one), tensor(step))
    offsets = ops.range(zero, tensor(frame_length), one)
    index = ops.add_v2(ops.expand_dims(starts, one), ops.expand_dims(offsets, zero))
    return ops.gather_v2(signal, index, 1)


def _mel_edges(ctx: ConversionContext, values: list[Tensor], bins: Tensor) -> Tensor:
    """The num_mel_bins + 2 filter edges, as spectrogram bins (int32), with onnx's
    reference's arithmetic: the mel scale's two ends in the edges' own dtype (its
    ``2595 * log1p(hertz / 700)``), everything after in float64."""
    _, dft_length, sample_rate, lower, upper = values

    def mel(hertz: Tensor) -> Tensor:
        scaled = ops.mul(
            ctx.const_like(2595, hertz), ops.log1p(ops.real_div(hertz, ctx.const_like(700, hertz)))
        )
        return ops.real_div(ops.cast(scaled, DstT=d.float64), ctx.const(np.float64(np.log(10))))

    low, high = mel(lower), mel(upper)
    count = ops.add_v2(bins, ctx.const(np.int32(2)))
    points = ops.cast(
        ops.range(ctx.const(np.int32(0)), count, ctx.const(np.int32(1))), DstT=d.float64
    )
    step = ops.real_div(ops.sub(high, low), ops.cast(count, DstT=d.float64))
    hertz = ops.mul(
        ctx.const(np.float64(700)),
        ops.expm1(
            ops.mul(
                ops.real_div(ops.add_v2(ops.mul(points, step), low), ctx.const(np.float64(2595))),
                ctx.const(np.float64(np.log(10))),
            )
        ),
    )
    scaled = ops.mul(
        ops.cast(ops.add_v2(dft_length, ctx.const(np.int64(1))), DstT=d.float64), hertz
    )
    return ops.cast(ops.floor_div(scaled, ops.cast(sample_rate, DstT=d.float64)), DstT=d.int32)


@converter("MelWeightMatrix", 17, attrs=("output_datatype",))
def _mel_weight_matrix(node: OnnxNode, ctx: ConversionContext) -> Result:
    """Triangular filters between num_mel_bins + 2 points equally spaced in mel, as
    columns over the dft_length // 2 + 1 spectrogram bins: column i rises from 0 at bin
    edges[i] to 1 at edges[i + 1] and falls to 0 at edges[i + 2] (a single 1 where the
    rise is empty), as onnx's reference writes them (its two loops, in float64)."""
    values = [ops.reshape(ctx.input(i), ctx.int32s([])) for i in range(5)]
    values[1] = ops.cast(values[1], DstT=d.int64)
    values[2] = ops.cast(values[2], DstT=d.int64)
    bins = ops.cast(values[0], DstT=d.int32)
    edges = _mel_edges(ctx, values, bins)
    one = ctx.const(np.int32(1))
    left = ops.slice(edges, ctx.int32s([0]), ops.reshape(bins, ctx.int32s([1])))
    center = ops.slice(edges, ctx.int32s([1]), ops.reshape(bins, ctx.int32s([1])))
    right = ops.slice(edges, ctx.int32s([2]), ops.reshape(bins, ctx.int32s([1])))
    spectrogram_bins = ops.add_v2(
        ops.cast(ops.floor_div(values[1], ctx.const(np.int64(2))), DstT=d.int32), one
    )
    j = ops.expand_dims(ops.range(ctx.const(np.int32(0)), spectrogram_bins, one), one)  # [n, 1]

    def ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
        wide = ops.cast(denominator, DstT=d.float64)
        return ops.div_no_nan(ops.cast(numerator, DstT=d.float64), wide)

    rise = ratio(ops.sub(j, left), ops.sub(center, left))
    rise = ops.select_v2(ops.equal(center, left), ctx.const(np.float64(1)), rise)
    fall = ratio(ops.sub(right, j), ops.sub(right, center))
    rising = ops.logical_and(ops.greater_equal(j, left), ops.less_equal(j, center))
    falling = ops.logical_and(ops.greater_equal(j, center), ops.less(j, right))
    zero = ctx.const(np.float64(0))
    out = ops.select_v2(falling, fall, ops.select_v2(rising, rise, zero))
    dtype = onnx.helper.tensor_dtype_to_np_dtype(int(node.attr("output_datatype", 1)))
    return [ops.cast(out, DstT=d.as_dtype(dtype))]
