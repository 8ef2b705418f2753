"""ONNX Scan (opset 8 with its batch axis, opsets 9 on) imported onto kl.while_loop, each
model checked against onnx's reference evaluator where it runs the case (axes 0, forward)
and onnxruntime elsewhere (the evaluator implements neither other axes, reverse
directions, zero-length scans nor Scan-8's batch axis) -- never against kernloom itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko

Shape = list[int | str | None] | None


def _check(proto: onnx.ModelProto, feeds: dict[str, Any], *, oracle: str) -> list[Any]:
    return check_against_oracle(proto, feeds, oracle=oracle)


def _v(name: str, shape: Shape, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _body(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[Any]
) -> onnx.GraphProto:
    return helper.make_graph(nodes, "scan_body", inputs, outputs)


def _two_state_body() -> onnx.GraphProto:
    """States s, p; scan slices a, b (shape [2]): s' = s + a * w (w from the outer
    scope), p' = p * b; scan outputs s', a + b, p'."""
    return _body(
        [
            helper.make_node("Mul", ["a", "w"], ["aw"]),
            helper.make_node("Add", ["s", "aw"], ["s_out"]),
            helper.make_node("Mul", ["p", "b"], ["p_out"]),
            helper.make_node("Add", ["a", "b"], ["ab"]),
            helper.make_node("Identity", ["p_out"], ["p_seen"]),
            # A state that is also a scan output needs a second name.
            helper.make_node("Identity", ["s_out"], ["s_seen"]),
        ],
        [_v("s", [2]), _v("p", [2]), _v("a", [2]), _v("b", [2])],
        [_v("s_out", [2]), _v("p_out", [2]), _v("s_seen", [2]), _v("ab", [2]), _v("p_seen", [2])],
    )


def _two_state_model(opset: int, length: int | str, **attrs: Any) -> onnx.ModelProto:
    body = _two_state_body()
    b_shape: Shape = [length, 2] if attrs.get("scan_input_axes") in (None, [0, 0]) else [2, length]
    return model(
        [
            helper.make_node("Mul", ["k", "k"], ["w"]),
            helper.make_node(
                "Scan",
                ["s0", "p0", "A", "B"],
                ["s", "p", "y_s", "y_ab", "y_p"],
                name="scan",
                body=body,
                num_scan_inputs=2,
                **attrs,
            ),
        ],
        {
            "k": (FLOAT, [2]),
            "s0": (FLOAT, [2]),
            "p0": (FLOAT, [2]),
            "A": (FLOAT, [length, 2]),
            "B": (FLOAT, b_shape),
        },
        dict.fromkeys(("s", "p", "y_s", "y_ab", "y_p"), (FLOAT, None)),
        opset=opset,
    )


def _feeds(length: int, b_transposed: bool) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(length)
    b = rng.uniform(0.5, 1.5, (length, 2)).astype(np.float32)
    return {
        "k": np.array([2.0, -1.0], np.float32),
        "s0": np.array([1.0, 2.0], np.float32),
        "p0": np.array([1.0, 3.0], np.float32),
        "A": rng.standard_normal((length, 2)).astype(np.float32),
        "B": b.T.copy() if b_transposed else b,
    }


@pytest.mark.parametrize("opset", [9, 11, 16])
def test_scan_with_several_states_and_inputs_and_an_outer_value(opset: int) -> None:
    _check(_two_state_model(opset, 4), _feeds(4, False), oracle="reference")


@pytest.mark.parametrize("opset", [11, 16])
def test_scan_with_reverse_directions_and_other_axes(opset: int) -> None:
    """B scans along its axis 1 from the end; y_s stacks along axis 1, y_ab (stacked in
    reverse) along axis 0, y_p along axis -1."""
    proto = _two_state_model(
        opset,
        5,
        scan_input_axes=[0, 1],
        scan_input_directions=[0, 1],
        scan_output_axes=[1, 0, -1],
        scan_output_directions=[0, 1, 0],
    )
    _, _, y_s, y_ab, y_p = _check(proto, _feeds(5, True), oracle="onnxruntime")
    assert y_s.shape == (2, 5) and y_ab.shape == (5, 2) and y_p.shape == (2, 5)


def test_scan_over_a_length_known_only_at_run_time() -> None:
    proto = _two_state_model(16, "T", scan_input_directions=[1, 0])
    for length in (1, 6):
        _check(proto, _feeds(length, False), oracle="onnxruntime")


def test_scan_over_a_zero_length_axis_gives_the_initial_states_and_empty_outputs() -> None:
    """Neither oracle runs a zero-length Scan with scan outputs (the evaluator refuses,
    onnxruntime fails to slice), so the states are checked against the evaluator on the
    model without its scan outputs, and the scan outputs' shapes against the spec: empty
    along the scan axis, the body's declared [2] elsewhere."""
    proto = _two_state_model(16, "T", scan_output_axes=[1, 0, 0])
    feeds = _feeds(0, False)
    s, _, y_s, y_ab, y_p = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)
    states_only = _two_state_model(16, "T")
    scan = states_only.graph.node[1]
    body = next(attr.g for attr in scan.attribute if attr.name == "body")
    del states_only.graph.output[2:], scan.output[2:], body.output[2:]
    _check(states_only, feeds, oracle="reference")
    np.testing.assert_array_equal(s, feeds["s0"])
    assert y_s.shape == (2, 0) and y_ab.shape == (0, 2) and y_p.shape == (0, 2)


