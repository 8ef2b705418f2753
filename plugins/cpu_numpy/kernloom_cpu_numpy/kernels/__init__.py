"""numpy kernels for the standard op library on the CPU device."""

from __future__ import annotations

from kernloom.plugin import (
    KernelLibrary,
    register_variable_kernels,
)
from kernloom_cpu_numpy.kernels import (
    activations,
    array,
    bitwise,
    complex_rules,
    conv,
    elementwise,
    fused,
    image,
    indexing,
    labelled,
    linalg,
    logic,
    math,
    nn,
    reductions,
    segment,
    space_batch,
    spectral,
)

__all__ = ["build_library"]


def build_library() -> KernelLibrary:
    lib = KernelLibrary()
    for family in (
        array,
        elementwise,
        math,
        nn,
        labelled,
        activations,
        logic,
        bitwise,
        reductions,
        indexing,
        segment,
        space_batch,
        conv,
        image,
        linalg,
        spectral,
        fused,
        complex_rules,
    ):
        family.register(lib)
    register_variable_kernels(lib, "CPU", backend="numpy")
    return lib
