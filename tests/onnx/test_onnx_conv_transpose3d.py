"""3-D ConvTranspose (through Conv3DBackpropInputV2): pads, auto_pad, output_padding,
output_shape, strides, dilations, groups, bias, float64 and a batch known only at run
time, checked against onnx's reference evaluator; and the import errors for what is
refused, which name the node, its op and opset."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko

RNG = np.random.default_rng(23)


def _conv_transpose(
    x_shape: list[int],
    w_shape: list[int],
    *,
    static: bool = True,
    bias: bool = False,
    batch_known: bool = True,
    dtype: Any = np.float32,
    opset: int = 17,
    **attrs: Any,
) -> tuple[Any, dict[str, np.ndarray[Any, Any]]]:
    """The model and its feeds: x fed, w an initializer (``static``) or fed too."""
    elem = FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    x = RNG.standard_normal(x_shape).astype(dtype)
    w = RNG.standard_normal(w_shape).astype(dtype)
    names = ["x", "w", "b"] if bias else ["x", "w"]
    node = helper.make_node("ConvTranspose", names, ["y"], name="deconv", **attrs)
    x_dims: list[Any] = x_shape if batch_known else [None, *x_shape[1:]]
    inputs: dict[str, Any] = {"x": (elem, x_dims)}
    initializers: dict[str, np.ndarray[Any, Any]] = {}
    feeds = {"x": x}
    if static:
        initializers["w"] = w
    else:
        inputs["w"] = (elem, w_shape)
        feeds["w"] = w
    if bias:
        initializers["b"] = RNG.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(dtype)
    proto = model([node], inputs, {"y": (elem, None)}, initializers=initializers, opset=opset)
    return proto, feeds


CASES: list[tuple[str, list[int], list[int], dict[str, Any]]] = [
    ("plain", [1, 2, 3, 4, 3], [2, 3, 2, 3, 2], {}),
    ("strided", [2, 2, 3, 3, 4], [2, 2, 3, 2, 3], {"strides": [2, 1, 3]}),
    ("pads", [1, 2, 4, 3, 3], [2, 2, 3, 3, 2], {"strides": [2, 2, 1], "pads": [1, 0, 2, 0, 1, 1]}),
    (
        "output-padding",
        [1, 1, 3, 3, 2],
        [1, 2, 3, 2, 2],
        {"strides": [3, 2, 2], "output_padding": [2, 1, 0]},
    ),
    ("dilated", [1, 2, 3, 4, 3], [2, 2, 2, 3, 2], {"dilations": [2, 1, 3], "strides": [1, 2, 1]}),
    (
        "output-shape",
        [1, 2, 3, 3, 3],
        [2, 2, 3, 3, 3],
        {"strides": [2, 2, 2], "output_shape": [8, 7, 6]},
    ),
    ("output-shape-odd", [1, 1, 2, 3, 2], [1, 1, 2, 2, 2], {"output_shape": [3, 4, 2]}),
    (
        "same-upper",
        [1, 2, 3, 3, 4],
        [2, 1, 3, 2, 3],
        {"strides": [2, 1, 2], "auto_pad": "SAME_UPPER"},
    ),
    (
        "same-lower",
        [1, 2, 3, 3, 4],
        [2, 1, 3, 2, 3],
        {"strides": [2, 1, 2], "auto_pad": "SAME_LOWER"},
    ),
    ("valid", [1, 2, 2, 3, 2], [2, 3, 2, 2, 2], {"auto_pad": "VALID", "strides": [2, 1, 1]}),
    ("groups", [1, 4, 3, 3, 2], [4, 3, 2, 2, 2], {"group": 2, "strides": [1, 2, 2]}),
    (
        "kernel-shape",
        [1, 2, 2, 2, 2],
        [2, 2, 3, 2, 2],
        {"kernel_shape": [3, 2, 2], "pads": [1, 1, 1, 1, 0, 0]},
    ),
]


@pytest.mark.parametrize("static", [True, False], ids=["initializer", "fed-weight"])
@pytest.mark.parametrize(("name", "x_shape", "w_shape", "attrs"), CASES, ids=[c[0] for c in CASES])
def test_matches_the_reference(
    name: str, x_shape: list[int], w_shape: list[int], attrs: dict[str, Any], static: bool
) -> None:
    proto, feeds = _conv_transpose(x_shape, w_shape, static=static, **attrs)
    # onnx's evaluator fails on 3-D output_shape and groups (its col2im): onnxruntime.
    oracle = "onnxruntime" if {"output_shape", "group"} & set(attrs) else "reference"
    check_against_oracle(proto, feeds, oracle=oracle, rtol=1e-5, atol=1e-5)


def test_bias_float64_a_run_time_batch_and_an_older_opset() -> None:
    proto, feeds = _conv_transpose(
        [3, 2, 2, 3, 2],
        [2, 2, 2, 2, 3],
        bias=True,
        batch_known=False,
        dtype=np.float64,
        opset=11,
        strides=[2, 1, 2],
        pads=[0, 1, 1, 1, 0, 0],
        output_padding=[1, 0, 1],
    )
    (y,) = check_against_oracle(proto, feeds, rtol=1e-12, atol=1e-12)
    assert y.shape[0] == 3


def test_an_empty_batch_gives_an_empty_output() -> None:
    proto, _ = _conv_transpose([1, 2, 2, 2, 2], [2, 3, 2, 2, 2], batch_known=False)
    feeds = {"x": np.zeros((0, 2, 2, 2, 2), np.float32)}
    (y,) = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)
    assert y.shape == (0, 3, 3, 3, 3)


def test_refusals_name_the_node_op_and_opset() -> None:
    ints, _ = _conv_transpose([1, 2, 2, 2, 2], [2, 2, 2, 2, 2])
    ints.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    ints.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    ints.graph.initializer[0].CopyFrom(
        helper.make_tensor("w", TensorProto.INT32, [2, 2, 2, 2, 2], [1] * 32)
    )
    with pytest.raises(
        ko.OnnxImportError, match=r"deconv.*ConvTranspose.*17.*int32: only 1-D and 2-D"
    ):
        ko.import_model(ints)
    groups, _ = _conv_transpose([1, 3, 2, 2, 2], [3, 1, 2, 2, 2], group=2)
    with pytest.raises(
        ko.OnnxImportError, match=r"deconv.*ConvTranspose.*group=2 does not divide the 3"
    ):
        ko.import_model(groups)
    shape, _ = _conv_transpose([1, 2, 2, 2, 2], [2, 2, 2, 2, 2], kernel_shape=[3, 3, 3])
    with pytest.raises(ko.OnnxImportError, match=r"deconv.*kernel_shape \[3, 3, 3\] differs"):
        ko.import_model(shape)
    padding, _ = _conv_transpose([1, 2, 2, 2, 2], [2, 2, 2, 2, 2], output_padding=[1, 1])
    with pytest.raises(ko.OnnxImportError, match=r"deconv.*output_padding has 2 values"):
        ko.import_model(padding)
    unknown, _ = _conv_transpose([1, 2, 2, 2, 2], [2, 2, 2, 2, 2])
    unknown.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "w"
    with pytest.raises(ko.OnnxImportError, match=r"deconv.*spatial sizes must be known"):
        ko.import_model(unknown)


@pytest.mark.parametrize("op", ["ConvTranspose", "Conv"])
@pytest.mark.parametrize("x_shape", [[1, 2, 3, 4], [1, 2, 3, 3, 3]], ids=["2d", "3d"])
def test_float64_weights_stay_float64(op: str, x_shape: list[int]) -> None:
    """A float64 initializer weight was made a float32 constant (ConversionContext.const's
    default), which Conv2D and Conv2DBackpropInput then refused against float64 x."""
    w = RNG.standard_normal([2, 2, *[2] * (len(x_shape) - 2)])
    node = helper.make_node(op, ["x", "w"], ["y"], name="c")
    proto = model(
        [node],
        {"x": (TensorProto.DOUBLE, x_shape)},
        {"y": (TensorProto.DOUBLE, None)},
        initializers={"w": w},
    )
    feeds = {"x": RNG.standard_normal(x_shape)}
    check_against_oracle(proto, feeds, rtol=1e-12, atol=1e-12)
