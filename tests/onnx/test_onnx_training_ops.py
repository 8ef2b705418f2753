"""ai.onnx.preview.training's Adagrad, Adam and Momentum against onnx's reference
evaluator: one session run for several update counts fed at run time (both sides of
Adam's bias correction and Momentum's first step), float32 and float64, several tensors
of different shapes, attributes at their defaults; and the import errors, which name the
node."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kernloom.onnx as ko

TRAINING = "ai.onnx.preview.training"
INT64 = TensorProto.INT64


def update_model(
    op: str, states: int, shapes: list[tuple[int, ...]], elem: int, **attrs: Any
) -> onnx.ModelProto:
    """``op`` over tensors of ``shapes``: inputs R, T, then the values, gradients and
    ``states`` running states of every tensor; outputs the new values and states."""
    names = ["X", "G", *[f"S{k}" for k in range(states)]]
    inputs = [f"{name}{i}" for name in names for i in range(len(shapes))]
    outputs = [f"{name}{i}_new" for name in ["X", *names[2:]] for i in range(len(shapes))]
    node = helper.make_node(op, ["R", "T", *inputs], outputs, domain=TRAINING, **attrs)
    shape_of = {f"{name}{i}": s for name in names for i, s in enumerate(shapes)}
    graph = helper.make_graph(
        [node],
        "update",
        [
            helper.make_tensor_value_info("R", elem, []),
            helper.make_tensor_value_info("T", INT64, []),
            *[helper.make_tensor_value_info(n, elem, shape_of[n]) for n in inputs],
        ],
        [helper.make_tensor_value_info(n, elem, None) for n in outputs],
    )
    made = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(TRAINING, 1)]
    )
    made.ir_version = 10
    return made


CASES = [
    ("Adagrad", 1, {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}),
    ("Adagrad", 1, {}),
    ("Adam", 2, {"alpha": 0.85, "beta": 0.95, "epsilon": 1e-3, "norm_coefficient_post": 0.1}),
    ("Adam", 2, {}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}),
    ("Momentum", 1, {"alpha": 0.8, "beta": 0.3, "mode": "nesterov", "norm_coefficient": 0.0}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("op", "states", "attrs"), CASES)
def test_update_rules_match_onnx_reference(
    op: str, states: int, attrs: dict[str, Any], dtype: Any
) -> None:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    shapes = [(3,), (2, 4)]
    m = update_model(op, states, shapes, elem, **attrs)
    session = ko.InferenceSession(m.SerializeToString())
    reference = ReferenceEvaluator(m)
    rng = np.random.default_rng(4)
    feeds: dict[str, Any] = {"R": np.asarray(0.05, dtype)}
    for name in ["X", "G", *[f"S{k}" for k in range(states)]]:
        for i, shape in enumerate(shapes):
            value = rng.standard_normal(shape)
            if name.startswith("S"):  # squared-gradient sums are non-negative
                value = np.abs(value)
            feeds[f"{name}{i}"] = value.astype(dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    for t in (0, 1, 7):  # the first update and later ones, in one imported session
        feeds["T"] = np.asarray(t, np.int64)
        got = session.run(None, feeds)
        want = reference.run(None, feeds)
        if op == "Adam" and dtype == np.float64 and len(shapes) > 1:
            # onnx's reference casts Adam's outputs to float32 for several tensors (not
            # for one); the spec's outputs are of the inputs' type: its formula instead.
            want = _adam_float64(feeds, len(shapes), attrs)
        assert len(got) == len(want) == (1 + states) * len(shapes)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.dtype(dtype) and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def _adam_float64(feeds: dict[str, Any], n: int, attrs: dict[str, Any]) -> list[Any]:
    """onnx's reference formula for Adam (``_apply_adam``), tensor by tensor, in float64,
    with the attributes as the model holds them (float32)."""
    from onnx.reference.ops.aionnx_preview_training.op_adam import _apply_adam

    def attr(name: str, default: float) -> float:
        return float(np.float32(attrs.get(name, default)))

    per_tensor = [
        _apply_adam(
            feeds["R"],
            feeds["T"],
            *(feeds[f"{name}{i}"] for name in ("X", "G", "S0", "S1")),
            attr("norm_coefficient", 0.0),
            attr("norm_coefficient_post", 0.0),
            attr("alpha", 0.9),
            attr("beta", 0.999),
            attr("epsilon", 1e-6),
        )
        for i in range(n)
    ]
    return [np.asarray(out[k], np.float64) for k in range(3) for out in per_tensor]


def test_a_wrong_number_of_inputs_names_the_node() -> None:
    m = update_model("Adam", 2, [(3,)], TensorProto.FLOAT)
    del m.graph.node[0].input[-1]  # one state missing: 5 inputs after R and T, not 4 x N
    with pytest.raises(ko.OnnxImportError, match=r"Adam.*R, T and then 4 inputs per"):
        ko.InferenceSession(m.SerializeToString())


def test_momentum_needs_its_attributes_and_a_known_mode() -> None:
    m = update_model("Momentum", 1, [(3,)], TensorProto.FLOAT, alpha=0.9, beta=0.5, mode="heavy")
    m.graph.node[0].attribute.append(helper.make_attribute("norm_coefficient", 0.0))
    with pytest.raises(ko.OnnxImportError, match=r"Momentum.*mode must be 'standard' or"):
        ko.InferenceSession(m.SerializeToString())
    m = update_model("Momentum", 1, [(3,)], TensorProto.FLOAT, alpha=0.9, mode="standard")
    with pytest.raises(ko.OnnxImportError, match=r"Momentum.*required attribute 'beta'"):
        ko.InferenceSession(m.SerializeToString())
