"""The conformance kit against the torch GPU: ``pytest --kernloom-device GPU`` on the
CPU-bound torch GPU of these tests (``kernloom_gpu_torch.testing``), with the numpy CPU
beside it, so that split graphs cross a real device boundary.

The default run checks the device contract, the executor and a representative set of
kernels; ``KERNLOOM_FULL_KIT=1`` (``make kit``) runs every case of the table.
"""

from __future__ import annotations

import json
import os

import pytest
import torch_helpers  # noqa: F401

# Imported here, not only in the kit's runs: pytester's in-process runs drop the modules
# they import, and numpy and torch cannot be imported twice in one process.
import kernloom.testing.conformance  # noqa: F401

pytest_plugins = ["pytester"]

SUBSET = "device or executor or MatMul or Softmax"


def test_the_torch_gpu_passes_the_kit(pytester: pytest.Pytester) -> None:
    report = pytester.path / "kit.json"
    args = [
        "--kernloom-device",
        "GPU",
        "--kernloom-registry",
        "torch_helpers:torch_registry",
        "--kernloom-report",
        str(report),
        "-p",
        "no:cacheprovider",
    ]
    if not os.environ.get("KERNLOOM_FULL_KIT"):
        args += ["-k", SUBSET]
    result = pytester.runpytest(*args)
    assert result.ret == 0, result.stdout.str()
    data = json.loads(report.read_text())
    assert data["backend"] == "torch"
    assert data["summary"]["failures"] == []
    assert {"MatMul", "Softmax"} <= set(data["summary"]["conformant"])
    # CUDA has no integer MatMul, and the torch GPU no einsum label: reported, not failed.
    assert data["ops"]["MatMul"]["dtypes"]["int32"] == "no kernel"
    assert all(c["status"] == "passed" for c in data["device_contract"].values())
    executor = data["executor"]
    for check in ("split-graph", "cond", "while-loop", "variables", "concurrent-runs"):
        assert executor[check]["status"] == "passed", executor[check]
    assert executor["kernel-error"]["status"] == "passed"


def test_a_real_cuda_gpu_passes_the_kit(pytester: pytest.Pytester) -> None:
    """Where torch sees a CUDA GPU, the installed plugin's own GPU device runs the kit, also
    with CuPy's plugin installed, whose factory outranks torch's (``--kernloom-plugin``)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    args = ["--kernloom-device", "GPU", "--kernloom-plugin", "gpu_torch", "-p", "no:cacheprovider"]
    if not os.environ.get("KERNLOOM_FULL_KIT"):
        args += ["-k", SUBSET]
    result = pytester.runpytest(*args)
    assert result.ret == 0, result.stdout.str()
