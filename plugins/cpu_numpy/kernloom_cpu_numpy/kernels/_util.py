"""Helpers shared by the numpy kernels; the op's own checks are in ``kernel_checks``."""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def lowest(dtype: np.dtype[Any]) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def highest(dtype: np.dtype[Any]) -> Any:
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max
