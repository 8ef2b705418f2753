"""Softmax and LogSoftmax over the last dimension, numerically stable, in place."""

from __future__ import annotations

import numpy as np

from kernloom import KernelLibrary, OpKernelContext
from kernloom.ops import types as t
from kernloom_cpu_numpy.kernels._util import Array

__all__ = ["register"]


def _shifted(ctx: OpKernelContext) -> Array:
    """out = logits - max(logits) along the last axis (in the logits' buffer if allowed)."""
    x = ctx.input(0)
    if x.ndim == 0:
        raise ctx.fail("logits must have rank >= 1")
    top = np.max(x, axis=-1, keepdims=True, initial=-np.inf)
    out: Array = ctx.forward_input_or_allocate_output([0], 0, x.shape)
    with np.errstate(all="ignore"):
        np.subtract(x, top, out=out)
    return out


def softmax(ctx: OpKernelContext) -> None:
    out = _shifted(ctx)
    with np.errstate(all="ignore"):
        np.exp(out, out=out)
        out /= np.sum(out, axis=-1, keepdims=True)


def log_softmax(ctx: OpKernelContext) -> None:
    out = _shifted(ctx)
    with np.errstate(all="ignore"):
        out -= np.log(np.sum(np.exp(out), axis=-1, keepdims=True))


def register(lib: KernelLibrary) -> None:
    for op, fn in (("Softmax", softmax), ("LogSoftmax", log_softmax)):
        lib.kernel(op, device="CPU", backend="numpy", type_constraints={"T": t.FLOATS})(fn)
