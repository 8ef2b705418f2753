"""TopK: the k smallest (largest=0) of every dtype ONNX's TopK takes -- the integer minimum,
unsigned types, NaN, -0.0 and ties, which negating x gets wrong -- and TopK-1 (opsets 1 to
9, k an attribute), checked against onnx's reference evaluator (onnxruntime where it
cannot run the case) with sizes known at import and at run time."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import INT64, check_against_oracle, model

RNG = np.random.default_rng(11)

ONNX_TYPES: dict[Any, int] = {
    np.int8: TensorProto.INT8,
    np.int16: TensorProto.INT16,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
    np.uint8: TensorProto.UINT8,
    np.uint16: TensorProto.UINT16,
    np.uint32: TensorProto.UINT32,
    np.uint64: TensorProto.UINT64,
    np.float16: TensorProto.FLOAT16,
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
}


def _top_k(
    dtype: Any,
    known: list[int | None],
    *,
    k: int | None = None,
    opset: int = 18,
    **attrs: Any,
) -> Any:
    """A TopK node on x; k an initializer when given, else a graph input fed at run time."""
    onnx_type = ONNX_TYPES[dtype]
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", **attrs)
    inputs: dict[str, Any] = {"x": (onnx_type, known)}
    if k is None:
        inputs["k"] = (INT64, [1])
    inits = None if k is None else {"k": np.array([k], np.int64)}
    outputs = {"v": (onnx_type, None), "i": (INT64, None)}
    return model([node], inputs, outputs, initializers=inits, opset=opset)  # type: ignore[arg-type]


def _with_extremes(dtype: Any, shape: tuple[int, ...]) -> Any:
    """Small values (many ties) with the elements -x orders wrongly scattered among them:
    the integer minimum (-INT_MIN wraps to INT_MIN) and NaN (-NaN is still a NaN, which
    TopKV2 puts first); and the dtype's highest, infinities and -0.0."""
    x = RNG.integers(0, 4, size=shape).astype(dtype)
    flat = x.reshape(-1)
    spots = RNG.permutation(flat.size)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        flat[spots[: flat.size // 5]] = info.min
        flat[spots[flat.size // 5 : flat.size // 3]] = info.max
    else:
        specials = np.array([np.nan, -np.inf, np.inf, -0.0], dtype)
        flat[spots[: flat.size // 3]] = specials[np.arange(flat.size // 3) % 4]
    return x


@pytest.mark.parametrize("dtype", list(ONNX_TYPES), ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_smallest_k_of_every_dtype(dtype: Any, axis: int) -> None:
    x = _with_extremes(dtype, (3, 7, 4))
    for k in (0, 1, 3, x.shape[axis]):
        proto = _top_k(dtype, list(x.shape), k=k, axis=axis, largest=0)
        check_against_oracle(proto, {"x": x})


def test_the_integer_minimum_is_the_smallest() -> None:
    """The QA case: -INT_MIN wraps, so top-k of -x took [-3, 0]."""
    x = np.array([[-2147483648, 5, 0, -3]], np.int32)
    values, indices = check_against_oracle(_top_k(np.int32, [1, 4], k=2, largest=0), {"x": x})
    assert values.tolist() == [[-2147483648, -3]] and indices.tolist() == [[0, 3]]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_smallest_k_of_unsigned_types(dtype: Any) -> None:
    """Refused at import before (unsigned types have no negation); ~x reverses them."""
    x = np.array([[5, 1, np.iinfo(dtype).max, 3, 0, 1]], dtype)
    values, indices = check_against_oracle(_top_k(dtype, [1, 6], k=4, largest=0), {"x": x})
    assert values.tolist() == [[0, 1, 1, 3]] and indices.tolist() == [[4, 1, 5, 3]]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_nan_and_signed_zeros(dtype: Any) -> None:
    """NaN (either sign) is the largest, for the smallest k as for the largest, and NaNs
    and zeros of either sign tie, the lower index first; the values keep -0.0's sign and
    are the oracle's bit for bit."""
    x = np.array(
        [[1.0, np.nan, np.nan, -np.inf, np.inf, -0.0, 0.0, 2.0, -0.0], [0.0, -0.0] * 4 + [3.0]],
        dtype,
    )
    x[0, 1] = np.copysign(np.nan, -1)
    for largest, k in itertools.product((0, 1), (2, 5, 9)):
        proto = _top_k(dtype, [2, 9], k=k, largest=largest)
        values, _ = check_against_oracle(proto, {"x": x})
        expected = ReferenceEvaluator(proto).run(None, {"x": x})[0]
        np.testing.assert_array_equal(values.view(np.uint8), expected.view(np.uint8))


def test_top_k_with_k_and_sizes_at_run_time() -> None:
    x = _with_extremes(np.int64, (4, 6))
    y = _with_extremes(np.float32, (2, 5))
    for largest in (0, 1):
        proto = _top_k(np.int64, [None, None], largest=largest)
        for k in (0, 2, 6):
            check_against_oracle(proto, {"x": x, "k": np.array([k], np.int64)})
        proto = _top_k(np.float32, [None, None], largest=largest, axis=0)
        check_against_oracle(proto, {"x": y, "k": np.array([2], np.int64)})


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32])
def test_smallest_k_of_empty_rows_and_rank_one(dtype: Any) -> None:
    empty = np.zeros((0, 4), dtype)
    check_against_oracle(_top_k(dtype, [0, 4], k=2, largest=0), {"x": empty})
    check_against_oracle(_top_k(dtype, [None, None], k=2, largest=0), {"x": empty})
    line = _with_extremes(dtype, (5,))
    check_against_oracle(_top_k(dtype, [5], k=3, largest=0), {"x": line})


# -- TopK-1: k an attribute, opsets 1 to 9 -------------------------------------------------


def _top_k_1(known: list[int | None], opset: int, **attrs: Any) -> Any:
    node = helper.make_node("TopK", ["x"], ["v", "i"], name="topk", **attrs)
    outputs = {"v": (TensorProto.FLOAT, None), "i": (INT64, None)}
    return model([node], {"x": (TensorProto.FLOAT, known)}, outputs, opset=opset)


@pytest.mark.parametrize("opset", [7, 8, 9])
@pytest.mark.parametrize("axis", [None, 0, 1, -2])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_top_k_1_takes_k_as_an_attribute(opset: int, axis: int | None, static: bool) -> None:
    x = RNG.integers(0, 4, size=(3, 5, 2)).astype(np.float32)  # ties
    x[1, 2, 0] = np.nan
    attrs: dict[str, Any] = {"k": 2} if axis is None else {"k": 2, "axis": axis}
    known: list[int | None] = [3, 5, 2] if static else [None, None, None]
    check_against_oracle(_top_k_1(known, opset, **attrs), {"x": x})
