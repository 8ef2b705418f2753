"""Element types of tensors.

A ``DType`` is a named, interned wrapper around a numpy dtype: numpy is the host-memory
format of feeds and fetches, so every kernloom type must have an exact numpy twin.
Types numpy cannot hold (bfloat16, variable-length strings) are left out rather than
emulated; a plugin that needs them can add them when a real kernel does.

DTypes are compared by identity (there is exactly one ``float32``), serialise as
their name in pydantic models, and are accepted wherever a type is expected under
any spelling ``as_dtype`` understands.
"""

from __future__ import annotations

from typing import Any, Final, final

import numpy as np
from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from kernloom.errors import InvalidArgumentError, did_you_mean
from kernloom.pydantic_values import value_schema

__all__ = [
    "DType",
    "all_dtypes",
    "as_dtype",
    "bool_",
    "complex64",
    "complex128",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "resource",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


@final
class DType:
    """One element type; construct through ``as_dtype`` or use the module constants."""

    # Plain attributes, not properties: allocation reads them for every buffer.
    __slots__ = ("itemsize", "name", "numpy_dtype")

    name: str
    numpy_dtype: np.dtype[Any]
    itemsize: int
    """Bytes per element."""

    def __init__(self, name: str, numpy_dtype: np.dtype[Any]) -> None:
        if name in _BY_NAME:
            raise InvalidArgumentError(f"dtype {name!r} already exists; use as_dtype({name!r})")
        self.name = name
        self.numpy_dtype = numpy_dtype
        self.itemsize = int(numpy_dtype.itemsize)
        _BY_NAME[name] = self

    @property
    def is_floating(self) -> bool:
        return self.numpy_dtype.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.numpy_dtype.kind == "c"

    @property
    def is_integer(self) -> bool:
        return self.numpy_dtype.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.numpy_dtype.kind == "u"

    @property
    def is_bool(self) -> bool:
        return self.numpy_dtype.kind == "b"

    @property
    def is_numeric(self) -> bool:
        return not self.is_bool

    def __repr__(self) -> str:
        return f"kernloom.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Unpickling must give back the interned instance, not a copy.
        return (as_dtype, (self.name,))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return value_schema(as_dtype, lambda d: d.name, core_schema.str_schema())


_BY_NAME: dict[str, DType] = {}

float16: Final = DType("float16", np.dtype(np.float16))
float32: Final = DType("float32", np.dtype(np.float32))
float64: Final = DType("float64", np.dtype(np.float64))
int8: Final = DType("int8", np.dtype(np.int8))
int16: Final = DType("int16", np.dtype(np.int16))
int32: Final = DType("int32", np.dtype(np.int32))
int64: Final = DType("int64", np.dtype(np.int64))
uint8: Final = DType("uint8", np.dtype(np.uint8))
uint16: Final = DType("uint16", np.dtype(np.uint16))
uint32: Final = DType("uint32", np.dtype(np.uint32))
uint64: Final = DType("uint64", np.dtype(np.uint64))
bool_: Final = DType("bool", np.dtype(np.bool_))
complex64: Final = DType("complex64", np.dtype(np.complex64))
complex128: Final = DType("complex128", np.dtype(np.complex128))

_BY_NUMPY: Final[dict[np.dtype[Any], DType]] = {d.numpy_dtype: d for d in _BY_NAME.values()}
# Spellings users type that are not a canonical name (TensorFlow's and numpy's aliases).
_ALIASES: Final[dict[str, DType]] = {
    "half": float16,
    "float": float32,
    "double": float64,
    "bool_": bool_,
}


resource: Final = DType("resource", np.dtype(object))
"""A handle to state owned by the session (a variable): a 0-d object array holding a
``ResourceHandle``. Not a data type: no numpy dtype maps to it and no arithmetic takes it."""


def all_dtypes() -> tuple[DType, ...]:
    """Every data type (element types of tensors holding numbers or bools), in declaration
    order; ``resource`` is not one."""
    return tuple(d for d in _BY_NAME.values() if d is not resource)


def as_dtype(value: object) -> DType:
    """The DType for a DType, a name (``"float32"``), a numpy dtype or a numpy scalar type.

    Python's ``bool``, ``int``, ``float`` and ``complex`` map as numpy maps them, so
    ``as_dtype(float)`` is ``float64`` (``"float"`` as a *string* is TensorFlow's
    alias for float32, as in ``tf.float``).
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = _BY_NAME.get(value) or _ALIASES.get(value)
        if found is None:
            raise InvalidArgumentError(
                f"unknown dtype name {value!r}; known dtypes: {', '.join(_BY_NAME)}."
                + did_you_mean(value, [*_BY_NAME, *_ALIASES])
            )
        return found
    try:
        np_dtype = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(
            f"cannot interpret {value!r} (a {type(value).__name__}) as a dtype; "
            f"pass a kernloom DType, a numpy dtype or one of: {', '.join(_BY_NAME)}"
        ) from None
    found = _BY_NUMPY.get(np_dtype.newbyteorder("=") if np_dtype.byteorder == ">" else np_dtype)
    if found is None:
        raise InvalidArgumentError(
            f"numpy dtype {np_dtype} has no kernloom equivalent; supported: {', '.join(_BY_NAME)}"
        )
    return found
