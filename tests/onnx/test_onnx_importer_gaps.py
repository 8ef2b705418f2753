"""Importer gaps closed: an If whose condition is unknown at import and one of whose
branches cannot build for the shapes it is given (built as a branch that fails when it
runs), conditions known at import (Size and comparisons of known values, so the If
takes its branch then), and Range on one-element vectors. Each model is checked against
onnx's reference evaluator or onnxruntime, never kernloom itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko
from kernloom.errors import KernloomError

BOOL = TensorProto.BOOL


def _branch(nodes: list[onnx.NodeProto], out: str, name: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, FLOAT, None)])


def _reshape_branch(out: str, shape: list[int], name: str) -> onnx.GraphProto:
    """x reshaped to ``shape``: a branch that cannot build when x's 4 elements do not fit."""
    target = helper.make_node(
        "Constant", [], [f"{out}_shape"], value_ints=shape, name=f"{name}_shape"
    )
    reshape = helper.make_node("Reshape", ["x", f"{out}_shape"], [out], name=f"{name}_reshape")
    return _branch([target, reshape], out, name)


def _if_model(then_g: onnx.GraphProto, else_g: onnx.GraphProto) -> onnx.ModelProto:
    node = helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g, name="pick")
    return model([node], {"c": (BOOL, []), "x": (FLOAT, [4])}, {"r": (FLOAT, None)})


def _doubled(name: str) -> onnx.GraphProto:
    return _branch([helper.make_node("Add", ["x", "x"], ["d"], name=f"{name}_add")], "d", name)


X = np.array([1.0, -2.0, 3.5, 0.25], np.float32)

# -- a branch that does not build ----------------------------------------------------------


def _with_a_broken_branch(bad: str) -> onnx.ModelProto:
    """An If whose ``bad`` branch reshapes 4 values to 3x3 (it cannot build) and whose
    other branch doubles x."""
    broken = _reshape_branch("b", [3, 3], "broken")
    fine = _doubled("fine")
    return _if_model(*((broken, fine) if bad == "then_branch" else (fine, broken)))


@pytest.mark.parametrize("bad", ["then_branch", "else_branch"])
def test_an_if_whose_untaken_branch_does_not_build_runs_the_other(bad: str) -> None:
    proto = _with_a_broken_branch(bad)
    taken = np.array(bad == "else_branch")
    (out,) = check_against_oracle(proto, {"c": taken, "x": X})
    assert out.shape == (4,)


@pytest.mark.parametrize("bad", ["then_branch", "else_branch"])
def test_taking_the_branch_that_did_not_build_fails_naming_the_if_and_the_build_error(
    bad: str,
) -> None:
    proto = _with_a_broken_branch(bad)
    # onnxruntime fails too when the broken branch runs: it cannot reshape 4 values to 3x3.
    ort = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    taken = np.array(bad == "then_branch")
    with pytest.raises(Exception, match=r"(?i)reshape"):
        ort.run(None, {"c": taken, "x": X})
    session = ko.InferenceSession(proto.SerializeToString())
    with pytest.raises(KernloomError) as info:
        session.run(None, {"c": taken, "x": X})
    text = str(info.value)
    assert "'pick' (If, opset 17)" in text
    assert f"its condition selected {bad} at run time, which did not build at import" in text
    assert "'pick/" in text and "broken_reshape" in text  # the build error, node named


def test_an_if_neither_of_whose_branches_builds_is_an_import_error() -> None:
    proto = _if_model(_reshape_branch("t", [3, 3], "left"), _reshape_branch("e", [5], "right"))
    with pytest.raises(ko.OnnxImportError, match=r"'left_reshape' \(Reshape, opset 17\)"):
        ko.import_model(proto)


def test_a_failing_branch_keeps_the_static_shape_of_the_other() -> None:
    """The merged output keeps the built branch's shape, so later nodes that need it at
    import (here a Split by num_outputs) convert."""
    proto = model(
        [
            helper.make_node(
                "If",
                ["c"],
                ["r"],
                then_branch=_doubled("fine"),
                else_branch=_reshape_branch("b", [3, 3], "broken"),
                name="pick",
            ),
            helper.make_node("Split", ["r"], ["p", "q"], axis=0, num_outputs=2),
        ],
        {"c": (BOOL, []), "x": (FLOAT, [4])},
        {"p": (FLOAT, None), "q": (FLOAT, None)},
        opset=18,
    )
    p, q = check_against_oracle(proto, {"c": np.array(True), "x": X})
    assert p.shape == q.shape == (2,)


# -- conditions known at import ------------------------------------------------------------


