"""The numpy function of each op an elementwise fusion may contain
(``op_library.fused_ops.ELEMENTWISE_ARITY``), each taking ``out=``: one table for every
kernel that evaluates a ``_FusedElementwise`` expression over numpy arrays (the numpy CPU
plugin's kernel; the torch plugin's for inputs too small for torch's per-call cost).

Semantics are TensorFlow's for floats: ``Relu`` keeps NaN (``maximum`` propagates it) and
``Sigmoid`` is ``1 / (1 + exp(-x))``, whose ``exp`` overflow gives ``inf`` and so exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import numpy as np

__all__ = ["NUMPY_ELEMENTWISE", "OUT_BY_POSITION", "relu", "sigmoid"]

Array = np.ndarray[Any, Any]


def sigmoid(x: Array, out: Array) -> Array:
    # 1 / (1 + exp(-x)) computed in place; exp overflow gives inf and so exactly 0.
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


def relu(x: Array, out: Array) -> Array:
    return np.maximum(x, 0, out=out)


NUMPY_ELEMENTWISE: Final[Mapping[str, Callable[..., Any]]] = MappingProxyType(
    {
        "Add": np.add,
        "AddV2": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "RealDiv": np.true_divide,
        "Maximum": np.maximum,
        "Minimum": np.minimum,
        "Neg": np.negative,
        "Exp": np.exp,
        "Log": np.log,
        "Sqrt": np.sqrt,
        "Square": np.square,
        "Tanh": np.tanh,
        "Sigmoid": sigmoid,
        "Relu": relu,
    }
)

OUT_BY_POSITION: Final = frozenset(
    fn for fn in NUMPY_ELEMENTWISE.values() if fn not in (np.maximum, np.minimum)
)
"""The functions of the table that take ``out`` as the argument after their operands
(``fused_evaluator.compile_steps``): every one but ``np.maximum`` and ``np.minimum``, for
which numpy 2.4 deprecates it (and warns, at three times a call's cost)."""
