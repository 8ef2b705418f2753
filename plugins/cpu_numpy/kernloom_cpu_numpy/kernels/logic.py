"""Binary arithmetic, comparison and logic kernels: AddV2, Atan2, Div, DivNoNan, FloorDiv,
FloorMod, SquaredDifference, Equal, NotEqual, GreaterEqual, LessEqual, LogicalAnd, LogicalOr,
LogicalNot, ClipByValue.

TensorFlow's CPU kernels, not numpy's ufuncs, set the semantics: an integer division or
modulo by zero is an error (numpy would give 0 and a warning), float FloorDiv is
floor(x / y) (numpy's floor_divide differs: 1.0 // 0.1 is 9 there, 10 in TF), float
FloorMod is fmod corrected toward the divisor's sign, and integer Div truncates toward 0.
Each arithmetic function takes ``(x, y, out)`` and reads what it needs before writing, so
``out`` may be either input (the executors' in-place reuse).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, ClassVar, Final

import numpy as np

from kernloom.plugin import (
    InvalidArgumentError,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    as_dtype,
    broadcast_shape,
)
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array
from kernloom_cpu_numpy.kernels.elementwise import (
    _Binary,
    binary_kernel,
    binary_shape,
    compare_kernel,
    kernel_class,
    unary_kernel,
)

__all__ = ["register"]

CPU = "CPU"
_BOTH = (0, 1)
Fn = Callable[..., Any]


def _is_integer(x: Array) -> bool:
    return x.dtype.kind in "iu"


def _truncate_divide(x: Array, y: Array, out: Array) -> Array:
    if not _is_integer(out):
        return np.true_divide(x, y, out=out)
    # C division: the remainder takes x's sign (fmod), and x - r divides exactly. x - r
    # moves toward 0, so it cannot overflow.
    quotient = np.floor_divide(x - np.fmod(x, y), y)
    np.copyto(out, quotient)
    return out


def _truncate_div(x: Array, y: Array, out: Array) -> Array:
    """TruncateDiv: C's integer division (Div's), floats ``trunc(x / y)``."""
    if out.dtype.kind in "iu":
        return _truncate_divide(x, y, out)
    np.true_divide(x, y, out=out)
    return np.trunc(out, out=out)


def _truncate_mod(x: Array, y: Array, out: Array) -> Array:
    """TruncateMod and Mod: the remainder with x's sign (C's %, fmod)."""
    return np.fmod(x, y, out=out)


_FLOAT32_64: Final = tuple(as_dtype(name) for name in ("float32", "float64"))
_TRUNC_MOD_TYPES: Final = (*_FLOAT32_64, *t.INDEX)


def _x_times(fn: Fn) -> Fn:
    """Xdivy, Xlogy, Xlog1py: ``fn(x, y)``, but ``x * 0`` where x is 0, whatever y is (the
    zero keeps x's sign, and a subnormal x, which reads as 0, gives 0, as TensorFlow's);
    computed whole before ``out`` (which may be x) is written."""

    def form(x: Array, y: Array, out: Array) -> Array:
        np.copyto(out, np.where(x == 0, x * 0, fn(x, y)))
        return out

    form.__name__ = fn.__name__
    return form


def _xdivy(x: Array, y: Array) -> Array:
    return np.true_divide(x, y)


def _xlogy(x: Array, y: Array) -> Array:
    return x * np.log(y)


def _xlog1py(x: Array, y: Array) -> Array:
    return x * np.log1p(y)


def _floor_divide(x: Array, y: Array, out: Array) -> Array:
    if out.dtype.kind in "iu":  # (inline, and ``out`` positional: 0.39 -> 0.21 µs a call)
        return np.floor_divide(x, y, out)  # the most negative // -1 wraps to itself
    np.true_divide(x, y, out=out)
    return np.floor(out, out=out)


def _floor_mod(x: Array, y: Array, out: Array) -> Array:
    if _is_integer(out):
        return np.remainder(x, y, out=out)
    # TF's floor_fmod: fmod, then + y where the remainder is non-zero and its sign is not
    # y's. numpy's remainder differs only on zero remainders (+0.0 where TF keeps -0.0).
    remainder = np.fmod(x, y)
    adjust = (remainder != 0) & ((y < 0) != (remainder < 0))
    np.copyto(out, np.where(adjust, remainder + y, remainder))
    return out


def _squared_difference(x: Array, y: Array, out: Array) -> Array:
    np.subtract(x, y, out=out)
    return np.square(out, out=out)  # complex: complex_rules.squared_difference


def _div_no_nan(x: Array, y: Array, out: Array) -> Array:
    zero = y == 0
    np.true_divide(x, y, out=out)
    np.copyto(out, 0, where=zero)
    return out


class _Divisors:
    """Whether a divisor holds no integer zero, remembered for read-only divisors found so
    (a constant, the same array with its content fixed, comes back every run): a chain of
    FloorDivs by constants checks each constant once, not on every run (``y.all()`` cost
    about as much as the division). Each is remembered by a weak reference, so nothing is
    kept alive (a read-only feed is a new view each run; once it is gone its entry never
    matches another array that reuses the id). One per kernel registration, shared by
    every node of the op and by concurrent runs (dict stores are atomic); at most ``KEPT``
    entries, then it starts again."""

    KEPT: Final = 4096

    __slots__ = ("_clear",)

    def __init__(self) -> None:
        self._clear: dict[int, weakref.ref[Array]] = {}

    def nonzero(self, y: Array) -> bool:
        clear = self._clear
        kept = clear.get(id(y))
        if kept is not None and kept() is y:
            return True
        if _is_integer(y) and not y.all():
            return False
        if not y.flags.writeable:
            if len(clear) >= self.KEPT:
                clear.clear()
            clear[id(y)] = weakref.ref(y)
        return True


def _checked_form(fn: Fn, divisors: _Divisors) -> Fn:
    """The in-place form of a division kernel (``OpKernel.inplace_form``, for the compiled
    straight line, which proved ``out`` has the result's shape): a zero integer divisor is
    the same error as in ``compute``, raised before anything is written."""

    def form(x: Array, y: Array, out: Array) -> None:
        if not divisors.nonzero(y) and out.size:
            raise InvalidArgumentError("Integer division by zero")
        fn(x, y, out=out)

    return form


class _Division(_Binary):
    """A division or modulo kernel (``division_kernel``): an integer division by zero is
    an error, as in TF's CPU -- unless the result is empty: TF's kernel returns before it
    looks at the values (``[] // [0]`` is ``[]``). Its direct entry declines a zero
    integer divisor, which ``compute`` then reports, and of two ranks only the higher
    one's input is written in place: these functions end with a ``copyto``, which would
    drop a leading 1 of a higher-rank result where a ufunc's ``out`` raises."""

    divisors: ClassVar[_Divisors]

    def compute(self, ctx: OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
        if _is_integer(y) and not y.all() and 0 not in shape:
            raise ctx.fail("Integer division by zero")
        type(self).fn(x, y, out=ctx.forward_input_or_allocate_output(_BOTH, 0, shape))

    def direct(self, reuse: int, x: Array, y: Array) -> Any:
        if not type(self).divisors.nonzero(y):
            return NotImplemented
        if reuse and x.ndim != y.ndim:
            reuse &= 1 if x.ndim > y.ndim else 2
        return super().direct(reuse, x, y)


def division_kernel(fn: Fn) -> type[_Division]:
    """The kernel class of a division ``fn(x, y, out)``, with its own ``_Divisors`` (one
    per kernel registration: shared by its nodes' kernels) and its in-place form."""
    divisors = _Divisors()
    return kernel_class(
        _Division,
        fn,
        False,
        divisors=divisors,
        inplace_form=staticmethod(_checked_form(fn, divisors)),
        __module__=__name__,
    )


class _Equality(OpKernel):
    """Equal or NotEqual (``equality_kernel``): with ``incompatible_shape_error=false``,
    shapes that cannot broadcast give one scalar (TF: such tensors are simply not equal).
    Its direct entry writes a new bool buffer (counted) for shapes that broadcast."""

    fn: ClassVar[Fn]
    unequal: ClassVar[bool]

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._strict = bool(ctx.attr("incompatible_shape_error"))
        self._allocate = ctx.device.allocate
        self._dtype = self.signature.output_dtypes[0]

    def compute(self, ctx: OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        if not self._strict:
            try:
                shape = np.broadcast_shapes(x.shape, y.shape)
            except ValueError:
                ctx.allocate_output(0, ())[...] = type(self).unequal
                return
        else:
            shape = broadcast_shape(ctx, x.shape, y.shape)
        type(self).fn(x, y, out=ctx.allocate_output(0, shape))

    def direct(self, reuse: int, x: Array, y: Array) -> Any:
        shape = binary_shape(x, y)
        if shape is None:
            return NotImplemented  # compute: the scalar, or the error
        out = self._allocate(shape, self._dtype)
        type(self).fn(x, y, out=out)
        return out


def equality_kernel(fn: Fn, unequal: bool) -> type[_Equality]:
    return kernel_class(_Equality, fn, False, unequal=unequal, __module__=__name__)


def clip_bounds(ctx: OpKernelContext, t_shape: tuple[int, ...], *bounds: Array) -> None:
    """TF's rule: each bound is a scalar or has t's shape (the raw op does not broadcast)."""
    for name, bound in zip(("clip_value_min", "clip_value_max"), bounds, strict=True):
        if bound.ndim and bound.shape != t_shape:
            raise ctx.fail(
                f"{name} must be a scalar or have the shape of t {list(t_shape)}, "
                f"got shape {list(bound.shape)}"
            )


def clip_by_value(ctx: OpKernelContext) -> None:
    x, low, high = ctx.input(0), ctx.input(1), ctx.input(2)
    clip_bounds(ctx, x.shape, low, high)
    out = ctx.forward_input_or_allocate_output([0], 0, x.shape)
    if out is not x:
        np.copyto(out, x)
    # TF computes max(min(x, high), low) with std::min/max: a NaN in x stays, a NaN bound
    # is ignored (its comparisons are false), and where low > high the result is low.
    np.copyto(out, high, where=high < out)
    np.copyto(out, low, where=out < low)


ARITHMETIC: tuple[tuple[str, Fn, tuple[Any, ...] | None], ...] = (
    ("AddV2", np.add, t.OP_TYPES),
    ("SquaredDifference", _squared_difference, (*t.FLOATS, *t.INDEX)),  # complex: elsewhere
    ("DivNoNan", _div_no_nan, t.FLOATS),
    ("LogicalAnd", np.logical_and, ()),
    ("LogicalOr", np.logical_or, ()),
    ("Xdivy", _x_times(_xdivy), t.INEXACT),
    ("Xlogy", _x_times(_xlogy), t.INEXACT),
    ("Xlog1py", _x_times(_xlog1py), t.INEXACT),
    ("Atan2", np.arctan2, t.OP_TYPES),  # (y, x): IEEE atan2's signed zeros and infinities
)
DIVISIONS: tuple[tuple[str, Fn, tuple[Any, ...] | None], ...] = (
    ("Div", _truncate_divide, t.REALS),  # complex: complex_rules
    ("FloorDiv", _floor_divide, t.REALS),
    ("FloorMod", _floor_mod, t.OP_TYPES),
    ("TruncateDiv", _truncate_div, t.REALS),
    ("TruncateMod", _truncate_mod, _TRUNC_MOD_TYPES),
    ("Mod", _truncate_mod, _TRUNC_MOD_TYPES),
)
COMPARISONS: tuple[tuple[str, Fn], ...] = (
    ("GreaterEqual", np.greater_equal),
    ("LessEqual", np.less_equal),
)


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""

    def cpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        constraints = {"T": types} if types else None
        return lib.kernel(op, device=CPU, backend="numpy", type_constraints=constraints, **kw)

    for op, fn, types in ARITHMETIC:  # (x, y, out): each is its own in-place form
        cpu(op, types)(binary_kernel(fn))
    for op, fn, types in DIVISIONS:
        cpu(op, types)(division_kernel(fn))
    for op, fn in COMPARISONS:
        cpu(op, t.REALS)(compare_kernel(fn))
    cpu("NotEqual", t.OP_TYPES)(equality_kernel(np.not_equal, True))
    cpu("Equal", t.OP_TYPES)(equality_kernel(np.equal, False))
    cpu("Rint", _FLOAT32_64)(unary_kernel(np.rint))
    cpu("LogicalNot", ())(unary_kernel(np.logical_not))
    # TensorFlow's CPU has no ClipByValue for uint32 and uint64; so neither does kernloom's.
    cpu("ClipByValue", tuple(d for d in t.REALS if d.name not in ("uint32", "uint64")))(
        clip_by_value
    )
