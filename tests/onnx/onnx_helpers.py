"""Shared helpers of the ONNX tests: small models built with onnx.helper, run on
kernloom and on onnxruntime (the independent reference)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import kernloom.onnx as ko

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
REAL = Path(onnx.__file__).parent / "backend" / "test" / "data" / "real"


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, tuple[int, Sequence[int | str | None]]],
    outputs: dict[str, tuple[int, Sequence[int | str | None]]],
    *,
    initializers: dict[str, np.ndarray[Any, Any]] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        initializer=[numpy_helper.from_array(v, n) for n, v in (initializers or {}).items()],
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


def run_both(
    proto: onnx.ModelProto, feeds: dict[str, np.ndarray[Any, Any]]
) -> tuple[list[np.ndarray[Any, Any]], list[np.ndarray[Any, Any]]]:
    """(kernloom's outputs, onnxruntime's outputs) of one model on the same feeds."""
    ours = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)
    ort = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    return ours, [np.asarray(v) for v in ort]


def check_against_oracle(
    proto: onnx.ModelProto,
    feeds: dict[str, Any],
    *,
    oracle: str = "reference",
    empty_by_size: bool = False,
    rtol: float = 1e-6,
    atol: float = 0.0,
) -> list[np.ndarray[Any, Any]]:
    """Run ``proto`` on kernloom and on ``oracle`` -- onnx's reference evaluator
    ("reference") or onnxruntime ("onnxruntime"), for the cases the evaluator cannot run --
    and assert that they agree in dtype, shape and value; kernloom's outputs.
    ``empty_by_size``: an empty output need only be empty with the oracle's first
    dimension (onnxruntime gives a zero-iteration Loop's scan output as [0] where the body
    leaves the per-iteration shape undeclared; the importer may know it)."""
    ours = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)
    if oracle == "reference":
        expected = ReferenceEvaluator(proto).run(None, feeds)
    else:
        session = onnxruntime.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        expected = session.run(None, feeds)
    assert len(ours) == len(expected)
    for got, want in zip(ours, expected, strict=True):
        want = np.asarray(want)
        assert got.dtype == want.dtype
        if empty_by_size and want.size == 0:
            assert got.size == 0 and got.shape[:1] == want.shape[:1]
            continue
        assert got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return ours


FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
