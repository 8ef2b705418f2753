"""ONNX RNN, GRU and LSTM imported as unrolled time steps, each model checked against
onnxruntime (sequence_lens, activations with parameters, clip) or onnx's reference
evaluator (layout 1) -- never against kernloom itself. The onnx_helpers
``check_against_oracle`` compares with rtol alone, too tight for values near 0 after
several float32 steps; ``_check`` adds an atol."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko

SEQ, BATCH, INPUT, HIDDEN = 4, 3, 5, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INT32 = onnx.TensorProto.INT32


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _weights(op: str, dirs: int, rng: np.random.Generator) -> dict[str, np.ndarray[Any, Any]]:
    gates = GATES[op]
    return {
        "W": rng.standard_normal((dirs, gates * HIDDEN, INPUT)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)).astype(np.float32) * 0.5,
        "B": rng.standard_normal((dirs, 2 * gates * HIDDEN)).astype(np.float32) * 0.5,
    }


def _recurrent(
    op: str,
    *,
    direction: str = "forward",
    inputs: tuple[str, ...] = ("X", "W", "R", "B"),
    layout: int = 0,
    opset: int = 14,
    name: str = "rec",
    seq: int = SEQ,
    **attrs: Any,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray[Any, Any]]]:
    """A one-node model of ``op`` with every input given in ``inputs`` fed (names past
    B: sequence_lens, initial_h, initial_c, P; "" skips one), and its feeds."""
    dirs = 2 if direction == "bidirectional" else 1
    rng = _rng(len(inputs) + 7 * layout + dirs)
    feeds = _weights(op, dirs, rng)
    x_shape = [BATCH, seq, INPUT] if layout else [seq, BATCH, INPUT]
    state_shape = [BATCH, dirs, HIDDEN] if layout else [dirs, BATCH, HIDDEN]
    feeds["X"] = rng.standard_normal(x_shape).astype(np.float32)
    feeds["sequence_lens"] = np.array([SEQ, 2, 1], np.int32)
    feeds["initial_h"] = rng.standard_normal(state_shape).astype(np.float32)
    feeds["initial_c"] = rng.standard_normal(state_shape).astype(np.float32)
    feeds["P"] = rng.standard_normal((dirs, 3 * HIDDEN)).astype(np.float32)
    feeds = {k: v for k, v in feeds.items() if k in inputs}
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(
        op, list(inputs), outputs, name=name, direction=direction, hidden_size=HIDDEN, **attrs
    )
    typed = {k: (INT32 if k == "sequence_lens" else FLOAT, list(v.shape)) for k, v in feeds.items()}
    return model([node], typed, dict.fromkeys(outputs, (FLOAT, None)), opset=opset), feeds


def _check(proto: onnx.ModelProto, feeds: dict[str, Any], oracle: str) -> list[Any]:
    """``check_against_oracle`` to float32 rounding (the step's sums run in another order,
    and values near 0 differ by about 1e-7 after a few steps)."""
    return check_against_oracle(proto, feeds, oracle=oracle, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_with_initial_state(op: str, direction: str) -> None:
    inputs = ("X", "W", "R", "B", "", "initial_h")
    if op == "LSTM":
        inputs = (*inputs, "initial_c")
    _check(*_recurrent(op, direction=direction, inputs=inputs), "onnxruntime")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_no_bias_no_initial_state(op: str) -> None:
    _check(*_recurrent(op, inputs=("X", "W", "R")), "reference")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens_shorter_than_the_sequence(op: str, direction: str) -> None:
    inputs = ("X", "W", "R", "B", "sequence_lens", "initial_h")
    ours = _check(*_recurrent(op, direction=direction, inputs=inputs), "onnxruntime")
    y, y_h = ours[0], ours[1]
    # Batch entry 2 has one step: zeros past it, and Y_h is that step's value.
    assert not y[1:, :, 2].any() and not y[2:, :, 1].any()
    np.testing.assert_array_equal(y_h[0, 2], y[0, 0, 2])
    np.testing.assert_array_equal(y_h[0, 1], y[0 if direction == "reverse" else 1, 0, 1])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_layout_1(op: str, direction: str) -> None:
    inputs = ("X", "W", "R", "B", "", "initial_h")
    if op == "LSTM":
        inputs = (*inputs, "initial_c")
    _check(*_recurrent(op, direction=direction, inputs=inputs, layout=1), "reference")


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_peepholes(direction: str) -> None:
    inputs = ("X", "W", "R", "B", "", "initial_h", "initial_c", "P")
    _check(*_recurrent("LSTM", direction=direction, inputs=inputs), "onnxruntime")


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(linear_before_reset: int, direction: str) -> None:
    inputs = ("X", "W", "R", "B", "", "initial_h")
    proto, feeds = _recurrent(
        "GRU", direction=direction, inputs=inputs, linear_before_reset=linear_before_reset
    )
    _check(proto, feeds, "onnxruntime")


def test_opset_7_and_22() -> None:
    for opset in (7, 22):
        _check(*_recurrent("GRU", opset=opset, linear_before_reset=1), "onnxruntime")


@pytest.mark.parametrize(
    ("op", "activations", "alpha", "beta"),
    [
        ("RNN", ["Relu"], [], []),
        ("RNN", ["LeakyRelu", "Elu"], [0.3, 0.7], []),
        ("GRU", ["HardSigmoid", "Softsign"], [0.3], [0.4]),
        ("LSTM", ["Sigmoid", "Softplus", "Tanh"], [], []),
    ],
)
def test_activations_and_clip(
    op: str, activations: list[str], alpha: list[float], beta: list[float]
) -> None:
    direction = "bidirectional" if op == "RNN" and len(activations) == 2 else "forward"
    attrs: dict[str, Any] = {"activations": activations, "clip": 0.8}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    _check(*_recurrent(op, direction=direction, **attrs), "onnxruntime")


def test_unsupported_activation_names_the_node() -> None:
    proto, _ = _recurrent("RNN", activations=["Affine"], activation_alpha=[1.0], name="odd_rnn")
    with pytest.raises(ko.OnnxImportError, match=r"'odd_rnn' \(RNN, opset 14\).*'Affine'"):
        ko.InferenceSession(proto.SerializeToString())


def test_input_forget_names_the_node() -> None:
    proto, _ = _recurrent("LSTM", input_forget=1, name="coupled")
    with pytest.raises(ko.OnnxImportError, match=r"'coupled' \(LSTM.*input_forget"):
        ko.InferenceSession(proto.SerializeToString())


def _open_dims(proto: onnx.ModelProto, names: dict[str, list[int]]) -> None:
    """Make the given dimensions of the named graph inputs symbolic."""
    for value in proto.graph.input:
        for axis in names.get(value.name, []):
            value.type.tensor_type.shape.dim[axis].dim_param = f"{value.name}_{axis}"


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lengths", [False, True])
def test_sequence_length_known_at_run_time_only(op: str, direction: str, lengths: bool) -> None:
    """A symbolic sequence length (and batch) converts to a kl.while_loop over the steps;
    one session runs sequences of two lengths."""
    inputs = ("X", "W", "R", "B", "sequence_lens" if lengths else "", "initial_h")
    proto, feeds = _recurrent(op, direction=direction, inputs=inputs)
    _open_dims(proto, {"X": [0, 1], "initial_h": [1], "sequence_lens": [0]})
    _check(proto, feeds, "onnxruntime")
    feeds["X"] = feeds["X"][:2]
    if lengths:
        feeds["sequence_lens"] = np.array([2, 2, 1], np.int32)
    _check(proto, feeds, "onnxruntime")


def test_sequence_length_at_run_time_layout_1() -> None:
    proto, feeds = _recurrent("LSTM", direction="bidirectional", layout=1)
    _open_dims(proto, {"X": [1]})
    _check(proto, feeds, "reference")


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_empty_sequence_keeps_the_initial_state(op: str) -> None:
    """ONNX's definition, checked directly (onnxruntime aborts on a length of 0): no
    steps, so Y is empty and Y_h (Y_c) the initial state."""
    inputs = ("X", "W", "R", "B", "", "initial_h")
    if op == "LSTM":
        inputs = (*inputs, "initial_c")
    proto, feeds = _recurrent(op, direction="bidirectional", inputs=inputs, seq=0)
    ours = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)
    assert ours[0].shape == (0, 2, BATCH, HIDDEN)
    np.testing.assert_array_equal(ours[1], feeds["initial_h"])
    if op == "LSTM":
        np.testing.assert_array_equal(ours[2], feeds["initial_c"])
