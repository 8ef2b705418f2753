"""kernloom: a pluggable dataflow runtime on the architecture of TensorFlow's core runtime.

This module is the public surface: everything here is re-exported from the modules that
define it, and nothing inside kernloom imports from here. Other modules are internal and
may change between releases.
"""

from kernloom.dtypes import (
    DType,
    all_dtypes,
    as_dtype,
    bool_,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from kernloom.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    KernloomError,
    KernloomPluginWarning,
    NotFoundError,
    PluginError,
    RegistrationError,
    ResourceExhaustedError,
)
from kernloom.framework.allocator import AllocatorStats, TrackingAllocator
from kernloom.framework.device import (
    Device,
    DeviceAttributes,
    DeviceFactory,
    DeviceLocality,
    DeviceOptions,
    device_count_for,
    full_device_name,
)
from kernloom.framework.device_factory_registry import (
    FactoryConflict,
    FactoryRegistration,
    FactoryStatus,
    ResolvedFactory,
)
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.device_name import LOCAL_PREFIX, DeviceSpec, parse_device_name
from kernloom.framework.origin import Origin
from kernloom.plugins import (
    ENTRY_POINT_GROUP,
    KERNLOOM_API_VERSION,
    PluginRecord,
    PluginState,
    hookimpl,
)
from kernloom.registrar import Registrar
from kernloom.registry import Registry, default_registry
from kernloom.shapes import TensorShape, as_shape
from kernloom.version import __version__

__all__ = [
    "ENTRY_POINT_GROUP",
    "KERNLOOM_API_VERSION",
    "LOCAL_PREFIX",
    "AllocatorStats",
    "AlreadyExistsError",
    "DType",
    "Device",
    "DeviceAttributes",
    "DeviceFactory",
    "DeviceLocality",
    "DeviceMgr",
    "DeviceOptions",
    "DeviceSpec",
    "FactoryConflict",
    "FactoryRegistration",
    "FactoryStatus",
    "InvalidArgumentError",
    "KernloomError",
    "KernloomPluginWarning",
    "NotFoundError",
    "Origin",
    "PluginError",
    "PluginRecord",
    "PluginState",
    "Registrar",
    "RegistrationError",
    "Registry",
    "ResolvedFactory",
    "ResourceExhaustedError",
    "TensorShape",
    "TrackingAllocator",
    "__version__",
    "all_dtypes",
    "as_dtype",
    "as_shape",
    "bool_",
    "complex64",
    "complex128",
    "default_registry",
    "device_count_for",
    "float16",
    "float32",
    "float64",
    "full_device_name",
    "hookimpl",
    "int8",
    "int16",
    "int32",
    "int64",
    "parse_device_name",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
