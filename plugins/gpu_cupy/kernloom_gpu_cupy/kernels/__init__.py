"""Kernels for the standard op library, written against the numpy API that CuPy mirrors.

``build_library(cupy)`` registers them for the CuPy GPU. Because nothing here but the
``fused`` kernels is CuPy-specific, ``build_library(numpy)`` builds the same kernels over
numpy, which is how CI (without a GPU) runs every one of them through the real executor
on a stand-in device of backend ``cupy``. The fused kernels need CuPy's compiler and are
only registered when ``xp`` is CuPy.

Host-memory arguments (axes, shapes) arrive as numpy; one produced on the same device
(a Const placed with its consumer) is copied off it by ``host``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import (
    KernelLibrary,
    OpKernelContext,
    add_n_shape,
    argmax_axis,
    as_dtype,
    bias_channel,
    bitcast_dims,
    broadcast_shape,
    check_permutation,
    concat_shape,
    fill_dims,
    matmul_shape,
    reduced_shape,
    reduction_axes,
    register_variable_kernels,
    reshape_dims,
    select_condition_shape,
    tf_cast,
)
from kernloom.plugin import types as t
from kernloom_gpu_cupy.kernels import (
    activations,
    conv,
    fused,
    image,
    indexing,
    linalg,
    logic,
    reductions,
    segment,
    space_batch,
    spectral,
)

__all__ = ["BACKEND", "FUSED_LABEL", "build_library"]

GPU = "GPU"
BACKEND = "cupy"
FUSED_LABEL = "fused"
Kernel = Callable[[OpKernelContext], None]
_ORDERED = (*t.REALS, as_dtype(np.bool_))
_WIDE_UNSIGNED = ("uint16", "uint32", "uint64")  # what TensorFlow's Add leaves out
"""The reals and bool: what ArgMax orders."""


def host(ctx: OpKernelContext, index: int) -> np.ndarray[Any, Any]:
    value = ctx.input(index)
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    return ctx.device.copy_to_host(value)


class _Kernels:
    """The kernels, bound to one array module ``xp`` (CuPy, or numpy in tests)."""

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp

    # -- elementwise ---------------------------------------------------------------------

    def binary(self, fn: Callable[..., Any]) -> Kernel:
        def compute(ctx: OpKernelContext) -> None:
            x, y = ctx.input(0), ctx.input(1)
            shape = x.shape if x.shape == y.shape else broadcast_shape(ctx, x.shape, y.shape)
            out = ctx.allocate_output(0, shape)
            with np.errstate(all="ignore"):  # numpy in tests; CuPy never warns
                try:
                    fn(x, y, out=out)
                except ValueError as exc:  # integers to negative integer powers
                    raise ctx.fail(str(exc)) from None

        compute.__qualname__ = f"cupy_{getattr(fn, '__name__', 'binary')}"
        return compute

    def unary(self, fn: Callable[..., Any]) -> Kernel:
        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            with np.errstate(all="ignore"):
                fn(x, out=ctx.allocate_output(0, x.shape))

        compute.__qualname__ = f"cupy_{getattr(fn, '__name__', 'unary').lstrip('_')}"
        return compute

    def _sigmoid(self, x: Any, out: Any) -> None:
        xp = self.xp
        xp.negative(x, out=out)
        xp.exp(out, out=out)
        out += 1
        xp.reciprocal(out, out=out)

    def _relu(self, x: Any, out: Any) -> None:
        self.xp.maximum(x, 0, out=out)

    def select(self, ctx: OpKernelContext) -> None:
        """TensorFlow's Select: a vector condition picks rows (SelectV2 broadcasts)."""
        condition, then, otherwise = ctx.input(0), ctx.input(1), ctx.input(2)
        picks = select_condition_shape(ctx, condition.shape, then.shape, otherwise.shape)
        out = ctx.allocate_output(0, then.shape)
        self.xp.copyto(out, otherwise)
        self.xp.copyto(out, then, where=condition.reshape(picks))

    def add_n(self, ctx: OpKernelContext) -> None:
        inputs = ctx.input_list("inputs")
        out = ctx.allocate_output(0, add_n_shape(ctx, [x.shape for x in inputs]))
        self.xp.copyto(out, inputs[0])
        with np.errstate(all="ignore"):
            for x in inputs[1:]:
                self.xp.add(out, x, out=out)

    def cast(self, ctx: OpKernelContext) -> None:
        if ctx.attr("SrcT") is ctx.attr("DstT"):
            ctx.forward_input_to_output(0, 0)
            return
        x = ctx.input(0)
        out = ctx.allocate_output(0, x.shape)
        # TensorFlow's conversions of NaN, inf and out-of-range floats, and Truncate.
        truncate = bool(ctx.attr("Truncate"))
        with np.errstate(all="ignore"):
            self.xp.copyto(out, tf_cast(self.xp, x, out.dtype, truncate=truncate))

    # -- reductions, products, nn -----------------------------------------------------------

    def _reduction(self, ctx: OpKernelContext) -> tuple[Any, tuple[int, ...], Any]:
        x = ctx.input(0)
        axes = reduction_axes(ctx, host(ctx, 1), x.ndim)
        out = ctx.allocate_output(0, reduced_shape(x.shape, axes, bool(ctx.attr("keep_dims"))))
        return x, axes, out.reshape(reduced_shape(x.shape, axes, True))

    def reduce_sum(self, ctx: OpKernelContext) -> None:
        x, axes, out = self._reduction(ctx)
        with np.errstate(all="ignore"):
            self.xp.sum(x, axis=axes, keepdims=True, dtype=x.dtype, out=out)

    def reduce_mean(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        x, axes, out = self._reduction(ctx)
        count = math.prod(x.shape[a] for a in axes)
        if x.dtype.kind == "c" and count == 0:
            out[...] = 0  # TensorFlow's complex mean of nothing is 0 (its float mean NaN)
            return
        if x.dtype.kind not in "iu":
            if count == 0:  # 0 / 0, as TensorFlow's float mean of nothing (xp.mean would
                out[...] = np.nan  # warn "Mean of empty slice", an error under -W error)
                return
            with np.errstate(all="ignore"):
                xp.mean(x, axis=axes, keepdims=True, out=out)
            return
        if count == 0:
            out[...] = 0
            return
        # TensorFlow sums 8-, 16- and 32-bit integers in 64 bits (uint8 [200, 100] -> 150).
        wide = np.uint64 if x.dtype.kind == "u" else np.int64
        total = xp.sum(x, axis=axes, keepdims=True, dtype=wide)
        quotient = total // wide(count)
        # Floor division rounds toward -inf; TensorFlow's integer mean truncates toward 0.
        quotient += ((total % wide(count)) != 0) & (total < 0)
        out[...] = quotient.astype(x.dtype)

    def extreme(self, fn: Callable[..., Any], lowest: bool) -> Kernel:
        def compute(ctx: OpKernelContext) -> None:
            x, axes, out = self._reduction(ctx)
            if x.size == 0:  # the identity, -inf for Max, as in TensorFlow (CuPy has no initial=)
                kind = x.dtype.kind
                info: Any = np.finfo(x.dtype) if kind == "f" else np.iinfo(x.dtype)
                out[...] = (
                    (-np.inf if lowest else np.inf)
                    if kind == "f"
                    else (info.min if lowest else info.max)
                )
            else:
                # Not fn(..., out=out): CuPy 14's Min hands ``out`` and ``dtype`` to its CUB
                # reduction swapped (``_ndarray_min``), a TypeError on every real GPU.
                out[...] = fn(x, axis=axes, keepdims=True)

        return compute

    def matmul(self, ctx: OpKernelContext) -> None:
        a, b = ctx.input(0), ctx.input(1)
        ta, tb = bool(ctx.attr("transpose_a")), bool(ctx.attr("transpose_b"))
        out = ctx.allocate_output(0, matmul_shape(ctx, a.shape, b.shape, ta, tb))
        self.xp.matmul(a.T if ta else a, b.T if tb else b, out=out)

    def bias_add(self, ctx: OpKernelContext) -> None:
        value, bias = ctx.input(0), ctx.input(1)
        channel = bias_channel(ctx, value.shape, bias.shape, ctx.attr("data_format"))
        shaped = bias.reshape([-1 if i == channel else 1 for i in range(value.ndim)])
        with np.errstate(all="ignore"):
            self.xp.add(value, shaped, out=ctx.allocate_output(0, value.shape))

    def arg_max(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        axis = argmax_axis(ctx, x.shape, host(ctx, 1))
        if x.dtype.kind == "f":  # NaN and -inf count as the lowest finite value (TF's Eigen)
            x = self.xp.fmax(x, np.finfo(x.dtype).min)
        out = ctx.allocate_output(0, tuple(d for i, d in enumerate(x.shape) if i != axis))
        out[...] = self.xp.argmax(x, axis=axis)

    def _shifted(self, ctx: OpKernelContext) -> Any:
        x = ctx.input(0)
        if x.ndim == 0:
            raise ctx.fail("logits must have rank >= 1")
        out = ctx.allocate_output(0, x.shape)
        if x.size:
            self.xp.subtract(x, self.xp.max(x, axis=-1, keepdims=True), out=out)
        return out

    def softmax(self, ctx: OpKernelContext) -> None:
        out = self._shifted(ctx)
        with np.errstate(all="ignore"):
            self.xp.exp(out, out=out)
            out /= self.xp.sum(out, axis=-1, keepdims=True)

    def log_softmax(self, ctx: OpKernelContext) -> None:
        xp = self.xp
        out = self._shifted(ctx)
        with np.errstate(all="ignore"):
            out -= xp.log(xp.sum(xp.exp(out), axis=-1, keepdims=True))

    # -- arrays -------------------------------------------------------------------------------

    def reshape(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        ctx.set_output(0, x.reshape(reshape_dims(ctx, x.shape, host(ctx, 1))))

    def bitcast(self, ctx: OpKernelContext) -> None:
        """``ndarray.view``, as the numpy kernel: a C-order copy first where the sizes
        differ (view then needs the last axis contiguous; a scalar becomes a vector)."""
        x = ctx.input(0)
        source, target = ctx.attr("T"), ctx.attr("type")
        dims = [int(n or 0) for n in bitcast_dims(ctx, x.shape, source, target)]
        if source.numpy_dtype.itemsize == target.numpy_dtype.itemsize:
            ctx.set_output(0, x.view(target.numpy_dtype))
            return
        rows = self.xp.ascontiguousarray(x) if x.ndim else x.reshape(1)
        ctx.set_output(0, rows.view(target.numpy_dtype).reshape(dims))

    def transpose(self, ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        perm = check_permutation(ctx, x.ndim, host(ctx, 1))
        out = ctx.allocate_output(0, tuple(x.shape[p] for p in perm))
        self.xp.copyto(out, self.xp.transpose(x, perm))

    def concat(self, ctx: OpKernelContext) -> None:
        values = ctx.input_list("values")
        axis, shape = concat_shape(ctx, [v.shape for v in values], host(ctx, len(values)))
        self.xp.concatenate(values, axis=axis, out=ctx.allocate_output(0, shape))

    def fill(self, ctx: OpKernelContext) -> None:
        value = ctx.input(1)
        out = ctx.allocate_output(0, fill_dims(ctx, host(ctx, 0), value.shape))
        self.xp.copyto(out, value)  # a 0-d device array broadcasts without a host trip

    def filled(self, fill_value: int) -> Kernel:
        def compute(ctx: OpKernelContext) -> None:
            ctx.allocate_output(0, ctx.input(0).shape).fill(fill_value)

        return compute

    def shape(self, ctx: OpKernelContext) -> None:
        dtype = ctx.signature.output_dtypes[0].numpy_dtype
        ctx.set_output(0, np.array(ctx.input(0).shape, dtype).reshape(-1))

    # -- the table ------------------------------------------------------------------------------

    def _clamped(self, shift: Callable[..., Any]) -> Callable[..., Any]:
        """``shift`` with TensorFlow's rule for the amount: clamped to ``[0, bits - 1]``."""
        xp = self.xp

        def clamped(x: Any, y: Any, out: Any) -> Any:
            bits = np.dtype(x.dtype).itemsize * 8
            return shift(x, xp.clip(y, 0, bits - 1).astype(y.dtype), out=out)

        clamped.__name__ = shift.__name__
        return clamped

    def standard(self) -> list[tuple[str, Kernel, dict[str, Any]]]:
        xp = self.xp

        def typed(types: tuple[Any, ...] | None, **kw: Any) -> dict[str, Any]:
            return {"type_constraints": {"T": types}, **kw}

        reduction = {"host_memory": ["reduction_indices"]}
        binary: list[tuple[str, Any, tuple[Any, ...] | None]] = [
            ("Add", xp.add, t.OP_TYPES),
            ("Sub", xp.subtract, t.OP_TYPES),
            ("Mul", xp.multiply, t.OP_TYPES),
            ("RealDiv", xp.true_divide, t.OP_TYPES),
            ("Maximum", xp.maximum, t.OP_TYPES),
            ("Minimum", xp.minimum, t.OP_TYPES),
            ("Pow", xp.power, t.OP_TYPES),
            ("Less", xp.less, t.OP_TYPES),
            ("Greater", xp.greater, t.OP_TYPES),
            ("BitwiseAnd", xp.bitwise_and, t.INTEGERS),
            ("BitwiseOr", xp.bitwise_or, t.INTEGERS),
            ("BitwiseXor", xp.bitwise_xor, t.INTEGERS),
            ("LeftShift", self._clamped(xp.left_shift), t.INTEGERS),
            ("RightShift", self._clamped(xp.right_shift), t.INTEGERS),
        ]
        unary: list[tuple[str, Any, tuple[Any, ...] | None]] = [
            ("Neg", xp.negative, t.OP_TYPES),
            ("Exp", xp.exp, t.OP_TYPES),
            ("Log", xp.log, t.OP_TYPES),
            ("Sqrt", xp.sqrt, t.OP_TYPES),
            ("Square", xp.square, t.OP_TYPES),
            ("Tanh", xp.tanh, t.OP_TYPES),
            ("Sigmoid", self._sigmoid, t.OP_TYPES),
            ("Relu", self._relu, t.OP_TYPES),
            ("Invert", xp.invert, t.INTEGERS),
            ("Rint", xp.rint, tuple(dt for dt in t.FLOATS if dt.name != "float16")),
        ]
        kernels = [(op, self.binary(fn), typed(types)) for op, fn, types in binary]
        kernels += [(op, self.unary(fn), typed(types)) for op, fn, types in unary]
        kernels += [
            ("Select", self.select, typed(t.OP_TYPES)),
            ("AddN", self.add_n, typed(t.OP_TYPES)),
            ("Cast", self.cast, {}),
            ("Sum", self.reduce_sum, typed(t.OP_TYPES, **reduction)),
            ("Mean", self.reduce_mean, typed(t.OP_TYPES, **reduction)),
            ("Max", self.extreme(xp.max, lowest=True), typed(t.OP_TYPES, **reduction)),
            ("Min", self.extreme(xp.min, lowest=False), typed(t.OP_TYPES, **reduction)),
            ("MatMul", self.matmul, typed(t.OP_TYPES)),
            ("BiasAdd", self.bias_add, typed(t.OP_TYPES)),
            ("ArgMax", self.arg_max, typed(_ORDERED, host_memory=["dimension"])),
            ("Softmax", self.softmax, typed(t.OP_TYPES)),
            ("LogSoftmax", self.log_softmax, typed(t.OP_TYPES)),
            ("Reshape", self.reshape, {"host_memory": ["shape"], "expensive": False}),
            ("Bitcast", self.bitcast, {"expensive": False}),
            ("Transpose", self.transpose, {"host_memory": ["perm"]}),
            ("ConcatV2", self.concat, {"host_memory": ["axis"]}),
            ("Fill", self.fill, {"host_memory": ["dims"]}),
            ("ZerosLike", self.filled(0), typed(t.OP_TYPES)),
            ("OnesLike", self.filled(1), typed(t.OP_TYPES)),
            ("Shape", self.shape, {"host_memory": ["output"], "expensive": False}),
        ]
        return kernels


def _fused(cupy: ModuleType) -> list[tuple[str, Kernel, dict[str, Any]]]:
    """One compiled CUDA kernel per op instead of a chain of CuPy ufunc launches (the
    default Sigmoid makes four passes over memory; this makes one)."""
    sigmoid = cupy.ElementwiseKernel("T x", "T y", "y = T(1) / (T(1) + exp(-x))", "kl_sigmoid")
    # NaN stays NaN, as numpy's maximum(x, 0): the comparison is false for NaN.
    relu = cupy.ElementwiseKernel("T x", "T y", "y = x < T(0) ? T(0) : x", "kl_relu")

    def run(kernel: Any) -> Kernel:
        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            kernel(x, ctx.allocate_output(0, x.shape))

        compute.__qualname__ = f"fused_{kernel.name}"
        return compute

    floats = {"type_constraints": {"T": (t.FLOATS[1], t.FLOATS[2])}}  # float32, float64
    return [("Sigmoid", run(sigmoid), floats), ("Relu", run(relu), floats)]


def build_library(xp: ModuleType) -> KernelLibrary:
    """The CuPy GPU's kernels over ``xp`` (CuPy; numpy only for tests without a GPU)."""
    lib = KernelLibrary()
    for op, kernel, keywords in _Kernels(xp).standard():
        lib.kernel(op, device=GPU, backend=BACKEND, **keywords)(kernel)
    for family in (
        activations,
        logic,
        reductions,
        indexing,
        segment,
        space_batch,
        spectral,
        conv,
        image,
        linalg,
        fused,
    ):
        family.register(lib, xp)
    if xp.__name__ == "cupy":
        for op, kernel, keywords in _fused(xp):
            lib.kernel(op, device=GPU, backend=BACKEND, label=FUSED_LABEL, **keywords)(kernel)
    register_variable_kernels(lib, GPU, backend=BACKEND)
    return lib
