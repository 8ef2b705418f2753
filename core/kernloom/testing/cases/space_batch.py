"""Reference cases: SpaceToBatchND and BatchToSpaceND.

The reference walks the output element by element with TensorFlow's documented index
arithmetic (output batch = offset within the block, row-major, * batch + input batch;
padded position = position * block + offset), never the kernels' pad-reshape-transpose.
The first cases are tf.space_to_batch_nd's and tf.batch_to_space's documented examples.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample

__all__ = ["batch_to_space_reference", "cases", "space_to_batch_reference"]

I32, I64 = np.int32, np.int64
TYPES = (kl.float32, kl.int64, kl.uint8, kl.float16, kl.int8, kl.float64)


def space_to_batch_reference(x: Array, block_shape: Array, paddings: Array) -> Array:
    block, pads = block_shape.tolist(), paddings.reshape(-1, 2).tolist()
    m, batch = len(block), x.shape[0]
    spatial = [(x.shape[1 + i] + a + b) // block[i] for i, (a, b) in enumerate(pads)]
    out = np.zeros((batch * math.prod(block), *spatial, *x.shape[1 + m :]), x.dtype)
    for index in np.ndindex(*out.shape[: 1 + m]):
        offset, b = divmod(index[0], batch)
        offsets = np.unravel_index(offset, block) if block else ()
        source = [index[1 + i] * block[i] + int(offsets[i]) - pads[i][0] for i in range(m)]
        if all(0 <= s < x.shape[1 + i] for i, s in enumerate(source)):
            out[index] = x[(b, *source)]
    return out


def batch_to_space_reference(x: Array, block_shape: Array, crops: Array) -> Array:
    block, crop = block_shape.tolist(), crops.reshape(-1, 2).tolist()
    m = len(block)
    batch = x.shape[0] // math.prod(block)
    spatial = [x.shape[1 + i] * block[i] - a - b for i, (a, b) in enumerate(crop)]
    out = np.zeros((batch, *spatial, *x.shape[1 + m :]), x.dtype)
    for index in np.ndindex(*out.shape[: 1 + m]):
        uncropped = [index[1 + i] + crop[i][0] for i in range(m)]
        offsets = [u % block[i] for i, u in enumerate(uncropped)]
        offset = int(np.ravel_multi_index(offsets, block)) if block else 0
        source = [u // block[i] for i, u in enumerate(uncropped)]
        out[index] = x[(offset * batch + index[0], *source)]
    return out


def cases() -> Iterator[Case]:
    yield from _documented()
    for dtype in TYPES:
        for shape, block, pads in (
            ((2, 4, 6, 3), [2, 3], [[1, 1], [0, 3]]),
            ((1, 5, 2), [3], [[1, 0]]),
            ((3, 2, 2, 2, 1), [1, 2, 2], [[0, 0], [1, 1], [0, 2]]),
            ((2, 4, 3), [1], [[0, 0]]),
            ((2, 3), np.zeros(0, I64).tolist(), np.zeros((0, 2), I64).tolist()),
            ((0, 4, 2), [2], [[0, 0]]),
        ):
            x = sample(shape, dtype)
            b, p = np.array(block, I64).reshape(-1), np.array(pads, I32).reshape(-1, 2)
            if block:
                b = b.astype(I32)
            yield Case(
                "SpaceToBatchND",
                [x, b, p],
                reference=space_to_batch_reference,
                id=f"SpaceToBatchND-{dtype}-{shape}-{block}-{pads}",
            )
            y = space_to_batch_reference(x, b, np.zeros_like(p))
            yield Case(
                "BatchToSpaceND",
                [y, b, p],
                reference=batch_to_space_reference,
                id=f"BatchToSpaceND-{dtype}-{y.shape}-{block}-{pads}",
            )


def _documented() -> Iterator[Case]:
    """The examples of tf.space_to_batch_nd and tf.batch_to_space, by hand."""
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 2, 2, 1)
    block, zero = np.array([2, 2], I32), np.zeros((2, 2), I32)
    yield Case(
        "SpaceToBatchND",
        [x, block, zero],
        reference=lambda *a: np.array([1, 2, 3, 4], np.float32).reshape(4, 1, 1, 1),
        id="SpaceToBatchND-tf-doc-1",
    )
    x4 = np.arange(1, 17, dtype=np.int32).reshape(1, 4, 4, 1)
    expected: Any = np.array(
        [[[1, 3], [9, 11]], [[2, 4], [10, 12]], [[5, 7], [13, 15]], [[6, 8], [14, 16]]], I32
    ).reshape(4, 2, 2, 1)
    yield Case(
        "SpaceToBatchND",
        [x4, block, zero],
        reference=lambda *a: expected,
        id="SpaceToBatchND-tf-doc-3",
    )
    batch2 = np.arange(1, 17, dtype=np.int32).reshape(2, 2, 4, 1)
    yield Case(
        "SpaceToBatchND",
        [batch2, block, np.array([[0, 0], [2, 0]], I32)],
        reference=lambda *a: np.array(
            [
                [0, 1, 3],
                [0, 9, 11],
                [0, 2, 4],
                [0, 10, 12],
                [0, 5, 7],
                [0, 13, 15],
                [0, 6, 8],
                [0, 14, 16],
            ],
            I32,
        ).reshape(8, 1, 3, 1),
        id="SpaceToBatchND-tf-doc-4",
    )
    yield Case(
        "BatchToSpaceND",
        [expected, block, zero],
        reference=lambda *a: x4,
        id="BatchToSpaceND-tf-doc-3",
    )
