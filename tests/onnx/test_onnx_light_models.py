"""The 9 real CNNs in the onnx wheel import and reproduce onnx's expected outputs.

Inputs are generated as onnx's backend runner does for the light models
(``Runner.generate_dummy_data(random=False)``: ``arange(n).reshape(shape) / n`` in
float32, unknown dimensions 1); tolerances are the models' own ``data.json`` values.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx_helpers import LIGHT, REAL

import kernloom as kl
import kernloom.onnx as ko
import kernloom.plugin as klp

FAST = ["squeezenet", "shufflenet", "resnet50"]
FULL = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "vgg19", "zfnet512"]


def dummy_input(value: onnx.ValueInfoProto) -> np.ndarray:
    """onnx's runner's non-random dummy data for one input."""
    shape = tuple(
        d.dim_value if d.HasField("dim_value") else 1 for d in value.type.tensor_type.shape.dim
    )
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def check_model(name: str) -> None:
    path = LIGHT / f"light_{name}.onnx"
    tolerances = json.loads((REAL / f"test_{name}" / "data.json").read_text())
    proto = onnx.load(str(path))
    initializers = {i.name for i in proto.graph.initializer}
    (value,) = [v for v in proto.graph.input if v.name not in initializers]
    expected = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    session = ko.InferenceSession(str(path), config=kl.SessionConfig(device_filters=("CPU",)))
    (got,) = session.run(None, {value.name: dummy_input(value)})
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=tolerances["rtol"], atol=tolerances["atol"])


@pytest.mark.parametrize("name", FAST)
def test_light_model_matches_onnx_expected_output(name: str) -> None:
    check_model(name)


@pytest.mark.onnx_full
@pytest.mark.parametrize("name", FULL)
def test_light_model_matches_onnx_expected_output_full(name: str) -> None:
    check_model(name)


def test_a_light_model_runs_across_the_fake_accelerator_and_the_cpu(
    accel_registry: klp.Registry,
) -> None:
    """ZFNet-512's dense head (MatMul, Relu, Softmax) goes to FAKE_ACCEL, its convolutions
    stay on the CPU: copies between them, and still onnx's expected output."""
    name = "zfnet512"
    path = LIGHT / f"light_{name}.onnx"
    proto = onnx.load(str(path))
    (value,) = [
        v for v in proto.graph.input if v.name not in {i.name for i in proto.graph.initializer}
    ]
    session = ko.InferenceSession(str(path), registry=accel_registry)
    feed = {session.input_tensors[value.name]: dummy_input(value)}
    metadata = kl.RunMetadata()
    (got,) = session.session.run(
        list(session.output_tensors.values()), feed, kl.RunOptions(trace=True), metadata
    )
    expected = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7)
    assert metadata.step_stats is not None
    devices = {s.op: s.device for s in metadata.step_stats.nodes}
    # (each convolution fuses its bias on the CPU; its ReLU may follow the dense head)
    convolutions = [d for op, d in devices.items() if op in ("Conv2D", "_FusedConv2D")]
    assert convolutions and all(d.endswith("CPU:0") for d in convolutions)
    assert devices["MatMul"].endswith("FAKE_ACCEL:0")
    assert metadata.total_bytes_copied() > 0
