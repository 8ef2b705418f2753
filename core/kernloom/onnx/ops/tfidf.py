"""ONNX's TfIdfVectorizer on integer tokens, composed of kernloom ops.

Everything but the tokens is an attribute, so the import works the op out in full: which
pool n-grams the reference's trie holds and under which id, which skip distances count
which n-gram lengths, and where each n-gram's count goes. What is left for the graph is
one comparison per (length, skip) pair:

* a constant index table [positions, n] (``p + skip * j``) gathers every candidate
  n-gram from the tokens' last axis (GatherV2), giving [N, positions, n];
* Equal against the pool's n-grams of that length ([K, n]) and All over the last axis
  say which candidate is which n-gram; a Sum over the positions counts them, [N, K];
* one MatMul by a constant one-hot [n-grams, output size] puts each count at its
  ``ngram_indexes`` slot (several n-grams may share one), and the mode's weighting is last.

The counting follows onnx's reference (``onnx/reference/ops/op_tfidf_vectorizer.py``)
exactly, quirks included: a skip distance ``s`` (1 to ``max_skip_count + 1``) forms an
n-gram from tokens ``p, p + s, ..., p + s * (n - 1)``; unigrams are counted at the first
skip distance only (where ``min_gram_length`` is 1); an n-gram the pool lists twice counts
under its last listing only, the earlier one's slot staying zero; lengths outside
[``min_gram_length``, ``max_gram_length``] still use up their ids.

Refused at import, naming the node: string tokens (``pool_strings``: kernloom has no
string dtype), an input whose last dimension is unknown (the index tables are constants),
an input of rank other than 1 or 2, ``ngram_indexes`` too short for the pool or negative, and
``weights`` shorter than the output. One deviation: an input [0, C] gives an empty
[0, output size] result, where the reference raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import ints

Result = Sequence[Tensor | None]

_MODES = ("TF", "IDF", "TFIDF")
_REQUIRED = (
    "max_gram_length",
    "min_gram_length",
    "max_skip_count",
    "mode",
    "ngram_counts",
    "ngram_indexes",
)


def _pool_ids(node: OnnxNode, pool: list[int]) -> dict[tuple[int, ...], int]:
    """Each pool n-gram the reference's trie holds (lengths in range), with its id (from
    1): ids run over every length, in range or not; a repeated n-gram keeps its last."""
    counts = ints(node.attr("ngram_counts"))
    low, high = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
    grams: dict[tuple[int, ...], int] = {}
    next_id = 1
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        if end - start <= 0:
            continue
        number = (end - start) // size
        if not low <= size <= high:
            next_id += number
            continue
        place = start
        for _ in range(number):
            if place + size > len(pool):
                break  # the pool runs out: no id, as the reference's loop
            grams[tuple(pool[place : place + size])] = next_id
            next_id += 1
            place += size
    return grams


def _counted_skips(node: OnnxNode) -> list[tuple[int, int]]:
    """(skip distance, shortest length counted at it): unigrams at the first one only."""
    shortest = int(node.attr("min_gram_length"))
    longest = int(node.attr("max_gram_length"))
    found = []
    for skip in range(1, int(node.attr("max_skip_count")) + 2):
        found.append((skip, shortest))
        if shortest == 1:
            shortest += 1
            if shortest > longest:
                break
    return found


def _check_attributes(node: OnnxNode) -> list[int]:
    """The pool of integer tokens, after refusing what the converter cannot take."""
    missing = [name for name in _REQUIRED if node.attr(name) is None]
    if missing:
        raise node.fail(f"attribute(s) {', '.join(missing)} are required")
    if node.attr("pool_strings") is not None:
        raise node.fail(
            "pool_strings is not supported: kernloom has no string dtype; "
            "give integer tokens and pool_int64s"
        )
    if node.attr("pool_int64s") is None:
        raise node.fail("pool_int64s is required (the pool of integer n-grams)")
    if node.attr("mode") not in _MODES:
        raise node.fail(f"mode {node.attr('mode')!r} is not one of {', '.join(_MODES)}")
    return ints(node.attr("pool_int64s"))


def _slots(node: OnnxNode, grams: dict[tuple[int, ...], int]) -> tuple[list[int], int]:
    """Each id's output slot (``ngram_indexes``) and the output size."""
    indexes = ints(node.attr("ngram_indexes"))
    if not indexes or min(indexes) < 0:
        raise node.fail(f"ngram_indexes {indexes} must be non-empty and non-negative")
    top = max(grams.values(), default=0)
    if top > len(indexes):
        raise node.fail(
            f"ngram_indexes has {len(indexes)} entries but the pool has at least {top} "
            "n-grams: give one output index per pool n-gram"
        )
    return indexes, max(indexes) + 1


