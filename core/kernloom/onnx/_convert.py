"""Converting a list of ONNX nodes, for the model's graph and for the subgraphs of its
control-flow nodes alike (If's branches, Loop's and Scan's bodies): one place that
decodes the nodes, walks into subgraphs and calls each node's converter.

bfloat16 arithmetic, for every op at once: kernloom has no bfloat16 dtype, so a bfloat16
tensor is its uint16 codes (``kernloom.onnx._small_types``). When a node whose converter
takes no coded values (any op but ``CODED_OPS``) and whose inputs and outputs are all
tensors gets bfloat16 inputs, those are decoded to float32 (exactly), the node's own
converter runs on float32, and each output whose type is bfloat16 by the op's type
constraints (the type variable of a bfloat16 input) is encoded back, rounded to nearest
even; an output of a fixed or another type (ArgMax's int64, Unique's indices) stays as it
is. A deliberate deviation: one rounding per node, where a bfloat16 kernel may round
inside the op too (onnx's reference computes most ops in float32 and rounds once, as
this does; a reference that rounds between steps can differ in the last bit).

Every small type (float8, float4, int4, int2, bfloat16) moves through the ops that only
move elements and that ONNX defines for those types (``MOVING_OPS``: Reshape, Transpose,
Squeeze, Unsqueeze, Flatten, Pad, Shape, Size): the converter runs on the codes themselves
(one code per element; Pad's constant is coded too, so it pads with its code) and the
outputs of the coded input's type variable are tagged with its type again. Every other op
refuses the float8, float4, int4 and int2 types, naming the ops that take them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import onnx
import onnx.defs
from onnx import TensorProto

import kernloom.dtypes as d
from kernloom.graph.builder import constant
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import (
    CODED_OPS,
    MOVING_OPS,
    VALUE_TESTS,
    ConversionContext,
    OnnxNode,
)
from kernloom.onnx._folding import folded_outputs
from kernloom.onnx._registry import REGISTRY
from kernloom.onnx._small_types import (
    bfloat16_outputs,
    decode,
    encode,
    is_float_type,
    takes_tensors_only,
)
from kernloom.onnx._values import OnnxCoded, OnnxOptional, OnnxSequence
from kernloom.onnx.errors import OnnxImportError
from kernloom.shapes import TensorShape

__all__ = ["convert_node", "convert_nodes", "graph_nodes", "node_name", "with_subgraph_nodes"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def node_name(text: str, fallback: str) -> str:
    """A valid kernloom node name for an ONNX name."""
    safe = _UNSAFE.sub("_", text) or fallback
    return safe if safe[0].isalnum() or safe[0] == "." else f"n{safe}"


def graph_nodes(graph: onnx.GraphProto, opsets: dict[str, int], scope: str = "") -> list[OnnxNode]:
    """The nodes of ``graph`` decoded, each with the opset in force for its domain; an
    unnamed node of a subgraph gets a made-up name under ``scope`` (its parent's name and
    attribute), so an error tells which subgraph it is in."""
    nodes = []
    for index, proto in enumerate(graph.node):
        domain = proto.domain if proto.domain != "ai.onnx" else ""
        name = proto.name or f"{scope}{proto.op_type}_{index}"
        nodes.append(OnnxNode(proto, name, opsets.get(domain, 0)))
    return nodes


def with_subgraph_nodes(nodes: list[OnnxNode], opsets: dict[str, int]) -> Iterator[OnnxNode]:
    """``nodes`` and, depth first, the nodes of every subgraph they hold (If's branches,
    Loop's body...): what the up-front checks of an import must see, so that an
    unsupported op inside a loop body is reported with the others before anything is
    built."""
    for node in nodes:
        yield node
        for attr in node.proto.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for graph in graphs:
                inner = graph_nodes(graph, opsets, f"{node.name}/{attr.name}/")
                yield from with_subgraph_nodes(inner, opsets)


def convert_nodes(ctx: ConversionContext, nodes: list[OnnxNode]) -> None:
    """Convert ``nodes`` in order into ``ctx`` (their outputs land in ``ctx.values``)."""
    producers = {out: node for node in nodes for out in node.outputs if out}
    for node in nodes:
        convert_node(ctx, node, producers)


def convert_node(ctx: ConversionContext, node: OnnxNode, producers: dict[str, OnnxNode]) -> None:
    """Build the kernloom ops of one node with its registered converter."""
    found = REGISTRY.lookup(node.op_type, node.opset, node.domain)
    assert found is not None  # the importer's checks saw every node, nested ones too
    for name in node.inputs:
        if name and not ctx.knows(name):
            later = producers.get(name)
            if later is not None:
                raise node.fail(
                    f"input {name!r} is the output of node {later.describe()}, which comes "
                    "later: ONNX lists a graph's nodes in topological order (a producer "
                    "before its consumers); re-export the model or sort its nodes"
                )
            raise node.fail(
                f"input {name!r} is produced by no node and is neither a graph input nor an "
                "initializer: add it as one of those, or name an existing value instead"
            )
    ctx.node = node
    with ctx.graph.name_scope(node_name(node.name, node.op_type)):
        try:
            if node.op_type in MOVING_OPS and node.domain == "":
                with _codes_as_values(ctx, node) as moved:
                    results = list(found.fn(node, ctx))
                if moved is not None:
                    schema, elem_type, indices = moved
                    tagged = bfloat16_outputs(schema, indices, len(results))
                    results = _tagged(results, tagged, elem_type)
            else:
                with _bfloat16_as_float32(ctx, node) as bfloat16:
                    results = list(found.fn(node, ctx))
                if bfloat16 is not None:
                    schema, decoded = bfloat16
                    outputs = bfloat16_outputs(schema, decoded, len(results))
                    results = _encoded(results, outputs)
        except OnnxImportError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise node.fail(f"{type(exc).__name__}: {exc}") from exc
    for index, name in enumerate(node.outputs):
        if not name:
            continue
        if index >= len(results) or results[index] is None:
            raise node.fail(f"output {index} ({name!r}) is not supported")
        value = results[index]
        assert value is not None
        _declare_rank(ctx, name, value)
        ctx.set_values({name: value})
    _fold(ctx, node, results)
    ctx.node = None


def _declare_rank(ctx: ConversionContext, name: str, value: object) -> None:
    """Give a tensor whose rank shape inference cannot tell (a Reshape to a shape fed at
    run time) the rank the model's value_info declares for it, so the converters that
    need a rank (Flatten, Softmax, Transpose...) build for it. The rank only: what a
    value_info says of the dimensions is not checked against the run."""
    rank = ctx.declared_ranks.get(name)
    if rank is not None and isinstance(value, Tensor) and value.shape.rank is None:
        ctx.graph.set_output_shape(value, TensorShape.unknown(rank))


def _fold(ctx: ConversionContext, node: OnnxNode, results: Sequence[object]) -> None:
    """The outputs known at import when the node's inputs are (shape arithmetic on
    constants, ``kernloom.onnx._folding``): recorded in ``ctx.static``, so the converters
    after it see them as they see an initializer's, and each becomes a constant, so that
    kernloom's shape inference knows the value's shape as the converters know its value
    (a Range of known bounds has a known length). The converter's ops stay behind,
    unused: a session prunes them, as it does an If's untaken branch."""
    folded = folded_outputs(ctx, node, results)
    if not folded:
        return
    with ctx.graph.name_scope(node_name(node.name, node.op_type)):
        for name, value in folded.items():
            ctx.static[name] = value
            ctx.values[name] = constant(
                value, ctx.values[name].dtype, name="folded", graph=ctx.graph
            )


