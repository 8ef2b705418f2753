"""numpy kernels for the standard op library on the CPU device."""

from __future__ import annotations

from kernloom import KernelLibrary
from kernloom.framework.device_independent_kernels import (
    register_device_independent_kernels,
    register_graph_kernels,
)
from kernloom.framework.variable_kernels import NUMPY_ARRAYS, register_variable_kernels
from kernloom_cpu_numpy.kernels import array, elementwise, labelled, math, nn

__all__ = ["build_library"]


def build_library() -> KernelLibrary:
    lib = KernelLibrary()
    for family in (array, elementwise, math, nn, labelled):
        family.register(lib)
    register_device_independent_kernels(lib, "CPU", backend="numpy")
    register_graph_kernels(lib, "CPU", backend="numpy")
    register_variable_kernels(lib, "CPU", NUMPY_ARRAYS, backend="numpy")
    return lib
