"""Elementwise kernels: unary and binary ufuncs, comparisons, Select, AddN, Cast.

Each writes into a buffer from ``forward_input_or_allocate_output``, so an input this
node is the last user of is overwritten in place instead of allocating a new one.
numpy's floating-point warnings are silenced by the device's ``compute_scope`` (entered
once per run of many kernels): like TensorFlow, 1/0 is inf and log(-1) is nan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final, TypeVar

import numpy as np

from kernloom.plugin import (
    NUMPY_ELEMENTWISE,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    add_n_shape,
    broadcast_shape,
    select_condition_shape,
    tf_cast,
)
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array

__all__ = [
    "binary_kernel",
    "binary_shape",
    "compare_kernel",
    "kernel_class",
    "predicate_kernel",
    "register",
    "relu",
    "sigmoid",
    "unary_kernel",
]

relu: Final = NUMPY_ELEMENTWISE["Relu"]
sigmoid: Final = NUMPY_ELEMENTWISE["Sigmoid"]
"""The fusable ops' numpy functions, shared with the fused kernels (``kernloom.plugin``)."""

CPU = "CPU"
_K = TypeVar("_K", bound=OpKernel)
_FIRST = (0,)
_BOTH = (0, 1)


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


def _unary_in_place(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The direct entry of a unary kernel: ``fn`` in place when the input may be reused."""

    def direct(reuse: int, x: Array) -> Any:
        if reuse and x.base is None and x.flags.writeable:
            return fn(x, out=x)
        return NotImplemented

    return direct


def binary_shape(x: Array, y: Array) -> tuple[int, ...] | None:
    """The shape two operands broadcast to, None where they do not (equal shapes and a
    scalar operand without numpy's call)."""
    a: tuple[int, ...] = x.shape
    b: tuple[int, ...] = y.shape
    if a == b or not b:
        return a
    if not a:
        return b
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        return None


class _Elementwise(OpKernel):
    """A kernel of one ``fn(*inputs, out)`` (a ufunc, or a function that writes its
    result into any ``out`` of the result's shape, an input among them), with a direct
    entry that needs no context in either case: in place where an input may be
    overwritten, else into a new buffer from the device's ``allocate`` (counted as the
    context's are). A function kernel's entry has no device to allocate from, so a node
    whose input is still needed elsewhere -- a feed, a value with two consumers -- took
    the context's path instead (``benchmarks/EXECUTOR.md``, "Fan-out")."""

    fn: ClassVar[Callable[..., Any]]

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._allocate = ctx.device.allocate
        self._dtype = self.signature.output_dtypes[0]
        self._fn = type(self).fn  # (one attribute read in the direct entries)


class _Unary(_Elementwise):
    def compute(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        type(self).fn(x, out=ctx.forward_input_or_allocate_output(_FIRST, 0, x.shape))

    def direct(self, reuse: int, x: Array) -> Any:
        fn = self._fn
        if reuse and x.base is None and x.flags.writeable:
            return fn(x, out=x)
        out = self._allocate(x.shape, self._dtype)
        fn(x, out=out)
        return out


class _Binary(_Elementwise):
    def compute(self, ctx: OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
        out = ctx.forward_input_or_allocate_output(_BOTH, 0, shape)
        try:
            type(self).fn(x, y, out=out)
        except ValueError as exc:  # a value the function refuses
            raise ctx.fail(str(exc)) from None

    def direct(self, reuse: int, x: Array, y: Array) -> Any:
        fn = self._fn
        # In place into an input nothing else holds, whenever the broadcast result has
        # that input's shape: numpy checks that itself (an ``out`` the result does not
        # fit is a ValueError before anything is written).
        if reuse:
            if reuse & 1 and x.base is None and x.flags.writeable:
                try:
                    return fn(x, y, out=x)
                except ValueError:  # the result is larger than x
                    pass
            if reuse & 2 and y.base is None and y.flags.writeable:
                try:
                    return fn(x, y, out=y)
                except ValueError:
                    pass
        shape = binary_shape(x, y)
        if shape is None:
            return NotImplemented  # compute explains the shapes
        out = self._allocate(shape, self._dtype)
        try:
            fn(x, y, out=out)
        except ValueError:
            return NotImplemented  # e.g. a value the function refuses: compute explains
        return out


class _Compare(_Binary):
    """A comparison: its bool output never takes an input's buffer (another dtype: numpy
    would cast the bools into it), so its direct entry always writes a new one."""

    def compute(self, ctx: OpKernelContext) -> None:
        x, y = ctx.input(0), ctx.input(1)
        shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
        type(self).fn(x, y, out=ctx.allocate_output(0, shape))

    def direct(self, reuse: int, x: Array, y: Array) -> Any:
        return _Binary.direct(self, 0, x, y)


class _Predicate(_Unary):
    """A test of each element (IsNan, IsInf, IsFinite): its bool output never takes the
    input's buffer, so its direct entry always writes a new one."""

    def compute(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        type(self).fn(x, out=ctx.allocate_output(0, x.shape))

    def direct(self, reuse: int, x: Array) -> Any:
        out = self._allocate(x.shape, self._dtype)
        self._fn(x, out=out)
        return out


def kernel_class(base: type[_K], fn: Callable[..., Any], form: bool, **attrs: Any) -> type[_K]:
    """A subclass of ``base`` for ``fn`` (``<Base>_<fn name>``), ``fn`` its in-place form
    where ``form``; ``attrs`` add class attributes or replace these (a division's own
    form, the ``__module__`` the kernel is reported from)."""
    name = getattr(fn, "__name__", "elementwise")
    return type(
        f"{base.__name__.lstrip('_')}_{name}",
        (base,),
        {
            "fn": staticmethod(fn),
            "inplace_form": staticmethod(fn) if form else None,
            "__module__": __name__,
            **attrs,
        },
    )


def unary_kernel(fn: Callable[..., Any], *, form: bool = True) -> type[OpKernel]:
    """The kernel class of a unary ``fn(x, out)``; ``form``: ``fn`` is also its in-place
    form (``OpKernel.inplace_form``)."""
    return kernel_class(_Unary, fn, form)


def binary_kernel(fn: Callable[..., Any], *, form: bool = True) -> type[OpKernel]:
    """The kernel class of a binary ``fn(x, y, out)`` (numpy broadcasting); ``form`` as
    for ``unary_kernel``."""
    return kernel_class(_Binary, fn, form)


def predicate_kernel(fn: Callable[..., Any]) -> type[OpKernel]:
    """The kernel class of an elementwise test ``fn(x, out)`` into a new bool buffer (no
    in-place form)."""
    return kernel_class(_Predicate, fn, False)


def compare_kernel(fn: Callable[..., Any]) -> type[OpKernel]:
    """The kernel class of a comparison ``fn(x, y, out)`` into a new bool buffer (numpy
    broadcasting; no in-place form)."""
    return kernel_class(_Compare, fn, False)


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


class Cast(OpKernel):
    """TensorFlow's conversions where C++ leaves them undefined (NaN, inf, out of range to
    integers) and its Truncate attr (``kernloom.framework.cast_rules``). Its direct entry
    needs no context: the input itself where the types are the same, else a new counted
    buffer."""

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._same = ctx.attr("SrcT") is ctx.attr("DstT")
        self._truncate = bool(ctx.attr("Truncate"))
        self._allocate = ctx.device.allocate
        self._dtype = self.signature.output_dtypes[0]

    def compute(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        if self._same:
            ctx.forward_input_to_output(0, 0)
            return
        out = ctx.allocate_output(0, x.shape)
        np.copyto(out, tf_cast(np, x, out.dtype, truncate=self._truncate))

    def direct(self, reuse: int, x: Array) -> Any:
        if self._same:
            return x
        out = self._allocate(x.shape, self._dtype)
        np.copyto(out, tf_cast(np, x, out.dtype, truncate=self._truncate))
        return out


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
        fn: Any,
        types: tuple[Any, ...] | None,
        attr: str = "T",
    ) -> None:
        lib.kernel(op, device=CPU, backend="numpy", type_constraints={attr: types})(fn)

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
        kernel(op, binary_kernel(fn), types)
    for op, fn, types in UNARY:
        kernel(op, unary_kernel(fn), types)
    for op, fn, types in COMPARISONS:
        kernel(op, compare_kernel(fn), types)
    kernel("Select", select, t.OP_TYPES)
    kernel("AddN", add_n, t.OP_TYPES)
    lib.kernel("Cast", device=CPU, backend="numpy")(Cast)