Result = Tensor | OnnxSequence | OnnxOptional | OnnxCoded | None


def _schema(node: OnnxNode) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(
            node.op_type, max_inclusive_version=node.opset, domain=node.domain
        )
    except onnx.defs.SchemaError:
        return None


def _coded_inputs(
    ctx: ConversionContext, node: OnnxNode, wanted: Callable[[OnnxCoded], bool]
) -> dict[int, OnnxCoded]:
    """The node's inputs that are tensors of a small type (index -> value) and ``wanted``."""
    return {
        index: value
        for index, name in enumerate(node.inputs)
        if name and isinstance(value := ctx.lookup(name), OnnxCoded) and wanted(value)
    }


@contextmanager
def _standing_in(
    ctx: ConversionContext,
    node: OnnxNode,
    found: dict[int, OnnxCoded],
    stand_in: Callable[[OnnxCoded], Tensor],
) -> Iterator[None]:
    """While a converter runs, its coded inputs ``found`` as the tensors ``stand_in``
    makes of them (their values decoded, or their codes): ``ctx.input`` gives those; the
    coded values are back afterwards."""
    coded = {node.inputs[index]: value for index, value in found.items()}
    for name, value in coded.items():
        del ctx.containers[name]
        ctx.values[name] = stand_in(value)
    try:
        yield
    finally:
        for name, value in coded.items():
            del ctx.values[name]
            ctx.containers[name] = value


