"""NonMaxSuppressionV3 and ``kl.ops.non_max_suppression``: the numpy kernel against a plain
Python reference written from TensorFlow's documented algorithm (and its float32 IoU), the
edge cases TensorFlow 2.21 was run on (NaN, infinite and empty boxes, float16), shape
inference, and the errors at graph-building and at run time, each naming the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_kernel
from kernloom_cpu_numpy import plugin as cpu_plugin

nan, inf = np.nan, np.inf


def numpy_only() -> klp.Registry:
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    return registry


NUMPY = numpy_only()


def iou(a: Any, b: Any) -> float:
    """The IoU of two boxes (y1, x1, y2, x2; corners in either order), in float32."""
    f = np.float32
    ay0, ay1 = sorted(map(f, (a[0], a[2])))
    ax0, ax1 = sorted(map(f, (a[1], a[3])))
    by0, by1 = sorted(map(f, (b[0], b[2])))
    bx0, bx1 = sorted(map(f, (b[1], b[3])))
    area_a, area_b = f((ay1 - ay0) * (ax1 - ax0)), f((by1 - by0) * (bx1 - bx0))
    if area_a <= 0 or area_b <= 0:
        return 0.0
    inter = f(
        max(f(min(ay1, by1) - max(ay0, by0)), f(0)) * max(f(min(ax1, bx1) - max(ax0, bx0)), f(0))
    )
    return float(f(inter / f(f(area_a + area_b) - inter)))


def reference(boxes: Any, scores: Any, size: int, threshold: float, floor: float) -> list[int]:
    """tf.image.non_max_suppression's documented algorithm: by descending score (the lower
    index first on ties), skip a box that overlaps an already selected one by more than
    the threshold, stop at ``size``; boxes scoring at or below ``floor`` never count. The
    threshold is a float32 tensor there, compared with the float32 IoU: an IoU equal to
    float32(0.2) (just above 0.2) does not exceed it."""
    bound = np.float32(threshold)
    order = sorted(
        (i for i in range(len(scores)) if scores[i] > floor), key=lambda i: (-scores[i], i)
    )
    kept: list[int] = []
    for i in order:
        if len(kept) == size:
            break
        if all(np.float32(iou(boxes[i], boxes[j])) <= bound for j in kept):
            kept.append(i)
    return kept


def run(boxes: Any, scores: Any, size: int, threshold: Any, floor: Any) -> list[int]:
    inputs = [np.asarray(boxes), np.asarray(scores), np.int32(size), threshold, floor]
    (out,) = run_kernel("NonMaxSuppressionV3", inputs, registry=NUMPY).outputs
    assert out.dtype == np.int32 and out.ndim == 1
    return [int(v) for v in out]


coordinates = st.floats(-2, 4, width=32).map(lambda v: round(v, 1))


@settings(max_examples=60, deadline=None)
@given(
    boxes=hnp.arrays(np.float32, st.tuples(st.integers(0, 12), st.just(4)), elements=coordinates),
    data=st.data(),
    size=st.integers(0, 14),
    threshold=st.sampled_from([0.0, 0.2, 0.5, 0.7, 1.0]),
    floor=st.sampled_from([-inf, 0.0, 0.3]),
)
def test_matches_the_documented_greedy_algorithm(
    boxes: Any, data: st.DataObject, size: int, threshold: float, floor: float
) -> None:
    scores = data.draw(
        hnp.arrays(np.float32, len(boxes), elements=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]))
    )  # few values: many ties
    expected = reference(boxes, scores, size, threshold, floor)
    assert run(boxes, scores, size, np.float32(threshold), np.float32(floor)) == expected


def test_an_iou_equal_to_the_float32_threshold_does_not_suppress() -> None:
    """Boxes 0 and 1 overlap by 1.4 of a 7.0 union: their float32 IoU is float32(0.2),
    0.2000000030, which exceeds the float64 0.2 but not the float32 threshold TensorFlow
    compares it with, so box 1 is kept (a case hypothesis found against a reference that
    compared in float64)."""
    boxes = np.array(
        [[2.3, -1.8, 0.3, 0.0], [-0.6, 0.8, 2.6, -0.7], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32
    )
    assert np.float32(iou(boxes[0], boxes[1])) == np.float32(0.2)
    scores = np.zeros(4, np.float32)
    assert run(boxes, scores, 2, np.float32(0.2), np.float32(-inf)) == [0, 1]
    # Just below it, box 1 is suppressed and the next (empty, never overlapping) box is kept.
    below = np.nextafter(np.float32(0.2), np.float32(0))
    assert run(boxes, scores, 2, below, np.float32(-inf)) == [0, 2]


# Each expected list is what TensorFlow 2.21's NonMaxSuppressionV3 returned for the inputs.
TF_CASES = [
    # A NaN box's IoU is NaN: TensorFlow zeroes the candidate's score; it returns to the
    # queue behind every other box while 0 still beats score_threshold.
    (
        [[0, 0, 1, 1], [nan, 0, 1, 1], [0, 0.05, 1, 1.05], [3, 3, 4, 4]],
        [0.9, 0.8, 0.7, 0.6],
        -inf,
        [0, 3, 1],
    ),
    (
        [[0, 0, 1, 1], [nan, 0, 1, 1], [0, 0.05, 1, 1.05], [3, 3, 4, 4]],
        [0.9, 0.8, 0.7, 0.6],
        0.0,
        [0, 3],
    ),
    (
        [[nan, 0, 1, 1], [0, 0, 1, 1], [0, 0.05, 1, 1.05], [3, 3, 4, 4]],
        [0.9, 0.8, 0.7, 0.6],
        -1.0,
        [0, 1, 3],
    ),
    ([[0, 0, 1, 1], [nan, 0, 1, 1], [3, 3, 4, 4]], [0.9, inf, 0.6], -inf, [1, 0, 2]),
    ([[0, 0, 1, 1], [nan, 0, 1, 1]], [0.9, 0.0], -inf, [0, 1]),  # 0 * 0 == 0: selected
    ([[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5]], [nan, 0.8, 0.7], -inf, [1, 2]),  # NaN scores out
    ([[0, 0, inf, 1], [0, 0, 1, 1], [0, 0, 2, 1]], [0.9, 0.8, 0.7], -inf, [0, 1, 2]),
    ([[0, 0, 0, 1], [0, 0, 0, 1]], [0.9, 0.8], -inf, [0, 1]),  # no area: IoU 0
]


@pytest.mark.parametrize(("boxes", "scores", "floor", "expected"), TF_CASES)
def test_nan_inf_and_empty_boxes_as_tensorflow(
    boxes: Any, scores: Any, floor: float, expected: list[int]
) -> None:
    b, s = np.array(boxes, np.float32), np.array(scores, np.float32)
    assert run(b, s, 10, np.float32(0.5), np.float32(floor)) == expected


def test_an_iou_equal_to_the_threshold_keeps_the_box() -> None:
    # IoU 0.5 / 1.5, the float32 nearest 1/3, as the threshold: only a larger IoU drops.
    boxes = np.array([[0, 0, 1, 1], [0, 0.5, 1, 1.5]], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    assert run(boxes, scores, 10, np.float32(1 / 3), np.float32(-inf)) == [0, 1]
    assert run(boxes, scores, 10, np.float32(0.33), np.float32(-inf)) == [0]


def test_float16_boxes_compare_their_float32_iou() -> None:
    # The float32 IoU is 0.500183, which float16 would round to 0.5: TensorFlow 2.21 drops
    # the second box at a threshold of 0.5 all the same (whichever dtype the threshold has).
    boxes = np.array([[0, 0, 1, 1], [0, 0.3333, 1, 1.3333]], np.float16)
    scores = np.array([0.9, 0.8], np.float16)
    for t in (np.float16, np.float32):
        assert run(boxes, scores, 10, t(0.5), t(-inf)) == [0]


def test_ties_go_to_the_lower_index() -> None:
    boxes = np.tile(np.array([[0, 0, 1, 1]], np.float32), (4, 1))
    scores = np.array([1, 2, 2, 1], np.float32)
    assert run(boxes, scores, 4, np.float32(1), np.float32(-inf)) == [1, 2, 0, 3]


def test_the_wrapper_has_tensorflows_arguments_and_defaults() -> None:
    g = kl.Graph()
    with g.as_default():
        boxes = kl.placeholder(kl.float32, [None, 4])
        scores = kl.placeholder(kl.float32, [None])
        default = kl.ops.non_max_suppression(boxes, scores, 10)
        strict = kl.ops.non_max_suppression(
            boxes, scores, max_output_size=1, iou_threshold=0.9, score_threshold=0.85
        )
        named = kl.ops.non_max_suppression(boxes, scores, 3, name="picked")
    assert default.shape.as_list() == [None] and default.dtype == kl.int32
    assert default.node.op == "NonMaxSuppressionV3" and named.node.name == "picked"
    b = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [5, 5, 6, 6]], np.float32)
    s = np.array([0.8, 0.9, -3.0], np.float32)
    out = kl.Session(graph=g).run([default, strict], {boxes: b, scores: s})
    assert [v.tolist() for v in out] == [[1, 2], [1]]  # IoU 0.9 / 1.1 > 0.5; -3 > -inf


@pytest.mark.parametrize(
    ("boxes", "scores", "message"),
    [
        ([5, 3], [5], "boxes must have 4 columns"),
        ([5, 4, 1], [5], "boxes must be 2-D"),
        ([5, 4], [5, 1], "scores must be 1-D"),
        ([5, 4], [6], "scores has 6 entries but boxes has 5 rows"),
    ],
)
def test_bad_shapes_fail_at_build_time(boxes: list[int], scores: list[int], message: str) -> None:
    with kl.Graph().as_default():
        b, s = kl.placeholder(kl.float32, boxes), kl.placeholder(kl.float32, scores)
        with pytest.raises(kl.InvalidArgumentError, match=message) as info:
            kl.ops.non_max_suppression(b, s, 3, name="bad")
    assert "node 'bad' (op NonMaxSuppressionV3)" in str(info.value)


def test_non_scalar_arguments_fail_at_build_time() -> None:
    with kl.Graph().as_default():
        b, s = kl.placeholder(kl.float32, [5, 4]), kl.placeholder(kl.float32, [5])
        with pytest.raises(kl.InvalidArgumentError, match="iou_threshold must be 0-D"):
            kl.ops.non_max_suppression(b, s, 3, iou_threshold=[0.5], name="bad")


BOXES, SCORES = np.zeros((3, 4), np.float32), np.ones(3, np.float32)
HALF, LOW = np.float32(0.5), np.float32(0)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([BOXES, SCORES, np.int32(2), np.float32(1.5), LOW], r"iou_threshold must be in \[0, 1\]"),
        ([BOXES, SCORES, np.int32(2), np.float32(nan), LOW], r"iou_threshold must be in \[0, 1\]"),
        ([BOXES, SCORES, np.int32(-1), HALF, LOW], "max_output_size must be non-negative, got -1"),
        (
            [BOXES, SCORES, np.int32([2]), HALF, LOW],
            r"max_output_size must be 0-D, got shape \[1\]",
        ),
        ([BOXES, SCORES, np.int32(2), HALF, np.float32([0])], "score_threshold must be 0-D"),
        ([np.zeros((3, 3), np.float32), SCORES, np.int32(2), HALF, LOW], "4 columns"),
        ([BOXES, np.ones(4, np.float32), np.int32(2), HALF, LOW], "scores has 4 entries"),
        # TensorFlow's order: the threshold before the boxes.
        ([np.zeros(3, np.float32), SCORES, np.int32(2), np.float32(2), LOW], "iou_threshold"),
    ],
)
def test_bad_values_fail_at_run_time_naming_the_node(inputs: list[Any], message: str) -> None:
    with pytest.raises(kl.KernelError, match=message) as info:
        run_kernel("NonMaxSuppressionV3", inputs, name="the_node", registry=NUMPY)
    assert "node 'the_node' (op NonMaxSuppressionV3)" in str(info.value)
