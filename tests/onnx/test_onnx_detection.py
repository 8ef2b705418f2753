"""NonMaxSuppression, MaxPool's Indices, MaxUnpool, the ScatterND / ScatterElements
reductions max, min and mul, and GatherND with batch_dims: checked against onnx's reference
evaluator (onnxruntime where the evaluator cannot run the case) with sizes known at import
and only at run time, attribute variants and opsets, and their import errors, which must
name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko

RNG = np.random.default_rng(5)
INT32 = TensorProto.INT32


# -- NonMaxSuppression ---------------------------------------------------------------------


def _nms(
    known_boxes: list[int | None],
    known_scores: list[int | None],
    *,
    present: tuple[bool, bool, bool] = (True, True, True),
    center: int | None = None,
    opset: int = 11,
) -> Any:
    names = ["boxes", "scores"] + [
        name if here else "" for name, here in zip(("most", "iou", "floor"), present, strict=True)
    ]
    while names[-1] == "":
        names.pop()
    attrs = {} if center is None else {"center_point_box": center}
    node = helper.make_node("NonMaxSuppression", names, ["selected"], name="nms", **attrs)
    inputs: dict[str, Any] = {"boxes": (FLOAT, known_boxes), "scores": (FLOAT, known_scores)}
    inputs.update({"most": (INT64, [1]), "iou": (FLOAT, [1]), "floor": (FLOAT, [1])})
    inputs = {k: v for k, v in inputs.items() if k in names}
    return model([node], inputs, {"selected": (INT64, [None, 3])}, opset=opset)


def _detections(batches: int, classes: int, boxes: int, center: bool = False) -> dict[str, Any]:
    """Boxes that overlap often, some with flipped corners, and scores with ties."""
    middle = RNG.uniform(0, 3, (batches, boxes, 2))
    size = RNG.uniform(0.5, 2, (batches, boxes, 2))
    if center:
        corners = np.concatenate([middle[..., ::-1], size[..., ::-1]], axis=-1)  # x, y, w, h
    else:
        corners = np.concatenate([middle - size / 2, middle + size / 2], axis=-1)
        flip = RNG.random((batches, boxes)) < 0.3
        corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    scores = np.round(RNG.uniform(0, 1, (batches, classes, boxes)), 1)
    return {"boxes": corners.astype(np.float32), "scores": scores.astype(np.float32)}


NMS_SETTINGS = [(3, 0.5, 0.0), (10, 0.3, 0.45), (1, 0.0, -1.0), (0, 0.5, 0.0), (-2, 0.5, 0.0)]
NMS_SETTINGS += [(20, 1.5, 0.0), (20, -0.5, 0.2)]  # thresholds outside [0, 1]


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize(("most", "iou", "floor"), NMS_SETTINGS)
def test_non_max_suppression(most: int, iou: float, floor: float, static: bool) -> None:
    feeds = _detections(2, 3, 12)
    feeds.update(
        most=np.array([most], np.int64),
        iou=np.array([iou], np.float32),
        floor=np.array([floor], np.float32),
    )
    boxes, scores = ([2, 12, 4], [2, 3, 12]) if static else ([None, None, 4], [None, None, None])
    # onnx's reference evaluator fails on a negative count (it takes the size of an int).
    oracle = "onnxruntime" if most < 0 else "reference"
    check_against_oracle(_nms(boxes, scores), feeds, oracle=oracle)


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_non_max_suppression_with_centre_boxes(static: bool) -> None:
    feeds = _detections(2, 2, 10, center=True)
    feeds.update(
        most=np.array([4], np.int64),
        iou=np.array([0.4], np.float32),
        floor=np.array([0.1], np.float32),
    )
    boxes, scores = ([2, 10, 4], [2, 2, 10]) if static else ([None, None, 4], [None, None, None])
    check_against_oracle(_nms(boxes, scores, center=1), feeds)


@pytest.mark.parametrize(
    "present",
    [(True, False, False), (True, True, False), (True, False, True), (False, False, False)],
    ids=["no-thresholds", "no-score-threshold", "no-iou-threshold", "nothing"],
)
def test_non_max_suppression_absent_inputs(present: tuple[bool, bool, bool]) -> None:
    feeds = _detections(1, 2, 9)
    values = {"most": np.array([5], np.int64), "iou": np.array([0.5], np.float32)}
    values["floor"] = np.array([0.3], np.float32)
    feeds.update({k: v for (k, v), here in zip(values.items(), present, strict=True) if here})
    # onnx's reference evaluator fails on absent inputs: onnxruntime decides.
    check_against_oracle(_nms([1, 9, 4], [1, 2, 9], present=present), feeds, oracle="onnxruntime")


def test_non_max_suppression_many_selections_loop() -> None:
    # 9 batches x 8 classes: more selections than are unrolled, though both are known.
    feeds = _detections(9, 8, 6)
    feeds.update(
        most=np.array([2], np.int64),
        iou=np.array([0.5], np.float32),
        floor=np.array([0.0], np.float32),
    )
    check_against_oracle(_nms([9, 6, 4], [9, 8, 6]), feeds)


def test_non_max_suppression_empty_batch() -> None:
    feeds = {
        "boxes": np.zeros((0, 4, 4), np.float32),
        "scores": np.zeros((0, 2, 4), np.float32),
        "most": np.array([3], np.int64),
        "iou": np.array([0.5], np.float32),
        "floor": np.array([0.0], np.float32),
    }
    for known in ([0, 4, 4], [None, None, 4]):
        out = ko.InferenceSession(_nms(known, [None, None, None]).SerializeToString()).run(
            None, feeds
        )
        assert out[0].shape == (0, 3) and out[0].dtype == np.int64


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: _nms([2, 5, 4], [2, 1, 5], center=2), "center_point_box=2 must be 0 or 1"),
        (lambda: _nms([2, 5, 4], [3, 1, 5]), r"boxes \[2, 5, 4\] and scores \[3, 1, 5\]"),
        (lambda: _nms([2, 5], [2, 1, 5]), "boxes must be 3-D"),
    ],
)
def test_non_max_suppression_errors_name_the_node(build: Any, message: str) -> None:
    with pytest.raises(
        ko.OnnxImportError, match=rf"'nms' \(NonMaxSuppression, opset 11\).*{message}"
    ):
        ko.import_model(build())


# -- ScatterND / ScatterElements reductions ------------------------------------------------


def _scatter(
    op: str,
    reduction: str,
    data: list[int | None],
    indices: list[int | None],
    updates: list[int | None],
    dtype: int = FLOAT,
    axis: int | None = None,
) -> Any:
    attrs: dict[str, Any] = {"reduction": reduction}
    if axis is not None:
        attrs["axis"] = axis
    node = helper.make_node(op, ["data", "indices", "updates"], ["y"], name="sc", **attrs)
    inputs = {"data": (dtype, data), "indices": (INT64, indices), "updates": (dtype, updates)}
    return model([node], inputs, {"y": (dtype, None)}, opset=18)


def _values(shape: tuple[int, ...], dtype: Any) -> Any:
    return RNG.integers(-4, 5, size=shape).astype(dtype)


@pytest.mark.parametrize("reduction", ["max", "min", "mul"])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_nd_reductions(reduction: str, static: bool, dtype: Any) -> None:
    onnx_type = FLOAT if dtype == np.float32 else INT64
    data = _values((4, 3, 2), dtype)
    # Tuples of length 1 (slices [3, 2]), 2 (rows [2]) and 3 (elements), with repeats and
    # negative indices.
    for indices in (
        np.array([[1], [3], [1], [-4]]),
        np.array([[[0, 1], [3, 2]], [[0, 1], [-1, -1]]]),
        np.array([[0, 0, 0], [2, 1, 1], [0, 0, 0], [3, -1, 1]]),
    ):
        updates = _values(indices.shape[:-1] + data.shape[indices.shape[-1] :], dtype)
        shapes: list[list[int | None]] = [
            list(data.shape),
            list(indices.shape),
            list(updates.shape),
        ]
        if not static:
            shapes = [[None] * len(s) for s in shapes]
        proto = _scatter("ScatterND", reduction, *shapes, dtype=onnx_type)
        check_against_oracle(
            proto, {"data": data, "indices": indices.astype(np.int64), "updates": updates}
        )


@pytest.mark.parametrize("reduction", ["max", "min", "mul"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_scatter_elements_reductions(reduction: str, axis: int, static: bool) -> None:
    data = _values((3, 4), np.float32)
    indices = RNG.integers(-3, 3, size=(3, 3)).astype(np.int64)
    updates = _values((3, 3), np.float32)
    shapes: list[list[int | None]] = [[3, 4], [3, 3], [3, 3]]
    if not static:
        shapes = [[None, None]] * 3
    proto = _scatter("ScatterElements", reduction, *shapes, axis=axis)
    check_against_oracle(proto, {"data": data, "indices": indices, "updates": updates})


NEGATIVE_TUPLES = [
    # Tuples of length 1 (slices [3, 2]), 2 (rows [2]) and 3 (elements: scalar updates),
    # none repeated once wrapped (reduction none leaves repeats undefined), and no tuple.
    np.array([[-1], [1], [-4]]),
    np.array([[[0, -1], [-4, 1]], [[-2, 0], [3, -3]]]),
    np.array([[-1, -1, -1], [0, -3, 1], [2, 1, -2]]),
    np.array([-3, 2, -1]),
    np.zeros((0, 2), np.int64),
]


@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.parametrize("known", ["import", "runtime", "initializer", "rank"])
def test_scatter_nd_negative_indices(reduction: str, known: str) -> None:
    """ONNX's indices may count from the end (-1 is the last) for every reduction; none and
    add failed at run time on them (mul, max and min: test_scatter_nd_reductions).
    ``known``: data's and indices' sizes known at import, at run time only, indices an
    initializer, or indices of a rank unknown at import."""
    data = _values((4, 3, 2), np.float32)
    for indices in NEGATIVE_TUPLES:
        if known == "rank" and indices.ndim == 1:
            continue  # one tuple, a scalar update: told from a batch by the rank only
        updates = _values(indices.shape[:-1] + data.shape[indices.shape[-1] :], np.float32)
        feeds = {"data": data, "indices": indices.astype(np.int64), "updates": updates}
        node = helper.make_node(
            "ScatterND", ["data", "indices", "updates"], ["y"], name="sc", reduction=reduction
        )
        runtime = known != "import"
        inputs: dict[str, Any] = {
            name: (FLOAT, [None] * value.ndim if runtime else list(value.shape))
            for name, value in feeds.items()
            if name != "indices"
        }
        inits = None
        if known == "initializer":
            inits = {"indices": feeds.pop("indices")}
        else:
            declared = {"import": list(indices.shape), "runtime": [None] * indices.ndim}
            inputs["indices"] = (INT64, declared.get(known))
        proto = model([node], inputs, {"y": (FLOAT, None)}, initializers=inits, opset=18)
        check_against_oracle(proto, feeds)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_into_the_last_row(reduction: str) -> None:
    """The QA case: index -1 of a [4, 2] data is row 3 (a KernelArgumentError before)."""
    proto = _scatter("ScatterND", reduction, [4, 2], [1, 1], [1, 2])
    feeds = {
        "data": np.zeros((4, 2), np.float32),
        "indices": np.array([[-1]], np.int64),
        "updates": np.array([[5, 6]], np.float32),
    }
    (y,) = check_against_oracle(proto, feeds)
    assert y.tolist() == [[0, 0], [0, 0], [0, 0], [5, 6]]


def test_scatter_reduction_with_no_updates_keeps_the_data() -> None:
    data = np.array([[1.0, -2.0], [np.inf, -np.inf]], np.float32)
    proto = _scatter("ScatterND", "max", [2, 2], [0, 1], [0, 2])
    check_against_oracle(
        proto,
        {
            "data": data,
            "indices": np.zeros((0, 1), np.int64),
            "updates": np.zeros((0, 2), np.float32),
        },
    )


def test_unknown_scatter_reduction_names_the_node() -> None:
    proto = _scatter("ScatterND", "none", [2, 2], [1, 1], [1, 2])
    proto.graph.node[0].attribute[0].s = b"mean"
    with pytest.raises(ko.OnnxImportError, match=r"'sc' \(ScatterND, opset 18\).*'mean'"):
        ko.import_model(proto)


# -- GatherND with batch_dims --------------------------------------------------------------


def _gather_nd(
    batch_dims: int, data: list[int | None], indices: list[int | None], dtype: int = INT64
) -> Any:
    node = helper.make_node(
        "GatherND", ["data", "indices"], ["y"], name="gnd", batch_dims=batch_dims
    )
    inputs = {"data": (FLOAT, data), "indices": (dtype, indices)}
    return model([node], inputs, {"y": (FLOAT, None)}, opset=13)


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize(
    ("batch_dims", "data_shape", "index_shape"),
    [
        (1, (2, 3, 4), (2, 1)),
        (1, (2, 3, 4), (2, 5, 2)),
        (2, (2, 3, 4, 5), (2, 3, 2, 1)),
        (2, (2, 3, 4, 5), (2, 3, 2)),
        (1, (3, 4), (3, 2, 1)),
    ],
)
def test_gather_nd_batch_dims(
    batch_dims: int, data_shape: tuple[int, ...], index_shape: tuple[int, ...], static: bool
) -> None:
    data = RNG.standard_normal(data_shape).astype(np.float32)
    depth = index_shape[-1]
    limits = np.array(data_shape[batch_dims : batch_dims + depth])
    indices = RNG.integers(-limits, limits, size=index_shape).astype(np.int64)
    shapes = (list(data_shape), list(index_shape))
    if not static:
        shapes = ([None] * len(data_shape), [None] * len(index_shape))
    check_against_oracle(_gather_nd(batch_dims, *shapes), {"data": data, "indices": indices})


def test_gather_nd_batch_dims_out_of_range_names_the_node() -> None:
    with pytest.raises(ko.OnnxImportError, match=r"'gnd' \(GatherND, opset 13\).*batch_dims=2"):
        ko.import_model(_gather_nd(2, [2, 3, 4], [2, 1]))


# -- MaxPool's Indices and MaxUnpool -------------------------------------------------------
# onnxruntime is the oracle: onnx's reference evaluator (1.19) gets MaxPool's Indices wrong
# where there is no padding (indices outside the window: 2 for the window over 0, 1, 6, 7).


def _max_pool(known: list[int | None], opset: int = 12, **attrs: Any) -> Any:
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="mp", **attrs)
    return model(
        [node], {"x": (FLOAT, known)}, {"y": (FLOAT, None), "i": (INT64, None)}, opset=opset
    )


POOLS: list[dict[str, Any]] = [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 0], "storage_order": 1},
    {"kernel_shape": [3, 2], "strides": [2, 1], "storage_order": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},
]


@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_max_pool_indices(attrs: dict[str, Any], static: bool) -> None:
    x = RNG.permutation(2 * 3 * 7 * 6).astype(np.float32).reshape(2, 3, 7, 6)  # no ties
    known: list[int | None] = (
        [2, 3, 7, 6]
        if static or "auto_pad" in attrs or "ceil_mode" in attrs
        else [None, 3, None, None]
    )
    check_against_oracle(_max_pool(known, **attrs), {"x": x}, oracle="onnxruntime")


@pytest.mark.parametrize("opset", [8, 10, 12])
def test_max_pool_indices_over_opsets_and_1d(opset: int) -> None:
    x = RNG.permutation(2 * 3 * 9).astype(np.float32).reshape(2, 3, 9)
    proto = _max_pool([2, 3, 9], opset=opset, kernel_shape=[3], strides=[2])
    check_against_oracle(proto, {"x": x}, oracle="onnxruntime")


def test_max_pool_indices_with_ties_take_the_first() -> None:
    x = np.array([[[[1, 1, 0], [1, 1, 0], [2, 0, 2]]]], np.float32)
    check_against_oracle(
        _max_pool([1, 1, 3, 3], kernel_shape=[2, 2]), {"x": x}, oracle="onnxruntime"
    )


def test_max_pool_bad_storage_order_names_the_node() -> None:
    with pytest.raises(ko.OnnxImportError, match=r"'mp' \(MaxPool, opset 12\).*storage_order=2"):
        ko.import_model(_max_pool([1, 1, 4, 4], kernel_shape=[2, 2], storage_order=2))


def _unpool(known: list[int | None], shaped: bool, opset: int = 11, **attrs: Any) -> Any:
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], name="mp", **attrs)
    inputs = ["p", "i", "shape"] if shaped else ["p", "i"]
    unpool = helper.make_node("MaxUnpool", inputs, ["y"], name="unpool", **attrs)
    declared: dict[str, Any] = {"x": (FLOAT, known)}
    if shaped:
        declared["shape"] = (INT64, [len(known)])
    return model([pool, unpool], declared, {"y": (FLOAT, None)}, opset=opset)


UNPOOLS: list[tuple[dict[str, Any], tuple[int, ...]]] = [
    # Input sizes the unpooling restores (its default output shape).
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (2, 3, 6, 4)),
    ({"kernel_shape": [3, 3], "strides": [1, 1]}, (2, 3, 6, 4)),  # overlaps: repeated indices
    ({"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}, (2, 3, 5, 4)),
]


@pytest.mark.parametrize(("attrs", "shape"), UNPOOLS)
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_max_unpool(attrs: dict[str, Any], shape: tuple[int, ...], static: bool) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    known: list[int | None] = list(shape) if static else [None, None, None, None]
    check_against_oracle(_unpool(known, False, **attrs), {"x": x}, oracle="onnxruntime")


@pytest.mark.parametrize("opset", [9, 11])
def test_max_unpool_to_a_larger_output_shape(opset: int) -> None:
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    feeds = {"x": x, "shape": np.array([1, 2, 5, 6], np.int64)}
    check_against_oracle(
        _unpool([1, 2, 4, 4], True, opset=opset, kernel_shape=[2, 2], strides=[2, 2]), feeds
    )


def test_max_unpool_errors_name_the_node() -> None:
    node = helper.make_node(
        "MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2, 2], strides=[2]
    )
    proto = model(
        [node],
        {"x": (FLOAT, [1, 1, 2, 2]), "i": (INT64, [1, 1, 2, 2])},
        {"y": (FLOAT, None)},
        opset=11,
    )
    with pytest.raises(
        ko.OnnxImportError, match=r"'unpool' \(MaxUnpool, opset 11\).*strides needs 2"
    ):
        ko.import_model(proto)
