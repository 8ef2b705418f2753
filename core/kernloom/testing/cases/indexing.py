"""Reference cases: shape and indexing ops (Pad, Gather, StridedSlice, Split, Tile...).

The references are second formulations, never the kernels' own: element-by-element
loops over tiny inputs (gathers, scatters, mirror padding, one-hot, Where), numpy's
own indexing of the equivalent Python key (StridedSlice, Slice, ReverseV2), and values
worked by hand from TensorFlow's documentation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = ["cases", "gather_reference", "strided_slice_args"]

I32, I64 = np.int32, np.int64
TYPES = (kl.float32, kl.int32, kl.bool_, kl.complex64, kl.float16, kl.uint8, kl.int64)


def cases() -> Iterator[Case]:
    yield from _pad_cases()
    yield from _gather_cases()
    yield from _scatter_cases()
    yield from _slice_cases()
    yield from _split_cases()
    yield from _reshape_cases()
    yield from _sequence_cases()
    yield from _selection_cases()


# -- padding --------------------------------------------------------------------------------


def _mirror_reference(mode: str) -> Any:
    """Mirror padding by an explicit source index per output position, dimension by
    dimension (REFLECT skips the edge element, SYMMETRIC repeats it)."""

    def ref(x: Array, paddings: Array) -> Array:
        maps = []
        for d, (before, after) in zip(x.shape, paddings.tolist(), strict=True):
            positions = []
            for i in range(-before, d + after):
                if i < 0:
                    i = -i if mode == "REFLECT" else -i - 1
                elif i >= d:
                    i = 2 * d - 2 - i if mode == "REFLECT" else 2 * d - 1 - i
                positions.append(i)
            maps.append(np.array(positions, dtype=np.intp))
        return x[np.ix_(*maps)] if maps else x.copy()

    return ref


def _pad_cases() -> Iterator[Case]:
    for dtype in TYPES:
        x = sample((2, 3), dtype)
        paddings = np.array([[1, 2], [0, 1]], I32)
        yield Case(
            "Pad",
            [x, paddings],
            reference=lambda x, p: np.pad(x, p.tolist()),
            id=f"Pad-{dtype}",
        )
        constant = np.asarray(sample((), dtype))
        yield Case(
            "PadV2",
            [x, paddings.astype(I64), constant],
            reference=lambda x, p, c: np.pad(x, p.tolist(), constant_values=c),
            id=f"PadV2-{dtype}",
        )
    yield Case(
        "PadV2",
        [np.ones((1, 2), np.float64), np.array([[0, 1], [2, 0]], I32), np.float64(np.nan)],
        reference=lambda x, p, c: np.array([[np.nan, np.nan, 1, 1], [np.nan] * 4]),
        id="PadV2-nan-by-hand",
    )
    yield Case(
        "Pad",
        [np.float32(3), np.zeros((0, 2), I32)],
        reference=lambda x, p: np.float32(3),
        id="Pad-scalar",
    )
    yield Case(
        "Pad",
        [np.zeros((0, 3), np.float32), np.array([[1, 1], [0, 0]], I32)],
        reference=lambda x, p: np.zeros((2, 3), np.float32),
        id="Pad-empty",
    )
    hand = np.array([[1, 2, 3], [4, 5, 6]], I32)
    hand_pads = np.array([[1, 1], [2, 2]], I32)
    expected = {
        "REFLECT": [[6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1]] * 2,
        "SYMMETRIC": [
            [2, 1, 1, 2, 3, 3, 2],
            [2, 1, 1, 2, 3, 3, 2],
            [5, 4, 4, 5, 6, 6, 5],
            [5, 4, 4, 5, 6, 6, 5],
        ],
    }
    for mode, rows in expected.items():
        yield Case(
            "MirrorPad",
            [hand, hand_pads],
            {"mode": mode},
            reference=lambda x, p, rows=rows: np.array(rows, I32),
            id=f"MirrorPad-{mode}-by-hand",
        )
        for dtype in (kl.float32, kl.int64, kl.bool_, kl.complex128):
            x = sample((3, 4, 2), dtype)
            limit = 2 if mode == "REFLECT" else 3
            pads = np.array([[limit, 1], [0, limit], [1, 1]], I64)
            yield Case(
                "MirrorPad",
                [x, pads],
                {"mode": mode},
                reference=_mirror_reference(mode),
                id=f"MirrorPad-{mode}-{dtype}",
            )


# -- gathers and scatters -------------------------------------------------------------------


def gather_reference(axis: int, batch_dims: int) -> Any:
    """One output element at a time: params[outer..., indices[batch..., i...], inner...]."""

    def ref(params: Array, indices: Array, _: Array) -> Array:
        a = axis % params.ndim
        b = batch_dims % indices.ndim if batch_dims < 0 else batch_dims
        shape = (*params.shape[:a], *indices.shape[b:], *params.shape[a + 1 :])
        out = np.zeros(shape, params.dtype)
        k = indices.ndim - b
        for position in np.ndindex(*shape):
            outer, rest = position[:a], position[a:]
            index = int(indices[(*outer[:b], *rest[:k])])
            out[position] = params[(*outer, index, *rest[k:])]
        return out

    return ref


def _gather_nd_reference(params: Array, indices: Array) -> Array:
    depth = indices.shape[-1]
    shape = (*indices.shape[:-1], *params.shape[depth:])
    out = np.zeros(shape, params.dtype)
    for position in np.ndindex(*indices.shape[:-1]):
        out[position] = params[tuple(int(i) for i in indices[position])]
    return out


def _scatter_reference(indices: Array, updates: Array, shape: Array) -> Array:
    out = np.zeros(shape.tolist(), updates.dtype)
    depth = indices.shape[-1]
    for position in np.ndindex(*indices.shape[:-1]):
        target = tuple(int(i) for i in indices[position])
        if out.dtype == np.bool_:
            out[target] = out[target] | updates[position]
        else:
            out[target] = out[target] + updates[position]
    assert depth <= out.ndim
    return out


def _gather_cases() -> Iterator[Case]:
    params = sample((4, 3, 5), kl.float32)
    for axis, indices in (
        (0, np.array([3, 0, 0, 2], I32)),
        (1, np.array([[2, 1], [0, 2]], I64)),
        (-1, np.int32(4)),
        (2, np.zeros((0, 2), I32)),
    ):
        yield Case(
            "GatherV2",
            [params, indices, np.int32(axis)],
            reference=gather_reference(axis, 0),
            id=f"GatherV2-axis{axis}-{np.shape(indices)}",
        )
    for dtype in (kl.int64, kl.bool_, kl.complex128, kl.float16, kl.uint16):
        yield Case(
            "GatherV2",
            [sample((5, 2), dtype), np.array([4, 1, 4], I32), np.int64(0)],
            reference=gather_reference(0, 0),
            id=f"GatherV2-{dtype}",
        )
    batched = sample((2, 3, 4, 2), kl.int32)
    for axis, batch_dims, indices in (
        (1, 1, np.array([[2, 0, 1, 1], [0, 0, 2, 1]], I32)),
        (2, 1, np.array([[3, 0], [1, 1]], I64)),
        (2, 2, np.array([[[3], [0], [1]], [[2], [2], [0]]], I32)),
        (3, -1, np.array([[1, 0, 1], [0, 0, 0]], I32)),
    ):
        yield Case(
            "GatherV2",
            [batched, indices, np.int32(axis)],
            {"batch_dims": batch_dims},
            reference=gather_reference(axis, batch_dims),
            id=f"GatherV2-batch{batch_dims}-axis{axis}",
        )
    # tf.gather_nd's documented examples, then slices of every depth.
    yield Case(
        "GatherNd",
        [np.array([[True, False], [False, True]]), np.array([[1, 1], [0, 1]], I32)],
        reference=lambda p, i: np.array([True, False]),
        id="GatherNd-bool-by-hand",
    )
    yield Case(
        "GatherNd",
        [np.array([[1, 2], [3, 4]], I64), np.array([[1], [0]], I64)],
        reference=lambda p, i: np.array([[3, 4], [1, 2]], I64),
        id="GatherNd-rows-by-hand",
    )
    params3 = sample((3, 2, 4), kl.float64)
    for dtype in (kl.float64, kl.int32, kl.complex64):
        p = params3.astype(dtype.numpy_dtype)
        for indices in (
            np.array([[2, 1, 3], [0, 0, 0]], I32),
            np.array([[[1, 1]], [[2, 0]]], I64),
            np.array([[0], [2], [2]], I32),
            np.zeros((2, 0), I32),
            np.zeros((0, 2), I64),
        ):
            yield Case(
                "GatherNd",
                [p, indices],
                reference=_gather_nd_reference,
                id=f"GatherNd-{dtype}-{indices.shape}",
            )


def _ignore_cases() -> Iterator[Case]:
    """bad_indices_policy IGNORE: the same on every device (TensorFlow's own example)."""
    yield Case(
        "GatherNd",
        [np.array([9, 1, 2, 8, 4], np.float32), np.array([[3], [5], [1]], I32)],
        {"bad_indices_policy": "IGNORE"},
        reference=lambda p, i: np.array([8, 0, 1], np.float32),
        id="GatherNd-ignore-by-hand",
    )
    yield Case(
        "GatherNd",
        [np.arange(6, dtype=np.int64).reshape(3, 2), np.array([[-1], [2], [3]], I64)],
        {"bad_indices_policy": "IGNORE"},
        reference=lambda p, i: np.array([[0, 0], [4, 5], [0, 0]], np.int64),
        id="GatherNd-ignore-rows",
    )
    yield Case(
        "ScatterNd",
        [
            np.array([[1], [9], [1], [-1]], I32),
            np.array([1, 2, 3, 4], np.float32),
            np.array([4], I32),
        ],
        {"bad_indices_policy": "IGNORE"},
        reference=lambda i, u, s: np.array([0, 4, 0, 0], np.float32),
        id="ScatterNd-ignore-by-hand",
    )


def _scatter_cases() -> Iterator[Case]:
    yield from _ignore_cases()
    yield Case(
        "ScatterNd",
        [np.array([[4], [3], [1], [7]], I32), np.array([9, 10, 11, 12], I32), np.array([8], I32)],
        reference=lambda i, u, s: np.array([0, 11, 0, 10, 9, 0, 0, 12], I32),
        id="ScatterNd-by-hand",
    )
    yield Case(
        "ScatterNd",
        [np.array([[1], [1], [0]], I64), np.array([1.5, 2.0, -1.0]), np.array([3], I64)],
        reference=lambda i, u, s: np.array([-1.0, 3.5, 0.0]),
        id="ScatterNd-duplicates-add",
    )
    for dtype in (kl.float32, kl.int64, kl.complex64, kl.bool_, kl.float16):
        for indices, updates_shape, shape in (
            (np.array([[0], [2]], I32), (2, 4, 4), [4, 4, 4]),
            (np.array([[1, 2], [0, 0], [1, 2]], I32), (3, 4), [2, 3, 4]),
            (np.array([[[1, 0, 3]], [[0, 2, 1]]], I64), (2, 1), [2, 3, 4]),
            (np.zeros((0, 2), I32), (0, 4), [2, 3, 4]),
        ):
            yield Case(
                "ScatterNd",
                [indices, sample(updates_shape, dtype), np.array(shape, indices.dtype)],
                reference=_scatter_reference,
                id=f"ScatterNd-{dtype}-{indices.shape}",
            )


# -- slicing ---------------------------------------------------------------------------------


def strided_slice_args(key: Any) -> tuple[list[int], list[int], list[int], dict[str, int]]:
    """The StridedSlice inputs and masks that Python's ``x[key]`` becomes, as TensorFlow's
    ``Tensor.__getitem__`` builds them (an independent spelling of the same slice)."""
    key = key if isinstance(key, tuple) else (key,)
    begin, end, strides = [], [], []
    masks = dict.fromkeys(
        ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"), 0
    )
    for i, item in enumerate(key):
        bit = 1 << i
        if isinstance(item, slice):
            begin.append(0 if item.start is None else item.start)
            end.append(0 if item.stop is None else item.stop)
            strides.append(1 if item.step is None else item.step)
            if item.start is None:
                masks["begin_mask"] |= bit
            if item.stop is None:
                masks["end_mask"] |= bit
        elif item is Ellipsis:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["ellipsis_mask"] |= bit
        elif item is None:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["new_axis_mask"] |= bit
        else:
            begin.append(int(item))
            end.append(int(item) + 1)
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
    return begin, end, strides, masks


STRIDED_KEYS: list[Any] = [
    (slice(1, 3), slice(None, None, 2)),
    (slice(None, None, -1),),
    (Ellipsis, slice(None, None, -2)),
    (1, Ellipsis, 2),
    (None, slice(0, 2), None, Ellipsis, None),
    (-1, slice(-3, None), slice(3, 0, -1)),
    (slice(10, -10, -1), slice(-100, 100)),
    (slice(2, 1), slice(None), 0),
    (Ellipsis,),
    (slice(None), None, slice(None, None, 3), 1),
    (0, 0, 0),
    (slice(-1, None, -3), Ellipsis, None),
]


def _slice_cases() -> Iterator[Case]:
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    for number, key in enumerate(STRIDED_KEYS):
        begin, end, strides, masks = strided_slice_args(key)
        index_type = I32 if number % 2 else I64
        yield Case(
            "StridedSlice",
            [x, *(np.array(v, index_type) for v in (begin, end, strides))],
            masks,
            reference=lambda x, b, e, s, key=key: x[key],
            id=f"StridedSlice-{number}",
        )
    for dtype in (kl.int8, kl.bool_, kl.complex128, kl.uint32):
        begin, end, strides, masks = strided_slice_args((slice(None, None, -1), 1))
        yield Case(
            "StridedSlice",
            [sample((3, 2), dtype), *(np.array(v, I32) for v in (begin, end, strides))],
            masks,
            reference=lambda x, b, e, s: x[::-1, 1],
            id=f"StridedSlice-{dtype}",
        )
    yield Case(
        "StridedSlice",
        [np.float64(2.5), *(np.zeros(0, I32) for _ in range(3))],
        reference=lambda x, b, e, s: x,
        id="StridedSlice-scalar",
    )
    # tf.slice's documented example, then sizes of -1 and empty blocks.
    t = np.array([[[1, 1, 1], [2, 2, 2]], [[3, 3, 3], [4, 4, 4]], [[5, 5, 5], [6, 6, 6]]], I32)
    yield Case(
        "Slice",
        [t, np.array([1, 0, 0], I32), np.array([1, 2, 3], I32)],
        reference=lambda *_: np.array([[[3, 3, 3], [4, 4, 4]]], I32),
        id="Slice-by-hand",
    )
    for dtype in (kl.float32, kl.int64, kl.bool_, kl.complex64):
        x = sample((3, 4, 5), dtype)
        for begin, size in (
            ([1, 0, 2], [-1, 2, -1]),
            ([0, 4, 0], [3, 0, 5]),
            ([2, 1, 4], [1, 3, 1]),
        ):
            yield Case(
                "Slice",
                [x, np.array(begin, I64), np.array(size, I64)],
                reference=lambda x, b, s: x[
                    tuple(
                        slice(int(i), None if int(n) == -1 else int(i) + int(n))
                        for i, n in zip(b, s, strict=True)
                    )
                ],
                id=f"Slice-{dtype}-{begin}-{size}",
            )


def _split_cases() -> Iterator[Case]:
    for dtype in (kl.float32, kl.int32, kl.bool_, kl.complex64, kl.uint64):
        x = sample((6, 4), dtype)
        for axis, num in ((0, 3), (1, 2), (-1, 4), (0, 1)):
            yield Case(
                "Split",
                [np.int32(axis), x],
                {"num_split": num},
                reference=lambda a, x, num=num: tuple(np.split(x, num, axis=int(a))),
                id=f"Split-{dtype}-{axis}-{num}",
            )
        for axis, sizes, index_type in (
            (0, [1, -1, 2], I32),
            (1, [4], I64),
            (-1, [0, 3, 1], np.int8),
        ):
            yield Case(
                "SplitV",
                [x, np.array(sizes, index_type), np.int32(axis)],
                {"num_split": len(sizes)},
                reference=lambda x, s, a: _split_v_reference(x, s, int(a)),
                id=f"SplitV-{dtype}-{axis}-{sizes}",
            )


def _split_v_reference(x: Array, sizes: Array, axis: int) -> tuple[Array, ...]:
    total = x.shape[axis]
    given = [int(s) for s in sizes]
    if -1 in given:
        given[given.index(-1)] = total - sum(s for s in given if s != -1)
    return tuple(np.split(x, np.cumsum(given)[:-1].tolist(), axis=axis))


# -- reshaping ---------------------------------------------------------------------------------


def _reshape_cases() -> Iterator[Case]:
    for dtype in (kl.float32, kl.int16, kl.bool_, kl.complex128):
        x = sample((1, 3, 1, 2), dtype)
        for dims in ([], [0], [-2], [0, 2]):
            yield Case(
                "Squeeze",
                [x],
                {"squeeze_dims": dims},
                reference=lambda x, dims=dims: np.squeeze(x, axis=tuple(dims) if dims else None),
                id=f"Squeeze-{dtype}-{dims}",
            )
        for dim in (0, 2, 4, -1, -5):
            yield Case(
                "ExpandDims",
                [x, np.int64(dim) if dim % 2 else np.array([dim], I32)],
                reference=lambda x, d: np.expand_dims(x, int(np.asarray(d).reshape(-1)[0])),
                id=f"ExpandDims-{dtype}-{dim}",
            )
        for n, axis in ((1, 0), (3, 1), (2, -1), (2, 4)):
            values = [sample((1, 3, 1, 2), dtype) for _ in range(n)]
            yield Case(
                "Pack",
                [values],
                {"axis": axis},
                reference=lambda v, axis=axis: np.stack(v, axis=axis),
                id=f"Pack-{dtype}-{n}-{axis}",
            )
        y = sample((2, 3, 4), dtype)
        for axis in (0, 1, -1):
            yield Case(
                "Unpack",
                [y],
                {"num": y.shape[axis], "axis": axis},
                reference=lambda y, axis=axis: tuple(np.moveaxis(y, axis, 0)),
                id=f"Unpack-{dtype}-{axis}",
            )
        for multiples in ([2, 1, 3], [1, 1, 1], [0, 2, 1]):
            yield Case(
                "Tile",
                [y, np.array(multiples, I32)],
                reference=lambda y, m: np.tile(y, m.tolist()),
                id=f"Tile-{dtype}-{multiples}",
            )
        for source, target in (((3, 1), [2, 3, 4]), ((), [2, 2]), ((1, 4), [0, 4]), ((2,), [2])):
            yield Case(
                "BroadcastTo",
                [sample(source, dtype), np.array(target, I64)],
                reference=lambda x, s: np.broadcast_to(x, s.tolist()).copy(),
                id=f"BroadcastTo-{dtype}-{source}-{target}",
            )
        for axes in ([], [0], [1, -1], [0, 1, 2]):
            yield Case(
                "ReverseV2",
                [y, np.array(axes, I32)],
                reference=lambda y, a: y[
                    tuple(slice(None, None, -1) if i in a % 3 else slice(None) for i in range(3))
                ],
                id=f"ReverseV2-{dtype}-{axes}",
            )
    yield Case(
        "Tile",
        [np.float32(4), np.zeros(0, I32)],
        reference=lambda x, m: np.float32(4),
        id="Tile-scalar",
    )
    yield Case(
        "Unpack",
        [np.zeros((2, 0), np.float32)],
        {"num": 2},
        reference=lambda x: (np.zeros(0, np.float32), np.zeros(0, np.float32)),
        id="Unpack-empty",
    )


# -- sizes, sequences ---------------------------------------------------------------------------


def _sequence_cases() -> Iterator[Case]:
    for shape in ((2, 3), (), (0, 4), (2, 1, 3)):
        x = np.ones(shape, np.float32)
        count = int(np.prod(shape, dtype=np.int64))
        yield Case("Size", [x], reference=lambda x, n=count: np.int32(n), id=f"Size-{shape}")
        yield Case(
            "Size",
            [x.astype(np.bool_)],
            {"out_type": kl.int64},
            reference=lambda x, n=count: np.int64(n),
            id=f"Size-int64-{shape}",
        )
        rank = len(shape)
        yield Case("Rank", [x], reference=lambda x, r=rank: np.int32(r), id=f"Rank-{shape}")
    by_hand: list[tuple[Any, Any, Any, Sequence[Any]]] = [
        (I32(3), I32(18), I32(5), [3, 8, 13]),
        (I64(10), I64(1), I64(-3), [10, 7, 4]),
        (I32(2), I32(2), I32(1), []),
        (np.int8(-5), np.int8(5), np.int8(4), [-5, -1, 3]),
        (np.uint16(1), np.uint16(7), np.uint16(3), [1, 4]),
        (np.uint32(0), np.uint32(3), np.uint32(1), [0, 1, 2]),
        (np.float32(0), np.float32(1), np.float32(0.25), [0, 0.25, 0.5, 0.75]),
        (np.float64(1), np.float64(0), np.float64(-0.4), [1, 0.6, 0.2]),
        (np.float16(0.5), np.float16(2), np.float16(0.5), [0.5, 1.0, 1.5]),
        (np.float32(-1), np.float32(1), np.float32(0.7), [-1, -0.3, 0.4]),
    ]
    for start, limit, delta, values in by_hand:
        yield Case(
            "Range",
            [start, limit, delta],
            reference=lambda s, lim, d, v=values: np.array(v, np.asarray(s).dtype),
            id=f"Range-{np.asarray(start).dtype}-{start}-{limit}-{delta}",
        )


# -- selections ---------------------------------------------------------------------------------


def _one_hot_reference(axis: int) -> Any:
    def ref(indices: Array, depth: Array, on: Array, off: Array) -> Array:
        n = int(depth)
        out = np.empty((*indices.shape, n), on.dtype)
        for position in np.ndindex(*indices.shape):
            for k in range(n):
                out[(*position, k)] = on if int(indices[position]) == k else off
        return np.moveaxis(out, -1, axis if axis != -1 else -1)

    return ref


def _where_reference(x: Array) -> Array:
    coordinates = [p for p in itertools.product(*(range(d) for d in x.shape)) if x[p] != 0]
    return np.array(coordinates, np.int64).reshape(len(coordinates), x.ndim)


def _selection_cases() -> Iterator[Case]:
    # tf.one_hot's documented example: indices [0, 2, -1, 1], depth 3, on 5.0, off 0.0.
    yield Case(
        "OneHot",
        [np.array([0, 2, -1, 1], I64), I32(3), np.float32(5), np.float32(0)],
        reference=lambda *_: np.array([[5, 0, 0], [0, 0, 5], [0, 0, 0], [0, 5, 0]], np.float32),
        id="OneHot-by-hand",
    )
    for index_type in (np.uint8, np.int8, I32, I64):
        indices = np.array([[0, 3], [1, 7]], index_type)
        if np.dtype(index_type).kind == "i":
            indices[1, 1] = -2
        for dtype, on, off in (
            (kl.float32, 1.0, -1.0),
            (kl.int64, 7, 3),
            (kl.bool_, True, False),
            (kl.complex64, 1j, 0),
        ):
            for axis in (-1, 0, 1, 2):
                yield Case(
                    "OneHot",
                    [
                        indices,
                        I32(4),
                        np.asarray(on, dtype.numpy_dtype),
                        np.asarray(off, dtype.numpy_dtype),
                    ],
                    {"axis": axis},
                    reference=_one_hot_reference(axis),
                    id=f"OneHot-{np.dtype(index_type)}-{dtype}-{axis}",
                )
    yield Case(
        "OneHot",
        [np.int32(2), I32(3), np.float64(1), np.float64(0)],
        reference=lambda *_: np.array([0.0, 0.0, 1.0]),
        id="OneHot-scalar-index",
    )
    where_inputs: list[Array] = [
        np.array([[True, False], [False, True], [True, True]]),
        np.array([0.0, -0.0, np.nan, 1.5, 0.0], np.float32),
        np.array([[0, 3, 0], [-1, 0, 0]], I32),
        np.array([True]),
        np.zeros((2, 0, 3), np.bool_),
        np.array([0, 1j, 0], np.complex64),
        np.zeros((3, 2), np.uint8),
    ]
    for x in where_inputs:
        yield Case("Where", [x], reference=_where_reference, id=f"Where-{x.dtype}-{x.shape}")
    # IdentityN: a list of tensors of several dtypes (T: list(type)), each passed through.
    mixed = [
        sample((2, 3), kl.float32),
        np.array([np.nan, -0.0, np.inf], np.float64),
        np.int64(-7),
        np.zeros((0, 2), np.bool_),
        sample((2,), kl.complex64),
    ]
    yield Case("IdentityN", [mixed], reference=lambda xs: tuple(xs), id="IdentityN-mixed")
    yield Case("IdentityN", [mixed[:1]], reference=lambda xs: tuple(xs), id="IdentityN-one")
    for dtype in (kl.float32, kl.int32, kl.bool_, kl.complex128):
        for sc, st, se in (((2, 1, 3), (1, 4, 1), (3,)), ((), (2, 2), (2, 1)), ((4,), (), ())):
            yield Case(
                "SelectV2",
                [sample(sc, kl.bool_), sample(st, dtype), sample(se, dtype)],
                reference=lambda c, a, b: np.where(c, a, b),
                id=f"SelectV2-{dtype}-{sc}-{st}-{se}",
            )
        x = sample((2, 3), dtype)
        yield Case("StopGradient", [x], reference=lambda x: x, id=f"StopGradient-{dtype}")
