"""The rendezvous (TensorFlow's ``Rendezvous``): where Send meets Recv within one step.

A ``_Send`` hands a value over under a key; the ``_Recv`` with the same key takes it,
whichever comes first. The key names both devices (see ``partition.rendezvous_key``),
and the **destination** makes the copy when the value arrives: directly when the
destination device offers a path (``Device.copy_from_device``), otherwise through host
memory. Every copy across a device boundary is counted, per device pair, with its bytes.
A device call of a copy that raises, or returns something else than the value (a list,
another dtype or shape), is a ``DeviceError`` naming the tensor, both devices, the call
and the device's plugin (``device_copies``); the session reports it as itself
(``Rendezvous.fault``), not as an error of the ``_Recv`` that waited for the value.

``abort(error)`` wakes every waiter with that error and makes every later send and
receive fail with it: the first failure of a step stops all of its executors promptly.
Blocking receives honour a deadline and a ``CancellationManager``; nothing waits forever.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, final

import numpy as np

from kernloom.errors import (
    CancelledError,
    DeadlineExceededError,
    DeviceError,
    InvalidArgumentError,
    KernloomError,
    NotFoundError,
    short_repr,
)
from kernloom.framework.cancellation import CancellationManager
from kernloom.framework.device import Device
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.runtime.device_copies import copy_fault, host_copy_problem, raised

__all__ = ["CopyStats", "ParsedKey", "RecvCallback", "Rendezvous", "parse_key"]

RecvCallback = Callable[[BaseException | None, Any, bool], None]
"""``callback(error, value, is_dead)``: error is None on success."""


@dataclass(frozen=True, slots=True)
class ParsedKey:
    send_device: str
    incarnation: int
    recv_device: str
    tensor: str
    frame_iter: tuple[str, int]
    """The loop frame instance (``"0"`` outside loops) and the iteration."""


def parse_key(key: str) -> ParsedKey:
    parts = key.split(";")
    if len(parts) != 5 or ":" not in parts[4]:
        raise InvalidArgumentError(
            f"malformed rendezvous key {key!r}: expected 'src;incarnation;dst;tensor;frame:iter'"
        )
    frame, _, iteration = parts[4].partition(":")
    try:
        return ParsedKey(parts[0], int(parts[1], 16), parts[2], parts[3], (frame, int(iteration)))
    except ValueError:
        raise InvalidArgumentError(
            f"malformed rendezvous key {key!r}: bad incarnation or frame"
        ) from None


@final
class CopyStats:
    """Copies across device boundaries during a step: count and bytes per (src, dst)."""

    __slots__ = ("_bytes", "_count", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: dict[tuple[str, str], int] = {}
        self._bytes: dict[tuple[str, str], int] = {}

    def record(self, src: str, dst: str, nbytes: int) -> None:
        with self._lock:
            self._count[(src, dst)] = self._count.get((src, dst), 0) + 1
            self._bytes[(src, dst)] = self._bytes.get((src, dst), 0) + nbytes

    def copies(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._count)

    def bytes(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._bytes)

    def total_bytes(self) -> int:
        with self._lock:
            return sum(self._bytes.values())


@dataclass(slots=True)
class _Item:
    value: Any
    is_dead: bool
    host_memory: bool


@dataclass(slots=True)
class _Waiter:
    callback: RecvCallback
    dst_device: Device | None
    to_host: bool


@final
class Rendezvous:
    """One step's meeting point. Thread-safe; callbacks run outside its lock."""

    def __init__(self, devices: DeviceMgr | None = None, stats: CopyStats | None = None) -> None:
        self._devices = devices
        self.stats = stats if stats is not None else CopyStats()
        self._lock = threading.Lock()
        self._sent: dict[str, _Item] = {}
        self._waiting: dict[str, _Waiter] = {}
        self._error: BaseException | None = None
        self._fault: DeviceError | None = None

    @property
    def error(self) -> BaseException | None:
        return self._error

    # -- sending and receiving --------------------------------------------------------------

    def send(
        self, key: str, value: Any, is_dead: bool = False, *, host_memory: bool = False
    ) -> None:
        """Hand ``value`` over. ``host_memory`` says it is in host memory even though the
        sending device may be an accelerator (a kernel's host-memory output); the sending
        device decides that (``Device.is_host_value``)."""
        with self._lock:
            if self._error is not None:
                raise self._error
            if key in self._sent:
                raise InvalidArgumentError(f"rendezvous key {key!r} was sent twice in one step")
            waiter = self._waiting.pop(key, None)
            item = _Item(value, is_dead, host_memory)
            if waiter is None:
                self._sent[key] = item
                return
        self._deliver(key, item, waiter)

    def recv_async(
        self,
        key: str,
        callback: RecvCallback,
        *,
        dst_device: Device | None = None,
        to_host: bool = False,
    ) -> None:
        """Call ``callback(error, value, is_dead)`` once the value for ``key`` is here (copied
        to ``dst_device``, or to host memory if ``to_host``), or the rendezvous is aborted."""
        waiter = _Waiter(callback, dst_device, to_host)
        with self._lock:
            error = self._error
            item = None
            if error is None:
                item = self._sent.pop(key, None)
                if item is None:
                    if key in self._waiting:
                        raise InvalidArgumentError(
                            f"rendezvous key {key!r} is received twice in one step"
                        )
                    self._waiting[key] = waiter
                    return
        if item is None:
            callback(error, None, False)
            return
        self._deliver(key, item, waiter)

    def recv(
        self,
        key: str,
        *,
        dst_device: Device | None = None,
        to_host: bool = False,
        timeout_s: float | None = None,
        cancellation: CancellationManager | None = None,
    ) -> tuple[Any, bool]:
        """Block until the value arrives; ``(value, is_dead)``.

        Raises the abort error, ``DeadlineExceededError`` after ``timeout_s``, or
        ``CancelledError`` when ``cancellation`` is cancelled while waiting.
        """
        done = threading.Event()
        result: list[Any] = []

        def on_value(error: BaseException | None, value: Any, is_dead: bool) -> None:
            result[:] = [error, value, is_dead]
            done.set()

        token = None
        if cancellation is not None:
            token = cancellation.register(done.set)
            if token is None:
                raise CancelledError(
                    f"receive of {parse_key(key).tensor!r} cancelled: {cancellation.reason}"
                )
        try:
            self.recv_async(key, on_value, dst_device=dst_device, to_host=to_host)
            done.wait(timeout_s)
        finally:
            if token is not None and cancellation is not None:
                cancellation.deregister(token)
        if not result:
            self._withdraw(key)
            if cancellation is not None and cancellation.is_cancelled:
                raise CancelledError(f"receive of {key!r} cancelled: {cancellation.reason}")
            raise DeadlineExceededError(
                f"receive of {key!r} waited {timeout_s:.3g} s and nothing was sent; the sending "
                f"node did not run (check the graph's control flow) or its executor is stuck"
            )
        error, value, is_dead = result
        if error is not None:
            raise error
        return value, is_dead

    def _withdraw(self, key: str) -> None:
        with self._lock:
            self._waiting.pop(key, None)

    def abort(self, error: BaseException) -> None:
        """Fail every pending and future send/receive of this step with ``error`` (first wins)."""
        with self._lock:
            if self._error is not None:
                return
            self._error = error
            waiters = list(self._waiting.values())
            self._waiting.clear()
            self._sent.clear()
        for waiter in waiters:
            waiter.callback(error, None, False)

    # -- copies -------------------------------------------------------------------------------

    def _device(self, name: str) -> Device | None:
        if self._devices is None:
            return None
        try:
            return self._devices.lookup(name)
        except NotFoundError:
            return None

    def _deliver(self, key: str, item: _Item, waiter: _Waiter) -> None:
        try:
            value = item.value if item.is_dead else self._copy(key, item, waiter)
        except Exception as exc:  # a failed copy is the receiver's error, naming the key
            if isinstance(exc, DeviceError):
                with self._lock:
                    if self._fault is None:
                        self._fault = exc
            waiter.callback(exc, None, False)
            return
        waiter.callback(None, value, item.is_dead)

    @property
    def fault(self) -> DeviceError | None:
        """The first copy a device's own code failed in this step (``_copy``), or None: the
        session reports it as itself, not as an error of the ``_Recv`` that waited for it
        (an internal node, whose kernel is the core's)."""
        return self._fault

    def _copy(self, key: str, item: _Item, waiter: _Waiter) -> Any:
        parsed = parse_key(key)
        src = self._device(parsed.send_device)
        dst = waiter.dst_device or self._device(parsed.recv_device)
        value = item.value
        if src is None or dst is None:
            return value  # no devices known: values pass through (tests of the protocol)
        in_host = item.host_memory or src.memory_is_host
        to_host = waiter.to_host or dst.memory_is_host
        if src is dst and waiter.to_host == in_host:
            return value
        if in_host and to_host:
            return np.asarray(value)  # host memory both sides: nothing moves
        crossing = _Crossing(parsed.tensor, src, dst)
        out: Any
        if to_host:
            out = crossing.to_host(value)
        elif in_host:
            out = crossing.from_host(np.asarray(value))
        else:
            out = crossing.direct(value)
            if out is None:  # no direct path: through the host
                out = crossing.from_host(crossing.to_host(value))
        self.stats.record(src.name, dst.name, src.value_nbytes(value))
        return out


