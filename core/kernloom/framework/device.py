"""The device contract: what a vendor implements to add a device type.

A device is a place where kernels run and buffers live. ``Device`` is deliberately
small (seed 004; tinygrad's backends are the model): a vendor implements three
methods, ``_allocate``, ``copy_from_host`` and ``copy_to_host``, and may override
``compute``/``compute_async`` (to wrap kernels in a stream), ``copy_from_device`` (a
direct path between two devices) and ``sync``. ``DeviceFactory`` discovers the
hardware and creates the devices; a plugin registers it under a device type and a
priority (see ``kernloom.hooks``).

The array protocol: the runtime never asks an array library about a value, it asks the
value's device -- its size in bytes (``value_nbytes``), dtype (``value_dtype``), shape
(``value_shape``), whether it is the device's own buffer (``is_device_value``) or host
memory (``is_host_value``), and whether its buffer type lets it be overwritten in place
(``may_overwrite``). As in tinygrad's ``Allocator``, the policy lives here
(``forward_buffer``, ``output_dtype``, ``copy_value``, ``update_value``) and a backend fills
in those small hooks. Their defaults describe numpy arrays, the host format that
``copy_to_host`` returns; a device whose buffers are of another type overrides them (the
CPU, torch and CuPy plugins and ``kernloom.testing``'s fakes show how). Every hook also
accepts host (numpy) values, which a kernel may produce on any device for its
host-memory outputs (shapes, predicates).

Thread-safety: the executor calls ``compute`` from several threads at once, and
``allocate`` from inside kernels; implementations must allow both.
"""

from __future__ import annotations

import abc
import contextlib
import math
import random
from collections.abc import Callable
from typing import Any, Final, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from kernloom.dtypes import DType, as_dtype
from kernloom.framework.allocator import AllocatorStats, TrackingAllocator
from kernloom.framework.device_name import LOCAL_PREFIX, DeviceSpec, parse_device_name
from kernloom.framework.origin import Origin
from kernloom.shapes import TensorShape, as_shape

__all__ = [
    "Device",
    "DeviceAttributes",
    "DeviceFactory",
    "DeviceLocality",
    "DeviceOptions",
    "device_count_for",
    "full_device_name",
]


class _Kernel(Protocol):
    def compute(self, ctx: Any) -> None: ...


class _AsyncKernel(Protocol):
    def compute_async(self, ctx: Any, done: Callable[[], None]) -> None: ...


class DeviceLocality(BaseModel):
    """Where a device sits, for placement decisions that care about distance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bus_id: int = 0
    """Devices on one bus copy to each other cheaply; 0 means unknown."""
    numa_node: int | None = None


class DeviceAttributes(BaseModel):
    """The description of one device, as ``kernloom devices --json`` prints it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The full name, ``/job:localhost/replica:0/task:0/device:CPU:0``."""
    device_type: str
    backend: str
    """The array library the device's buffers belong to (``numpy``, ``cupy``, ``torch``);
    kernels that name a backend run only on devices of that backend."""
    memory_limit: int = Field(ge=0)
    """Bytes the device may hold at once; its allocator refuses more."""
    locality: DeviceLocality = DeviceLocality()
    incarnation: int = Field(default_factory=lambda: random.getrandbits(63))
    """Random per device object, so that a restarted device is never mistaken for the old one."""
    physical_device_desc: str = ""


class DeviceOptions(BaseModel):
    """What a session asks of the device factories.

    ``factory_overrides`` selects, per device type, the plugin whose factory is used
    instead of the highest-priority one (also settable as
    ``KERNLOOM_DEVICE_FACTORY=GPU=torch``; this field wins over the variable).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    intra_op_threads: PositiveInt | None = None
    """Threads a device may use inside one kernel; None for the number of cores."""
    device_count: dict[str, int] = Field(default_factory=dict)
    """The most devices to create per type (``{"GPU": 0}`` hides every GPU)."""
    memory_limit: dict[str, int] = Field(default_factory=dict)
    """Bytes per device of a type, instead of what the hardware has."""
    factory_overrides: dict[str, str] = Field(default_factory=dict)
    """Device type -> plugin name (entry-point or distribution name)."""
    flush_denormals: bool = True
    """Kernels on CPU devices see subnormal floats as zero and make zero of results too
    small for a normal float (FTZ/DAZ), as TensorFlow's CPU kernels do; False keeps IEEE
    subnormals. A device that cannot flush (not x86-64) ignores it and says so."""


_NUMPY_TYPES: Final = (np.ndarray, np.generic)


