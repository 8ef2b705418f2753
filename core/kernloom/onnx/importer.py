"""``import_model``: an ONNX model in, an ordinary kernloom ``Graph`` out.

Every ONNX node becomes one kernloom op or a small subgraph of them, built by the
converter that ``_registry`` holds for the node's (domain, op type, schema version).
Nothing is computed through onnx's reference evaluator or onnxruntime: the graph runs on
whichever device the placer picks, as any graph written by hand.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

import numpy as np
import onnx
import onnx.defs
from onnx import numpy_helper

from kernloom.graph.builder import constant, placeholder
from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._convert import convert_nodes, graph_nodes, node_name, with_subgraph_nodes
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import REGISTRY
from kernloom.onnx._small_types import is_small, small_type, to_codes
from kernloom.onnx._values import (
    FeedLayout,
    OnnxCoded,
    OnnxOptional,
    OnnxSequence,
    Value,
    flatten,
    is_container_type,
    rebuild,
)
from kernloom.onnx.errors import OnnxImportError, Unsupported, UnsupportedOnnxError
from kernloom.ops import identity, placeholder_with_default
from kernloom.shapes import TensorShape

__all__ = [
    "ImportedModel",
    "flat_names",
    "import_model",
    "import_model_values",
    "load_model",
    "overridable_initializers",
    "pinned_initializers",
    "unsupported_nodes",
]

_VALID_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*")


class ImportedModel(NamedTuple):
    """The graph and its ONNX-named inputs and outputs (unpacks as a 3-tuple)."""

    graph: Graph
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]


def value_name(graph: Graph, text: str, fallback: str) -> str:
    """The node name of a graph input or output: the ONNX name itself where kernloom
    accepts it and it is free (so ``--feed data_0=...`` and ``--fetch prob`` work), else a
    sanitized one."""
    if _VALID_NAME.fullmatch(text) and text not in graph:
        return text
    return node_name(text, fallback)


def load_model(model: onnx.ModelProto | str | os.PathLike[str] | bytes) -> onnx.ModelProto:
    """A ModelProto from a proto, a path or serialized bytes. One without a graph is an
    error here: protobuf reads an empty file (an interrupted download) as an empty
    ModelProto, which would otherwise import as a model of no inputs and no outputs."""
    if isinstance(model, onnx.ModelProto):
        return _with_graph(model, "the ONNX model")
    if isinstance(model, bytes):
        what = f"the ONNX model ({len(model)} bytes)"
        try:
            proto = onnx.load_from_string(model)
        except Exception as exc:  # protobuf's DecodeError, and others
            raise OnnxImportError(
                f"{what} is not a readable ONNX model: {exc}; it may be truncated or "
                "corrupt: export or download the model again"
            ) from exc
        return _with_graph(proto, what)
    path = Path(model)
    if not path.is_file():
        raise OnnxImportError(f"ONNX model file {str(path)!r} does not exist or is not a file")
    try:
        proto = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError and others
        raise OnnxImportError(f"{str(path)!r} is not a readable ONNX model: {exc}") from exc
    size = path.stat().st_size
    return _with_graph(proto, f"ONNX model file {str(path)!r} ({size} bytes)")


def _with_graph(proto: onnx.ModelProto, what: str) -> onnx.ModelProto:
    """``proto``, refused where it holds no graph (``what`` names the model)."""
    if not proto.HasField("graph"):
        raise OnnxImportError(
            f"{what} holds no graph: it is empty or truncated, or not an ONNX model "
            '(onnxruntime says "No graph was found in the protobuf"); export or download '
            "the model again"
        )
    return proto


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    found = {
        ("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import
    }
    found.setdefault("", 1)
    return found


def _nodes(model: onnx.ModelProto, opsets: dict[str, int]) -> list[OnnxNode]:
    return graph_nodes(model.graph, opsets)


def _problems(nodes: list[OnnxNode], opsets: dict[str, int]) -> list[Unsupported]:
    """Every node whose op, version or attributes the importer does not handle."""
    problems = []
    for node in with_subgraph_nodes(nodes, opsets):

        def report(missing: str, node: OnnxNode = node) -> None:
            problems.append(
                Unsupported(
                    node.name, node.op_type, node.domain, node.opset, missing, node.unnamed_outputs
                )
            )

        if node.domain not in opsets:
            report(
                f"domain {node.domain!r} is not imported by the model (its opset_import has "
                f"no entry for it): add one, e.g. onnx.helper.make_opsetid({node.domain!r}, 1)"
            )
            continue
        version = REGISTRY.schema_version(node.op_type, node.opset, node.domain)
        if version is None:
            report("not an op of this opset in onnx's schemas")
            continue
        found = REGISTRY.lookup(node.op_type, node.opset, node.domain)
        if found is None:
            known = sorted(
                c.since_version
                for c in REGISTRY.converters()
                if (c.domain, c.op_type) == (node.domain, node.op_type)
            )
            report(
                f"no converter for schema version {version}"
                + (f" (converters exist for versions {known})" if known else "")
            )
            continue
        extra = sorted(set(node.attrs) - found.attrs)
        if extra:
            report(f"attribute(s) {', '.join(extra)} not supported")
    return problems


_ATTRIBUTE_TYPES = {
    int(v): onnx.AttributeProto.AttributeType.Name(v)
    for v in onnx.AttributeProto.AttributeType.values()
}


_UNDEFINED = int(onnx.AttributeProto.UNDEFINED)
_WIDENED = {
    (int(onnx.AttributeProto.INT), int(onnx.AttributeProto.FLOAT)),
    (int(onnx.AttributeProto.INTS), int(onnx.AttributeProto.FLOATS)),
}
"""(given, declared) attribute types read without loss: alpha=1 written as an INT."""


def _type_code(kind: onnx.defs.OpSchema.AttrType) -> int:
    """A schema's attribute type as AttributeProto numbers it (the same enum values)."""
    return int(kind)  # type: ignore[call-overload]  # a pybind11 enum; its stub has no __int__


