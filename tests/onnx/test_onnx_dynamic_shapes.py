"""Converters that must not need the dimensions a model leaves dynamic: torch's recurrent
layers exported with dynamic time and batch axes (Y keeps its rank, so the Squeeze torch
puts after it imports), and ConvTranspose, DepthToSpace / pixel_shuffle and
GroupNormalization with a dynamic batch (and spatial sizes). Each model is checked
against onnxruntime at two batch sizes (and sequence lengths)."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-4, 1e-5


def _export(module: Any, example: Any, dynamic: dict[str, dict[int, str]], outputs: int) -> bytes:
    """``module`` exported by torch's TorchScript exporter (opset 17) with the axes
    ``dynamic`` names dynamic (input "x", outputs "y0", "y1", ...)."""
    names = [f"y{i}" for i in range(outputs)]
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter warns that it is legacy
        torch.onnx.export(
            module.eval(),
            (example,),
            buffer,
            opset_version=17,
            input_names=["x"],
            output_names=names,
            dynamic_axes=dynamic,
            dynamo=False,
        )
    return buffer.getvalue()


def _compare(data: bytes, feeds: list[np.ndarray[Any, Any]]) -> None:
    """kernloom (one session, so one import for every feed) against onnxruntime."""
    ours = ko.InferenceSession(onnx.load_from_string(data))
    ort = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for x in feeds:
        got = ours.run(None, {"x": x})
        want = ort.run(None, {"x": x})
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape, (x.shape, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


# -- RNN, GRU, LSTM -----------------------------------------------------------------------


class _Recurrent(torch.nn.Module):  # type: ignore[misc]
    """A torch recurrent layer returning Y and its final state(s)."""

    def __init__(self, cell: str, layers: int, bidirectional: bool, batch_first: bool) -> None:
        super().__init__()
        self.layer = getattr(torch.nn, cell)(
            4, 5, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first
        )

    def forward(self, x: Any) -> Any:
        y, state = self.layer(x)
        return (y, *state) if isinstance(state, tuple) else (y, state)


@pytest.mark.parametrize("cell", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize(("layers", "bidirectional"), [(1, False), (2, True)])
@pytest.mark.parametrize("batch_first", [False, True])
def test_torch_recurrent_with_dynamic_time_and_batch(
    cell: str, layers: int, bidirectional: bool, batch_first: bool
) -> None:
    torch.manual_seed(0)
    module = _Recurrent(cell, layers, bidirectional, batch_first)
    time_axis, batch_axis = (1, 0) if batch_first else (0, 1)
    outputs = 3 if cell == "LSTM" else 2
    dynamic = {"x": {time_axis: "time", batch_axis: "batch"}, "y0": {time_axis: "time"}}
    dynamic["y0"][batch_axis] = "batch"
    for i in range(1, outputs):
        dynamic[f"y{i}"] = {1: "batch"}

    def feed(seq: int, batch: int) -> np.ndarray[Any, Any]:
        shape = (batch, seq, 4) if batch_first else (seq, batch, 4)
        return np.random.default_rng(seq * 10 + batch).standard_normal(shape).astype(np.float32)

    data = _export(module, torch.from_numpy(feed(3, 2)), dynamic, outputs)
    _compare(data, [feed(6, 3), feed(2, 1)])


def test_stacked_bidirectional_lstm_into_gru_with_dynamic_batch() -> None:
    """Only the batch is dynamic, but the Reshape between the layers leaves the second
    layer's sequence length unknown: its Y must keep its rank for the Squeeze after it."""

    class Stacked(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True)
            self.gru = torch.nn.GRU(16, 5, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.gru(self.lstm(x)[0])[0]

    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 6)).astype(np.float32)
    data = _export(Stacked(), torch.from_numpy(x), {"x": {0: "batch"}, "y0": {0: "batch"}}, 1)
    _compare(data, [x, rng.standard_normal((3, 7, 6)).astype(np.float32)])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent_outputs_keep_their_static_shape(op: str, layout: int) -> None:
    """Y is [seq, num_directions, batch, hidden] (layout 1: [batch, seq, ...]) and the
    states [num_directions, batch, hidden] (layout 1: [batch, num_directions, hidden]),
    with what the import knows filled in, though seq and batch are dynamic."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    rng = np.random.default_rng(0)
    weights = {
        "W": rng.standard_normal((2, gates * 5, 4)).astype(np.float32),
        "R": rng.standard_normal((2, gates * 5, 5)).astype(np.float32),
    }
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(
        op, ["X", "W", "R"], outputs, direction="bidirectional", layout=layout, hidden_size=5
    )
    x_shape = ["b", "t", 4] if layout else ["t", "b", 4]
    proto = model(
        [node],
        {"X": (FLOAT, x_shape)},
        dict.fromkeys(outputs, (FLOAT, None)),
        initializers=weights,
    )
    _, _, found = ko.import_model(proto)
    y = [None, None, 2, 5] if layout else [None, 2, None, 5]
    state = [None, 2, 5] if layout else [2, None, 5]
    assert found["Y"].shape.as_list() == y
    for name in outputs[1:]:
        assert found[name].shape.as_list() == state


# -- ConvTranspose, DepthToSpace, GroupNormalization -----------------------------------------

_IMAGE_AXES = {0: "batch", 2: "height", 3: "width"}


def _images(channels: int, *sizes: tuple[int, int]) -> list[np.ndarray[Any, Any]]:
    """A batch of 1 and one of 3, of the spatial ``sizes`` (one per batch)."""
    rng = np.random.default_rng(channels)
    return [
        rng.standard_normal((batch, channels, *hw)).astype(np.float32)
        for batch, hw in zip((1, 3), sizes, strict=True)
    ]


@pytest.mark.parametrize(
    "config",
    [
        {"stride": 2, "padding": 1, "output_padding": 1},
        {"stride": 1, "padding": 0, "groups": 2},
        {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2)},
        {"stride": 2, "padding": 2, "dilation": 2, "groups": 4},
        {"stride": 3, "padding": 0, "output_padding": 2, "bias": False},
    ],
)
@pytest.mark.parametrize("spatial", ["static", "dynamic"])
def test_torch_conv_transpose2d_with_dynamic_batch(config: dict[str, Any], spatial: str) -> None:
    torch.manual_seed(0)
    config = {"kernel_size": 3, **config}
    module = torch.nn.ConvTranspose2d(4, 8, **config)
    axes = _IMAGE_AXES if spatial == "dynamic" else {0: "batch"}
    sizes = [(5, 6), (7, 4)] if spatial == "dynamic" else [(5, 6), (5, 6)]
    data = _export(module, torch.zeros(2, 4, 5, 6), {"x": axes, "y0": axes}, 1)
    _compare(data, _images(4, *sizes))


def test_torch_conv_transpose1d_with_dynamic_batch_and_length() -> None:
    torch.manual_seed(0)
    module = torch.nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1)
    axes = {0: "batch", 2: "length"}
    data = _export(module, torch.zeros(2, 4, 5), {"x": axes, "y0": axes}, 1)
    rng = np.random.default_rng(0)
    _compare(data, [rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 5), (3, 4, 8))])


@pytest.mark.parametrize(
    ("attrs", "oracle"),
    [
        ({"strides": [2, 2], "output_shape": [12, 13]}, "reference"),
        ({"strides": [2, 2], "output_shape": [9, 10], "auto_pad": "SAME_UPPER"}, "reference"),
        ({"strides": [2, 2], "output_shape": [10, 9], "auto_pad": "SAME_LOWER"}, "reference"),
        # Larger than the full transposed convolution (which onnxruntime and onnx's
        # reference refuse): zeros around it, as where the sizes are known.
        ({"strides": [2, 1], "output_shape": [16, 9]}, None),
        ({"strides": [2, 2], "auto_pad": "SAME_LOWER"}, "reference"),
        ({"strides": [1, 1], "auto_pad": "VALID", "group": 2}, "onnxruntime"),
    ],
)
def test_conv_transpose_output_shape_and_auto_pad_with_unknown_sizes(
    attrs: dict[str, Any], oracle: str | None
) -> None:
    """output_shape's pads depend on the input's sizes: computed at run time, the output
    cropped (or zero-padded) there, as the import does where the sizes are known."""
    rng = np.random.default_rng(3)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    weights = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)}
    proto, static = (
        model([node], {"x": (FLOAT, shape)}, {"y": (FLOAT, None)}, initializers=weights)
        for shape in (["N", 4, "H", "W"], [2, 4, 5, 6])
    )
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    got = ko.InferenceSession(proto).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ko.InferenceSession(static).run(None, {"x": x})[0])
    if oracle is not None:
        check_against_oracle(proto, {"x": x}, oracle=oracle, rtol=RTOL, atol=ATOL)


def test_conv_transpose_with_unknown_sizes_keeps_its_channels() -> None:
    """The output's channels are known at import (a later converter may need them)."""
    rng = np.random.default_rng(4)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], group=2)
    weights = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)}
    proto = model(
        [node], {"x": (FLOAT, ["N", 4, "H", 7])}, {"y": (FLOAT, None)}, initializers=weights
    )
    assert ko.import_model(proto).outputs["y"].shape.as_list() == [None, 6, None, 15]


