"""``GraphDef``: a graph as JSON, validated completely when loaded. Never pickle.

Format (``"format": "kernloom.GraphDef"``, ``"version": 1``): a list of nodes, each with
``name``, ``op``, ``inputs`` (``"node:slot"``, ``"node"`` for slot 0, ``"^node"`` for a
control input), ``device`` and ``attrs``. An attr value is an object with exactly one key
that says its type, as in TensorFlow's AttrValue::

    {"b": true}  {"i": 3}  {"f": 0.5}  {"s": "NHWC"}  {"type": "float32"}
    {"shape": [2, null]}  {"shape": null}            (unknown dimension / unknown rank)
    {"tensor": {"dtype": "float32", "shape": [2], "data": "<base64, little-endian, C order>"}}
    {"list": {"i": [1, 2]}}

Loading checks, and reports with the file and node named: JSON syntax, the schema (a
``nodes`` list is required: ``{}`` is not an empty graph, which is saved with one),
duplicate names, unknown ops, attr types and values, tensor byte lengths, dangling
inputs and output slots, cycles, dtype agreement between inputs and attrs, and shapes
(shape inference runs as each node is rebuilt).

A hostile file gets the same treatment as a broken one: whatever the bytes, loading
either returns a graph or raises ``InvalidArgumentError`` whose message starts with the
file's name (and names the node where there is one) -- never another exception, never a
hang. The file must be a regular file of at most ``max_bytes`` (2 GiB by default), JSON
nested at most ``MAX_NESTING`` deep, dimensions within int64 and tensors within
``MAX_RANK`` dimensions.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernloom.dtypes import DType, as_dtype
from kernloom.errors import InvalidArgumentError, KernloomError, did_you_mean
from kernloom.fileio import DEFAULT_MAX_READ_BYTES, FileReadError, read_text_bounded
from kernloom.framework.attr import AttrKind, AttrType
from kernloom.framework.op_def import OpDef, OpSource
from kernloom.graph.tensor import Tensor
from kernloom.op_library.control_flow_ops import BACK_EDGE_OPS
from kernloom.shapes import TensorShape

if TYPE_CHECKING:
    from kernloom.graph.graph import Graph
    from kernloom.graph.node import Node

GraphFactory = Callable[[OpSource | None], "Graph"]
"""What builds the empty graph a GraphDef loads into (``Graph`` itself: passed in, so that
this module does not import the graph module that serialises through it)."""

__all__ = [
    "FORMAT",
    "MAX_NESTING",
    "MAX_RANK",
    "GraphDef",
    "GraphLoader",
    "NodeJSON",
    "file_order",
    "graph_from_json",
    "graph_to_json",
    "group_inputs",
    "load_graph",
]

FORMAT: Final = "kernloom.GraphDef"
MAX_NESTING: Final = 32
"""JSON nesting a GraphDef may have; it needs about 8 (a list attr of tensors)."""
MAX_RANK: Final = 64
"""Dimensions a tensor may have, as numpy allows."""
_MAX_DIM: Final = 2**63 - 1
"""Dimensions and element counts are int64, as in TensorFlow."""
_SCALAR_TAGS = {
    "b": AttrKind.BOOL,
    "i": AttrKind.INT,
    "f": AttrKind.FLOAT,
    "s": AttrKind.STRING,
    "type": AttrKind.TYPE,
    "shape": AttrKind.SHAPE,
    "tensor": AttrKind.TENSOR,
}
_TAG_OF = {kind: tag for tag, kind in _SCALAR_TAGS.items()}


class NodeJSON(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    op: str
    inputs: list[str] = Field(default_factory=list)
    device: str = ""
    attrs: dict[str, dict[str, Any]] = Field(default_factory=dict)


class GraphDef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["kernloom.GraphDef"] = "kernloom.GraphDef"
    version: Literal[1] = 1
    nodes: list[NodeJSON] = Field(default_factory=list)


# -- encoding ---------------------------------------------------------------------------------


def _encode_scalar(kind: AttrKind, value: Any) -> Any:
    if kind is AttrKind.TYPE:
        return as_dtype(value).name
    if kind is AttrKind.SHAPE:
        dims = TensorShape(value).dims
        return None if dims is None else list(dims)
    if kind is AttrKind.TENSOR:
        array = np.asarray(value, order="C")  # not ascontiguousarray: it makes scalars 1-D
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        return {
            "dtype": as_dtype(array.dtype).name,
            "shape": list(array.shape),
            "data": base64.b64encode(little.tobytes()).decode("ascii"),
        }
    return value


def _python_attr_type(value: Any) -> AttrType:
    """The attr type of a runtime attr (``_kernel``, ``_class``), which no OpDef declares."""
    is_list = isinstance(value, list)
    sample = value[0] if is_list and value else ("" if is_list else value)
    kind = {
        bool: AttrKind.BOOL,
        int: AttrKind.INT,
        float: AttrKind.FLOAT,
        str: AttrKind.STRING,
    }.get(type(sample), AttrKind.STRING)
    return AttrType(kind, is_list)


def encode_attr(attr_type: AttrType, value: Any) -> dict[str, Any]:
    tag = _TAG_OF[attr_type.kind]
    if attr_type.is_list:
        return {"list": {tag: [_encode_scalar(attr_type.kind, v) for v in value]}}
    return {tag: _encode_scalar(attr_type.kind, value)}


def _node_json(node: Node) -> NodeJSON:
    attrs = {}
    for key, value in sorted(node.attrs.items()):  # a stable file, whatever set them last
        attr_type = (
            node.op_def.attr(key).attr_type
            if node.op_def.has_attr(key)
            else _python_attr_type(value)
        )
        attrs[key] = encode_attr(attr_type, value)
    return NodeJSON(
        name=node.name,
        op=node.op,
        inputs=node.input_names(),
        device=node.requested_device,
        attrs=attrs,
    )


def graph_to_json(graph: Graph, *, indent: int | None = 1) -> str:
    graph_def = GraphDef(nodes=[_node_json(n) for n in graph.nodes])
    return graph_def.model_dump_json(indent=indent)


# -- decoding ---------------------------------------------------------------------------------


class GraphLoader:
    """What every graph loader (GraphDef JSON here, a TensorFlow GraphDef in ``kernloom.tf``)
    shares: errors that name the file and the node, and a node's inputs grouped per
    argument of its op."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str, node: str | None = None) -> InvalidArgumentError:
        where = f"{self.source}: node {node!r}: " if node is not None else f"{self.source}: "
        return InvalidArgumentError(where + message)

    def group_inputs(
        self, op_def: OpDef, data: list[Tensor], attrs: Mapping[str, Any], node: str
    ) -> list[Tensor | list[Tensor]]:
        try:
            return group_inputs(op_def, data, attrs)
        except InvalidArgumentError as exc:
            raise self.fail(str(exc), node) from None

    def data_inputs(
        self,
        graph: Graph,
        node: str,
        sources: Sequence[tuple[str, int]],
        later: list[tuple[str, int, str, int]],
    ) -> list[Tensor]:
        """The tensors ``sources`` (``(node, slot)``) name, for ``node``. A back edge from a
        node not added yet (a loop's NextIteration) gets a stand-in, another data input of
        the same node, and goes on ``later`` for ``Graph.update_input``."""
        present = [(s, k) for s, k in sources if s in graph]
        data: list[Tensor] = []
        for src, slot in sources:
            if src not in graph:
                if not present:
                    raise self.fail(
                        f"every data input comes back from a loop ({src!r} first); a Merge "
                        f"needs an input from outside the loop too",
                        node,
                    )
                later.append((node, len(data), src, slot))
                src, slot = present[0]
            data.append(self.output(graph, node, src, slot))
        return data

    def output(self, graph: Graph, node: str, src: str, slot: int) -> Tensor:
        """Output ``slot`` of ``src``, which ``node`` reads."""
        producer = graph.node(src)
        if slot >= len(producer.outputs):
            raise self.fail(
                f"input '{src}:{slot}' asks for output {slot}, but node {src!r} "
                f"(op {producer.op}) has {len(producer.outputs)} output(s)",
                node,
            )
        return producer.outputs[slot]

    def add_node(
        self,
        graph: Graph,
        op_def: OpDef,
        name: str,
        data: list[Tensor],
        attrs: Mapping[str, Any],
        *,
        device: str,
        controls: Sequence[Node],
    ) -> Node:
        """Add the loaded node under its own name; ``add_node``'s errors name the node and
        op already, and get the file's name in front."""
        grouped = self.group_inputs(op_def, data, attrs, name)
        try:
            return graph.add_node(
                op_def.name,
                grouped,
                attrs,
                name=name,
                device=device,
                control_inputs=controls,
                exact_name=True,
            )
        except KernloomError as exc:
            raise InvalidArgumentError(f"{self.source}: {exc.message}", hint=exc.hint) from None


