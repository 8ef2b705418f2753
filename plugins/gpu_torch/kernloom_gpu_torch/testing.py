"""For tests only: the torch GPU kernels on a "GPU" device bound to torch's CPU.

CI machines have no GPU, but the torch kernels are written against torch tensors
whatever their device. ``cpu_bound_gpu_plugin()`` registers a ``GPU`` factory (backend
torch) whose devices keep their tensors on torch's CPU and copy in and out as a GPU
would, plus the plugin's real kernel library, so that every kernel runs through the real
placer, partitioner and executor. The plugin's own factory never makes such a device.
"""

from __future__ import annotations

import types

import torch

import kernloom.plugin as klp
from kernloom_gpu_torch.device import TorchDevice
from kernloom_gpu_torch.kernels import build_library, dense_chain
from kernloom_gpu_torch.plugin import GPU_PRIORITY

__all__ = ["CpuBoundGPUFactory", "cpu_bound_gpu_plugin"]


class CpuBoundGPUFactory(klp.DeviceFactory):
    def __init__(self, count: int = 1) -> None:
        self.count = count

    def list_physical_devices(self) -> list[str]:
        return [f"/physical_device:GPU:{i}" for i in range(self.count)]

    def create_devices(
        self, options: klp.DeviceOptions, name_prefix: str = klp.LOCAL_PREFIX
    ) -> list[klp.Device]:
        return [
            TorchDevice(
                klp.DeviceAttributes(
                    name=klp.full_device_name(name_prefix, "GPU", i),
                    device_type="GPU",
                    backend="torch",
                    memory_limit=options.memory_limit.get("GPU", 4 << 30),
                    physical_device_desc=f"torch {torch.__version__} CPU, standing in for a GPU",
                ),
                torch.device("cpu"),
            )
            for i in range(klp.device_count_for(options, "GPU", self.count))
        ]


def cpu_bound_gpu_plugin(count: int = 1) -> types.SimpleNamespace:
    """A plugin object for ``Registry.register_plugin``: the test factory and the kernels."""

    @klp.hookimpl
    def kernloom_register(registry: klp.Registrar) -> None:
        registry.register_device_factory("GPU", CpuBoundGPUFactory(count), priority=GPU_PRIORITY)
        registry.register_kernels(build_library())
        dense_chain.register_fusion(registry)

    return types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.3,<2")