class _PixelShuffle(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, unshuffle: bool) -> None:
        super().__init__()
        self.unshuffle = unshuffle

    def forward(self, x: Any) -> Any:
        functional = torch.nn.functional
        return (
            functional.pixel_unshuffle(x, 2) if self.unshuffle else functional.pixel_shuffle(x, 2)
        )


@pytest.mark.parametrize("unshuffle", [False, True])
@pytest.mark.parametrize("spatial", ["static", "dynamic"])
def test_torch_pixel_shuffle_with_dynamic_batch(unshuffle: bool, spatial: str) -> None:
    """pixel_shuffle exports DepthToSpace mode=CRD; pixel_unshuffle Reshape/Transpose."""
    axes = _IMAGE_AXES if spatial == "dynamic" else {0: "batch"}
    sizes = [(4, 6), (8, 2)] if spatial == "dynamic" else [(4, 6), (4, 6)]
    data = _export(_PixelShuffle(unshuffle), torch.zeros(2, 8, 4, 6), {"x": axes, "y0": axes}, 1)
    _compare(data, _images(8, *sizes))


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
def test_crd_rearrangement_with_unknown_sizes(op: str) -> None:
    """mode=CRD with every dimension unknown at import: DepthToSpace against onnxruntime
    (and the dimensions the import knows stay known); SpaceToDepth, which has no mode in
    ONNX but whose converter takes CRD too, as DepthToSpace's inverse."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 8, 4, 6)).astype(np.float32)
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")
    proto = model([node], {"x": (FLOAT, ["N", "C", "H", "W"])}, {"y": (FLOAT, None)})
    if op == "DepthToSpace":
        check_against_oracle(proto, {"x": x}, oracle="onnxruntime")
        known = model([node], {"x": (FLOAT, ["N", 8, "H", 6])}, {"y": (FLOAT, None)})
        assert ko.import_model(known).outputs["y"].shape.as_list() == [None, 2, None, 12]
        return
    packed = helper.make_node("SpaceToDepth", ["y"], ["z"], blocksize=2, mode="CRD")
    round_trip = model([node, packed], {"x": (FLOAT, ["N", "C", "H", "W"])}, {"z": (FLOAT, None)})
    np.testing.assert_array_equal(ko.InferenceSession(round_trip).run(None, {"x": x})[0], x)


@pytest.mark.parametrize("spatial", ["static", "dynamic"])
def test_torch_group_norm_with_dynamic_batch(spatial: str) -> None:
    """torch exports GroupNorm as Reshape, InstanceNormalization, Reshape (opsets 17 to
    21): GroupNormalization itself is checked on models built by hand, below."""
    torch.manual_seed(0)
    module = torch.nn.GroupNorm(2, 6)
    with torch.no_grad():
        module.weight.normal_()
        module.bias.normal_()
    axes = _IMAGE_AXES if spatial == "dynamic" else {0: "batch"}
    sizes = [(5, 4), (3, 7)] if spatial == "dynamic" else [(5, 4), (5, 4)]
    data = _export(module, torch.zeros(2, 6, 5, 4), {"x": axes, "y0": axes}, 1)
    _compare(data, _images(6, *sizes))


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize(
    "x_shape", [["N", 6, 5, 4], ["N", 6, "H", "W"], ["N", "C", "H", "W"], [3, 6, "H", 4]]
)
def test_group_normalization_with_unknown_sizes(opset: int, x_shape: list[Any]) -> None:
    """GroupNormalization-18 (per-group scale and bias) and -21 (per-channel)."""
    rng = np.random.default_rng(opset)
    affine = 3 if opset == 18 else 6
    weights = {
        "s": rng.standard_normal(affine).astype(np.float32),
        "b": rng.standard_normal(affine).astype(np.float32),
    }
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)
    proto = model(
        [node], {"x": (FLOAT, x_shape)}, {"y": (FLOAT, None)}, initializers=weights, opset=opset
    )
    session = ko.InferenceSession(proto)
    for batch, hw in ((1, (5, 4)), (3, (5, 4))):
        x = rng.standard_normal((batch, 6, *hw)).astype(np.float32)
        if isinstance(x_shape[0], int):
            x = np.concatenate([x] * 3)[:3]
        want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=RTOL, atol=ATOL)
    assert ko.import_model(proto).outputs["y"].shape.as_list()[1:] == [
        None if x_shape[1] == "C" and opset == 18 else 6,
        None if isinstance(x_shape[2], str) else 5,
        None if isinstance(x_shape[3], str) else 4,
    ]


@pytest.mark.parametrize("attrs", [{"pads": [1, 2]}, {"output_shape": [12]}])
@pytest.mark.parametrize("length", [6, "L"])
def test_conv_transpose1d_pads_and_output_shape(attrs: dict[str, Any], length: Any) -> None:
    """A 1-D ConvTranspose's pads and output_shape list its one spatial axis."""
    rng = np.random.default_rng(6)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2], **attrs)
    weights = {"w": rng.standard_normal((4, 3, 3)).astype(np.float32)}
    proto = model(
        [node], {"x": (FLOAT, ["N", 4, length])}, {"y": (FLOAT, None)}, initializers=weights
    )
    x = rng.standard_normal((2, 4, 6)).astype(np.float32)
    check_against_oracle(proto, {"x": x}, oracle="onnxruntime", rtol=RTOL, atol=ATOL)