def test_scan_without_states_maps_its_input() -> None:
    body = _body([helper.make_node("Neg", ["x"], ["y"])], [_v("x", [3])], [_v("y", [3])])
    proto = model(
        [
            helper.make_node(
                "Scan",
                ["X"],
                ["Y"],
                body=body,
                num_scan_inputs=1,
                scan_input_axes=[1],
                scan_output_axes=[1],
            )
        ],
        {"X": (FLOAT, [3, 4])},
        {"Y": (FLOAT, None)},
    )
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    _check(proto, {"X": x}, oracle="onnxruntime")


def _scan8_model(with_lengths: bool, directions: list[int]) -> onnx.ModelProto:
    body = _body(
        [
            helper.make_node("Add", ["s", "x"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x"], ["y"]),
        ],
        [_v("s", [2]), _v("x", [2])],
        [_v("s_out", [2]), _v("y", [2])],
    )
    node = helper.make_node(
        "Scan",
        ["lens" if with_lengths else "", "s0", "X"],
        ["s", "Y"],
        name="scan8",
        body=body,
        num_scan_inputs=1,
        directions=directions,
    )
    inputs = {"s0": (FLOAT, [3, 2]), "X": (FLOAT, [3, 4, 2])}
    if with_lengths:
        inputs["lens"] = (INT64, [3])
    return model([node], inputs, {"s": (FLOAT, None), "Y": (FLOAT, None)}, opset=8)


@pytest.mark.parametrize("directions", [[0], [1]])
@pytest.mark.parametrize("with_lengths", [False, True])
def test_scan8_runs_each_batch_entry_for_its_sequence_length(
    with_lengths: bool, directions: list[int]
) -> None:
    rng = np.random.default_rng(8)
    feeds = {
        "s0": rng.standard_normal((3, 2)).astype(np.float32),
        "X": rng.standard_normal((3, 4, 2)).astype(np.float32),
    }
    if with_lengths:
        feeds["lens"] = np.array([4, 1, 2], np.int64)
    _, y = _check(_scan8_model(with_lengths, directions), feeds, oracle="onnxruntime")
    assert y.shape == (3, 4, 2)


# -- errors ----------------------------------------------------------------------------------


def _one_input_scan(**attrs: Any) -> onnx.ModelProto:
    body = _body(
        [helper.make_node("Add", ["s", "x"], ["s_out"])],
        [_v("s", [2]), _v("x", [2])],
        [_v("s_out", [2])],
    )
    return model(
        [helper.make_node("Scan", ["s0", "X"], ["s"], name="bad_scan", body=body, **attrs)],
        {"s0": (FLOAT, [2]), "X": (FLOAT, [3, 2])},
        {"s": (FLOAT, [2])},
    )


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({}, r"'num_scan_inputs' \(INT\) is missing"),
        ({"num_scan_inputs": 3}, r"num_scan_inputs is 3 but the node has only 2"),
        ({"num_scan_inputs": 1, "scan_input_directions": [0, 1]}, r"give one per scan input"),
        ({"num_scan_inputs": 1, "scan_input_directions": [2]}, r"0 \(forward\) or 1"),
        ({"num_scan_inputs": 1, "scan_input_axes": [2]}, r"axis 2 is out of range"),
    ],
)
def test_a_malformed_scan_names_the_node_and_the_fix(attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(ko.OnnxImportError, match=r"'bad_scan' \(Scan, opset 17\).* " + message):
        ko.import_model(_one_input_scan(**attrs))


def test_a_body_with_the_wrong_number_of_inputs_names_the_node() -> None:
    proto = _one_input_scan(num_scan_inputs=1)
    body = next(attr.g for attr in proto.graph.node[0].attribute if attr.name == "body")
    body.input.append(_v("extra", [2]))
    with pytest.raises(ko.OnnxImportError, match=r"'bad_scan' \(Scan.*the body has 3 input"):
        ko.import_model(proto)


def test_scan_inputs_of_different_lengths_name_the_node() -> None:
    body = _body(
        [helper.make_node("Add", ["a", "b"], ["y"])], [_v("a", [2]), _v("b", [2])], [_v("y", [2])]
    )
    proto = model(
        [helper.make_node("Scan", ["A", "B"], ["Y"], name="zip", body=body, num_scan_inputs=2)],
        {"A": (FLOAT, [3, 2]), "B": (FLOAT, [4, 2])},
        {"Y": (FLOAT, None)},
    )
    with pytest.raises(ko.OnnxImportError, match=r"'zip' \(Scan.*different lengths"):
        ko.import_model(proto)


def test_scan8_with_a_batch_unknown_at_import_names_the_node() -> None:
    proto = _scan8_model(False, [0])
    for value in proto.graph.input:
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.raises(ko.OnnxImportError, match=r"'scan8' \(Scan, opset 8\).*opset 9"):
        ko.import_model(proto)
