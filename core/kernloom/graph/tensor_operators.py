"""The ``Tensor`` operators whose meaning is more than one op: TensorFlow's rules for
``x / y`` on integers, ``&``, ``|``, ``^`` and ``~`` on booleans, and ``x[...]``.

Each builds nodes through the graph's ``apply_op``, as the plain operators do, so the
nodes get the same inference and the same errors as ``kl.ops`` calls made by hand. This
module does not import ``Tensor`` (which imports it): a tensor is recognised as an
instance of the type of the tensor being indexed or divided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from kernloom import dtypes

if TYPE_CHECKING:
    from kernloom.graph.tensor import Tensor

__all__ = ["logical", "logical_not", "slice_tensor", "true_divide"]

TRUE_DIVIDE_DTYPES: Final = {
    "int8": dtypes.float32,
    "uint8": dtypes.float32,
    "int16": dtypes.float32,
    "uint16": dtypes.float32,
    "int32": dtypes.float64,
    "uint32": dtypes.float64,
    "int64": dtypes.float64,
    "uint64": dtypes.float64,
}
"""TensorFlow's ``truediv`` table: ``/`` between integers casts both sides to this float
type first (``tf.constant([1, 2]) / 2`` is ``[0.5, 1.0]`` in float64), where ``RealDiv``
itself takes floating-point types only."""

_INDEX_HELP: Final = (
    "only integers, slices (':'), the ellipsis ('...'), None (a new axis) and scalar "
    "int32/int64 tensors are valid indices"
)


def _apply(x: Tensor, op: str, inputs: list[object], attrs: dict[str, Any]) -> Tensor:
    result = x.node.graph.apply_op(op, inputs, attrs, dtype_hint=x.dtype)
    assert isinstance(result, type(x))
    return result


def true_divide(x: Tensor, y: object, *, reverse: bool = False) -> Tensor:
    """``x / y`` (``y / x`` when ``reverse``) as TensorFlow's ``/`` computes it: floating
    types divide as they are; integers are cast to ``TRUE_DIVIDE_DTYPES``' float first,
    both sides being of ``x``'s integer type (a Python number becomes one)."""
    target = TRUE_DIVIDE_DTYPES.get(x.dtype.name)
    if target is None:
        return _apply(x, "RealDiv", [y, x] if reverse else [x, y], {})
    if isinstance(y, type(x)) and y.dtype != x.dtype:
        left, right = (y, x) if reverse else (x, y)
        raise TypeError(
            f"'/': x and y must have the same dtype, got {left.dtype.name} ({left.name}) "
            f"and {right.dtype.name} ({right.name}); cast one of them with kl.ops.cast"
        )
    cast_x = _apply(x, "Cast", [x], {"DstT": target})
    cast_y = _apply(x, "Cast", [y], {"DstT": target})  # a number: first a constant of x's type
    return _apply(x, "RealDiv", [cast_y, cast_x] if reverse else [cast_x, cast_y], {})


def logical(x: Tensor, op: str, y: object, *, reverse: bool = False) -> Tensor:
    """``&`` (``LogicalAnd``), ``|`` (``LogicalOr``) or ``^`` (``LogicalXor``: built as
    ``(x | y) & ~(x & y)``, as TensorFlow's ``logical_xor`` is) on booleans."""
    symbol = {"LogicalAnd": "&", "LogicalOr": "|", "LogicalXor": "^"}[op]
    _require_bool(x, symbol)
    left, right = (y, x) if reverse else (x, y)
    if op != "LogicalXor":
        return _apply(x, op, [left, right], {})
    either = _apply(x, "LogicalOr", [left, right], {})
    both = _apply(x, "LogicalAnd", [left, right], {})
    return _apply(x, "LogicalAnd", [either, _apply(x, "LogicalNot", [both], {})], {})


def logical_not(x: Tensor) -> Tensor:
    """``~x`` on booleans (``LogicalNot``)."""
    _require_bool(x, "~")
    return _apply(x, "LogicalNot", [x], {})


def _require_bool(x: Tensor, symbol: str) -> None:
    if not x.dtype.is_bool:
        raise TypeError(
            f"'{symbol}' on tensor {x.name!r} of dtype {x.dtype.name}: kernloom's '&', '|', "
            f"'^' and '~' are the logical operators of bool tensors (it has no bitwise ops); "
            f"compare first (kl.ops.not_equal(x, 0)) to get a bool tensor"
        )


