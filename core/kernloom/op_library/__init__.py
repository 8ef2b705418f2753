"""The standard op library: OpDefs and shape functions, one module per op family.

The core defines ops but no kernels; kernels come from device plugins. Every registry
sits on the one standard ``OpRegistry`` built here on first use. The generated Python
wrappers (``kl.ops.mat_mul``) live above the graph layer, in ``kernloom.ops``.
"""

from __future__ import annotations

import threading

from kernloom.framework.op_def import OpLibrary, OpRegistry
from kernloom.framework.origin import Origin
from kernloom.op_library import (
    array_ops,
    bitwise_ops,
    control_flow_ops,
    conv_ops,
    function_ops,
    fused_ops,
    image_ops,
    linalg_ops,
    logging_ops,
    math_ops,
    nn_ops,
    resource_variable_ops,
    segment_ops,
    sendrecv_ops,
    spectral_ops,
)

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
            for family in (
                array_ops,
                math_ops,
                segment_ops,
                bitwise_ops,
                nn_ops,
                conv_ops,
                image_ops,
                linalg_ops,
                spectral_ops,
                sendrecv_ops,
                function_ops,
                control_flow_ops,
                resource_variable_ops,
                fused_ops,
                logging_ops,
            ):
                family.define(lib)
            registry = OpRegistry()
            for op_def in lib.finalize():
                registry.add(op_def, STANDARD_ORIGIN)
            _standard = registry
        return _standard
