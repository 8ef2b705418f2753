"""Running one op through a session on the CPU-bound torch GPU device, for the tests."""

from __future__ import annotations

from typing import Any

import numpy as np

import kernloom as kl
from kernloom.graph.builder import apply_op
from kernloom_gpu_torch.testing import cpu_bound_gpu_plugin

GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def torch_registry() -> kl.Registry:
    """The numpy CPU plugin and the torch kernels on a CPU-bound GPU, nothing else."""
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = kl.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(cpu_bound_gpu_plugin(), name="gpu_torch")
    return registry


def run_op(
    registry: kl.Registry,
    op: str,
    inputs: list[Any],
    attrs: dict[str, Any],
    *,
    label: str = "",
    device: str | None = None,
) -> tuple[list[np.ndarray[Any, Any]], kl.RunMetadata]:
    """Feed ``inputs`` through placeholders into one ``op`` node named ``op`` and fetch its
    outputs, through the real placer, partitioner and executor."""
    graph = kl.Graph(registry)
    feeds: dict[kl.Tensor, Any] = {}
    with graph.as_default():

        def fed(value: Any) -> kl.Tensor:
            array = np.asarray(value)
            tensor = kl.placeholder(kl.as_dtype(array.dtype), array.shape)
            feeds[tensor] = array
            return tensor

        args = [[fed(v) for v in item] if isinstance(item, list) else fed(item) for item in inputs]
        full = dict(attrs)
        if label:
            full["_kernel"] = label
        if device is not None:
            with kl.device(device):
                out = apply_op(op, args, full, name="op")
        else:
            out = apply_op(op, args, full, name="op")
    fetches = list(out) if isinstance(out, tuple) else [out]
    metadata = kl.RunMetadata()
    with kl.Session(graph, registry=registry) as session:
        options = kl.RunOptions(trace=True)
        values = session.run(fetches, feeds, options=options, run_metadata=metadata)
    return [np.asarray(v) for v in values], metadata
