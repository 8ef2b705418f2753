"""Comparison, logic and binary arithmetic kernels: AddV2, Atan2, Div, DivNoNan, FloorDiv,
FloorMod, SquaredDifference, Equal, NotEqual, GreaterEqual, LessEqual, LogicalAnd, LogicalOr,
LogicalNot, ClipByValue.

Written over the array module ``xp`` (CuPy; numpy in tests). TensorFlow's CPU semantics
on the GPU too: an integer division or modulo by zero is an error (the check is one
reduction and a sync), float FloorDiv is floor(x / y), float FloorMod is fmod corrected
toward the divisor's sign, integer Div truncates toward 0.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext, broadcast_shape
from kernloom.plugin import types as t

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
Fn = Callable[[Any, Any], Any]


def _integer(x: Any) -> bool:
    return bool(x.dtype.kind in "iu")


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""

    def div(x: Any, y: Any) -> Any:
        if not _integer(x):
            return xp.true_divide(x, y)
        return xp.floor_divide(x - xp.fmod(x, y), y)  # C division: truncation toward 0

    def floor_div(x: Any, y: Any) -> Any:
        return xp.floor_divide(x, y) if _integer(x) else xp.floor(xp.true_divide(x, y))

    def floor_mod(x: Any, y: Any) -> Any:
        if _integer(x):
            return xp.remainder(x, y)
        remainder = xp.fmod(x, y)
        adjust = (remainder != 0) & ((y < 0) != (remainder < 0))
        return xp.where(adjust, remainder + y, remainder)

    trunc_mod_types = tuple(
        dt for dt in t.REALS if dt.name in ("float32", "float64", "int32", "int64")
    )

    def truncate_div(x: Any, y: Any) -> Any:
        return div(x, y) if _integer(x) else xp.trunc(xp.true_divide(x, y))

    def truncate_mod(x: Any, y: Any) -> Any:
        return xp.fmod(x, y)  # the remainder with x's sign, as C's % (TruncateMod, Mod)

    def x_times(fn: Fn) -> Fn:
        """Xdivy, Xlogy, Xlog1py: ``fn(x, y)``, but x itself where x is 0 (sign kept)."""

        def keeping_zeros(x: Any, y: Any) -> Any:
            return xp.where(x == 0, x * 0, fn(x, y))

        keeping_zeros.__name__ = getattr(fn, "__name__", "x_times")
        return keeping_zeros

    def xdivy(x: Any, y: Any) -> Any:
        return xp.true_divide(x, y)

    def xlogy(x: Any, y: Any) -> Any:
        return x * xp.log(y)

    def xlog1py(x: Any, y: Any) -> Any:
        return x * xp.log1p(y)

    def squared_difference(x: Any, y: Any) -> Any:
        difference = x - y
        return difference * (xp.conj(difference) if difference.dtype.kind == "c" else difference)

    def div_no_nan(x: Any, y: Any) -> Any:
        return xp.where(y == 0, 0, xp.true_divide(x, y))

    def binary(fn: Fn, *, checked: bool = False) -> Callable[[OpKernelContext], None]:
        def compute(ctx: OpKernelContext) -> None:
            x, y = ctx.input(0), ctx.input(1)
            shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
            if checked and _integer(y) and not bool(xp.all(y != 0)):
                raise ctx.fail("Integer division by zero")
            out = ctx.allocate_output(0, shape)
            with np.errstate(all="ignore"):  # numpy in tests; CuPy never warns
                xp.copyto(out, fn(x, y), casting="unsafe")

        compute.__qualname__ = f"cupy_{getattr(fn, '__name__', 'binary')}"
        return compute

    def equality(fn: Any, unequal: bool) -> Any:
        def compute(ctx: OpKernelContext) -> None:
            x, y = ctx.input(0), ctx.input(1)
            if not ctx.attr("incompatible_shape_error"):
                try:
                    shape = np.broadcast_shapes(x.shape, y.shape)
                except ValueError:  # TF: shapes that cannot broadcast are simply not equal
                    ctx.allocate_output(0, ()).fill(unequal)
                    return
            else:
                shape = broadcast_shape(ctx, x.shape, y.shape)
            fn(x, y, out=ctx.allocate_output(0, shape))

        return compute

    def logical_not(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        xp.logical_not(x, out=ctx.allocate_output(0, x.shape))

    def clip_by_value(ctx: OpKernelContext) -> None:
        x, low, high = ctx.input(0), ctx.input(1), ctx.input(2)
        for name, bound in (("clip_value_min", low), ("clip_value_max", high)):
            if bound.ndim and bound.shape != x.shape:
                raise ctx.fail(
                    f"{name} must be a scalar or have the shape of t {list(x.shape)}, "
                    f"got shape {list(bound.shape)}"
                )
        # TF's max(min(x, high), low) with std::min/max: NaN in x stays, a NaN bound is
        # ignored, and where low > high the result is low.
        clipped = xp.where(high < x, high, x)
        xp.copyto(ctx.allocate_output(0, x.shape), xp.where(clipped < low, low, clipped))

    table: tuple[tuple[str, Fn, tuple[Any, ...] | None, bool], ...] = (
        ("AddV2", xp.add, t.OP_TYPES, False),
        ("SquaredDifference", squared_difference, t.OP_TYPES, False),
        ("DivNoNan", div_no_nan, t.OP_TYPES, False),
        ("Div", div, t.OP_TYPES, True),
        ("FloorDiv", floor_div, t.REALS, True),
        ("FloorMod", floor_mod, t.OP_TYPES, True),
        ("TruncateDiv", truncate_div, t.REALS, True),
        ("TruncateMod", truncate_mod, trunc_mod_types, True),
        ("Mod", truncate_mod, trunc_mod_types, True),
        ("Xdivy", x_times(xdivy), t.INEXACT, False),
        ("Xlogy", x_times(xlogy), t.INEXACT, False),
        ("Xlog1py", x_times(xlog1py), t.INEXACT, False),
        ("Atan2", xp.arctan2, t.OP_TYPES, False),  # (y, x), IEEE atan2
        ("GreaterEqual", xp.greater_equal, t.OP_TYPES, False),
        ("LessEqual", xp.less_equal, t.OP_TYPES, False),
        ("LogicalAnd", xp.logical_and, (), False),
        ("LogicalOr", xp.logical_or, (), False),
    )

    def gpu(op: str, types: tuple[Any, ...] | None) -> Any:
        constraints = {"T": types} if types else None
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints=constraints)

    for op, fn, types, checked in table:
        gpu(op, types)(binary(fn, checked=checked))
    gpu("NotEqual", t.OP_TYPES)(equality(xp.not_equal, True))
    gpu("Equal", t.OP_TYPES)(equality(xp.equal, False))
    gpu("LogicalNot", ())(logical_not)
    gpu("ClipByValue", t.REALS)(clip_by_value)
