"""ONNX's small types, which kernloom holds as codes (float8, float4e2m1, int4, uint4,
int2, uint2): Cast, CastLike, QuantizeLinear, DequantizeLinear and Constant checked
bit for bit against onnx's ReferenceEvaluator -- every float16 value, every float32 and
float64 rounding boundary of each type, saturate on and off, NaN, inf, -0, subnormals --
and the import errors of the ops that do not take them."""

from __future__ import annotations

import warnings
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import FLOAT, model

import kernloom.onnx as ko
from kernloom.runtime.session_options import SessionConfig

FLOAT8 = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}
FLOATS = {**FLOAT8, TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn}
INTS = {
    TensorProto.INT4: ml_dtypes.int4,
    TensorProto.UINT4: ml_dtypes.uint4,
    TensorProto.INT2: ml_dtypes.int2,
    TensorProto.UINT2: ml_dtypes.uint2,
}
SOURCES = {
    TensorProto.FLOAT16: np.float16,
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
}


def _name(elem: int) -> str:
    return str(TensorProto.DataType.Name(elem))


def _run(proto: Any, feeds: dict[str, Any], *, ieee: bool = False) -> tuple[list[Any], list[Any]]:
    """kernloom's outputs and the reference's. ``ieee``: keep float32 subnormals, which
    kernloom's CPU kernels flush by default as TensorFlow's do (a bfloat16 subnormal
    through a float64 cast)."""
    config = SessionConfig(inter_op_threads=1, flush_denormals=not ieee)
    ours = ko.InferenceSession(proto.SerializeToString(), config=config).run(None, feeds)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # the reference's numpy casts overflow on purpose
        want = ReferenceEvaluator(proto).run(None, feeds)
    return ours, [np.asarray(w) for w in want]


