"""Both GPU plugins installed: CuPy's factory provides GPU, torch's is shadowed and
selectable; a factory that finds no device yields to the next one of its type."""

from __future__ import annotations

import types

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom.environment import PluginSettings
from kernloom.framework.device_factory_registry import FactoryStatus
from kernloom.testing import FakeDeviceFactory, run_op
from kernloom_cpu_numpy import plugin as cpu_plugin
from kernloom_gpu_cupy import plugin as cupy_plugin
from kernloom_gpu_cupy.kernels import build_library as cupy_library
from kernloom_gpu_torch import plugin as torch_plugin
from kernloom_gpu_torch.testing import CpuBoundGPUFactory

GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"


def plugin(
    factory: klp.DeviceFactory, priority: int, library: klp.KernelLibrary | None = None
) -> object:
    @klp.hookimpl
    def kernloom_register(registry: klp.Registrar) -> None:
        registry.register_device_factory("GPU", factory, priority=priority)
        if library is not None:
            registry.register_kernels(library)

    return types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2")


def both(settings: PluginSettings | None = None) -> klp.Registry:
    """Stand-ins with the real priorities, backends and kernels: CuPy's (numpy buffers,
    backend cupy) and torch's (a CPU-bound torch device)."""
    from kernloom_gpu_torch.kernels import build_library as torch_library

    registry = klp.Registry(settings)
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    cupy_gpu = FakeDeviceFactory("GPU", backend="cupy")
    registry.register_plugin(
        plugin(cupy_gpu, cupy_plugin.GPU_PRIORITY, cupy_library(np)), name="gpu_cupy"
    )
    registry.register_plugin(
        plugin(CpuBoundGPUFactory(), torch_plugin.GPU_PRIORITY, torch_library()), name="gpu_torch"
    )
    return registry


def test_cupy_provides_gpu_and_torch_is_shadowed() -> None:
    registry = both()
    status = {r.registration.origin.plugin: r for r in registry.resolve_factories()}
    assert status["gpu_cupy"].status is FactoryStatus.IN_USE
    assert status["gpu_torch"].status is FactoryStatus.SHADOWED
    assert "plugin 'gpu_cupy' has priority 210 > 200" in status["gpu_torch"].reason
    (values,), metadata = run_op(registry, "Tanh", [np.linspace(-2, 2, 5)], {})
    np.testing.assert_allclose(values, np.tanh(np.linspace(-2, 2, 5)))
    assert metadata.placement is not None and metadata.placement["op"] == GPU0
    devices = registry.create_devices()
    assert devices.lookup("GPU:0").backend == "cupy"


@pytest.mark.parametrize("by", ["environment", "options"])
def test_torch_is_selectable_by_its_entry_point_name(by: str) -> None:
    options, settings = klp.DeviceOptions(), None
    if by == "environment":
        environ = {"KERNLOOM_DEVICE_FACTORY": f"GPU={torch_plugin.PLUGIN_NAME}"}
        settings = klp.Registry.from_entry_points(entry_points=[], environ=environ).settings
    else:
        options = klp.DeviceOptions(factory_overrides={"GPU": torch_plugin.PLUGIN_NAME})
    registry = both(settings)
    status = {r.registration.origin.plugin: r for r in registry.resolve_factories(options)}
    assert status["gpu_torch"].status is FactoryStatus.IN_USE
    assert status["gpu_cupy"].status is FactoryStatus.SHADOWED
    assert registry.create_devices(options).lookup("GPU:0").backend == "torch"
    if by == "options":
        config = kl.SessionConfig(factory_overrides={"GPU": torch_plugin.PLUGIN_NAME})
        graph = kl.Graph(registry)
        with graph.as_default():
            out = kl.ops.tanh(kl.constant(np.float32(0.5)), name="squash")
        metadata = kl.RunMetadata()
        with kl.Session(graph, config, registry=registry) as session:
            value = session.run(out, run_metadata=metadata)
        assert np.isclose(value, np.tanh(np.float32(0.5)))
        assert metadata.placement is not None and metadata.placement["squash"] == GPU0
        assert session.devices.lookup("GPU:0").backend == "torch"


def test_a_cupy_plugin_without_cupy_does_not_hide_torchs_gpu() -> None:
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    absent = FakeDeviceFactory(
        "GPU", count=0, backend="cupy", unavailable_reason="CuPy is not installed"
    )
    registry.register_plugin(plugin(absent, cupy_plugin.GPU_PRIORITY), name="gpu_cupy")
    from kernloom_gpu_torch.kernels import build_library as torch_library

    registry.register_plugin(
        plugin(CpuBoundGPUFactory(), torch_plugin.GPU_PRIORITY, torch_library()), name="gpu_torch"
    )
    status = {r.registration.origin.plugin: r for r in registry.resolve_factories()}
    assert status["gpu_torch"].status is FactoryStatus.IN_USE
    assert status["gpu_cupy"].status is FactoryStatus.SHADOWED
    assert "finds no device (CuPy is not installed)" in status["gpu_cupy"].reason
    assert registry.create_devices().lookup("GPU:0").backend == "torch"


def test_the_installed_plugins_report_why_they_have_no_gpu() -> None:
    """On a machine without a GPU, the real entry points load and say what to install."""
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(cupy_plugin, name="gpu_cupy")
    registry.register_plugin(torch_plugin, name="gpu_torch")
    assert registry.failures == ()
    reasons = {
        r.registration.origin.plugin: r.registration.factory.unavailable_reason()
        for r in registry.resolve_factories()
    }
    if reasons["gpu_cupy"] is None or reasons["gpu_torch"] is None:
        pytest.skip("this machine has a GPU")
    assert "kernloom-gpu-cupy[cuda12]" in reasons["gpu_cupy"]
    # A CPU-only torch says which build to install; a CUDA build that sees no GPU (a
    # machine whose GPUs the root conftest.py hides) says what hides them.
    assert "PyTorch" in reasons["gpu_torch"] or "CUDA_VISIBLE_DEVICES" in reasons["gpu_torch"]
