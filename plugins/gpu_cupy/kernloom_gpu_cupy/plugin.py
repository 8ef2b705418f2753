"""The entry point the core loads (``kernloom = gpu_cupy``); kept import-light.

The factory is always registered (so ``kernloom devices`` can say why there is no CuPy
GPU); the kernels need CuPy and are registered only when it imports.
"""

from __future__ import annotations

import kernloom.plugin

KERNLOOM_API = ">=1.10,<2"  # WindowAttrs.backprop_input_window (1.10)

PLUGIN_NAME = "gpu_cupy"
GPU_PRIORITY = 210
"""TensorFlow's GPU factory priority: above torch's GPU factory (200), which it shadows."""


@kernloom.plugin.hookimpl
def kernloom_register(registry: kernloom.plugin.Registrar) -> None:
    from kernloom_gpu_cupy.factory import CupyGPUDeviceFactory, import_cupy

    registry.register_device_factory("GPU", CupyGPUDeviceFactory(), priority=GPU_PRIORITY)
    cupy, _ = import_cupy()
    if cupy is None:
        return
    from kernloom_gpu_cupy.kernels import build_library

    registry.register_kernels(build_library(cupy))
