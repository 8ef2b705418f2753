"""Allocation accounting shared by every device.

A device's buffers are ordinary array objects (numpy, CuPy, torch), freed by Python's
garbage collector, not by the runtime. To know what a device holds *now* we attach a
finalizer to each buffer it allocates: the bytes count as in use until the buffer
object is collected. That makes ``bytes_in_use`` and ``peak_bytes_in_use`` follow the
real live set, which is what the executor's early release of dead values is measured by.

A finalizer never takes the allocator's lock: a garbage collection can run anywhere,
the allocator's own locked section included, and a finalizer waiting there for the lock
its thread holds would hang the step. It queues the freed size (an atomic append), and
whoever next holds the lock subtracts it.

The limit is checked before a buffer is created, so an over-large request fails with a
message naming the device instead of exhausting the machine.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, final

from kernloom.errors import Hint, InvalidArgumentError, ResourceExhaustedError, Setting
from kernloom.framework.device_name import parse_device_name

__all__ = ["AllocatorStats", "TrackingAllocator"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AllocatorStats:
    """A snapshot of one device's allocations."""

    num_allocs: int
    """Buffers allocated since the device was created."""
    bytes_in_use: int
    """Bytes held by buffers that are still alive."""
    peak_bytes_in_use: int
    """The most ``bytes_in_use`` has been since creation or the last ``reset_peak``."""
    largest_alloc_size: int
    """The largest single allocation, in bytes."""
    bytes_limit: int | None
    """The most the device may hold at once; None for no limit."""


@final
class _Tracked(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a live buffer that remembers the buffer's size."""

    __slots__ = ("nbytes",)
    nbytes: int


@final
class TrackingAllocator:
    """Counts the bytes of a device's live buffers and enforces its memory limit.

    Thread-safe: kernels on several threads allocate at once.
    """

    __slots__ = (
        "_bytes_in_use",
        "_freed",
        "_largest",
        "_limit",
        "_live",
        "_lock",
        "_num_allocs",
        "_owner",
        "_peak",
    )

    def __init__(self, owner: str, bytes_limit: int | None = None) -> None:
        if bytes_limit is not None and bytes_limit < 0:
            raise InvalidArgumentError(f"memory limit of {owner} must be >= 0, got {bytes_limit}")
        self._owner = owner
        self._limit = bytes_limit
        self._lock = threading.Lock()
        self._bytes_in_use = 0
        self._peak = 0
        self._num_allocs = 0
        self._largest = 0
        # id(weakref) -> the weakref, which carries the buffer's bytes. A plain weakref
        # with a callback costs a fraction of weakref.finalize, and numpy arrays are
        # unhashable, hence the id key.
        self._live: dict[int, _Tracked] = {}
        # The sizes of buffers collected since the lock was last held: a buffer's
        # finalizer appends (atomic, no lock: it runs once per buffer, often on the hot
        # path), and whoever next takes the lock subtracts them (``_settle``).
        self._freed: deque[int] = deque()

    def allocate(self, nbytes: int, make: Callable[..., T], *args: Any) -> T:
        """Reserve ``nbytes``, call ``make(*args)`` for the buffer, and track it until it dies.

        The buffer must support weak references (numpy, CuPy and torch arrays do).
        """
        with self._lock:  # one lock round trip per buffer: this runs for every one
            in_use = self._settle() + nbytes
            if self._limit is not None and in_use > self._limit:
                self._out_of_memory(nbytes)
            self._bytes_in_use = in_use
            self._num_allocs += 1
            if nbytes > self._largest:
                self._largest = nbytes
            if in_use > self._peak:
                self._peak = in_use
        try:
            buffer = make(*args)
            ref = _Tracked(buffer, self._collected)
        except BaseException:
            self._release(nbytes)
            raise
        ref.nbytes = nbytes
        # One dict store: atomic, so no lock (the bytes were counted above).
        self._live[id(ref)] = ref
        return buffer

    def _collected(self, ref: _Tracked) -> None:
        if self._live.pop(id(ref), None) is not None:
            self._freed.append(ref.nbytes)

    def _settle(self) -> int:
        """Subtract the collected buffers' bytes; the bytes in use. Holding the lock."""
        freed = self._freed
        in_use = self._bytes_in_use
        while freed:
            in_use -= freed.popleft()
        self._bytes_in_use = in_use
        return in_use

    def _out_of_memory(self, nbytes: int) -> NoReturn:
        raise ResourceExhaustedError(
            f"out of memory on {self._owner}: allocating {nbytes} bytes with "
            f"{self._bytes_in_use} of {self._limit} bytes in use.",
            hint=Hint(
                "Raise the device's memory limit ({limit}) or use smaller tensors.",
                limit=Setting("memory_limit", key=_device_type(self._owner)),
            ),
        )

    def _release(self, nbytes: int) -> None:
        self._freed.append(nbytes)

    def reset_peak(self) -> None:
        """Start a new peak measurement from what is in use now (e.g. per step)."""
        with self._lock:
            self._peak = self._settle()

    def stats(self) -> AllocatorStats:
        with self._lock:
            return AllocatorStats(
                num_allocs=self._num_allocs,
                bytes_in_use=self._settle(),
                peak_bytes_in_use=self._peak,
                largest_alloc_size=self._largest,
                bytes_limit=self._limit,
            )


def _device_type(owner: str) -> str:
    """The device type of an allocator's owner (a device's full name), which is what the
    memory-limit setting is keyed by; the name itself when it is not a device name."""
    try:
        return parse_device_name(owner).device_type or owner
    except InvalidArgumentError:
        return owner