class Device(abc.ABC):
    """One device: where kernels run and where their buffers live."""

    memory_is_host: bool = False
    """True when the device's buffers *are* host (numpy) memory, as on the numpy CPU device:
    moving a value between it and host memory then copies nothing, and is not counted."""

    origin: Origin | None = None
    """The plugin whose factory created this device (set by the registry when it creates
    the devices), so that an error in the device's own code (a failed copy) names it; None
    for a device made by hand."""

    @property
    def intra_op_threads(self) -> int:
        """How many threads one kernel on this device may spread its work over (the
        session's ``intra_op_threads`` where the device honours it; 1 by default). With more
        than one, kernels marked ``OpKernel.intra_op_parallel`` run on the step's own
        thread, one at a time: two of them side by side on the inter-op pool would each
        claim every core."""
        return 1

    def __init__(self, attributes: DeviceAttributes) -> None:
        spec = parse_device_name(attributes.name)
        if not spec.is_full or spec.device_type != attributes.device_type:
            raise ValueError(
                f"device name {attributes.name!r} must be a full name of type "
                f"{attributes.device_type}, such as '{LOCAL_PREFIX}/device:"
                f"{attributes.device_type}:0'"
            )
        self._attributes = attributes
        self._spec = spec
        self._allocator = TrackingAllocator(attributes.name, attributes.memory_limit)
        self._buffer_types: tuple[type, ...] = ()
        """The types ``_allocate`` has returned: a device with an array class of its own is
        understood without overriding ``is_device_value``."""

    # -- identity -------------------------------------------------------------------

    @property
    def attributes(self) -> DeviceAttributes:
        return self._attributes

    @property
    def name(self) -> str:
        return self._attributes.name

    @property
    def device_type(self) -> str:
        return self._attributes.device_type

    @property
    def backend(self) -> str:
        return self._attributes.backend

    @property
    def spec(self) -> DeviceSpec:
        """The parsed full name, for matching partial names against."""
        return self._spec

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} backend={self.backend}>"

    # -- running kernels ----------------------------------------------------------------

    def compute(self, kernel: _Kernel, ctx: Any) -> None:
        """Run a synchronous kernel. Override to set up per-kernel state (a stream)."""
        kernel.compute(ctx)

    def compute_async(self, kernel: _AsyncKernel, ctx: Any, done: Callable[[], None]) -> None:
        """Start an asynchronous kernel; ``done`` is called exactly once when it finishes."""
        kernel.compute_async(ctx, done)

    def compute_scope(self) -> contextlib.AbstractContextManager[object]:
        """Entered once around each run of many kernels on a thread (not per kernel).

        Per-thread state kernels rely on goes here: the numpy CPU device silences numpy's
        floating-point warnings (1/0 is inf, as in TensorFlow) once instead of per kernel.
        """
        return contextlib.nullcontext()

    def sync(self) -> None:  # noqa: B027 - optional hook; most devices have nothing to wait for
        """Wait until all work queued on this device has finished; called at step end."""

    # -- memory ---------------------------------------------------------------------------

    def allocate(self, shape: object, dtype: object) -> Any:
        """A new uninitialised buffer on this device, counted by its allocator."""
        dt = dtype if type(dtype) is DType else as_dtype(dtype)
        dims: tuple[int, ...]
        if type(shape) is tuple:  # kernels pass numpy shapes: skip TensorShape if valid
            dims = shape
            for d in shape:
                if type(d) is not int or d < 0:
                    dims = as_shape(shape).as_tuple()
                    break
        else:
            dims = as_shape(shape).as_tuple()
        buffer = self._allocator.allocate(math.prod(dims) * dt.itemsize, self._allocate, dims, dt)
        if type(buffer) not in self._buffer_types:
            self._buffer_types = (*self._buffer_types, type(buffer))
        return buffer

    def memory_stats(self) -> AllocatorStats:
        return self._allocator.stats()

    def reset_peak_memory(self) -> None:
        self._allocator.reset_peak()

    @abc.abstractmethod
    def _allocate(self, shape: tuple[int, ...], dtype: DType) -> Any:
        """Create an uninitialised buffer; accounting and limits are done by ``allocate``."""

    @abc.abstractmethod
    def copy_from_host(self, array: np.ndarray[Any, Any]) -> Any:
        """A device value holding ``array``'s data.

        May share memory with ``array`` (a device whose memory is host memory need not
        copy); the runtime never writes into a value that came from the caller.
        """

    @abc.abstractmethod
    def copy_to_host(self, value: Any) -> np.ndarray[Any, Any]:
        """A numpy array holding ``value``'s data, once any pending work on it is done."""

    def copy_from_device(self, source: Device, value: Any) -> Any | None:
        """A direct copy of ``value`` from ``source`` to this device, or None when there is
        no direct path; the runtime then goes through host memory."""
        return None

    # -- the array protocol: hooks ---------------------------------------------------------

    def holds(self, dtype: DType) -> bool:
        """Whether this device's buffers can hold values of ``dtype``. The core's
        device-independent kernels (Identity, IdentityN, the control-flow and call-frame
        kernels) take every dtype on every device; the placer puts a node of a dtype the
        device cannot hold elsewhere (torch has uint16/32/64 as storage types only).
        Default: every dtype."""
        return True

    def is_device_value(self, value: Any) -> bool:
        """Whether ``value`` is a buffer of this device's array type. Default: an instance of
        a type this device's ``_allocate`` has returned; numpy arrays before it has
        allocated anything."""
        return isinstance(value, self._buffer_types or _NUMPY_TYPES)

    def is_host_value(self, value: Any) -> bool:
        """Whether ``value`` is in host memory: every value of a device whose memory is host
        memory; on any other device, a value that is not its own buffer (a host-memory
        output). A device whose buffers happen to be numpy arrays is *not* host memory:
        its values are copied, and counted, whenever they cross to the host."""
        return self.memory_is_host or not self.is_device_value(value)

    def value_dtype(self, value: Any) -> DType:
        """The kernloom dtype of a value of this device (or of a host array)."""
        return as_dtype(value.dtype)

    def value_shape(self, value: Any) -> TensorShape:
        """The shape of a value of this device (or of a host array)."""
        return TensorShape(value.shape)

    def value_nbytes(self, value: Any) -> int:
        """The bytes a value of this device (or a host array) holds."""
        return int(value.nbytes)

    def may_overwrite(self, value: Any) -> bool:
        """Whether the *buffer type* lets a kernel write ``value``'s memory as a fresh
        output: it owns its memory (no view of someone else's), is writeable and laid out
        contiguously. Whether anyone else still holds the value is the executor's rule
        (its reference count), not the device's. Default: False, so a device that says
        nothing about its buffers never has one overwritten."""
        return False

    def reshape_value(self, value: Any, dims: tuple[int, ...]) -> Any | None:
        """``value``'s buffer seen with shape ``dims`` (same number of elements), or None
        when the array type cannot give that view without a copy. Default: ``value``
        itself when its shape is ``dims`` already."""
        return value if tuple(value.shape) == dims else None

    # -- the array protocol: policy -------------------------------------------------------

    def forward_buffer(self, value: Any, dtype: DType, dims: tuple[int, ...]) -> Any | None:
        """``value``'s buffer as an output of ``dtype`` and shape ``dims``, or None when it
        cannot be one: the buffer type does not permit overwriting it, or its dtype or
        size differ. The caller has already established that nothing else holds it."""
        if not self.may_overwrite(value) or self.value_dtype(value) is not dtype:
            return None
        if self.value_nbytes(value) != math.prod(dims) * dtype.itemsize:
            return None
        return self.reshape_value(value, dims)

    def output_dtype(self, value: Any) -> DType | None:
        """The dtype of a kernel's output ``value``, or None when it is no array the
        runtime can carry: neither this device's buffer nor a host (numpy) array (a
        list, a Python number, None)."""
        try:
            if self.is_device_value(value):
                return self.value_dtype(value)
            if isinstance(value, np.ndarray | np.generic):
                return as_dtype(value.dtype)
        except Exception:  # a dtype kernloom has no name for, or no dtype at all
            return None
        return None

    def copy_value(self, value: Any) -> Any:
        """A new buffer on this device holding ``value``'s data (a variable's assignment
        stores one, so that later reads never see the caller's value change). Default:
        through host memory; a device overrides it with its own copy."""
        host = np.array(self.copy_to_host(value), copy=True)
        return self.copy_from_host(host)

    def update_value(self, old: Any, delta: Any, *, subtract: bool = False) -> Any:
        """``old + delta`` (``old - delta``) as a new buffer on this device, integers
        wrapping around (``AssignAddVariableOp``). Default: through host memory; a device
        overrides it with its own arithmetic."""
        a, b = self.copy_to_host(old), self.copy_to_host(delta)
        with np.errstate(all="ignore"):
            result = np.subtract(a, b) if subtract else np.add(a, b)
        return self.copy_from_host(np.asarray(result))

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the device holds outside its buffers (threads, streams)."""


class DeviceFactory(abc.ABC):
    """Finds the devices of one type and creates them (TensorFlow's DeviceFactory).

    A factory must never fail because its hardware is absent: it creates no device and
    ``unavailable_reason`` says why and what to install.
    """

    @abc.abstractmethod
    def list_physical_devices(self) -> list[str]:
        """Names of the hardware found, such as ``/physical_device:GPU:0``. Cheap: no
        device state is created."""

    @abc.abstractmethod
    def create_devices(
        self, options: DeviceOptions, name_prefix: str = LOCAL_PREFIX
    ) -> list[Device]:
        """Create the devices, named ``{name_prefix}/device:{TYPE}:{index}``, honouring
        ``options.device_count`` and ``options.memory_limit`` for their type."""

    def unavailable_reason(self) -> str | None:
        """Why no device can be created here (driver missing, no GPU visible), or None."""
        return None

    @property
    def description(self) -> str:
        """What to call the factory in tables: its class's qualified name."""
        return f"{type(self).__module__}.{type(self).__qualname__}"


def device_count_for(options: DeviceOptions, device_type: str, found: int) -> int:
    """How many of the ``found`` devices of a type the options allow a factory to create."""
    return min(found, options.device_count.get(device_type, found))


def full_device_name(name_prefix: str, device_type: str, index: int) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:0`` from its parts."""
    return f"{name_prefix}/device:{device_type}:{index}"
