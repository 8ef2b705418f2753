"""The torch kernel library: the standard ops on the torch GPU device, and the ops where
torch is a real alternative labelled ``torch`` on the numpy CPU device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kernloom.plugin import (
    KernelLibrary,
    OpKernelContext,
    register_variable_kernels,
)
from kernloom.plugin import types as t
from kernloom_gpu_torch import dtypes as d
from kernloom_gpu_torch.kernels import (
    activations,
    array,
    conv,
    fused,
    image,
    indexing,
    linalg,
    logic,
    math,
    onednn,
    packed_matmul,
    reductions,
    segment,
    space_batch,
    spectral,
)
from kernloom_gpu_torch.kernels._util import cpu_kernel
from kernloom_gpu_torch.kernels.elementwise import (
    BINARY,
    COMPARISONS,
    UNARY,
    add_n,
    binary,
    cast,
    select,
    unary,
)

__all__ = ["CPU_LABEL", "CPU_LABELLED_OPS", "build_library"]

GPU = "GPU"
BACKEND = "torch"
CPU_LABEL = "torch"
Kernel = Callable[[OpKernelContext], None]


_ORDERED = tuple(dtype for dtype in d.ALL if not dtype.is_complex)
"""The reals and bool: what ArgMax orders."""
_ARG_OUTPUTS = tuple(dtype for dtype in d.ALL if dtype.name in ("int16", "int32", "int64"))
"""ArgMax's output types torch can hold (TensorFlow's list has uint16 too)."""


def _standard() -> list[tuple[str, Kernel, dict[str, Any]]]:
    """(op, kernel, registration keywords) for every standard op the torch GPU runs."""

    def typed(types: tuple[Any, ...] | None, **kw: Any) -> dict[str, Any]:
        return {"type_constraints": {"T": types}, **kw}

    reduction = {"host_memory": ["reduction_indices"]}
    kernels: list[tuple[str, Kernel, dict[str, Any]]] = []
    kernels += [(op, binary(fn), typed(types)) for op, fn, types in BINARY]
    kernels += [(op, unary(fn), typed(types)) for op, fn, types in UNARY]
    kernels += [(op, binary(fn), typed(types)) for op, fn, types in COMPARISONS]
    kernels += [
        ("Select", select, typed(d.ALL)),
        ("AddN", add_n, typed(d.NUMBERS)),
        ("Cast", cast, {"type_constraints": {"SrcT": d.ALL, "DstT": d.ALL}}),
        ("Sum", math.reduce_sum, typed(d.NUMBERS, **reduction)),
        ("Mean", math.reduce_mean, typed(d.NUMBERS, **reduction)),
        ("Max", math.reduce_max, typed(d.REALS, **reduction)),
        ("Min", math.reduce_min, typed(d.REALS, **reduction)),
        # CUDA has no integer matrix products: integer MatMuls stay on the CPU.
        ("MatMul", math.matmul, typed((*d.FLOATS, *t.COMPLEX))),
        ("BiasAdd", math.bias_add, typed(d.NUMBERS)),
        (
            "ArgMax",
            math.arg_max,
            {  # (torch has no usable uint16 tensors: such an output stays on the CPU)
                "type_constraints": {"T": _ORDERED, "output_type": _ARG_OUTPUTS},
                "host_memory": ["dimension"],
            },
        ),
        ("Softmax", math.softmax, typed(t.OP_TYPES)),
        ("LogSoftmax", math.log_softmax, typed(t.OP_TYPES)),
        ("Reshape", array.reshape, {"host_memory": ["shape"], "expensive": False}),
        (
            "Bitcast",
            array.bitcast,
            {"type_constraints": {"T": d.NUMBERS, "type": d.NUMBERS}, "expensive": False},
        ),
        ("Transpose", array.transpose, typed(d.ALL, host_memory=["perm"])),
        ("ConcatV2", array.concat, typed(d.ALL, host_memory=["axis"])),
        ("Fill", array.fill, typed(d.ALL, host_memory=["dims"])),
        ("ZerosLike", array.zeros_like, typed(d.ALL)),
        ("OnesLike", array.ones_like, typed(d.ALL)),
        ("Shape", array.shape, {"host_memory": ["output"], "expensive": False}),
    ]
    return kernels


CPU_LABELLED_OPS = (
    "MatMul",
    "BiasAdd",
    "Softmax",
    "LogSoftmax",
    "Relu",
    "Tanh",
    "Sigmoid",
    "Exp",
    "Log",
    "Sum",
    "Mean",
    "Max",
    "Min",
    *conv.CPU_LABELLED_OPS,
    "BatchMatMulV2",  # registered by kernels/linalg.py (also unlabelled, above numpy)
)
"""Ops whose torch kernels are also registered on the numpy CPU device, label ``torch``."""

_SOFTMAX_TYPES: Final = ("float32", "float64")
CPU_PREFERRED: Final = {"Softmax": math.softmax, "LogSoftmax": math.log_softmax}
"""Of those, the ones that are also the CPU default for float32 and float64 (above numpy's
kernels): torch's softmax was faster on every shape measured, 2-7x on long rows
([32, 128, 128]: 1.5 ms in numpy, 0.25 in torch) and on short ones (``math.SHORT_ROW``)."""

CPU_PREFERRED_REDUCTIONS: Final = {"Mean": math.reduce_mean, "Sum": math.reduce_sum}
"""Float reductions whose torch kernel is the CPU default too: torch's mean at two threads
(µs, numpy / torch) over an NHWC-memory [1, 1000, 13, 13]'s H and W (a CNN's global
average pool) 14.1 / 8.4, over a C-order [1, 1024, 7, 7]'s 24.2 / 7.0, along the rows of
[256, 1024] 40.2 / 8.4, [8, 128, 128] over (1, 2) 20.5 / 6.4, [16] 3.0 / 3.4; slower only
down the columns of a C-order [256, 1024] (19.1 / 26.5)."""


def build_library() -> KernelLibrary:
    lib = KernelLibrary()
    for op, kernel, keywords in _standard():
        lib.kernel(op, device=GPU, backend=BACKEND, **keywords)(kernel)
        if op in CPU_LABELLED_OPS:
            cpu_kernel(lib, op, kernel, label=CPU_LABEL, **keywords)
    for family in (
        activations,
        logic,
        reductions,
        indexing,
        segment,
        space_batch,
        conv,
        image,
        linalg,
        spectral,
        fused,
        onednn,
        packed_matmul,
    ):
        family.register(lib)
    floats = {"T": tuple(f for f in t.FLOATS if f.name in _SOFTMAX_TYPES)}
    cpu_defaults: list[tuple[str, Any, list[str]]] = [
        *((op, kernel, []) for op, kernel in CPU_PREFERRED.items()),
        *((op, kernel, ["reduction_indices"]) for op, kernel in CPU_PREFERRED_REDUCTIONS.items()),
        ("ConcatV2", array.CpuConcat, ["axis"]),
        ("Transpose", array.cpu_transpose, ["perm"]),
    ]
    for op, impl, host in cpu_defaults:
        keywords = {"type_constraints": floats, "host_memory": host}
        cpu_kernel(lib, op, impl, priority=conv.CPU_PRIORITY, **keywords)
    register_variable_kernels(lib, GPU, backend=BACKEND, types=d.ALL)
    return lib
