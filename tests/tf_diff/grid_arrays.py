"""The grid's array, indexing and nn ops: concatenation, stacking, tiling, slicing,
gathering, padding, sequences, orderings and softmax, over dtypes, empty and scalar
shapes, negative axes and out-of-range arguments (both must raise)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from tf_diff.grid import ALL, FLOATS, INTS, DiffCase, edges, sample

ARRAY_TYPES = (np.float32, np.int64, np.bool_, np.complex64, np.uint8, np.float16)


def _i32(value: Any) -> Any:
    return np.asarray(value, np.int32)


def _name(dtype: Any) -> str:
    return np.dtype(dtype).name


def _joining_cases() -> Iterator[DiffCase]:
    for dtype in ARRAY_TYPES:
        a, b = sample((2, 3), dtype), sample((2, 3), dtype)
        for axis in (0, 1, -1, -2, 2, -3):
            yield DiffCase(
                "ConcatV2",
                [[a, b], _i32(axis)],
                host=frozenset({1}),
                id=f"ConcatV2-{_name(dtype)}-{axis}",
            )
            yield DiffCase("Pack", [[a, b]], {"axis": axis}, id=f"Pack-{_name(dtype)}-{axis}")
            yield DiffCase(
                "Unpack",
                [a],
                {"num": 2 if axis in (0, -2) else 3, "axis": axis},
                id=f"Unpack-{_name(dtype)}-{axis}",
            )
        yield DiffCase(
            "ConcatV2",
            [[a, sample((0, 3), dtype)], _i32(0)],
            host=frozenset({1}),
            id=f"ConcatV2-{_name(dtype)}-empty",
        )
        yield DiffCase(
            "ConcatV2",
            [[a, sample((3, 3), dtype)], _i32(1)],
            host=frozenset({1}),
            id=f"ConcatV2-{_name(dtype)}-mismatch",
        )
        yield DiffCase("Pack", [[sample((), dtype)] * 3], id=f"Pack-{_name(dtype)}-scalars")
        for multiples in ([1, 2], [2, 1], [0, 3], [2], [-1, 1]):
            yield DiffCase(
                "Tile",
                [a, _i32(multiples)],
                host=frozenset({1}),
                id=f"Tile-{_name(dtype)}-{multiples}",
            )
        for dim in (0, 2, -1, -3, 3, -4):
            yield DiffCase(
                "ExpandDims",
                [a, _i32(dim)],
                host=frozenset({1}),
                id=f"ExpandDims-{_name(dtype)}-{dim}",
            )
        x = sample((1, 2, 1), dtype)
        for dims in ([], [0], [-1], [0, 2], [1], [3]):
            yield DiffCase(
                "Squeeze", [x], {"squeeze_dims": dims}, id=f"Squeeze-{_name(dtype)}-{dims}"
            )
        for shape in ((), (0, 2), (2, 3, 4)):
            v = sample(shape, dtype)
            for out in (np.int32, np.int64):
                yield DiffCase(
                    "Shape",
                    [v],
                    {"out_type": np.dtype(out)},
                    id=f"Shape-{_name(dtype)}-{shape}-{_name(out)}",
                )
                yield DiffCase(
                    "Size",
                    [v],
                    {"out_type": np.dtype(out)},
                    id=f"Size-{_name(dtype)}-{shape}-{_name(out)}",
                )
            yield DiffCase("Rank", [v], id=f"Rank-{_name(dtype)}-{shape}")
            yield DiffCase("Where", [v], id=f"Where-{_name(dtype)}-{shape}")
        for axes in ([0], [1], [-1], [0, 1], [], [2], [0, 0]):
            yield DiffCase(
                "ReverseV2",
                [a, _i32(axes)],
                host=frozenset({1}),
                id=f"ReverseV2-{_name(dtype)}-{axes}",
            )
        for shape in ([2, 3], [4, 2, 3], [2, 1], [3]):
            yield DiffCase(
                "BroadcastTo",
                [sample((1, 3), dtype), _i32(shape)],
                host=frozenset({1}),
                id=f"BroadcastTo-{_name(dtype)}-{shape}",
            )


def _slicing_cases() -> Iterator[DiffCase]:
    for dtype in ARRAY_TYPES:
        x = sample((3, 4), dtype)
        for begin, size in (
            ([0, 0], [2, 2]),
            ([1, 1], [-1, -1]),
            ([0, 3], [3, 1]),
            ([2, 0], [2, 1]),
            ([0], [1]),
            ([0, 0], [0, 4]),
        ):
            yield DiffCase(
                "Slice",
                [x, _i32(begin), _i32(size)],
                host=frozenset({1, 2}),
                id=f"Slice-{_name(dtype)}-{begin}-{size}",
            )
        for begin, end, strides, masks in (
            ([0, 0], [2, 4], [1, 1], {}),
            ([2, 3], [0, 0], [-1, -1], {}),
            ([0, 1], [3, 4], [2, 2], {}),
            ([1, 0], [2, 4], [1, 1], {"shrink_axis_mask": 1}),
            ([0, 0], [0, 0], [1, 1], {"begin_mask": 3, "end_mask": 3}),
            ([0], [1], [1], {"new_axis_mask": 1}),
            ([0, 0], [1, 1], [1, 0], {}),
            ([-1, -3], [-4, 10], [-1, 1], {}),
            ([0], [2], [1], {"ellipsis_mask": 1}),
        ):
            yield DiffCase(
                "StridedSlice",
                [x, _i32(begin), _i32(end), _i32(strides)],
                masks,
                host=frozenset({1, 2, 3}),
                id=f"StridedSlice-{_name(dtype)}-{begin}-{end}-{strides}-{masks}",
            )
        for indices, axis, batch in (
            ([2, 0], 0, 0),
            ([[1, 3], [0, 0]], 1, 0),
            ([5], 0, 0),
            ([-1], 1, 0),
            ([[0], [1], [2]], 1, 1),
        ):
            yield DiffCase(
                "GatherV2",
                [x, _i32(indices), _i32(axis)],
                {"batch_dims": batch},
                host=frozenset({2}),
                id=f"GatherV2-{_name(dtype)}-{indices}-{axis}-{batch}",
            )
        for indices in ([[0, 1], [2, 3]], [[1]], [[3, 0]], [[0, 4]], [[]]):
            yield DiffCase("GatherNd", [x, _i32(indices)], id=f"GatherNd-{_name(dtype)}-{indices}")
        for paddings in ([[1, 0], [0, 2]], [[0, 0], [0, 0]], [[1, 1]], [[-1, 0], [0, 0]]):
            yield DiffCase(
                "Pad", [x, _i32(paddings)], host=frozenset({1}), id=f"Pad-{_name(dtype)}-{paddings}"
            )
            yield DiffCase(
                "PadV2",
                [x, _i32(paddings), sample((), dtype)],
                host=frozenset({1}),
                id=f"PadV2-{_name(dtype)}-{paddings}",
            )
            for mode in ("REFLECT", "SYMMETRIC"):
                yield DiffCase(
                    "MirrorPad",
                    [x, _i32(paddings)],
                    {"mode": mode},
                    host=frozenset({1}),
                    id=f"MirrorPad-{_name(dtype)}-{paddings}-{mode}",
                )
        yield DiffCase(
            "MirrorPad",
            [x, _i32([[3, 0], [0, 0]])],
            {"mode": "REFLECT"},
            host=frozenset({1}),
            id=f"MirrorPad-{_name(dtype)}-too-wide",
        )
        for num, axis in ((2, 1), (4, 1), (3, 0), (3, 1), (1, -1)):
            yield DiffCase(
                "Split",
                [_i32(axis), x],
                {"num_split": num},
                host=frozenset({0}),
                id=f"Split-{_name(dtype)}-{num}-{axis}",
            )
        for sizes, axis in (([1, 3], 1), ([-1, 1], 0), ([2, 2], 0), ([1, -1, 2], 1)):
            yield DiffCase(
                "SplitV",
                [x, np.asarray(sizes, np.int64), _i32(axis)],
                {"num_split": len(sizes)},
                host=frozenset({1, 2}),
                id=f"SplitV-{_name(dtype)}-{sizes}-{axis}",
            )
        for indices, shape in (([[0], [2]], [4, 4]), ([[1], [1]], [3, 4]), ([[5]], [3, 4])):
            updates = sample((len(indices), 4), dtype)
            if np.dtype(dtype).kind == "b":
                continue  # TF has no CPU ScatterNd for bool
            yield DiffCase(
                "ScatterNd",
                [_i32(indices), updates, _i32(shape)],
                host=frozenset({2}),
                id=f"ScatterNd-{_name(dtype)}-{indices}-{shape}",
            )


def _sequence_cases() -> Iterator[DiffCase]:
    for dtype, (start, limit, delta) in itertools.product(
        (np.int32, np.int64, np.float32, np.float64),
        ((0, 5, 1), (5, 0, -2), (0, 1, 0.3), (3, 3, 1), (0, 5, 0), (0, -5, 1), (1, 10, 4)),
    ):
        if np.dtype(dtype).kind == "i" and isinstance(delta, float):
            continue
        values = [np.asarray(v, dtype) for v in (start, limit, delta)]
        yield DiffCase("Range", values, id=f"Range-{_name(dtype)}-{start}-{limit}-{delta}")
    for ti, dtype in itertools.product(
        (np.int32, np.int64, np.uint8), (np.float32, np.int32, np.bool_)
    ):
        indices = np.asarray([0, 2, 5, 1], ti) if ti == np.uint8 else np.asarray([0, 2, -1, 5], ti)
        for axis, depth in ((-1, 3), (0, 3), (-1, 0), (1, 4)):
            yield DiffCase(
                "OneHot",
                [indices, _i32(depth), sample((), dtype), sample((), dtype)],
                {"axis": axis},
                host=frozenset({1}),
                id=f"OneHot-{_name(ti)}-{_name(dtype)}-{axis}-{depth}",
            )


def _ordering_cases() -> Iterator[DiffCase]:
    for dtype in FLOATS + INTS + (np.complex64,):
        x = sample((3, 4), dtype)
        for axis, exclusive, reverse in itertools.product(
            (0, 1, -1, 2), (False, True), (False, True)
        ):
            yield DiffCase(
                "Cumsum",
                [x, _i32(axis)],
                {"exclusive": exclusive, "reverse": reverse},
                host=frozenset({1}),
                id=f"Cumsum-{_name(dtype)}-{axis}-{exclusive}-{reverse}",
                approximate=True,
            )
    for dtype in FLOATS + INTS:
        x = sample((3, 5), dtype)
        for k in (0, 2, 5, 6):
            yield DiffCase(
                "TopKV2", [x, _i32(k)], host=frozenset({1}), id=f"TopKV2-{_name(dtype)}-{k}"
            )
        e = edges(dtype)
        yield DiffCase(
            "TopKV2", [e, _i32(e.size)], host=frozenset({1}), id=f"TopKV2-{_name(dtype)}-edges"
        )
    for dtype in FLOATS + INTS:
        t = sample((2, 3), dtype)
        for lo, hi in (
            (sample((), dtype), sample((), dtype)),
            (sample((2, 3), dtype), sample((2, 3), dtype)),
            (sample((3,), dtype), sample((), dtype)),
        ):
            yield DiffCase(
                "ClipByValue", [t, lo, hi], id=f"ClipByValue-{_name(dtype)}-{lo.shape}-{hi.shape}"
            )
        lo, hi = np.asarray(0, dtype), np.asarray(1, dtype)
        yield DiffCase(
            "ClipByValue", [edges(dtype), lo, hi], id=f"ClipByValue-{_name(dtype)}-edges"
        )
    for dtype in ALL:
        if np.dtype(dtype).kind == "b":
            continue
        for n in (1, 2, 3):
            yield DiffCase(
                "AddN",
                [[sample((2, 3), dtype) for _ in range(n)]],
                id=f"AddN-{_name(dtype)}-{n}",
                approximate=True,
            )
        yield DiffCase(
            "AddN",
            [[sample((2, 3), dtype), sample((3,), dtype)]],
            id=f"AddN-{_name(dtype)}-mismatch",
        )
    for op, dtype in itertools.product(("Softmax", "LogSoftmax"), FLOATS):
        for shape in ((2, 5), (3,), (2, 0), ()):
            yield DiffCase(
                op, [sample(shape, dtype) * 10], id=f"{op}-{_name(dtype)}-{shape}", approximate=True
            )
        yield DiffCase(op, [edges(dtype)], id=f"{op}-{_name(dtype)}-edges", approximate=True)


SEGMENT_TYPES = (
    np.float32,
    np.float64,
    np.float16,
    np.int32,
    np.int64,
    np.int8,
    np.uint8,
    np.uint32,
    np.complex64,
)


def _segment_cases() -> Iterator[DiffCase]:
    """The segment reductions: empty segments, negative and out-of-range ids, ids of
    rank 2, edge values (NaN, +-inf, integer limits), empty data and complex (sum, prod,
    mean; both must raise for max and min), sorted ids and ids that are not."""
    for kind in ("Sum", "Max", "Min", "Prod"):
        op = f"UnsortedSegment{kind}"
        for dtype in SEGMENT_TYPES:
            name = f"{op}-{_name(dtype)}"
            edge = edges(dtype)
            edge_ids = (np.arange(edge.size) * 7 % 4).astype(np.int64)  # 4 segments, one empty
            for label, data, ids, count in (
                ("rows", sample((6, 2), dtype), _i32([3, 0, -1, 3, 1, 0]), 5),
                ("rank2", sample((2, 3, 2), dtype), np.array([[1, -2, 1], [0, 4, 4]]), 6),
                ("edges", edge, edge_ids, 5),
                ("nan-first", edge[[0, 1, 2, 0, 3, 0, 0, 4]], _i32([0, 0, 0, 1, 1, 2, 2, 1]), 4),
                ("past-end", sample((3,), dtype), _i32([0, 2, 1]), 2),
                ("empty", sample((0, 3), dtype), _i32([]), 2),
                ("prefix", sample((4, 2), dtype), _i32([0, 1, 1]), 2),
            ):
                yield DiffCase(
                    op,
                    [data, ids, np.asarray(count, np.int64 if label == "rank2" else np.int32)],
                    host=frozenset({2}),
                    id=f"{name}-{label}",
                )
    yield DiffCase(
        "UnsortedSegmentSum",
        [sample((4,), np.float64), np.array([1, 0, -1, 1], np.int16), _i32(2)],
        host=frozenset({2}),
        id="UnsortedSegmentSum-int16-ids",
    )
    for kind in ("Sum", "Mean", "Max", "Min", "Prod"):
        op = f"Segment{kind}"
        for dtype in SEGMENT_TYPES:
            name = f"{op}-{_name(dtype)}"
            edge = edges(dtype)
            for label, data, ids in (
                ("rows", sample((6, 2), dtype), _i32([0, 0, 2, 2, 2, 5])),
                ("edges", edge, np.sort(np.arange(edge.size) * 7 % 5).astype(np.int64)),
                ("nan-first", edge[[0, 1, 2, 0, 3, 0, 0, 4]], _i32([0, 0, 0, 1, 1, 1, 3, 3])),
                ("unsorted", sample((4,), dtype), _i32([0, 2, 1, 3])),
                ("negative", sample((3,), dtype), _i32([-1, 0, 1])),
                ("empty", sample((0, 2), dtype), _i32([])),
                ("short", sample((4, 2), dtype), _i32([0, 1])),
            ):
                yield DiffCase(op, [data, ids], id=f"{name}-{label}")


def _space_batch_cases() -> Iterator[DiffCase]:
    """SpaceToBatchND and BatchToSpaceND over every dtype (complex and bool: no CPU kernel
    in either, both must raise), blocks of one to three dimensions, a trailing depth, no
    block at all, empty batches and every bad argument TensorFlow's kernels check."""
    spaces: tuple[tuple[tuple[int, ...], list[int], list[list[int]]], ...] = (
        ((2, 4, 6, 3), [2, 3], [[1, 1], [0, 3]]),
        ((1, 5, 2), [3], [[1, 0]]),
        ((2, 2, 2, 2, 1), [1, 2, 2], [[0, 0], [1, 1], [0, 2]]),
        ((2, 3), [], []),
        ((0, 4, 2), [2], [[0, 0]]),
        ((2, 4, 6, 3), [3], [[1, 0]]),  # 5 not divisible by 3
        ((2, 4, 6, 3), [0], [[0, 0]]),
        ((2, 4, 6, 3), [2], [[-1, 1]]),
        ((2, 4, 6, 3), [2, 2, 1, 1], [[0, 0]] * 4),  # rank too small
        ((2, 4, 6, 3), [2], [[0, 0], [0, 0]]),
    )
    batches: tuple[tuple[tuple[int, ...], list[int], list[list[int]]], ...] = (
        ((12, 2, 1, 3), [2, 3], [[0, 0], [0, 0]]),
        ((12, 2, 1, 3), [2, 3], [[1, 1], [0, 2]]),
        ((6, 2, 2), [3], [[1, 1]]),
        ((2, 3), [], []),
        ((0, 2, 2), [2], [[1, 0]]),
        ((12, 2, 1, 3), [5], [[0, 0]]),
        ((12, 2, 1, 3), [2], [[3, 2]]),
        ((12, 2, 1, 3), [2], [[-1, 0]]),
        ((12, 2, 1, 3), [0], [[0, 0]]),
        ((12, 2, 1, 3), [2, 2, 2, 2], [[0, 0]] * 4),
    )
    for dtype in ALL:
        for op, table in (("SpaceToBatchND", spaces), ("BatchToSpaceND", batches)):
            for shape, block, amounts in table:
                index = np.int64 if len(block) == 1 else np.int32
                yield DiffCase(
                    op,
                    [
                        sample(shape, dtype),
                        np.asarray(block, index).reshape(-1),
                        np.asarray(amounts, np.int32).reshape(-1, 2),
                    ],
                    host=frozenset({1, 2}),
                    id=f"{op}-{_name(dtype)}-{shape}-{block}-{amounts}",
                )


