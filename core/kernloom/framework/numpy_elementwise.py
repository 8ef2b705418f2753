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

__all__ = ["NUMPY_ELEMENTWISE", "OUT_BY_KEYWORD", "OUT_BY_POSITION", "relu", "sigmoid"]

Array = np.ndarray[Any, Any]


def sigmoid(x: Array, out: Array) -> Array:
    # 1 / (1 + exp(-x)) computed in place; exp overflow gives inf and so exactly 0.
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


_ROW: Final = 1024
"""The row length ``relu`` lays a contiguous tensor out in (see there)."""
_zeros: dict[np.dtype[Any], Array] = {}
"""A read-only row of zeros per dtype (made once; a race makes two equal rows)."""


def relu(x: Array, out: Array) -> Array:
    """``max(x, 0)``, NaN kept (``maximum`` propagates it; -0.0 gives +0.0). numpy's
    ``maximum`` against a scalar runs a loop 2-3 times slower than against an array
    (float32[1 Mi]: 0.31 against 0.13 ms; float64 0.48 / 0.25; int32 0.28 / 0.14), so a
    contiguous tensor is taken as rows of ``_ROW`` against one row of zeros."""
    size = x.size
    if (
        size < 4 * _ROW
        or x.dtype != out.dtype
        or not (x.flags.c_contiguous and out.flags.c_contiguous)
    ):
        return np.maximum(x, 0, out=out)
    zeros = _zeros.get(x.dtype)
    if zeros is None:
        zeros = np.zeros(_ROW, x.dtype)
        zeros.flags.writeable = False
        _zeros[x.dtype] = zeros
    flat, target = x.reshape(-1), out.reshape(-1)
    whole = size - size % _ROW
    np.maximum(flat[:whole].reshape(-1, _ROW), zeros, out=target[:whole].reshape(-1, _ROW))
    if whole < size:
        np.maximum(flat[whole:], 0, out=target[whole:])
    return out


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

OUT_BY_KEYWORD: Final = frozenset({np.maximum, np.minimum})
"""The ufuncs for which numpy 2.4 deprecates ``out`` given after the operands (and warns,
at three times a call's cost): generated code calls them with ``out=`` (a keyword costs
~35 ns a call more than a position, so the other ufuncs keep the position)."""

OUT_BY_POSITION: Final = frozenset(
    fn for fn in NUMPY_ELEMENTWISE.values() if fn not in OUT_BY_KEYWORD
)
"""The functions of the table that take ``out`` as the argument after their operands
(``fused_evaluator.compile_steps``): every one but ``np.maximum`` and ``np.minimum``, for
which numpy 2.4 deprecates it (and warns, at three times a call's cost)."""
