"""The conformance kit against the CuPy GPU: ``pytest --kernloom-device GPU`` on the numpy
stand-in of these tests (``cupy_helpers.stand_in_registry``: the CuPy kernels over numpy on
a device with a copying boundary), with the numpy CPU beside it.

The default run checks the device contract, the executor and a representative set of
kernels; ``KERNLOOM_FULL_KIT=1`` (``make kit``) runs every case of the table.
"""

from __future__ import annotations

import json
import os

import cupy_helpers  # noqa: F401
import pytest

# Imported here, not only in the kit's runs: pytester's in-process runs drop the modules
# they import, and numpy and torch cannot be imported twice in one process.
import kernloom.testing.conformance  # noqa: F401

pytest_plugins = ["pytester"]

SUBSET = "device or executor or MatMul or Softmax"
ARGS = ["--kernloom-device", "GPU", "--kernloom-registry", "cupy_helpers:stand_in_registry"]


def test_the_cupy_gpu_passes_the_kit(pytester: pytest.Pytester) -> None:
    report = pytester.path / "kit.json"
    args = [*ARGS, "--kernloom-report", str(report), "-p", "no:cacheprovider"]
    if not os.environ.get("KERNLOOM_FULL_KIT"):
        args += ["-k", SUBSET]
    result = pytester.runpytest(*args)
    assert result.ret == 0, result.stdout.str()
    data = json.loads(report.read_text())
    assert data["backend"] == "cupy"
    assert data["summary"]["failures"] == []
    assert {"MatMul", "Softmax"} <= set(data["summary"]["conformant"])
    assert all(c["status"] == "passed" for c in data["device_contract"].values())
    executor = data["executor"]
    for check in ("cond", "while-loop", "variables", "concurrent-runs", "kernel-error"):
        assert executor[check]["status"] == "passed", executor[check]


def test_the_cupy_gpu_passes_the_kits_split_graph_check(pytester: pytest.Pytester) -> None:
    """Issue 17 item 1: the stand-in's buffers are numpy arrays but not host memory, so both
    crossings of a split graph are copies, counted."""
    result = pytester.runpytest(*ARGS, "-p", "no:cacheprovider", "-k", "split")
    assert result.ret == 0, result.stdout.str()


def test_a_real_cupy_gpu_passes_the_kit(pytester: pytest.Pytester) -> None:
    """Where CuPy is installed and sees a GPU, the installed plugin's own device runs the kit
    (named, as torch's plugin's test names its own: either may outrank the other)."""
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("CuPy sees no GPU")
    args = ["--kernloom-device", "GPU", "--kernloom-plugin", "gpu_cupy", "-p", "no:cacheprovider"]
    if not os.environ.get("KERNLOOM_FULL_KIT"):
        args += ["-k", SUBSET]
    result = pytester.runpytest(*args)
    assert result.ret == 0, result.stdout.str()
