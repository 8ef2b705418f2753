"""A fake accelerator: a device of any type whose memory is separate from the host's.

Its buffers are numpy arrays, but ``copy_from_host`` and ``copy_to_host`` really copy,
exactly as a GPU's would, so every multi-device path (placement by priority,
Send/Recv, copies between devices, memory accounting) runs in CI without a GPU. Its
memory is not host memory: a value of it that crosses to the host is copied and counted
although it is a numpy array (the runtime asks the device, never the value's type).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from kernloom.dtypes import DType
from kernloom.framework.device import (
    Device,
    DeviceAttributes,
    DeviceFactory,
    DeviceOptions,
    device_count_for,
    full_device_name,
)
from kernloom.framework.device_name import LOCAL_PREFIX
from kernloom.hooks import in_process_plugin
from kernloom.registrar import Registrar

__all__ = ["FakeDevice", "FakeDeviceFactory", "fake_plugin"]

_DEFAULT_MEMORY = 1 << 30


class FakeDevice(Device):
    """numpy buffers behind a device boundary: values are copied in and out."""

    def __init__(self, attributes: DeviceAttributes) -> None:
        super().__init__(attributes)
        self.copies_in = 0
        self.copies_out = 0
        self.closed = False

    def _allocate(self, shape: tuple[int, ...], dtype: DType) -> np.ndarray[Any, Any]:
        return np.empty(shape, dtype=dtype.numpy_dtype)

    def copy_from_host(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        self.copies_in += 1
        out: np.ndarray[Any, Any] = self.allocate(array.shape, array.dtype)
        np.copyto(out, array)
        return out

    def copy_to_host(self, value: Any) -> np.ndarray[Any, Any]:
        self.copies_out += 1
        return np.array(value, copy=True)

    # -- the array protocol: numpy arrays behind a device boundary ---------------------------

    def may_overwrite(self, value: Any) -> bool:
        return (
            type(value) is np.ndarray
            and value.base is None
            and value.flags.writeable
            and value.flags.c_contiguous
        )

    def reshape_value(self, value: Any, dims: tuple[int, ...]) -> Any | None:
        return value if value.shape == dims else value.reshape(dims)

    def close(self) -> None:
        self.closed = True


class FakeDeviceFactory(DeviceFactory):
    """Creates ``count`` fake devices of ``device_type`` (``count=0`` acts as absent hardware)."""

    def __init__(
        self,
        device_type: str = "FAKE",
        *,
        count: int = 1,
        backend: str = "numpy",
        memory_limit: int = _DEFAULT_MEMORY,
        unavailable_reason: str | None = None,
        device_class: Callable[[DeviceAttributes], Device] = FakeDevice,
        physical_name: str | None = None,
    ) -> None:
        self.device_type = device_type
        self.device_class = device_class
        """What it creates: ``FakeDevice``, or a fake of one's own (``FakeAccelDevice``)."""
        self.physical_name = physical_name or f"fake {device_type}"
        self.count = count
        self.backend = backend
        self.memory_limit = memory_limit
        self._unavailable = unavailable_reason
        self.created: list[Device] = []

    def list_physical_devices(self) -> list[str]:
        return [f"/physical_device:{self.device_type}:{i}" for i in range(self.count)]

    def create_devices(
        self, options: DeviceOptions, name_prefix: str = LOCAL_PREFIX
    ) -> list[Device]:
        count = device_count_for(options, self.device_type, self.count)
        devices = [
            self.device_class(
                DeviceAttributes(
                    name=full_device_name(name_prefix, self.device_type, i),
                    device_type=self.device_type,
                    backend=self.backend,
                    memory_limit=options.memory_limit.get(self.device_type, self.memory_limit),
                    physical_device_desc=f"{self.physical_name} {i}",
                )
            )
            for i in range(count)
        ]
        self.created.extend(devices)
        return list(devices)

    def unavailable_reason(self) -> str | None:
        if self.count == 0:
            return self._unavailable or f"no {self.device_type} hardware (fake factory, count=0)"
        return None


def fake_plugin(*factories: tuple[str, DeviceFactory, int]) -> types.SimpleNamespace:
    """A plugin object registering ``(device_type, factory, priority)`` triples, for
    ``Registry.register_plugin`` in tests."""

    def kernloom_register(registry: Registrar) -> None:
        for device_type, factory, priority in factories:
            registry.register_device_factory(device_type, factory, priority=priority)

    return in_process_plugin(kernloom_register)
