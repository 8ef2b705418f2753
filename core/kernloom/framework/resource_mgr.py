"""``ResourceMgr``: state that outlives a step (variables, queues), per session.

Resources live in named containers so that a whole group can be dropped at once; a
resource is any object, found by container, name and (for a clear error when two kinds
share a name) its Python type.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar, final

from kernloom.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError

__all__ = ["DEFAULT_CONTAINER", "ResourceMgr"]

DEFAULT_CONTAINER: Final = "localhost"

R = TypeVar("R")


@final
class ResourceMgr:
    __slots__ = ("_containers", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._containers: dict[str, dict[str, Any]] = {}

    def create(self, name: str, resource: Any, container: str = DEFAULT_CONTAINER) -> None:
        with self._lock:
            bucket = self._containers.setdefault(container, {})
            if name in bucket:
                raise AlreadyExistsError(f"resource {container}/{name} already exists")
            bucket[name] = resource

    def lookup(self, name: str, kind: type[R], container: str = DEFAULT_CONTAINER) -> R:
        with self._lock:
            found = self._containers.get(container, {}).get(name)
        if found is None:
            raise NotFoundError(f"resource {container}/{name} does not exist")
        if not isinstance(found, kind):
            raise InvalidArgumentError(
                f"resource {container}/{name} is a {type(found).__name__}, not a {kind.__name__}"
            )
        return found

    def lookup_or_create(
        self, name: str, kind: type[R], create: Callable[[], R], container: str = DEFAULT_CONTAINER
    ) -> R:
        with self._lock:
            bucket = self._containers.setdefault(container, {})
            if name not in bucket:
                bucket[name] = create()
            found = bucket[name]
        if not isinstance(found, kind):
            raise InvalidArgumentError(
                f"resource {container}/{name} is a {type(found).__name__}, not a {kind.__name__}"
            )
        return found

    def delete(self, name: str, container: str = DEFAULT_CONTAINER) -> None:
        with self._lock:
            if self._containers.get(container, {}).pop(name, None) is None:
                raise NotFoundError(f"resource {container}/{name} does not exist")

    def clear(self, container: str | None = None) -> None:
        """Drop one container, or every resource when ``container`` is None."""
        with self._lock:
            if container is None:
                self._containers.clear()
            else:
                self._containers.pop(container, None)

    def names(self, container: str = DEFAULT_CONTAINER) -> list[str]:
        with self._lock:
            return sorted(self._containers.get(container, {}))
