"""The numpy CPU device and its factory."""

import gc
import os

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom_cpu_numpy import NumpyCPUDevice, NumpyCPUDeviceFactory
from kernloom_cpu_numpy import plugin as cpu_plugin


def make_device(**options: object) -> NumpyCPUDevice:
    (device,) = NumpyCPUDeviceFactory().create_devices(klp.DeviceOptions(**options))  # type: ignore[arg-type]
    assert isinstance(device, NumpyCPUDevice)
    return device


def test_one_cpu_device_with_full_name_type_and_backend() -> None:
    factory = NumpyCPUDeviceFactory()
    assert factory.list_physical_devices() == ["/physical_device:CPU:0"]
    device = make_device()
    assert device.name == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert (device.device_type, device.backend) == ("CPU", "numpy")
    assert device.attributes.memory_limit > 0
    assert factory.unavailable_reason() is None
    assert factory.create_devices(klp.DeviceOptions(device_count={"CPU": 0})) == []


def test_intra_op_threads_follow_configuration_with_the_core_count_as_default() -> None:
    assert make_device().intra_op_pool.num_threads == (os.cpu_count() or 1)
    assert make_device(intra_op_threads=3).intra_op_pool.num_threads == 3


def test_allocation_statistics_track_bytes_in_use_and_peak() -> None:
    device = make_device()
    a = device.allocate([256, 4], kl.float64)  # 8 KiB
    assert isinstance(a, np.ndarray) and a.shape == (256, 4) and a.dtype == np.float64
    b = device.allocate([10], kl.int32)
    assert device.memory_stats().bytes_in_use == 8192 + 40
    del a
    gc.collect()
    stats = device.memory_stats()
    assert stats.bytes_in_use == 40 and stats.peak_bytes_in_use == 8232 and stats.num_allocs == 2
    del b


def test_memory_limit_from_options() -> None:
    device = make_device(memory_limit={"CPU": 100})
    assert device.attributes.memory_limit == 100
    with pytest.raises(kl.ResourceExhaustedError, match="device:CPU:0"):
        device.allocate([26], kl.float32)


def test_host_copies_share_memory_but_never_let_the_runtime_write_into_the_callers_array() -> None:
    device = make_device()
    host = np.arange(4.0)
    value = device.copy_from_host(host)
    assert np.shares_memory(value, host)
    with pytest.raises(ValueError, match="read-only"):
        value[0] = 5
    host[0] = 7  # the caller still owns and may change its array
    np.testing.assert_array_equal(device.copy_to_host(value), [7.0, 1.0, 2.0, 3.0])


def test_the_plugin_registers_cpu_at_priority_60() -> None:
    registry = klp.Registry()
    record = registry.register_plugin(cpu_plugin, name="cpu_numpy")
    assert record.api_requirement == ">=1.11,<2"
    chosen = registry.device_factories.chosen()["CPU"]
    assert chosen.priority == 60 and isinstance(chosen.factory, NumpyCPUDeviceFactory)
    mgr = registry.create_devices(klp.DeviceOptions(intra_op_threads=2))
    assert mgr.lookup("CPU:0").backend == "numpy"
    mgr.close()