def _row_counts(
    ctx: ConversionContext, rows: Tensor, width: int, length: int, skips: list[int], pool: Any
) -> Tensor | None:
    """[N, K]: how often each of the K pool n-grams of ``length`` (``pool`` [K, length])
    occurs in each row, summed over the skip distances; None when none fits."""
    total: Tensor | None = None
    wanted = ops.expand_dims(ctx.const(pool), ctx.const(np.int32(0)))  # [1, 1, K, n]
    wanted = ops.expand_dims(wanted, ctx.const(np.int32(0)))
    for skip in skips:
        positions = width - skip * (length - 1)
        if positions <= 0:
            continue
        table = np.arange(positions)[:, None] + skip * np.arange(length)[None, :]
        found = ops.gather_v2(rows, ctx.const(table.astype(np.int64)), ctx.const(np.int32(1)))
        found = ops.expand_dims(found, ctx.const(np.int32(2)))  # [N, P, 1, n]
        same = ops.all(ops.equal(found, wanted), ctx.int32s([3]))  # [N, P, K]
        counts = ops.sum(ops.cast(same, DstT=d.float32), ctx.int32s([1]))
        total = counts if total is None else ops.add_v2(total, counts)
    return total


def _weighted(node: OnnxNode, ctx: ConversionContext, freq: Tensor, size: int) -> Tensor:
    """The mode's weighting of the counts [N, size], as the reference's output_result."""
    mode = node.attr("mode")
    raw = node.attr("weights")
    weights = None if raw is None or len(raw) == 0 else np.asarray(raw, np.float32)
    if weights is not None and len(weights) < size:
        raise node.fail(f"weights has {len(weights)} entries; the output has {size}")
    if mode == "TF":
        return freq
    if mode == "IDF":
        present = ops.cast(ops.greater(freq, ctx.const(np.float32(0))), DstT=d.float32)
        return present if weights is None else ops.mul(present, ctx.const(weights[:size]))
    # TFIDF: a float32 product of a count (exact) and a weight rounds once, as the
    # reference's float64 product stored in float32.
    return freq if weights is None else ops.mul(freq, ctx.const(weights[:size]))


def _zeros(ctx: ConversionContext, rows: Tensor, size: int) -> Tensor:
    """[N, size] zeros: no pool n-gram can occur."""
    count = ops.strided_slice(
        ops.shape(rows, out_type=d.int64), ctx.int64s([0]), ctx.int64s([1]), ctx.int64s([1])
    )
    dims = ops.concat_v2([count, ctx.int64s([size])], ctx.const(np.int32(0)))
    return ops.fill(dims, ctx.const(np.float32(0)))


@converter(
    "TfIdfVectorizer",
    9,
    attrs=(*_REQUIRED, "pool_int64s", "pool_strings", "weights"),
)
def _tfidf_vectorizer(node: OnnxNode, ctx: ConversionContext) -> Result:
    pool = _check_attributes(node)
    x = ctx.input(0)
    if x.dtype not in (d.int32, d.int64):
        raise node.fail(f"{x.dtype.name} tokens are not supported (int32 and int64 are)")
    rank = x.shape.rank
    if rank not in (1, 2):
        raise node.fail(f"the input must be [C] or [N, C] with its rank known; it is {x.shape}")
    width = x.shape.as_list()[-1]
    if width is None:
        raise node.fail("the input's last dimension (C) must be known at import time")
    grams = _pool_ids(node, pool)
    indexes, size = _slots(node, grams)
    rows = ops.reshape(ops.cast(x, DstT=d.int64), ctx.int64s([-1, int(width)]))
    skips = _counted_skips(node)
    blocks: list[Tensor] = []
    slots: list[int] = []
    for length in sorted({len(g) for g in grams}):
        of_length = [(g, i) for g, i in grams.items() if len(g) == length]
        at = [skip for skip, shortest in skips if length >= shortest]
        pool_rows = np.asarray([g for g, _ in of_length], np.int64).reshape(-1, length)
        counts = _row_counts(ctx, rows, int(width), length, at, pool_rows)
        if counts is not None:
            blocks.append(counts)
            slots.extend(indexes[i - 1] for _, i in of_length)
    if blocks:
        placing = np.zeros((len(slots), size), np.float32)
        placing[np.arange(len(slots)), slots] = 1
        found = blocks[0] if len(blocks) == 1 else ops.concat_v2(blocks, ctx.const(np.int32(1)))
        freq = ops.mat_mul(found, ctx.const(placing))
    else:
        freq = _zeros(ctx, rows, size)
    y = _weighted(node, ctx, freq, size)
    if rank == 1:
        y = ops.reshape(y, ctx.int64s([size]))
    return [y]


__all__: list[str] = []
