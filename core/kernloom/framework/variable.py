"""What a resource variable is at run time: ``ResourceHandle`` (the value of a ``resource``
tensor) and ``Var`` (the state in the session's ``ResourceMgr``).

Kernels of every device plugin share these, so a variable means the same thing whichever
device holds it: ``Var.value`` is a value of the owning device, replaced on every assign
(never written in place, so earlier reads stay valid snapshots), and ``Var.lock`` makes
read-modify-write updates atomic when several steps update one variable at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, final

import numpy as np

from kernloom.dtypes import DType
from kernloom.errors import InvalidArgumentError
from kernloom.shapes import TensorShape

__all__ = ["ResourceHandle", "Var", "handle_of", "handle_tensor"]


@dataclass(frozen=True, slots=True)
class ResourceHandle:
    """Names one variable: its container and name in the session's ``ResourceMgr``, the
    device that owns it, and the dtype and shape it was declared with."""

    container: str
    name: str
    device: str
    dtype: DType
    shape: TensorShape

    def __str__(self) -> str:
        return f"variable {self.name!r}"


def handle_tensor(handle: ResourceHandle) -> np.ndarray[Any, Any]:
    """The value of a ``resource`` tensor: a 0-d object array holding ``handle``."""
    array = np.empty((), dtype=object)
    array[()] = handle
    return array


def handle_of(value: Any) -> ResourceHandle:
    """The handle a ``resource`` input holds."""
    found = value[()] if isinstance(value, np.ndarray) else value
    if not isinstance(found, ResourceHandle):
        raise InvalidArgumentError(f"expected a resource handle, got {type(found).__name__}")
    return found


@final
class Var:
    """One variable's state; ``value`` is None until the first assign."""

    __slots__ = ("dtype", "lock", "name", "shape", "value")

    def __init__(self, name: str, dtype: DType, shape: TensorShape) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.value: Any = None
        self.lock = threading.Lock()
