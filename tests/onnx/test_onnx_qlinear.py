"""MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv: int32 products of zero-point
corrected operands and their requantization, checked against onnx's reference evaluator
(onnxruntime where the evaluator misreads a per-row zero point), with shapes known at
import and at run time, per-tensor, per-row/column and per-channel parameters, rounding
ties, saturation; and the import errors, which must name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import check_against_oracle, model

import kernloom.onnx as ko

UINT8: int = TensorProto.UINT8
INT8: int = TensorProto.INT8
INT32: int = TensorProto.INT32
FLOAT: int = TensorProto.FLOAT
FLOAT16: int = TensorProto.FLOAT16
NP: dict[int, Any] = {
    UINT8: np.uint8,
    INT8: np.int8,
    INT32: np.int32,
    FLOAT: np.float32,
    FLOAT16: np.float16,
}


def _ints(rng: np.random.Generator, shape: list[int], onnx_type: int) -> Any:
    info = np.iinfo(NP[onnx_type])
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(NP[onnx_type])


def _unknown(shape: list[int], runtime: bool) -> list[int | str | None]:
    return [None] * len(shape) if runtime else list(shape)


# -- MatMulInteger --------------------------------------------------------------------------


def _matmul_integer(
    a_shape: list[int],
    b_shape: list[int],
    types: tuple[int, int],
    zero_shapes: tuple[list[int] | None, list[int] | None],
    *,
    runtime: bool = False,
    b_static: bool = False,
) -> tuple[Any, dict[str, Any]]:
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    feeds = {"a": _ints(rng, a_shape, types[0]), "b": _ints(rng, b_shape, types[1])}
    names = ["a", "b"]
    inputs: dict[str, Any] = {"a": (types[0], _unknown(a_shape, runtime))}
    inits: dict[str, Any] = {}
    if b_static:
        inits["b"] = feeds.pop("b")
    else:
        inputs["b"] = (types[1], _unknown(b_shape, runtime))
    for name, shape, onnx_type in zip(("az", "bz"), zero_shapes, types, strict=True):
        if shape is None:
            names.append("")
            continue
        names.append(name)
        feeds[name] = _ints(rng, shape, onnx_type)
        inputs[name] = (onnx_type, shape)
    while names[-1] == "":
        names.pop()
    node = helper.make_node("MatMulInteger", names, ["y"], name="mmi")
    return model([node], inputs, {"y": (INT32, None)}, initializers=inits, opset=10), feeds


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize(
    ("a_shape", "b_shape", "types", "zeros"),
    [
        ([3, 4], [4, 5], (UINT8, UINT8), ([], [])),
        ([3, 4], [4, 5], (INT8, UINT8), ([], [])),
        ([3, 4], [4, 5], (UINT8, INT8), ([1], [1])),
        ([3, 4], [4, 5], (INT8, INT8), (None, None)),
        ([3, 4], [4, 5], (UINT8, UINT8), ([], [5])),  # b per column
        ([2, 3, 4], [4, 5], (UINT8, INT8), ([], [5])),  # batched, broadcast
        ([2, 1, 3, 4], [3, 4, 2], (INT8, INT8), ([], [])),
        ([4], [4, 3], (UINT8, UINT8), ([], [3])),  # a vector
        ([3, 4], [4], (UINT8, UINT8), ([], [])),  # b a vector
        ([2, 3, 4], [2, 4, 5], (UINT8, UINT8), ([], [2, 1, 5])),  # N-D zero point
        ([3, 0], [0, 5], (UINT8, UINT8), ([], [])),  # empty sum: zeros
        ([0, 4], [4, 5], (UINT8, UINT8), ([], [])),
    ],
)
def test_matmul_integer(
    a_shape: list[int],
    b_shape: list[int],
    types: tuple[int, int],
    zeros: tuple[list[int] | None, list[int] | None],
    runtime: bool,
) -> None:
    proto, feeds = _matmul_integer(a_shape, b_shape, types, zeros, runtime=runtime)
    check_against_oracle(proto, feeds)


def test_matmul_integer_with_a_constant_weight() -> None:
    proto, feeds = _matmul_integer([3, 4], [4, 5], (UINT8, INT8), ([], [5]), b_static=True)
    check_against_oracle(proto, feeds)


@pytest.mark.parametrize("types", [(UINT8, UINT8), (UINT8, INT8)])
def test_matmul_integer_per_row_zero_point_of_a(types: tuple[int, int]) -> None:
    # ONNX: a 1-D a_zero_point of M elements is per row of A. Neither oracle reads it so
    # (the reference evaluator subtracts it along K, onnxruntime refuses it): each row is
    # checked against the reference with that row's zero point as a scalar.
    proto, feeds = _matmul_integer([3, 4], [4, 5], types, ([3], [5]))
    got = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)[0]
    row_proto, _ = _matmul_integer([1, 4], [4, 5], types, ([], [5]))
    for row in range(3):
        row_feeds = {**feeds, "a": feeds["a"][row : row + 1], "az": feeds["az"][row]}
        want = ReferenceEvaluator(row_proto).run(None, row_feeds)[0]
        np.testing.assert_array_equal(got[row : row + 1], want)
    assert got.dtype == np.int32


def test_qlinear_matmul_per_row_a() -> None:
    # As above: a 1-D a_scale / a_zero_point of M elements is per row of a (opset 10's
    # words); each row is checked against the reference with its own scalars.
    proto = _qlinear_matmul([3, 4], [4, 5], (UINT8, UINT8, UINT8), FLOAT, opset=10)
    for name in ("a_scale", "a_zero"):
        proto.graph.input[
            ["a", "a_scale", "a_zero"].index(name)
        ].type.tensor_type.shape.dim.add().dim_value = 3
    scales = {**SCALES, "a_scale": np.asarray([0.02, 0.05, 0.1], np.float32)}
    feeds = _qlinear_feeds(proto, {"a_zero": [3]}, scales)
    got = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)[0]
    row_proto = _qlinear_matmul([1, 4], [4, 5], (UINT8, UINT8, UINT8), FLOAT, opset=10)
    for row in range(3):
        row_feeds = {
            **feeds,
            "a": feeds["a"][row : row + 1],
            "a_scale": feeds["a_scale"][row],
            "a_zero": feeds["a_zero"][row],
        }
        want = ReferenceEvaluator(row_proto).run(None, row_feeds)[0]
        np.testing.assert_array_equal(got[row : row + 1], want)


def test_matmul_integer_extremes_stay_exact() -> None:
    # 255 * 255 * 512 needs every bit of int32's accumulator short of the sign.
    proto, _ = _matmul_integer([2, 512], [512, 2], (UINT8, UINT8), ([], []))
    feeds = {
        "a": np.full((2, 512), 255, np.uint8),
        "b": np.full((512, 2), 0, np.uint8),
        "az": np.uint8(0),
        "bz": np.uint8(255),
    }
    got = check_against_oracle(proto, feeds)[0]
    assert got[0, 0] == -255 * 255 * 512


# -- QLinearMatMul --------------------------------------------------------------------------


def _qlinear_matmul(
    a_shape: list[int],
    b_shape: list[int],
    types: tuple[int, int, int],
    scale_type: int,
    *,
    b_params: int = 1,
    opset: int = 21,
    runtime: bool = False,
) -> Any:
    a_t, b_t, y_t = types
    scalar: list[int] = []
    inputs: dict[str, Any] = {
        "a": (a_t, _unknown(a_shape, runtime)),
        "a_scale": (scale_type, scalar),
        "a_zero": (a_t, scalar),
        "b": (b_t, _unknown(b_shape, runtime)),
        "b_scale": (scale_type, [b_params] if b_params > 1 else scalar),
        "b_zero": (b_t, [b_params] if b_params > 1 else scalar),
        "y_scale": (scale_type, scalar),
        "y_zero": (y_t, scalar),
    }
    node = helper.make_node("QLinearMatMul", list(inputs), ["y"], name="qmm")
    return model([node], inputs, {"y": (y_t, None)}, opset=opset)


def _qlinear_feeds(
    proto: Any, shapes: dict[str, list[int]], scales: dict[str, Any], seed: int = 0
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    for value in proto.graph.input:
        name = value.name
        onnx_type = value.type.tensor_type.elem_type
        if name in scales:
            feeds[name] = np.asarray(scales[name], NP[onnx_type])
        else:
            shape = shapes.get(name, [d.dim_value for d in value.type.tensor_type.shape.dim])
            feeds[name] = _ints(rng, shape, onnx_type)
    return feeds


SCALES = {"a_scale": 0.05, "b_scale": 0.03, "y_scale": 0.2}


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize("scale_type", [FLOAT, FLOAT16], ids=["float32", "float16"])
@pytest.mark.parametrize(
    ("a_shape", "b_shape", "types"),
    [
        ([3, 4], [4, 5], (UINT8, UINT8, UINT8)),
        ([3, 4], [4, 5], (INT8, INT8, INT8)),
        ([3, 4], [4, 5], (UINT8, INT8, INT8)),
        ([2, 3, 4], [4, 5], (INT8, UINT8, UINT8)),
        ([2, 3, 4], [2, 4, 5], (UINT8, UINT8, INT8)),
        ([4], [4, 5], (UINT8, UINT8, UINT8)),
        ([3, 0], [0, 5], (UINT8, UINT8, UINT8)),
    ],
)
def test_qlinear_matmul(
    a_shape: list[int],
    b_shape: list[int],
    types: tuple[int, int, int],
    scale_type: int,
    runtime: bool,
) -> None:
    proto = _qlinear_matmul(a_shape, b_shape, types, scale_type, runtime=runtime)
    feeds = _qlinear_feeds(proto, {"a": a_shape, "b": b_shape}, SCALES)
    check_against_oracle(proto, feeds)


def test_qlinear_matmul_opset_10() -> None:
    proto = _qlinear_matmul([3, 4], [4, 5], (UINT8, UINT8, UINT8), FLOAT, opset=10)
    check_against_oracle(proto, _qlinear_feeds(proto, {}, SCALES))


def test_qlinear_matmul_per_column_b() -> None:
    proto = _qlinear_matmul([3, 4], [4, 5], (UINT8, INT8, UINT8), FLOAT, b_params=5)
    scales = {**SCALES, "b_scale": np.linspace(0.01, 0.05, 5)}
    check_against_oracle(proto, _qlinear_feeds(proto, {}, scales))


def test_qlinear_matmul_rounds_ties_to_even_and_saturates() -> None:
    proto = _qlinear_matmul([8, 1], [1, 1], (INT8, INT8, INT8), FLOAT)
    feeds = {
        "a": np.asarray([[1], [3], [5], [-7], [2], [127], [-128], [-3]], np.int8),
        "a_scale": np.float32(0.5),
        "a_zero": np.int8(0),
        "b": np.asarray([[1]], np.int8),
        "b_scale": np.float32(1.0),
        "b_zero": np.int8(-2),  # b - b_zero = 3: the ties stay ties
        "y_scale": np.float32(1.0),
        "y_zero": np.int8(1),
    }
    got = check_against_oracle(proto, feeds)[0]
    # (a * 3) / 2 + 1: 2.5, 5.5, 8.5, -9.5, 4, 191.5, -191, -3.5
    assert got.reshape(-1).tolist() == [2, 6, 8, -10, 4, 127, -128, -4]


# -- ConvInteger and QLinearConv -------------------------------------------------------------


def _conv_model(
    op: str,
    x_shape: list[int],
    w_shape: list[int],
    types: tuple[int, int],
    attrs: dict[str, Any],
    *,
    w_zero_shape: list[int] | None = None,
    w_static: bool = True,
    runtime: bool = False,
    bias: bool = False,
    y_type: int = UINT8,
) -> tuple[Any, dict[str, Any]]:
    rng = np.random.default_rng(len(x_shape) + len(attrs))
    x_t, w_t = types
    x = _ints(rng, x_shape, x_t)
    w = _ints(rng, w_shape, w_t)
    w_zero = _ints(rng, w_zero_shape if w_zero_shape is not None else [], w_t)
    x_zero = _ints(rng, [], x_t)
    feeds: dict[str, Any] = {"x": x}
    inputs: dict[str, Any] = {"x": (x_t, _unknown(x_shape, runtime))}
    inits: dict[str, Any] = {}
    params = {"w": w, "w_zero": w_zero}
    if w_static:
        inits.update(params)
    else:
        feeds.update(params)
        inputs["w"] = (w_t, w_shape)
        inputs["w_zero"] = (w_t, list(w_zero.shape))
    inputs["x_zero"] = (x_t, [])
    feeds["x_zero"] = x_zero
    if op == "ConvInteger":
        names = ["x", "w", "x_zero", "w_zero"]
        out_type = INT32
    else:
        channels = w_shape[0]
        w_scale = (
            np.linspace(0.002, 0.01, channels, dtype=np.float32)
            if w_zero_shape
            else np.float32(0.004)
        )
        inits.update(
            x_scale=np.float32(0.05),
            w_scale=w_scale,
            y_scale=np.float32(0.3),
            y_zero=_ints(rng, [], y_type),
        )
        names = ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"]
        if bias:
            inits["bias"] = rng.integers(-5000, 5000, size=[channels]).astype(np.int32)
            names.append("bias")
        out_type = y_type
    node = helper.make_node(op, names, ["y"], name="qc", **attrs)
    proto = model([node], inputs, {"y": (out_type, None)}, initializers=inits, opset=10)
    return proto, feeds


CONV_CASES = [
    ([1, 2, 5, 5], [3, 2, 3, 3], {}),
    ([2, 2, 6, 5], [4, 2, 3, 2], {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ([1, 4, 7, 7], [4, 2, 3, 3], {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ([1, 2, 5, 6], [3, 2, 2, 3], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([1, 2, 5, 6], [3, 2, 2, 2], {"auto_pad": "SAME_LOWER"}),
    ([2, 3, 9], [2, 3, 3], {"pads": [1, 2], "strides": [2]}),  # 1-D
]


@pytest.mark.parametrize("w_static", [True, False], ids=["const-w", "fed-w"])
@pytest.mark.parametrize("types", [(UINT8, UINT8), (UINT8, INT8)])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_CASES)
def test_conv_integer(
    x_shape: list[int],
    w_shape: list[int],
    attrs: dict[str, Any],
    types: tuple[int, int],
    w_static: bool,
) -> None:
    proto, feeds = _conv_model("ConvInteger", x_shape, w_shape, types, attrs, w_static=w_static)
    check_against_oracle(proto, feeds)


@pytest.mark.parametrize("w_static", [True, False], ids=["const-w", "fed-w"])
def test_conv_integer_per_channel_weight_zero_point(w_static: bool) -> None:
    proto, feeds = _conv_model(
        "ConvInteger",
        [1, 2, 5, 5],
        [3, 2, 3, 3],
        (UINT8, UINT8),
        {},
        w_zero_shape=[3],
        w_static=w_static,
    )
    check_against_oracle(proto, feeds)


def test_conv_integer_with_sizes_known_at_run_time() -> None:
    proto, feeds = _conv_model(
        "ConvInteger",
        [2, 2, 6, 5],
        [4, 2, 3, 2],
        (UINT8, UINT8),
        {"pads": [1, 0, 2, 1]},
        runtime=True,
    )
    check_against_oracle(proto, feeds)


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize(
    ("types", "y_type"), [((UINT8, UINT8), UINT8), ((INT8, INT8), INT8), ((UINT8, INT8), INT8)]
)
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_CASES)
def test_qlinear_conv(
    x_shape: list[int],
    w_shape: list[int],
    attrs: dict[str, Any],
    types: tuple[int, int],
    y_type: int,
    bias: bool,
) -> None:
    proto, feeds = _conv_model(
        "QLinearConv", x_shape, w_shape, types, attrs, bias=bias, y_type=y_type
    )
    check_against_oracle(proto, feeds)


@pytest.mark.parametrize("w_static", [True, False], ids=["const-w", "fed-w"])
def test_qlinear_conv_per_channel(w_static: bool) -> None:
    proto, feeds = _conv_model(
        "QLinearConv",
        [2, 2, 6, 6],
        [3, 2, 3, 3],
        (UINT8, INT8),
        {"pads": [1, 1, 1, 1]},
        w_zero_shape=[3],
        w_static=w_static,
        bias=True,
    )
    check_against_oracle(proto, feeds)


# -- errors ---------------------------------------------------------------------------------


def test_a_zero_point_of_unknown_shape_is_refused() -> None:
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"], name="mmi")
    inputs = {"a": (UINT8, [3, 4]), "b": (UINT8, [4, 5]), "az": (UINT8, None)}
    proto = model([node], inputs, {"y": (INT32, None)}, opset=10)
    with pytest.raises(
        ko.OnnxImportError,
        match=r"'mmi' \(MatMulInteger, opset 10\).*zero point of input A must be known at "
        "import time",
    ):
        ko.import_model(proto)


def test_a_three_dimensional_conv_is_refused() -> None:
    proto, _ = _conv_model("ConvInteger", [1, 2, 4, 4, 4], [3, 2, 2, 2, 2], (UINT8, UINT8), {})
    with pytest.raises(
        ko.OnnxImportError, match=r"'qc' \(ConvInteger, opset 10\).*only 1-D and 2-D windows"
    ):
        ko.import_model(proto)


def test_a_float_scale_of_the_wrong_kind_is_refused() -> None:
    proto = _qlinear_matmul([3, 4], [4, 5], (UINT8, UINT8, UINT8), FLOAT)
    proto.graph.input[1].type.tensor_type.elem_type = INT32
    with pytest.raises(
        ko.OnnxImportError, match=r"'qmm' \(QLinearMatMul, opset 21\).*a_scale is int32"
    ):
        ko.import_model(proto)


def test_a_per_channel_output_scale_is_refused() -> None:
    proto = _qlinear_matmul([3, 4], [4, 5], (UINT8, UINT8, UINT8), FLOAT)
    proto.graph.input[6].type.tensor_type.shape.dim.add().dim_value = 5
    with pytest.raises(
        ko.OnnxImportError,
        match=r"'qmm' \(QLinearMatMul, opset 21\).*y_scale has shape \[5\]; ONNX allows one "
        "element",
    ):
        ko.import_model(proto)
