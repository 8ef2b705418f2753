"""Segment reductions: UnsortedSegment{Sum,Max,Min,Prod} and Segment{Sum,Mean,Max,Min,Prod}.

TensorFlow's op defs (math_ops.cc), without bfloat16 and the quantized types kernloom has
no dtypes for: the sums, products and means take every number type, max and min the real
ones; segment ids are int32 or int64 (UnsortedSegmentSum also int16), num_segments int32
or int64. The rules shared with the kernels (a prefix of data's shape, sorted ids) are
``kernloom.framework.indexing_checks``'s, so the shape function and every kernel give
TensorFlow's messages.
"""

from __future__ import annotations

import numpy as np

from kernloom import dtypes as d
from kernloom.errors import InvalidArgumentError
from kernloom.framework.indexing_checks import (
    segment_shape,
    sorted_segment_rows,
    unsorted_segment_shape,
)
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext
from kernloom.op_library.types import INDEX, NUMBERS, REALS, spec
from kernloom.shapes import TensorShape

__all__ = ["define"]

COMPLEX_PRODUCT = (
    " Complex values with infinite or NaN parts multiply with numpy's product (NaN parts "
    "where TensorFlow's Eigen formula keeps an infinite one: docs/tensorflow_fidelity.md)."
)
NaN_RULE = (
    "NaN: TensorFlow's CPU folds each segment in order with `acc = x unless x < acc` (max; "
    "`x > acc` for min), so a NaN is kept only while no value follows it: the result is "
    "the max of the values after the segment's last NaN (the first of them replaces the "
    "NaN: the start value no longer counts, min(NaN, inf) is inf), or NaN if a NaN is "
    "its last value."
)


def _unsorted_segment_shape(ctx: InferenceContext) -> None:
    data, ids, count = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
    if count.rank not in (None, 0):
        raise ctx.fail(f"num_segments should be a scalar, not shape {count}")
    value = ctx.input_value(2)
    num_segments = None if value is None else int(np.asarray(value).reshape(-1)[0])
    if data.rank is None or ids.rank is None:
        if num_segments is not None and num_segments < 0:
            raise ctx.fail(f"Input num_segments == {num_segments} must not be negative.")
        ctx.set_output(0, None)
        return
    try:
        out = unsorted_segment_shape(data.dims or (), ids.dims or (), num_segments)
    except InvalidArgumentError as exc:
        raise ctx.fail(str(exc)) from None
    ctx.set_output(0, list(out))


def _segment_shape(ctx: InferenceContext) -> None:
    data, ids = ctx.input_shape(0), ctx.input_shape(1)
    if data.rank == 0:
        raise ctx.fail("input must be at least rank 1")
    if ids.rank not in (None, 1):
        raise ctx.fail("segment_ids should be a vector.")
    if data.rank is None:
        ctx.set_output(0, None)
        return
    value = ctx.input_value(1)
    try:
        out = segment_shape(data.dims or (), ids.dims or (None,))  # rank 0 failed above
        # Constant ids give the output's rows (TensorFlow leaves them unknown); bad ones
        # fail here with the kernel's message rather than at run time.
        rows = None if value is None else sorted_segment_rows(value)
    except InvalidArgumentError as exc:
        raise ctx.fail(str(exc)) from None
    ctx.set_output(0, TensorShape([rows, *out[1:]]))


UNSORTED = (
    # (op, types, what an empty segment holds)
    ("UnsortedSegmentSum", NUMBERS, "0", "sum"),
    ("UnsortedSegmentProd", NUMBERS, "1", "product"),
    (
        "UnsortedSegmentMax",
        REALS,
        "the dtype's lowest value (float32 -3.4028235e38, not -inf; int8 -128)",
        "maximum",
    ),
    (
        "UnsortedSegmentMin",
        REALS,
        "the dtype's highest value (float32 3.4028235e38, not inf; uint8 255)",
        "minimum",
    ),
)
SORTED = (
    ("SegmentSum", NUMBERS, "sum"),
    ("SegmentMean", NUMBERS, "mean (integers: the sum divided by the count, truncated)"),
    ("SegmentProd", NUMBERS, "product"),
    ("SegmentMax", REALS, "maximum"),
    ("SegmentMin", REALS, "minimum"),
)


def define(lib: OpLibrary) -> None:
    index = spec(INDEX)
    for op, types, empty, what in UNSORTED:
        ids = spec((d.int16, *INDEX)) if op == "UnsortedSegmentSum" else index
        extra = " " + NaN_RULE if op in ("UnsortedSegmentMax", "UnsortedSegmentMin") else ""
        extra += COMPLEX_PRODUCT if op == "UnsortedSegmentProd" else ""
        (
            lib.register_op(op)
            .input("data: T")
            .input("segment_ids: Tindices")
            .input("num_segments: Tnumsegments")
            .output("output: T")
            .attr(f"T: {spec(types)}")
            .attr(f"Tindices: {ids}")
            .attr(f"Tnumsegments: {index} = int32")
            .shape_fn(_unsorted_segment_shape)
            .doc(
                f"The {what} of the slices of data that share a segment id: output[i] "
                "reduces every data[j...] with segment_ids[j...] == i, for i in "
                "[0, num_segments); output shape [num_segments] + "
                "data.shape[segment_ids.rank:].",
                f"An empty segment holds {empty}. A negative id drops its slice; an id >= "
                "num_segments is an error naming its position on the CPU (the GPU kernels "
                "drop it, as TensorFlow's GPU kernels do: checking would synchronise)." + extra,
            )
        )
    for op, types, what in SORTED:
        extra = " " + NaN_RULE if types is REALS else ""
        extra += COMPLEX_PRODUCT if op == "SegmentProd" else ""
        (
            lib.register_op(op)
            .input("data: T")
            .input("segment_ids: Tindices")
            .output("output: T")
            .attr(f"T: {spec(types)}")
            .attr(f"Tindices: {index}")
            .shape_fn(_segment_shape)
            .doc(
                f"The {what} of the rows of data that share a segment id, with sorted "
                "ids: one per row, output rows = the last id + 1.",
                "An empty segment (an id skipped) holds 0 (SegmentProd's: 1). Ids that "
                "decrease, or a negative one, are TensorFlow's errors ('segment ids are not "
                "increasing', 'segment ids must be >= 0'); the output's first dimension is "
                "known when the ids are constant (then bad ids fail when the node is built)."
                + extra,
            )
        )
