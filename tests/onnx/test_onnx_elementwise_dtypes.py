"""Elementwise ops on every dtype their ONNX schema allows where TensorFlow's op does not
take it: Abs and Sign of unsigned integers, Shrink of unsigned integers (and its bounds
and bias on integers), Det of float16; each checked against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_helpers import check_against_oracle, model

OPSET = 22


def _allowed(op: str) -> list[np.dtype[Any]]:
    """The numpy dtypes among the types ONNX's schema of ``op`` allows (bfloat16 left out:
    the importer computes it in float32, which tests/onnx/test_onnx_bfloat16.py covers)."""
    (constraint,) = onnx.defs.get_schema(op, OPSET).type_constraints
    found = []
    for text in constraint.allowed_type_strs:
        elem = getattr(onnx.TensorProto, text[len("tensor(") : -1].upper())
        if elem != onnx.TensorProto.BFLOAT16:
            found.append(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    return found


def _values(dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    if dtype.kind == "u":
        return np.array([0, 1, 2, 3, 4, 7, 100, 200], dtype)
    if dtype.kind == "i":
        return np.array([-7, -3, -2, -1, 0, 1, 2, 5], dtype)
    return np.array([-3, -1.5, -1, -0.25, 0, 0.5, 1.5, 4], dtype)


def _one_node(op: str, dtype: np.dtype[Any], shape: list[int], **attrs: Any) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    node = helper.make_node(op, ["x"], ["y"], name="node", **attrs)
    return model([node], {"x": (elem, shape)}, {"y": (elem, None)}, opset=OPSET)


@pytest.mark.parametrize("op", ["Abs", "Sign"])
@pytest.mark.parametrize("dtype", _allowed("Abs"), ids=str)
def test_abs_and_sign_of_every_allowed_dtype(op: str, dtype: np.dtype[Any]) -> None:
    x = _values(dtype)
    check_against_oracle(_one_node(op, dtype, [8]), {"x": x}, oracle="onnxruntime")


@pytest.mark.parametrize("dtype", _allowed("Shrink"), ids=str)
@pytest.mark.parametrize(
    ("lambd", "bias"),
    [(0.5, 0.0), (1.5, 1.0), (-1.0, 2.0), (-1.5, 0.5), (2.0, 0.5), (0.0, 3.0), (1.0, -2.0)],
)
def test_shrink_of_every_allowed_dtype(dtype: np.dtype[Any], lambd: float, bias: float) -> None:
    """A negative lambd makes both tests hold: x < -lambd wins. Integers compare with
    the bounds exactly (-1 > -1.5) and shift by a fractional bias truncating, and unsigned
    ones wrap, as onnxruntime's casts do."""
    proto = _one_node("Shrink", dtype, [8], lambd=lambd, bias=bias)
    check_against_oracle(proto, {"x": _values(dtype)}, oracle="onnxruntime")


def test_det_of_float16_is_computed_in_float32() -> None:
    x = np.array([[[2, 1, 0], [1, 3, 1], [0, 1, 4]], [[1, 2, 3], [0, 1, 4], [5, 6, 0]]], np.float16)
    check_against_oracle(_one_node("Det", x.dtype, [2, 3, 3]), {"x": x}, oracle="onnxruntime")
