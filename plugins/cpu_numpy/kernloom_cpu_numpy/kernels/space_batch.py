"""SpaceToBatchND and BatchToSpaceND: a pad (crop), one reshape and one transpose.

The rules and messages are ``indexing_checks.space_batch_spec``'s, shared with the shape
function and the GPU kernels. TensorFlow's layout of the batch: SpaceToBatchND's padded
input [batch, s1, ..., sM, rest] is viewed as [batch, s1/b1, b1, ..., sM/bM, bM, rest]
and transposed to [b1, ..., bM, batch, s1/b1, ..., sM/bM, rest], so the offset within a
block is the major part of the output batch index; BatchToSpaceND inverts it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext
from kernloom.plugin import indexing_checks as ic
from kernloom.plugin import types as t
from kernloom_cpu_numpy.kernels._util import Array

__all__ = ["batch_to_space", "register", "space_to_batch"]

CPU = "CPU"
REALS = tuple(d for d in t.NUMBERS if not d.is_complex)
"""TensorFlow's CPU kernels: the real numbers (no complex, no bool)."""


def space_to_batch(x: Array, spec: ic.SpaceBatchSpec) -> Array:
    """SpaceToBatchND of ``x`` by a checked ``spec``, as a new array."""
    m = len(spec.block)
    padded = np.pad(x, [(0, 0), *spec.amounts] + [(0, 0)] * (x.ndim - 1 - m))
    _, blocked, perm = ic.space_to_batch_layout(x.shape, spec)
    return padded.reshape(blocked).transpose(perm).reshape(ic.known(spec.shape))


def batch_to_space(x: Array, spec: ic.SpaceBatchSpec) -> Array:
    """BatchToSpaceND of ``x`` by a checked ``spec`` (a view where no crop copies)."""
    split, perm, joined, crop = ic.batch_to_space_layout(x.shape, spec)
    return x.reshape(split).transpose(perm).reshape(joined)[crop]


def _kernel(to_batch: bool) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x = ctx.input(0)
        spec = ic.checked(
            ctx, ic.space_batch_spec, x.shape, ctx.input(1), ctx.input(2), to_batch=to_batch
        )
        out = ctx.allocate_output(0, ic.known(spec.shape))
        if out.size:
            out[...] = space_to_batch(x, spec) if to_batch else batch_to_space(x, spec)

    compute.__qualname__ = "space_to_batch_nd" if to_batch else "batch_to_space_nd"
    return compute


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""
    for op, amounts, to_batch in (
        ("SpaceToBatchND", "paddings", True),
        ("BatchToSpaceND", "crops", False),
    ):
        lib.kernel(
            op,
            device=CPU,
            backend="numpy",
            host_memory=["block_shape", amounts],
            type_constraints={"T": REALS},
        )(_kernel(to_batch))
