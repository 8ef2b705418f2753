"""Reading a GraphDef's bytes: the binary wire format (``.pb``) or protobuf text (``.pbtxt``).

Parsing is protobuf's own, with kernloom's schema (``schema.py``). Whatever the bytes, the
result is a ``GraphDef`` message or a ``ConversionError`` that says what is wrong: a
truncated or corrupted file, text that is not a GraphDef, nesting deeper than protobuf
allows. Which format a source is in comes from its extension, else from its first bytes,
and a source that fails in the format guessed from its content is tried in the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kernloom.tf.schema import message_class
from kernloom.tf.tensors import ConversionError

__all__ = ["TEXT_SUFFIXES", "check_wire_types", "parse_graph_def", "text_by_suffix"]

TEXT_SUFFIXES: Final = frozenset({".pbtxt", ".pbtext", ".prototxt", ".txt"})
BINARY_SUFFIXES: Final = frozenset({".pb", ".graphdef"})
_SNIFF_BYTES: Final = 4096
_EXPORT_HINT: Final = (
    "write the GraphDef again with tf.io.write_graph(graph_def, directory, name, "
    "as_text=False) (or graph_def.SerializeToString())"
)
_SAVED_MODEL: Final = (
    "not a GraphDef: a SavedModel's saved_model.pb (its first field, "
    "saved_model_schema_version, is a number where a GraphDef has its nodes); kernloom "
    "loads frozen graphs: freeze the SavedModel's signature with "
    "convert_variables_to_constants_v2(tf.saved_model.load(DIR).signatures["
    "'serving_default']) and write frozen.graph.as_graph_def() with tf.io.write_graph "
    "(docs/tensorflow.md)"
)
_WIRE_TYPES: Final = ("varint", "64-bit", "length-delimited", "group start", "group end", "32-bit")


def text_by_suffix(path: str | Path) -> bool | None:
    """True for a text-format name (``model.pbtxt``), False for ``model.pb``, else None."""
    suffix = Path(path).suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return True
    return False if suffix in BINARY_SUFFIXES else None


def _looks_like_text(data: bytes) -> bool:
    """Text has no control characters but tab and newlines; a binary GraphDef has them in
    its first bytes (a NodeDef's field tags: 0x0a name, 0x12 op, 0x1a input)."""
    sample = data[:_SNIFF_BYTES].translate(None, b"\t\n\r")
    return bool(sample.strip()) and min(sample) >= 0x20


def _parse_binary(data: bytes) -> Any:
    from google.protobuf.message import DecodeError

    graph_def = message_class("GraphDef")()
    try:
        graph_def.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise ConversionError(
            f"not a binary GraphDef ({_reason(exc) or 'the bytes do not decode'}): the file is "
            f"truncated or corrupt, or holds another message (a SavedModel's saved_model.pb, a "
            f"MetaGraphDef); {_EXPORT_HINT}"
        ) from None
    check_wire_types(graph_def)
    return graph_def


def _parse_text(data: bytes) -> Any:
    from google.protobuf import text_format

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConversionError(
            f"not a GraphDef in text format: not UTF-8 (byte {exc.start} is {data[exc.start]:#04x})"
        ) from None
    graph_def = message_class("GraphDef")()
    try:
        text_format.Parse(text, graph_def)
    except text_format.ParseError as exc:
        detail = _reason(exc)
        if "tensorflow.FunctionDef" in detail or "tensorflow.GradientDef" in detail:
            detail += " (the graph has a function library, which kernloom does not import)"
        raise ConversionError(f"not a GraphDef in text format: {detail}") from None
    except (RecursionError, ValueError) as exc:
        raise ConversionError(
            f"not a GraphDef in text format: {_reason(exc) or 'nested too deeply'}"
        ) from None
    return graph_def


def check_wire_types(message: Any, where: str = "") -> None:
    """Refuse a field the schema knows that came with another wire type (protobuf keeps it
    aside as an unknown field, so the value would silently be missing). Fields the schema
    does not know -- newer TensorFlow's, or debug info -- are ignored, as TensorFlow does."""
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.unknown_fields import UnknownFieldSet

    descriptor = message.DESCRIPTOR
    unknowns = UnknownFieldSet(message)
    for unknown in (unknowns[i] for i in range(len(unknowns))):
        field = descriptor.fields_by_number.get(unknown.field_number)
        if field is not None:
            wire = unknown.wire_type
            if not where and field.number == 1 and wire == 0:
                raise ConversionError(_SAVED_MODEL)
            kind = _WIRE_TYPES[wire] if 0 <= wire < len(_WIRE_TYPES) else f"wire type {wire}"
            raise ConversionError(
                f"{where}field {field.name!r} (number {field.number}) is encoded as {kind}, "
                f"which does not fit its type: the file is corrupt or not a GraphDef; "
                f"{_EXPORT_HINT}"
            )
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if isinstance(value, Mapping):
            for key in value:
                check_wire_types(value[key], f"{where}{field.name} {key!r}: ")
        elif field.is_repeated:
            for index, item in enumerate(value):
                label = (
                    f"node #{index} ({item.name!r})"
                    if field.name == "node" and not where
                    else f"{field.name} #{index}"
                )
                check_wire_types(item, f"{where}{label}: ")
        else:
            check_wire_types(value, f"{where}{field.name}: ")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if len(text) <= 300 else text[:297] + "..."


def parse_graph_def(data: bytes, *, text: bool | None) -> Any:
    """The ``GraphDef`` message in ``data``; ``text`` None guesses the format."""
    if text is not None:
        return _parse_text(data) if text else _parse_binary(data)
    first, second = (
        (_parse_text, _parse_binary) if _looks_like_text(data) else (_parse_binary, _parse_text)
    )
    try:
        return first(data)
    except ConversionError as error:
        try:
            return second(data)
        except ConversionError:
            raise error from None
