"""bfloat16 arithmetic: any tensors-only op on bfloat16 inputs, which the importer decodes
to float32, converts as usual and encodes back (``kernloom.onnx._convert``), checked bit
for bit against onnx's ReferenceEvaluator where the reference rounds once (Add, MatMul,
Relu, Reshape, ArgMax), and closely where it rounds between steps (Softmax: x - max,
exp, sum and quotient each rounded), and there exactly against the float32 model's
reference rounded once; shapes known and unknown at import; the float8 types still
refused."""

from __future__ import annotations

import warnings
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import model

import kernloom.onnx as ko

BF16 = TensorProto.BFLOAT16
RNG = np.random.default_rng(7)


def _bf16(shape: tuple[int, ...], scale: float = 4.0) -> np.ndarray[Any, Any]:
    return (RNG.standard_normal(shape) * scale).astype(np.float32).astype(ml_dtypes.bfloat16)


def _run(proto: Any, feeds: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    ours = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = ReferenceEvaluator(proto).run(None, feeds)
    return ours, [np.asarray(w) for w in want]


def _same_bits(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype == ml_dtypes.bfloat16:
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    else:
        np.testing.assert_array_equal(got, want)


def _unary(op: str, shape: list[Any], out_type: int = BF16, opset: int = 21, **attrs: Any) -> Any:
    node = helper.make_node(op, ["x"], ["y"], name="node", **attrs)
    return model([node], {"x": (BF16, shape)}, {"y": (out_type, None)}, opset=opset)


@pytest.mark.parametrize("shape", [[2, 3], [None, 3], ["n", "m"]], ids=str)
def test_add_broadcast_and_ties(shape: list[Any]) -> None:
    """Sums that fall on bfloat16 rounding ties (1 + 2**-8: to even) and overflow to inf."""
    node = helper.make_node("Add", ["x", "y"], ["z"], name="add")
    proto = model(
        [node],
        {"x": (BF16, shape), "y": (BF16, [3])},
        {"z": (BF16, None)},
        opset=21,
    )
    x = np.array([[1.0, 1.0, 3e38], [-2.0, 0.0, np.inf]], np.float32)
    y = np.array([2.0**-8, 3 * 2.0**-8, 3e38], np.float32)
    feeds = {"x": x.astype(ml_dtypes.bfloat16), "y": y.astype(ml_dtypes.bfloat16)}
    ours, want = _run(proto, feeds)
    _same_bits(ours[0], want[0])
    ours, want = _run(proto, {"x": _bf16((2, 3)), "y": _bf16((3,))})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize(("a_shape", "b_shape"), [([4, 8], [8, 5]), ([None, 8], [8, None])])
def test_matmul(a_shape: list[Any], b_shape: list[Any]) -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")
    proto = model(
        [node], {"a": (BF16, a_shape), "b": (BF16, b_shape)}, {"c": (BF16, None)}, opset=21
    )
    ours, want = _run(proto, {"a": _bf16((4, 8)), "b": _bf16((8, 5))})
    _same_bits(ours[0], want[0])


def test_relu_of_an_initializer_and_a_feed() -> None:
    """A bfloat16 initializer (held as codes) and a feed, through Relu then Add."""
    relu = helper.make_node("Relu", ["x"], ["r"], name="relu")
    add = helper.make_node("Add", ["r", "w"], ["y"], name="add")
    w = _bf16((3,))
    made = model(
        [relu, add],
        {"x": (BF16, [None, 3])},
        {"y": (BF16, None)},
        initializers={"w": w},
        opset=21,
    )
    x = np.array([[-1.5, 0.0, 2.5], [-0.0, -np.inf, np.inf]], np.float32)
    ours, want = _run(made, {"x": x.astype(ml_dtypes.bfloat16)})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("shape", [[2, 3, 5], [None, None, 5]], ids=str)
def test_reshape_with_an_int64_shape(shape: list[Any]) -> None:
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")
    made = model(
        [node],
        {"x": (BF16, shape)},
        {"y": (BF16, None)},
        initializers={"s": np.array([5, -1], np.int64)},
        opset=21,
    )
    ours, want = _run(made, {"x": _bf16((2, 3, 5))})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("shape", [[3, 4], [None, 4]], ids=str)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_index_stays_int64(op: str, shape: list[Any]) -> None:
    """The output of a fixed type (int64) is not encoded as bfloat16."""
    proto = _unary(op, shape, TensorProto.INT64, opset=13, axis=1, keepdims=0)
    x = np.array([[1, 5, 5, -2], [0, -1, 3, 3], [7, 7, 7, 7]], np.float32)
    ours, want = _run(proto, {"x": x.astype(ml_dtypes.bfloat16)})
    assert ours[0].dtype == np.int64
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("shape", [[3, 6], [None, None]], ids=str)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_rounds_once(shape: list[Any], axis: int) -> None:
    """One rounding: exactly the float32 model's reference result rounded to bfloat16.
    The bfloat16 reference rounds exp, sum and quotient each (x - max is exact for these
    eighths), so it is within the node suite's two bfloat16 ulps (2**-6) of ours."""
    x = (RNG.integers(-56, 56, (3, 6)) / 8).astype(ml_dtypes.bfloat16)
    ours, want = _run(_unary("Softmax", shape, axis=axis), {"x": x})
    assert ours[0].dtype == ml_dtypes.bfloat16
    float_model = model(
        [helper.make_node("Softmax", ["x"], ["y"], name="node", axis=axis)],
        {"x": (TensorProto.FLOAT, shape)},
        {"y": (TensorProto.FLOAT, None)},
        opset=21,
    )
    once = ReferenceEvaluator(float_model).run(None, {"x": x.astype(np.float32)})[0]
    _same_bits(ours[0], np.asarray(once).astype(ml_dtypes.bfloat16))
    np.testing.assert_allclose(
        ours[0].astype(np.float32), want[0].astype(np.float32), rtol=2**-6, atol=0
    )


def test_unique_values_bfloat16_indices_int64() -> None:
    """Of a node's outputs only those of the bfloat16 input's type variable are encoded."""
    node = helper.make_node("Unique", ["x"], ["y", "i", "inv", "n"], name="unique", sorted=1)
    made = model(
        [node],
        {"x": (BF16, [None])},
        {
            "y": (BF16, None),
            "i": (TensorProto.INT64, None),
            "inv": (TensorProto.INT64, None),
            "n": (TensorProto.INT64, None),
        },
        opset=21,
    )
    x = np.array([2.5, -1.0, 2.5, 0.0, -1.0], np.float32).astype(ml_dtypes.bfloat16)
    ours, want = _run(made, {"x": x})
    for got, expected in zip(ours, want, strict=True):
        _same_bits(got, expected)


def test_a_sequence_of_bfloat16_is_refused_naming_the_node() -> None:
    """Sequence ops carry their values as they are: no float32 stand-in for bfloat16."""
    construct = helper.make_node("SequenceConstruct", ["x"], ["s"], name="seq")
    at = helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")
    made = model(
        [construct, at],
        {"x": (BF16, [2])},
        {"y": (BF16, [2])},
        initializers={"i": np.array(0, np.int64)},
        opset=21,
    )
    with pytest.raises(
        ko.OnnxImportError,
        match=r"'seq' \(SequenceConstruct, opset 21\).*bfloat16 values are supported by "
        r"Cast, CastLike, Identity, Constant and, as float32, every op whose inputs and "
        r"outputs are tensors, not by SequenceConstruct",
    ):
        ko.import_model(made)
