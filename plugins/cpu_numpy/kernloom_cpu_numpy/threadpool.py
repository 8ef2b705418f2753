"""The intra-op thread pool: how one kernel splits its work over the CPU's cores.

numpy releases the GIL inside most array loops, so shards of one large operation run
truly in parallel. ``parallel_for`` follows Eigen's ``Shard`` (what TensorFlow's CPU
kernels use): the range is cut into at most one shard per thread, the calling thread
runs the first shard itself, and the call returns when every shard is done.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import final

__all__ = ["IntraOpPool"]


@final
class IntraOpPool:
    """A fixed number of threads that one kernel at a time may split its work over."""

    __slots__ = ("_executor", "_local", "_lock", "_name", "_num_threads", "_worker_setup")

    def __init__(
        self,
        num_threads: int | None = None,
        *,
        name: str = "intra-op",
        worker_setup: Callable[[], None] | None = None,
    ) -> None:
        """``worker_setup`` runs once on each worker thread as it starts (the CPU device
        makes its workers flush subnormals, as the threads running the step do)."""
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"intra_op_threads must be >= 1, got {num_threads}")
        self._num_threads = num_threads or os.cpu_count() or 1
        self._name = name
        self._worker_setup = worker_setup
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._local = threading.local()

    @property
    def num_threads(self) -> int:
        return self._num_threads

    def _pool(self) -> ThreadPoolExecutor:
        # Threads start on first use: a session that never runs a big kernel pays nothing.
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._num_threads,
                    thread_name_prefix=self._name,
                    initializer=self._mark_worker,
                )
            return self._executor

    def _mark_worker(self) -> None:
        self._local.worker = True
        if self._worker_setup is not None:
            self._worker_setup()

    def parallel_for(
        self, total: int, fn: Callable[[int, int], None], *, min_shard_size: int = 1
    ) -> None:
        """Call ``fn(start, end)`` over disjoint shards that together cover ``[0, total)``.

        ``min_shard_size`` keeps shards from being so small that thread hand-off costs
        more than the work. Called from inside a shard (nested parallelism), it runs
        inline so that no pool thread waits on another and nothing can deadlock. The
        first exception raised by any shard is raised here after all shards finished.
        """
        if total <= 0:
            return
        shards = max(1, min(self._num_threads, total // max(1, min_shard_size)))
        if shards == 1 or getattr(self._local, "worker", False):
            fn(0, total)
            return
        bounds = [total * i // shards for i in range(shards + 1)]
        pool = self._pool()
        futures: list[Future[None]] = [
            pool.submit(fn, bounds[i], bounds[i + 1]) for i in range(1, shards)
        ]
        first_error: BaseException | None = None
        try:
            fn(bounds[0], bounds[1])
        except BaseException as exc:
            first_error = exc
        for future in futures:
            shard_error = future.exception()
            if shard_error is not None and first_error is None:
                first_error = shard_error
        if first_error is not None:
            raise first_error

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
