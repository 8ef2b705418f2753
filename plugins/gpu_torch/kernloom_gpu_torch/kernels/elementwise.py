"""Elementwise kernels with torch: unary and binary functions, comparisons, Select,
AddN, Cast. Outputs are allocated through the context (so the device's allocator counts
them) and filled with ``out=``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import torch

from kernloom.plugin import OpKernelContext, add_n_shape, broadcast_shape, select_condition_shape
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import output, tensor_input, tensor_inputs

__all__ = ["BINARY", "COMPARISONS", "UNARY", "add_n", "binary", "cast", "select", "unary"]

Fn = Callable[..., Any]


def binary(fn: Fn) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x, y = tensor_input(ctx, 0), tensor_input(ctx, 1)
        shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
        try:
            fn(x, y, out=output(ctx, 0, shape))
        except RuntimeError as exc:  # e.g. integers to negative integer powers
            raise ctx.fail(str(exc)) from None

    compute.__qualname__ = f"torch_{fn.__name__.lstrip('_')}"  # names it in traces
    return compute


def unary(fn: Fn) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x = tensor_input(ctx, 0)
        fn(x, out=output(ctx, 0, x.shape))

    compute.__qualname__ = f"torch_{fn.__name__.lstrip('_')}"
    return compute


def _relu(x: torch.Tensor, out: torch.Tensor) -> None:
    if out.dtype in _PACKET_MAX:
        # max(x, +0.0) with NaN kept, one pass: +0.0 for -0.0, as TF's vectorised
        # float32/float64 max gives (and numpy's maximum); clamp would keep -0.0.
        torch.maximum(x, _zero(out.dtype, out.device), out=out)
    else:  # TF's float16 Relu has no packets: std::max keeps -0.0, as clamp does
        torch.clamp(x, min=0, out=out)  # NaN stays NaN, as numpy's maximum(x, 0)


_PACKET_MAX = (torch.float32, torch.float64)
_ZEROS: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _zero(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 0-d +0.0 of ``dtype`` on ``device``, made once."""
    key = (dtype, device)
    zero = _ZEROS.get(key)
    if zero is None:
        zero = _ZEROS[key] = torch.zeros((), dtype=dtype, device=device)
    return zero


def select(ctx: OpKernelContext) -> None:
    """TensorFlow's Select: a vector condition picks rows (SelectV2 broadcasts instead)."""
    condition, then, otherwise = (tensor_input(ctx, i) for i in range(3))
    picks = select_condition_shape(ctx, condition.shape, then.shape, otherwise.shape)
    torch.where(condition.reshape(picks), then, otherwise, out=output(ctx, 0, then.shape))


def add_n(ctx: OpKernelContext) -> None:
    inputs = tensor_inputs(ctx, "inputs")
    out = output(ctx, 0, add_n_shape(ctx, [x.shape for x in inputs]))
    if len(inputs) == 1:
        out.copy_(inputs[0])
        return
    torch.add(inputs[0], inputs[1], out=out)
    for x in inputs[2:]:
        out.add_(x)


def cast(ctx: OpKernelContext) -> None:
    if ctx.attr("SrcT") is ctx.attr("DstT"):
        ctx.forward_input_to_output(0, 0)
        return
    x = tensor_input(ctx, 0)
    out = output(ctx, 0, x.shape)
    if x.is_complex() and not out.is_complex():
        x = x.real  # TensorFlow keeps the real part (and torch would warn)
    if out.dtype == torch.bool:
        out.copy_(x != 0)  # NaN is true
    elif x.is_floating_point() and not (out.is_floating_point() or out.is_complex()):
        out.copy_(_float_to_int(x, out.dtype))
    elif ctx.attr("Truncate") and x.is_floating_point():
        out.copy_(_truncated(x, out.real.dtype if out.is_complex() else out.dtype))
    elif ctx.attr("Truncate") and x.is_complex() and out.is_complex():
        real = out.real.dtype
        out.copy_(torch.complex(_truncated(x.real, real), _truncated(x.imag, real)))
    else:
        out.copy_(x)


