"""Tensor shapes that may be only partly known.

Shape inference runs while a graph is built, before any data exists, so a shape can
have an unknown rank (``TensorShape(None)``) or unknown dimensions (``None`` in the
list). Two shapes are *compatible* when they could describe the same tensor;
*merging* them keeps what either one knows and fails when they contradict.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from typing import Any, final, overload

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from kernloom.errors import InvalidArgumentError
from kernloom.pydantic_values import value_schema

__all__ = ["Dim", "TensorShape", "as_shape"]

Dim = int | None


def _as_dim(value: object) -> Dim:
    if type(value) is int and value >= 0:  # the common case, checked first: it is hot
        return value
    if value is None or value == -1:
        # -1 is how numpy-style shape lists and JSON files spell "unknown".
        return None
    try:
        dim = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        dim = -1
    if isinstance(value, bool) or dim < 0:
        raise InvalidArgumentError(f"a dimension must be a non-negative int or None, got {value!r}")
    return dim


@final
class TensorShape:
    """An immutable, hashable shape: ``TensorShape([2, None])``, ``TensorShape(None)``."""

    __slots__ = ("_dims",)

    _dims: tuple[Dim, ...] | None

    def __init__(self, dims: Iterable[object] | None) -> None:
        if dims is None:
            self._dims = None
        elif isinstance(dims, TensorShape):
            self._dims = dims._dims
        else:
            if isinstance(dims, str | bytes):
                raise InvalidArgumentError(f"a shape must be a list of dimensions, got {dims!r}")
            self._dims = tuple(_as_dim(d) for d in dims)

    @classmethod
    def unknown(cls, rank: int | None = None) -> TensorShape:
        """A shape of unknown rank, or of a known rank with every dimension unknown."""
        return cls(None if rank is None else [None] * rank)

    @classmethod
    def scalar(cls) -> TensorShape:
        return cls(())

    @property
    def rank(self) -> int | None:
        return None if self._dims is None else len(self._dims)

    @property
    def dims(self) -> tuple[Dim, ...] | None:
        return self._dims

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self) -> int | None:
        """The element count, or None when any dimension (or the rank) is unknown."""
        if self._dims is None:
            return None
        count = 1
        for d in self._dims:
            if d is None:
                return None
            count *= d
        return count

    def as_list(self) -> list[Dim]:
        if self._dims is None:
            raise InvalidArgumentError("as_list() is not defined on a shape of unknown rank")
        return list(self._dims)

    def as_tuple(self) -> tuple[int, ...]:
        """The dimensions as a numpy shape; only for fully defined shapes."""
        if not self.is_fully_defined():
            raise InvalidArgumentError(f"shape {self} is not fully defined")
        return tuple(d for d in self._dims or () if d is not None)

    def is_compatible_with(self, other: object) -> bool:
        dims = self._dims
        if type(other) is tuple and dims is not None:  # a numpy shape: every run's feeds
            return len(dims) == len(other) and all(
                a is None or a == b for a, b in zip(dims, other, strict=True)
            )
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(
            a is None or b is None or a == b for a, b in zip(self._dims, other._dims, strict=True)
        )

    def merge_with(self, other: object) -> TensorShape:
        """The most specific shape compatible with both; an error when they contradict."""
        other = as_shape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if not self.is_compatible_with(other):
            raise InvalidArgumentError(f"shapes {self} and {other} are not compatible")
        return TensorShape(
            a if a is not None else b for a, b in zip(self._dims, other._dims, strict=True)
        )

    def with_rank(self, rank: int) -> TensorShape:
        """This shape, required to have ``rank`` dimensions."""
        if self._dims is not None and len(self._dims) != rank:
            raise InvalidArgumentError(f"shape {self} must have rank {rank}")
        return self.merge_with(TensorShape.unknown(rank))

    def concatenate(self, other: object) -> TensorShape:
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    def __len__(self) -> int:
        if self._dims is None:
            raise InvalidArgumentError("len() is not defined on a shape of unknown rank")
        return len(self._dims)

    def __iter__(self) -> Iterator[Dim]:
        if self._dims is None:
            raise InvalidArgumentError("cannot iterate over a shape of unknown rank")
        return iter(self._dims)

    @overload
    def __getitem__(self, key: int) -> Dim: ...
    @overload
    def __getitem__(self, key: slice) -> TensorShape: ...
    def __getitem__(self, key: int | slice) -> Dim | TensorShape:
        if self._dims is None:
            return TensorShape(None) if isinstance(key, slice) else None
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return self._dims[key]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TensorShape):
            return self._dims == other._dims
        if isinstance(other, list | tuple):
            return self._dims is not None and list(self._dims) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._dims)

    def __repr__(self) -> str:
        return f"TensorShape({None if self._dims is None else list(self._dims)})"

    def __str__(self) -> str:
        if self._dims is None:
            return "<unknown>"
        inner = ", ".join("?" if d is None else str(d) for d in self._dims)
        return f"({inner},)" if len(self._dims) == 1 else f"({inner})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return value_schema(as_shape, lambda s: None if s.dims is None else list(s.dims))


def as_shape(value: object) -> TensorShape:
    """A TensorShape from a TensorShape, a list or tuple of dims, an int (rank 1) or None."""
    if isinstance(value, TensorShape):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return TensorShape([value])
    if value is None or isinstance(value, Iterable):
        return TensorShape(value)
    raise InvalidArgumentError(f"cannot interpret {value!r} as a shape")
