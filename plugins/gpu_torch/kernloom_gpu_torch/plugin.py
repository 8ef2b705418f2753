"""The entry point the core loads (``kernloom = gpu_torch``); kept import-light.

The factory is registered whether or not torch imports, so that ``kernloom devices``
can say why there is no torch GPU; the kernels need torch and are registered only
when it imports.
"""

from __future__ import annotations

import kernloom.plugin

KERNLOOM_API = ">=1.11,<2"  # FusedDirect (1.11)

PLUGIN_NAME = "gpu_torch"
"""The entry-point name: ``KERNLOOM_DEVICE_FACTORY=GPU=gpu_torch`` selects this factory."""

GPU_PRIORITY = 200
"""Below CuPy's GPU factory (210): with both installed, CuPy's provides GPU."""


@kernloom.plugin.hookimpl
def kernloom_register(registry: kernloom.plugin.Registrar) -> None:
    from kernloom_gpu_torch.factory import TorchGPUDeviceFactory, import_torch

    registry.register_device_factory("GPU", TorchGPUDeviceFactory(), priority=GPU_PRIORITY)
    if import_torch()[0] is None:
        return
    from kernloom_gpu_torch.kernels import build_library, dense_chain

    registry.register_kernels(build_library())
    dense_chain.register_fusion(registry)