_MANTISSA_BITS = {torch.float16: 10, torch.float32: 23, torch.float64: 52}
_BITS_VIEW = {torch.float16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}


def _truncated(x: torch.Tensor, target: torch.dtype) -> torch.Tensor:
    """TensorFlow's ``Truncate=True``: the mantissa bits ``target`` cannot hold are zeroed
    first, so the conversion truncates toward zero (kernloom.framework.cast_rules)."""
    drop = _MANTISSA_BITS[x.dtype] - _MANTISSA_BITS.get(target, _MANTISSA_BITS[x.dtype])
    if drop <= 0:
        return x
    bits = x.contiguous().view(_BITS_VIEW[x.dtype]) & -(1 << drop)
    return torch.where(torch.isnan(x), x, bits.view(x.dtype))


def _float_to_int(x: torch.Tensor, dst: torch.dtype) -> torch.Tensor:
    """TensorFlow's CPU conversion of floats to integers (kernloom.framework.cast_rules):
    NaN, inf and out-of-range values are the most negative int32 (int64 for int64), and
    narrower types keep the low bits of the int32."""
    through = torch.int64 if dst == torch.int64 else torch.int32
    limit = 2.0 ** (63 if dst == torch.int64 else 31)
    t = torch.trunc(x.float() if x.dtype == torch.float16 else x)
    valid = (t >= -limit) & (t < limit)
    wide = torch.where(valid, t, torch.zeros_like(t)).to(through)
    invalid = torch.tensor(torch.iinfo(through).min, dtype=through, device=x.device)
    return torch.where(valid, wide, invalid).to(dst)


def _clamped(shift: Fn) -> Fn:
    """``shift`` with TensorFlow's rule for the amount: clamped to ``[0, bits - 1]``."""

    def clamped(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        shifted: torch.Tensor = shift(x, y.clamp(0, torch.iinfo(x.dtype).bits - 1), out=out)
        return shifted

    clamped.__name__ = shift.__name__  # (names the kernel in traces: torch_bitwise_left_shift)
    return clamped


SHIFTABLE: Final = tuple(dt for dt in t.INTEGERS if dt.name not in ("uint16", "uint32", "uint64"))
"""The integers torch shifts, inverts and multiplies (not its uint16/32/64, which have few
kernels): the others' bitwise ops stay on the CPU."""

Table = tuple[tuple[str, Fn, tuple[Any, ...] | None], ...]

BINARY: Table = (
    ("Add", torch.add, t.OP_TYPES),  # torch has no uint16/32/64: TF's Add list
    ("Sub", torch.sub, d.NUMBERS),
    ("Mul", torch.mul, d.NUMBERS),
    ("RealDiv", torch.div, t.OP_TYPES),
    ("Maximum", torch.maximum, d.REALS),
    ("Minimum", torch.minimum, d.REALS),
    ("Pow", torch.pow, t.OP_TYPES),
    ("BitwiseAnd", torch.bitwise_and, SHIFTABLE),
    ("BitwiseOr", torch.bitwise_or, SHIFTABLE),
    ("BitwiseXor", torch.bitwise_xor, SHIFTABLE),
    ("LeftShift", _clamped(torch.bitwise_left_shift), SHIFTABLE),
    ("RightShift", _clamped(torch.bitwise_right_shift), SHIFTABLE),
)
UNARY: Table = (
    ("Neg", torch.neg, t.OP_TYPES),
    ("Exp", torch.exp, t.OP_TYPES),
    ("Log", torch.log, t.OP_TYPES),
    ("Sqrt", torch.sqrt, t.OP_TYPES),
    ("Square", torch.square, d.NUMBERS),
    ("Tanh", torch.tanh, t.OP_TYPES),
    ("Sigmoid", torch.sigmoid, t.OP_TYPES),
    ("Relu", _relu, d.REALS),
    ("Invert", torch.bitwise_not, SHIFTABLE),
    ("Rint", torch.round, tuple(dt for dt in d.FLOATS if dt.name != "float16")),  # halves: even
)
COMPARISONS: Table = (
    ("Less", torch.lt, d.REALS),
    ("Greater", torch.gt, d.REALS),
)
