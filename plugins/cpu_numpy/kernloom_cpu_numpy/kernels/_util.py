"""Helpers shared by the numpy kernels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kernloom import OpKernelContext

Array = np.ndarray[Any, Any]


def axes_of(ctx: OpKernelContext, value: Array, rank: int, what: str) -> tuple[int, ...]:
    """Axes from a host-memory scalar or vector input, normalised and checked."""
    axes = [int(a) for a in np.asarray(value).reshape(-1)]
    for axis in axes:
        if not -rank <= axis < max(rank, 1):
            raise ctx.fail(f"{what} {axis} is out of range for an input of rank {rank}")
    return tuple(sorted({a % rank if rank else 0 for a in axes}))


def broadcast_shape(ctx: OpKernelContext, *shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        raise ctx.fail(
            f"shapes {', '.join(str(list(s)) for s in shapes)} cannot be broadcast together"
        ) from None


def lowest(dtype: np.dtype[Any]) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def highest(dtype: np.dtype[Any]) -> Any:
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max
