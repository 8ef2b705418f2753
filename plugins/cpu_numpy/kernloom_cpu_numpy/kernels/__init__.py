"""numpy kernels for the standard op library on the CPU device."""

from __future__ import annotations

from kernloom import KernelLibrary
from kernloom.framework.device_independent_kernels import register_device_independent_kernels
from kernloom_cpu_numpy.kernels import array, elementwise, labelled, math, nn, state

__all__ = ["build_library"]


def build_library() -> KernelLibrary:
    lib = KernelLibrary()
    for family in (array, elementwise, math, nn, labelled, state):
        family.register(lib)
    register_device_independent_kernels(lib, "CPU", backend="numpy")
    return lib
