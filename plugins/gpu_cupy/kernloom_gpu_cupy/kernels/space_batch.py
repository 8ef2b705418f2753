"""SpaceToBatchND and BatchToSpaceND over ``xp`` (CuPy; numpy in tests): a zero-padded
copy (a crop), one reshape and one transpose, in TensorFlow's batch layout (the offset
within a block is the major part of the output batch index). The rules and messages are
``indexing_checks.space_batch_spec``'s; block_shape and paddings/crops are host memory,
as in TensorFlow's GPU kernels. Real types only, as TensorFlow's kernels.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from kernloom.plugin import KernelDefBuilder, KernelLibrary, OpKernelContext
from kernloom.plugin import indexing_checks as ic
from kernloom.plugin import types as t

__all__ = ["register"]

GPU = "GPU"
BACKEND = "cupy"
REALS = tuple(d for d in t.NUMBERS if not d.is_complex)


def _host(ctx: OpKernelContext, index: int) -> np.ndarray[Any, Any]:
    value = ctx.input(index)
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    return np.asarray(ctx.device.copy_to_host(value))


def _space_to_batch(xp: ModuleType, x: Any, spec: ic.SpaceBatchSpec) -> Any:
    m = len(spec.block)
    sizes = [s + a + b for s, (a, b) in zip(x.shape[1 : 1 + m], spec.amounts, strict=True)]
    padded = xp.zeros((x.shape[0], *sizes, *x.shape[1 + m :]), dtype=x.dtype)
    inside = tuple(
        slice(a, a + s) for (a, _), s in zip(spec.amounts, x.shape[1 : 1 + m], strict=True)
    )
    padded[(slice(None), *inside)] = x
    blocked: list[int] = [x.shape[0]]
    for size, b in zip(sizes, spec.block, strict=True):
        blocked += [size // b, b]
    rest = list(x.shape[1 + m :])
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)]
    perm += list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    return padded.reshape(blocked + rest).transpose(perm).reshape(ic.known(spec.shape))


def _batch_to_space(x: Any, spec: ic.SpaceBatchSpec) -> Any:
    m = len(spec.block)
    batch = x.shape[0] // math.prod(spec.block)
    spatial, rest = list(x.shape[1 : 1 + m]), list(x.shape[1 + m :])
    perm = [m]
    for i in range(m):
        perm += [m + 1 + i, i]
    perm += list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    joined = (
        x.reshape([*spec.block, batch, *spatial, *rest])
        .transpose(perm)
        .reshape([batch, *(s * b for s, b in zip(spatial, spec.block, strict=True)), *rest])
    )
    keys = tuple(slice(a, joined.shape[1 + i] - b) for i, (a, b) in enumerate(spec.amounts))
    return joined[(slice(None), *keys)]


def register(lib: KernelLibrary, xp: ModuleType) -> None:
    """Add this family's kernels to ``lib``, written against ``xp``."""

    def kernel(to_batch: bool) -> Any:
        def compute(ctx: OpKernelContext) -> None:
            x = ctx.input(0)
            spec = ic.checked(
                ctx, ic.space_batch_spec, x.shape, _host(ctx, 1), _host(ctx, 2), to_batch=to_batch
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
