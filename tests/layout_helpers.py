"""Arrays in a given memory order, for the tests of kernels that keep their inputs' layout
(``tests/test_layout_keeping_kernels.py`` and the torch plugin's ``CpuConcat`` tests)."""

from __future__ import annotations

from typing import Any

import numpy as np

ORDERS = [[0, 1, 2, 3], [0, 2, 3, 1], [0, 3, 2, 1], [3, 2, 1, 0]]
"""Memory orders of a 4-D array, outermost axis first (``[0, 2, 3, 1]``: NCHW in NHWC)."""


def in_order(value: Any, order: list[int]) -> Any:
    """``value`` (C order) with the same values, stored with its axes in ``order``."""
    stored = np.ascontiguousarray(value.transpose(order))
    return stored.transpose(np.argsort(order))


def order_of(value: Any) -> list[int]:
    return sorted(range(value.ndim), key=lambda axis: -value.strides[axis])


def concat_inputs(
    dims: list[int],
    widths: list[int],
    axis: int,
    orders: list[int],
    shared: bool,
    dtype: Any = np.float32,
) -> list[Any]:
    """Random arrays of ``dims`` but ``widths`` along ``axis``, each stored in ``ORDERS``
    entry ``orders[i]`` (all in ``orders[0]``'s where ``shared``)."""
    rng = np.random.default_rng(len(widths) * 10 + axis)
    values = []
    for i, width in enumerate(widths):
        shape = list(dims)
        shape[axis] = width
        order = ORDERS[orders[0] if shared else orders[i]]
        values.append(in_order(rng.standard_normal(shape).astype(dtype), order))
    return values
