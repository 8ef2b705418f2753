"""The device contract: allocation, copies both ways, memory accounting, allocation errors.

Each check takes the plan (registry and the device under test) and raises ``KitFailure``
naming the device, and the dtype where there is one. Copies are checked for every dtype
the device claims, on the values that break careless implementations: 0-d, empty, large,
non-contiguous, and each dtype's edge values (NaN, infinities, -0.0, integer limits).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kernloom.dtypes import DType
from kernloom.errors import ResourceExhaustedError
from kernloom.framework.device import DeviceOptions
from kernloom.shapes import TensorShape
from kernloom.testing.cases import Array, sample
from kernloom.testing.conformance.failure import KitFailure
from kernloom.testing.conformance.plan import KitPlan

__all__ = [
    "LARGE_BYTES",
    "check_allocation",
    "check_copies",
    "check_device_count",
    "check_kernel_device_types",
    "check_large_copy",
    "check_memory_limit",
    "edge_values",
    "sample_values",
]

LARGE_BYTES = 16 << 20
"""The size of the large round trip: above the small-buffer paths of most allocators."""


def edge_values(dtype: DType) -> Array:
    """The values of ``dtype`` that a copy must keep bit for bit."""
    np_dtype = dtype.numpy_dtype
    if dtype.is_bool:
        return np.array([True, False])
    if dtype.is_integer:
        info = np.iinfo(np_dtype)
        return np.array([info.min, info.max, 0, 1, info.max - 1], np_dtype)
    finfo = np.finfo(np_dtype)
    real = [np.nan, np.inf, -np.inf, -0.0, 0.0, finfo.max, finfo.min, finfo.tiny, finfo.eps]
    if dtype.is_complex:
        return np.array([complex(r, -r if np.isfinite(r) else 1.0) for r in real], np_dtype)
    return np.array(real, np_dtype)


def sample_values(dtype: DType) -> Iterator[tuple[str, Array]]:
    """``(what, host array)`` pairs every copy must round-trip."""
    base = sample((3, 4), dtype)
    yield "a 3x4 array", base
    yield "a 0-d value", base[0, 0].copy().reshape(())
    yield "an empty 0x4 array", base[:0]
    yield "edge values", edge_values(dtype)
    yield "a non-contiguous slice", base[:, ::2]
    yield "a transposed (Fortran-order) array", base.T
    yield "a 5-d array", sample((2, 1, 3, 1, 2), dtype)


def _same(actual: Any, expected: Array) -> str | None:
    if not isinstance(actual, np.ndarray):
        return f"copy_to_host returned a {type(actual).__name__}, not a numpy array"
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    try:
        np.testing.assert_array_equal(actual, expected)
    except AssertionError as exc:
        return "values changed:" + str(exc).rstrip()
    if expected.dtype.kind == "f" and not np.array_equal(np.signbit(actual), np.signbit(expected)):
        return "the sign of a zero (or NaN) was lost"
    return None


def check_copies(plan: KitPlan, dtype: DType) -> None:
    """Host -> device -> host keeps shape, dtype and every value of each sample; and the
    device says it holds the dtype (``Device.holds``), which its kernels claim; on a device
    whose memory is not host memory, what ``copy_to_host`` returns shares no memory with
    the device value (``_check_host_copy_is_own``)."""
    device = plan.device
    if not device.holds(dtype):
        raise KitFailure(
            f"{device.name}: holds({dtype.name}) is False, but kernels of the device are "
            f"registered for {dtype.name}; the placer keeps values it cannot hold off the "
            f"device, so either the kernels' type constraints or holds is wrong"
        )
    kept: list[tuple[str, Any, Array]] = []
    for what, host in sample_values(dtype):
        before = host.copy()
        try:
            value = device.copy_from_host(host)
            back = device.copy_to_host(value)
        except Exception as exc:
            raise KitFailure(
                f"copy of {what} ({dtype.name}, shape {host.shape}) to and from {device.name} "
                f"failed: {type(exc).__name__}: {exc}"
            ) from exc
        problem = _same(back, before)
        nan = dtype.numpy_dtype.kind in "fc"
        if problem is None and not np.array_equal(host, before, equal_nan=nan):
            problem = "copy_from_host wrote into the caller's array"
        if problem is None:
            shape = device.value_shape(value)
            if shape != TensorShape(host.shape):
                problem = f"value_shape says {shape} for a value of shape {host.shape}"
        if problem is not None:
            raise KitFailure(f"{dtype.name} copy of {what} to and from {device.name}: {problem}")
        kept.append((what, back, before))
    # The device's buffers are dropped by now; new ones (which a pool may hand the same
    # memory) must not change what copy_to_host returned.
    for _, host in sample_values(dtype):
        device.copy_to_host(device.copy_from_host(np.zeros_like(host)))
        device.copy_to_host(device.copy_from_host(host[::-1] if host.ndim else host))
    for what, back, before in kept:
        if _same(back, before) is not None:
            raise KitFailure(
                f"{dtype.name} copy of {what} to and from {device.name}: the array copy_to_host "
                f"returned changed after it returned (the device wrote into it later: an "
                f"asynchronous transfer not waited for, or device memory handed out and reused)"
            )
    if not device.memory_is_host:
        for what, host in sample_values(dtype):
            _check_host_copy_is_own(device, dtype, what, host)


def _scribble(before: Array) -> Array:
    """Values that differ from ``before`` wherever they can (zeros, or ones where
    ``before`` is all zeros)."""
    zeros = np.zeros_like(before)
    return zeros if _same(zeros, before) is not None else np.ones_like(before)


def _check_host_copy_is_own(device: Any, dtype: DType, what: str, host: Array) -> None:
    """On a device whose memory is not host memory: the array ``copy_to_host`` returns is
    the caller's, not the device value's memory (a unified-memory device handing out its
    buffer): writing into it leaves the value as it was. (The runtime copies what it
    cannot prove is the caller's; a fetch of a constant or a variable would otherwise be
    the session's state, and a later copy of the value would see the caller's writes.)"""
    before = host.copy()
    value = device.copy_from_host(host)
    back = device.copy_to_host(value)
    if not back.flags.writeable or back.size == 0:
        return  # nothing to write into: the runtime copies a read-only array
    back[...] = _scribble(before)
    again = device.copy_to_host(value)
    if _same(again, before) is not None:
        raise KitFailure(
            f"{dtype.name} copy of {what} to and from {device.name}: writing into the array "
            f"copy_to_host returned changed the device's value (it shares memory with the "
            f"device value: copy_to_host must return a copy the caller owns, even where "
            f"the device's memory is visible from the host)"
        )


def check_large_copy(plan: KitPlan, dtype: DType) -> None:
    """A round trip of ``LARGE_BYTES`` of ``dtype``."""
    device = plan.device
    count = LARGE_BYTES // dtype.itemsize
    host = (np.arange(count) % 251).astype(dtype.numpy_dtype)
    try:
        back = device.copy_to_host(device.copy_from_host(host))
    except Exception as exc:
        raise KitFailure(
            f"{dtype.name} copy of {host.nbytes} bytes to and from {device.name} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    problem = _same(back, host)
    if problem is not None:
        raise KitFailure(f"{dtype.name} copy of {host.nbytes} bytes via {device.name}: {problem}")


def _in_use(plan: KitPlan, expected: int | None = None) -> int:
    """Bytes in use on the device; when not ``expected``, again after a garbage collection
    (a buffer in a reference cycle is freed only then; a full collection costs most of a
    second in a large process, so it is the fallback, not the rule)."""
    in_use = plan.device.memory_stats().bytes_in_use
    if in_use != expected:
        gc.collect()
        in_use = plan.device.memory_stats().bytes_in_use
    return in_use


def check_allocation(plan: KitPlan, dtype: DType) -> None:
    """``allocate`` gives a buffer of the shape asked for, counted in the device's stats
    while it lives and released when it is dropped."""
    device = plan.device
    shape = (3, 5, 2)
    nbytes = 30 * dtype.itemsize
    before = device.memory_stats()
    in_use = before.bytes_in_use
    try:
        buffer = device.allocate(shape, dtype)
    except Exception as exc:
        raise KitFailure(
            f"{device.name}: allocating a {dtype.name} buffer of shape {shape} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    during = device.memory_stats()
    problems = []
    if device.value_shape(buffer) != TensorShape(shape):
        problems.append(f"value_shape is {device.value_shape(buffer)}, expected {shape}")
    try:
        got = device.value_dtype(buffer)
    except Exception as exc:  # a dtype kernloom has no name for
        problems.append(f"value_dtype failed: {type(exc).__name__}: {exc}")
    else:
        if got != dtype:
            problems.append(f"the buffer's dtype {got.name}, expected {dtype.name}")
    if during.num_allocs != before.num_allocs + 1:
        problems.append(f"num_allocs went {before.num_allocs} -> {during.num_allocs}")
    if during.bytes_in_use - in_use != nbytes:
        problems.append(f"bytes_in_use grew by {during.bytes_in_use - in_use}, expected {nbytes}")
    if during.peak_bytes_in_use < during.bytes_in_use:
        problems.append("peak_bytes_in_use is below bytes_in_use")
    del buffer
    after = _in_use(plan, expected=in_use)
    if after != in_use:
        problems.append(
            f"bytes_in_use is {after} after the buffer was dropped, was {in_use} before: "
            f"the device keeps a reference to its buffers"
        )
    if problems:
        raise KitFailure(f"{device.name}: {dtype.name} allocation: " + "; ".join(problems))


def _with_devices(
    plan: KitPlan, options: DeviceOptions, check: Callable[[list[Any]], None]
) -> None:
    mgr = plan.registry.create_devices(options)
    try:
        check([d for d in mgr if d.device_type == plan.device_type])
    finally:
        mgr.close()


def check_memory_limit(plan: KitPlan) -> None:
    """The factory honours ``DeviceOptions.memory_limit``, and an allocation beyond it fails
    with ``ResourceExhaustedError`` naming the device."""
    limit = 1024
    options = DeviceOptions(memory_limit={plan.device_type: limit})

    def check(devices: list[Any]) -> None:
        if not devices:
            raise KitFailure(f"no {plan.device_type} device was created with a memory limit")
        device = devices[0]
        if device.attributes.memory_limit != limit:
            raise KitFailure(
                f"{device.name}: DeviceOptions.memory_limit={{{plan.device_type!r}: {limit}}} "
                f"gave a device with memory_limit {device.attributes.memory_limit}; the "
                f"factory must pass options.memory_limit to DeviceAttributes"
            )
        small = device.allocate((16,), np.float32)  # 64 bytes: fits
        try:
            device.allocate((1024,), np.float32)
        except ResourceExhaustedError as exc:
            if device.name not in str(exc):
                raise KitFailure(
                    f"{device.name}: the out-of-memory error does not name the device: {exc}"
                ) from exc
        else:
            raise KitFailure(
                f"{device.name}: allocating 4096 bytes under a {limit}-byte limit succeeded"
            )
        del small

    _with_devices(plan, options, check)


def check_device_count(plan: KitPlan) -> None:
    """``DeviceOptions.device_count={TYPE: 0}`` creates no device of the type."""
    options = DeviceOptions(device_count={plan.device_type: 0})
    try:
        mgr = plan.registry.create_devices(options)
    except Exception:  # no device at all is left: that is the point
        return
    try:
        made = [d.name for d in mgr if d.device_type == plan.device_type]
    finally:
        mgr.close()
    if made:
        raise KitFailure(
            f"DeviceOptions.device_count={{{plan.device_type!r}: 0}} still created "
            f"{', '.join(made)}; the factory must honour it (kernloom.plugin.device_count_for)"
        )


def check_kernel_device_types(plan: KitPlan) -> None:
    """The plugin that provides the device registers no kernel for a device type that no
    factory provides (a typo, or a type renamed in the factory but not in the kernels):
    such kernels never run, and their ops silently fall back to another device."""
    registry = plan.registry
    factory_types = set(registry.device_factories.device_types())
    chosen = registry.device_factories.chosen(registry.factory_overrides())
    origin = chosen[plan.device_type].origin
    stray: dict[str, set[str]] = {}
    for registration in registry.kernels.kernels():
        kernel_def = registration.kernel_def
        if registration.origin.plugin != origin.plugin:
            continue
        if kernel_def.device_type not in factory_types:
            stray.setdefault(kernel_def.device_type, set()).add(kernel_def.op)
    if stray:
        listed = "; ".join(
            f"registers kernels for device type {t!r} ({', '.join(sorted(ops)[:6])}"
            f"{', ...' if len(ops) > 6 else ''})"
            for t, ops in sorted(stray.items())
        )
        raise KitFailure(
            f"plugin {origin.plugin!r}, which provides {plan.device_type}, {listed}, but no "
            f"factory creates devices of that type (types with a factory: "
            f"{', '.join(sorted(factory_types))}); those kernels never run"
        )
