"""The CPU's ``ConcatV2`` for large float tensors (``torch.cat`` on the intra-op threads):
numpy's values whatever the layouts (hypothesis over shapes, memory orders and axes), in
the inputs' shared memory order when they have one; small outputs and other dtypes stay
numpy's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from layout_helpers import ORDERS, concat_inputs, in_order, order_of
from test_torch_labelled_cpu import REGISTRY

import kernloom as kl
from kernloom.testing import run_kernel
from kernloom_gpu_torch.kernels import array


@pytest.fixture
def every_concat_in_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(array, "SMALL_CONCAT", 0)


@pytest.mark.usefixtures("every_concat_in_torch")
@settings(max_examples=60, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=4, max_size=4),
    widths=st.lists(st.integers(1, 3), min_size=2, max_size=4),
    axis=st.integers(-4, 3),
    orders=st.lists(st.sampled_from(range(len(ORDERS))), min_size=4, max_size=4),
    shared=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_torch_cat_gives_numpys_values_in_the_inputs_shared_order(
    dims: list[int], widths: list[int], axis: int, orders: list[int], shared: bool, dtype: Any
) -> None:
    values = concat_inputs(dims, widths, axis, orders, shared, dtype)
    run = run_kernel("ConcatV2", [values, np.int32(axis)], registry=REGISTRY)
    assert type(run.kernel).__name__ == "CpuConcat"
    (out,) = run.outputs
    np.testing.assert_array_equal(out, np.concatenate(values, axis=axis))
    assert out.dtype == dtype
    if min(dims) > 1 and min(widths) > 1 and shared:  # (one order fits each array)
        assert order_of(out) == ORDERS[orders[0]]


def test_an_nhwc_channel_concat_above_the_threshold_takes_torch_and_keeps_nhwc() -> None:
    rng = np.random.default_rng(0)
    a = in_order(rng.standard_normal((1, 224, 24, 24)).astype(np.float32), [0, 2, 3, 1])
    b = in_order(rng.standard_normal((1, 32, 24, 24)).astype(np.float32), [0, 2, 3, 1])
    assert array.SMALL_CONCAT <= 256 * 24 * 24
    (out,) = run_kernel("ConcatV2", [[a, b], np.int32(1)], registry=REGISTRY).outputs
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=1))
    assert order_of(out) == [0, 2, 3, 1]


def test_other_dtypes_are_numpys() -> None:
    values = [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((2, 1), np.int32)]
    run = run_kernel("ConcatV2", [values, np.int32(1)], registry=REGISTRY)
    assert type(run.kernel).__name__ == "concat"  # the numpy CPU plugin's
    np.testing.assert_array_equal(run.outputs[0], np.concatenate(values, axis=1))


def test_kept_shapes_follow_new_shapes_and_a_fed_axis() -> None:
    """The axis and output shape are kept per input shapes and axis value: a session fed
    other shapes and another axis between runs gives numpy's concatenation each time."""
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.float32, [None, None, None], name="a")
        b = kl.placeholder(kl.float32, [None, None, None], name="b")
        axis = kl.placeholder(kl.int32, [], name="axis")
        joined = kl.ops.concat_v2([a, b], axis, name="joined")
    rng = np.random.default_rng(2)
    cases = [
        ((2, 3, 4), (2, 5, 4), 1),
        ((2, 3, 4), (2, 3, 6), 2),
        ((2, 3, 4), (2, 5, 4), 1),
        ((2, 3, 4), (1, 3, 4), 0),
        ((2, 3, 4), (2, 3, 6), -1),
        ((4, 3, 4), (2, 3, 4), 0),
    ]
    with kl.Session(g, registry=REGISTRY) as sess:
        for sa, sb, ax in cases:
            av = rng.standard_normal(sa).astype(np.float32)
            bv = rng.standard_normal(sb).astype(np.float32)
            got = sess.run(joined, {a: av, b: bv, axis: np.int32(ax)})
            np.testing.assert_array_equal(got, np.concatenate([av, bv], axis=ax))
        with pytest.raises(kl.errors.KernloomError, match="incompatible"):
            sess.run(
                joined,
                {a: av, b: rng.standard_normal((3, 3, 4)).astype(np.float32), axis: np.int32(2)},
            )
