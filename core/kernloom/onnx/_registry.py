"""The converter registry: one converter per (domain, ONNX op type, schema version).

As onnx2torch's registry: a converter is registered for the version in which the op's
schema changed (``since_version``), and a lookup asks onnx which schema is in force for the
model's opset, so one converter written for Pad-13 serves opsets 13 to 18 without a line
more. A converter also declares the attributes it understands, so that an attribute added
by a later schema is reported at import, never silently ignored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

import onnx
import onnx.defs

if TYPE_CHECKING:
    from kernloom.graph.tensor import Tensor
    from kernloom.onnx._context import ConversionContext, OnnxNode
    from kernloom.onnx._values import OnnxCoded, OnnxOptional, OnnxSequence

__all__ = [
    "REGISTRY",
    "Converter",
    "ConverterFn",
    "ConverterRegistry",
    "converter",
    "schema_versions",
]

ConverterFn = Callable[
    ["OnnxNode", "ConversionContext"],
    "Sequence[Tensor | OnnxSequence | OnnxOptional | OnnxCoded | None]",
]
"""Builds the kernloom ops of one ONNX node; returns one value per ONNX output (a tensor,
or a sequence or optional resolved at import: ``kernloom.onnx._values``)."""


@dataclass(frozen=True, slots=True)
class Converter:
    """One registration: which schema it serves and what it understands."""

    domain: str
    op_type: str
    since_version: int
    fn: ConverterFn
    attrs: frozenset[str]
    """The attribute names the converter reads; any other is an import error."""


class ConverterRegistry:
    """Converters keyed by (domain, op type, since_version)."""

    __slots__ = ("_converters",)

    def __init__(self) -> None:
        self._converters: dict[tuple[str, str, int], Converter] = {}

    def register(
        self,
        op_type: str,
        versions: Iterable[int],
        fn: ConverterFn,
        *,
        attrs: Iterable[str],
        domain: str = "",
    ) -> None:
        for version in versions:
            key = (domain, op_type, version)
            if key in self._converters:
                raise ValueError(f"ONNX converter for {key} registered twice")
            self._converters[key] = Converter(domain, op_type, version, fn, frozenset(attrs))

    def schema_version(self, op_type: str, opset: int, domain: str = "") -> int | None:
        """The since_version of the schema in force at ``opset``, None if onnx has none."""
        try:
            schema = onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain=domain)
        except onnx.defs.SchemaError:
            return None
        return int(schema.since_version)

    def lookup(self, op_type: str, opset: int, domain: str = "") -> Converter | None:
        version = self.schema_version(op_type, opset, domain)
        if version is None:
            return None
        return self._converters.get((domain, op_type, version))

    def converters(self) -> list[Converter]:
        return sorted(
            self._converters.values(), key=lambda c: (c.domain, c.op_type, c.since_version)
        )


REGISTRY: Final = ConverterRegistry()

_Fn = TypeVar("_Fn", bound=ConverterFn)


@functools.cache
def _schema_versions() -> dict[tuple[str, str], tuple[int, ...]]:
    found: dict[tuple[str, str], set[int]] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        found.setdefault((schema.domain, schema.name), set()).add(int(schema.since_version))
    return {key: tuple(sorted(v)) for key, v in found.items()}


def schema_versions(
    op_type: str, first: int, last: int | None = None, domain: str = ""
) -> tuple[int, ...]:
    """The since_versions onnx knows for ``op_type`` between ``first`` and ``last``."""
    known = _schema_versions().get((domain, op_type), ())
    return tuple(v for v in known if v >= first and (last is None or v <= last))


def converter(
    op_type: str,
    first: int,
    last: int | None = None,
    *,
    attrs: Iterable[str] = (),
    domain: str = "",
) -> Callable[[_Fn], _Fn]:
    """Register the decorated function for every schema version of ``op_type`` from
    ``first`` to ``last`` (inclusive; None: the newest onnx knows). A version where the
    op's meaning changed gets its own converter (``last`` ends the older one)."""
    versions = schema_versions(op_type, first, last, domain)
    if not versions:
        raise ValueError(f"onnx has no schema of {op_type!r} between {first} and {last}")

    def decorate(fn: _Fn) -> _Fn:
        REGISTRY.register(op_type, versions, fn, attrs=attrs, domain=domain)
        return fn

    return decorate