@pytest.mark.parametrize(("dims", "expected"), [([4], "then"), ([2, 3], "else")])
def test_an_if_on_the_size_of_a_known_shape_takes_its_branch_at_import(
    dims: list[int], expected: str
) -> None:
    """Equal(Size(x), 4) is known at import: only the branch taken is built, so the other
    may be one that could never build for x (as the expanded AffineGrid's)."""
    four = helper.make_node("Constant", [], ["four"], value_int=4)
    size = helper.make_node("Size", ["x"], ["n"])
    is4 = helper.make_node("Equal", ["n", "four"], ["c"])
    then_g = _branch(
        [
            helper.make_node("Constant", [], ["s"], value_ints=[2, 2]),
            helper.make_node("Reshape", ["x", "s"], ["t"]),
        ],
        "t",
        "then",
    )
    else_g = _branch(
        [
            helper.make_node("Constant", [], ["s3"], value_ints=[3, -1]),
            helper.make_node("Reshape", ["x", "s3"], ["e"]),
        ],
        "e",
        "else",
    )
    node = helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g)
    proto = model([four, size, is4, node], {"x": (FLOAT, dims)}, {"r": (FLOAT, None)})
    x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    (out,) = check_against_oracle(proto, {"x": x})
    assert out.shape == ((2, 2) if expected == "then" else (3, 2))


@pytest.mark.parametrize(
    "op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"]
)
def test_comparisons_of_values_known_at_import(op: str) -> None:
    logical = op in ("And", "Or", "Xor")
    a = np.array([True, False, True]) if logical else np.array([1, 5, 3], np.int64)
    b = np.array([[True], [False]]) if logical else np.array([[3], [1]], np.int64)
    proto = model(
        [
            helper.make_node("Constant", [], ["a"], value=onnx.numpy_helper.from_array(a)),
            helper.make_node("Constant", [], ["b"], value=onnx.numpy_helper.from_array(b)),
            helper.make_node(op, ["a", "b"], ["c"]),
            helper.make_node("Xor", ["c", "y"], ["r"]),
        ],
        {"y": (BOOL, [2, 3])},
        {"r": (BOOL, None)},
    )
    check_against_oracle(proto, {"y": np.array([[True, False, True], [False, True, True]])})


def test_size_of_a_shape_known_only_at_run_time() -> None:
    proto = model(
        [helper.make_node("Size", ["x"], ["n"])], {"x": (FLOAT, [None, 3])}, {"n": (INT64, None)}
    )
    check_against_oracle(proto, {"x": np.zeros((5, 3), np.float32)})


# -- Range on one-element vectors ----------------------------------------------------------


@pytest.mark.parametrize("vector", ["start", "limit", "delta"])
def test_range_takes_one_element_vectors_as_onnxruntime_does(vector: str) -> None:
    dims: dict[str, Any] = {"start": [], "limit": [], "delta": []}
    dims[vector] = [1]
    proto = model(
        [helper.make_node("Range", ["start", "limit", "delta"], ["r"])],
        {name: (INT64, shape) for name, shape in dims.items()},
        {"r": (INT64, None)},
    )
    feeds = {
        "start": np.array(2, np.int64),
        "limit": np.array(11, np.int64),
        "delta": np.array(3, np.int64),
    }
    feeds[vector] = feeds[vector].reshape(1)
    check_against_oracle(proto, feeds, oracle="onnxruntime")


@pytest.mark.parametrize(
    ("axes", "steps"), [([2], None), ([-1], [1]), ([0, 2], [1, 2]), (None, None)]
)
def test_a_slice_with_a_run_time_end_keeps_its_rank_for_an_unsqueeze(
    axes: list[int] | None, steps: list[int] | None
) -> None:
    """Slice's ends computed at run time (half a dimension, as the expanded RotaryEmbedding
    does), axes and steps known: the result keeps the input's rank, which the Unsqueeze
    after it needs at import (it lost it, and the import failed)."""
    count = len(axes) if axes is not None else 3
    nodes = [
        helper.make_node("Shape", ["x"], ["dims"], start=2, end=3),
        helper.make_node("Div", ["dims", "two"], ["half"]),
        helper.make_node("Concat", ["half"] * count, ["ends"], axis=0),
        helper.make_node(
            "Slice",
            ["x", "starts", "ends", *(["axes"] if axes is not None else [""])]
            + (["steps"] if steps is not None else []),
            ["s"],
        ),
        helper.make_node("Unsqueeze", ["s", "where"], ["y"]),
    ]
    inits: dict[str, Any] = {
        "two": np.array([2], np.int64),
        "starts": np.zeros(count, np.int64),
        "where": np.array([1], np.int64),
    }
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
    if steps is not None:
        inits["steps"] = np.array(steps, np.int64)
    proto = model(nodes, {"x": (FLOAT, [4, 3, 8])}, {"y": (FLOAT, None)}, initializers=inits)
    x = np.arange(96, dtype=np.float32).reshape(4, 3, 8)
    (got,) = check_against_oracle(proto, {"x": x})
    assert got.ndim == 4