def _with_schemas(
    nodes: list[OnnxNode], opsets: dict[str, int]
) -> Iterator[tuple[OnnxNode, onnx.defs.OpSchema]]:
    """Every node (subgraphs' too) with the schema in force for it; a node of an op
    without one is left out (``_problems`` reports it)."""
    for node in with_subgraph_nodes(nodes, opsets):
        try:
            yield node, onnx.defs.get_schema(node.op_type, node.opset, node.domain)
        except onnx.defs.SchemaError:
            continue


def _invalid_attributes(nodes: list[OnnxNode], opsets: dict[str, int]) -> list[str]:
    """Every attribute whose type differs from what the op's schema declares, and every
    required attribute that is missing: what ``onnx.checker`` reports, said before a
    converter reads the attribute as something it is not (an INT axis given as FLOAT
    1.5 would silently be 1)."""
    found = []
    for node, schema in _with_schemas(nodes, opsets):
        declared = schema.attributes
        version = f"{node.op_type}-{schema.since_version}"
        for attr in node.proto.attribute:
            spec = declared.get(attr.name)
            if spec is None or attr.ref_attr_name:
                continue
            want, have = _type_code(spec.type), int(attr.type)
            if want in (have, _UNDEFINED) or (have, want) in _WIDENED:
                continue
            found.append(
                f"node {node.describe()}: attribute {attr.name!r} is "
                f"{_ATTRIBUTE_TYPES.get(have, have)}; {version} declares it "
                f"{_ATTRIBUTE_TYPES.get(want, want)}"
            )
        for name, spec in declared.items():
            if spec.required and name not in node.attrs:
                found.append(
                    f"node {node.describe()}: the required attribute {name!r} "
                    f"({_ATTRIBUTE_TYPES.get(_type_code(spec.type), spec.type)}) is missing"
                )
    return found


def _invalid_arity(nodes: list[OnnxNode], opsets: dict[str, int]) -> list[str]:
    """Every node with more or fewer inputs or outputs than its schema allows (an empty
    name counts, as ``onnx.checker`` counts it): a converter would ignore an input too
    many, or fail on an output too many without saying why."""
    found = []
    for node, schema in _with_schemas(nodes, opsets):
        version = f"{node.op_type}-{schema.since_version}"
        given = (len(node.proto.input), len(node.proto.output))
        allowed = (
            (int(schema.min_input), int(schema.max_input), "takes"),
            (int(schema.min_output), int(schema.max_output), "gives"),
        )
        for count, what, (low, high, verb) in zip(given, ("input", "output"), allowed, strict=True):
            if not low <= count <= high:
                found.append(
                    f"node {node.describe()}: {count} {what}{'s' if count != 1 else ''}; "
                    f"{version} {verb} {_count_range(low, high)}"
                )
    return found


