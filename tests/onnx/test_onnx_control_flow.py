"""ONNX If and Loop imported onto kl.cond and kl.while_loop, each model checked against
onnx's reference evaluator, or onnxruntime where the evaluator cannot run the case (a loop
of zero iterations with scan outputs) -- never against kernloom itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko

BOOL = TensorProto.BOOL


def _check(
    proto: onnx.ModelProto, feeds: dict[str, Any], *, oracle: str = "reference"
) -> list[np.ndarray[Any, Any]]:
    """``check_against_oracle``: onnxruntime where the evaluator is wrong (a Loop with an
    empty cond input runs no iteration there, and zero iterations with scan outputs fail
    to stack)."""
    return check_against_oracle(proto, feeds, oracle=oracle, empty_by_size=True)


def _graph(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    name: str = "sub",
) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, inputs, outputs)


def _out(name: str, elem: int = FLOAT, shape: list[Any] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


# -- If --------------------------------------------------------------------------------------


def _if_model(cond_shape: list[int]) -> onnx.ModelProto:
    """then: x + y (shape [3], y from the outer scope); else: concat(x, y) (shape [6])."""
    then_g = _graph([helper.make_node("Add", ["x", "y"], ["t"])], [], [_out("t")], "then")
    else_g = _graph(
        [helper.make_node("Concat", ["x", "y"], ["e"], axis=0)], [], [_out("e")], "else"
    )
    return model(
        [
            helper.make_node("Mul", ["x", "x"], ["y"]),
            helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g),
        ],
        {"c": (BOOL, cond_shape), "x": (FLOAT, [3])},
        {"r": (FLOAT, None)},
    )


@pytest.mark.parametrize("taken", [True, False])
@pytest.mark.parametrize("cond_shape", [[], [1]])
def test_if_captures_outer_values_and_branches_may_differ_in_shape(
    taken: bool, cond_shape: list[int]
) -> None:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    (result,) = _check(_if_model(cond_shape), {"c": np.array(taken).reshape(cond_shape), "x": x})
    assert result.shape == ((3,) if taken else (6,))


def test_if_with_a_condition_known_at_import_builds_the_taken_branch_only() -> None:
    """The untaken branch would not build (a Reshape of 3 values to 2x2)."""
    bad = _graph([helper.make_node("Reshape", ["x", "s"], ["b"])], [], [_out("b")], "bad")
    good = _graph([helper.make_node("Neg", ["x"], ["g"])], [], [_out("g")], "good")
    proto = model(
        [helper.make_node("If", ["c"], ["r"], then_branch=good, else_branch=bad)],
        {"x": (FLOAT, [3])},
        {"r": (FLOAT, [3])},
        initializers={"c": np.array(True), "s": np.array([2, 2], np.int64)},
    )
    _check(proto, {"x": np.array([1.0, -2.0, 3.0], np.float32)})


def test_if_branches_of_different_dtypes_name_the_node() -> None:
    then_g = _graph([helper.make_node("Identity", ["x"], ["t"])], [], [_out("t")])
    else_g = _graph([helper.make_node("Cast", ["x"], ["e"], to=INT64)], [], [_out("e", INT64)])
    proto = model(
        [helper.make_node("If", ["c"], ["r"], name="pick", then_branch=then_g, else_branch=else_g)],
        {"c": (BOOL, []), "x": (FLOAT, [3])},
        {"r": (FLOAT, [3])},
    )
    with pytest.raises(ko.OnnxImportError, match=r"'pick' \(If.*float32.*int64"):
        ko.import_model(proto)


def test_an_unsupported_op_inside_a_branch_is_reported_before_building() -> None:
    then_g = _graph([helper.make_node("StringNormalizer", ["x"], ["t"])], [], [_out("t")])
    else_g = _graph([helper.make_node("Identity", ["x"], ["e"])], [], [_out("e")])
    proto = model(
        [helper.make_node("If", ["c"], ["r"], name="pick", then_branch=then_g, else_branch=else_g)],
        {"c": (BOOL, []), "x": (FLOAT, [3])},
        {"r": (FLOAT, [3])},
    )
    with pytest.raises(ko.UnsupportedOnnxError, match=r"pick/then_branch/StringNormalizer_0"):
        ko.import_model(proto)


# -- Loop ------------------------------------------------------------------------------------


def _loop_body(nested_if: bool = False) -> onnx.GraphProto:
    """(i, cond_in, acc) -> (acc + w < limit, acc + w, scan: acc * i), w and limit from
    the outer scope; with ``nested_if``, the step is w on even iterations and 2w on odd."""
    nodes = [
        helper.make_node("Cast", ["i"], ["i_f"], to=FLOAT),
    ]
    if nested_if:
        two = helper.make_tensor("two", INT64, [], [2])
        even_g = _graph([helper.make_node("Identity", ["w"], ["s0"])], [], [_out("s0")], "even")
        odd_g = _graph([helper.make_node("Add", ["w", "w"], ["s1"])], [], [_out("s1")], "odd")
        nodes += [
            helper.make_node("Constant", [], ["two"], value=two),
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["step"], then_branch=even_g, else_branch=odd_g),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["w"], ["step"]))
    nodes += [
        helper.make_node("Add", ["acc", "step"], ["acc_out"]),
        helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
        helper.make_node("Mul", ["acc", "i_f"], ["scan"]),
    ]
    return _graph(
        nodes,
        [_out("i", INT64, []), _out("cond_in", BOOL, []), _out("acc", FLOAT, None)],
        [_out("cond_out", BOOL, []), _out("acc_out", FLOAT, None), _out("scan", FLOAT, None)],
        "body",
    )


def _loop_model(trip: bool, cond: bool, nested_if: bool = False) -> onnx.ModelProto:
    return model(
        [
            helper.make_node(
                "Loop",
                ["M" if trip else "", "c" if cond else "", "a0"],
                ["a", "scans"],
                name="loop",
                body=_loop_body(nested_if),
            )
        ],
        {
            "M": (INT64, []),
            "c": (BOOL, []),
            "a0": (FLOAT, [2]),
            "w": (FLOAT, [2]),
            "limit": (FLOAT, []),
        },
        {"a": (FLOAT, [2]), "scans": (FLOAT, None)},
        initializers={"zero": np.array(0, np.int64)},
    )


def _loop_feeds(m: int, c: bool, limit: float) -> dict[str, np.ndarray[Any, Any]]:
    return {
        "M": np.array(m, np.int64),
        "c": np.array(c),
        "a0": np.array([1.0, 2.0], np.float32),
        "w": np.array([0.5, 1.5], np.float32),
        "limit": np.array(limit, np.float32),
    }


def _unused(proto: onnx.ModelProto, *names: str) -> onnx.ModelProto:
    """``proto`` without the graph inputs ``names`` (the Loop leaves them empty)."""
    kept = [v for v in proto.graph.input if v.name not in names]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    return proto


def _feeds_without(feeds: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in feeds.items() if k not in names}


@pytest.mark.parametrize("m", [0, 1, 4])
def test_loop_with_a_trip_count_only_runs_m_times(m: int) -> None:
    proto = _unused(_loop_model(trip=True, cond=False), "c")
    feeds = _feeds_without(_loop_feeds(m, True, limit=1e6), "c")
    _, scans = _check(proto, feeds, oracle="ort")
    assert scans.shape[0] == m


def test_loop_with_a_trip_count_only_ignores_the_bodys_condition() -> None:
    """ONNX's spec: for (i = 0; i < M; ++i) { cond = ...; // ignored }. onnxruntime stops
    when cond_out is false, and the reference evaluator runs no iteration; the oracle
    runs the same loop with a body whose cond_out is always true."""
    proto = _unused(_loop_model(trip=True, cond=False), "c")
    feeds = _feeds_without(_loop_feeds(4, True, limit=0.0), "c")
    ours = ko.InferenceSession(proto.SerializeToString()).run(None, feeds)
    body = proto.graph.node[0].attribute[0].g
    for node in body.node:
        if node.op_type == "Less":
            node.CopyFrom(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    expected = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    assert ours[1].shape == (4, 2)
    for got, want in zip(ours, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("limit", [3.0, 100.0])
def test_loop_with_a_condition_only_runs_while_the_body_says_so(limit: float) -> None:
    proto = _unused(_loop_model(trip=False, cond=True), "M")
    _check(proto, _feeds_without(_loop_feeds(0, True, limit), "M"))


@pytest.mark.parametrize(("m", "limit"), [(2, 100.0), (10, 8.0), (0, 100.0)])
def test_loop_with_both_stops_at_whichever_ends_first(m: int, limit: float) -> None:
    oracle = "ort" if m == 0 else "reference"
    _check(_loop_model(trip=True, cond=True), _loop_feeds(m, True, limit), oracle=oracle)


def test_loop_whose_condition_is_false_at_start_runs_zero_iterations() -> None:
    proto = _unused(_loop_model(trip=False, cond=True), "M")
    feeds = _feeds_without(_loop_feeds(0, False, 100.0), "M")
    a, scans = _check(proto, feeds, oracle="ort")
    np.testing.assert_array_equal(a, [1.0, 2.0])
    assert scans.size == 0


@pytest.mark.parametrize("m", [0, 5])
def test_an_if_nested_in_a_loop_body_reads_the_outer_scopes(m: int) -> None:
    oracle = "ort" if m == 0 else "reference"
    _check(
        _loop_model(trip=True, cond=True, nested_if=True), _loop_feeds(m, True, 1e6), oracle=oracle
    )


def test_scan_outputs_without_declared_types_get_them_from_type_inference() -> None:
    """As the expanded Range function: the body's outputs declare no type at all.
    (onnxruntime as the oracle: the reference evaluator stacks scalars as [n, 1].)"""
    body = _graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["prev", "delta"], ["next"]),
            helper.make_node("Identity", ["prev"], ["value"]),
        ],
        [_out("i", INT64, []), _out("cond_in", BOOL, []), _out("prev", INT64, [])],
        [helper.make_empty_tensor_value_info(n) for n in ("cond_out", "next", "value")],
    )
    proto = model(
        [helper.make_node("Loop", ["M", "c", "start"], ["last", "range"], body=body)],
        {"M": (INT64, []), "c": (BOOL, []), "start": (INT64, []), "delta": (INT64, [])},
        {"last": (INT64, []), "range": (INT64, None)},
    )
    feeds = {"M": np.array(4, np.int64), "c": np.array(True), "start": np.array(3, np.int64)}
    _check(proto, {**feeds, "delta": np.array(-2, np.int64)}, oracle="ort")


def test_a_body_that_changes_a_carried_shape_names_the_node() -> None:
    body = _graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Concat", ["acc", "acc"], ["grown"], axis=0),
        ],
        [_out("i", INT64, []), _out("cond_in", BOOL, []), _out("acc", FLOAT, [2])],
        [_out("cond_out", BOOL, []), _out("grown", FLOAT, [4])],
    )
    proto = model(
        [helper.make_node("Loop", ["M", "", "a0"], ["a"], name="grow", body=body)],
        {"M": (INT64, []), "a0": (FLOAT, [2])},
        {"a": (FLOAT, None)},
    )
    with pytest.raises(ko.OnnxImportError, match=r"'grow' \(Loop.*shape.*symbolic"):
        ko.import_model(proto)


def test_a_carried_shape_the_body_declares_symbolic_may_change() -> None:
    body = _graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Concat", ["acc", "acc"], ["grown"], axis=0),
        ],
        [_out("i", INT64, []), _out("cond_in", BOOL, []), _out("acc", FLOAT, ["n"])],
        [_out("cond_out", BOOL, []), _out("grown", FLOAT, ["m"])],
    )
    proto = model(
        [helper.make_node("Loop", ["M", "", "a0"], ["a"], body=body)],
        {"M": (INT64, []), "a0": (FLOAT, [2])},
        {"a": (FLOAT, None)},
    )
    feeds = {"M": np.array(3, np.int64), "a0": np.array([1.0, 2.0], np.float32)}
    (a,) = _check(proto, feeds, oracle="ort")
    assert a.shape == (16,)


def test_a_carried_shape_the_body_keeps_but_inference_cannot_prove_converts() -> None:
    """The body declares acc (2,) and keeps it, through a Reshape to the run-time shape of
    an outer value of shape ("n",): kernloom's inference gives the result (?,).
    kl.while_loop refuses a body result less specific than the invariant (as TensorFlow
    1 does), so the importer opens that dimension and builds the loop again; it had
    been accepted with the declared (2,) as the loop's static shape."""
    body = _graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc", "w"], ["sum"]),
            helper.make_node("Shape", ["w"], ["w_shape"]),
            helper.make_node("Reshape", ["sum", "w_shape"], ["acc_out"]),
        ],
        [_out("i", INT64, []), _out("cond_in", BOOL, []), _out("acc", FLOAT, [2])],
        [_out("cond_out", BOOL, []), _out("acc_out", FLOAT, [2])],
    )
    proto = model(
        [helper.make_node("Loop", ["M", "", "a0"], ["a"], name="keep", body=body)],
        {"M": (INT64, []), "a0": (FLOAT, [2]), "w": (FLOAT, ["n"])},
        {"a": (FLOAT, [2])},
    )
    feeds = {
        "M": np.array(3, np.int64),
        "a0": np.array([1.0, 2.0], np.float32),
        "w": np.array([0.5, 1.0], np.float32),
    }
    (a,) = _check(proto, feeds, oracle="ort")
    np.testing.assert_array_equal(a, [2.5, 5.0])


def test_a_body_with_too_few_inputs_names_the_node() -> None:
    body = _graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        [_out("i", INT64, []), _out("cond_in", BOOL, [])],
        [_out("cond_out", BOOL, [])],
    )
    proto = model(
        [helper.make_node("Loop", ["M", "", "a0"], ["a"], name="short", body=body)],
        {"M": (INT64, []), "a0": (FLOAT, [2])},
        {"a": (FLOAT, [2])},
    )
    with pytest.raises(ko.OnnxImportError, match=r"'short' \(Loop.*needs 3"):
        ko.import_model(proto)