# -- what is refused ------------------------------------------------------------------------


def _import_fails(proto: onnx.ModelProto, match: str) -> None:
    with pytest.raises(ko.OnnxImportError, match=match):
        ko.import_model(proto)


def test_recurrent_hidden_size_that_contradicts_the_weights() -> None:
    rng = np.random.default_rng(7)
    weights = {
        "W": rng.standard_normal((1, 15, 4)).astype(np.float32),
        "R": rng.standard_normal((1, 15, 5)).astype(np.float32),
    }
    node = helper.make_node("GRU", ["X", "W", "R"], ["Y"], name="gru", hidden_size=6)
    proto = model([node], {"X": (FLOAT, ["t", "b", 4])}, {"Y": (FLOAT, None)}, initializers=weights)
    _import_fails(
        proto,
        r"'gru' \(GRU, opset 17\).*hidden_size=6, W's shape \(1, 15, 4\) and R's shape "
        r"\(1, 15, 5\) do not agree \(GRU has 3 gate\(s\)",
    )


@pytest.mark.parametrize(
    ("x_shape", "w_given", "attrs", "match"),
    [
        (["N", 4, 5, 5], False, {}, r"the weight's shape must be known at import time, got"),
        (["N", 5, 5, 5], True, {}, r"the input has 5 channels, but the weight \(shape \[4, 3, "),
        (["N", 4, 5, 5], True, {"group": 3}, r"group=3 does not divide the 4 input channels"),
        (["N", 4, "H", 5], True, {"pads": [1, 1, 1]}, r"pads has 3 values; 4 expected"),
    ],
)
def test_conv_transpose_refusals(
    x_shape: list[Any], w_given: bool, attrs: dict[str, Any], match: str
) -> None:
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="deconv", **attrs)
    weights = {"w": np.zeros((4, 3, 3, 3), np.float32)} if w_given else {}
    inputs: dict[str, Any] = {"x": (FLOAT, x_shape)}
    if not w_given:
        inputs["w"] = (FLOAT, None)
    proto = model([node], inputs, {"y": (FLOAT, None)}, initializers=weights)
    _import_fails(proto, r"'deconv' \(ConvTranspose, opset 17\).*" + match)