def _same_bits(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    """Equal dtype, shape and bit pattern (NaN's sign and -0 included); a float32/16/64
    NaN matches any NaN of the same sign."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype not in (np.float16, np.float32, np.float64):
        # ml_dtypes' types by their codes, numpy's integers by value
        codes = np.dtype(f"u{want.dtype.itemsize}") if want.dtype.kind not in "iub" else None
        g = (got.view(codes) if codes else got.astype(np.int64)).ravel()
        w = (want.view(codes) if codes else want.astype(np.int64)).ravel()
        bad = np.flatnonzero(g != w)
        assert bad.size == 0, f"{bad.size} differ, e.g. at {bad[:5]}: {g[bad[:5]]} != {w[bad[:5]]}"
        return
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def _cast_model(source: int, target: int, shape: list[Any], opset: int = 21, **attrs: Any) -> Any:
    node = helper.make_node("Cast", ["x"], ["y"], name="cast", to=target, **attrs)
    return model([node], {"x": (source, shape)}, {"y": (target, shape)}, opset=opset)


def _every_float16() -> np.ndarray[Any, Any]:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _boundary_values(elem: int, dtype: type[np.floating[Any]]) -> np.ndarray[Any, Any]:
    """Every value of the type, every midpoint between neighbours (the rounding ties),
    their neighbours in ``dtype``, what lies beyond the largest value, and the specials."""
    values = np.arange(256 if elem in FLOAT8 else 16, dtype=np.uint8)
    table = values.view(FLOATS[elem]).astype(np.float64)
    finite = np.unique(np.abs(table[np.isfinite(table)]))
    step = finite[-1] - finite[-2]
    points = np.concatenate(
        [finite, (finite[:-1] + finite[1:]) / 2, finite[-1] + step * np.arange(0.25, 4, 0.25)]
    ).astype(dtype)
    up, down = np.nextafter(points, dtype(np.inf)), np.nextafter(points, dtype(-np.inf))
    near = np.concatenate([points, up, down, np.nextafter(up, dtype(np.inf))])
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, 1e30, 1e-30], dtype)
    return np.concatenate([near, -near, specials])


# -- Cast to float8 / float4 ------------------------------------------------------------


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("target", list(FLOATS), ids=_name)
def test_cast_every_float16_to_a_small_float(target: int, saturate: int) -> None:
    x = _every_float16()
    ours, want = _run(_cast_model(TensorProto.FLOAT16, target, [None], saturate=saturate), {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("source", [TensorProto.FLOAT, TensorProto.DOUBLE], ids=_name)
@pytest.mark.parametrize("target", list(FLOATS), ids=_name)
def test_cast_every_rounding_boundary_to_a_small_float(
    target: int, source: int, saturate: int
) -> None:
    dtype = SOURCES[source]
    rng = np.random.default_rng(target)
    bits = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):  # the NaNs among the random bits
        x = np.concatenate([_boundary_values(target, dtype), bits.astype(dtype)]).reshape(-1, 1)
    ours, want = _run(_cast_model(source, target, [None, 1], saturate=saturate), {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("target", list(FLOATS), ids=_name)
def test_cast_before_opset_19_saturates(target: int) -> None:
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 0.3, -0.0], np.float32).reshape(7, 1)
    ours, want = _run(_cast_model(FLOAT, target, [7, 1], opset=13), {"x": x})
    _same_bits(ours[0], want[0])


# -- Cast from float8 / float4 -----------------------------------------------------------


@pytest.mark.parametrize("to", [*SOURCES, TensorProto.INT32], ids=_name)
@pytest.mark.parametrize("source", list(FLOATS), ids=_name)
def test_cast_every_code_of_a_small_float(source: int, to: int) -> None:
    codes = np.arange(256 if source in FLOAT8 else 16, dtype=np.uint8)
    x = codes.view(FLOATS[source]).reshape(-1, 4 if source in FLOAT8 else 2)
    if to == TensorProto.INT32:  # what int32 cannot hold is undefined: finite ones only
        finite = np.isfinite(x.astype(np.float32)).all(axis=1)
        x = x[finite]
    ours, want = _run(_cast_model(source, to, [None, x.shape[1]]), {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("target", list(FLOAT8), ids=_name)
@pytest.mark.parametrize("source", list(FLOAT8), ids=_name)
def test_cast_between_small_floats(source: int, target: int) -> None:
    x = np.arange(256, dtype=np.uint8).view(FLOATS[source])
    for saturate in (0, 1):
        ours, want = _run(_cast_model(source, target, [256], saturate=saturate), {"x": x})
        _same_bits(ours[0], want[0])


# -- float8e8m0 --------------------------------------------------------------------------


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
def test_cast_to_float8e8m0(round_mode: str, saturate: int) -> None:
    rng = np.random.default_rng(8)
    bits = rng.integers(0, 1 << 32, 50000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    powers = np.ldexp(np.float32(1), np.arange(-149, 128)).astype(np.float32)
    edges = np.concatenate(
        [powers, powers * np.float32(1.5), np.nextafter(powers, np.float32(np.inf))]
    )
    x = np.concatenate([bits, edges, -edges, np.array([0, -0.0, np.nan, np.inf], np.float32)])
    proto = _cast_model(
        FLOAT, TensorProto.FLOAT8E8M0, [None], opset=25, saturate=saturate, round_mode=round_mode
    )
    ours, want = _run(proto, {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=_name)
def test_cast_every_float8e8m0_code(to: int) -> None:
    x = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    ours, want = _run(_cast_model(TensorProto.FLOAT8E8M0, to, [256], opset=25), {"x": x})
    _same_bits(ours[0], want[0])


def test_cast_to_float8e8m0_with_an_unknown_round_mode_fails() -> None:
    proto = _cast_model(FLOAT, TensorProto.FLOAT8E8M0, [2], opset=25, round_mode="sideways")
    with pytest.raises(ko.OnnxImportError, match=r"'cast' \(Cast, opset 25\).*round_mode"):
        ko.import_model(proto)


# -- int4, uint4, int2, uint2 ------------------------------------------------------------


@pytest.mark.parametrize("target", list(INTS), ids=_name)
@pytest.mark.parametrize("source", list(SOURCES), ids=_name)
def test_cast_floats_to_small_integers(source: int, target: int) -> None:
    dtype = SOURCES[source]
    ramp = np.arange(-40, 40, 0.25)
    big = [2.0**31, -(2.0**31), 2.0**31 - 128, 3e9, -3e9, 1e20, 65504.0, -65504.0]
    with np.errstate(over="ignore"):  # what float16 cannot hold becomes inf
        x = np.concatenate([ramp, big, [np.nan, np.inf, -np.inf, -0.0]]).astype(dtype)
    ours, want = _run(_cast_model(source, target, [None]), {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("target", list(INTS), ids=_name)
@pytest.mark.parametrize(
    "source", [TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32, TensorProto.INT64], ids=_name
)
def test_cast_integers_to_small_integers_wraps(source: int, target: int) -> None:
    np_type = helper.tensor_dtype_to_np_dtype(source)
    info = np.iinfo(np_type)
    x = np.unique(np.clip(np.arange(-300, 300), info.min, info.max)).astype(np_type)
    ours, want = _run(_cast_model(source, target, [None]), {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize(
    "to",
    [
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.INT64,
    ],
    ids=_name,
)
@pytest.mark.parametrize("source", list(INTS), ids=_name)
def test_cast_every_small_integer(source: int, to: int) -> None:
    bits = 4 if source in (TensorProto.INT4, TensorProto.UINT4) else 2
    signed = source in (TensorProto.INT4, TensorProto.INT2)
    low = -(1 << (bits - 1)) if signed else 0
    x = np.arange(low, low + (1 << bits)).astype(INTS[source]).reshape(1, -1)
    ours, want = _run(_cast_model(source, to, [1, None]), {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (TensorProto.INT4, TensorProto.FLOAT8E4M3FN),
        (TensorProto.FLOAT8E5M2, TensorProto.INT4),
        (TensorProto.FLOAT4E2M1, TensorProto.UINT2),
        (TensorProto.INT2, TensorProto.INT4),
    ],
    ids=lambda t: _name(t),
)
def test_cast_between_small_types(source: int, target: int) -> None:
    codes = np.arange(16, dtype=np.uint8)
    if source in FLOATS:
        x = codes.view(FLOATS[source])
        x = x[np.isfinite(x.astype(np.float32))]
    else:
        x = codes.astype(INTS[source])
    ours, want = _run(_cast_model(source, target, [None]), {"x": x})
    _same_bits(ours[0], want[0])


def test_castlike_takes_the_type_of_a_small_typed_like() -> None:
    node = helper.make_node("CastLike", ["x", "like"], ["y"], name="cl", saturate=0)
    proto = model(
        [node],
        {"x": (FLOAT, [None, 3]), "like": (TensorProto.FLOAT8E5M2, [1])},
        {"y": (TensorProto.FLOAT8E5M2, [None, 3])},
        opset=21,
    )
    x = np.array([[1e6, -0.1, np.nan], [3.3, -7e4, 1e-6]], np.float32)
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    ours, want = _run(proto, {"x": x, "like": like})
    _same_bits(ours[0], want[0])


def test_an_input_of_a_small_type_comes_back_as_it_went_in() -> None:
    node = helper.make_node("Identity", ["x"], ["y"], name="same")
    proto = model([node], {"x": (TensorProto.INT4, [None])}, {"y": (TensorProto.INT4, [None])})
    x = np.array([-8, -1, 0, 7], ml_dtypes.int4)
    (got,) = ko.InferenceSession(proto.SerializeToString()).run(None, {"x": x})
    _same_bits(got, x)


# -- QuantizeLinear / DequantizeLinear ----------------------------------------------------


def _quantize_model(
    target: int, x_shape: list[int], scale: np.ndarray[Any, Any], zero: Any, **attrs: Any
) -> Any:
    inputs = ["x", "scale"] + (["zero"] if zero is not None else [])
    node = helper.make_node("QuantizeLinear", inputs, ["y"], name="q", **attrs)
    proto = model([node], {"x": (FLOAT, x_shape)}, {"y": (target, x_shape)}, opset=21)
    proto.graph.initializer.append(numpy_helper.from_array(scale, "scale"))
    if zero is not None:  # a small type's initializer: from_array makes it from ml_dtypes
        proto.graph.initializer.append(numpy_helper.from_array(zero, "zero"))
    return proto


@pytest.mark.parametrize("target", [*FLOATS, *INTS], ids=_name)
def test_quantize_linear_per_tensor_and_per_axis(target: int) -> None:
    rng = np.random.default_rng(target)
    x = (rng.standard_normal((3, 8)) * 30).astype(np.float32)
    x[0, :4] = [1e6, -1e6, 0.0, -0.0]
    if target in FLOATS:  # an integer type's inf is the reference's int32 overflow
        x[1, :3] = [np.inf, -np.inf, np.nan]
    small = {**FLOATS, **INTS}[target]
    zero_value = 1 if target in (TensorProto.INT4, TensorProto.UINT4) else 0
    for scale, zero in [
        (np.float32(0.5), np.array(zero_value).astype(small)),
        (np.array([0.5, 2.0, 8.0], np.float32), np.full(3, zero_value).astype(small)),
        (np.float32(0.25), None if target != TensorProto.FLOAT4E2M1 else np.array(0, small)),
    ]:
        attrs: dict[str, Any] = {"axis": 0}
        if zero is None:
            attrs["output_dtype"] = target
        ours, want = _run(
            _quantize_model(target, [3, 8], np.asarray(scale), zero, **attrs), {"x": x}
        )
        _same_bits(ours[0], want[0])


@pytest.mark.parametrize("target", list(FLOAT8), ids=_name)
def test_quantize_linear_to_float8_without_saturation(target: int) -> None:
    x = np.array([[1e6, -1e6, 300.0, -0.001, np.nan]], np.float32)
    zero = np.zeros(1, FLOATS[target])
    proto = _quantize_model(target, [1, 5], np.array([0.5], np.float32), zero, saturate=0)
    ours, want = _run(proto, {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("target", [TensorProto.INT4, TensorProto.UINT2], ids=_name)
def test_quantize_linear_blocked(target: int) -> None:
    x = (np.random.default_rng(1).standard_normal((4, 6)) * 4).astype(np.float32)
    scale = np.array(
        [[0.5, 1.0, 2.0, 0.75, 1.25, 3.0], [0.25, 4.0, 1.5, 2.0, 0.5, 1.0]], np.float32
    )
    zero = np.ones((2, 6), np.int8).astype(INTS[target])
    proto = _quantize_model(target, [4, 6], scale, zero, axis=0, block_size=2)
    ours, want = _run(proto, {"x": x})
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("source", [*FLOATS, *INTS], ids=_name)
def test_dequantize_linear(source: int) -> None:
    small = {**FLOATS, **INTS}[source]
    if source in FLOATS:
        x = np.arange(16, dtype=np.uint8).view(small).reshape(2, 8)
        zero = np.zeros(2, small)
    else:
        count = 16 if source in (TensorProto.INT4, TensorProto.UINT4) else 4
        low = -count // 2 if source in (TensorProto.INT4, TensorProto.INT2) else 0
        x = (low + np.arange(16) % count).astype(small).reshape(2, 8)
        zero = np.array([1, 0]).astype(small)
    node = helper.make_node("DequantizeLinear", ["x", "scale", "zero"], ["y"], name="dq", axis=0)
    proto = model(
        [node],
        {"x": (source, [2, None])},
        {"y": (TensorProto.FLOAT16, [2, None])},
        initializers={"scale": np.array([0.5, 3.0], np.float16)},
        opset=21,
    )
    proto.graph.initializer.append(numpy_helper.from_array(zero, "zero"))
    ours, want = _run(proto, {"x": x})
    _same_bits(ours[0], want[0])


def test_dequantize_an_int4_initializer_and_a_float8_constant() -> None:
    weights = np.array([[-8, -3, 0, 7], [1, 2, 3, 4]]).astype(ml_dtypes.int4)
    constant = helper.make_node(
        "Constant",
        [],
        ["c"],
        name="c8",
        value=numpy_helper.from_array(np.array([0.5, -448, 3], ml_dtypes.float8_e4m3fn)),
    )
    dq_w = helper.make_node("DequantizeLinear", ["w", "s"], ["yw"], name="dqw")
    dq_c = helper.make_node("DequantizeLinear", ["c", "s"], ["yc"], name="dqc")
    proto = model(
        [constant, dq_w, dq_c],
        {},
        {"yw": (FLOAT, [2, 4]), "yc": (FLOAT, [3])},
        initializers={"s": np.float32(0.5)},
        opset=21,
    )
    proto.graph.initializer.append(numpy_helper.from_array(weights, "w"))
    ours, want = _run(proto, {})
    for got, expected in zip(ours, want, strict=True):
        _same_bits(got, expected)


# -- ops that move elements ----------------------------------------------------------------

MOVED = {
    **FLOATS,
    **INTS,
    TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
    TensorProto.BFLOAT16: ml_dtypes.bfloat16,
}


def _every_code(elem: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """``shape``'s worth of values of the type, through every code it has (NaNs too)."""
    dtype = np.dtype(MOVED[elem])
    count = int(np.prod(shape))
    if dtype.kind in "iu":  # ml_dtypes' small integers: their range of values
        info = ml_dtypes.iinfo(dtype)
        values = np.arange(count) % (int(info.max) - int(info.min) + 1) + int(info.min)
        return values.astype(dtype).reshape(shape)
    codes = np.arange(count) % (1 << (8 * dtype.itemsize))
    return codes.astype(f"u{dtype.itemsize}").view(dtype).reshape(shape)


def _moving_model(elem: int, nodes: list[Any], outputs: dict[str, Any], **kw: Any) -> Any:
    return model(nodes, {"x": (elem, [2, 3, 4])}, outputs, opset=kw.pop("opset", 25), **kw)


@pytest.mark.parametrize("elem", list(MOVED), ids=_name)
def test_small_types_move_through_the_ops_that_move_elements(elem: int) -> None:
    """Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Pad (constant, edge, reflect) and
    Shape/Size over every small type: the same codes where onnx's reference puts them
    (the converters run on the codes; Pad's constant is a coded value too)."""
    x = _every_code(elem, (2, 3, 4))
    pad_value = x.reshape(-1)[5:6].reshape(())
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Unsqueeze", ["x", "axes"], ["u"]),
        helper.make_node("Squeeze", ["u", "axes"], ["s"]),
        helper.make_node("Flatten", ["t"], ["f"], axis=2),
        helper.make_node("Pad", ["x", "pads", "value"], ["pc"], mode="constant"),
        helper.make_node("Pad", ["x", "pads"], ["pz"]),  # no value: the type's zero
        helper.make_node("Pad", ["x", "pads"], ["pe"], mode="edge"),
        helper.make_node("Pad", ["x", "pads"], ["pr"], mode="reflect"),
        helper.make_node("Shape", ["t"], ["shape_of"]),
        helper.make_node("Size", ["f"], ["size_of"]),
    ]
    outputs = dict.fromkeys(("r", "t", "s", "f", "pc", "pz", "pe", "pr"), (elem, None))
    outputs |= {"shape_of": (TensorProto.INT64, None), "size_of": (TensorProto.INT64, None)}
    proto = _moving_model(elem, nodes, outputs)
    for name, value in {
        "shape": np.array([4, -1], np.int64),
        "axes": np.array([1], np.int64),
        "pads": np.array([0, 1, 1, 1, 0, 2], np.int64),
        "value": pad_value,
    }.items():
        proto.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    ours, want = _run(proto, {"x": x})
    for name, got, expected in zip(outputs, ours, want, strict=True):
        got = np.asarray(got)
        if elem == TensorProto.FLOAT8E8M0 and name == "pz":
            # The type has no zero: kernloom pads with code 0 (2^-127); the reference
            # casts 0 to it, which is NaN (the README says so).
            expected = expected.copy()
            expected.view(np.uint8)[expected.view(np.uint8) == 0xFF] = 0
            x_codes = x.view(np.uint8)
            assert np.array_equal(got.view(np.uint8)[0:2, 1:4, 1:5], x_codes)
        if elem in INTS:  # by value: the reference may leave bits above the small width
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got.astype(np.int64), expected.astype(np.int64))
        else:
            _same_bits(got, expected)
    np.testing.assert_array_equal(x, _every_code(elem, (2, 3, 4)))  # the feed is untouched


