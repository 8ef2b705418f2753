"""Cancellation of a step: one flag, and callbacks that wake whatever is waiting."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import final

__all__ = ["CancellationManager"]


@final
class CancellationManager:
    """Thread-safe. Callbacks registered before ``cancel`` run once, on cancel; a callback
    registered after it is refused (``register`` returns None) so the caller can stop."""

    __slots__ = ("_callbacks", "_cancelled", "_lock", "_reason", "_tokens")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._reason = ""
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    @property
    def reason(self) -> str:
        return self._reason

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            self._reason = reason
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            callback()

    def register(self, callback: Callable[[], None]) -> int | None:
        with self._lock:
            if self._cancelled:
                return None
            token = next(self._tokens)
            self._callbacks[token] = callback
            return token

    def deregister(self, token: int) -> None:
        with self._lock:
            self._callbacks.pop(token, None)
