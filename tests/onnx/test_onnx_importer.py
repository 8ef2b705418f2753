"""The importer: registry lookups by schema version, every unsupported node reported at
once, attribute-vs-input opsets, and converters checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import FLOAT, INT64, model, run_both

import kernloom.onnx as ko
from kernloom.onnx._registry import REGISTRY


def test_lookup_uses_the_schema_in_force_for_the_opset() -> None:
    # Squeeze changed at 13 (axes became an input): opset 12 gets the 11 converter.
    old = REGISTRY.lookup("Squeeze", 12)
    new = REGISTRY.lookup("Squeeze", 17)
    assert old is not None and old.since_version == 11
    assert new is not None and new.since_version == 13
    assert "axes" in old.attrs and "axes" not in new.attrs


def test_every_unsupported_node_is_listed_at_once() -> None:
    proto = model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="fine"),
            helper.make_node("StringNormalizer", ["a"], ["b"], name="strings"),
            helper.make_node("Relu", ["b"], ["c"], name="also_fine", bogus=3),
            helper.make_node("RegexFullMatch", ["c"], ["y"], name="norm"),
        ],
        {"x": (FLOAT, [2, 2])},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        opset=20,
    )
    with pytest.raises(ko.UnsupportedOnnxError) as info:
        ko.import_model(proto)
    message = str(info.value)
    assert "3 unsupported node(s)" in message
    assert "node 'strings' (StringNormalizer, opset 20): no converter for schema version" in message
    assert "node 'also_fine' (Relu, opset 20): attribute(s) bogus not supported" in message
    assert "node 'norm' (RegexFullMatch, opset 20)" in message
    assert [p.node for p in info.value.problems] == ["strings", "also_fine", "norm"]


def test_a_missing_file_is_named(tmp_path: object) -> None:
    with pytest.raises(ko.OnnxImportError, match="does not exist"):
        ko.import_model("/nonexistent/model.onnx")


def test_an_element_type_kernloom_has_no_dtype_for_is_an_import_error_naming_it() -> None:
    from onnx import TensorProto

    proto = model(
        [helper.make_node("Identity", ["x"], ["y"])],
        {"x": (TensorProto.STRING, [2])},
        {"y": (TensorProto.STRING, [2])},
    )
    with pytest.raises(ko.OnnxImportError, match=r"graph input 'x': ONNX element type STRING"):
        ko.import_model(proto)


def test_a_shape_unknown_at_import_where_one_is_needed_names_the_node() -> None:
    proto = model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv_me")],
        {"x": (FLOAT, [1, 3, 5, 5]), "w": (FLOAT, [None, None, None, None])},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
    )
    with pytest.raises(ko.OnnxImportError, match=r"'conv_me' \(Conv, opset 17\).*import time"):
        ko.import_model(proto)


def test_shapes_and_slices_computed_at_run_time_match_onnxruntime() -> None:
    proto = model(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Slice", ["r", "starts", "ends", "axes", "steps"], ["y"]),
        ],
        {
            "x": (FLOAT, [2, 3, 4]),
            "shape": (INT64, [3]),
            "starts": (INT64, [2]),
            "ends": (INT64, [2]),
            "axes": (INT64, [2]),
            "steps": (INT64, [2]),
        },
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
    )
    feeds = {
        "x": RNG.standard_normal((2, 3, 4)).astype(np.float32),
        "shape": np.array([0, -1, 2]),
        "starts": np.array([-1, 5]),
        "ends": np.array([-(2**62), 0]),
        "axes": np.array([1, 0]),
        "steps": np.array([-2, -1]),
    }
    ours, ort = run_both(proto, feeds)
    np.testing.assert_array_equal(ours[0], ort[0])


def _single(
    op: str,
    x: np.ndarray,
    opset: int = 17,
    extra: dict[str, np.ndarray] | None = None,
    **attrs: object,
) -> None:
    """One node on x (and initializers), compared with onnxruntime."""
    names = ["x", *(extra or {})]
    proto = model(
        [helper.make_node(op, names, ["y"], **attrs)],
        {"x": (FLOAT, list(x.shape))},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers=extra,
        opset=opset,
    )
    ours, ort = run_both(proto, {"x": x})
    np.testing.assert_allclose(ours[0], ort[0], rtol=1e-5, atol=1e-6)


RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3]},
        {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 0, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
        {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    ],
)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_matches_onnxruntime(op: str, attrs: dict[str, object]) -> None:
    _single(op, IMAGE, **attrs)


@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_counts_padding_as_told(include: int) -> None:
    _single(
        "AveragePool",
        IMAGE,
        kernel_shape=[3, 3],
        pads=[1, 2, 2, 1],
        strides=[2, 2],
        ceil_mode=1,
        count_include_pad=include,
    )


@pytest.mark.parametrize(
    ("kernel", "strides", "pads", "include", "same"),
    [
        ([3, 3], [1, 1], [1, 1, 1, 1], 0, True),  # Inception v2's
        ([3, 3], [2, 2], [1, 0, 1, 1], 0, True),  # 7 x 8: SAME's odd pad at the end
        ([2, 2], [1, 1], [0, 0, 1, 1], 0, True),
        ([3, 3], [2, 2], [1, 1, 1, 1], 0, False),  # ShuffleNet's: not SAME
        ([3, 3], [1, 1], [1, 1, 1, 1], 1, False),  # the padding counted: not SAME
    ],
)
def test_average_pool_with_tensorflows_same_pads_is_one_same_avg_pool(
    kernel: list[int], strides: list[int], pads: list[int], include: int, same: bool
) -> None:
    """Pads that are TensorFlow's SAME padding, left out of the count, import as one SAME
    AvgPool (TF's divides by the real elements only), with onnxruntime's values."""
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    _single("AveragePool", IMAGE, count_include_pad=include, **attrs)
    proto = model(
        [helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=include, **attrs)],
        {"x": (FLOAT, list(IMAGE.shape))},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
    )
    nodes = ko.import_model(proto).graph.nodes
    pools = [n.attrs["padding"] for n in nodes if n.op == "AvgPool"]
    if same:
        assert pools == ["SAME"] and "Pad" not in {n.op for n in nodes}
    else:
        assert "SAME" not in pools


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"pads": [1, 2, 0, 1], "strides": [2, 1]},
        {"dilations": [2, 2], "pads": [2, 1, 1, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
        {"group": 3},
    ],
)
def test_conv_matches_onnxruntime(attrs: dict[str, object]) -> None:
    groups = int(attrs.get("group", 1))  # type: ignore[call-overload]
    w = RNG.standard_normal((6, 3 // groups, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    _single("Conv", IMAGE, extra={"w": w, "b": b}, **attrs)


def test_batch_norm_and_gemm_match_onnxruntime() -> None:
    c = 3
    params = {n: (RNG.random(c) + 0.5).astype(np.float32) for n in ("scale", "bias", "mean", "var")}
    _single("BatchNormalization", IMAGE, extra=params, epsilon=1e-3)
    matrix = RNG.standard_normal((4, 5)).astype(np.float32)
    extra = {
        "b": RNG.standard_normal((6, 5)).astype(np.float32),
        "c": RNG.standard_normal(6).astype(np.float32),
    }
    _single("Gemm", matrix, extra=extra, transB=1, alpha=0.5, beta=2.0)


@pytest.mark.parametrize("opset", [9, 13])
def test_unsqueeze_and_softmax_attributes_or_inputs(opset: int) -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    _single("Softmax", x, opset=opset, axis=1)
    if opset >= 13:
        _single("Unsqueeze", x, opset=opset, extra={"axes": np.array([0, -1])})
    else:
        _single("Unsqueeze", x, opset=opset, axes=[0, 3])


def test_reductions_and_slice_match_onnxruntime() -> None:
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    _single("ReduceMean", x, opset=13, axes=[1], keepdims=0)
    _single("ReduceSum", x, opset=13, extra={"axes": np.array([0, 2])})
    _single("ReduceLogSumExp", x, opset=18, extra={"axes": np.array([-1])}, keepdims=0)
    slices = {
        "starts": np.array([0, -1]),
        "ends": np.array([2, -(10**10)]),
        "axes": np.array([0, 2]),
        "steps": np.array([1, -2]),
    }
    _single("Slice", x, extra=slices)
