"""Attribute types and values: what an op's attrs may hold, and checking a value against one.

An attr type is one of TensorFlow's: ``string``, ``int``, ``float``, ``bool``, ``type``
(a DType), ``shape``, ``tensor`` (a numpy array, as Const's ``value``) or ``list(X)`` of
the scalar ones. Values are plain Python: ``int``, ``float``, ``bool``, ``str``,
``DType``, ``TensorShape``, ``numpy.ndarray`` and lists of them. ``check_attr_value``
turns what a user wrote (``"float32"``, ``[2, 3]``, ``1`` for a float) into that form,
or says exactly what is wrong.

Ranges are TensorFlow's, whose ``AttrValue`` stores an ``int`` as int64: an int attr (or
an entry of a list(int)) outside [-2**63, 2**63 - 1] is an error, as is a shape
dimension beyond int64 or a shape whose element count is; a float attr is a float64 here
(TensorFlow's is a float32; its kernels read it as a double), and like TensorFlow's it may
be ``inf`` or ``nan``, but an integer too large for a float is an error. An int attr is
never a bool or a float, a bool attr never a number.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from kernloom.dtypes import DType, as_dtype
from kernloom.errors import InvalidArgumentError, short_repr
from kernloom.shapes import TensorShape, as_shape

__all__ = ["INT_ATTR_RANGE", "AttrKind", "AttrType", "check_attr_value", "format_attr_value"]

INT_ATTR_RANGE: Final = (-(2**63), 2**63 - 1)
"""The values an int attr holds: TensorFlow's ``AttrValue.i`` is an int64."""
_RANGE_TEXT: Final = f"{INT_ATTR_RANGE[0]}..{INT_ATTR_RANGE[1]}"


class AttrKind(enum.StrEnum):
    STRING = "string"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    TYPE = "type"
    SHAPE = "shape"
    TENSOR = "tensor"


@dataclass(frozen=True, slots=True)
class AttrType:
    """``int`` or ``list(int)``."""

    kind: AttrKind
    is_list: bool = False

    @classmethod
    def parse(cls, text: str) -> AttrType:
        text = text.strip()
        is_list = text.startswith("list(") and text.endswith(")")
        inner = text[5:-1].strip() if is_list else text
        try:
            kind = AttrKind(inner)
        except ValueError:
            kinds = ", ".join(k.value for k in AttrKind)
            raise InvalidArgumentError(
                f"unknown attr type {text!r}; use one of {kinds} or list(...) of them"
            ) from None
        if is_list and kind is AttrKind.TENSOR:
            raise InvalidArgumentError("list(tensor) attrs are not supported")
        return cls(kind, is_list)

    def __str__(self) -> str:
        return f"list({self.kind})" if self.is_list else str(self.kind)


def _check_scalar(kind: AttrKind, value: object) -> Any:
    if kind is AttrKind.BOOL:
        if isinstance(value, bool | np.bool_):
            return bool(value)
    elif kind is AttrKind.INT:
        if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
            number = int(value)
            if not INT_ATTR_RANGE[0] <= number <= INT_ATTR_RANGE[1]:
                raise _OutOfRange(
                    f"{number} is out of range for an int attr (int64: {_RANGE_TEXT})"
                )
            return number
    elif kind is AttrKind.FLOAT:
        if isinstance(value, int | float | np.integer | np.floating) and not isinstance(
            value, bool | np.bool_
        ):
            try:
                return float(value)
            except OverflowError:
                raise _OutOfRange(
                    f"{short_repr(value)} is out of range for a float attr (float64: at most "
                    f"{np.finfo(np.float64).max:.6g} in magnitude)"
                ) from None
    elif kind is AttrKind.STRING:
        if isinstance(value, str):
            return value
    elif kind is AttrKind.TYPE:
        if isinstance(value, DType | str | np.dtype | type):
            return as_dtype(value)
    elif kind is AttrKind.SHAPE:
        if value is None or isinstance(value, TensorShape | list | tuple):
            return _checked_shape(as_shape(value))
    elif kind is AttrKind.TENSOR and isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        as_dtype(array.dtype)  # must be a kernloom dtype
        return array
    raise TypeError


class _OutOfRange(InvalidArgumentError):
    """A value of the right kind outside the range the attr type holds."""


def _checked_shape(shape: TensorShape) -> TensorShape:
    """``shape`` if every dimension and the element count fit int64, as TensorFlow's
    ``TensorShape`` requires."""
    count = 1
    for dim in shape.dims or ():
        if dim is None:
            continue
        if dim > INT_ATTR_RANGE[1]:
            raise _OutOfRange(
                f"dimension {dim} of shape {shape} is out of range (int64: at most "
                f"{INT_ATTR_RANGE[1]})"
            )
        count *= dim
    if count > INT_ATTR_RANGE[1]:
        raise _OutOfRange(
            f"shape {shape} has {count} elements, more than int64 counts "
            f"(at most {INT_ATTR_RANGE[1]})"
        )
    return shape


def check_attr_value(attr_type: AttrType, value: object) -> Any:
    """``value`` in canonical form for ``attr_type``; ``InvalidArgumentError`` if it is not one."""
    try:
        if attr_type.is_list:
            if not isinstance(value, Sequence) or isinstance(value, str):
                raise TypeError
            checked = []
            for index, item in enumerate(value):
                try:
                    checked.append(_check_scalar(attr_type.kind, item))
                except _OutOfRange as exc:
                    raise _OutOfRange(f"entry {index}: {exc.message}") from None
                except TypeError:
                    raise TypeError(
                        f"entry {index} is {short_repr(item)} ({type(item).__name__}), not "
                        f"of kind {attr_type.kind}"
                    ) from None
            return checked
        return _check_scalar(attr_type.kind, value)
    except _OutOfRange as exc:
        raise InvalidArgumentError(f"value {short_repr(value)}: {exc.message}") from None
    except (TypeError, InvalidArgumentError) as exc:
        detail = f": {exc}" if isinstance(exc, InvalidArgumentError) or exc.args else ""
        raise InvalidArgumentError(
            f"expected a value of attr type {attr_type}, got {short_repr(value)} "
            f"({type(value).__name__}){detail}"
        ) from None


def format_attr_value(value: object) -> str:
    """A compact rendering for messages and tables (arrays by dtype and shape only)."""
    if isinstance(value, np.ndarray):
        return f"<{value.dtype} tensor of shape {list(value.shape)}>"
    if isinstance(value, list):
        return "[" + ", ".join(format_attr_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"  # as written in attr specs
    if isinstance(value, DType):
        return value.name
    if isinstance(value, TensorShape):
        return str(value)
    return repr(value)
