"""Elementwise kernels: unary and binary ufuncs, comparisons, Select, AddN, Cast.

Each writes into a buffer from ``forward_input_or_allocate_output``, so an input this
node is the last user of is overwritten in place instead of allocating a new one.
numpy's floating-point warnings are silenced by the device's ``compute_scope`` (entered
once per run of many kernels): like TensorFlow, 1/0 is inf and log(-1) is nan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from kernloom.plugin import (
    NUMPY_ELEMENTWISE,
    KernelLibrary,
    OpKernelContext,
    add_n_shape,
    broadcast_shape,
    select_condition_shape,
    tf_cast,
)
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array

__all__ = ["register", "relu", "sigmoid"]

relu: Final = NUMPY_ELEMENTWISE["Relu"]
sigmoid: Final = NUMPY_ELEMENTWISE["Sigmoid"]
"""The fusable ops' numpy functions, shared with the fused kernels (``kernloom.plugin``)."""

CPU = "CPU"
_FIRST = (0,)
_BOTH = (0, 1)


def _unary(fn: Callable[..., Any]) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        fn(x, out=ctx.forward_input_or_allocate_output(_FIRST, 0, x.shape))

    return compute


def _binary(fn: Callable[..., Any]) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
        out = ctx.forward_input_or_allocate_output(_BOTH, 0, shape)
        try:
            fn(x, y, out=out)
        except ValueError as exc:  # e.g. integers to negative integer powers
            raise ctx.fail(str(exc)) from None

    return compute


def _binary_in_place(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The direct entry (``OpKernel.direct``): ``fn`` written into an input nothing else
    holds, whenever the broadcast result has that input's shape -- equal shapes, or the
    other operand a scalar, a vector or of lower rank. numpy checks that itself: an
    ``out`` the result does not fit is a ValueError before anything is written (no shape
    comparison here, which would cost more than the check it saves). Otherwise -- no input
    may be reused, or the result is larger than both -- ``compute`` runs."""

    def direct(reuse: int, x: Array, y: Array) -> Any:
        if reuse & 1 and x.base is None and x.flags.writeable:
            try:
                return fn(x, y, out=x)
            except ValueError:  # the result is larger than x: try y, else compute
                pass
        if reuse & 2 and y.base is None and y.flags.writeable:
            try:
                return fn(x, y, out=y)
            except ValueError:
                pass
        return NotImplemented

    return direct


def _unary_in_place(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The direct entry of a unary kernel: ``fn`` in place when the input may be reused."""

    def direct(reuse: int, x: Array) -> Any:
        if reuse and x.base is None and x.flags.writeable:
            return fn(x, out=x)
        return NotImplemented

    return direct


def _compare(fn: Callable[..., Any]) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
        out = ctx.allocate_output(0, shape)
        fn(x, y, out=out)

    return compute


def select(ctx: OpKernelContext) -> None:
    """TensorFlow's Select: a vector condition picks rows (SelectV2 broadcasts instead)."""
    condition, then, otherwise = ctx.input(0), ctx.input(1), ctx.input(2)
    picks = select_condition_shape(ctx, condition.shape, then.shape, otherwise.shape)
    # Only `otherwise` may be reused: it is read first, before anything is overwritten.
    out = ctx.forward_input_or_allocate_output([2], 0, then.shape)
    np.copyto(out, otherwise)
    np.copyto(out, then, where=condition.reshape(picks))


def add_n(ctx: OpKernelContext) -> None:
    inputs = ctx.input_list("inputs")
    shape = add_n_shape(ctx, [x.shape for x in inputs])
    out = ctx.forward_input_or_allocate_output(range(len(inputs)), 0, shape)
    reused = ctx.forwarded[0][0] if ctx.forwarded else None
    if reused is None:
        np.copyto(out, inputs[0])
    for i, x in enumerate(inputs):
        if i != reused and (reused is not None or i > 0):
            np.add(out, x, out=out)


def cast(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    if ctx.attr("SrcT") is ctx.attr("DstT"):
        ctx.forward_input_to_output(0, 0)
        return
    out = ctx.allocate_output(0, x.shape)
    # TensorFlow's conversions where C++ leaves them undefined (NaN, inf, out of range
    # to integers) and its Truncate attr: see kernloom.framework.cast_rules.
    np.copyto(out, tf_cast(np, x, out.dtype, truncate=bool(ctx.attr("Truncate"))))


Table = tuple[tuple[str, Callable[..., Any], tuple[Any, ...] | None], ...]
_WIDE_UNSIGNED = ("uint16", "uint32", "uint64")
"""What TensorFlow's Add (not AddV2) leaves out."""

BINARY: Table = (
    ("Add", np.add, t.OP_TYPES),
    ("Sub", np.subtract, t.OP_TYPES),
    ("Mul", np.multiply, t.REALS),  # complex: complex_rules
    ("RealDiv", np.true_divide, t.FLOATS),
    ("Maximum", np.maximum, t.OP_TYPES),
    ("Minimum", np.minimum, t.OP_TYPES),
    ("Pow", np.power, t.OP_TYPES),
)
UNARY: Table = (
    ("Neg", np.negative, t.OP_TYPES),
    ("Exp", np.exp, t.OP_TYPES),
    ("Log", np.log, t.OP_TYPES),
    ("Sqrt", np.sqrt, t.OP_TYPES),
    ("Square", np.square, t.REALS),
    ("Tanh", np.tanh, t.OP_TYPES),
    ("Sigmoid", sigmoid, t.FLOATS),
    ("Relu", relu, t.OP_TYPES),
)
COMPARISONS: Table = (
    ("Less", np.less, t.OP_TYPES),
    ("Greater", np.greater, t.OP_TYPES),
)


def register(lib: KernelLibrary) -> None:
    def kernel(
        op: str,
        fn: Callable[[OpKernelContext], None],
        types: tuple[Any, ...] | None,
        attr: str = "T",
        direct: Callable[..., Any] | None = None,
        inplace_form: Callable[..., Any] | None = None,
    ) -> None:
        lib.kernel(
            op,
            device=CPU,
            backend="numpy",
            type_constraints={attr: types},
            direct=direct,
            inplace_form=inplace_form,
        )(fn)

    for op, fn, types in BINARY:
        if op == "Pow":
            # An integer Pow in place could leave a half-written input behind on its
            # ValueError (a negative power); floats and complex raise none.
            kernel(op, _binary(fn), t.SIGNED_INTEGERS)
            types = t.INEXACT
        # The in-place form is the ufunc itself: ``np.add(a, b, a)`` costs what ``a + b``
        # does, and the compiled straight line calls it where it proved ``a`` may be
        # overwritten (the kernels' outputs are always buffers of their own; it passes
        # ``out=`` to the ufuncs that deprecate the position, ``OUT_BY_KEYWORD``).
        kernel(op, _binary(fn), types, direct=_binary_in_place(fn), inplace_form=fn)
    for op, fn, types in UNARY:
        kernel(op, _unary(fn), types, direct=_unary_in_place(fn), inplace_form=fn)
    for op, fn, types in COMPARISONS:
        kernel(op, _compare(fn), types)
    kernel("Select", select, t.OP_TYPES)
    kernel("AddN", add_n, t.OP_TYPES)
    lib.kernel("Cast", device=CPU, backend="numpy")(cast)
