"""The CPU kernels this plugin registers unlabelled, above numpy's: installing the torch
plugin makes them the CPU default (BatchMatMulV2, measured faster in
``benchmarks/BATCH_MATMUL.md``; Conv2D and ``_FusedConv2D`` through oneDNN for float32 and
``_FusedMatMul``, measured in ``benchmarks/ONNX.md`` and ``OPTIMIZER.md``). They must match
the shared cases, as numpy's do."""

from __future__ import annotations

import numpy as np
import pytest
from test_torch_kernels import on_gpu
from test_torch_labelled_cpu import REGISTRY

from kernloom.testing import run_kernel
from kernloom.testing.cases import Case, assert_matches, cases
from kernloom_gpu_torch.kernels.linalg import CPU_BATCH_MATMUL_PRIORITY

DEFAULT_OPS = ("BatchMatMulV2", "Conv2D", "_FusedConv2D", "_FusedMatMul")
DEFAULTS = [c for c in cases() if c.op in DEFAULT_OPS and on_gpu(c)]


def test_there_are_cases_for_the_torch_cpu_defaults() -> None:
    assert len(DEFAULTS) > 10
    assert {c.op for c in DEFAULTS} == set(DEFAULT_OPS)


@pytest.mark.parametrize("case", DEFAULTS, ids=[c.id for c in DEFAULTS])
def test_torch_cpu_default_kernel_matches_numpy(case: Case) -> None:
    run = run_kernel(case.op, case.inputs, case.attrs, registry=REGISTRY)
    kernel_def = run.kernel.signature.kernel_def
    assert (kernel_def.device_type, kernel_def.label) == ("CPU", "")
    assert kernel_def.priority >= CPU_BATCH_MATMUL_PRIORITY > 0  # torch's, not numpy's
    assert type(run.kernel).__module__.startswith("kernloom_gpu_torch")
    assert_matches(run.outputs, case.expected())


def test_integer_batch_matmul_stays_with_numpy() -> None:
    """Integer products are not registered for torch: numpy's kernel serves them."""
    x = np.arange(6, dtype=np.int32).reshape(1, 2, 3)
    run = run_kernel("BatchMatMulV2", [x, x], {"adj_y": True}, registry=REGISTRY)
    assert run.kernel.signature.kernel_def.priority == 0
    np.testing.assert_array_equal(run.outputs[0], x @ x.swapaxes(-1, -2))