def _spectral_cases() -> Iterator[DiffCase]:
    """The FFT ops on complex64/complex128 (float32/float64 for RFFT): ranks 1-3, lengths
    even and odd, RFFT and IRFFT cropping, shorter inputs and bad fft_lengths (both must
    raise), empty inputs of the complex ops. Compared within LINALG_TOLERANCE: DUCC and
    pocketfft sum in other orders. Left out: RFFT/IRFFT of an empty input with a positive
    fft_length and RFFT with fft_length 0 (TensorFlow returns uninitialised memory, and
    RFFT of length 0 aborts its process; kernloom gives zeros / an empty output)."""
    for op in ("FFT", "IFFT", "FFT2D", "IFFT2D"):
        for dtype in (np.complex64, np.complex128):
            name = f"{op}-{_name(dtype)}"
            for shape in ((8,), (3, 5), (2, 3, 4), (2, 0, 3), (1, 1)):
                yield DiffCase(op, [sample(shape, dtype)], id=f"{name}-{shape}", factorised=True)
        yield DiffCase(op, [np.complex64(1)], id=f"{op}-scalar")  # both raise
    yield DiffCase("FFT2D", [sample((4,), np.complex64)], id="FFT2D-rank1")
    for real, complex_ in ((np.float32, np.complex64), (np.float64, np.complex128)):
        attrs = {"Treal": np.dtype(real), "Tcomplex": np.dtype(complex_)}
        for shape, length in (((8,), 8), ((2, 7), 7), ((3, 9), 6), ((2, 5), 1), ((4,), 9)):
            yield DiffCase(
                "RFFT",
                [sample(shape, real), _i32([length])],
                attrs,
                host=frozenset({1}),
                id=f"RFFT-{_name(real)}-{shape}-{length}",
                factorised=True,
            )
        for shape, length in (((5,), 8), ((2, 4), 7), ((3, 9), 6), ((2, 3), 1), ((3,), 6)):
            yield DiffCase(
                "IRFFT",
                [sample(shape, complex_), _i32([length])],
                attrs,
                host=frozenset({1}),
                id=f"IRFFT-{_name(complex_)}-{shape}-{length}",
                factorised=True,
            )
    for op, x in (("RFFT", sample((4,), np.float32)), ("IRFFT", sample((4,), np.complex64))):
        for length, label in ((_i32([-1]), "negative"), (_i32([2, 2]), "two")):
            yield DiffCase(op, [x, length], host=frozenset({1}), id=f"{op}-{label}-length")


def cases() -> Iterator[DiffCase]:
    yield from _spectral_cases()
    yield from _segment_cases()
    yield from _space_batch_cases()
    yield from _joining_cases()
    yield from _slicing_cases()
    yield from _sequence_cases()
    yield from _ordering_cases()