def test_a_small_type_moved_then_cast_keeps_its_values() -> None:
    """float8 codes through Transpose and Reshape, then a Cast to float32: the decoded
    values equal the reference's (the codes kept their meaning through the moves)."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("Cast", ["r"], ["y"], to=FLOAT),
    ]
    proto = _moving_model(TensorProto.FLOAT8E4M3FN, nodes, {"y": (FLOAT, None)})
    proto.graph.initializer.append(numpy_helper.from_array(np.array([6, 4], np.int64), "shape"))
    x = _every_code(TensorProto.FLOAT8E4M3FN, (2, 3, 4))
    ours, want = _run(proto, {"x": x})
    np.testing.assert_array_equal(ours[0], want[0])


@pytest.mark.parametrize("elem", list(MOVED), ids=_name)
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
def test_constant_of_shape_of_a_small_type(elem: int, static: bool) -> None:
    """ConstantOfShape's value of a small type fills the shape with its code, the shape
    known at import or fed."""
    value = _every_code(elem, (7,)).reshape(-1)[3:4]
    tensor = numpy_helper.from_array(value, "v")
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], value=tensor)
    proto = model(
        [node], {} if static else {"s": (TensorProto.INT64, [2])}, {"y": (elem, None)}, opset=25
    )
    feeds: dict[str, Any] = {}
    if static:
        proto.graph.initializer.append(numpy_helper.from_array(np.array([2, 3], np.int64), "s"))
    else:
        feeds["s"] = np.array([2, 3], np.int64)
    ours, want = _run(proto, feeds)
    got = np.asarray(ours[0])
    if elem in INTS:
        assert got.dtype == want[0].dtype
        np.testing.assert_array_equal(got.astype(np.int64), want[0].astype(np.int64))
    else:
        _same_bits(got, want[0])


@pytest.mark.parametrize("elem", list(FLOAT8), ids=_name)
def test_isnan_and_isinf_of_every_float8_code(elem: int) -> None:
    """IsNaN and IsInf (both signs, one, none) of every code of each float8 type, against
    onnx's reference: decoded to float32 for them, exactly."""
    x = (np.arange(256) % 256).astype(np.uint8).view(FLOAT8[elem])
    nodes = [
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("IsInf", ["x"], ["inf"]),
        helper.make_node("IsInf", ["x"], ["pos"], detect_negative=0),
        helper.make_node("IsInf", ["x"], ["neg"], detect_positive=0),
    ]
    outs = {name: (TensorProto.BOOL, [256]) for name in ("nan", "inf", "pos", "neg")}
    proto = model(nodes, {"x": (elem, [256])}, outs, opset=20)
    ours, want = _run(proto, {"x": x})
    for got, expected in zip(ours, want, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_moving_op_refuses_inputs_of_two_small_types_naming_the_node() -> None:
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], name="padder")
    proto = model(
        [node],
        {"x": (TensorProto.FLOAT8E4M3FN, [2]), "value": (TensorProto.FLOAT8E5M2, [])},
        {"y": (TensorProto.FLOAT8E4M3FN, None)},
        opset=21,
    )
    proto.graph.initializer.append(numpy_helper.from_array(np.array([1, 1], np.int64), "pads"))
    with pytest.raises(
        ko.OnnxImportError,
        match=r"'padder' \(Pad, opset 21\).*float8e4m3fn and float8e5m2.*cast one to the other",
    ):
        ko.import_model(proto)


