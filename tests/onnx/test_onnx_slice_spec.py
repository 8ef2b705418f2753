"""Slice against ONNX's definition, with starts/ends/axes/steps known at import
(initializers) and fed at run time: both paths must give what onnx's reference evaluator
gives -- and, where that evaluator departs from the ONNX spec text (a negative step with
a start below -dim: numpy's slicing gives nothing, the spec clamps the start to 0 and
takes one element, as onnxruntime does), what the spec gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import kernloom.onnx as ko

INT64 = TensorProto.INT64
FLOAT = TensorProto.FLOAT
X = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
NAMES = ("starts", "ends", "axes", "steps")


def _slice_model(params: dict[str, np.ndarray[Any, Any]], *, fed: bool, first: int | str) -> Any:
    """One Slice node; its parameters are initializers or (``fed``) graph inputs."""
    node = helper.make_node("Slice", ["x", *NAMES], ["y"], name="cut")
    inputs = [helper.make_tensor_value_info("x", FLOAT, [first, 5, 6])]
    inits = []
    if fed:
        inputs += [helper.make_tensor_value_info(n, INT64, [len(params[n])]) for n in NAMES]
    else:
        inits = [numpy_helper.from_array(params[n], n) for n in NAMES]
    graph = helper.make_graph(
        [node], "slice", inputs, [helper.make_tensor_value_info("y", FLOAT, None)], inits
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    made.ir_version = 8
    return made


def _spec_slice(x: np.ndarray[Any, Any], params: dict[str, np.ndarray[Any, Any]]) -> Any:
    """Slice as the ONNX spec's text words it: a negative start or end gets the dimension
    added, then the start is clamped into [0, dim] (positive step) or [0, dim - 1]
    (negative step) and the end into [0, dim] or [-1, dim - 1]."""
    index: list[Any] = [slice(None)] * x.ndim
    for start, end, axis, step in zip(*(params[n].tolist() for n in NAMES), strict=True):
        dim = x.shape[axis]
        start += dim if start < 0 else 0
        end += dim if end < 0 else 0
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        index[axis % x.ndim] = list(range(start, end, step))
    out = x
    for axis, chosen in enumerate(index):
        if isinstance(chosen, list):
            out = np.take(out, np.asarray(chosen, np.int64), axis=axis)
    return out


def _expected(params: dict[str, np.ndarray[Any, Any]]) -> Any:
    """onnx's reference evaluator, but the spec where the two part (a negative step whose
    start lies below -dim)."""
    departs = any(
        step < 0 and start < -X.shape[axis]
        for start, axis, step in zip(
            params["starts"].tolist(),
            params["axes"].tolist(),
            params["steps"].tolist(),
            strict=True,
        )
    )
    if departs:
        return _spec_slice(X, params)
    return ReferenceEvaluator(_slice_model(params, fed=True, first=4)).run(
        None, {"x": X, **params}
    )[0]


def _ours(params: dict[str, np.ndarray[Any, Any]], *, fed: bool, first: int | str) -> Any:
    session = ko.InferenceSession(_slice_model(params, fed=fed, first=first))
    return session.run(None, {"x": X, **(params if fed else {})})[0]


def _params(starts: list[int], ends: list[int], axes: list[int], steps: list[int]) -> Any:
    return {
        n: np.asarray(v, np.int64) for n, v in zip(NAMES, (starts, ends, axes, steps), strict=True)
    }


def test_a_negative_step_from_below_minus_dim_takes_the_first_element() -> None:
    """The spec clamps start -5 (on a dimension of 4) to 0 for step -1 and end -10 to
    -1: one element, x[0] -- as onnxruntime gives; the import-time path gave none."""
    x = np.arange(4, dtype=np.float32)
    params = _params([-5], [-10], [0], [-1])
    node = helper.make_node("Slice", ["x", *NAMES], ["y"])
    inits = [numpy_helper.from_array(v, n) for n, v in params.items()]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", FLOAT, [4])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    ort = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})[0]
    (got,) = ko.InferenceSession(proto).run(None, {"x": x})
    np.testing.assert_array_equal(ort, [0.0])
    np.testing.assert_array_equal(got, [0.0])


def test_the_spec_oracle_is_onnxruntime_where_the_reference_departs() -> None:
    """The corner where onnx's reference evaluator (numpy slicing) and the spec part:
    onnxruntime follows the spec, so the oracle of the hypothesis test below does too."""
    params = _params([-8, 3], [-100, -100], [0, 2], [-1, -2])
    model = _slice_model(params, fed=True, first=4)
    ort = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": X, **params})[0]
    np.testing.assert_array_equal(ort, _spec_slice(X, params))
    assert ReferenceEvaluator(model).run(None, {"x": X, **params})[0].size == 0


_BOUND = st.one_of(
    st.integers(-9, 9),
    st.sampled_from([2**63 - 1, -(2**63), 2**31, -(2**31)]),
)


@st.composite
def _slices(draw: st.DrawFn) -> dict[str, np.ndarray[Any, Any]]:
    count = draw(st.integers(1, 3))
    axes = draw(st.permutations([0, 1, 2]))[:count]
    axes = [a - 3 if draw(st.booleans()) else a for a in axes]
    return _params(
        draw(st.lists(_BOUND, min_size=count, max_size=count)),
        draw(st.lists(_BOUND, min_size=count, max_size=count)),
        axes,
        draw(st.lists(st.sampled_from([1, 2, 3, -1, -2, -3]), min_size=count, max_size=count)),
    )


@settings(max_examples=60, deadline=None)
@given(params=_slices(), first=st.sampled_from([4, "n"]))
def test_slice_matches_onnx_static_and_fed(
    params: dict[str, np.ndarray[Any, Any]], first: int | str
) -> None:
    want = _expected(params)
    for fed in (False, True):
        got = _ours(params, fed=fed, first=first)
        assert got.shape == want.shape, (fed, got.shape, want.shape)
        np.testing.assert_array_equal(got, want)
