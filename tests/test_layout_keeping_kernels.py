"""Concat, Transpose and Pad on the CPU keep the memory order their inputs share (an NCHW
image in NHWC memory, as the torch plugin's convolutions give): the values are numpy's
whatever the layouts (hypothesis over shapes, orders and axes), and the output is in
the inputs' order when they share one, a view where a transpose needs no copy."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from layout_helpers import ORDERS, concat_inputs, in_order, order_of

import kernloom as kl
from kernloom.testing import run_kernel


def _run(build: Any, feeds: list[Any]) -> Any:
    g = kl.Graph()
    with g.as_default():
        placeholders = [
            kl.placeholder(kl.float32, list(v.shape), name=f"x{i}") for i, v in enumerate(feeds)
        ]
        fetch = build(*placeholders)
    with kl.Session(g, kl.SessionConfig(graph_optimizer=False)) as session:
        return session.run(fetch, dict(zip(placeholders, feeds, strict=True)))


@settings(max_examples=80, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=4, max_size=4),
    widths=st.lists(st.integers(1, 3), min_size=2, max_size=3),
    axis=st.integers(0, 3),
    orders=st.lists(st.sampled_from(range(len(ORDERS))), min_size=3, max_size=3),
    shared=st.booleans(),
)
def test_a_concat_gives_numpys_values_in_the_inputs_shared_order(
    dims: list[int], widths: list[int], axis: int, orders: list[int], shared: bool
) -> None:
    values = concat_inputs(dims, widths, axis, orders, shared)
    want = np.concatenate(values, axis=axis)
    np.testing.assert_array_equal(_run(lambda *xs: kl.ops.concat_v2(list(xs), axis), values), want)
    # the kernel's own output (a fetch is always the caller's C-order copy)
    (out,) = run_kernel("ConcatV2", [values, np.int32(axis)]).outputs
    np.testing.assert_array_equal(out, want)
    if min(dims) > 1 and min(widths) > 1:  # (every axis > 1: one order fits each array)
        if shared:
            assert order_of(out) == ORDERS[orders[0]]
        elif len({orders[i] for i in range(len(widths))}) > 1:
            assert out.flags.c_contiguous  # no order shared: C order


def test_an_nchw_image_in_nhwc_memory_transposes_to_nhwc_without_a_copy() -> None:
    nhwc = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    image = nhwc.transpose(0, 3, 1, 2)  # NCHW shape, NHWC memory
    got, back = _run(
        lambda x: [kl.ops.transpose(x, [0, 2, 3, 1]), kl.ops.transpose(x, [0, 3, 2, 1])],
        [image],
    )
    np.testing.assert_array_equal(got, nhwc)
    np.testing.assert_array_equal(back, image.transpose(0, 3, 2, 1))
    (view,) = run_kernel("Transpose", [image, np.array([0, 2, 3, 1], np.int32)]).outputs
    assert np.shares_memory(view, image) and view.flags.c_contiguous
    (copy,) = run_kernel("Transpose", [image, np.array([0, 3, 2, 1], np.int32)]).outputs
    assert not np.shares_memory(copy, image)
    assert order_of(copy) == [0, 2, 3, 1]  # the input's memory order, axis position by position
    # a fetched value is the caller's: writing into it changes neither the feed nor a rerun
    got[...] = -1
    assert nhwc.min() == 0
    again = _run(lambda x: kl.ops.transpose(x, [0, 2, 3, 1]), [image])
    np.testing.assert_array_equal(again, nhwc)


def test_a_transposed_view_feeds_other_kernels_as_its_values() -> None:
    """The view a transpose returns is read, never written, by what follows: an add that
    could reuse a buffer in place must not write into the fed image."""
    nhwc = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    image = nhwc.transpose(0, 3, 1, 2)
    keep = image.copy()
    total, plus = _run(
        lambda x: [
            kl.ops.sum(kl.ops.transpose(x, [0, 2, 3, 1]) + 1.0, [0, 1, 2, 3]),
            kl.ops.transpose(x, [0, 2, 3, 1]) * 2.0,
        ],
        [image],
    )
    assert total == float((nhwc + 1).sum())
    np.testing.assert_array_equal(plus, nhwc * 2)
    np.testing.assert_array_equal(image, keep)


@settings(max_examples=80, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64, np.int32]),
)
def test_a_transpose_gives_numpys_values_in_the_inputs_memory_order(
    dims: list[int], data: Any, dtype: Any
) -> None:
    rank = len(dims)
    order = data.draw(st.permutations(range(rank)))
    perm = data.draw(st.permutations(range(rank)))
    x = in_order(np.arange(np.prod(dims)).reshape(dims).astype(dtype), list(order))
    (out,) = run_kernel("Transpose", [x, np.array(perm, np.int32)]).outputs
    np.testing.assert_array_equal(out, np.transpose(x, perm))
    assert out.dtype == dtype
    if min(dims) > 1:  # (every axis > 1: one order fits each array)
        if x.flags.c_contiguous or np.transpose(x, perm).flags.c_contiguous:
            assert out.flags.c_contiguous
        elif not np.shares_memory(out, x):  # a copy: laid out as the input, position-wise
            assert order_of(out) == list(order)


def test_a_channel_shuffle_of_an_nhwc_image_stays_nhwc_and_its_reshape_is_a_view() -> None:
    """ShuffleNet's channel shuffle (Reshape, Transpose, Reshape) of a convolution's NHWC
    memory: one copy, whose result the last Reshape views as an NCHW image in NHWC memory
    (what the next convolution reads as it is)."""
    n, c, h, w, groups = 2, 12, 5, 6, 3
    rng = np.random.default_rng(1)
    image = in_order(rng.standard_normal((n, c, h, w)).astype(np.float32), [0, 2, 3, 1])
    want = image.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
    grouped = image.reshape(n, groups, c // groups, h, w)
    (shuffled,) = run_kernel("Transpose", [grouped, np.array([0, 2, 1, 3, 4], np.int32)]).outputs
    (flat,) = run_kernel("Reshape", [shuffled, np.array([n, c, h, w], np.int32)]).outputs
    np.testing.assert_array_equal(flat, want)
    assert np.shares_memory(flat, shuffled) and order_of(flat) == [0, 2, 3, 1]
    got = _run(
        lambda x: kl.ops.reshape(
            kl.ops.transpose(kl.ops.reshape(x, [n, groups, c // groups, h, w]), [0, 2, 1, 3, 4]),
            [n, c, h, w],
        ),
        [image],
    )
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=4, max_size=4),
    pads=st.lists(st.integers(0, 2), min_size=8, max_size=8),
    order=st.sampled_from(range(len(ORDERS))),
    fill=st.sampled_from([None, 0.0, -2.5]),
)
def test_a_pad_gives_numpys_values_in_the_inputs_memory_order(
    dims: list[int], pads: list[int], order: int, fill: float | None
) -> None:
    x = in_order(np.random.default_rng(0).standard_normal(dims).astype(np.float32), ORDERS[order])
    pairs = np.array(pads, np.int32).reshape(4, 2)
    inputs: list[Any] = [x, pairs] if fill is None else [x, pairs, np.float32(fill)]
    (out,) = run_kernel("PadV2" if fill is not None else "Pad", inputs).outputs
    want = np.pad(x, pairs.tolist(), constant_values=0.0 if fill is None else fill)
    np.testing.assert_array_equal(out, want)
    if min(dims) > 1:
        assert order_of(out) == ORDERS[order]