# -- refusals ------------------------------------------------------------------------------


def test_an_op_that_does_not_take_a_small_type_names_the_node_op_opset_and_type() -> None:
    """float8 arithmetic stays refused though bfloat16's runs as float32."""
    node = helper.make_node("Add", ["x", "x"], ["y"], name="adder")
    proto = model(
        [node],
        {"x": (TensorProto.FLOAT8E4M3FN, [2])},
        {"y": (TensorProto.FLOAT8E4M3FN, [2])},
        opset=21,
    )
    with pytest.raises(
        ko.OnnxImportError,
        match=r"'adder' \(Add, opset 21\).*float8e4m3fn values are supported by Cast, "
        r"CastLike, QuantizeLinear, DequantizeLinear, Identity, Constant, Reshape, Transpose, "
        r"Squeeze, Unsqueeze, Flatten, Pad, Shape, Size, ConstantOfShape, IsNaN, IsInf, not by "
        r"Add",
    ):
        ko.import_model(proto)


def test_a_feed_of_the_wrong_dtype_for_a_small_type_names_the_input() -> None:
    node = helper.make_node("Cast", ["x"], ["y"], name="c", to=FLOAT)
    proto = model([node], {"x": (TensorProto.UINT4, [2])}, {"y": (FLOAT, [2])})
    session = ko.InferenceSession(proto.SerializeToString())
    with pytest.raises(ko.OnnxImportError, match=r"input 'x' is uint4: .*ml_dtypes.uint4"):
        session.run(None, {"x": np.array([1, 2], np.uint8)})


