"""DeformConv: a converter composed of kernloom gathers, arithmetic and BatchMatMulV2,
checked against onnx's reference evaluator over shapes, strides, dilations, pads, groups,
offset groups, masks, biases and offsets that move samples off the image; and its import
errors, which must name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko


def _deform(
    x_shape: tuple[int | None, ...],
    w_shape: tuple[int, ...],
    attrs: dict[str, Any],
    *,
    bias: bool = False,
    mask: bool = False,
    elem: int = FLOAT,
    opset: int = 19,
    weights: np.ndarray[Any, Any] | None = None,
) -> onnx.ModelProto:
    """A one-node model; W is an initializer when ``weights`` is given, else an input."""
    names = ["x", "w", "offset", "b" if bias else "", "mask" if mask else ""]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("DeformConv", names, ["y"], name="dc", **attrs)
    inputs: dict[str, Any] = {"x": (elem, list(x_shape)), "offset": (elem, None)}
    if weights is None:
        inputs["w"] = (elem, list(w_shape))
    if bias:
        inputs["b"] = (elem, [w_shape[0]])
    if mask:
        inputs["mask"] = (elem, None)
    inits = {"w": weights} if weights is not None else None
    return model([node], inputs, {"y": (elem, None)}, initializers=inits, opset=opset)


def _out_size(length: int, k: int, stride: int, dilation: int, pad: int) -> int:
    return (length + pad - ((k - 1) * dilation + 1)) // stride + 1


def _feeds(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    attrs: dict[str, Any],
    *,
    bias: bool,
    mask: bool,
    spread: float,
    dtype: Any = np.float32,
    seed: int = 0,
) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    n, _, h, w = x_shape
    kh, kw = w_shape[2:]
    strides = attrs.get("strides", [1, 1])
    dilations = attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    oh = _out_size(h, kh, strides[0], dilations[0], pads[0] + pads[2])
    ow = _out_size(w, kw, strides[1], dilations[1], pads[1] + pads[3])
    og = attrs.get("offset_group", 1)
    feeds = {
        "x": rng.standard_normal(x_shape).astype(dtype),
        "w": rng.standard_normal(w_shape).astype(dtype),
        "offset": (rng.standard_normal((n, og * kh * kw * 2, oh, ow)) * spread).astype(dtype),
    }
    if bias:
        feeds["b"] = rng.standard_normal(w_shape[0]).astype(dtype)
    if mask:
        feeds["mask"] = rng.random((n, og * kh * kw, oh, ow)).astype(dtype)
    return feeds


CASES = [
    # (X shape, W shape, attributes, offset spread)
    ((1, 1, 3, 3), (1, 1, 2, 2), {}, 0.5),
    ((2, 3, 5, 4), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, 0.7),
    ((1, 2, 6, 7), (3, 2, 3, 2), {"strides": [2, 3]}, 1.0),
    ((1, 2, 7, 6), (2, 2, 2, 3), {"dilations": [2, 1], "pads": [0, 2, 1, 0]}, 0.6),
    ((2, 4, 5, 5), (6, 2, 3, 3), {"group": 2, "pads": [1, 0, 1, 0]}, 0.8),
    ((1, 4, 4, 5), (2, 4, 2, 2), {"offset_group": 2}, 0.9),
    ((1, 6, 5, 4), (4, 3, 2, 2), {"group": 2, "offset_group": 3, "strides": [2, 1]}, 0.5),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "offset_group": 4, "dilations": [2, 2]}, 1.2),
    # offsets large enough that most samples leave the image (zeros there)
    ((1, 2, 4, 4), (2, 2, 3, 3), {"pads": [2, 2, 2, 2]}, 4.0),
    ((1, 1, 3, 3), (1, 1, 1, 1), {"kernel_shape": [1, 1]}, 3.0),
]


@pytest.mark.parametrize("mask", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "spread"), CASES)
def test_deform_conv(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    attrs: dict[str, Any],
    spread: float,
    bias: bool,
    mask: bool,
) -> None:
    feeds = _feeds(x_shape, w_shape, attrs, bias=bias, mask=mask, spread=spread)
    proto = _deform(x_shape, w_shape, attrs, bias=bias, mask=mask)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "spread"), CASES)
def test_deform_conv_against_onnxruntime(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any], spread: float
) -> None:
    feeds = _feeds(x_shape, w_shape, attrs, bias=True, mask=True, spread=spread, seed=2)
    proto = _deform(x_shape, w_shape, attrs, bias=True, mask=True)
    check_against_oracle(proto, feeds, oracle="onnxruntime", rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((1, 2, 1, 4), (2, 2, 1, 2), {"pads": [1, 0, 1, 0]}),
        ((2, 1, 3, 1), (1, 1, 2, 1), {"pads": [0, 1, 0, 1]}),
        ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ],
)
def test_deform_conv_with_an_axis_of_one_pixel(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    # onnx's reference divides by (length - 1) there and fails; onnxruntime samples it.
    feeds = _feeds(x_shape, w_shape, attrs, bias=True, mask=True, spread=0.6)
    proto = _deform(x_shape, w_shape, attrs, bias=True, mask=True)
    check_against_oracle(proto, feeds, oracle="onnxruntime", rtol=1e-5, atol=1e-5)


def test_deform_conv_with_integer_offsets_samples_the_pixels() -> None:
    # Offsets of whole pixels: every sample is one pixel, or 0 off the image.
    x_shape, w_shape = (1, 2, 4, 5), (3, 2, 2, 2)
    feeds = _feeds(x_shape, w_shape, {}, bias=True, mask=True, spread=0.0)
    rng = np.random.default_rng(1)
    feeds["offset"] = rng.integers(-3, 4, feeds["offset"].shape).astype(np.float32)
    check_against_oracle(
        _deform(x_shape, w_shape, {}, bias=True, mask=True), feeds, rtol=1e-5, atol=1e-5
    )


def test_deform_conv_with_a_batch_known_only_at_run_time_and_weights_an_initializer() -> None:
    x_shape, w_shape = (3, 2, 5, 5), (2, 2, 3, 3)
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 2]}
    feeds = _feeds(x_shape, w_shape, attrs, bias=True, mask=True, spread=0.8)
    weights = feeds.pop("w")
    proto = _deform((None, None, 5, 5), w_shape, attrs, bias=True, mask=True, weights=weights)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


def test_deform_conv_with_an_empty_batch() -> None:
    feeds = _feeds((0, 2, 4, 4), (2, 2, 2, 2), {}, bias=True, mask=True, spread=0.5)
    proto = _deform((None, 2, 4, 4), (2, 2, 2, 2), {}, bias=True, mask=True)
    check_against_oracle(proto, feeds)


def test_deform_conv_float64() -> None:
    # The reference rounds the sampling coordinates to float32 even for float64 input.
    x_shape, w_shape, attrs = (2, 4, 5, 4), (2, 2, 2, 3), {"group": 2, "offset_group": 2}
    feeds = _feeds(x_shape, w_shape, attrs, bias=True, mask=True, spread=1.0, dtype=np.float64)
    proto = _deform(x_shape, w_shape, attrs, bias=True, mask=True, elem=TensorProto.DOUBLE)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


def test_deform_conv_float16() -> None:
    # The reference accumulates in float16; kernloom blends in float32 and rounds once.
    x_shape, w_shape = (1, 2, 4, 4), (2, 2, 2, 2)
    feeds = _feeds(x_shape, w_shape, {}, bias=True, mask=False, spread=0.5, dtype=np.float16)
    proto = _deform(x_shape, w_shape, {}, bias=True, elem=TensorProto.FLOAT16)
    check_against_oracle(proto, feeds, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("opset", [19, 22])
def test_deform_conv_opsets(opset: int) -> None:
    x_shape, w_shape, attrs = (1, 2, 5, 5), (2, 2, 3, 3), {"pads": [1, 1, 1, 1]}
    feeds = _feeds(x_shape, w_shape, attrs, bias=True, mask=True, spread=0.7)
    proto = _deform(x_shape, w_shape, attrs, bias=True, mask=True, opset=opset)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


# -- import errors -------------------------------------------------------------------------


def _error(proto: onnx.ModelProto, message: str, opset: int = 19) -> None:
    with pytest.raises(ko.OnnxImportError, match=rf"'dc' \(DeformConv, opset {opset}\).*{message}"):
        ko.import_model(proto)


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [((1, 2, 5), (2, 2, 3)), ((1, 2, 4, 4, 4), (2, 2, 2, 2, 2))],
    ids=["1d", "3d"],
)
def test_deform_conv_refuses_other_ranks(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...]
) -> None:
    _error(_deform(x_shape, w_shape, {}), "only 2-D deformable convolution.*not 3|not 5")


def test_deform_conv_refuses_spatial_sizes_unknown_at_import() -> None:
    _error(_deform((1, 2, None, 5), (2, 2, 2, 2), {}), r"spatial sizes of X \(H, W\) must be known")


def test_deform_conv_refuses_a_weight_shape_unknown_at_import() -> None:
    proto = _deform((1, 2, 4, 4), (2, 2, 2, 2), {})
    for value in proto.graph.input:
        if value.name == "w":
            value.type.tensor_type.shape.dim[2].dim_param = "k"
    _error(proto, "the shape of W must be known at import")


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs", "message"),
    [
        ((1, 3, 4, 4), (2, 2, 2, 2), {}, "X has 3 channels but W"),
        ((1, 4, 4, 4), (3, 2, 2, 2), {"group": 2}, "3 output channels do not divide"),
        ((1, 4, 4, 4), (2, 4, 2, 2), {"offset_group": 3}, "do not divide into offset_group=3"),
        ((1, 2, 4, 4), (2, 2, 2, 2), {"kernel_shape": [3, 3]}, r"kernel_shape \[3, 3\]"),
        ((1, 2, 3, 3), (2, 2, 2, 2), {"dilations": [3, 1]}, "the kernel spans 4"),
        ((1, 2, 4, 4), (2, 2, 2, 2), {"strides": [1]}, "dilations and strides need 2"),
        ((1, 2, 4, 4), (2, 2, 2, 2), {"group": 0}, "group and offset_group must be positive"),
    ],
)
def test_deform_conv_refuses_bad_attributes(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any], message: str
) -> None:
    _error(_deform(x_shape, w_shape, attrs), message)


def test_deform_conv_refuses_an_offset_of_the_wrong_shape() -> None:
    proto = _deform((1, 2, 4, 4), (2, 2, 2, 2), {})
    for value in proto.graph.input:
        if value.name == "offset":
            value.CopyFrom(helper.make_tensor_value_info("offset", FLOAT, [1, 8, 3, 2]))
    _error(proto, r"offset must have shape \(N, 8, 3, 3\)")


def test_deform_conv_refuses_integer_input() -> None:
    proto = _deform((1, 2, 4, 4), (2, 2, 2, 2), {}, elem=TensorProto.INT64)
    _error(proto, "X must be a float tensor, not int64")