def slice_tensor(x: Tensor, index: object) -> Tensor:
    """``x[index]`` as one ``StridedSlice`` (TensorFlow's ``Tensor.__getitem__``): an
    integer takes one entry and drops the axis (``shrink_axis_mask``), a slice keeps it
    (an omitted start or stop sets ``begin_mask``/``end_mask``), ``...`` stands for the
    axes not named, ``None`` inserts an axis of 1. An out-of-range integer or a zero step
    is an error naming the node: as it is built where the shape is known, else when it
    runs."""
    spec = index if isinstance(index, tuple) else (index,)
    begin: list[object] = []
    end: list[object] = []
    strides: list[object] = []
    masks = dict.fromkeys(
        ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"), 0
    )
    for position, item in enumerate(spec):
        bit = 1 << position
        if isinstance(item, slice):
            bounds = ((item.start, begin, "begin_mask"), (item.stop, end, "end_mask"))
            for bound, values, mask in bounds:
                if bound is None:
                    masks[mask] |= bit
                values.append(0 if bound is None else _index_value(x, bound, "a slice bound"))
            strides.append(1 if item.step is None else _index_value(x, item.step, "a slice step"))
        elif item is Ellipsis:
            if masks["ellipsis_mask"]:
                raise IndexError(f"indexing tensor {x.name!r}: an index can only have one '...'")
            masks["ellipsis_mask"] |= bit
            begin.append(0)
            end.append(0)
            strides.append(1)
        elif item is None:
            masks["new_axis_mask"] |= bit
            begin.append(0)
            end.append(0)
            strides.append(1)
        else:
            value = _index_value(x, item, "an index")
            begin.append(value)
            # (the kernel ignores end for a shrunk axis; value + 1 keeps the spec readable,
            # and for a tensor index it is the sum TensorFlow builds too)
            after = value + 1 if isinstance(value, int) else _apply(value, "AddV2", [value, 1], {})
            end.append(after)
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
    components = [*begin, *end, *strides]
    tensors = [v for v in components if isinstance(v, type(x))]
    wide = any(t.dtype == dtypes.int64 for t in tensors) or not all(
        _INT32_MIN <= v <= _INT32_MAX for v in components if isinstance(v, int)
    )
    index_dtype = dtypes.int64 if wide else dtypes.int32
    vectors = [_index_vector(x, values, index_dtype) for values in (begin, end, strides)]
    return _apply(x, "StridedSlice", [x, *vectors], masks)


_INT32_MIN: Final = int(np.iinfo(np.int32).min)
_INT32_MAX: Final = int(np.iinfo(np.int32).max)


def _index_value(x: Tensor, item: object, what: str) -> Any:
    """An index component: a Python int, or a scalar int32/int64 tensor."""
    if isinstance(item, type(x)):
        if item.dtype not in (dtypes.int32, dtypes.int64) or item.shape.rank not in (0, None):
            raise TypeError(
                f"indexing tensor {x.name!r}: {what} is tensor {item.name!r} of dtype "
                f"{item.dtype.name} and shape {item.shape}; {_INDEX_HELP}"
            )
        return item
    if isinstance(item, bool | np.bool_) or not isinstance(item, int | np.integer):
        raise TypeError(
            f"indexing tensor {x.name!r}: {what} is {item!r} ({type(item).__name__}); {_INDEX_HELP}"
        )
    return int(item)


def _index_vector(x: Tensor, values: list[Any], dtype: dtypes.DType) -> object:
    """``begin``, ``end`` or ``strides`` of ``dtype``: a constant vector, or ``Pack`` of
    the components when one of them is a tensor."""
    if not any(isinstance(v, type(x)) for v in values):
        return np.array(values, dtype.numpy_dtype)
    items = [
        _apply(v, "Cast", [v], {"DstT": dtype})
        if isinstance(v, type(x)) and v.dtype != dtype
        else v
        for v in values
    ]
    result = x.node.graph.apply_op("Pack", [items], {"axis": 0}, dtype_hint=dtype)
    assert isinstance(result, type(x))
    return result
