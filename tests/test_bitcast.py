"""Bitcast (``tf.bitcast``): the wrapper with TensorFlow's name and arguments, its type
lists, TensorFlow's shape rule when graphs are built, values TensorFlow 2.21 gave, the
run-time error on every backend, and random round trips; and the ONNX BitCast converter
against onnx's reference evaluator.

The case table (``kernloom.testing.cases.bitwise``) checks every pair of types on every
device; ``tests/tf_diff`` compares the op with TensorFlow itself.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx_helpers import check_against_oracle, model
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.onnx as ko
import kernloom.plugin as klp
from kernloom.testing import run_op

BACKENDS = {
    "numpy": klp.default_registry,
    "torch": torch_registry,
    "cupy": stand_in_registry,
}
TORCH_TYPES = (
    kl.float16, kl.float32, kl.float64, kl.int8, kl.int16, kl.int32, kl.int64, kl.uint8,
    kl.complex64, kl.complex128,
)  # fmt: skip
"""What torch holds (its uint16/32/64 are storage only: those nodes run on the CPU)."""


def test_wrapper_has_tf_name_and_arguments() -> None:
    assert list(inspect.signature(kl.ops.bitcast).parameters)[:2] == ["input", "type"]
    assert klp.default_registry().op_def("Bitcast").name == "Bitcast"


def test_type_lists_are_tensorflows_less_what_kernloom_lacks() -> None:
    # TensorFlow 2.21: bfloat16, half, float, double, int64, int32, uint8, uint16, uint32,
    # uint64, int8, int16, complex64, complex128 and the quantized types; no bool.
    tf_list = {
        "float16", "float32", "float64", "int64", "int32", "uint8", "uint16", "uint32",
        "uint64", "int8", "int16", "complex64", "complex128",
    }  # fmt: skip
    op_def = klp.default_registry().op_def("Bitcast")
    for attr in ("T", "type"):
        assert {t.name for t in op_def.attr(attr).allowed_values} == tf_list


@pytest.mark.parametrize(
    ("dtype", "shape", "target", "expected"),
    [
        (kl.float32, [2, 3], kl.int32, (2, 3)),
        (kl.float32, [2, 3], kl.uint8, (2, 3, 4)),
        (kl.float64, [], kl.int16, (4,)),
        (kl.uint8, [5, 4], kl.float32, (5,)),
        (kl.uint8, [5, None], kl.float32, (5,)),  # the last dimension is taken to fit
        (kl.int16, [None, 4], kl.complex64, (None,)),
        (kl.complex128, [3], kl.float64, (3, 2)),
    ],
)
def test_static_shapes_follow_tensorflow(
    dtype: kl.DType, shape: list[int | None], target: kl.DType, expected: tuple[Any, ...]
) -> None:
    with kl.Graph().as_default():
        y = kl.ops.bitcast(kl.placeholder(dtype, shape), type=target)
    assert y.shape.dims == expected
    assert y.dtype == target


def test_unknown_rank_stays_unknown() -> None:
    with kl.Graph().as_default():
        y = kl.ops.bitcast(kl.placeholder(kl.uint8, None), type=kl.int32)
    assert y.shape.rank is None


@pytest.mark.parametrize(
    ("dtype", "shape", "target", "message"),
    [
        (kl.uint8, [2, 3], kl.int32, r"last dimension is 4 .*of shape \[2, 3\]"),
        (kl.float16, [], kl.float64, "last dimension is 4 .*a scalar"),
        (kl.bool_, [2], kl.uint8, "bool is not allowed"),
    ],
)
def test_bad_graphs_fail_when_built_naming_the_node(
    dtype: kl.DType, shape: list[int], target: kl.DType, message: str
) -> None:
    with kl.Graph().as_default():
        x = kl.placeholder(dtype, shape)
        with pytest.raises(kl.InvalidArgumentError, match=message) as info:
            kl.ops.bitcast(x, type=target, name="bc")
    assert "'bc'" in str(info.value)


TF_VALUES: list[tuple[Any, kl.DType, Any]] = [
    # (input, type, what TensorFlow 2.21's tf.bitcast returned)
    (np.float32([1.0, 2.0]), kl.uint8, np.uint8([[0, 0, 128, 63], [0, 0, 0, 64]])),
    (np.float32(1.0), kl.uint16, np.uint16([0, 16256])),
    (np.uint8([[1, 2, 3, 4]]), kl.int32, np.int32([67305985])),
    (np.uint16([1, 2]), kl.int32, np.int32(131073)),
    (np.complex64([1 + 2j]), kl.float32, np.float32([[1.0, 2.0]])),
    (np.float16([1.5, -2.0]), kl.int16, np.int16([15872, -16384])),
    (np.zeros((2, 0), np.float32), kl.uint8, np.zeros((2, 0, 4), np.uint8)),
    (np.zeros((0, 2), np.uint8), kl.int16, np.zeros((0,), np.int16)),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(("x", "target", "expected"), TF_VALUES)
def test_values_are_tensorflows(backend: str, x: Any, target: kl.DType, expected: Any) -> None:
    if backend == "torch" and target not in TORCH_TYPES:
        pytest.skip("torch has no uint16 tensors")
    (got,), _ = run_op(BACKENDS[backend](), "Bitcast", [x], {"type": target})
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert got.shape == expected.shape


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_bad_last_dimension_fails_at_run_time_naming_the_node(backend: str) -> None:
    registry = BACKENDS[backend]()
    graph = kl.Graph(registry)
    with graph.as_default():
        x = kl.placeholder(kl.uint8, [None, None])  # nothing known when built
        y = kl.ops.bitcast(x, type=kl.int16, name="bc")
    with (
        kl.Session(graph, registry=registry) as session,
        pytest.raises(kl.InvalidArgumentError, match=r"'bc'.*last dimension is 2.*\[1, 3\]"),
    ):
        session.run(y, {x: np.ones((1, 3), np.uint8)})


PAIRS = [
    (kl.float32, kl.int32),
    (kl.float64, kl.uint8),
    (kl.int8, kl.complex128),
    (kl.complex64, kl.float16),
    (kl.int64, kl.float64),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(("source", "target"), PAIRS, ids=str)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_round_trip_gives_back_the_bytes(
    backend: str, source: kl.DType, target: kl.DType, data: st.DataObject
) -> None:
    in_size, out_size = source.numpy_dtype.itemsize, target.numpy_dtype.itemsize
    lead = data.draw(st.lists(st.integers(0, 3), max_size=2))
    shape = (*lead, max(out_size // in_size, 1))
    raw = data.draw(st.binary(min_size=int(np.prod(shape)) * in_size, max_size=10_000))
    x = np.frombuffer(raw[: int(np.prod(shape)) * in_size], source.numpy_dtype).reshape(shape)
    registry = BACKENDS[backend]()
    (there,), _ = run_op(registry, "Bitcast", [x], {"type": target})
    (back,), _ = run_op(registry, "Bitcast", [there], {"type": source})
    assert back.shape == x.shape
    assert back.tobytes() == x.tobytes()


# -- ONNX BitCast -----------------------------------------------------------------------------

ONNX_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint64): TensorProto.UINT64,
    np.dtype(np.bool_): TensorProto.BOOL,
    np.dtype(np.complex64): TensorProto.COMPLEX64,
    np.dtype(np.complex128): TensorProto.COMPLEX128,
}


def _bitcast_model(source: Any, target: Any, shape: list[int | None]) -> Any:
    node = helper.make_node("BitCast", ["x"], ["y"], name="bc", to=ONNX_TYPES[np.dtype(target)])
    inputs = {"x": (ONNX_TYPES[np.dtype(source)], shape)}
    return model([node], inputs, {"y": (ONNX_TYPES[np.dtype(target)], None)}, opset=26)


ONNX_PAIRS = [
    (np.float16, np.uint16),
    (np.int16, np.float16),
    (np.uint64, np.float64),
    (np.complex64, np.int64),
    (np.float64, np.complex64),
    (np.int8, np.uint8),
    (np.uint8, np.bool_),
    (np.bool_, np.int8),
    (np.int32, np.int32),
]


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize(("source", "target"), ONNX_PAIRS, ids=str)
@pytest.mark.parametrize("shape", [[2, 3], [], [0, 4]], ids=str)
def test_onnx_bitcast(source: Any, target: Any, shape: list[int], runtime: bool) -> None:
    rng = np.random.default_rng(len(shape))
    size = int(np.prod(shape, dtype=np.int64))
    if np.dtype(source) == np.bool_:
        x = rng.random(shape) < 0.5
    elif np.dtype(target) == np.bool_:
        x = rng.integers(0, 2, size=shape).astype(source)  # a bool's byte is 0 or 1
    else:
        nbytes = size * np.dtype(source).itemsize
        x = rng.integers(0, 256, nbytes, dtype=np.uint8).view(source).reshape(shape)
    proto = _bitcast_model(source, target, [None] * len(shape) if runtime else list(shape))
    got = check_against_oracle(proto, {"x": x})[0]
    assert got.tobytes() == np.ascontiguousarray(x).tobytes()


def test_onnx_bitcast_between_widths_is_refused() -> None:
    proto = _bitcast_model(np.float32, np.float64, [2])
    with pytest.raises(
        ko.OnnxImportError, match=r"'bc' \(BitCast, opset 26\).*float32 \(32 bits\) to float64"
    ):
        ko.import_model(proto)


def test_onnx_bitcast_to_a_type_kernloom_lacks_is_refused() -> None:
    node = helper.make_node("BitCast", ["x"], ["y"], name="bc", to=TensorProto.BFLOAT16)
    proto = model(
        [node],
        {"x": (TensorProto.INT16, [2])},
        {"y": (TensorProto.BFLOAT16, None)},
        opset=26,
    )
    with pytest.raises(ko.OnnxImportError, match=r"'bc' \(BitCast, opset 26\).*BFLOAT16"):
        ko.import_model(proto)
