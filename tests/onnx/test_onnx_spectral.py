"""DFT, STFT and MelWeightMatrix: converters composed of kernloom's FFT ops, checked
against onnx's reference evaluator (numpy.fft) with sizes, lengths and axes known at
import time and only at run time, and their import errors, which must name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom as kl
import kernloom.onnx as ko

RNG = np.random.default_rng(7)
DOUBLE, HALF = TensorProto.DOUBLE, TensorProto.FLOAT16
NP = {FLOAT: np.float32, DOUBLE: np.float64, HALF: np.float16}
TOLERANCE = {FLOAT: (1e-4, 1e-4), DOUBLE: (1e-10, 1e-10), HALF: (1e-2, 2e-2)}


def _signal(shape: tuple[int, ...], elem: int = FLOAT) -> np.ndarray[Any, Any]:
    return RNG.standard_normal(shape).astype(NP[elem])


# -- DFT --------------------------------------------------------------------------------------


def _dft(
    *,
    opset: int,
    shape: tuple[int, ...],
    axis: int | None,
    length: int | None,
    static: bool,
    elem: int = FLOAT,
    **attrs: int,
) -> tuple[Any, dict[str, Any]]:
    """A DFT model and its feeds: ``static`` gives dft_length and the axis as initializers
    and the input's full shape; otherwise they are fed, and only the rank and the last
    dimension are known when imported."""
    names = ["x", "n" if length is not None else ""]
    inits: dict[str, Any] = {}
    feeds: dict[str, Any] = {"x": _signal(shape, elem)}
    known = list(shape) if static else [None] * (len(shape) - 1) + [shape[-1]]
    inputs: dict[str, Any] = {"x": (elem, known)}
    if opset < 20 and axis is not None:
        attrs["axis"] = axis
    values = {"n": length, "axis": axis if opset >= 20 else None}
    if opset >= 20 and axis is not None:
        names.append("axis")
    for name, value in values.items():
        if value is None:
            continue
        if static:
            inits[name] = np.asarray(value, np.int64)
        else:
            inputs[name] = (INT64, [])
            feeds[name] = np.asarray(value, np.int64)
    node = helper.make_node("DFT", names, ["y"], name="dft", **attrs)
    return model([node], inputs, {"y": (elem, None)}, initializers=inits, opset=opset), feeds


DFT_CASES = [
    # (shape, axis, dft_length, inverse, onesided)
    ((2, 6, 4, 2), 1, None, 0, 0),  # complex forward, the default axis
    ((2, 6, 4, 2), -2, 6, 1, 0),  # complex inverse over the last signal axis
    ((2, 6, 4, 1), 2, 4, 0, 1),  # real forward, one-sided (RFFT)
    ((2, 6, 4, 1), 0, 5, 0, 1),  # RFFT, zero-padded to an odd length over axis 0
    ((2, 6, 4, 2), -3, 3, 0, 0),  # cropped
    ((2, 6, 4, 2), 1, 9, 1, 0),  # inverse, zero-padded
    ((2, 6, 4, 2), 1, None, 1, 1),  # one-sided inverse (IRFFT): length 2 * (6 - 1)
    ((2, 6, 4, 2), -2, 7, 1, 1),  # IRFFT of an odd length, frequencies cropped
    ((2, 3, 4, 2), 1, 8, 1, 1),  # IRFFT, frequencies zero-padded
    ((2, 6, 4, 1), 1, None, 1, 0),  # inverse of a real input
    ((2, 6, 4, 2), 1, 6, 0, 1),  # one-sided forward of a complex input (onnx's reference)
    ((5, 1), 0, None, 0, 0),  # a vector: rank 2
    ((3, 5, 1), 1, 1, 0, 1),  # length 1
]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize(("shape", "axis", "length", "inverse", "onesided"), DFT_CASES)
def test_dft(
    opset: int,
    static: bool,
    shape: tuple[int, ...],
    axis: int,
    length: int | None,
    inverse: int,
    onesided: int,
) -> None:
    proto, feeds = _dft(
        opset=opset,
        shape=shape,
        axis=axis,
        length=length,
        static=static,
        inverse=inverse,
        onesided=onesided,
    )
    rtol, atol = TOLERANCE[FLOAT]
    check_against_oracle(proto, feeds, rtol=rtol, atol=atol)


@pytest.mark.parametrize("elem", [DOUBLE, HALF], ids=["float64", "float16"])
@pytest.mark.parametrize(("inverse", "onesided"), [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_dft_dtypes(elem: int, inverse: int, onesided: int) -> None:
    last = 1 if onesided and not inverse else 2
    proto, feeds = _dft(
        opset=20,
        shape=(3, 8, last),
        axis=None,  # opset 20's default: -2
        length=None,
        static=True,
        elem=elem,
        inverse=inverse,
        onesided=onesided,
    )
    rtol, atol = TOLERANCE[elem]
    check_against_oracle(proto, feeds, rtol=rtol, atol=atol)


def test_dft_17_default_axis_is_1() -> None:
    proto, feeds = _dft(opset=17, shape=(2, 5, 3, 2), axis=None, length=None, static=True)
    check_against_oracle(proto, feeds, rtol=1e-4, atol=1e-4)


def test_dft_round_trip_gives_the_signal_back() -> None:
    """A forward then inverse DFT (one graph) of a real signal: the signal, zero imaginary."""
    forward = helper.make_node("DFT", ["x"], ["f"], name="forward", axis=1)
    inverse = helper.make_node("DFT", ["f"], ["y"], name="inverse", axis=1, inverse=1)
    proto = model([forward, inverse], {"x": (FLOAT, [2, 8, 1])}, {"y": (FLOAT, None)})
    x = _signal((2, 8, 1))
    (y,) = check_against_oracle(proto, {"x": x}, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y[..., 0], x[..., 0], atol=1e-5)
    np.testing.assert_allclose(y[..., 1], 0, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "attrs", "length", "message"),
    [
        ((2, 4, 2), {"axis": -1}, None, r"axis -1 is out of range .* \[-3, -2\] or \[0, 1\]"),
        ((2, 4, 2), {"axis": 2}, None, "axis 2 is out of range"),
        ((2, 4, 3), {}, None, "last dimension is 3 at import time; it must be 1"),
        ((2, 4, 2), {}, 0, "dft_length must be positive, not 0"),
        ((2,), {"axis": 0}, None, "rank 2 or more"),
    ],
)
def test_dft_errors_name_the_node(
    shape: tuple[int, ...], attrs: dict[str, int], length: int | None, message: str
) -> None:
    node = helper.make_node(
        "DFT", ["x", "n" if length is not None else ""], ["y"], name="dft", **attrs
    )
    inits = {} if length is None else {"n": np.asarray(length, np.int64)}
    proto = model([node], {"x": (FLOAT, list(shape))}, {"y": (FLOAT, None)}, initializers=inits)
    with pytest.raises(ko.OnnxImportError, match=rf"'dft' \(DFT, opset 17\).*{message}"):
        ko.import_model(proto)


def test_dft_of_an_integer_signal_is_refused_naming_the_node() -> None:
    node = helper.make_node("DFT", ["x"], ["y"], name="dft")
    proto = model([node], {"x": (TensorProto.INT32, [2, 4, 1])}, {"y": (FLOAT, None)}, opset=20)
    with pytest.raises(
        ko.OnnxImportError, match=r"'dft' \(DFT, opset 20\).*int32 signals are not supported"
    ):
        ko.import_model(proto)


def test_dft_with_an_unknown_last_dimension_is_refused_naming_the_node() -> None:
    node = helper.make_node("DFT", ["x"], ["y"], name="dft")
    proto = model([node], {"x": (FLOAT, [2, 4, None])}, {"y": (FLOAT, None)}, opset=20)
    with pytest.raises(ko.OnnxImportError, match=r"'dft' \(DFT, opset 20\).*unknown at import"):
        ko.import_model(proto)


# -- STFT -------------------------------------------------------------------------------------


def _stft(
    *,
    length: int,
    parts: int,
    step: int,
    window: int | None,
    frame_length: int | None,
    static: bool,
    **attrs: int,
) -> tuple[Any, dict[str, Any]]:
    feeds: dict[str, Any] = {"signal": _signal((2, length, parts))}
    inputs: dict[str, Any] = {"signal": (FLOAT, [2, length if static else None, parts])}
    inits: dict[str, Any] = {}
    names = ["signal", "step", "window" if window else "", "frame_length" if frame_length else ""]
    values: dict[str, Any] = {"step": np.asarray(step, np.int64)}
    if window:
        values["window"] = np.hanning(window).astype(np.float32)
    if frame_length:
        values["frame_length"] = np.asarray(frame_length, np.int64)
    for name, value in values.items():
        if static:
            inits[name] = value
        else:
            elem = FLOAT if value.dtype == np.float32 else INT64
            inputs[name] = (elem, [None] * value.ndim)
            feeds[name] = value
    node = helper.make_node("STFT", names, ["y"], name="stft", **attrs)
    return model([node], inputs, {"y": (FLOAT, None)}, initializers=inits), feeds


STFT_CASES = [
    # (length, parts, frame_step, window, frame_length, onesided)
    (32, 1, 8, 16, None, 1),  # a Hann window sets the frame length
    (32, 1, 8, 16, 16, 1),  # both, equal
    (30, 1, 7, None, 10, 1),  # a rectangular window; the tail that makes no frame is dropped
    (30, 1, 7, None, 10, 0),  # two-sided
    (20, 2, 5, 8, None, 0),  # a complex signal
    (12, 1, 3, None, None, 1),  # one frame of the whole signal
    (9, 1, 1, None, 9, 1),  # an odd frame length
]


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize(
    ("length", "parts", "step", "window", "frame_length", "onesided"), STFT_CASES
)
def test_stft(
    static: bool,
    length: int,
    parts: int,
    step: int,
    window: int | None,
    frame_length: int | None,
    onesided: int,
) -> None:
    if not static and window is None and frame_length is None:
        pytest.skip("the frame length is then the signal's, which is only known at run time")
    proto, feeds = _stft(
        length=length,
        parts=parts,
        step=step,
        window=window,
        frame_length=frame_length,
        static=static,
        onesided=onesided,
    )
    check_against_oracle(proto, feeds, rtol=1e-4, atol=1e-4)


def test_stft_frame_length_from_a_signal_only_known_at_run_time() -> None:
    node = helper.make_node("STFT", ["signal", "step"], ["y"], name="stft")
    proto = model(
        [node],
        {"signal": (FLOAT, [1, None, 1])},
        {"y": (FLOAT, None)},
        initializers={"step": np.asarray(4, np.int64)},
    )
    check_against_oracle(proto, {"signal": _signal((1, 10, 1))}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("length", "step", "window", "frame_length", "shape", "message"),
    [
        (16, 4, 8, 6, None, "the window's length 8 must equal frame_length 6"),
        (6, 2, None, 8, None, "the signal's length 6 is shorter than frame_length 8"),
        (16, 0, None, 4, None, "frame_step must be positive, not 0"),
        (16, 2, None, 4, [16, 1], r"the signal must have rank 3"),
    ],
)
def test_stft_errors_name_the_node(
    length: int,
    step: int,
    window: int | None,
    frame_length: int | None,
    shape: list[int] | None,
    message: str,
) -> None:
    proto, _ = _stft(
        length=length, parts=1, step=step, window=window, frame_length=frame_length, static=True
    )
    if shape is not None:
        del proto.graph.input[0].type.tensor_type.shape.dim[0]
    with pytest.raises(ko.OnnxImportError, match=rf"'stft' \(STFT, opset 17\).*{message}"):
        ko.import_model(proto)


# -- MelWeightMatrix --------------------------------------------------------------------------

MEL_CASES = [
    # (num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz)
    (8, 16, 8192, 0.0, 4096.0),  # onnx's own case
    (10, 64, 16000, 20.0, 8000.0),
    (4, 15, 8000, 300.0, 3400.0),  # an odd dft_length
    (20, 32, 16000, 0.0, 8000.0),  # filters narrower than a bin: single ones
    (0, 8, 8000, 0.0, 4000.0),  # no filters
]


@pytest.mark.parametrize("static", [True, False], ids=["import", "runtime"])
@pytest.mark.parametrize("values", MEL_CASES)
@pytest.mark.parametrize("edges", [FLOAT, DOUBLE], ids=["float32-edges", "float64-edges"])
def test_mel_weight_matrix(values: tuple[Any, ...], edges: int, static: bool) -> None:
    names = ["bins", "dft_length", "rate", "lower", "upper"]
    arrays = [np.asarray(v, np.int64) for v in values[:3]]
    arrays += [np.asarray(v, NP[edges]) for v in values[3:]]
    node = helper.make_node("MelWeightMatrix", names, ["y"], name="mel")
    inputs: dict[str, Any] = {}
    feeds: dict[str, Any] = {}
    if not static:
        inputs = {
            n: (INT64 if a.dtype == np.int64 else edges, [])
            for n, a in zip(names, arrays, strict=True)
        }
        feeds = dict(zip(names, arrays, strict=True))
    inits = dict(zip(names, arrays, strict=True)) if static else None
    proto = model([node], inputs, {"y": (FLOAT, None)}, initializers=inits)
    (matrix,) = check_against_oracle(proto, feeds)
    assert matrix.shape == (values[1] // 2 + 1, values[0])
    assert values[0] == 0 or matrix.max() == 1  # every case has a filter's peak


@pytest.mark.parametrize("output", [DOUBLE, HALF, TensorProto.INT32])
def test_mel_weight_matrix_output_datatype(output: int) -> None:
    names = ["bins", "dft_length", "rate", "lower", "upper"]
    arrays = [np.asarray(v, np.int64) for v in (6, 32, 8000)]
    arrays += [np.asarray(v, np.float32) for v in (100.0, 4000.0)]
    node = helper.make_node("MelWeightMatrix", names, ["y"], name="mel", output_datatype=output)
    proto = model(
        [node], {}, {"y": (output, None)}, initializers=dict(zip(names, arrays, strict=True))
    )
    check_against_oracle(proto, {})


# -- run-time checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opset", "length", "axis", "rule"),
    [
        (20, 0, -2, "dft/dft_length_must_be_positive"),
        (17, -3, 1, "dft/dft_length_must_be_positive"),
        (20, 4, -1, "dft/axis_must_be_in_-3_to_-2_or_0_to_1"),
        (20, 4, 2, "dft/axis_must_be_in_-3_to_-2_or_0_to_1"),
    ],
)
def test_dft_values_refused_at_import_fail_at_run_time_naming_the_rule(
    opset: int, length: int, axis: int, rule: str
) -> None:
    proto, feeds = _dft(opset=opset, shape=(2, 4, 2), axis=axis, length=length, static=False)
    session = ko.InferenceSession(proto.SerializeToString())
    with pytest.raises(kl.KernelError, match=rf"'{rule}' \(op Assert\): assertion failed"):
        session.run(None, feeds)


def test_stft_frame_step_refused_at_import_fails_at_run_time_naming_the_rule() -> None:
    proto, feeds = _stft(length=16, parts=1, step=4, window=None, frame_length=4, static=False)
    session = ko.InferenceSession(proto.SerializeToString())
    feeds["step"] = np.asarray(0, np.int64)
    with pytest.raises(kl.KernelError, match=r"'stft/frame_step_must_be_positive' \(op Assert\)"):
        session.run(None, feeds)
