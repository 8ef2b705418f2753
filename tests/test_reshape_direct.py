"""Reshape on the CPU runs through its direct entry (no context) in a straight-line step:
numpy's values for every input shape a session sees (the target kept per constant shape
array and input shape), a view of NHWC memory where numpy can make one, a copy through
``compute`` where it cannot, and the context's own errors for a shape that does not fit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kernloom as kl
from kernloom.errors import KernloomError


def _session(graph: kl.Graph) -> kl.Session:
    return kl.Session(graph, kl.SessionConfig(inter_op_threads=1))


def _nhwc(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``x`` (NCHW) with the same values in NHWC memory."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def test_a_constant_target_follows_every_input_shape() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 6], name="x")
        y = kl.ops.reshape(x, kl.constant(np.int32([-1, 3, 2])), name="y")
        z = kl.ops.neg(y, name="z")
    with _session(g) as sess:
        for rows in (1, 4, 1, 0, 2):
            xv = np.arange(rows * 6, dtype=np.float32).reshape(rows, 6)
            got, neg = sess.run([y, z], {x: xv})
            np.testing.assert_array_equal(got, xv.reshape(-1, 3, 2))
            np.testing.assert_array_equal(neg, -xv.reshape(-1, 3, 2))


def test_a_channel_shuffle_of_nhwc_memory_and_a_reshape_numpy_must_copy() -> None:
    """Splitting the channels of an NHWC-memory image is a view; flattening it to [N, CHW]
    is not (numpy copies): both give numpy's values, run after run."""
    n, c, h, w = 2, 6, 3, 4
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [n, c, h, w], name="x")
        grouped = kl.ops.reshape(x, kl.constant(np.int64([n, 2, 3, h, w])), name="grouped")
        flat = kl.ops.reshape(x, kl.constant(np.int32([n, -1])), name="flat")
        shuffled = kl.ops.reshape(
            kl.ops.transpose(grouped, kl.constant(np.int32([0, 2, 1, 3, 4]))),
            kl.constant(np.int32([n, c, h, w])),
            name="shuffled",
        )
    rng = np.random.default_rng(3)
    with _session(g) as sess:
        for _ in range(3):
            xv = rng.standard_normal((n, c, h, w)).astype(np.float32)
            for fed in (xv, _nhwc(xv)):
                got_grouped, got_flat, got_shuffled = sess.run([grouped, flat, shuffled], {x: fed})
                np.testing.assert_array_equal(got_grouped, xv.reshape(n, 2, 3, h, w))
                np.testing.assert_array_equal(got_flat, xv.reshape(n, -1))
                want = xv.reshape(n, 2, 3, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
                np.testing.assert_array_equal(got_shuffled, want)


def test_a_computed_target_is_read_every_run() -> None:
    """A shape computed in the graph is a new array each run: never taken from the kept
    target, so a new input shape gets its own."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None], name="x")
        s = kl.placeholder(kl.int32, [2], name="s")
        target = kl.ops.add(s, kl.constant(np.int32([0, 0])), name="target")
        y = kl.ops.reshape(x, target, name="y")
    with _session(g) as sess:
        for shape, to in (((2, 6), (3, 4)), ((2, 6), (4, 3)), ((3, 4), (6, 2))):
            xv = np.arange(12, dtype=np.float32).reshape(shape)
            got = sess.run(y, {x: xv, s: np.int32(to)})
            np.testing.assert_array_equal(got, xv.reshape(to))


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ([4, 4], r"cannot reshape a tensor of shape \[2, 6\] \(12 elements\) into \[4, 4\]"),
        ([-1, 5], r"12 is not a multiple of 5"),
    ],
)
def test_a_target_that_does_not_fit_fails_naming_the_node(target: list[int], message: str) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None], name="x")
        y = kl.ops.reshape(x, kl.constant(np.int32(target)), name="bad_reshape")
    with _session(g) as sess:
        with pytest.raises(KernloomError, match="bad_reshape") as info:
            sess.run(y, {x: np.zeros((2, 6), np.float32)})
        assert info.match(message)
        # the session still runs a good input afterwards
        if -1 in target and target.count(-1) == 1:
            ok = np.zeros((3, 5), np.float32)
            np.testing.assert_array_equal(sess.run(y, {x: ok}), ok.reshape(target))
