"""The schemas in force at opsets 7 to 12 that changed later (issue 23 promises opsets 7 to
the newest): Hardmax-1 and -11 (x coerced to a matrix at axis), Sum, Max, Min and Mean-6
(inputs of one shape), Upsample-7 (scales an attribute); TopK-1 is in test_onnx_top_k.py.
Checked against onnxruntime where onnx's reference evaluator implements only the newest
schema (Hardmax, Upsample), else against the evaluator, with sizes known at import and at
run time; and the registry walked over opsets 7 to 26 for these ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx.defs
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko
from kernloom.onnx._registry import REGISTRY

RNG = np.random.default_rng(23)


@pytest.mark.parametrize("op_type", ["Hardmax", "Max", "Mean", "Min", "Sum", "TopK", "Upsample"])
def test_every_opset_from_7_has_a_converter(op_type: str) -> None:
    """bug3's walk: every opset from 7 whose schema of the op is not deprecated (Upsample
    is from 10 on) finds a converter."""
    missing = [
        opset
        for opset in range(7, onnx.defs.onnx_opset_version() + 1)
        if not onnx.defs.get_schema(op_type, opset).deprecated
        and REGISTRY.lookup(op_type, opset) is None
    ]
    assert missing == []


# -- Hardmax-1 and -11 ---------------------------------------------------------------------


def _hardmax(known: list[int | None], opset: int, dtype: int = FLOAT, **attrs: Any) -> Any:
    node = helper.make_node("Hardmax", ["x"], ["y"], name="hm", **attrs)
    return model([node], {"x": (dtype, known)}, {"y": (dtype, None)}, opset=opset)


@pytest.mark.parametrize("opset", [7, 11, 12])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_hardmax_before_13_takes_the_trailing_dims_as_one(
    opset: int, axis: int | None, static: bool
) -> None:
    if opset < 11 and axis is not None and axis < 0:
        pytest.skip("Hardmax-1 takes no negative axis")
    x = RNG.integers(0, 3, size=(2, 3, 4)).astype(np.float32)  # ties: the first one wins
    attrs = {} if axis is None else {"axis": axis}
    known: list[int | None] = [2, 3, 4] if static else [None, None, None]
    check_against_oracle(_hardmax(known, opset, **attrs), {"x": x}, oracle="onnxruntime")


def _coerced_hardmax(x: Any, axis: int) -> Any:
    """Hardmax-1/11 by hand: 1 at the first maximum of each row of x as a matrix at axis."""
    rows = x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
    out = np.zeros_like(rows)
    if rows.size:
        out[np.arange(rows.shape[0]), rows.argmax(axis=1)] = 1
    return out.reshape(x.shape)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("shape", [(3, 2, 2), (0, 2, 2)], ids=["matrix", "empty"])
def test_hardmax_11_of_other_float_types_and_empty_batches(
    dtype: Any, shape: tuple[int, ...]
) -> None:
    """float64 by hand: onnxruntime has no Hardmax-11 kernel for it."""
    onnx_type = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.DOUBLE
    x = RNG.integers(-2, 2, size=shape).astype(dtype)
    for axis in (1, 2, -3):
        proto = _hardmax([None, 2, 2], 11, onnx_type, axis=axis)
        (y,) = ko.InferenceSession(proto.SerializeToString()).run(None, {"x": x})
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, _coerced_hardmax(x, axis % 3))


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_hardmax_over_an_empty_axis_is_empty(opset: int, static: bool) -> None:
    """ArgMax refuses an empty axis; the hardmax of one is empty (onnx's reference)."""
    for shape, axis in (((2, 0), 1), ((0, 3), 0), ((2, 3, 0), -1)):
        x = np.zeros(shape, np.float32)
        known: list[int | None] = list(shape) if static else [None] * len(shape)
        check_against_oracle(_hardmax(known, opset, axis=axis), {"x": x})


def test_hardmax_11_axis_out_of_range_names_the_node() -> None:
    with pytest.raises(ko.OnnxImportError, match=r"'hm' \(Hardmax, opset 11\).*axis 3"):
        ko.import_model(_hardmax([2, 3, 4], 11, axis=3))


# -- Sum, Max, Min and Mean-6 --------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Sum", "Max", "Min", "Mean"])
@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 3)], ids=["matrix", "scalar", "empty"])
def test_variadic_6_of_one_shape(op_type: str, count: int, shape: tuple[int, ...]) -> None:
    names = [f"x{i}" for i in range(count)]
    node = helper.make_node(op_type, names, ["y"], name="v")
    inputs: dict[str, Any] = {n: (FLOAT, list(shape)) for n in names}
    proto = model([node], inputs, {"y": (FLOAT, None)}, opset=7)
    feeds = {n: RNG.standard_normal(shape).astype(np.float32) for n in names}
    check_against_oracle(proto, feeds)


def test_variadic_6_of_float64_at_run_time() -> None:
    node = helper.make_node("Mean", ["a", "b"], ["y"], name="v")
    double = TensorProto.DOUBLE
    proto = model(
        [node], {"a": (double, [None]), "b": (double, [None])}, {"y": (double, None)}, opset=7
    )
    check_against_oracle(proto, {"a": np.arange(4.0), "b": np.array([1.0, -2.0, 0.5, 8.0])})


# -- Upsample-7 ----------------------------------------------------------------------------


def _upsample(
    known: list[int | None], scales: list[float], mode: str, opset: int, dtype: int = FLOAT
) -> Any:
    node = helper.make_node("Upsample", ["x"], ["y"], name="up", scales=scales, mode=mode)
    return model([node], {"x": (dtype, known)}, {"y": (dtype, None)}, opset=opset)


@pytest.mark.parametrize("opset", [7, 8])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize(
    "scales", [[1.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.5, 2.5], [1.0, 1.0, 1.0, 1.0]]
)
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_upsample_7_takes_scales_as_an_attribute(
    opset: int, mode: str, scales: list[float], static: bool
) -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    known: list[int | None] = [2, 3, 4, 5] if static else [None, None, None, None]
    proto = _upsample(known, scales, mode, opset)
    # cubic sums four taps per axis, in another order than onnxruntime's.
    atol = 1e-5 if mode == "cubic" else 1e-6
    check_against_oracle(proto, {"x": x}, oracle="onnxruntime", rtol=1e-5, atol=atol)


def test_upsample_7_of_integers_and_other_ranks() -> None:
    x = RNG.integers(0, 200, size=(3, 4)).astype(np.uint8)
    proto = _upsample([3, 4], [2.0, 3.0], "nearest", 7, TensorProto.UINT8)
    check_against_oracle(proto, {"x": x}, oracle="onnxruntime")
    matrix = RNG.standard_normal((3, 4)).astype(np.float32)
    check_against_oracle(
        _upsample([3, 4], [2.0, 1.5], "linear", 8), {"x": matrix}, oracle="onnxruntime", rtol=1e-5
    )


def test_upsample_7_scales_of_another_rank_names_the_node() -> None:
    with pytest.raises(ko.OnnxImportError, match=r"'up' \(Upsample, opset 7\).*scales has 3"):
        ko.import_model(_upsample([1, 2, 3, 4], [1.0, 2.0, 2.0], "nearest", 7))
