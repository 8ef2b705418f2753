"""GridSample, AffineGrid, RoiAlign and Col2Im: converters composed of kernloom ops, checked
against onnx's reference evaluator (onnxruntime where the evaluator cannot run the model),
with sizes known at import and only at run time, and their import errors, which must name
the node."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko

DOUBLE, INT32 = TensorProto.DOUBLE, TensorProto.INT32

# -- GridSample ----------------------------------------------------------------------------


def _grid_sample(
    x_known: list[int | None],
    grid_known: list[int | None],
    opset: int = 20,
    elem: int = FLOAT,
    **attrs: Any,
) -> Any:
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs", **attrs)
    inputs: dict[str, Any] = {"x": (elem, x_known), "grid": (FLOAT, grid_known)}
    return model([node], inputs, {"y": (elem, None)}, opset=opset)


def _grid(shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """Normalized coordinates, some beyond [-1, 1] so that every padding mode matters."""
    return np.random.default_rng(seed).uniform(-1.7, 1.7, shape).astype(np.float32)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_4d(mode: str, padding_mode: str, align_corners: int) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    grid = _grid((2, 3, 6, 2))
    proto = _grid_sample(
        [2, 3, 4, 5],
        [2, 3, 6, 2],
        mode=mode,
        padding_mode=padding_mode,
        align_corners=align_corners,
    )
    check_against_oracle(proto, {"x": x, "grid": grid}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize(
    ("mode", "renamed"), [("bilinear", "linear"), ("nearest", "nearest"), ("bicubic", "cubic")]
)
def test_grid_sample_opset_16_names(mode: str, renamed: str, padding_mode: str) -> None:
    # onnx's reference evaluator knows only opset 20's mode names: it runs the same model
    # at opset 20 with the modes renamed.
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 4)).astype(np.float32)
    grid = _grid((1, 4, 3, 2), seed=3)
    feeds = {"x": x, "grid": grid}
    known: tuple[list[int | None], list[int | None]] = ([1, 2, 5, 4], [1, 4, 3, 2])
    ours = ko.InferenceSession(
        _grid_sample(*known, opset=16, mode=mode, padding_mode=padding_mode).SerializeToString()
    ).run(None, feeds)
    oracle = _grid_sample(*known, opset=20, mode=renamed, padding_mode=padding_mode)
    expected = ReferenceEvaluator(oracle).run(None, feeds)
    assert ours[0].dtype == expected[0].dtype and ours[0].shape == expected[0].shape
    np.testing.assert_allclose(ours[0], expected[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_opset_16_agrees_with_onnxruntime(mode: str, padding_mode: str) -> None:
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 4)).astype(np.float32)
    grid = _grid((1, 4, 3, 2), seed=3)
    proto = _grid_sample([1, 2, 5, 4], [1, 4, 3, 2], opset=16, mode=mode, padding_mode=padding_mode)
    check_against_oracle(proto, {"x": x, "grid": grid}, oracle="onnxruntime", rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_volumetric(mode: str, padding_mode: str, align_corners: int) -> None:
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 4, 3)).astype(np.float32)
    grid = _grid((1, 2, 3, 2, 3), seed=5)
    proto = _grid_sample(
        [1, 2, 3, 4, 3],
        [1, 2, 3, 2, 3],
        mode=mode,
        padding_mode=padding_mode,
        align_corners=align_corners,
    )
    check_against_oracle(proto, {"x": x, "grid": grid}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_grid_sample_one_spatial_axis(mode: str) -> None:
    x = np.random.default_rng(6).standard_normal((2, 2, 7)).astype(np.float32)
    grid = _grid((2, 5, 1), seed=7)
    proto = _grid_sample([2, 2, 7], [2, 5, 1], mode=mode, padding_mode="reflection")
    check_against_oracle(proto, {"x": x, "grid": grid}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_sizes_known_only_at_run_time(mode: str) -> None:
    x = np.random.default_rng(8).standard_normal((2, 3, 6, 4)).astype(np.float32)
    grid = _grid((2, 2, 5, 2), seed=9)
    proto = _grid_sample(
        [None, None, None, None], [None, None, None, 2], mode=mode, padding_mode="border"
    )
    check_against_oracle(proto, {"x": x, "grid": grid}, rtol=1e-5, atol=1e-5)


def test_grid_sample_float64() -> None:
    x = np.random.default_rng(10).standard_normal((1, 2, 4, 4))
    grid = _grid((1, 3, 3, 2), seed=11)
    proto = _grid_sample([1, 2, 4, 4], [1, 3, 3, 2], elem=DOUBLE, mode="cubic")
    check_against_oracle(proto, {"x": x, "grid": grid}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_nearest_gathers_ints(padding_mode: str) -> None:
    x = np.arange(2 * 3 * 4, dtype=np.int32).reshape(1, 2, 3, 4)
    grid = _grid((1, 4, 4, 2), seed=12)
    proto = _grid_sample(
        [1, 2, 3, 4], [1, 4, 4, 2], elem=INT32, mode="nearest", padding_mode=padding_mode
    )
    check_against_oracle(proto, {"x": x, "grid": grid})


@pytest.mark.parametrize(
    ("x_known", "grid_known", "opset", "attrs", "message"),
    [
        ([1, 1, 4, 4], [1, 2, 2, 2], 16, {"mode": "linear"}, "mode='linear' is not supported"),
        ([1, 1, 4, 4], [1, 2, 2, 2], 20, {"mode": "bilinear"}, "mode='bilinear' is not"),
        ([1, 1, 4, 4], [1, 2, 2, 2], 20, {"padding_mode": "wrap"}, "padding_mode='wrap'"),
        ([1, 1, 4, 4], [1, 2, 2, 2, 2], 20, {}, "grid must have the rank of X"),
        ([1, 4], [1, 2], 20, {}, "X must have rank 3 or more"),
    ],
)
def test_grid_sample_errors_name_the_node(
    x_known: list[int], grid_known: list[int], opset: int, attrs: dict[str, Any], message: str
) -> None:
    proto = _grid_sample(x_known, grid_known, opset=opset, **attrs)  # type: ignore[arg-type]
    with pytest.raises(ko.OnnxImportError, match=rf"'gs' \(GridSample, opset {opset}\).*{message}"):
        ko.import_model(proto)


def test_grid_sample_linear_needs_a_float_input() -> None:
    proto = _grid_sample([1, 1, 4, 4], [1, 2, 2, 2], elem=INT32, mode="linear")
    with pytest.raises(ko.OnnxImportError, match=r"'gs' \(GridSample, opset 20\).*float input X"):
        ko.import_model(proto)


# -- AffineGrid ----------------------------------------------------------------------------


def _affine_grid(spatial: int, static: bool, size: list[int], **attrs: int) -> Any:
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="ag", **attrs)
    inputs: dict[str, Any] = {"theta": (FLOAT, [None, spatial, spatial + 1])}
    inits = {"size": np.asarray(size, np.int64)} if static else None
    if not static:
        inputs["size"] = (INT64, [len(size)])
    return model([node], inputs, {"grid": (FLOAT, None)}, initializers=inits, opset=20)


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 2]], ids=str)
def test_affine_grid(size: list[int], align_corners: int, static: bool) -> None:
    spatial = len(size) - 2
    theta = np.random.default_rng(13).standard_normal((2, spatial, spatial + 1))
    feeds: dict[str, Any] = {"theta": theta.astype(np.float32)}
    if not static:
        feeds["size"] = np.asarray(size, np.int64)
    proto = _affine_grid(spatial, static, size, align_corners=align_corners)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 1, 1, 3], [2, 2, 1, 5, 1]], ids=str)
def test_affine_grid_with_one_point_on_an_axis(size: list[int], align_corners: int) -> None:
    # onnx's reference divides by zero there and onnxruntime puts the point at 1: PyTorch's
    # affine_grid, where the op comes from, is the reference (0).
    torch = pytest.importorskip("torch")
    spatial = len(size) - 2
    theta = np.random.default_rng(14).standard_normal((2, spatial, spatial + 1))
    theta = theta.astype(np.float32)
    proto = _affine_grid(spatial, True, size, align_corners=align_corners)
    ours = ko.InferenceSession(proto.SerializeToString()).run(None, {"theta": theta})[0]
    with warnings.catch_warnings():
        # PyTorch warns that its one-point grid changed in 1.3: that is the grid compared.
        warnings.filterwarnings("ignore", "Since version 1.3.0, affine_grid", UserWarning)
        want = torch.nn.functional.affine_grid(
            torch.from_numpy(theta), size, align_corners=bool(align_corners)
        ).numpy()
    assert ours.dtype == want.dtype and ours.shape == want.shape
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_affine_grid_needs_the_length_of_size() -> None:
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="ag")
    proto = model(
        [node],
        {"theta": (FLOAT, [1, 2, 3]), "size": (INT64, [None])},
        {"grid": (FLOAT, None)},
        opset=20,
    )
    with pytest.raises(
        ko.OnnxImportError, match=r"'ag' \(AffineGrid, opset 20\).*size must be a vector of 4"
    ):
        ko.import_model(proto)


# -- RoiAlign ------------------------------------------------------------------------------

ROIS = np.asarray(
    [
        [0.0, 0.0, 5.0, 4.0],
        [1.3, 2.2, 7.9, 9.6],
        [-2.0, 3.0, 3.0, 12.0],  # partly outside the image
        [4.0, 4.0, 4.0, 6.5],  # no width
        [6.1, 0.5, 8.2, 1.0],
    ],
    np.float32,
)
BATCH = np.asarray([0, 1, 1, 0, 1], np.int64)


def _roi_align(known: list[int | None], opset: int, **attrs: Any) -> Any:
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], name="roi", **attrs)
    inputs: dict[str, Any] = {
        "x": (FLOAT, known),
        "rois": (FLOAT, [None, 4]),
        "batch": (INT64, [None]),
    }
    return model([node], inputs, {"y": (FLOAT, None)}, opset=opset)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align(mode: str, transform: str, sampling_ratio: int) -> None:
    x = np.random.default_rng(14).standard_normal((2, 3, 8, 10)).astype(np.float32)
    proto = _roi_align(
        [2, 3, 8, 10],
        16,
        mode=mode,
        coordinate_transformation_mode=transform,
        sampling_ratio=sampling_ratio,
        output_height=3,
        output_width=2,
        spatial_scale=0.8,
    )
    check_against_oracle(proto, {"x": x, "rois": ROIS, "batch": BATCH}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_opset_10_and_unknown_sizes(mode: str) -> None:
    x = np.random.default_rng(15).standard_normal((2, 2, 9, 7)).astype(np.float32)
    proto = _roi_align([None, None, None, None], 10, mode=mode, output_height=2, output_width=4)
    # onnx's reference evaluator samples opset 10 as half_pixel, which came with opset 16;
    # opset 10 is output_half_pixel, as onnxruntime has it.
    check_against_oracle(
        proto,
        {"x": x, "rois": ROIS, "batch": BATCH},
        oracle="onnxruntime",
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"mode": "min"}, "mode='min' is not supported"),
        ({"coordinate_transformation_mode": "align_corners"}, "coordinate_transformation_mode"),
        ({"sampling_ratio": -1}, "sampling_ratio must be 0"),
        ({"output_height": 0}, "output_height and output_width must be positive"),
    ],
)
def test_roi_align_errors_name_the_node(attrs: dict[str, Any], message: str) -> None:
    proto = _roi_align([1, 1, 4, 4], 16, **attrs)
    with pytest.raises(ko.OnnxImportError, match=rf"'roi' \(RoiAlign, opset 16\).*{message}"):
        ko.import_model(proto)


# -- Col2Im --------------------------------------------------------------------------------


def _col2im(
    known: list[int | None], image: list[int], block: list[int], static: bool, **attrs: Any
) -> Any:
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="c2i", **attrs)
    inputs: dict[str, Any] = {"x": (FLOAT, known)}
    shapes = {"image": np.asarray(image, np.int64), "block": np.asarray(block, np.int64)}
    if not static:
        inputs |= {"image": (INT64, [len(image)]), "block": (INT64, [len(block)])}
    inits = shapes if static else None
    return model([node], inputs, {"y": (FLOAT, None)}, initializers=inits, opset=18)


def _blocks(image: list[int], block: list[int], attrs: dict[str, Any]) -> int:
    k = len(image)
    dil, strides = attrs.get("dilations", [1] * k), attrs.get("strides", [1] * k)
    pads = attrs.get("pads", [0] * 2 * k)
    count = 1
    for i in range(k):
        span = dil[i] * (block[i] - 1) + 1
        count *= (image[i] + pads[i] + pads[i + k] - span) // strides[i] + 1
    return count


COL2IM_CASES = [
    ([5, 5], [2, 2], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ([4, 3, 5], [2, 1, 3], {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 2]}),
    ([9], [3], {"dilations": [2], "strides": [2]}),
]


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize(("image", "block", "attrs"), COL2IM_CASES)
def test_col2im(image: list[int], block: list[int], attrs: dict[str, Any], static: bool) -> None:
    blocks = _blocks(image, block, attrs)
    x = np.random.default_rng(16).standard_normal((2, 3 * int(np.prod(block)), blocks))
    x = x.astype(np.float32)
    known: list[int | None] = list(x.shape) if static else [None, None, None]
    proto = _col2im(known, image, block, static, **attrs)
    feeds: dict[str, Any] = {"x": x}
    if not static:
        feeds |= {"image": np.asarray(image, np.int64), "block": np.asarray(block, np.int64)}
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("known", "image", "block", "attrs", "message"),
    [
        ([1, 4, 15], [5, 5], [2, 2], {}, "dimension 2 the number of blocks, 16"),
        ([1, 6, 16], [5, 5], [2, 2], {}, "multiple of prod\\(block_shape\\) = 4"),
        ([1, 4, 1], [2, 2], [3, 3], {}, "the blocks do not fit the image along axis 0"),
        ([1, 4, 1], [2, 2], [2, 2], {"strides": [1]}, "dilations and strides need 2 values"),
        ([1, 4, 1], [2, 2], [2, 2, 1], {}, "image_shape and block_shape must be vectors"),
        ([1, 4], [2, 2], [2, 2], {}, "input must have rank 3"),
    ],
)
def test_col2im_errors_name_the_node(
    known: list[int], image: list[int], block: list[int], attrs: dict[str, Any], message: str
) -> None:
    proto = _col2im(list(known), image, block, True, **attrs)
    with pytest.raises(ko.OnnxImportError, match=rf"'c2i' \(Col2Im, opset 18\).*{message}"):
        ko.import_model(proto)
