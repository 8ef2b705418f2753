"""``OpSegment``: kernels cached per session and node, kept while the session holds them.

Building a kernel can be costly (constants converted, plans made), so a session builds
each node's kernel once and every executor of the session shares it. Holds are
reference counts: when the last hold on a session is removed its kernels are dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import final

from kernloom.framework.op_kernel import OpKernel

__all__ = ["OpSegment"]


@final
class OpSegment:
    __slots__ = ("_holds", "_kernels", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[str, dict[str, OpKernel]] = {}
        self._holds: dict[str, int] = {}

    def add_hold(self, session: str) -> None:
        with self._lock:
            self._holds[session] = self._holds.get(session, 0) + 1
            self._kernels.setdefault(session, {})

    def remove_hold(self, session: str) -> None:
        with self._lock:
            count = self._holds.get(session, 0) - 1
            if count > 0:
                self._holds[session] = count
            else:
                self._holds.pop(session, None)
                self._kernels.pop(session, None)

    def find_or_create(self, session: str, node: str, create: Callable[[], OpKernel]) -> OpKernel:
        """The cached kernel of ``node``, creating it once if absent.

        ``create`` runs outside the lock (kernels may be slow to build); if two threads race,
        the first kernel stored wins and the other is discarded.
        """
        with self._lock:
            found = self._kernels.get(session, {}).get(node)
            if found is not None:
                return found
            if session not in self._holds:
                raise KeyError(f"session {session!r} has no hold on the op segment")
        kernel = create()
        with self._lock:
            return self._kernels.setdefault(session, {}).setdefault(node, kernel)

    def num_kernels(self, session: str) -> int:
        with self._lock:
            return len(self._kernels.get(session, {}))
