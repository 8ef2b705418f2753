"""kernloom.onnx.backend: onnx's Backend interface, with SessionConfig fields as keywords;
and pooling and convolution attributes drawn by hypothesis, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper
from onnx_helpers import FLOAT, model, run_both

from kernloom.onnx import backend


def test_prepare_run_model_and_run_node() -> None:
    proto = model(
        [helper.make_node("Gemm", ["a", "b"], ["y"], transB=1, alpha=2.0)],
        {"a": (FLOAT, [2, 3]), "b": (FLOAT, [4, 3])},
        {"y": (FLOAT, [2, 4])},
    )
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((4, 3), np.float32)
    rep = backend.prepare(proto, "CPU", inter_op_threads=1, intra_op_threads=1)
    (y,) = rep.run([a, b])
    np.testing.assert_array_equal(y, 2 * a @ b.T)
    (y2,) = backend.run_model(proto, {"a": a, "b": b})
    np.testing.assert_array_equal(y2, y)
    node = helper.make_node("LeakyRelu", ["x"], ["z"], alpha=0.5)
    (z,) = backend.run_node(node, [np.array([-2.0, 3.0], np.float32)])
    np.testing.assert_array_equal(z, [-1.0, 3.0])


def test_supports_device_asks_the_installed_factories() -> None:
    assert backend.supports_device("CPU")
    assert not backend.supports_device("TPU")


def test_supports_device_is_false_for_an_installed_gpu_plugin_without_a_gpu() -> None:
    """The torch plugin (installed for the tests) registers a GPU factory; without a CUDA
    GPU visible to torch it gives no device, so the backend does not support "CUDA" (onnx's
    BackendTest then skips the *_cuda cases instead of failing each in ``prepare``)."""
    torch = pytest.importorskip("torch")
    assert backend.supports_device("CUDA") == torch.cuda.is_available()


def test_an_unknown_device_fails_naming_it() -> None:
    proto = model(
        [helper.make_node("Relu", ["x"], ["y"])], {"x": (FLOAT, [2])}, {"y": (FLOAT, [2])}
    )
    with pytest.raises(Exception, match="TPU"):
        backend.prepare(proto, "TPU").run([np.zeros(2, np.float32)])


@settings(max_examples=30, deadline=None)
@given(
    op=st.sampled_from(["MaxPool", "AveragePool", "Conv"]),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    ceil_mode=st.integers(0, 1),
    count_include_pad=st.integers(0, 1),
    size=st.tuples(st.integers(4, 9), st.integers(4, 9)),
)
def test_window_attributes_match_onnxruntime(
    op: str,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    pads: tuple[int, int, int, int],
    ceil_mode: int,
    count_include_pad: int,
    size: tuple[int, int],
) -> None:
    # ONNX requires each pad to be smaller than the kernel along its axis.
    pads = tuple(min(p, kernel[i % 2] - 1) for i, p in enumerate(pads))  # type: ignore[assignment]
    rng = np.random.default_rng(sum(size) + sum(pads))
    x = rng.standard_normal((1, 2, *size)).astype(np.float32)
    attrs: dict[str, object] = {"strides": list(strides), "pads": list(pads)}
    initializers = {}
    inputs = ["x"]
    if op == "Conv":
        initializers["w"] = rng.standard_normal((3, 2, *kernel)).astype(np.float32)
        inputs.append("w")
    else:
        attrs["kernel_shape"] = list(kernel)
        attrs["ceil_mode"] = ceil_mode
        if op == "AveragePool":
            attrs["count_include_pad"] = count_include_pad
    proto = model(
        [helper.make_node(op, inputs, ["y"], **attrs)],
        {"x": (FLOAT, list(x.shape))},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers=initializers,
    )
    ours, ort = run_both(proto, {"x": x})
    np.testing.assert_allclose(ours[0], ort[0], rtol=1e-5, atol=1e-5)