@pytest.mark.parametrize(
    ("op", "x_shape", "match"),
    [
        (
            "DepthToSpace",
            ["N", 6, "H", "W"],
            r"the input's 6 channels are not a multiple of 2\*\*2",
        ),
        ("SpaceToDepth", ["N", "C", 5, 4], r"the input's height 5 is not a multiple of 2"),
        ("SpaceToDepth", ["N", "C", 4, 3], r"the input's width 3 is not a multiple of 2"),
    ],
)
def test_crd_refusals(op: str, x_shape: list[Any], match: str) -> None:
    node = helper.make_node(op, ["x"], ["y"], name="crd", blocksize=2, mode="CRD")
    proto = model([node], {"x": (FLOAT, x_shape)}, {"y": (FLOAT, None)})
    _import_fails(proto, rf"'crd' \({op}, opset 17\).*" + match)


@pytest.mark.parametrize(
    ("x_shape", "match"),
    [
        (["N", 6, "H"], r"num_groups=4 does not divide the input's 6 channels"),
        ([6], r"input X must have a channel axis \(rank 2 or more\), not rank 1"),
    ],
)
def test_group_normalization_refusals(x_shape: list[Any], match: str) -> None:
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn", num_groups=4)
    weights = {"s": np.ones(4, np.float32), "b": np.zeros(4, np.float32)}
    proto = model(
        [node], {"x": (FLOAT, x_shape)}, {"y": (FLOAT, None)}, initializers=weights, opset=21
    )
    _import_fails(proto, r"'gn' \(GroupNormalization, opset 21\).*" + match)
