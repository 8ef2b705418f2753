"""Reductions and orderings: Prod, All, Any, ArgMin, Cumsum, Cumprod, TopKV2.

Written over the array module ``xp`` (CuPy; numpy in tests). Host-memory inputs (axes,
``k``) arrive as numpy; one produced on the same device is copied off it by ``_host``.
ArgMin skips NaN as TensorFlow's Eigen reduction does; TopKV2 takes one stable sort per
row of the reversed values (NaN sorts last ascending, so first here; equal values keep
the lower index first).
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
    axes_of,
    reduced_shape,
    reduction_axes,
    tf_cast,
)
from kernloom.plugin import types as t
from kernloom_gpu_cupy.kernels._host import host_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
Kernel = Callable[[OpKernelContext], None]


def _scalar_axis(ctx: OpKernelContext, shape: tuple[int, ...], value: Any, op: str) -> int:
    if np.ndim(value) != 0:
        raise ctx.fail(f"axis must be a scalar, got shape {list(np.shape(value))}")
    if len(shape) == 0:
        raise ctx.fail(f"{op} needs a tensor of rank >= 1")
    (axis,) = axes_of(ctx, value, len(shape), "axis")
    return axis


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""

    def reduction(fn: Callable[..., Any]) -> Kernel:
        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            axes = reduction_axes(ctx, host_input(ctx, 1), x.ndim)
            out = ctx.allocate_output(0, reduced_shape(x.shape, axes, bool(ctx.attr("keep_dims"))))
            kept = out.reshape(reduced_shape(x.shape, axes, True))
            with np.errstate(all="ignore"):
                xp.copyto(kept, fn(x, axis=axes, keepdims=True))

        return compute

    def prod(x: Any, axis: tuple[int, ...], keepdims: bool) -> Any:
        return xp.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)

    def euclidean_norm(x: Any, axis: tuple[int, ...], keepdims: bool) -> Any:
        """sqrt(sum(x * conj(x))), summed in x's type (TensorFlow's); an integer root
        truncated as TF's cast does."""
        if x.dtype.kind == "c":  # |x|^2 as reals (x * conj(x) may keep an imaginary part)
            squares = xp.square(x.real) + xp.square(x.imag)
            return xp.sqrt(xp.sum(squares, axis=axis, keepdims=keepdims)).astype(x.dtype)
        total = xp.sum(x * x, axis=axis, keepdims=keepdims, dtype=x.dtype)
        if x.dtype.kind in "iu":
            return tf_cast(xp, xp.sqrt(total.astype(np.float64)), x.dtype)
        return xp.sqrt(total)

    def arg_min(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        axis = _scalar_axis(ctx, x.shape, host_input(ctx, 1), "ArgMin")
        if x.shape[axis] == 0:
            raise ctx.fail(f"cannot take ArgMin over dimension {axis}, which has size 0")
        if x.dtype.kind == "f":  # NaN and +inf count as the highest finite value (TF's Eigen)
            x = xp.fmin(x, np.finfo(x.dtype).max)
        out = ctx.allocate_output(0, tuple(d for i, d in enumerate(x.shape) if i != axis))
        xp.copyto(out, xp.argmin(x, axis=axis), casting="unsafe")

    def scan(op: str, fn: Callable[..., Any], start: Callable[..., Any]) -> Any:
        """Cumsum's and Cumprod's walk: ``fn`` along the axis (flipped for ``reverse``);
        ``exclusive`` starts with ``start``'s value (0 or 1), then ``fn`` of all but the last
        element. A sum is never -0.0 (TF's scan starts at +0); a product's zeros keep signs."""

        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            axis = _scalar_axis(ctx, x.shape, host_input(ctx, 1), op)
            out = ctx.allocate_output(0, x.shape)
            reverse = bool(ctx.attr("reverse"))
            source = xp.flip(x, axis) if reverse else x
            with np.errstate(all="ignore"):
                if ctx.attr("exclusive"):
                    n = source.shape[axis]
                    total = start(source)
                    head = xp.take(source, xp.arange(max(n - 1, 0)), axis=axis)
                    index: list[Any] = [slice(None)] * x.ndim
                    index[axis] = slice(1, None)
                    total[tuple(index)] = fn(head, axis=axis, dtype=x.dtype)
                else:
                    total = fn(source, axis=axis, dtype=x.dtype)
                if op == "Cumsum" and total.dtype.kind in "fc":
                    total += 0
            xp.copyto(out, xp.flip(total, axis) if reverse else total)

        compute.__qualname__ = f"cupy_{op.lower()}"
        return compute

    def top_k(ctx: OpKernelContext) -> None:
        x, k_value = ctx.input(0), host_input(ctx, 1)
        if k_value.ndim != 0:
            raise ctx.fail(f"k must be a scalar, got shape {list(k_value.shape)}")
        k = int(k_value)
        if k < 0:
            raise ctx.fail(f"k must be >= 0, got {k}")
        if x.ndim == 0:
            raise ctx.fail("input must have rank >= 1 (top k runs over the last dimension)")
        if x.shape[-1] < k:
            raise ctx.fail(f"input must have at least k columns: had {x.shape[-1]}, needed {k}")
        shape = (*x.shape[:-1], k)
        values, indices = ctx.allocate_output(0, shape), ctx.allocate_output(1, shape)
        if k == 0 or math.prod(shape) == 0:
            return
        n = x.shape[-1]
        order = xp.argsort(x[..., ::-1], axis=-1, kind="stable")
        found = n - 1 - order[..., ::-1][..., :k]
        xp.copyto(indices, found, casting="unsafe")
        xp.copyto(values, xp.take_along_axis(x, found, axis=-1))

    def gpu(op: str, types: tuple[Any, ...] | None, **kw: Any) -> Any:
        constraints = {"T": types} if types else None
        return lib.kernel(op, device=GPU, backend=BACKEND, type_constraints=constraints, **kw)

    reduce = {"host_memory": ["reduction_indices"]}
    gpu("Prod", t.OP_TYPES, **reduce)(reduction(prod))
    gpu("EuclideanNorm", t.OP_TYPES, **reduce)(reduction(euclidean_norm))
    gpu("All", (), **reduce)(reduction(xp.all))
    gpu("Any", (), **reduce)(reduction(xp.any))
    gpu("ArgMin", t.OP_TYPES, host_memory=["dimension"])(arg_min)
    gpu("Cumsum", t.OP_TYPES, host_memory=["axis"])(scan("Cumsum", xp.cumsum, xp.zeros_like))
    gpu("Cumprod", t.OP_TYPES, host_memory=["axis"])(scan("Cumprod", xp.cumprod, xp.ones_like))
    gpu("TopKV2", t.OP_TYPES, host_memory=["k"])(top_k)
