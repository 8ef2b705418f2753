"""CenterCropPad, ReverseSequence and Unique: converters composed of other kernloom ops,
checked against onnx's reference evaluator with sizes known at import and at run time,
and their import errors, which must name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko

# -- CenterCropPad -------------------------------------------------------------------------


def _crop_pad(
    axes: list[int] | None, known: tuple[int | None, ...], shape: list[int], static: bool
) -> Any:
    attrs = {} if axes is None else {"axes": axes}
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="ccp", **attrs)
    inputs: dict[str, Any] = {"x": (FLOAT, list(known))}
    inits = {"s": np.asarray(shape, np.int64)} if static else None
    if not static:
        inputs["s"] = (INT64, [len(shape)])
    return model([node], inputs, {"y": (FLOAT, None)}, initializers=inits, opset=18)


CROP_PAD_CASES = [
    (None, [3, 10, 3]),  # crop an odd amount, pad an even one
    (None, [4, 9, 2]),  # odd crop and odd pad: the extra element goes to the end
    ([0, 1], [4, 9]),
    ([-1, 0], [6, 2]),
    (None, [5, 8, 3]),  # unchanged
    ([1], [0]),  # cropped to nothing
]


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize(("axes", "shape"), CROP_PAD_CASES)
def test_center_crop_pad(axes: list[int] | None, shape: list[int], static: bool) -> None:
    x = np.random.default_rng(0).random((5, 8, 3), dtype=np.float32)
    known = (5, 8, 3) if static else (None, 8, None)
    feeds: dict[str, Any] = {"x": x}
    if not static:
        feeds["s"] = np.asarray(shape, np.int64)
    check_against_oracle(_crop_pad(axes, known, shape, static), feeds)


def test_center_crop_pad_with_unknown_dims_and_a_known_shape() -> None:
    x = np.arange(40, dtype=np.float32).reshape(5, 8)
    check_against_oracle(_crop_pad([1], (None, None), [5], True), {"x": x})


@pytest.mark.parametrize(
    ("axes", "shape", "message"),
    [
        ([0, 0], [2, 2], "repeat an axis"),
        ([0], [2, 2], "2 values but there are 1 axes"),
        ([3], [2], "axis 3 is out of range"),
        (None, [2, -1], "negative size"),
    ],
)
def test_center_crop_pad_errors_name_the_node(
    axes: list[int] | None, shape: list[int], message: str
) -> None:
    with pytest.raises(ko.OnnxImportError, match=rf"'ccp' \(CenterCropPad, opset 18\).*{message}"):
        ko.import_model(_crop_pad(axes, (4, 4), shape, True))


# -- ReverseSequence -----------------------------------------------------------------------


def _reverse_sequence(batch_axis: int, time_axis: int, known: list[int | None]) -> Any:
    node = helper.make_node(
        "ReverseSequence",
        ["x", "lens"],
        ["y"],
        name="rev",
        batch_axis=batch_axis,
        time_axis=time_axis,
    )
    return model(
        [node],
        {"x": (FLOAT, known), "lens": (INT64, [known[batch_axis]])},
        {"y": (FLOAT, None)},
        opset=10,
    )


@pytest.mark.parametrize(
    ("batch_axis", "time_axis", "lens"),
    [(0, 1, [5, 0, 2]), (1, 0, [1, 3, 5]), (0, 1, [4, 4, 1])],
)
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_reverse_sequence(batch_axis: int, time_axis: int, lens: list[int], static: bool) -> None:
    dims = [3, 5, 2] if batch_axis % 3 == 0 else [5, 3, 2]
    x = np.random.default_rng(1).random(dims, dtype=np.float32)
    known: list[int | None] = list(dims) if static else [None, None, 2]
    check_against_oracle(
        _reverse_sequence(batch_axis, time_axis, known), {"x": x, "lens": np.asarray(lens)}
    )


@pytest.mark.parametrize(
    ("batch_axis", "time_axis", "known", "message"),
    [
        (0, 0, [3, 3], "must be 0 and 1"),
        (0, 2, [3, 3, 3], "must be 0 and 1"),
        (0, 1, [3], "rank >= 2"),
    ],
)
def test_reverse_sequence_errors_name_the_node(
    batch_axis: int, time_axis: int, known: list[int], message: str
) -> None:
    proto = _reverse_sequence(batch_axis, time_axis, list(known))
    with pytest.raises(
        ko.OnnxImportError, match=rf"'rev' \(ReverseSequence, opset 10\).*{message}"
    ):
        ko.import_model(proto)


# -- Unique --------------------------------------------------------------------------------


def _unique(elem: int, known: list[int | None] | None, outputs: int = 4, **attrs: int) -> Any:
    names = ["y", "indices", "inverse", "counts"][:outputs]
    node = helper.make_node("Unique", ["x"], names, name="uniq", **attrs)
    types = [elem, INT64, INT64, INT64]
    return model(
        [node],
        {"x": (elem, known)},  # type: ignore[dict-item]
        {n: (t, None) for n, t in zip(names, types, strict=False)},  # type: ignore[misc]
        opset=11,
    )


_RNG = np.random.default_rng(2)
VECTORS = {
    "float": np.asarray([2.5, -1.0, 2.5, 0.0, 7.0, -1.0, -3.5], np.float32),
    "int64": _RNG.integers(-4, 4, size=20).astype(np.int64),
    "uint8": np.asarray([200, 3, 3, 255, 0, 200], np.uint8),
    "single": np.asarray([4.0], np.float32),
    "matrix": _RNG.integers(0, 3, size=(4, 5)).astype(np.float32),
}
ELEM = {np.float32: FLOAT, np.int64: INT64, np.uint8: TensorProto.UINT8, np.bool_: TensorProto.BOOL}


@pytest.mark.parametrize("name", list(VECTORS))
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_unique_sorted_without_axis(name: str, static: bool) -> None:
    x = VECTORS[name]
    known: list[int | None] = list(x.shape) if static else [None] * x.ndim
    check_against_oracle(_unique(ELEM[x.dtype.type], known), {"x": x})


@pytest.mark.parametrize("outputs", [1, 2, 3, 4])
def test_unique_sorted_with_fewer_outputs(outputs: int) -> None:
    x = VECTORS["int64"]
    check_against_oracle(_unique(INT64, [None], outputs), {"x": x})


def test_unique_bool() -> None:
    x = np.asarray([True, False, True, True], np.bool_)
    check_against_oracle(_unique(TensorProto.BOOL, [4]), {"x": x})


@pytest.mark.parametrize("name", ["float", "int64", "matrix"])
def test_unique_not_sorted_keeps_first_occurrence_order(name: str) -> None:
    # onnx's reference takes the unsorted Y from x unflattened: onnxruntime for a matrix.
    x = VECTORS[name]
    oracle = "onnxruntime" if x.ndim > 1 else "reference"
    check_against_oracle(
        _unique(ELEM[x.dtype.type], list(x.shape), sorted=0), {"x": x}, oracle=oracle
    )


SLICES = np.asarray(
    [[[1, 0], [2, 2]], [[1, 0], [2, 2]], [[0, 9], [1, 1]], [[1, 0], [1, 5]], [[0, 9], [1, 1]]],
    np.float32,
)  # [5, 2, 2]: slices along axis 0 repeat; along axis 2 too after a transpose


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_unique_sorted_with_axis(axis: int, static: bool) -> None:
    x = SLICES if axis % 3 == 0 else np.ascontiguousarray(np.moveaxis(SLICES, 0, axis))
    known: list[int | None] = list(x.shape) if static else [None, None, None]
    check_against_oracle(_unique(FLOAT, known, axis=axis), {"x": x})


def test_unique_sorted_with_axis_on_a_vector_and_ints() -> None:
    x = VECTORS["int64"]
    check_against_oracle(_unique(INT64, [None], axis=0), {"x": x})


@pytest.mark.parametrize("axis", [0, 2])
def test_unique_not_sorted_with_axis(axis: int) -> None:
    # onnx's reference takes an unsorted Y along axis 0 whatever the axis: onnxruntime
    # follows the spec.
    x = SLICES if axis == 0 else np.ascontiguousarray(np.moveaxis(SLICES, 0, axis))
    check_against_oracle(
        _unique(FLOAT, list(x.shape), axis=axis, sorted=0), {"x": x}, oracle="onnxruntime"
    )


@pytest.mark.parametrize(
    ("known", "axis", "message"),
    [([3, 2], 2, "axis 2 is out of range for rank 2"), (None, 0, "rank of the input")],
)
def test_unique_errors_name_the_node(known: list[int] | None, axis: int, message: str) -> None:
    with pytest.raises(ko.OnnxImportError, match=rf"'uniq' \(Unique, opset 11\).*{message}"):
        ko.import_model(_unique(FLOAT, known, axis=axis))


def test_unique_complex_values_name_the_node() -> None:
    with pytest.raises(
        ko.OnnxImportError, match=r"'uniq' \(Unique, opset 11\).*complex64 values are not supported"
    ):
        ko.import_model(_unique(TensorProto.COMPLEX64, [3]))