def _count_range(low: int, high: int) -> str:
    """How many inputs or outputs a schema allows, in words."""
    if low == high:
        return f"{low} (exactly)"
    if high >= 2**31 - 1:  # variadic: onnx's "no limit"
        return f"at least {low}"
    return f"{low} to {high}"


_NEWEST_OPSETS: Final = {
    "": ("the default ONNX domain (ai.onnx)", onnx.defs.onnx_opset_version),
    "ai.onnx.ml": ("domain 'ai.onnx.ml'", onnx.defs.onnx_ml_opset_version),
}
"""The domains whose newest opset the installed onnx reports, and how to name them."""


def _check_opsets(opsets: dict[str, int]) -> None:
    """Refuse an opset newer than the installed onnx knows: its schemas are unknown, and
    a lookup would silently take the newest schema onnx has (onnxruntime refuses such a
    model too)."""
    for domain, (name, newest_of) in _NEWEST_OPSETS.items():
        version, newest = opsets.get(domain, 0), int(newest_of())
        if version > newest:
            raise OnnxImportError(
                f"the model imports opset {version} of {name}, but the installed onnx "
                f"({onnx.__version__}) knows opsets up to {newest}: export the model for "
                f"opset {newest} or below (onnx.version_converter.convert_version converts "
                "a model), or install a newer onnx"
            )


def unsupported_nodes(model: onnx.ModelProto | str | os.PathLike[str] | bytes) -> list[Unsupported]:
    """The nodes of ``model`` that would fail to import (empty when all convert)."""
    proto = load_model(model)
    opsets = _opsets(proto)
    return _problems(_nodes(proto, opsets), opsets)


