"""Two edges of the importer, checked against onnxruntime and onnx's reference evaluator:
a Loop whose loop-carried value grows while its body input declares no shape (ONNX:
unknown), and a reflect Pad of a tensor with an empty dimension that gets no pads."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko
from kernloom.errors import KernloomError
from kernloom.onnx.errors import OnnxImportError

BOOL = TensorProto.BOOL


def _growing_loop(declared: list[int | str | None] | None, *, with_rows: bool = True) -> Any:
    """Loop M times: acc = Concat(acc, row) along axis 0; the body's acc_in and acc_out
    are declared with ``declared`` (None: no shape at all)."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
            helper.make_node("Concat", ["acc_in", "row"], ["acc_out"], axis=0, name="grow"),
        ],
        "body",
        [vi("i", INT64, []), vi("cond_in", BOOL, []), vi("acc_in", FLOAT, declared)],
        [vi("cond_out", BOOL, []), vi("acc_out", FLOAT, declared)],
    )
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body, name="loop")
    return model(
        [loop],
        {"M": (INT64, []), "acc0": (FLOAT, [1, 3]), "row": (FLOAT, [1, 3])},
        {"acc": (FLOAT, None)},  # type: ignore[dict-item]
    )


LOOP_FEEDS = {
    "M": np.array(4, np.int64),
    "acc0": np.zeros((1, 3), np.float32),
    "row": np.arange(3, dtype=np.float32).reshape(1, 3) + 1,
}


@pytest.mark.parametrize(
    "declared", [None, ["n", 3], [None, None]], ids=["no-shape", "symbolic", "unknown-dims"]
)
def test_a_loop_carried_value_that_grows_matches_onnxruntime(
    declared: list[int | str | None] | None,
) -> None:
    (acc,) = check_against_oracle(_growing_loop(declared), LOOP_FEEDS, oracle="onnxruntime")
    assert acc.shape == (5, 3)


def test_an_undeclared_carried_value_keeps_the_dimensions_that_do_not_change() -> None:
    """Relaxed only where the body changes it: the width 3 stays known after the loop."""
    imported = ko.import_model(_growing_loop(None))
    assert imported.outputs["acc"].shape.as_list() == [None, 3]


def test_a_loop_of_no_iterations_gives_the_initial_value() -> None:
    feeds = {**LOOP_FEEDS, "M": np.array(0, np.int64)}
    (acc,) = check_against_oracle(_growing_loop(None), feeds)
    assert acc.shape == (1, 3)


def test_a_carried_value_declared_fixed_that_changes_is_still_an_error() -> None:
    """A body input declared [1, 3] whose output is [2, 3]: the model contradicts itself
    (onnx's shape inference says so too); the error names the loop and the fix."""
    with pytest.raises(OnnxImportError, match=r"'loop' \(Loop.*declares"):
        ko.import_model(_growing_loop([1, 3]))


# -- reflect Pad of an empty tensor ----------------------------------------------------------


def _reflect_pad(pads: list[int], shape: list[int | str]) -> Any:
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect", name="mirror")
    return model(
        [node],
        {"x": (FLOAT, shape)},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers={"p": np.asarray(pads, np.int64)},
        opset=13,
    )


@pytest.mark.parametrize("shape", [[0, 4], ["n", 4], ["n", "m"]])
def test_reflect_pad_of_an_empty_axis_without_pads_gives_the_padded_empty_shape(
    shape: list[int | str],
) -> None:
    x = np.zeros((0, 4), np.float32)
    (y,) = check_against_oracle(_reflect_pad([0, 1, 0, 2], shape), {"x": x})
    assert y.shape == (0, 7)


@pytest.mark.parametrize("shape", [["n", 4], ["n", "m"]])
def test_reflect_pad_of_a_dynamic_batch_still_reflects(shape: list[int | str]) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = check_against_oracle(_reflect_pad([0, 1, 0, 2], shape), {"x": x})
    np.testing.assert_array_equal(y, np.pad(x, ((0, 0), (1, 2)), mode="reflect"))


def test_reflect_pad_keeps_the_static_shape_it_knows() -> None:
    imported = ko.import_model(_reflect_pad([0, 1, 0, 2], ["n", 4]))
    assert imported.outputs["y"].shape.as_list() == [None, 7]


def test_reflect_pads_on_an_axis_known_empty_fail_at_import_naming_the_node() -> None:
    with pytest.raises(OnnxImportError, match=r"'mirror' \(Pad.*axis 0, of size 0"):
        ko.import_model(_reflect_pad([1, 0, 0, 0], [0, 4]))


def test_reflect_pads_on_an_axis_empty_at_run_time_fail_naming_the_node() -> None:
    session = ko.InferenceSession(_reflect_pad([1, 0, 0, 0], ["n", 4]))
    with pytest.raises(KernloomError, match=r"'mirror' \(Pad.*size 0"):
        session.run(None, {"x": np.zeros((0, 4), np.float32)})


def test_a_reflect_pad_of_fed_pads_of_an_empty_tensor() -> None:
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect", name="mirror")
    proto = model([node], {"x": (FLOAT, ["n", 4]), "p": (INT64, [4])}, {"y": (FLOAT, None)})  # type: ignore[dict-item]
    feeds = {"x": np.zeros((0, 4), np.float32), "p": np.array([0, 1, 0, 2], np.int64)}
    (y,) = check_against_oracle(proto, feeds)
    assert y.shape == (0, 7)


def test_onnx_agrees_an_empty_axis_cannot_be_reflected() -> None:
    """The reference evaluator refuses it too (what the errors above stand for)."""
    from onnx.reference import ReferenceEvaluator

    proto: onnx.ModelProto = _reflect_pad([1, 0, 0, 0], ["n", 4])
    with pytest.raises(ValueError, match="empty axis"):
        ReferenceEvaluator(proto).run(None, {"x": np.zeros((0, 4), np.float32)})
