"""Whether the current thread is one of a session's inter-op workers.

A step runs on the thread that called ``Session.run`` and, where ``inter_op_threads`` is
more than 1, on the session's inter-op workers, which take nodes that can run beside the
caller's. A kernel library with its own threads per calling thread (torch's OpenMP makes
a team for each thread that calls it) asks this to keep those threads to the caller's: a
second team's idle workers spin on the cores the first one needs (ResNet-50 on 2 cores,
``inter_op_threads=2``: 46.7 ms with a team on each thread, 38.0 with one,
``benchmarks/ONNX.md``).
"""

from __future__ import annotations

import threading

__all__ = ["mark_inter_op_worker", "on_inter_op_worker"]

_local = threading.local()


def mark_inter_op_worker() -> None:
    """Mark the current thread as an inter-op worker, for its life (the pool's threads)."""
    _local.worker = True


def on_inter_op_worker() -> bool:
    """True on a session's inter-op worker thread, False on any other (the caller's)."""
    return getattr(_local, "worker", False)
