"""Every torch kernel through the real executor on a CPU-bound torch GPU, against numpy.

The cases are the CPU plugin's (``kernloom.testing.cases``: inputs and references computed with
numpy directly); each runs as a graph of placeholders feeding one node, which must be
placed on the GPU, so the values cross the device boundary both ways.
"""

from __future__ import annotations

import numpy as np
import pytest
from torch_helpers import GPU0, torch_registry

import kernloom as kl
from kernloom.op_library import standard_ops
from kernloom.testing import run_op
from kernloom.testing.cases import Case, assert_matches, cases
from kernloom_gpu_torch.dtypes import TORCH_DTYPES

REGISTRY = torch_registry()


def _dtypes(case: Case) -> list[kl.DType]:
    flat = [v for item in case.inputs for v in (item if isinstance(item, list) else [item])]
    found = [kl.as_dtype(np.asarray(v).dtype) for v in flat]
    return [*found, *(v for v in case.attrs.values() if isinstance(v, kl.DType))]


def on_gpu(case: Case) -> bool:
    """Whether the torch GPU has a kernel for the case (torch's uint16/32/64 are storage
    only; CUDA has no integer matrix products: MatMul, BatchMatMulV2, Einsum, nor complex
    segment products; ``einsum`` and ``blocked`` are CPU labels)."""
    if case.label or case.op == "Const":
        return False
    dtypes = _dtypes(case)
    if case.op in ("MatMul", "BatchMatMulV2", "Einsum") and dtypes[0].is_integer:
        return False
    if case.op.endswith("SegmentProd") and dtypes[0].is_complex:
        return False  # CUDA has no complex scatter product (nor TensorFlow's GPU a kernel)
    return all(d in TORCH_DTYPES for d in dtypes)


GPU_CASES = [c for c in cases() if on_gpu(c)]


def test_every_standard_op_has_a_torch_gpu_kernel() -> None:
    gpu_ops = {
        r.kernel_def.op for r in REGISTRY.kernels.kernels() if r.kernel_def.device_type == "GPU"
    }
    assert gpu_ops == set(standard_ops().names())


def test_cases_cover_every_op_the_cpu_cases_do() -> None:
    assert {c.op for c in GPU_CASES} == {c.op for c in cases()} - {"Const"}


@pytest.mark.parametrize("case", GPU_CASES, ids=[c.id for c in GPU_CASES])
def test_torch_kernel_matches_numpy(case: Case) -> None:
    values, metadata = run_op(REGISTRY, case.op, case.inputs, case.attrs)
    assert metadata.placement is not None
    assert metadata.placement["op"] == GPU0
    assert_matches(values, case.expected())