# -- bfloat16 ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", list(SOURCES), ids=_name)
def test_cast_to_bfloat16(source: int) -> None:
    """Every float16; float32 around every bfloat16 rounding tie and random bits; the
    same in float64 (rounded through float32, as ml_dtypes does)."""
    dtype = SOURCES[source]
    if dtype is np.float16:
        x = _every_float16()
    else:
        rng = np.random.default_rng(16)
        bits = rng.integers(0, 1 << 32, 100000, dtype=np.uint64).astype(np.uint32)
        ties = (bits & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
        edges = np.concatenate([ties, ties + np.uint32(1), ties - np.uint32(1), bits])
        specials = np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7FA00001, 0xFF800001, 0x80000000])
        x32 = np.concatenate([edges, specials.astype(np.uint32)]).view(np.float32)
        with np.errstate(invalid="ignore"):
            x = x32.astype(dtype)
    proto = _cast_model(source, TensorProto.BFLOAT16, [None])
    ours, want = _run(proto, {"x": x}, ieee=source == TensorProto.DOUBLE)
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("to", [*SOURCES, TensorProto.FLOAT8E4M3FN], ids=_name)
def test_cast_every_bfloat16(to: int) -> None:
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = codes.view(ml_dtypes.bfloat16)
    if to == TensorProto.FLOAT8E4M3FN:  # through float32, exact either way
        x = x[np.isfinite(x.astype(np.float32))]
    proto = _cast_model(TensorProto.BFLOAT16, to, [None])
    ours, want = _run(proto, {"x": x}, ieee=to == TensorProto.DOUBLE)
    _same_bits(ours[0], want[0])


