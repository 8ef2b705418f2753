"""SpaceToBatchND and BatchToSpaceND over ``xp`` (CuPy; numpy in tests): a zero-padded
copy (a crop), one reshape and one transpose, in TensorFlow's batch layout (the offset
within a block is the major part of the output batch index). The rules and messages are
``indexing_checks.space_batch_spec``'s; block_shape and paddings/crops are host memory,
as in TensorFlow's GPU kernels. Real types only, as TensorFlow's kernels.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kernloom.plugin import KernelDefBuilder, KernelLibrary, OpKernelContext
from kernloom.plugin import indexing_checks as ic
from kernloom.plugin import types as t
from kernloom_gpu_cupy.kernels._host import host_input

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
REALS = tuple(d for d in t.NUMBERS if not d.is_complex)


def _space_to_batch(xp: ModuleType, x: Any, spec: ic.SpaceBatchSpec) -> Any:
    m = len(spec.block)
    padded_shape, blocked, perm = ic.space_to_batch_layout(list(x.shape), spec)
    padded = xp.zeros(padded_shape, dtype=x.dtype)
    inside = tuple(
        slice(a, a + s) for (a, _), s in zip(spec.amounts, x.shape[1 : 1 + m], strict=True)
    )
    padded[(slice(None), *inside)] = x
    return padded.reshape(blocked).transpose(perm).reshape(ic.known(spec.shape))


def _batch_to_space(x: Any, spec: ic.SpaceBatchSpec) -> Any:
    split, perm, joined, crop = ic.batch_to_space_layout(list(x.shape), spec)
    return x.reshape(split).transpose(perm).reshape(joined)[crop]


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""

    def kernel(to_batch: bool) -> Any:
        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            blocks, paddings = host_input(ctx, 1), host_input(ctx, 2)
            spec = ic.checked(
                ctx, ic.space_batch_spec, x.shape, blocks, paddings, to_batch=to_batch
            )
            out = ctx.allocate_output(0, ic.known(spec.shape))
            if out.size:
                out[...] = _space_to_batch(xp, x, spec) if to_batch else _batch_to_space(x, spec)

        compute.__qualname__ = "cupy_space_to_batch_nd" if to_batch else "cupy_batch_to_space_nd"
        return compute

    for op, amounts, to_batch in (
        ("SpaceToBatchND", "paddings", True),
        ("BatchToSpaceND", "crops", False),
    ):
        spec = KernelDefBuilder(op).device(GPU).backend(BACKEND).host_memory("block_shape", amounts)
        lib.kernel(spec.type_constraint("T", REALS))(kernel(to_batch))
