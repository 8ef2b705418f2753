"""Reference cases: the segment reductions (UnsortedSegment{Sum,Max,Min,Prod},
Segment{Sum,Mean,Max,Min,Prod}).

The reference is TensorFlow's CPU loop written out element by element (``_fold``): each
segment starts from TensorFlow's start value and takes the rows with its id in data
order, max keeping the accumulator only while the new value is smaller (``acc = x unless
x < acc``, which is what decides NaN). TensorFlow's documented examples are checked by
hand, as are NaN, empty segments, negative ids, int16 ids and integer means.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = ["cases", "segment_reference", "unsorted_segment_reference"]

I32, I64 = np.int32, np.int64
NAN = math.nan
UNSORTED_TYPES = (kl.float32, kl.float64, kl.float16, kl.int32, kl.int64, kl.int8, kl.uint8)
COMPLEX_OK = ("Sum", "Prod", "Mean")


def _fold(kind: str, values: list[Any], start: Any) -> Any:
    """TensorFlow's CPU reduction of one segment's values, in data order."""
    acc = start
    with np.errstate(all="ignore"):  # integer products wrap, as TensorFlow's
        for x in values:
            if kind == "Sum":
                acc = acc + x
            elif kind == "Prod":
                acc = acc * x
            elif kind == "Max":
                acc = acc if x < acc else x
            else:
                acc = acc if x > acc else x
    return acc


def _extreme(dtype: np.dtype[Any], kind: str, *, finite: bool) -> Any:
    if dtype.kind == "f" and not finite:
        return dtype.type(-math.inf if kind == "Max" else math.inf)
    info: Any = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return dtype.type(info.min if kind == "Max" else info.max)


def unsorted_segment_reference(kind: str) -> Callable[..., Array]:
    def reference(data: Array, ids: Array, num_segments: Any) -> Array:
        count = int(num_segments)
        inner_shape = data.shape[ids.ndim :]
        rows = data.reshape(ids.size, math.prod(inner_shape))
        flat = ids.reshape(-1).tolist()
        start = {"Sum": data.dtype.type(0), "Prod": data.dtype.type(1)}.get(kind)
        if start is None:
            start = _extreme(data.dtype, kind, finite=True)
        out = np.empty((count, rows.shape[1]), data.dtype)
        for s in range(count):
            for c in range(rows.shape[1]):
                members = [rows[j, c] for j, i in enumerate(flat) if i == s]
                out[s, c] = _fold(kind, members, start)
        return out.reshape(count, *inner_shape)

    return reference


def segment_reference(kind: str) -> Callable[..., Array]:
    def reference(data: Array, ids: Array) -> Array:
        flat = ids.tolist()
        count = flat[-1] + 1 if flat else 0
        rows = data.reshape(len(flat), math.prod(data.shape[1:]))
        out = np.empty((count, rows.shape[1]), data.dtype)
        dtype = data.dtype
        for s in range(count):
            for c in range(rows.shape[1]):
                members = [rows[j, c] for j, i in enumerate(flat) if i == s]
                if not members:
                    out[s, c] = 1 if kind == "Prod" else 0
                elif kind == "Mean":
                    total = _fold("Sum", members, dtype.type(0))
                    if dtype.kind in "iu":  # C++'s integer division, toward zero
                        q = abs(int(total)) // len(members)
                        out[s, c] = q if total >= 0 else -q
                    else:
                        out[s, c] = total / dtype.type(len(members))
                else:
                    start = {"Sum": dtype.type(0), "Prod": dtype.type(1)}.get(kind)
                    if start is None:
                        start = _extreme(dtype, kind, finite=False)
                    out[s, c] = _fold(kind, members, start)
        return out.reshape(count, *data.shape[1:])

    return reference


def cases() -> Iterator[Case]:
    yield from _by_hand()
    yield from _unsorted_cases()
    yield from _sorted_cases()


def _by_hand() -> Iterator[Case]:
    """tf.math.unsorted_segment_*'s documented example, NaN, and the start values."""
    c = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [4, 3, 2, 1]], I32)
    for kind, first in (
        ("Sum", [5, 5, 5, 5]),
        ("Max", [4, 3, 3, 4]),
        ("Min", [1, 2, 2, 1]),
        ("Prod", [4, 6, 6, 4]),
    ):
        yield Case(
            f"UnsortedSegment{kind}",
            [c, np.array([0, 1, 0], I32), np.int32(2)],
            reference=lambda *a, f=first: np.array([f, [5, 6, 7, 8]], I32),
            id=f"UnsortedSegment{kind}-tf-doc",
        )
    # NaN: TensorFlow keeps the values after the last NaN; a trailing NaN wins.
    data = np.array([5, NAN, 1, NAN, 2, 1, NAN, 3, 7], np.float32)
    ids = np.array([0, 0, 0, 1, 1, 2, 2, 3, 3], I32)
    for kind, expected in (
        ("Max", [1, 2, NAN, 7, -3.4028235e38]),
        ("Min", [1, 2, NAN, 3, 3.4028235e38]),
    ):
        yield Case(
            f"UnsortedSegment{kind}",
            [data, ids, np.int64(5)],
            reference=lambda *a, e=expected: np.array(e, np.float32),
            id=f"UnsortedSegment{kind}-nan-by-hand",
        )
        yield Case(
            f"Segment{kind}",
            [data, ids],
            reference=lambda *a, e=expected: np.array(e[:4], np.float32),
            id=f"Segment{kind}-nan-by-hand",
        )
    # After a NaN the next value replaces the accumulator, the start value included.
    for kind, value in (("Max", -np.inf), ("Min", np.inf)):
        yield Case(
            f"UnsortedSegment{kind}",
            [np.array([NAN, value, value], np.float32), np.array([0, 0, 1], I32), np.int32(2)],
            reference=lambda *a, v=value: np.array(
                [v, -3.4028235e38 if v < 0 else 3.4028235e38], np.float32
            ),
            id=f"UnsortedSegment{kind}-nan-then-infinity-by-hand",
        )
    # Empty segments: lowest/highest (not +-inf) for the unsorted ops, -inf in data kept.
    yield Case(
        "UnsortedSegmentMax",
        [np.array([-np.inf, 2], np.float16), np.array([0, 2], I32), np.int32(3)],
        reference=lambda *a: np.array([-65504, -65504, 2], np.float16),
        id="UnsortedSegmentMax-float16-lowest-by-hand",
    )
    yield Case(
        "UnsortedSegmentMin",
        [np.array([7, 9], np.uint8), np.array([-1, 1], I64), np.int64(3)],
        reference=lambda *a: np.array([255, 9, 255], np.uint8),
        id="UnsortedSegmentMin-uint8-negative-id-by-hand",
    )
    yield Case(
        "UnsortedSegmentSum",
        [np.array([1.5, 2, 4], np.float64), np.array([1, -3, 1], np.int16), np.int32(2)],
        reference=lambda *a: np.array([0, 5.5]),
        id="UnsortedSegmentSum-int16-ids-by-hand",
    )
    yield Case(
        "SegmentMax",
        [np.array([-np.inf, np.inf], np.float32), np.array([0, 2], I32)],
        reference=lambda *a: np.array([-np.inf, 0, np.inf], np.float32),
        id="SegmentMax-infinities-by-hand",
    )
    yield Case(
        "SegmentMean",
        [np.array([1, 2, -1, -2, 7], I32), np.array([0, 0, 1, 1, 3], I64)],
        reference=lambda *a: np.array([1, -1, 0, 7], I32),
        id="SegmentMean-int32-truncates-by-hand",
    )
    yield Case(
        "SegmentProd",
        [np.array([5, 2, 7, 1], I32), np.array([0, 0, 1, 3], I32)],
        reference=lambda *a: np.array([10, 7, 1, 1], I32),
        id="SegmentProd-empty-is-one-by-hand",
    )