def test_castlike_to_a_bfloat16_like_then_added_in_bfloat16() -> None:
    """CastLike gives codes; Add takes them as float32 and rounds its sum back
    (``kernloom.onnx._convert``; more in test_onnx_bfloat16.py)."""
    cast = helper.make_node("CastLike", ["x", "like"], ["y"], name="cl")
    proto = model(
        [cast],
        {"x": (TensorProto.FLOAT16, [3]), "like": (TensorProto.BFLOAT16, [1])},
        {"y": (TensorProto.BFLOAT16, [3])},
        opset=21,
    )
    feeds = {
        "x": np.array([1.5, -np.inf, 3e4], np.float16),
        "like": np.zeros(1, ml_dtypes.bfloat16),
    }
    ours, want = _run(proto, feeds)
    _same_bits(ours[0], want[0])
    add = helper.make_node("Add", ["y", "y"], ["z"], name="adder")
    proto = model(
        [cast, add],
        {"x": (TensorProto.FLOAT16, [3]), "like": (TensorProto.BFLOAT16, [1])},
        {"z": (TensorProto.BFLOAT16, [3])},
        opset=21,
    )
    ours, want = _run(proto, feeds)
    _same_bits(ours[0], want[0])


@pytest.mark.parametrize("target", [TensorProto.FLOAT8E4M3FN, TensorProto.INT4], ids=_name)
def test_quantize_float16_by_a_float32_scale_divides_in_float32(target: int) -> None:
    x = np.array([[0.1, 70.7, -3.3, 1000.0, 2.5]], np.float16)
    node = helper.make_node("QuantizeLinear", ["x", "scale"], ["y"], name="q", output_dtype=target)
    proto = model(
        [node],
        {"x": (TensorProto.FLOAT16, [1, 5])},
        {"y": (target, [1, 5])},
        initializers={"scale": np.float32(0.3)},
        opset=21,
    )
    ours, want = _run(proto, {"x": x})
    _same_bits(ours[0], want[0])
