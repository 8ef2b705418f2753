"""What the TensorFlow edge suites (``test_tf_edge_array.py``, ``test_tf_edge_linalg.py``)
share: the registries of the three kernel sets they run (numpy CPU, torch CPU, torch GPU on
a CPU-bound GPU), which of a fixture's ops the torch plugin has CPU kernels for, and a
case's inputs from its ``.npz``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

import numpy as np

import kernloom.plugin as klp

__all__ = ["fixture_inputs", "registry", "torch_cpu_ops", "torch_labels"]


@cache
def registry(backend: str) -> klp.Registry:
    """``numpy``: the numpy CPU plugin alone; ``torch``: with the torch plugin's CPU
    kernels (its GPU factory left out); ``torchgpu``: the numpy CPU and the torch GPU
    kernels on a GPU bound to torch's CPU."""
    from kernloom_cpu_numpy import plugin as cpu_plugin

    if backend == "torch":
        from test_torch_labelled_cpu import real_plugins

        return real_plugins()
    result = klp.Registry()
    result.register_plugin(cpu_plugin, name="cpu_numpy")
    if backend == "torchgpu":
        from kernloom_gpu_torch.testing import cpu_bound_gpu_plugin

        result.register_plugin(cpu_bound_gpu_plugin(), name="gpu_torch")
    return result


def torch_labels(ops: Iterable[str]) -> dict[str, str]:
    """Each of ``ops`` with a CPU kernel labelled ``torch``, mapped to that label."""
    kernels = registry("torch").kernels
    return {
        op: "torch"
        for op in sorted(ops)
        if any(
            k.kernel_def.device_type == "CPU" and k.kernel_def.label == "torch"
            for k in kernels.kernels(op)
        )
    }


def torch_cpu_ops(ops: Iterable[str]) -> frozenset[str]:
    """Of ``ops``, those the torch plugin adds CPU kernels for (labelled ``torch``, or CPU
    defaults such as ConcatV2 and Transpose of floats): the others run the numpy kernels
    under ``torch`` too, so they are not run twice."""

    def cpu(backend: str, op: str) -> int:
        kernels = registry(backend).kernels.kernels(op)
        return sum(k.kernel_def.device_type == "CPU" for k in kernels)

    return frozenset(op for op in ops if cpu("torch", op) > cpu("numpy", op))


def fixture_inputs(arrays: Mapping[str, Any], name: str) -> list[np.ndarray]:
    """Case ``name``'s inputs, in order (``name|in0``, ``name|in1``, ...)."""
    out: list[np.ndarray] = []
    while f"{name}|in{len(out)}" in arrays:
        out.append(arrays[f"{name}|in{len(out)}"])
    return out