def _unsorted_cases() -> Iterator[Case]:
    ids_1d = np.array([3, 0, -1, 3, 1, 0], I32)  # segment 2 and 4 empty, one dropped
    ids_2d = np.array([[1, -2, 1], [0, 4, 4]], I64)  # 2 and 3 empty
    for kind in ("Sum", "Max", "Min", "Prod"):
        op = f"UnsortedSegment{kind}"
        types = UNSORTED_TYPES + ((kl.complex64,) if kind in COMPLEX_OK else ())
        for dtype in types:
            small = kind == "Prod"
            for data_shape, ids, count in (
                ((6, 3), ids_1d, 5),
                ((2, 3, 2), ids_2d, 5),
                ((2, 3), ids_2d, np.int64(6)),
                ((0, 3), np.zeros(0, I32), 3),
                ((6,), ids_1d, 4),
            ):
                yield Case(
                    op,
                    [sample(data_shape, dtype, small=small), ids, np.int32(count)],
                    reference=unsorted_segment_reference(kind),
                    id=f"{op}-{dtype}-{data_shape}-{ids.shape}",
                )


def _sorted_cases() -> Iterator[Case]:
    sorted_ids = np.array([0, 0, 2, 2, 2, 5], I32)  # 1, 3, 4 empty
    for kind in ("Sum", "Mean", "Max", "Min", "Prod"):
        op = f"Segment{kind}"
        types = UNSORTED_TYPES + ((kl.complex64,) if kind in COMPLEX_OK else ())
        for dtype in types:
            for data_shape, ids in (
                ((6, 2), sorted_ids),
                ((6,), sorted_ids.astype(I64)),
                ((3, 2, 2), np.array([1, 1, 1], I32)),
                ((0, 4), np.zeros(0, I32)),
            ):
                yield Case(
                    op,
                    [sample(data_shape, dtype, small=kind == "Prod"), ids],
                    reference=segment_reference(kind),
                    id=f"{op}-{dtype}-{data_shape}-{ids.dtype}",
                )
