"""Experimental kernels, selected per node with ``kl.kernel_label(...)`` (attr ``_kernel``).

- ``MatMul`` label ``einsum``: the product through ``np.einsum`` (a different code path
  with its own summation order, useful as an independent check of the default kernel).
- ``MatMul`` label ``blocked``: rows of the product split across the device's intra-op
  thread pool with ``parallel_for`` (BLAS may or may not use threads of its own).
- ``Softmax`` label ``logsumexp``: ``exp(x - logsumexp(x))``, one division fewer and a
  different rounding profile from the default.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import KernelLibrary, OpKernelContext
from kernloom.plugin import types as t
from kernloom_cpu_numpy.device import NumpyCPUDevice
from kernloom_cpu_numpy.kernels.math import _matmul_operands

__all__ = ["register"]

MATMUL_TYPES = (*t.FLOATS, *t.INDEX, *t.COMPLEX)


def matmul_einsum(ctx: OpKernelContext) -> None:
    a, b = _matmul_operands(ctx)
    out = ctx.allocate_output(0, (a.shape[0], b.shape[1]))
    np.einsum("ij,jk->ik", a, b, out=out)


def matmul_blocked(ctx: OpKernelContext) -> None:
    a, b = _matmul_operands(ctx)
    out = ctx.allocate_output(0, (a.shape[0], b.shape[1]))
    device = ctx.device
    if not isinstance(device, NumpyCPUDevice):
        raise ctx.fail(f"the 'blocked' MatMul needs the numpy CPU device, not {device.name}")

    def rows(start: int, end: int) -> None:
        np.matmul(a[start:end], b, out=out[start:end])

    device.intra_op_pool.parallel_for(a.shape[0], rows, min_shard_size=16)


def softmax_logsumexp(ctx: OpKernelContext) -> None:
    x = ctx.input(0)
    if x.ndim == 0:
        raise ctx.fail("logits must have rank >= 1")
    top = np.max(x, axis=-1, keepdims=True, initial=-np.inf)
    lse = top + np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))
    out = ctx.forward_input_or_allocate_output([0], 0, x.shape)
    np.subtract(x, lse, out=out)
    np.exp(out, out=out)


def register(lib: KernelLibrary) -> None:
    def labelled(op: str, label: str, types: tuple[Any, ...] | None) -> Any:
        return lib.kernel(
            op, device="CPU", backend="numpy", label=label, type_constraints={"T": types}
        )

    labelled("MatMul", "einsum", MATMUL_TYPES)(matmul_einsum)
    labelled("MatMul", "blocked", MATMUL_TYPES)(matmul_blocked)
    labelled("Softmax", "logsumexp", t.OP_TYPES)(softmax_logsumexp)
