"""SpaceToBatchND and BatchToSpaceND: wrappers with TensorFlow's names and arguments,
static shapes, graph-building and run-time errors with TensorFlow's kernels' messages on
every backend, no kernel for complex or bool (as TensorFlow's CPU), and random shapes
against the element-by-element reference and the round trip.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_op
from kernloom.testing.cases.space_batch import batch_to_space_reference, space_to_batch_reference

BACKENDS = {
    "numpy": klp.default_registry,
    "torch": torch_registry,
    "cupy": stand_in_registry,
}
I32 = np.int32


def test_wrappers_have_tf_names_and_arguments() -> None:
    space = inspect.signature(kl.ops.space_to_batch_nd).parameters
    assert list(space)[:3] == ["input", "block_shape", "paddings"]
    batch = inspect.signature(kl.ops.batch_to_space_nd).parameters
    assert list(batch)[:3] == ["input", "block_shape", "crops"]
    op_def = klp.default_registry().op_def("BatchToSpaceND")
    assert op_def.attr("Tcrops").default == kl.int32
    assert "bool" in {t.name for t in op_def.attr("T").allowed_values}  # TF's op def: any


def test_static_shapes() -> None:
    with kl.Graph().as_default():
        x = kl.placeholder(kl.float32, [None, 4, 6, 3])
        block, pads = np.array([2, 3], I32), np.array([[1, 1], [0, 3]], I32)
        assert kl.ops.space_to_batch_nd(x, block, pads).shape.dims == (None, 3, 3, 3)
        y = kl.placeholder(kl.int64, [12, 2, None, 3])
        crops = np.array([[1, 1], [0, 0]], I32)
        assert kl.ops.batch_to_space_nd(y, block, crops).shape.dims == (2, 2, None, 3)
        unknown = kl.placeholder(kl.int32, [2])
        assert kl.ops.batch_to_space_nd(y, unknown, crops).shape.dims == (None, None, None, 3)
        assert kl.ops.batch_to_space_nd(y, block, unknown_crops(2)).shape.dims == (
            2,
            None,
            None,
            3,
        )
        with pytest.raises(kl.InvalidArgumentError, match="block_shape must have rank 1"):
            kl.ops.space_to_batch_nd(x, kl.placeholder(kl.int32, None), pads)
        with pytest.raises(kl.InvalidArgumentError, match="block_shape must have known size"):
            kl.ops.space_to_batch_nd(x, kl.placeholder(kl.int32, [None]), pads)


def unknown_crops(m: int) -> kl.Tensor:
    return kl.placeholder(kl.int32, [m, 2])


BUILD_ERRORS = [
    ("space", [2, 3], [[0, 0], [0, 0]], (2, 4, 5, 3), "padded_shape[1]=5 is not divisible"),
    ("space", [0], [[0, 0]], (2, 4, 3), "All values in block_shape must be positive"),
    ("space", [2], [[-2, 0]], (2, 4, 3), "Paddings must be non-negative"),
    ("space", [2, 2, 2], [[0, 0]] * 3, (2, 4, 4), "input rank should be >= 4 instead of 3"),
    ("space", [2], [[0, 0], [0, 0]], (2, 4), "paddings should have shape [1, 2]"),
    ("batch", [5], [[0, 0]], (12, 2), "Input batch dimension (12) is not divisible"),
    ("batch", [2], [[3, 2]], (12, 2), "cropped_shape[0]=-1 must be non-negative"),
    ("batch", [2], [[-1, 0]], (12, 2), "Crops must be non-negative"),
    ("batch", [2, -1], [[0, 0]] * 2, (12, 2, 2), "Product of block sizes must be positive"),
]


@pytest.mark.parametrize(("which", "block", "amounts", "shape", "message"), BUILD_ERRORS)
def test_bad_constants_fail_when_built_naming_the_node(
    which: str, block: list[int], amounts: list[list[int]], shape: Any, message: str
) -> None:
    build = kl.ops.space_to_batch_nd if which == "space" else kl.ops.batch_to_space_nd
    with kl.Graph().as_default():
        x = kl.placeholder(kl.float32, shape)
        with pytest.raises(kl.InvalidArgumentError) as info:
            build(x, np.array(block, I32), np.array(amounts, I32), name="n")
    assert message in str(info.value) and "node 'n'" in str(info.value)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(("which", "block", "amounts", "shape", "message"), BUILD_ERRORS)
def test_bad_values_fail_at_run_time_naming_the_node(
    backend: str, which: str, block: list[int], amounts: list[list[int]], shape: Any, message: str
) -> None:
    if "should have shape" in message:
        pytest.skip("a known shape of the wrong size fails when the node is built")
    registry = BACKENDS[backend]()
    graph = kl.Graph(registry)
    values = [np.zeros(shape, np.float32), np.array(block, I32), np.array(amounts, I32)]
    with graph.as_default():  # no value known when built (block_shape's size must be)
        feeds = {
            kl.placeholder(kl.as_dtype(v.dtype), None if i == 0 else v.shape): v
            for i, v in enumerate(values)
        }
        build = kl.ops.space_to_batch_nd if which == "space" else kl.ops.batch_to_space_nd
        out = build(*feeds, name="op")
    with (
        kl.Session(graph, registry=registry) as session,
        pytest.raises(kl.KernelError) as info,
    ):
        session.run(out, feeds)
    assert message in str(info.value) and "node 'op'" in str(info.value)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", [np.complex64, np.bool_])
def test_no_kernel_for_complex_or_bool_as_tensorflows_cpu(backend: str, dtype: Any) -> None:
    x = np.zeros((2, 2), dtype)
    with pytest.raises(kl.InvalidArgumentError, match="constraint T"):
        run_op(BACKENDS[backend](), "SpaceToBatchND", [x, np.array([2]), np.array([[0, 0]])])


@settings(max_examples=30, deadline=None)
@given(data=st.data(), m=st.integers(1, 3), batch=st.integers(0, 2))
def test_random_shapes_match_the_reference_and_round_trip(data: Any, m: int, batch: int) -> None:
    block = [data.draw(st.integers(1, 3)) for _ in range(m)]
    pads, sizes = [], []
    for b in block:
        before, size = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 4))
        after = (-(before + size)) % b + b * data.draw(st.integers(0, 1))
        pads.append([before, after])
        sizes.append(size)
    x = np.arange(batch * int(np.prod(sizes)) * 2, dtype=np.float32).reshape(batch, *sizes, 2)
    inputs = [x, np.array(block, I32), np.array(pads, np.int64)]
    expected = space_to_batch_reference(*inputs)
    for backend in sorted(BACKENDS):
        registry = BACKENDS[backend]()
        (out,), _ = run_op(registry, "SpaceToBatchND", inputs)
        np.testing.assert_array_equal(out, expected, err_msg=backend)
        (back,), _ = run_op(registry, "BatchToSpaceND", [out, inputs[1], inputs[2]])
        np.testing.assert_array_equal(back, x, err_msg=backend)
        np.testing.assert_array_equal(back, batch_to_space_reference(out, *inputs[1:]))
