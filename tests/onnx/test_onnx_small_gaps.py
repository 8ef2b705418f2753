"""TensorScatter, Squeeze without axes of a run-time batch, and Resize with antialias:
checked against onnx's reference evaluator (onnxruntime where the two disagree and the
converter follows ONNX's specification), with sizes known at import and at run time, and
the errors for what is refused, which must name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko

# -- TensorScatter -------------------------------------------------------------------------


def _scatter(
    cache: list[int],
    update: list[int],
    *,
    mode: str | None = None,
    axis: int | None = None,
    indices: bool = True,
    known: bool = True,
    dtype: int = FLOAT,
) -> Any:
    attrs: dict[str, Any] = {}
    if mode is not None:
        attrs["mode"] = mode
    if axis is not None:
        attrs["axis"] = axis
    names = ["past", "update"] + (["write"] if indices else [])
    node = helper.make_node("TensorScatter", names, ["present"], name="ts", **attrs)

    def dims(shape: list[int]) -> list[int | None]:
        return list(shape) if known else [None] * len(shape)

    inputs: dict[str, Any] = {"past": (dtype, dims(cache)), "update": (dtype, dims(update))}
    if indices:
        inputs["write"] = (INT64, [cache[0]] if known else [None])
    return model([node], inputs, {"present": (dtype, None)}, opset=24)


SCATTER_CASES = [
    # (cache, update, mode, axis, write indices)
    ([3, 6, 4], [3, 2, 4], None, None, [0, 3, 4]),  # axis -2 of a 3-D cache
    ([2, 3, 5, 2], [2, 3, 3, 2], "linear", 2, [1, 2]),
    ([2, 5, 3], [2, 2, 3], "linear", 1, [3, 0]),
    ([2, 3, 4], [2, 3, 1], "linear", -1, [3, 1]),  # the last axis
    ([2, 6, 3], [2, 4, 3], "circular", -2, [4, 5]),  # wraps round the end
    ([3, 2, 5, 2], [3, 2, 5, 2], "circular", 2, [2, 7, 0]),  # the whole cache, index > M
    ([2, 4, 3], [2, 0, 3], "circular", 1, [1, 2]),  # an empty update
    ([2, 4, 3], [2, 0, 3], "linear", 1, [1, 2]),
]


@pytest.mark.parametrize("known", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize(("cache", "update", "mode", "axis", "write"), SCATTER_CASES)
def test_tensor_scatter(
    cache: list[int],
    update: list[int],
    mode: str | None,
    axis: int | None,
    write: list[int],
    known: bool,
) -> None:
    rng = np.random.default_rng(0)
    feeds = {
        "past": rng.random(cache, dtype=np.float32),
        "update": rng.random(update, dtype=np.float32),
        "write": np.asarray(write, np.int64),
    }
    check_against_oracle(_scatter(cache, update, mode=mode, axis=axis, known=known), feeds)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_without_write_indices_writes_from_the_start(mode: str) -> None:
    rng = np.random.default_rng(1)
    feeds = {
        "past": rng.integers(-9, 9, (2, 3, 5, 2)).astype(np.int32),
        "update": rng.integers(-9, 9, (2, 3, 2, 2)).astype(np.int32),
    }
    proto = _scatter([2, 3, 5, 2], [2, 3, 2, 2], mode=mode, indices=False, dtype=TensorProto.INT32)
    check_against_oracle(proto, feeds)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "ring"}, "mode='ring' is not supported"),
        ({"axis": 0}, "axis 0 is the batch axis"),
        ({"axis": 3}, "axis 3 is out of range for rank 3"),
    ],
)
def test_tensor_scatter_errors_name_the_node(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ko.OnnxImportError, match=rf"'ts' \(TensorScatter, opset 24\).*{message}"):
        ko.import_model(_scatter([2, 4, 3], [2, 1, 3], **kwargs))


def test_tensor_scatter_refuses_an_update_of_another_rank() -> None:
    with pytest.raises(ko.OnnxImportError, match=r"'ts' \(TensorScatter, opset 24\).*rank 2"):
        ko.import_model(_scatter([2, 4, 3], [2, 3]))


# -- Squeeze without axes ------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize(
    ("known", "shape"),
    [
        ([1, 3, 1, 2], (1, 3, 1, 2)),  # every dimension known
        ([None, 3], (4, 3)),  # nothing to squeeze
        (None, (1, 3, 1)),  # the rank unknown: squeezed when it runs
    ],
)
def test_squeeze_without_axes(
    known: list[int | None] | None, shape: tuple[int, ...], opset: int
) -> None:
    node = helper.make_node("Squeeze", ["x"], ["y"], name="sq")
    proto = model([node], {"x": (FLOAT, known)}, {"y": (FLOAT, None)}, opset=opset)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    check_against_oracle(proto, {"x": x})


@pytest.mark.parametrize("batch", [1, 4])
def test_squeeze_without_axes_of_a_run_time_batch_drops_a_batch_of_one(batch: int) -> None:
    """A [?, 1] output squeezed without axes (a classifier's score column): with a batch
    of 1 at run time ONNX drops the batch too, so the result's rank is known only then."""
    node = helper.make_node("Squeeze", ["x"], ["y"], name="sq")
    proto = model([node], {"x": (FLOAT, [None, 1])}, {"y": (FLOAT, None)}, opset=13)
    x = np.arange(batch, dtype=np.float32).reshape(batch, 1)
    got = ko.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    assert np.shape(got) == np.squeeze(x).shape
    check_against_oracle(proto, {"x": x})


# -- Resize with antialias -----------------------------------------------------------------


def _resize(
    shape: list[int],
    known: list[int | None],
    *,
    scales: list[float] | None = None,
    sizes: list[int] | None = None,
    static: bool = True,
    roi: list[float] | None = None,
    dtype: int = FLOAT,
    **attrs: Any,
) -> tuple[Any, dict[str, Any]]:
    """A Resize model with antialias=1 and its feeds (x random of ``shape``)."""
    by_scales = scales is not None
    values = np.asarray(scales if by_scales else sizes, np.float32 if by_scales else np.int64)
    names = ["x", "roi" if roi is not None else "", "s" if by_scales else "", ""]
    if not by_scales:
        names[3] = "s"
    node = helper.make_node("Resize", names, ["y"], name="rs", antialias=1, **attrs)
    rng = np.random.default_rng(3)
    x = rng.random(shape, dtype=np.float32)
    if dtype == TensorProto.UINT8:
        x = (x * 255).astype(np.uint8)
    inputs: dict[str, Any] = {"x": (dtype, known)}
    feeds: dict[str, Any] = {"x": x}
    inits: dict[str, Any] = {}
    if roi is not None:
        inits["roi"] = np.asarray(roi, np.float32)
    if static:
        inits["s"] = values
    else:
        inputs["s"] = (FLOAT if by_scales else INT64, [len(values)])
        feeds["s"] = values
    return model([node], inputs, {"y": (dtype, None)}, initializers=inits, opset=19), feeds


TRANSFORMS = ["half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
SHAPE = [1, 2, 9, 7]


@pytest.mark.parametrize("exclude", [0, 1])
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(
    "spec",
    [{"scales": [1, 1, 0.6, 0.3]}, {"sizes": [1, 2, 4, 3]}, {"scales": [1, 1, 0.5, 1.6]}],
    ids=["scales", "sizes", "down-and-up"],
)
def test_resize_antialias_with_sizes_known_at_import(
    spec: dict[str, Any], mode: str, transform: str, exclude: int
) -> None:
    proto, feeds = _resize(
        SHAPE,
        SHAPE,
        mode=mode,
        coordinate_transformation_mode=transform,
        exclude_outside=exclude,
        **spec,
    )
    check_against_oracle(proto, feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_crop_and_resize(mode: str, static: bool) -> None:
    proto, feeds = _resize(
        SHAPE,
        SHAPE,
        scales=[1, 1, 0.5, 0.4],
        static=static,
        roi=[0, 0, 0.1, -0.2, 1, 1, 0.8, 1.1],
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-3.0,
    )
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [
        {"mode": "cubic", "cubic_coeff_a": -0.5},
        {"mode": "linear", "axes": [2, 3]},
        {"mode": "cubic", "axes": [3]},  # onnx's reference takes no negative axis
        {"mode": "linear", "keep_aspect_ratio_policy": "not_larger"},
        {"mode": "cubic", "keep_aspect_ratio_policy": "not_smaller"},
    ],
    ids=["coeff_a", "axes", "one_axis", "not_larger", "not_smaller"],
)
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_resize_antialias_attributes(attrs: dict[str, Any], static: bool) -> None:
    axes = attrs.get("axes")
    if "keep_aspect_ratio_policy" in attrs:
        spec: dict[str, Any] = {"sizes": [5, 2], "axes": [2, 3]}
    elif axes is not None:
        spec = {"scales": [0.6, 0.45][-len(axes) :]}
    else:
        spec = {"scales": [1, 1, 0.7, 0.4]}
    attrs = {**attrs, **({"axes": spec.pop("axes")} if "axes" in spec else {})}
    proto, feeds = _resize(SHAPE, SHAPE, static=static, **spec, **attrs)
    tolerance = 1e-6 if static else 1e-5
    check_against_oracle(proto, feeds, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_resize_antialias_of_integers_rounds_and_saturates(mode: str, static: bool) -> None:
    proto, feeds = _resize(
        SHAPE, SHAPE, scales=[1, 1, 0.4, 0.6], static=static, mode=mode, dtype=TensorProto.UINT8
    )
    check_against_oracle(proto, feeds, rtol=0, atol=0 if static else 1)


@pytest.mark.parametrize("transform", ["half_pixel", "asymmetric", "pytorch_half_pixel"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(
    "known", [[1, 2, 9, 7], [None, 2, None, None]], ids=["known-dims", "unknown-dims"]
)
def test_resize_antialias_with_sizes_known_at_run_time(
    known: list[int | None], mode: str, transform: str
) -> None:
    """Run-time scales or sizes (or input dims): weights built in float32 by kernloom ops."""
    for spec in ({"scales": [1, 1, 0.6, 0.3]}, {"sizes": [1, 2, 5, 2]}):
        proto, feeds = _resize(
            SHAPE, known, static=False, mode=mode, coordinate_transformation_mode=transform, **spec
        )
        check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_pytorch_half_pixel_to_one_output_follows_the_spec(
    mode: str, static: bool
) -> None:
    """One output sits at source coordinate 0 (ONNX's spec, onnxruntime); onnx's reference
    puts it at -0.5."""
    proto, feeds = _resize(
        SHAPE,
        SHAPE,
        sizes=[1, 2, 4, 1],
        static=static,
        mode=mode,
        coordinate_transformation_mode="pytorch_half_pixel",
    )
    check_against_oracle(proto, feeds, oracle="onnxruntime", rtol=1e-5, atol=1e-5)


def test_resize_antialias_with_nearest_is_refused_naming_the_node() -> None:
    """As onnx's reference and onnxruntime: antialias widens linear and cubic filters only."""
    proto, _ = _resize(SHAPE, SHAPE, scales=[1, 1, 0.5, 0.4], mode="nearest")
    with pytest.raises(ko.OnnxImportError, match=r"'rs' \(Resize, opset 19\).*set antialias=0"):
        ko.import_model(proto)


def test_resize_antialias_refuses_an_input_of_unknown_rank() -> None:
    proto, _ = _resize(SHAPE, None, scales=[1, 1, 0.5, 0.5], mode="linear")  # type: ignore[arg-type]
    with pytest.raises(
        ko.OnnxImportError, match=r"'rs' \(Resize, opset 19\).*rank of the input must be known"
    ):
        ko.import_model(proto)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_of_an_input_of_unknown_size_with_known_scales(mode: str) -> None:
    """The scales are constants but the input's sizes are not: weights built at run time."""
    proto, feeds = _resize(SHAPE, [None, None, None, None], scales=[1, 1, 0.6, 0.3], mode=mode)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)