def _is_bfloat16(value: OnnxCoded) -> bool:
    return value.elem_type == TensorProto.BFLOAT16


def _as_float32(value: OnnxCoded) -> Tensor:
    return decode(value.codes, value.elem_type, d.float32)


def _codes(value: OnnxCoded) -> Tensor:
    return value.codes


def _any(value: OnnxCoded) -> bool:
    return True


@contextmanager
def _bfloat16_as_float32(
    ctx: ConversionContext, node: OnnxNode
) -> Iterator[tuple[onnx.defs.OpSchema, list[int]] | None]:
    """While a node's converter runs, its bfloat16 inputs as float32 tensors (when it
    takes no coded values: the module docstring), and a ``VALUE_TESTS`` node's small float
    inputs too; yields the op's schema and their input indices, or None where nothing is
    decoded. The schema is looked up only for a node with such an input: every other
    node's conversion pays nothing for this."""
    found: dict[int, OnnxCoded] = {}
    if node.op_type in VALUE_TESTS:
        found = _coded_inputs(ctx, node, is_float_type)
    elif node.op_type not in CODED_OPS:
        found = _coded_inputs(ctx, node, _is_bfloat16)
    schema = _schema(node) if found else None
    if schema is None or not takes_tensors_only(schema):
        yield None
        return
    with _standing_in(ctx, node, found, _as_float32):
        yield schema, sorted(found)


@contextmanager
def _codes_as_values(
    ctx: ConversionContext, node: OnnxNode
) -> Iterator[tuple[onnx.defs.OpSchema, int, list[int]] | None]:
    """While a ``MOVING_OPS`` node's converter runs, its coded inputs as their codes;
    yields the op's schema, the small type and the coded inputs' indices (None where no
    input is coded). Inputs of two small types are one type variable's: ONNX rejects
    such a node, and so does this, naming both."""
    found = _coded_inputs(ctx, node, _any)
    schema = _schema(node) if found else None
    if schema is None:
        yield None
        return
    types = {value.elem_type for value in found.values()}
    if len(types) > 1:
        names = sorted(TensorProto.DataType.Name(t).lower() for t in types)
        raise node.fail(
            f"inputs of two element types, {' and '.join(names)}: ONNX's "
            "type constraints give them one; cast one to the other"
        )
    with _standing_in(ctx, node, found, _codes):
        yield schema, types.pop(), sorted(found)


def _tagged(results: Sequence[Result], outputs: set[int], elem_type: int) -> list[Result]:
    """``results`` with the tensors among ``outputs`` tagged as codes of ``elem_type``."""
    return [
        OnnxCoded(value, elem_type) if index in outputs and isinstance(value, Tensor) else value
        for index, value in enumerate(results)
    ]


def _encoded(results: Sequence[Result], outputs: set[int]) -> list[Result]:
    """``results`` with the float tensors among ``outputs`` encoded as bfloat16 codes."""
    return [
        OnnxCoded(encode(value, TensorProto.BFLOAT16), TensorProto.BFLOAT16)
        if index in outputs and isinstance(value, Tensor) and value.dtype.is_floating
        else value
        for index, value in enumerate(results)
    ]
