"""The numpy functions of fusable ops: ``relu`` in rows (``_ROW``) gives exactly what
``np.maximum(x, 0)`` gives -- values, NaN, and the sign of zero -- for every size and
dtype, in place or not, contiguous or not."""

from __future__ import annotations

import numpy as np
import pytest

from kernloom.framework.numpy_elementwise import relu


@pytest.mark.parametrize("size", [0, 1, 10, 4095, 4096, 4097, 1 << 16, (1 << 16) + 3])
@pytest.mark.parametrize(
    "dtype", [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8]
)
@pytest.mark.parametrize("in_place", [False, True])
def test_relu_is_numpy_s_maximum_with_zero(size: int, dtype: type, in_place: bool) -> None:
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 50).astype(dtype)
    if size >= 6 and np.issubdtype(dtype, np.floating):
        x[:3] = [np.nan, -0.0, -np.inf]
        x[-3:] = [-0.0, np.nan, np.inf]
    want = np.maximum(x, 0)
    source = x.copy()
    out = source if in_place else np.empty_like(x)
    got = relu(source, out)
    assert got is out
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_relu_of_a_strided_view_and_a_matrix() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 40)).astype(np.float32)
    for view in (x, x.T, x[::2]):
        out = np.empty(view.shape, np.float32)
        np.testing.assert_array_equal(relu(view, out), np.maximum(view, 0))