def _input_shape(value: onnx.ValueInfoProto) -> TensorShape:
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return TensorShape.unknown()
    return TensorShape(
        [int(d.dim_value) if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    )


def _declared_ranks(graph: onnx.GraphProto) -> dict[str, int]:
    """The ranks graph's value_info declares (a tensor type with a shape)."""
    return {
        value.name: len(value.type.tensor_type.shape.dim)
        for value in graph.value_info
        if value.type.WhichOneof("value") == "tensor_type"
        and value.type.tensor_type.HasField("shape")
    }


def pinned_initializers(proto: onnx.ModelProto, imported: ImportedModel) -> set[str]:
    """The overridable initializers (``overridable_initializers``) the import made constants,
    because a converter needed their value: a feed cannot replace them."""
    return overridable_initializers(proto) - set(imported.inputs)


def overridable_initializers(proto: onnx.ModelProto) -> set[str]:
    """The initializers a feed may replace: those also listed as graph inputs, from IR
    version 4 on (before 4 every initializer had to be listed, and all are constants;
    onnxruntime reads them the same way)."""
    if proto.ir_version < 4:
        return set()
    names = {init.name for init in proto.graph.initializer}
    return {value.name for value in proto.graph.input if value.name in names}


def import_model(
    model: onnx.ModelProto | str | os.PathLike[str] | bytes,
    *,
    source: str | None = None,
    layouts: Mapping[str, FeedLayout] | None = None,
) -> ImportedModel:
    """Build a kernloom graph from an ONNX model (a ModelProto, a file path or bytes).

    Returns the graph, its inputs (placeholders) and outputs, keyed by their ONNX names.
    An initializer that is also a graph input (IR version 4 on) is an input with a
    default: a ``PlaceholderWithDefault`` that a feed overrides, as ONNX says -- unless a
    converter needs its value at import (a Conv's weight, a Reshape's shape): then it is a
    constant and not an input (``pinned_initializers``), as the model converts again.
    An unsupported op or attribute fails here, naming every such node at once; an error
    names the model's file (``source``, or ``model`` when it is a path).

    A sequence or optional input needs its ``layouts`` entry (``FeedLayout``: its length,
    whether the optional holds a value), since kernloom resolves those at import; its
    tensors, and those of a sequence or optional output, are keyed ``name[i]`` (a
    sequence's i-th tensor) or ``name`` (an optional's tensor) -- ``flat_names``.
    """
    return import_model_values(model, source=source, layouts=layouts)[0]


def import_model_values(
    model: onnx.ModelProto | str | os.PathLike[str] | bytes,
    *,
    source: str | None = None,
    layouts: Mapping[str, FeedLayout] | None = None,
) -> tuple[ImportedModel, dict[str, Value]]:
    """``import_model``, and the sequence and optional graph inputs and outputs by ONNX
    name, made of the tensors ``ImportedModel`` holds (what ``InferenceSession`` feeds
    and returns them from)."""
    if source is None and isinstance(model, str | os.PathLike):
        source = os.fspath(model)
    try:
        proto = load_model(model)
        constants: frozenset[str] = frozenset()
        while True:
            imported, pinned, containers = _import(proto, constants, dict(layouts or {}))
            if pinned <= constants:
                return imported, containers
            constants |= pinned  # needed at import: constants, as if not listed as inputs
    except OnnxImportError as exc:
        named = bool(exc.args) and isinstance(exc.args[0], str)
        # (load_model's errors name the file already)
        if source is not None and named and repr(source) not in exc.args[0]:
            exc.args = (f"{source}: {exc.args[0]}", *exc.args[1:])
        raise


def flat_names(name: str, value: Value) -> list[str]:
    """The keys of the tensors of ONNX value ``name`` in ``ImportedModel``'s inputs and
    outputs: ``name`` for a tensor (or an optional's), ``name[i]`` for a sequence's."""
    if isinstance(value, OnnxSequence):
        return [f"{name}[{i}]" for i in range(len(value.items))]
    if isinstance(value, OnnxOptional):
        return [] if value.element is None else flat_names(name, value.element)
    return [name]  # a tensor, or a coded one's codes


def _tensor_input(graph: Graph, value_type: onnx.TypeProto, name: str, where: str) -> Tensor:
    if value_type.WhichOneof("value") != "tensor_type":
        raise OnnxImportError(
            f"{where} is not a tensor: nested sequences and optionals are not supported"
        )
    dtype = kernloom_dtype(value_type.tensor_type.elem_type, where)
    info = onnx.ValueInfoProto(type=value_type)
    return placeholder(dtype, _input_shape(info), name=value_name(graph, name, "input"))


def _container_input(graph: Graph, value: onnx.ValueInfoProto, layout: FeedLayout | None) -> Value:
    """The placeholders of a sequence or optional graph input, as its ``layout`` says."""
    kind = value.type.WhichOneof("value")
    what = "a sequence" if kind == "sequence_type" else "an optional"
    if layout is None:
        raise OnnxImportError(
            f"graph input {value.name!r} is {what}, which kernloom resolves at import: pass "
            f"layouts={{{value.name!r}: FeedLayout(...)}} (its length, whether it holds a "
            "value) to import_model; kernloom.onnx.InferenceSession does so from the feed "
            "of each run"
        )
    value_type = value.type
    if kind == "optional_type":
        if not layout.present:
            return OnnxOptional(None)
        value_type = value.type.optional_type.elem_type
        if value_type.WhichOneof("value") == "tensor_type":
            where = f"graph input {value.name!r}"
            return OnnxOptional(_tensor_input(graph, value_type, value.name, where))
    if value_type.WhichOneof("value") != "sequence_type":
        raise OnnxImportError(f"graph input {value.name!r}: its type is not supported")
    if layout.length is None:
        raise OnnxImportError(
            f"graph input {value.name!r} holds a sequence: its FeedLayout needs the length"
        )
    elem = value_type.sequence_type.elem_type
    where = f"graph input {value.name!r}'s elements"
    items = tuple(
        _tensor_input(graph, elem, f"{value.name}.{i}", where) for i in range(layout.length)
    )
    dtype = kernloom_dtype(elem.tensor_type.elem_type, where)
    sequence = OnnxSequence(items, dtype)
    return OnnxOptional(sequence) if kind == "optional_type" else sequence


def _import(
    proto: onnx.ModelProto, constants: frozenset[str], layouts: dict[str, FeedLayout]
) -> tuple[ImportedModel, frozenset[str], dict[str, Value]]:
    """The model converted with the overridable initializers in ``constants`` taken as
    constants, the overridable ones a converter needed the value of, and the sequence
    and optional inputs and outputs."""
    opsets = _opsets(proto)
    _check_opsets(opsets)
    nodes = _nodes(proto, opsets)
    problems = _problems(nodes, opsets)
    if problems:
        raise UnsupportedOnnxError(problems)
    invalid = _invalid_arity(nodes, opsets) + _invalid_attributes(nodes, opsets)
    if invalid:
        lines = "\n".join(f"  - {line}" for line in invalid)
        raise OnnxImportError(
            f"the ONNX model does not follow the schemas of its ops ({len(invalid)} "
            f"problem(s)):\n{lines}\nRe-export the model, or fix the nodes named "
            "(onnx.checker.check_model(model) reports the same)."
        )
    graph = Graph()
    ctx = ConversionContext(graph, opsets)
    ctx.declared_ranks = _declared_ranks(proto.graph)
    initializers = {init.name: init for init in proto.graph.initializer}
    overridable = overridable_initializers(proto) - constants
    defaults: dict[str, Tensor] = {}
    inputs: dict[str, Tensor] = {}
    containers: dict[str, Value] = {}
    with graph.as_default():
        for init in proto.graph.initializer:
            array: np.ndarray[Any, Any] = numpy_helper.to_array(init)
            if is_small(init.data_type):
                # A small type's codes (kernloom has no such dtype): never read at import.
                codes = to_codes(array, init.data_type, f"initializer {init.name!r}")
                stored = constant(codes, name=node_name(init.name, "initializer"))
                if init.name in overridable:
                    defaults[init.name] = stored
                else:
                    ctx.set_values({init.name: OnnxCoded(stored, init.data_type)})
                continue
            kernloom_dtype(init.data_type, f"initializer {init.name!r}")
            stored = constant(array, name=node_name(init.name, "initializer"))
            if init.name in overridable:
                # Not known at import: a feed may replace it (a converter that reads it
                # pins it: ``ConversionContext.static_input``).
                defaults[init.name] = stored
                ctx.defaults[init.name] = array
                continue
            ctx.static[init.name] = array
            ctx.values[init.name] = stored
        for value in proto.graph.input:
            if value.name in initializers and value.name not in overridable:
                continue
            if is_container_type(value.type):
                container = _container_input(graph, value, layouts.get(value.name))
                ctx.set_values({value.name: container})
                containers[value.name] = container
                flat = zip(flat_names(value.name, container), flatten(container), strict=True)
                inputs.update(flat)
                continue
            elem_type = value.type.tensor_type.elem_type
            dtype = (
                small_type(elem_type).storage
                if is_small(elem_type)
                else kernloom_dtype(elem_type, f"graph input {value.name!r}")
            )
            name = value_name(graph, value.name, "input")
            if value.name in defaults:
                default = defaults[value.name]
                shape = _input_shape(value)
                if shape.rank is None:
                    shape = TensorShape([None] * len(default.shape.as_list()))
                tensor = placeholder_with_default(default, shape=shape, name=name)
            else:
                tensor = placeholder(dtype, _input_shape(value), name=name)
            inputs[value.name] = tensor
            if is_small(elem_type):
                coded = OnnxCoded(tensor, elem_type)
                ctx.set_values({value.name: coded})
                containers[value.name] = coded
                continue
            ctx.values[value.name] = tensor
        convert_nodes(ctx, nodes)
        outputs: dict[str, Tensor] = {}
        for value in proto.graph.output:
            if value.name in ctx.containers:
                produced_value = ctx.containers[value.name]
                keys = flat_names(value.name, produced_value)
                named = [
                    identity(t, name=value_name(graph, key, "output"))
                    for key, t in zip(keys, flatten(produced_value), strict=True)
                ]
                outputs.update(zip(keys, named, strict=True))
                containers[value.name] = rebuild(produced_value, iter(named))
                continue
            if value.name not in ctx.values:
                raise OnnxImportError(
                    f"graph output {value.name!r} is produced by no node and is neither a "
                    "graph input nor an initializer: name an existing value as the output, "
                    "or add the node that computes it"
                )
            # An Identity named as the ONNX output, so the output can be fetched by name.
            produced = ctx.values[value.name]
            name = value_name(graph, value.name, "output")
            outputs[value.name] = (
                produced if produced.node.name == name else identity(produced, name=name)
            )
    return ImportedModel(graph, inputs, outputs), frozenset(ctx.pinned), containers
