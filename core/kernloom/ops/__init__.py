"""The standard op library: op definitions with their shape and dtype inference.

The core defines ops but no kernels; kernels come from device plugins. Every registry
sits on the one standard ``OpRegistry`` built here on first use.
"""

from __future__ import annotations

import threading

from kernloom.framework.op_def import OpLibrary, OpRegistry
from kernloom.framework.origin import Origin
from kernloom.ops import array_ops, math_ops, nn_ops

__all__ = ["STANDARD_ORIGIN", "standard_ops"]

STANDARD_ORIGIN = Origin("kernloom", "kernloom")

_lock = threading.Lock()
_standard: OpRegistry | None = None


def standard_ops() -> OpRegistry:
    """The standard op definitions (built once; OpDefs are frozen, so it is shared)."""
    global _standard
    with _lock:
        if _standard is None:
            lib = OpLibrary()
            for family in (array_ops, math_ops, nn_ops):
                family.define(lib)
            registry = OpRegistry()
            for op_def in lib.finalize():
                registry.add(op_def, STANDARD_ORIGIN)
            _standard = registry
        return _standard
