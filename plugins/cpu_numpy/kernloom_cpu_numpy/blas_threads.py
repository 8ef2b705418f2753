"""numpy's BLAS runs a step's products on the session's intra-op threads.

TensorFlow's intra-op pool bounds how many threads one op uses; the products of this
device's numpy kernels (``np.matmul``, ``np.dot``, einsum's GEMMs) run on OpenBLAS's own
pool instead, sized to every core when numpy is imported. A session with
``intra_op_threads=1`` then multiplied on two cores, and OpenBLAS's idle threads, which
busy-wait ~0.1 s after each product before they sleep, kept a second core at 100 % all
through a ResNet-50 run of 65 ms that made one product (``benchmarks/ONNX.md``: CPU time
twice the wall time).

A step sets the BLAS libraries' thread count to the session's intra-op threads when its
kernels start on a thread and puts the caller's count back when they stop, so numpy code
around ``Session.run`` keeps its own setting. The libraries are found once, through
threadpoolctl (OpenBLAS in numpy's wheels, MKL or BLIS in other builds); the check costs
one foreign call per step (0.35 µs) and two more where the counts differ. OpenBLAS keeps
one count per process: of two sessions with different intra-op counts running steps at
the same moment, the later one's count holds for both until one of them ends (threadpoolctl
lets one Python thread at a time change it; the others leave it as it is).
"""

from __future__ import annotations

import threading
from typing import Any, Final, final

from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

__all__ = ["BlasThreads", "blas_libraries"]

_found: list[Any] | None = None
_lock: Final = threading.Lock()


def blas_libraries() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded in this process (found
    once: numpy's is loaded with numpy itself)."""
    global _found
    if _found is None:
        with _lock:
            if _found is None:
                try:
                    controller = ThreadpoolController().select(user_api="blas")
                    _found = list(controller.lib_controllers)
                except Exception:  # an unreadable library list: leave BLAS as it is
                    _found = []
    return _found


@final
class BlasThreads:
    """The thread count a device's steps give numpy's BLAS, and the switch around a step.

    The libraries' ``get_num_threads`` are bound once, on the first step: the check runs
    every step, and a list and a generator around one foreign call doubled its cost."""

    __slots__ = ("_gets", "_threads")

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._gets: tuple[Any, ...] | None = None

    def enter(self) -> list[int] | None:
        """Set the count for a step; what to put back (None: nothing was changed)."""
        gets = self._gets
        if gets is None:
            gets = self._gets = tuple(library.get_num_threads for library in blas_libraries())
        threads = self._threads
        if len(gets) == 1:  # (numpy's OpenBLAS: the common case)
            count = gets[0]()
            if count == threads:
                return None
            saved = [count]
        else:
            saved = [get() for get in gets]
            if all(count == threads for count in saved):
                return None
        for library in blas_libraries():
            library.set_num_threads(threads)
        return saved

    def leave(self, saved: list[int] | None) -> None:
        if saved is None:
            return
        for library, count in zip(blas_libraries(), saved, strict=True):
            if count is not None:
                library.set_num_threads(count)
