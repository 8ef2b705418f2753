"""Reference cases: NonMaxSuppressionV3.

The reference is TensorFlow's documented algorithm written out plainly: the boxes scoring
above ``score_threshold`` sorted by descending score (ties: lower index first), each kept
unless its IoU with a box kept before exceeds ``iou_threshold``, until
``max_output_size`` are kept. The IoU is computed one pair at a time in float32 scalars in
the order TensorFlow's CPU kernel writes it (0 where a box has no positive area) and
compared with the threshold (rounded to the boxes' dtype T), as there. A few cases carry
values worked by hand.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import RNG, Array, Case

__all__ = ["cases", "error_cases", "reference_non_max_suppression"]

f32 = np.float32
NMS_TYPES = (kl.float16, kl.float32)


def _pair_iou(a: Array, b: Array) -> np.float32:
    """IoU of two boxes (y1, x1, y2, x2, corners in either order) in float32."""
    ay0, ay1 = sorted((f32(a[0]), f32(a[2])))
    ax0, ax1 = sorted((f32(a[1]), f32(a[3])))
    by0, by1 = sorted((f32(b[0]), f32(b[2])))
    bx0, bx1 = sorted((f32(b[1]), f32(b[3])))
    area_a = f32((ay1 - ay0) * (ax1 - ax0))
    area_b = f32((by1 - by0) * (bx1 - bx0))
    if area_a <= 0 or area_b <= 0:
        return f32(0)
    height = max(f32(min(ay1, by1) - max(ay0, by0)), f32(0))
    width = max(f32(min(ax1, bx1) - max(ax0, bx0)), f32(0))
    inter = f32(height * width)
    return f32(inter / f32(f32(area_a + area_b) - inter))


def reference_non_max_suppression(
    boxes: Array, scores: Array, max_output_size: Array, iou: Array, floor: Array
) -> Array:
    dtype = boxes.dtype.type
    limit, least = dtype(iou), dtype(floor)
    ranked = sorted(
        (i for i in range(len(scores)) if dtype(scores[i]) > least),
        key=lambda i: (-float(scores[i]), i),
    )
    kept: list[int] = []
    for i in ranked:
        if len(kept) == int(max_output_size):
            break
        if all(_pair_iou(boxes[i], boxes[j]) <= f32(limit) for j in kept):
            kept.append(i)
    return np.asarray(kept, np.int32)


def _nms(
    boxes: Array, scores: Array, size: int, iou: float, floor: float, dtype: kl.DType, t: kl.DType
) -> list[Array]:
    return [
        boxes.astype(dtype.numpy_dtype),
        scores.astype(dtype.numpy_dtype),
        np.int32(size),
        t.numpy_dtype.type(iou),
        t.numpy_dtype.type(floor),
    ]


def _random_boxes(n: int) -> tuple[Array, Array]:
    """n boxes of sides 0.5 to 2 around centres in [0, 3]^2 (many overlap), some with their
    corners flipped, and scores with a few ties."""
    centre = RNG.uniform(0, 3, size=(n, 2))
    half = RNG.uniform(0.25, 1, size=(n, 2))
    boxes = np.concatenate([centre - half, centre + half], axis=1)
    flip = RNG.random(n) < 0.3
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    scores = np.round(RNG.uniform(0, 1, size=n), 1)  # rounded: ties
    return boxes, scores


def _cases() -> Iterator[Case]:
    boxes, scores = _random_boxes(24)
    settings = [(24, 0.5, float("-inf")), (5, 0.3, 0.25), (0, 0.5, 0.0), (30, 0.0, 0.5)]
    settings += [(24, 1.0, float("-inf"))]
    for dtype, t, (size, iou, floor) in itertools.product(NMS_TYPES, NMS_TYPES, settings):
        yield Case(
            "NonMaxSuppressionV3",
            _nms(boxes, scores, size, iou, floor, dtype, t),
            {},
            reference_non_max_suppression,
            id=f"NonMaxSuppressionV3-{dtype}-{t}-{size}-{iou}-{floor}",
        )
    # By hand: boxes 0 and 1 overlap by IoU 9/11 (dropped at 0.5), box 2 is box 0 flipped
    # (IoU 1), box 3 has no area (IoU 0 with everything), box 4 lies apart; scores tie
    # between 1 and 4 (the lower index first).
    by_hand = np.array(
        [[0, 0, 1, 1], [0, 0.1, 1, 1.1], [1, 1, 0, 0], [0.5, 0.5, 0.5, 0.9], [5, 5, 6, 6]],
        np.float32,
    )
    weights = np.array([0.9, 0.8, 0.7, 0.95, 0.8], np.float32)
    expected: list[tuple[float, float, list[int]]] = [
        (0.5, float("-inf"), [3, 0, 4]),
        (0.85, float("-inf"), [3, 0, 1, 4]),
        (1.0, float("-inf"), [3, 0, 1, 4, 2]),
        (0.5, 0.85, [3, 0]),
    ]
    for iou, floor, kept in expected:
        yield Case(
            "NonMaxSuppressionV3",
            _nms(by_hand, weights, 10, iou, floor, kl.float32, kl.float32),
            {},
            _constant(np.array(kept, np.int32)),
            id=f"NonMaxSuppressionV3-by-hand-{iou}-{floor}",
        )
    yield Case(
        "NonMaxSuppressionV3",
        _nms(np.zeros((0, 4)), np.zeros(0), 3, 0.5, 0.0, kl.float32, kl.float32),
        {},
        _constant(np.zeros(0, np.int32)),
        id="NonMaxSuppressionV3-no-boxes",
    )


def _constant(value: Array) -> Callable[..., Array]:
    return lambda *a: value


def cases() -> Iterator[Case]:
    yield from _cases()


def error_cases() -> Iterator[Case]:
    """Inputs NonMaxSuppressionV3 rejects with ``InvalidArgumentError``, as TensorFlow."""
    boxes = np.zeros((3, 4), np.float32)
    scores = np.ones(3, np.float32)
    half, low = np.float32(0.5), np.float32(0)
    bad: list[tuple[str, list[object]]] = [
        ("iou-above-one", [boxes, scores, np.int32(2), np.float32(1.5), low]),
        ("iou-nan", [boxes, scores, np.int32(2), np.float32("nan"), low]),
        ("negative-size", [boxes, scores, np.int32(-1), half, low]),
        ("size-not-scalar", [boxes, scores, np.array([2], np.int32), half, low]),
        ("boxes-3-columns", [np.zeros((3, 3), np.float32), scores, np.int32(2), half, low]),
        ("scores-mismatch", [boxes, np.ones(4, np.float32), np.int32(2), half, low]),
    ]
    for name, inputs in bad:
        yield Case("NonMaxSuppressionV3", inputs, id=f"NonMaxSuppressionV3-error-{name}")
