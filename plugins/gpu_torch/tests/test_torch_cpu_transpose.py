"""The CPU's ``Transpose`` for large float tensors (a copy by torch on the intra-op
threads): numpy's values whatever the layouts (hypothesis over shapes, memory orders and
permutations), in the input's memory order; small ones and other dtypes stay numpy's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from layout_helpers import in_order, order_of
from test_torch_labelled_cpu import REGISTRY

from kernloom.testing import run_kernel
from kernloom_gpu_torch.kernels import array


@pytest.fixture
def every_transpose_in_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(array, "SMALL_TRANSPOSE", 0)


@pytest.mark.usefixtures("every_transpose_in_torch")
@settings(max_examples=60, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_torch_copies_give_numpys_values_in_the_inputs_memory_order(
    dims: list[int], data: Any, dtype: Any
) -> None:
    rank = len(dims)
    order = list(data.draw(st.permutations(range(rank))))
    perm = list(data.draw(st.permutations(range(rank))))
    x = in_order(np.random.default_rng(rank).standard_normal(dims).astype(dtype), order)
    run = run_kernel("Transpose", [x, np.array(perm, np.int64)], registry=REGISTRY)
    assert type(run.kernel).__name__ == "cpu_transpose"
    (out,) = run.outputs
    np.testing.assert_array_equal(out, np.transpose(x, perm))
    assert out.dtype == dtype
    if min(dims) > 1 and not np.shares_memory(out, x):
        want = list(range(rank)) if x.flags.c_contiguous else order
        assert order_of(out) == want


def test_a_large_channel_shuffle_takes_torch_and_stays_nhwc() -> None:
    n, c, h, w, groups = 2, 64, 24, 24, 4
    assert n * c * h * w >= array.SMALL_TRANSPOSE
    image = in_order(np.random.default_rng(0).random((n, c, h, w), np.float32), [0, 2, 3, 1])
    grouped = image.reshape(n, groups, c // groups, h, w)
    (out,) = run_kernel(
        "Transpose", [grouped, np.array([0, 2, 1, 3, 4], np.int32)], registry=REGISTRY
    ).outputs
    np.testing.assert_array_equal(out, grouped.transpose(0, 2, 1, 3, 4))
    assert order_of(out.reshape(n, c, h, w)) == [0, 2, 3, 1]


def test_other_dtypes_are_numpys() -> None:
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    run = run_kernel("Transpose", [x, np.array([2, 0, 1], np.int32)], registry=REGISTRY)
    assert type(run.kernel).__name__ == "transpose"  # the numpy CPU plugin's
    np.testing.assert_array_equal(run.outputs[0], x.transpose(2, 0, 1))
