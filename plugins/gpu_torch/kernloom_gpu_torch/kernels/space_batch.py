"""SpaceToBatchND and BatchToSpaceND with torch: a zero-padded copy (a crop), one reshape
and one permute, in TensorFlow's batch layout (the offset within a block is the major
part of the output batch index). The rules and messages are
``indexing_checks.space_batch_spec``'s; block_shape and paddings/crops are host memory,
as in TensorFlow's GPU kernels. Real types only, as TensorFlow's kernels, less
uint16/32/64 (torch only stores them; such nodes run on the CPU).
"""

from __future__ import annotations

from typing import Any

import torch

from kernloom.plugin import KernelDefBuilder, KernelLibrary, OpKernelContext
from kernloom.plugin import indexing_checks as ic
from kernloom.plugin import types as t
from kernloom_gpu_torch.kernels._util import host_input, output, tensor_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "torch"
REALS = tuple(
    d for d in t.NUMBERS if not d.is_complex and d.name not in ("uint16", "uint32", "uint64")
)
"""TensorFlow's CPU kernels' real types, less torch's storage-only unsigned types (a
device with a kernel for a dtype must copy and allocate it)."""


def _space_to_batch(x: torch.Tensor, spec: ic.SpaceBatchSpec) -> torch.Tensor:
    m = len(spec.block)
    padded_shape, blocked, perm = ic.space_to_batch_layout(list(x.shape), spec)
    padded = torch.zeros(padded_shape, dtype=x.dtype, device=x.device)
    inside = tuple(
        slice(a, a + s) for (a, _), s in zip(spec.amounts, x.shape[1 : 1 + m], strict=True)
    )
    padded[(slice(None), *inside)] = x
    return padded.reshape(blocked).permute(perm).reshape(ic.known(spec.shape))


def _batch_to_space(x: torch.Tensor, spec: ic.SpaceBatchSpec) -> torch.Tensor:
    split, perm, joined, crop = ic.batch_to_space_layout(list(x.shape), spec)
    return x.reshape(split).permute(perm).reshape(joined)[crop]


def _kernel(to_batch: bool) -> Any:
    def compute(ctx: OpKernelContext) -> None:
        x = tensor_input(ctx, 0)
        spec = ic.checked(
            ctx,
            ic.space_batch_spec,
            tuple(x.shape),
            host_input(ctx, 1),
            host_input(ctx, 2),
            to_batch=to_batch,
        )
        out = output(ctx, 0, ic.known(spec.shape))
        if out.numel():
            out.copy_(_space_to_batch(x, spec) if to_batch else _batch_to_space(x, spec))

    compute.__qualname__ = "torch_space_to_batch_nd" if to_batch else "torch_batch_to_space_nd"
    return compute


def register(lib: KernelLibrary) -> None:
    """Add this family's kernels to ``lib``."""
    for op, amounts, to_batch in (
        ("SpaceToBatchND", "paddings", True),
        ("BatchToSpaceND", "crops", False),
    ):
        spec = KernelDefBuilder(op).device(GPU).backend(BACKEND).host_memory("block_shape", amounts)
        lib.kernel(spec.type_constraint("T", REALS))(_kernel(to_batch))