class _Loader(GraphLoader):
    def __init__(self, source: str, registry: OpSource | None, new_graph: GraphFactory) -> None:
        super().__init__(source)
        self.registry = registry
        self.new_graph = new_graph

    def parse(self, text: str) -> GraphDef:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.fail(
                f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
            ) from None
        except RecursionError:
            raise self.fail(
                f"JSON nested too deeply (a GraphDef needs at most {MAX_NESTING})"
            ) from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise self.fail(f"not valid JSON: {exc}") from None
        self.check_nesting(raw)
        if not isinstance(raw, dict):
            raise self.fail(
                f"a GraphDef is a JSON object with a 'nodes' list, got a {type(raw).__name__}"
            )
        if "nodes" not in raw:
            # The schema's defaults would make any object without one (``{}``, another
            # tool's JSON) an empty graph; an empty graph saved says "nodes": [].
            got = f"keys {_short(list(raw))}" if raw else "no keys at all"
            raise self.fail(
                f"not a kernloom graph: the JSON object has no 'nodes' list ({got}). A graph "
                f'file is what Graph.save() writes: {{"format": "{FORMAT}", "version": 1, '
                '"nodes": [...]}. Save the graph with Graph.save(), or convert an ONNX model '
                "with `kernloom convert MODEL.onnx GRAPH.json`."
            )
        try:
            return GraphDef.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = list(error["loc"])
            prefix = ""
            if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
                nodes = raw.get("nodes") or []
                item = nodes[loc[1]] if loc[1] < len(nodes) else None
                name = item.get("name") if isinstance(item, dict) else None
                prefix = f"node {name!r} " if isinstance(name, str) else f"node #{loc[1]} "
                loc = loc[2:]
            field = ".".join(str(p) for p in loc) or "(top level)"
            raise self.fail(f"{prefix}field {field!r}: {error['msg']}") from None

    def check_nesting(self, raw: Any) -> None:
        """Refuse JSON nested deeper than ``MAX_NESTING``, without recursing (the checks
        after this one recurse, and Python's stack is the limit they would hit)."""
        stack: list[tuple[Any, int]] = [(raw, 1)]
        while stack:
            value, depth = stack.pop()
            if depth > MAX_NESTING:
                raise self.fail(
                    f"JSON nested more than {MAX_NESTING} deep; a GraphDef needs about 8"
                )
            if isinstance(value, dict):
                stack.extend((v, depth + 1) for v in value.values())
            elif isinstance(value, list):
                stack.extend((v, depth + 1) for v in value)

    def shape_dims(self, dims: Any, node: str, key: str, *, tensor: bool) -> list[Any]:
        """Check a JSON shape: a list of int64 dimensions (``null`` or -1 unknown, except
        in a tensor), at most ``MAX_RANK`` of them, with an element count within int64."""
        what = "tensor shape" if tensor else "shape"
        if not isinstance(dims, list):
            raise self.fail(f"attr {key!r}: a {what} is a list of dimensions, got {dims!r}", node)
        if len(dims) > MAX_RANK:
            raise self.fail(
                f"attr {key!r}: a {what} of {len(dims)} dimensions; at most {MAX_RANK}", node
            )
        known = []
        for d in dims:
            unknown = d is None or (type(d) is int and d == -1)
            if unknown and not tensor:
                continue
            if type(d) is not int or not 0 <= d <= _MAX_DIM:
                allowed = "" if tensor else " (or null for unknown)"
                raise self.fail(
                    f"attr {key!r}: {what} {_short(dims)} has dimension {_short(d)}; dimensions "
                    f"are ints from 0 to 2**63-1{allowed}",
                    node,
                )
            known.append(d)
        if math.prod(known) > _MAX_DIM:
            raise self.fail(
                f"attr {key!r}: {what} {_short(dims)} has more than 2**63-1 elements", node
            )
        return dims

    def decode_scalar(self, kind: AttrKind, raw: Any, node: str, key: str) -> Any:
        if kind is AttrKind.TENSOR:
            return self.decode_tensor(raw, node, key)
        if kind is AttrKind.SHAPE:
            if raw is not None and not isinstance(raw, list):
                raise self.fail(f"attr {key!r}: a shape is a list of dimensions or null", node)
            return TensorShape(
                None if raw is None else self.shape_dims(raw, node, key, tensor=False)
            )
        if kind is AttrKind.TYPE:
            if not isinstance(raw, str):
                raise self.fail(f"attr {key!r}: a type is a dtype name, got {_short(raw)}", node)
            try:
                return as_dtype(raw)
            except InvalidArgumentError as exc:
                raise self.fail(f"attr {key!r}: {exc}", node) from None
        return raw  # bool, int, float, string: checked against the OpDef when the node is built

    def decode_tensor(self, raw: Any, node: str, key: str) -> np.ndarray[Any, Any]:
        if not isinstance(raw, dict) or set(raw) != {"dtype", "shape", "data"}:
            raise self.fail(f'attr {key!r}: a tensor is {{"dtype", "shape", "data"}}', node)
        if not isinstance(raw["dtype"], str):
            raise self.fail(
                f"attr {key!r}: a tensor's dtype is a dtype name, got {_short(raw['dtype'])}", node
            )
        try:
            dtype: DType = as_dtype(raw["dtype"])
        except InvalidArgumentError as exc:
            raise self.fail(f"attr {key!r}: {exc}", node) from None
        if dtype.numpy_dtype.hasobject:
            raise self.fail(
                f"attr {key!r}: a tensor in a file cannot hold {dtype.name} values (they exist "
                f"only while a session runs)",
                node,
            )
        shape = self.shape_dims(raw["shape"], node, key, tensor=True)
        if not isinstance(raw["data"], str):
            raise self.fail(f"attr {key!r}: tensor data is a base64 string", node)
        try:
            data = base64.b64decode(raw["data"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise self.fail(f"attr {key!r}: tensor data is not valid base64", node) from None
        expected = math.prod(shape) * dtype.itemsize
        if len(data) != expected:
            raise self.fail(
                f"attr {key!r}: tensor data has {len(data)} bytes, but a {dtype} tensor of shape "
                f"{shape} needs {expected}",
                node,
            )
        little = dtype.numpy_dtype.newbyteorder("<")
        return np.frombuffer(data, dtype=little).astype(dtype.numpy_dtype).reshape(shape)

    def decode_attr(self, raw: Mapping[str, Any], node: str, key: str) -> Any:
        if len(raw) != 1:
            raise self.fail(
                f"attr {key!r}: an attr value has exactly one of the keys "
                f"{', '.join(sorted([*_SCALAR_TAGS, 'list']))}, got {sorted(raw) or 'none'}",
                node,
            )
        ((tag, value),) = raw.items()
        if tag == "list":
            if (
                not isinstance(value, dict)
                or len(value) != 1
                or next(iter(value)) not in _SCALAR_TAGS
            ):
                raise self.fail(
                    f'attr {key!r}: a list is {{"list": {{"i": [...]}}}} with one element tag', node
                )
            ((inner, items),) = value.items()
            if not isinstance(items, list):
                raise self.fail(f"attr {key!r}: list elements must be a JSON array", node)
            return [self.decode_scalar(_SCALAR_TAGS[inner], v, node, key) for v in items]
        if tag not in _SCALAR_TAGS:
            raise self.fail(
                f"attr {key!r}: unknown value tag {tag!r}."
                + did_you_mean(tag, [*_SCALAR_TAGS, "list"]),
                node,
            )
        return self.decode_scalar(_SCALAR_TAGS[tag], value, node, key)

    def build(self, graph_def: GraphDef) -> Graph:
        graph = self.new_graph(self.registry)
        by_name: dict[str, NodeJSON] = {}
        for index, node in enumerate(graph_def.nodes):
            if node.name in by_name:
                first = next(i for i, n in enumerate(graph_def.nodes) if n.name == node.name)
                raise self.fail(f"duplicate node name (nodes #{first} and #{index})", node.name)
            by_name[node.name] = node
        edges: dict[str, list[tuple[str, int | None]]] = {}
        for node in graph_def.nodes:
            if node.op not in graph.ops:
                raise self.fail(
                    f"unknown op {node.op!r}."
                    + did_you_mean(node.op, graph.ops.names())
                    + (
                        " If a plugin defines it, load with "
                        "registry=kernloom.plugin.default_registry()."
                        if graph.registry is None
                        else ""
                    ),
                    node.name,
                )
            parsed = []
            for text in node.inputs:
                control = text.startswith("^")
                name, _, slot = text.lstrip("^").partition(":")
                if not control and slot and not slot.isdigit():
                    raise self.fail(
                        f"input {text!r} is not 'node', 'node:slot' or '^node'", node.name
                    )
                if name not in by_name:
                    raise self.fail(
                        f"input {text!r} refers to no node in the graph."
                        + did_you_mean(name, by_name),
                        node.name,
                    )
                parsed.append((name, None if control else int(slot or 0)))
            edges[node.name] = parsed
        back = {n.name for n in graph_def.nodes if n.op in BACK_EDGE_OPS}
        order = self.topological_order(graph_def, edges, back)
        later: list[tuple[str, int, str, int]] = []
        for name in order:
            self.add(graph, by_name[name], edges[name], later)
        for consumer, index, source, source_slot in later:
            tensor = self.output(graph, consumer, source, source_slot)
            try:
                graph.update_input(graph.node(consumer), index, tensor)
            except KernloomError as exc:  # a loop's back edge of another dtype
                raise InvalidArgumentError(f"{self.source}: {exc.message}") from None
        return graph

    def topological_order(
        self,
        graph_def: GraphDef,
        edges: dict[str, list[tuple[str, int | None]]],
        back: set[str],
    ) -> list[str]:
        """Kahn's order, not counting the data edges out of ``back`` nodes (a loop's
        NextIteration): those are the only cycles allowed. A control edge out of one is an
        ordinary edge (nothing could stand in for it while the loop is closed)."""
        forward = {
            name: {src for src, slot in inputs if src not in back or slot is None}
            for name, inputs in edges.items()
        }
        order, cycle = file_order(
            [n.name for n in graph_def.nodes], {k: sorted(v) for k, v in forward.items()}
        )
        if cycle:
            raise self.fail("the graph has a cycle: " + " <- ".join(repr(c) for c in cycle))
        return order

    def add(
        self,
        graph: Graph,
        node: NodeJSON,
        inputs: list[tuple[str, int | None]],
        later: list[tuple[str, int, str, int]],
    ) -> None:
        """Add ``node``; a back edge from a node not added yet gets a stand-in (another data
        input of the same node) and goes on ``later`` for ``Graph.update_input``."""
        attrs = {key: self.decode_attr(raw, node.name, key) for key, raw in node.attrs.items()}
        sources = [(src, slot) for src, slot in inputs if slot is not None]
        data = self.data_inputs(graph, node.name, sources, later)
        controls = [graph.node(src) for src, slot in inputs if slot is None]
        op_def = graph.op_def(node.op)
        self.add_node(graph, op_def, node.name, data, attrs, device=node.device, controls=controls)


def group_inputs(
    op_def: OpDef, data: Sequence[Tensor], attrs: Mapping[str, Any]
) -> list[Tensor | list[Tensor]]:
    """A node's flat data inputs, as a GraphDef lists them, grouped per argument of its op
    (a list for a list argument, ``N * T``), its length from the attrs or, for the one list
    of an op, from what is left: what every graph loader (GraphDef JSON, a TensorFlow
    GraphDef) does before it adds the node. ``InvalidArgumentError`` says what does not fit.
    """
    fixed = sum(1 for a in op_def.inputs if not a.is_list)
    lists = [a for a in op_def.inputs if a.is_list]
    if (not lists and len(data) != fixed) or (lists and len(data) < fixed):
        raise InvalidArgumentError(f"op {op_def.name} takes {fixed} input(s), got {len(data)}")
    out: list[Tensor | list[Tensor]] = []
    position = 0
    for arg in op_def.inputs:
        if arg.is_list:
            count = _list_length(attrs, arg)
            if not isinstance(count, int):
                count = len(data) - fixed if len(lists) == 1 else None
            if count is None or count < 0 or position + count > len(data):
                raise InvalidArgumentError(
                    f"op {op_def.name}: cannot tell how many inputs belong to list '{arg.spec()}'"
                )
            out.append(list(data[position : position + count]))
            position += count
        else:
            if position >= len(data):
                raise InvalidArgumentError(
                    f"op {op_def.name} takes more than {len(data)} input(s) with these "
                    f"attrs (none is left for '{arg.spec()}')"
                )
            out.append(data[position])
            position += 1
    if position != len(data):
        raise InvalidArgumentError(
            f"op {op_def.name} takes {position} input(s) with these attrs, got {len(data)}"
        )
    return out


def file_order(
    names: Sequence[str], sources: Mapping[str, Sequence[str]]
) -> tuple[list[str], list[str]]:
    """The nodes ``names`` (in file order) in a topological order of the edges ``sources``
    (node -> the nodes it waits for), and a cycle (``[a, b, a]``, each waiting for the
    next) when there is one, else ``[]``: what every graph loader (GraphDef JSON, a
    TensorFlow GraphDef) needs before it can add nodes.

    Kahn's algorithm, taking the earliest ready node in file order, so that a file that is
    already in topological order (every file we write) loads in exactly that order.
    """
    position = {name: i for i, name in enumerate(names)}
    pending = {name: len(sources[name]) for name in names}
    users: dict[str, list[str]] = {}
    for name in names:
        for source in sources[name]:
            users.setdefault(source, []).append(name)
    ready = [position[name] for name in names if pending[name] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for user in users.get(name, []):
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, position[user])
    if len(order) == len(names):
        return order, []
    cycle = [next(name for name in names if pending[name])]
    while True:  # walk back along unfinished inputs until a node repeats
        step = next(source for source in sources[cycle[-1]] if pending[source])
        if step in cycle:
            return order, [*cycle[cycle.index(step) :], step]
        cycle.append(step)


def _list_length(attrs: Mapping[str, Any], arg: Any) -> int | None:
    """How many inputs a list argument takes, from its ``N`` or ``list(type)`` attr."""
    if arg.type_list_attr is not None:
        types = attrs.get(arg.type_list_attr)
        return len(types) if isinstance(types, list | tuple) else None
    count = attrs.get(arg.number_attr)
    return count if isinstance(count, int) else None


def graph_from_json(
    text: str,
    *,
    new_graph: GraphFactory,
    registry: OpSource | None = None,
    source: str = "<string>",
) -> Graph:
    loader = _Loader(source, registry, new_graph)
    return loader.build(loader.parse(text))


def load_graph(
    path: str | Path,
    *,
    new_graph: GraphFactory,
    registry: OpSource | None = None,
    max_bytes: int = DEFAULT_MAX_READ_BYTES,
    limit_hint: str = "pass Graph.load(..., max_bytes=N) to allow more",
) -> Graph:
    """Load a GraphDef JSON file; any problem is ``InvalidArgumentError`` naming the file
    (``FileReadError``, also an ``OSError``, when the file itself cannot be read)."""
    try:
        text = read_text_bounded(path, max_bytes=max_bytes, limit_hint=limit_hint)
    except FileReadError as exc:
        raise FileReadError(path, f"cannot read the graph file: {exc.problem}", exc.errno) from None
    return graph_from_json(text, new_graph=new_graph, registry=registry, source=str(path))


def _short(value: Any, limit: int = 60) -> str:
    """``repr`` cut to ``limit`` characters: a hostile file's values can be huge."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "<huge int>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
