"""Binary arithmetic, comparison and logic kernels with torch: AddV2, Atan2, Div, DivNoNan,
FloorDiv, FloorMod, SquaredDifference, Equal, NotEqual, GreaterEqual, LessEqual, LogicalAnd,
LogicalOr, LogicalNot, ClipByValue.

TensorFlow's CPU semantics on every device: an integer division or modulo by zero is an
error (checking costs a reduction and a device-to-host sync, where a CUDA division would
silently give garbage), float FloorDiv is floor(x / y), float FloorMod is fmod corrected
toward the divisor's sign, integer Div truncates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from kernloom.plugin import KernelLibrary, OpKernelContext, broadcast_shape
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import output, tensor_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "torch"
Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _integer(x: torch.Tensor) -> bool:
    return not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def _div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if not _integer(x):
        return torch.div(x, y)
    # C division, built from floor division and remainder: torch's "trunc" mode (and C's
    # %) traps on the most negative integer / -1, which floor division wraps.
    inexact = (torch.remainder(x, y) != 0) & ((x < 0) != (y < 0))
    return torch.div(x, y, rounding_mode="floor") + inexact.to(x.dtype)


def _floor_div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if _integer(x):
        return torch.div(x, y, rounding_mode="floor")
    return torch.floor(torch.div(x, y))


def _floor_mod(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if _integer(x):
        return torch.remainder(x, y)
    remainder = torch.fmod(x, y)
    adjust = (remainder != 0) & ((y < 0) != (remainder < 0))
    return torch.where(adjust, remainder + y, remainder)


def _truncate_div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _div(x, y) if _integer(x) else torch.trunc(torch.div(x, y))


def _truncate_mod(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.fmod(x, y)  # the remainder with x's sign, as C's % (TruncateMod, Mod)


_TRUNC_MOD_TYPES = tuple(
    dt for dt in d.REALS if dt.name in ("float32", "float64", "int32", "int64")
)


def _x_times(fn: Fn) -> Fn:
    """Xdivy, Xlogy, Xlog1py: ``fn(x, y)``, but x itself where x is 0 (sign kept), whatever
    y is (torch.xlogy gives NaN for y NaN; TensorFlow 0)."""

    def keeping_zeros(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.where(x == 0, x * 0, fn(x, y))

    keeping_zeros.__name__ = fn.__name__
    return keeping_zeros


def _xdivy(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.div(x, y)


def _xlogy(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * torch.log(y)


def _xlog1py(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * torch.log1p(y)


def _squared_difference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    difference = x - y
    return difference * (difference.conj() if difference.is_complex() else difference)


def _div_no_nan(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    quotient = torch.div(x, y)
    return torch.where(y == 0, torch.zeros_like(quotient), quotient)


def _binary(fn: Fn, *, checked: bool = False) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x, y = tensor_input(ctx, 0), tensor_input(ctx, 1)
        shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
        # An empty result is no error in TF, whatever the divisor ([] // [0] is []).
        if checked and _integer(y) and 0 not in shape and not bool(torch.all(y != 0)):
            raise ctx.fail("Integer division by zero")
        output(ctx, 0, shape).copy_(fn(x, y))

    compute.__qualname__ = f"torch_{getattr(fn, '__name__', 'binary').lstrip('_')}"
    return compute


def _equality(fn: Any, unequal: bool) -> Callable[[OpKernelContext], None]:
    """Equal or NotEqual: with ``incompatible_shape_error=false``, shapes that cannot
    broadcast give one scalar (TF: such tensors are simply not equal)."""

    def compute(ctx: OpKernelContext) -> None:
        x, y = tensor_input(ctx, 0), tensor_input(ctx, 1)
        if not ctx.attr("incompatible_shape_error"):
            try:
                shape = torch.Size(np.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
            except ValueError:
                output(ctx, 0, ()).fill_(unequal)
                return
        else:
            shape = torch.Size(broadcast_shape(ctx, x.shape, y.shape))
        fn(x, y, out=output(ctx, 0, shape))

    return compute


def logical_not(ctx: OpKernelContext) -> None:
    x = tensor_input(ctx, 0)
    torch.logical_not(x, out=output(ctx, 0, x.shape))


def clip_by_value(ctx: OpKernelContext) -> None:
    x, low, high = (tensor_input(ctx, i) for i in range(3))
    for name, bound in (("clip_value_min", low), ("clip_value_max", high)):
        if bound.ndim and bound.shape != x.shape:
            raise ctx.fail(
                f"{name} must be a scalar or have the shape of t {list(x.shape)}, "
                f"got shape {list(bound.shape)}"
            )
    # TF's max(min(x, high), low) with std::min/max: NaN in x stays, a NaN bound is ignored.
    clipped = torch.where(high < x, high, x)
    output(ctx, 0, x.shape).copy_(torch.where(clipped < low, low, clipped))


BINARY: tuple[tuple[str, Fn, tuple[Any, ...] | None, bool], ...] = (
    ("AddV2", torch.add, d.NUMBERS, False),
    (
        "SquaredDifference",
        _squared_difference,
        d.supported((*t.FLOATS, *t.INDEX, *t.COMPLEX)),
        False,
    ),
    ("DivNoNan", _div_no_nan, t.OP_TYPES, False),
    ("Div", _div, d.NUMBERS, True),
    ("FloorDiv", _floor_div, d.REALS, True),
    ("FloorMod", _floor_mod, d.REALS, True),
    ("TruncateDiv", _truncate_div, d.REALS, True),
    ("TruncateMod", _truncate_mod, _TRUNC_MOD_TYPES, True),
    ("Mod", _truncate_mod, _TRUNC_MOD_TYPES, True),
    ("Xdivy", _x_times(_xdivy), d.INEXACT, False),
    ("Xlogy", _x_times(_xlogy), d.INEXACT, False),
    ("Xlog1py", _x_times(_xlog1py), d.INEXACT, False),
    ("Atan2", torch.atan2, t.OP_TYPES, False),  # (y, x), IEEE atan2 on signed zeros and infs
    ("GreaterEqual", torch.ge, d.REALS, False),
    ("LessEqual", torch.le, d.REALS, False),
    ("LogicalAnd", torch.logical_and, (), False),
    ("LogicalOr", torch.logical_or, (), False),
)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def gpu(op: str, types: tuple[Any, ...] | None) -> Any:
        constraints = {"T": types} if types else None
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints=constraints)

    for op, fn, types, checked in BINARY:
        gpu(op, types)(_binary(fn, checked=checked))
    gpu("NotEqual", d.ALL)(_equality(torch.ne, True))
    gpu("Equal", d.ALL)(_equality(torch.eq, False))
    gpu("LogicalNot", ())(logical_not)
    gpu("ClipByValue", d.REALS)(clip_by_value)
