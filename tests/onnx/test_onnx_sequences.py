"""ONNX sequences and optionals, resolved at import, against onnx's ReferenceEvaluator:
other lengths, dtypes, negative positions, empty sequences, and the import errors for
what is decided only at run time."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kernloom.onnx as ko

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    opset: int = 18,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "seq", inputs, outputs)
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


def _seq_info(name: str, elem: int = FLOAT, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, shape))
    )


def _same(proto: onnx.ModelProto, feeds: dict[str, Any]) -> None:
    ours = ko.InferenceSession(proto).run(None, feeds)
    want = ReferenceEvaluator(proto).run(None, feeds)
    assert len(ours) == len(want)
    for got, expected in zip(ours, want, strict=True):
        if isinstance(expected, list):
            assert isinstance(got, list) and len(got) == len(expected)
            for g, e in zip(got, expected, strict=True):
                assert g.dtype == e.dtype and g.shape == e.shape
                np.testing.assert_array_equal(g, e)
        else:
            expected = np.asarray(expected)
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)


def _const(name: str, value: Any) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value), name)
    )


@pytest.mark.parametrize("position", [0, 1, -1, -3])
def test_insert_at_and_erase_with_known_positions(position: int) -> None:
    proto = _model(
        [
            _const("p", np.int64(position)),
            helper.make_node("SequenceInsert", ["s", "t", "p"], ["inserted"]),
            helper.make_node("SequenceAt", ["inserted", "p"], ["at"]),
            _const("e", np.int64(position)),
            helper.make_node("SequenceErase", ["inserted", "e"], ["erased"]),
            helper.make_node("SequenceLength", ["erased"], ["n"]),
        ],
        [_seq_info("s", INT64), helper.make_tensor_value_info("t", INT64, [2])],
        [
            _seq_info("inserted", INT64),
            helper.make_tensor_value_info("at", INT64, None),
            _seq_info("erased", INT64),
            helper.make_tensor_value_info("n", INT64, []),
        ],
    )
    seq = [np.arange(3, dtype=np.int64) * i for i in range(3)]
    _same(proto, {"s": seq, "t": np.array([7, 8], np.int64)})


@pytest.mark.parametrize("length", [1, 2, 5])
@pytest.mark.parametrize("new_axis", [0, 1])
def test_concat_from_sequence_of_several_lengths(length: int, new_axis: int) -> None:
    proto = _model(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=-1, new_axis=new_axis)],
        [_seq_info("s", FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
    )
    rng = np.random.default_rng(length)
    _same(proto, {"s": [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(length)]})


def test_a_session_imports_again_for_another_sequence_length() -> None:
    proto = _model(
        [helper.make_node("SequenceLength", ["s"], ["n"])],
        [_seq_info("s", FLOAT)],
        [helper.make_tensor_value_info("n", INT64, [])],
    )
    session = ko.InferenceSession(proto)
    for length in (0, 3, 1):
        (got,) = session.run(None, {"s": [np.zeros(2, np.float32)] * length})
        assert got == length


@pytest.mark.parametrize(("split", "keepdims"), [(None, 0), (None, 1), (2, 1), ([1, 3], 1)])
def test_split_to_sequence_variants(split: Any, keepdims: int) -> None:
    nodes = []
    inputs = ["x"]
    if split is not None:
        nodes.append(_const("split", np.asarray(split, np.int64)))
        inputs.append("split")
    nodes.append(helper.make_node("SplitToSequence", inputs, ["s"], axis=1, keepdims=keepdims))
    proto = _model(
        nodes, [helper.make_tensor_value_info("x", FLOAT, [2, 4])], [_seq_info("s", FLOAT)]
    )
    _same(proto, {"x": np.arange(8, dtype=np.float32).reshape(2, 4)})


def test_sequence_empty_then_insert_gives_a_sequence_of_its_dtype() -> None:
    proto = _model(
        [
            helper.make_node("SequenceEmpty", [], ["e"], dtype=INT64),
            helper.make_node("SequenceInsert", ["e", "t"], ["s"]),
        ],
        [helper.make_tensor_value_info("t", INT64, [3])],
        [_seq_info("s", INT64)],
    )
    _same(proto, {"t": np.array([1, 2, 3], np.int64)})


@pytest.mark.parametrize("present", [True, False])
def test_optional_input_present_or_absent(present: bool) -> None:
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(FLOAT, [2]))
    proto = _model(
        [helper.make_node("OptionalHasElement", ["o"], ["has"])],
        [helper.make_value_info("o", opt)],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
    )
    feed = np.ones(2, np.float32) if present else None
    _same(proto, {"o": feed})


def test_a_position_fed_at_run_time_is_an_import_error_naming_the_node() -> None:
    proto = _model(
        [helper.make_node("SequenceAt", ["s", "p"], ["y"], name="pick")],
        [_seq_info("s", FLOAT), helper.make_tensor_value_info("p", INT64, [])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
    )
    session = ko.InferenceSession(proto)
    with pytest.raises(ko.OnnxImportError, match=r"'pick' \(SequenceAt, opset 18\).*position"):
        session.run(None, {"s": [np.zeros(1, np.float32)], "p": np.int64(0)})


def test_an_out_of_range_position_and_an_empty_optional_are_import_errors() -> None:
    proto = _model(
        [_const("p", np.int64(2)), helper.make_node("SequenceAt", ["s", "p"], ["y"], name="at")],
        [_seq_info("s", FLOAT)],
        [helper.make_tensor_value_info("y", FLOAT, None)],
    )
    with pytest.raises(ko.OnnxImportError, match=r"'at' \(SequenceAt.*out of range"):
        ko.InferenceSession(proto).run(None, {"s": [np.zeros(1, np.float32)] * 2})
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(FLOAT, [2]))
    empty = _model(
        [helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")],
        [helper.make_value_info("o", opt)],
        [helper.make_tensor_value_info("y", FLOAT, [2])],
    )
    with pytest.raises(ko.OnnxImportError, match=r"'get' \(OptionalGetElement.*is empty"):
        ko.InferenceSession(empty).run(None, {"o": None})


def test_import_model_names_the_layout_a_sequence_input_needs() -> None:
    proto = _model(
        [helper.make_node("SequenceLength", ["s"], ["n"])],
        [_seq_info("s", FLOAT)],
        [helper.make_tensor_value_info("n", INT64, [])],
    )
    with pytest.raises(ko.OnnxImportError, match=r"graph input 's' is a sequence.*layouts="):
        ko.import_model(proto)
