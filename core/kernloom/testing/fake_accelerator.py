"""FAKE_ACCEL: a fake accelerator for placement, partition and executor tests without a GPU.

Its buffers are ``AccelArray`` objects, deliberately *not* numpy arrays: a value that
reaches a CPU kernel without being copied off the accelerator (or an accelerator kernel
without being copied on) fails loudly instead of silently working. Every transfer is
counted. The device implements the array protocol (``Device.value_nbytes`` and friends)
for them, so the runtime forwards their buffers, accounts their memory and counts their
copies as it does numpy's: the acceptance test of a core that knows no array library.
Its kernels cover a subset of the standard ops (so placement must mix devices),
and ``MatMul`` has a label, ``systolic``, that exists on FAKE_ACCEL only.

Use it through an isolated registry::

    registry = kernloom.plugin.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")        # optional
    registry.register_plugin(fake_accelerator_plugin(), name="fake_accel")
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from kernloom.dtypes import DType
from kernloom.framework.device import (
    Device,
    DeviceAttributes,
)
from kernloom.framework.device_independent_kernels import register_device_independent_kernels
from kernloom.framework.kernel_checks import reshape_dims
from kernloom.framework.kernel_registry import KernelLibrary
from kernloom.framework.op_kernel import OpKernelContext
from kernloom.hooks import in_process_plugin
from kernloom.op_library import types as t
from kernloom.registrar import Registrar
from kernloom.testing.fake_device import FakeDeviceFactory

__all__ = [
    "FAKE_ACCEL",
    "FAKE_ACCEL_PRIORITY",
    "AccelArray",
    "FakeAccelDevice",
    "FakeAccelFactory",
    "fake_accelerator_plugin",
]

FAKE_ACCEL: Final = "FAKE_ACCEL"
FAKE_ACCEL_PRIORITY: Final = 150
"""Above CPU (60, 70), below GPU (200, 210)."""
BACKEND: Final = "fake"


class AccelArray:
    """Accelerator memory: holds an array, but is not one (no ``__array__``, no
    ``nbytes``; only its device can say its size)."""

    __slots__ = ("__weakref__", "data")

    def __init__(self, data: np.ndarray[Any, Any]) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = self.data.dtype
        return dtype

    def __repr__(self) -> str:
        return f"AccelArray(shape={self.shape}, dtype={self.dtype})"


class FakeAccelDevice(Device):
    def __init__(self, attributes: DeviceAttributes) -> None:
        super().__init__(attributes)
        self._lock = threading.Lock()
        self.copies_to_device = 0
        self.copies_to_host = 0
        self.bytes_to_device = 0
        self.bytes_to_host = 0

    def _allocate(self, shape: tuple[int, ...], dtype: DType) -> AccelArray:
        return AccelArray(np.empty(shape, dtype.numpy_dtype))

    def copy_from_host(self, array: np.ndarray[Any, Any]) -> AccelArray:
        if not isinstance(array, np.ndarray | np.generic):
            raise TypeError(
                f"{self.name}: copy_from_host takes a numpy array, got {type(array).__name__}"
            )
        out: AccelArray = self.allocate(np.shape(array), np.asarray(array).dtype)
        out.data[...] = array
        with self._lock:
            self.copies_to_device += 1
            self.bytes_to_device += out.data.nbytes
        return out

    def copy_to_host(self, value: Any) -> np.ndarray[Any, Any]:
        if not isinstance(value, AccelArray):
            raise TypeError(
                f"{self.name}: copy_to_host takes an AccelArray, got {type(value).__name__}"
            )
        with self._lock:
            self.copies_to_host += 1
            self.bytes_to_host += value.data.nbytes
        return value.data.copy()

    # -- the array protocol: AccelArray (and host arrays, for host-memory outputs) ---------

    def is_device_value(self, value: Any) -> bool:
        return type(value) is AccelArray

    def value_nbytes(self, value: Any) -> int:
        if type(value) is AccelArray:
            return int(value.data.nbytes)
        return int(np.asarray(value).nbytes)

    def may_overwrite(self, value: Any) -> bool:
        # The fake makes no views: every AccelArray owns its buffer.
        return type(value) is AccelArray and value.data.flags.writeable

    def copy_value(self, value: Any) -> AccelArray:
        if type(value) is not AccelArray:
            return self.copy_from_host(np.asarray(value))
        out: AccelArray = self.allocate(value.shape, value.dtype)
        out.data[...] = value.data
        return out

    def update_value(self, old: Any, delta: Any, *, subtract: bool = False) -> AccelArray:
        out: AccelArray = self.allocate(old.shape, old.dtype)
        with np.errstate(all="ignore"):
            (np.subtract if subtract else np.add)(old.data, delta.data, out=out.data)
        return out


class FakeAccelFactory(FakeDeviceFactory):
    """``count`` fake accelerators (``FakeAccelDevice``, type ``FAKE_ACCEL``)."""

    def __init__(self, count: int = 1) -> None:
        super().__init__(
            FAKE_ACCEL,
            count=count,
            backend=BACKEND,
            device_class=FakeAccelDevice,
            physical_name="fake accelerator",
        )


def _data(value: Any, ctx: OpKernelContext, index: int) -> np.ndarray[Any, Any]:
    if ctx.input_is_host_memory(index):
        return np.asarray(value)
    if not isinstance(value, AccelArray):
        raise ctx.fail(
            f"input {index} is a {type(value).__name__}, not accelerator memory: it was not "
            f"copied to {ctx.device.name}"
        )
    return value.data


def _elementwise(fn: Callable[..., Any]) -> Callable[[OpKernelContext], None]:
    def compute(ctx: OpKernelContext) -> None:
        args = [_data(ctx.input(i), ctx, i) for i in range(ctx.num_inputs)]
        result = np.asarray(fn(*args))
        # The result is computed: an input nothing else holds may now take it in place.
        candidates = range(ctx.num_inputs)
        ctx.forward_input_or_allocate_output(candidates, 0, result.shape).data[...] = result

    return compute


def _matmul(ctx: OpKernelContext) -> Any:
    """In float64, rounded once: equal columns give equal results whatever BLAS the
    machine has (OpenBLAS's matrix-vector product on Intel's AVX-512 CPUs sums column
    blocks in different orders, and onnx's light models feed huge equal columns)."""
    a, b = _data(ctx.input(0), ctx, 0), _data(ctx.input(1), ctx, 1)
    a = a.T if ctx.attr("transpose_a") else a
    b = b.T if ctx.attr("transpose_b") else b
    if a.shape[1] != b.shape[0]:
        raise ctx.fail(f"inner dimensions differ: {list(a.shape)} x {list(b.shape)}")
    out = ctx.allocate_output(0, (a.shape[0], b.shape[1])).data
    out[...] = a.astype(np.float64) @ b.astype(np.float64)


def _softmax(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    e = np.exp(x - x.max(axis=-1, keepdims=True, initial=-np.inf))
    return e / e.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


def _reshape(ctx: OpKernelContext) -> None:
    data = _data(ctx.input(0), ctx, 0)
    target = data.reshape(reshape_dims(ctx, data.shape, ctx.input(1)))  # TF's -1 rule
    ctx.allocate_output(0, target.shape).data[...] = target


def build_library() -> KernelLibrary:
    lib = KernelLibrary()
    floats = {"T": t.FLOATS}

    def accel(op: str, **kw: Any) -> Any:
        return lib.kernel(op, device=FAKE_ACCEL, backend=BACKEND, **kw)

    accel("MatMul", type_constraints=floats)(_matmul)
    accel("MatMul", type_constraints=floats, label="systolic")(_matmul)
    for op, fn in (("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract)):
        accel(op, type_constraints=floats)(_elementwise(fn))
    accel("Relu", type_constraints=floats)(_elementwise(lambda x: np.maximum(x, 0)))
    accel("Softmax", type_constraints=floats)(_elementwise(_softmax))
    accel("Reshape", host_memory=["shape"])(_reshape)
    register_device_independent_kernels(lib, FAKE_ACCEL, backend=BACKEND)
    return lib


def fake_accelerator_plugin(count: int = 1) -> types.SimpleNamespace:
    """The FAKE_ACCEL factory and kernels, as a plugin object for ``Registry.register_plugin``."""

    def kernloom_register(registry: Registrar) -> None:
        registry.register_device_factory(
            FAKE_ACCEL, FakeAccelFactory(count), priority=FAKE_ACCEL_PRIORITY
        )
        registry.register_kernels(build_library())

    return in_process_plugin(kernloom_register)
