"""Constant folding of values that follow from a shape alone (grappler's
``MaterializeShapes``): ``Shape``, ``Size`` and ``Rank`` of a fully known shape, and a
``ZerosLike``/``OnesLike`` whose readers then fold too -- the padded mask of an ONNX
AveragePool with pads, which used to run a OnesLike, a Pad and an AvgPool every step.
References: numpy computed directly."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from optimizer_helpers import ops_of, run_graph

import kernloom as kl
import kernloom.onnx as ko


def test_a_known_shape_becomes_a_constant_that_still_follows_its_input() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3, 5], name="x")
        shape = kl.ops.cast(kl.ops.shape(x), DstT=kl.float32)
        y = kl.ops.add(shape, kl.ops.sum(x, [0, 1, 2]), name="y")
        counts = kl.ops.add(kl.ops.size(x), kl.ops.rank(x), name="counts")
    feed = np.ones((2, 3, 5), np.float32)
    (got, total), nodes = run_graph(g, [y, counts], {x: feed})
    np.testing.assert_array_equal(got, np.array([2, 3, 5]) + 30)
    assert int(total) == 30 + 3
    assert not {"Shape", "Size", "Rank"} & set(ops_of(nodes))
    # (the shape's constant folded on into the Cast's, which still runs after the feed)
    assert any(n.op == "Const" and n.control_inputs for n in nodes)


def test_an_unknown_dimension_keeps_the_shape_op() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        y = kl.ops.shape(x, name="s")
    got, nodes = run_graph(g, y, {x: np.zeros((4, 3), np.float32)})
    np.testing.assert_array_equal(got, [4, 3])
    assert "Shape" in ops_of(nodes)


def test_ones_like_is_materialized_only_where_its_readers_fold() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        padded = kl.ops.pad(kl.ops.ones_like(x, name="ones"), kl.constant([[1, 1], [0, 0]]))
        counts = kl.ops.sum(padded, [0])  # constant: 2 per column... of the pad
        y = kl.ops.mul(x, kl.ops.ones_like(x, name="ones_rt"), name="y")  # read with x
        z = kl.ops.add(y, counts, name="z")
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    got, nodes = run_graph(g, z, {x: feed})
    np.testing.assert_array_equal(got, feed + 2)
    ops = ops_of(nodes)
    assert "Pad" not in ops  # the mask folded away
    assert ops.count("OnesLike") == 1  # the one multiplied with x stays a fill


@pytest.mark.parametrize("include", [0, 1])
def test_an_onnx_average_pool_with_pads_divides_by_a_constant(include: int) -> None:
    node = helper.make_node(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        count_include_pad=include,
    )
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(0).standard_normal((1, 2, 7, 7)).astype(np.float32)
    session = ko.InferenceSession(model.SerializeToString())
    md = kl.RunMetadata()
    (got,) = session.session.run(
        list(session.output_tensors.values()), {session.input_tensors["x"]: x}, run_metadata=md
    )
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ones = np.pad(np.ones_like(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.empty((1, 2, 4, 4), np.float32)
    for i in range(4):
        for j in range(4):
            window = padded[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3]
            count = 9 if include else ones[0, 0, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].sum()
            want[:, :, i, j] = window.sum(axis=(2, 3)) / count
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    ran = [n.op for part in md.partition_graphs.values() for n in part.nodes]
    assert "OnesLike" not in ran and ran.count("AvgPool") == 1
