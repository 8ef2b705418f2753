"""The entry point the core loads (``kernloom = cpu_numpy``); kept import-light."""

from __future__ import annotations

import kernloom.plugin

KERNLOOM_API = ">=1.11,<2"  # FusedDirect (1.11)

CPU_PRIORITY = 60
"""TensorFlow's ThreadPoolDeviceFactory priority; a GPU-compatible CPU factory uses 70."""


@kernloom.plugin.hookimpl
def kernloom_register(registry: kernloom.plugin.Registrar) -> None:
    from kernloom_cpu_numpy.device import NumpyCPUDeviceFactory
    from kernloom_cpu_numpy.kernels import build_library

    registry.register_device_factory("CPU", NumpyCPUDeviceFactory(), priority=CPU_PRIORITY)
    registry.register_kernels(build_library())