@final
class _Crossing:
    """One value's copy from ``src`` to ``dst``, each device call checked: a call that
    raises, or returns anything but the value (a list, another dtype or shape), is a
    ``DeviceError`` naming the tensor, both devices, the call and the plugin at fault.
    kernloom's own errors and ``MemoryError`` pass as they are (out of memory is no bug
    of the plugin's: the ``_Recv``'s node error reports it as ``ResourceExhaustedError``).

    ``way``, in each method: the copy a call is part of: "off" ``src`` to the host,
    "onto" ``dst`` from the host, or "direct" (``dst.copy_from_device``)."""

    __slots__ = ("dst", "src", "tensor")

    def __init__(self, tensor: str, src: Device, dst: Device) -> None:
        self.tensor, self.src, self.dst = tensor, src, dst

    def to_host(self, value: Any) -> np.ndarray[Any, Any]:
        src = self.src
        host: np.ndarray[Any, Any] = self._ask("off", src, "copy_to_host", src.copy_to_host, value)
        dtype = self._ask("off", src, "value_dtype", src.value_dtype, value).numpy_dtype
        if (
            type(host) is not np.ndarray
            or host.dtype != dtype
            or not self._has_shape("off", src, value, host.shape)
        ):
            shape = self._ask("off", src, "value_shape", src.value_shape, value)
            problem = host_copy_problem(host, dtype, shape.as_tuple())
            if problem is not None:
                raise self._fault("off", src, "copy_to_host", problem)
        return host

    def from_host(self, host: np.ndarray[Any, Any]) -> Any:
        dst = self.dst
        out = self._ask("onto", dst, "copy_from_host", dst.copy_from_host, host)
        self._check_received("onto", "copy_from_host", out, host.dtype, host.shape)
        return out

    def direct(self, value: Any) -> Any | None:
        """``dst.copy_from_device``'s copy of ``value``, or None: no direct path."""
        src, dst = self.src, self.dst
        out = self._ask("direct", dst, "copy_from_device", dst.copy_from_device, src, value)
        if out is not None:
            dtype = self._ask("direct", src, "value_dtype", src.value_dtype, value)
            shape = self._ask("direct", src, "value_shape", src.value_shape, value)
            expected = (dtype.numpy_dtype, shape.as_tuple())
            self._check_received("direct", "copy_from_device", out, *expected)
        return out

    def _check_received(
        self, way: str, call: str, out: Any, dtype: np.dtype[Any], shape: tuple[int, ...]
    ) -> None:
        """``out``, what ``dst``'s ``call`` returned, is a value of ``dst`` (or a host
        array) of ``dtype`` and ``shape``."""
        dst = self.dst
        got = self._ask(way, dst, "output_dtype", dst.output_dtype, out)
        problem = None
        if got is None:
            problem = f"returned {type(out).__name__} {short_repr(out)}, not an array"
        elif got.numpy_dtype != dtype:
            problem = f"returned a {got.name} value for a {np.dtype(dtype)} one"
        elif not self._has_shape(way, dst, out, shape):
            found = self._ask(way, dst, "value_shape", dst.value_shape, out)
            problem = f"returned a value whose value_shape is {found} for an array of shape {shape}"
        if problem is not None:
            raise self._fault(way, dst, call, problem)

    def _has_shape(self, way: str, device: Device, value: Any, shape: Any) -> bool:
        """Whether ``device``'s ``value`` has ``shape``: the buffer's ``shape`` attribute
        says so (cheap: numpy, CuPy, torch), else ``device.value_shape`` decides."""
        attribute = getattr(value, "shape", None)
        if isinstance(attribute, tuple) and attribute == shape:
            return True
        found = self._ask(way, device, "value_shape", device.value_shape, value)
        return bool(found.is_fully_defined() and found.as_tuple() == shape)

    def _ask(self, way: str, device: Device, call: str, method: Any, *args: Any) -> Any:
        """``method(*args)``, ``device``'s ``call``; what it raises is that device's fault."""
        try:
            return method(*args)
        except (KernloomError, MemoryError):
            raise
        except Exception as exc:
            raise self._fault(way, device, call, raised(exc)) from exc

    def _fault(self, way: str, device: Device, call: str, problem: str) -> DeviceError:
        src, dst = self.src, self.dst
        if way == "onto":
            moving = f"copying it onto {dst.name}"
        elif way == "direct":
            moving = f"copying it from {src.name} directly"
        else:
            moving = f"copying it off {src.name}"
        subject = f"value {self.tensor!r} sent from {src.name} to {dst.name}"
        return copy_fault(subject, moving, device, call, problem)
