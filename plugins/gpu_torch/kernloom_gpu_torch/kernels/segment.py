"""Segment reductions with torch: UnsortedSegment{Sum,Max,Min,Prod}, Segment{Sum,Mean,
Max,Min,Prod}.

``index_add_`` (sum) and ``scatter_reduce_`` (prod, amax, amin) into an output filled with
TensorFlow's start value, with ``include_self=True``: TensorFlow's fold starts from that
value, so an unsorted max of [-inf] is the dtype's lowest finite value, not -inf (with
``include_self=False`` torch would give -inf). Ids TensorFlow's GPU kernels drop (negative,
or >= num_segments: checking would synchronise the device) go to a spare row past the
end, so no step depends on how many there are. NaN in max/min follows TensorFlow's CPU
fold (the plain max of the values after a segment's last NaN, the start value no longer
counting; NaN if a NaN ends it), where torch's amax would propagate every NaN.

The sorted ops copy their ids to the host once, as TensorFlow's GPU kernel copies the
last id to size its output, and check them there with the CPU's rules and messages.
No uint16/32/64: torch has no scatter reductions for them. No complex products: CUDA's
``scatter_reduce_`` has no complex ``prod`` (``NotImplementedError`` for ComplexFloat, found
by the conformance kit on an H100; torch's CPU has one, so the CPU-bound stand-in passed),
and TensorFlow's GPU has none either (its unsorted GPU reductions: "Sum is the only op that
supports all input types"), so a complex segment product is placed on the CPU, as there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from kernloom.plugin import KernelDefBuilder, KernelLibrary, OpKernelContext
from kernloom.plugin import indexing_checks as ic
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels._util import host_input, output, tensor_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "torch"
SCATTER = {"Prod": "prod", "Max": "amax", "Min": "amin"}
NUMBERS = tuple(x for x in d.NUMBERS if x.name not in ("uint16", "uint32", "uint64"))
REALS = tuple(x for x in NUMBERS if not x.is_complex)


def _reduce(rows: torch.Tensor, target: torch.Tensor, count: int, kind: str, start: Any) -> Any:
    """(count, slice size): row i the ``kind`` reduction of ``rows`` whose ``target`` is
    i; targets == count (the dropped rows) land in a spare row that is cut off."""
    inner = rows.shape[1]
    out = torch.full((count + 1, inner), start, dtype=rows.dtype, device=rows.device)
    if rows.numel() == 0:
        return out[:count]
    if kind == "Sum":
        out.index_add_(0, target, rows)
        return out[:count]
    ends_nan = None
    if kind in ("Max", "Min") and rows.dtype.is_floating_point:
        position = torch.arange(rows.shape[0], device=rows.device)
        nan = torch.isnan(rows)
        marks = torch.where(nan, position[:, None], -1)
        last_nan = torch.full((count + 1, inner), -1, dtype=torch.int64, device=rows.device)
        last_nan.scatter_reduce_(0, target[:, None].expand_as(marks), marks, "amax")
        last_row = torch.full((count + 1,), -1, dtype=torch.int64, device=rows.device)
        last_row.scatter_reduce_(0, target, position, "amax")
        # After a NaN the next value replaces the accumulator whatever it is, so the
        # values up to the last NaN, and the start value, give way to the identity.
        identity = -math.inf if kind == "Max" else math.inf
        rows = torch.where(position[:, None] <= last_nan[target], identity, rows)
        out = torch.where(last_nan >= 0, identity, out)
        ends_nan = (last_nan >= 0) & (last_nan == last_row[:, None])
    out.scatter_reduce_(0, target[:, None].expand_as(rows), rows, SCATTER[kind])
    if ends_nan is not None:
        out = torch.where(ends_nan, math.nan, out)
    return out[:count]


def _flat(data: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return data.reshape(ids.numel(), math.prod(data.shape[ids.dim() :]))


def unsorted_segment(kind: str) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        data, ids = tensor_input(ctx, 0), tensor_input(ctx, 1)
        count_value = host_input(ctx, 2)
        if count_value.ndim != 0:
            raise ctx.fail(f"num_segments should be a scalar, not shape {list(count_value.shape)}")
        count = int(count_value)
        shape = ic.checked(
            ctx, ic.unsorted_segment_shape, tuple(data.shape), tuple(ids.shape), count
        )
        out = output(ctx, 0, ic.known(shape))
        flat = ids.reshape(-1).to(torch.int64)
        target = torch.where((flat >= 0) & (flat < count), flat, count)
        start = ic.segment_start(d.kl_dtype(data.dtype).numpy_dtype, kind, finite=True)
        values = _reduce(_flat(data, ids), target, count, kind, start)
        if out.numel():
            out.view(count, -1).copy_(values)

    compute.__qualname__ = f"torch_unsorted_segment_{kind.lower()}"
    return compute


def sorted_segment(kind: str) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        data, ids = tensor_input(ctx, 0), tensor_input(ctx, 1)
        ic.checked(ctx, ic.segment_shape, tuple(data.shape), tuple(ids.shape))
        count = ic.checked(ctx, ic.sorted_segment_rows, np.asarray(host_input(ctx, 1)))
        out = output(ctx, 0, (count, *data.shape[1:]))
        if out.numel() == 0:
            return
        target = ids.to(torch.int64)
        rows = _flat(data, ids)
        reduction = "Sum" if kind == "Mean" else kind
        start = ic.segment_start(d.kl_dtype(data.dtype).numpy_dtype, reduction, finite=False)
        values = _reduce(rows, target, count, reduction, start)
        counts = torch.bincount(target, minlength=count)[:, None]
        if kind == "Mean":
            size = counts.clamp(min=1).to(values.dtype)
            if values.dtype.is_floating_point or values.dtype.is_complex:
                values = values / size
            else:  # C++'s integer division: truncated toward zero
                values = torch.div(values, size, rounding_mode="trunc").to(values.dtype)
        if kind != "Prod":  # TensorFlow's empty segment: 0 (the product's: 1)
            values = torch.where(counts == 0, torch.zeros((), dtype=values.dtype), values)
        out.view(count, -1).copy_(values)

    compute.__qualname__ = f"torch_segment_{kind.lower()}"
    return compute


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""
    groups = {"Sum": NUMBERS, "Prod": REALS, "Mean": NUMBERS, "Max": REALS, "Min": REALS}
    for kind in ("Sum", "Prod", "Max", "Min"):
        spec = (
            KernelDefBuilder(f"UnsortedSegment{kind}")
            .device(GPU)
            .backend(BACKEND)
            .host_memory("num_segments")
            .type_constraint("T", groups[kind])
        )
        lib.kernel(spec)(unsorted_segment(kind))
    for kind in ("Sum", "Mean", "Prod", "Max", "Min"):
        spec = KernelDefBuilder(f"Segment{kind}").device(GPU).backend(BACKEND)
        lib.kernel(spec.type_constraint("T", groups[kind]))(sorted_segment(kind))
