"""Bitwise kernels (``kernloom.op_library.bitwise_ops``): numpy's ufuncs; the shifts clamp
their amount to ``[0, bits - 1]`` first, as TensorFlow's CPU kernels do (numpy's own
shift by the width or more gives 0, by a negative amount an undefined result). Bitcast is
``ndarray.view``: no copy for types of one size or a C-order input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext, bitcast_dims
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array
from kernloom_cpu_numpy.kernels.elementwise import (
    binary_kernel,
    unary_kernel,
)

__all__ = ["register"]

CPU = "CPU"


def _clamped(shift: Callable[..., Any]) -> Callable[..., Any]:
    """``shift`` with TensorFlow's rule for the amount: clamped to ``[0, bits - 1]``."""

    def clamped(x: Array, y: Array, out: Array | None = None) -> Any:
        bits = np.dtype(x.dtype).itemsize * 8
        return shift(x, np.clip(y, 0, bits - 1).astype(y.dtype, copy=False), out=out)

    return clamped


BINARY: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("BitwiseAnd", np.bitwise_and),
    ("BitwiseOr", np.bitwise_or),
    ("BitwiseXor", np.bitwise_xor),
    ("LeftShift", _clamped(np.left_shift)),
    ("RightShift", _clamped(np.right_shift)),
)


def bitcast(ctx: OpKernelContext) -> None:
    """The input's bytes as ``type``: a view (a C-order copy first where the sizes differ
    and the input is not C order, as ``view`` then needs)."""
    x = ctx.input(0)
    source, target = ctx.attr("T"), ctx.attr("type")
    dims = [int(n or 0) for n in bitcast_dims(ctx, x.shape, source, target)]
    if source.numpy_dtype.itemsize == target.numpy_dtype.itemsize:
        ctx.set_output(0, x.view(target.numpy_dtype))
        return
    # view() scales the last axis by in_size / out_size; the reshape splits or drops it.
    rows = np.ascontiguousarray(x) if x.ndim else x.reshape(1)
    ctx.set_output(0, rows.view(target.numpy_dtype).reshape(dims))


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``: integers only, each with its direct entry and
    in-place form (the compiled straight line writes chains of them in place)."""
    integers = {"T": t.INTEGERS}
    for op, fn in BINARY:
        lib.kernel(
            op,
            device=CPU,
            backend="numpy",
            type_constraints=integers,
        )(binary_kernel(fn))
    lib.kernel(
        "Invert",
        device=CPU,
        backend="numpy",
        type_constraints=integers,
    )(unary_kernel(np.invert))
    lib.kernel("Bitcast", device=CPU, backend="numpy", expensive=False)(bitcast)
