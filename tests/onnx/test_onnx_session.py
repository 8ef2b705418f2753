"""kernloom.onnx.InferenceSession behaves as onnxruntime's for the same model."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import FLOAT, model

import kernloom as kl
import kernloom.onnx as ko


def _model() -> bytes:
    proto = model(
        [
            helper.make_node("Add", ["x", "bias"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
            helper.make_node("Neg", ["s"], ["z"]),
        ],
        {"x": (FLOAT, ["batch", 3])},
        {"y": (FLOAT, ["batch", 3]), "z": (FLOAT, ["batch", 3])},
        initializers={"bias": np.array([1.0, -1.0, 0.5], np.float32)},
    )
    return proto.SerializeToString()


def test_inputs_outputs_and_run_as_onnxruntime() -> None:
    session = ko.InferenceSession(_model(), config=kl.SessionConfig(inter_op_threads=1))
    (arg,) = session.get_inputs()
    assert (arg.name, arg.shape, arg.type) == ("x", ["batch", 3], "tensor(float)")
    assert [o.name for o in session.get_outputs()] == ["y", "z"]
    x = np.array([[1.0, 2.0, -3.0], [0.0, 0.0, 0.0]], np.float32)
    z, y = session.run(["z", "y"], {"x": x})
    expected = x + np.array([1.0, -1.0, 0.5], np.float32)
    np.testing.assert_array_equal(y, np.maximum(expected, 0))
    np.testing.assert_array_equal(z, -expected)
    assert len(session.run(None, {"x": x})) == 2


def test_bad_feeds_and_fetches_are_named() -> None:
    session = ko.InferenceSession(_model())
    x = np.zeros((1, 3), np.float32)
    with pytest.raises(ko.OnnxImportError, match=r"\['w'\] are not outputs"):
        session.run(["w"], {"x": x})
    with pytest.raises(ko.OnnxImportError, match=r"\['q'\] are not inputs"):
        session.run(None, {"x": x, "q": x})
    with pytest.raises(ko.OnnxImportError, match=r"\['x'\] must be fed"):
        session.run(None, {})
    with pytest.raises(kl.KernloomError, match="x"):
        session.run(None, {"x": np.zeros((1, 4), np.float32)})


def test_sessions_end_their_threads_when_dropped_or_closed() -> None:
    import gc
    import threading

    x = {"x": np.zeros((1, 3), np.float32)}
    before = threading.active_count()
    for _ in range(20):
        ko.InferenceSession(_model(), config=kl.SessionConfig(inter_op_threads=4)).run(None, x)
    gc.collect()
    assert threading.active_count() <= before + 4
    with ko.InferenceSession(_model()) as session:
        session.run(None, x)
    with pytest.raises(kl.KernloomError):
        session.run(None, x)


def test_threads_follow_onnxruntime_defaults_and_session_options() -> None:
    """No config: onnxruntime's sequential execution (one inter-op thread) and its
    ``SessionOptions`` thread counts; a ``kl.SessionConfig`` wins over both."""
    import onnxruntime

    def threads(session: ko.InferenceSession) -> tuple[int | None, int | None]:
        config = session.session.config
        return config.inter_op_threads, config.intra_op_threads

    assert threads(ko.InferenceSession(_model())) == (1, None)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    assert threads(ko.InferenceSession(_model(), options)) == (1, 2)
    options.execution_mode = onnxruntime.ExecutionMode.ORT_PARALLEL
    options.inter_op_num_threads = 3
    assert threads(ko.InferenceSession(_model(), options)) == (3, 2)
    options.inter_op_num_threads = 0  # onnxruntime's "every core"
    assert threads(ko.InferenceSession(_model(), options)) == (None, 2)
    config = kl.SessionConfig(inter_op_threads=2, intra_op_threads=1)
    assert threads(ko.InferenceSession(_model(), options, config=config)) == (2, 1)
    x = np.ones((1, 3), np.float32)
    (y, _z) = ko.InferenceSession(_model(), options).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x + np.array([1.0, -1.0, 0.5], np.float32), 0))
