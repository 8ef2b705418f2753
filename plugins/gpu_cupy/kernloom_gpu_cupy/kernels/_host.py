"""A host-memory input as numpy, for the CuPy kernels that read shapes, axes, ids and
sizes on the host."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.plugin import OpKernelContext

__all__ = ["host_input"]


def host_input(ctx: OpKernelContext, index: int) -> np.ndarray[Any, Any]:
    """Input ``index`` as numpy: it usually arrives in host memory; one produced on this
    device (a Const placed with its consumer) is copied off it here."""
    value = ctx.input(index)
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    return np.asarray(ctx.device.copy_to_host(value))
