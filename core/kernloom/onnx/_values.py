"""ONNX's non-tensor values at import time: sequences, optionals, and tensors of the
small types kernloom has no dtype for (float8, float4, int4, int2: ``OnnxCoded``).

A kernloom graph carries tensors only, so an ONNX sequence lives in the conversion
context as a Python tuple of kernloom tensors whose length is known at import, and an
optional as "absent" or the tensor or sequence it holds. Ops on them (SequenceAt,
OptionalHasElement...) are resolved while the graph is built; only the tensors inside
reach the graph. A model whose sequence lengths or optional presence depend on run-time
values therefore cannot import; ``InferenceSession`` imports a model with sequence or
optional inputs once per feed layout (``FeedLayout``), when a run gives it.

A tensor of a small ONNX type (``kernloom.onnx._small_types``) is its codes, one byte
per element, tagged with the ONNX type: only the converters that know the type (Cast,
QuantizeLinear...) read it; any other refuses it at import (``ConversionContext.input``),
except bfloat16, which an op on tensors gets as float32 (``kernloom.onnx._convert``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import onnx

from kernloom.dtypes import DType
from kernloom.graph.tensor import Tensor

__all__ = [
    "FeedLayout",
    "OnnxCoded",
    "OnnxOptional",
    "OnnxSequence",
    "Value",
    "describe_value",
    "flatten",
    "is_container_type",
    "rebuild",
    "same_form",
]


@dataclass(frozen=True, slots=True)
class OnnxSequence:
    """An ONNX sequence: its tensors in order, and their element type (which an empty
    sequence still has: SequenceEmpty's dtype, ConcatFromSequence's result type)."""

    items: tuple[Tensor, ...]
    dtype: DType


@dataclass(frozen=True, slots=True)
class OnnxOptional:
    """An ONNX optional: the tensor or sequence it holds, or None when it is empty."""

    element: Tensor | OnnxSequence | None


@dataclass(frozen=True, slots=True)
class OnnxCoded:
    """A tensor of an ONNX element type kernloom has no dtype for (FLOAT8E4M3FN, INT4...):
    its ``codes`` (uint8 bit patterns for the float types, int8/uint8 values for the
    integer ones, one per element) and the ONNX type that gives them their meaning."""

    codes: Tensor
    elem_type: int
    """The ONNX element type (``onnx.TensorProto.FLOAT8E4M3FN``...)."""

    @property
    def type_name(self) -> str:
        """The type as ONNX spells it in lower case: ``float8e4m3fn``."""
        return str(onnx.TensorProto.DataType.Name(self.elem_type)).lower()


Value = Tensor | OnnxSequence | OnnxOptional | OnnxCoded
"""What an ONNX name stands for while a model is converted."""


@dataclass(frozen=True, slots=True)
class FeedLayout:
    """What import needs to know of a fed sequence or optional: whether an optional
    holds a value, and a sequence's length (its own or the one the optional holds)."""

    present: bool = True
    length: int | None = None
    """The number of tensors of a sequence; None for a tensor (or an absent optional)."""


def describe_value(value: Value) -> str:
    """How an error names a value's kind: ``a sequence of 3 tensors``, ``an empty optional``."""
    if isinstance(value, OnnxSequence):
        return f"a sequence of {len(value.items)} tensor(s)"
    if isinstance(value, OnnxOptional):
        if value.element is None:
            return "an empty optional"
        return f"an optional holding {describe_value(value.element)}"
    if isinstance(value, OnnxCoded):
        return f"a {value.type_name} tensor"
    return "a tensor"


def is_container_type(value_type: onnx.TypeProto) -> bool:
    """Whether an ONNX type is a sequence or an optional (not a tensor)."""
    return value_type.WhichOneof("value") in ("sequence_type", "optional_type")


def flatten(value: Value) -> list[Tensor]:
    """The tensors inside ``value``, in order (a tensor is its own list)."""
    if isinstance(value, OnnxSequence):
        return list(value.items)
    if isinstance(value, OnnxOptional):
        return [] if value.element is None else flatten(value.element)
    if isinstance(value, OnnxCoded):
        return [value.codes]
    return [value]


def rebuild(template: Value, tensors: Iterator[Tensor]) -> Value:
    """``template`` with its tensors replaced, in order, by ``tensors``: the value a
    subgraph or a graph output gives, from the tensors kernloom computed for it."""
    if isinstance(template, OnnxSequence):
        return OnnxSequence(tuple(next(tensors) for _ in template.items), template.dtype)
    if isinstance(template, OnnxOptional):
        element = template.element
        if element is None:
            return OnnxOptional(None)
        held = rebuild(element, tensors)
        assert not isinstance(held, OnnxOptional | OnnxCoded)  # not held by the optionals here
        return OnnxOptional(held)
    if isinstance(template, OnnxCoded):
        return OnnxCoded(next(tensors), template.elem_type)
    return next(tensors)


def same_form(a: Value, b: Value) -> bool:
    """Whether two values have the same kind, sequence lengths and element types: what
    the two branches of an If must give for kl.cond to merge them tensor by tensor."""
    if isinstance(a, OnnxSequence) and isinstance(b, OnnxSequence):
        return len(a.items) == len(b.items) and a.dtype == b.dtype
    if isinstance(a, OnnxOptional) and isinstance(b, OnnxOptional):
        if a.element is None or b.element is None:
            return a.element is None and b.element is None
        return same_form(a.element, b.element)
    if isinstance(a, OnnxCoded) and isinstance(b, OnnxCoded):
        return a.elem_type == b.elem_type
    return isinstance(a, Tensor) and isinstance(b, Tensor)
