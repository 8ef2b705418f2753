"""``Graph.copy_node``: what a graph rewriter does with a node it keeps. Where the inputs
stand for the source's with the same dtype, shape and constant value, the copy takes the
source's attrs and output types as they are; otherwise it is built as ``add_node`` builds
it, attrs checked and shapes inferred again from the new inputs."""

from __future__ import annotations

import numpy as np
import pytest

import kernloom as kl
from kernloom.framework import shape_inference


def source_graph() -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 6], name="x")
        shape = kl.constant(np.array([3, 4], np.int32), name="shape")
        y = kl.ops.reshape(kl.ops.relu(x, name="relu"), shape, name="reshaped")
    return g, x, y


def test_a_kept_node_takes_its_attrs_and_output_types_without_inferring_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g, _, y = source_graph()
    copy = kl.Graph()
    with copy.as_default():
        x2 = kl.placeholder(kl.float32, [2, 6], name="x")
    inferred: list[str] = []
    original = shape_inference.infer_shapes

    def spy(ctx: object) -> object:
        inferred.append(getattr(ctx, "node_name", "?"))
        return original(ctx)  # type: ignore[arg-type]

    monkeypatch.setattr("kernloom.graph.graph.infer_shapes", spy)
    relu = copy.copy_node(g.node("relu"), [x2], device="")
    shape = copy.copy_node(g.node("shape"), [], device="")
    reshaped = copy.copy_node(g.node("reshaped"), [relu.outputs[0], shape.outputs[0]], device="")
    assert inferred == []  # nothing inferred again: every input as in the source
    assert reshaped.outputs[0].shape == y.shape == kl.TensorShape([3, 4])
    assert reshaped.attrs == g.node("reshaped").attrs
    assert reshaped.attrs is not g.node("reshaped").attrs  # a dict of its own
    assert reshaped.inputs == [relu.outputs[0], shape.outputs[0]]
    with kl.Session(copy) as sess:
        got = sess.run(reshaped.outputs[0], {x2: np.arange(-6, 6, dtype=np.float32).reshape(2, 6)})
    np.testing.assert_array_equal(got, np.maximum(np.arange(-6, 6), 0).reshape(3, 4))


def test_a_node_on_changed_inputs_is_inferred_again() -> None:
    g, _, _ = source_graph()
    copy = kl.Graph()
    with copy.as_default():
        x2 = kl.placeholder(kl.float32, [None, 6], name="x")  # a shape the source's is not
        other = kl.constant(np.array([4, 3], np.int32), name="shape")  # another value
    relu = copy.copy_node(g.node("relu"), [x2], device="")
    assert relu.outputs[0].shape == kl.TensorShape([None, 6])
    reshaped = copy.copy_node(g.node("reshaped"), [relu.outputs[0], other], device="")
    assert reshaped.outputs[0].shape == kl.TensorShape([4, 3])
    with pytest.raises(kl.InvalidArgumentError, match="'relu' is invalid or already taken"):
        copy.copy_node(g.node("relu"), [x2], device="")


def test_a_dtype_that_does_not_fit_is_refused_as_add_node_refuses_it() -> None:
    g, _, _ = source_graph()
    copy = kl.Graph()
    with copy.as_default():
        ints = kl.placeholder(kl.int32, [2, 6], name="x")
        cast = kl.ops.cast(ints, DstT=kl.as_dtype("bool"))
    with pytest.raises(kl.InvalidArgumentError, match="relu"):
        copy.copy_node(g.node("relu"), [cast], device="")
