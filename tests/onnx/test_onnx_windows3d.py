"""3-D Conv, MaxPool, AveragePool and LpPool, and pools with dilations (1-D to 3-D):
checked against onnx's reference evaluator with sizes known at import and only at run
time, and the import errors for what is refused, which name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko

RNG = np.random.default_rng(11)


def _pool(op: str, shape: list[int], known: bool, **attrs: Any) -> Any:
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    dims: list[Any] = shape if known else [shape[0], shape[1], *(None,) * (len(shape) - 2)]
    return model([node], {"x": (FLOAT, dims)}, {"y": (FLOAT, None)}, opset=19)


POOLS = [
    ("MaxPool", [1, 2, 5, 6, 7], {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}),
    ("MaxPool", [2, 1, 5, 5, 6], {"kernel_shape": [3, 3, 2], "pads": [1, 0, 1, 1, 1, 0]}),
    ("MaxPool", [1, 2, 7, 8], {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1] * 4}),
    ("MaxPool", [1, 3, 9], {"kernel_shape": [3], "dilations": [3], "strides": [2]}),
    ("MaxPool", [1, 1, 6, 6, 6], {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2]}),
    ("AveragePool", [1, 2, 5, 6, 7], {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}),
    ("AveragePool", [1, 2, 5, 6, 4], {"kernel_shape": [3, 2, 3], "pads": [1, 0, 1, 1, 1, 1]}),
    (
        "AveragePool",
        [1, 2, 5, 6, 4],
        {"kernel_shape": [3, 2, 3], "pads": [1, 0, 1, 1, 1, 1], "count_include_pad": 1},
    ),
    ("AveragePool", [1, 2, 7, 8], {"kernel_shape": [2, 2], "dilations": [2, 3], "pads": [1] * 4}),
    (
        "AveragePool",
        [1, 1, 6, 7, 5],
        {"kernel_shape": [2, 2, 2], "dilations": [2, 2, 1], "ceil_mode": 1, "strides": [2] * 3},
    ),
    ("LpPool", [1, 2, 5, 6, 4], {"kernel_shape": [2, 2, 2], "p": 3}),
    ("LpPool", [1, 2, 7, 8], {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1] * 4}),
]


@pytest.mark.parametrize("known", [True, False], ids=["known", "run-time"])
@pytest.mark.parametrize(
    ("op", "shape", "attrs"), POOLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(POOLS)]
)
def test_pools_match_the_reference(op: str, shape: list[int], attrs: Any, known: bool) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    # onnx's evaluator indexes past the input on asymmetric 3-D MaxPool pads: onnxruntime.
    oracle = "onnxruntime" if op == "MaxPool" and "pads" in attrs else "reference"
    proto = _pool(op, shape, known, **attrs)
    check_against_oracle(proto, {"x": x}, oracle=oracle, rtol=1e-5, atol=1e-6)


def _conv(x_shape: list[int], w_shape: list[int], static: bool, **attrs: Any) -> Any:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)
    inputs: dict[str, Any] = {"x": (FLOAT, x_shape)}
    w = RNG.standard_normal(w_shape).astype(np.float32)
    b = RNG.standard_normal(w_shape[0]).astype(np.float32)
    inits = {"w": w, "b": b} if static else {"b": b}
    if not static:
        inputs["w"] = (FLOAT, w_shape)
    return model([node], inputs, {"y": (FLOAT, None)}, initializers=inits), w


CONVS = [
    ([1, 2, 5, 6, 7], [3, 2, 2, 3, 2], {"strides": [2, 1, 2]}),
    ([2, 3, 4, 5, 6], [2, 3, 3, 3, 3], {"pads": [1, 0, 1, 1, 1, 0], "dilations": [1, 2, 1]}),
    ([1, 2, 5, 5, 5], [4, 2, 2, 2, 2], {"auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize("static", [True, False], ids=["weights-known", "weights-fed"])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONVS)
def test_conv3d_matches_the_reference(
    x_shape: list[int], w_shape: list[int], attrs: Any, static: bool
) -> None:
    proto, w = _conv(x_shape, w_shape, static, **attrs)
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    if not static:
        feeds["w"] = w
    check_against_oracle(proto, feeds, rtol=1e-4, atol=1e-5)


def test_refusals_name_the_node() -> None:
    proto, _ = _conv([1, 4, 4, 4, 4], [2, 2, 2, 2, 2], True, group=2)
    with pytest.raises(ko.OnnxImportError, match=r"conv.*Conv.*group=2: 3-D convolution"):
        ko.import_model(proto)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="pool", kernel_shape=[2, 2, 2])
    indices = model(
        [node], {"x": (FLOAT, [1, 1, 4, 4, 4])}, {"y": (FLOAT, None), "i": (7, None)}, opset=19
    )
    with pytest.raises(ko.OnnxImportError, match=r"pool.*MaxPool.*Indices output"):
        ko.import_model(indices)
    mismatch = _pool("AveragePool", [1, 1, 4, 4, 4], True, kernel_shape=[2, 2])
    with pytest.raises(ko.OnnxImportError, match=r"pool.*AveragePool.*kernel_shape \[2, 2\]"):
        ko.import_model(mismatch)
