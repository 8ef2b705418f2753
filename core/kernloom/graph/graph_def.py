"""``GraphDef``: a graph as JSON, validated completely when loaded. Never pickle.

Format (``"format": "kernloom.GraphDef"``, ``"version": 1``): a list of nodes, each with
``name``, ``op``, ``inputs`` (``"node:slot"``, ``"node"`` for slot 0, ``"^node"`` for a
control input), ``device`` and ``attrs``. An attr value is an object with exactly one key
that says its type, as in TensorFlow's AttrValue::

    {"b": true}  {"i": 3}  {"f": 0.5}  {"s": "NHWC"}  {"type": "float32"}
    {"shape": [2, null]}  {"shape": null}            (unknown dimension / unknown rank)
    {"tensor": {"dtype": "float32", "shape": [2], "data": "<base64, little-endian, C order>"}}
    {"list": {"i": [1, 2]}}

Loading checks, and reports with the file and node named: JSON syntax, the schema,
duplicate names, unknown ops, attr types and values, tensor byte lengths, dangling
inputs and output slots, cycles, dtype agreement between inputs and attrs, and shapes
(shape inference runs as each node is rebuilt).
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernloom.dtypes import DType, as_dtype
from kernloom.errors import InvalidArgumentError, KernloomError, did_you_mean
from kernloom.framework.attr import AttrKind, AttrType
from kernloom.graph.graph import BACK_EDGE_OPS, Graph, Node
from kernloom.graph.tensor import Tensor
from kernloom.registry import Registry
from kernloom.shapes import TensorShape

__all__ = ["FORMAT", "GraphDef", "NodeJSON", "graph_from_json", "graph_to_json"]

FORMAT: Final = "kernloom.GraphDef"
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


class _Loader:
    def __init__(self, source: str, registry: Registry | None) -> None:
        self.source = source
        self.registry = registry

    def fail(self, message: str, node: str | None = None) -> InvalidArgumentError:
        where = f"{self.source}: node {node!r}: " if node is not None else f"{self.source}: "
        return InvalidArgumentError(where + message)

    def parse(self, text: str) -> GraphDef:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.fail(
                f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
            ) from None
        if not isinstance(raw, dict):
            raise self.fail(
                f"a GraphDef is a JSON object with a 'nodes' list, got a {type(raw).__name__}"
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

    def decode_scalar(self, kind: AttrKind, raw: Any, node: str, key: str) -> Any:
        if kind is AttrKind.TENSOR:
            return self.decode_tensor(raw, node, key)
        if kind is AttrKind.SHAPE:
            if raw is not None and not isinstance(raw, list):
                raise self.fail(f"attr {key!r}: a shape is a list of dimensions or null", node)
            return TensorShape(raw)
        if kind is AttrKind.TYPE:
            return as_dtype(raw) if isinstance(raw, str) else raw
        return raw  # bool, int, float, string: checked against the OpDef when the node is built

    def decode_tensor(self, raw: Any, node: str, key: str) -> np.ndarray[Any, Any]:
        if not isinstance(raw, dict) or set(raw) != {"dtype", "shape", "data"}:
            raise self.fail(f'attr {key!r}: a tensor is {{"dtype", "shape", "data"}}', node)
        try:
            dtype: DType = as_dtype(raw["dtype"])
        except InvalidArgumentError as exc:
            raise self.fail(f"attr {key!r}: {exc}", node) from None
        shape = raw["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise self.fail(
                f"attr {key!r}: tensor shape must be a list of non-negative ints, got {shape!r}",
                node,
            )
        try:
            data = base64.b64decode(raw["data"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise self.fail(f"attr {key!r}: tensor data is not valid base64", node) from None
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
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
        graph = Graph(self.registry)
        by_name: dict[str, NodeJSON] = {}
        for index, node in enumerate(graph_def.nodes):
            if node.name in by_name:
                first = next(i for i, n in enumerate(graph_def.nodes) if n.name == node.name)
                raise self.fail(f"duplicate node name (nodes #{first} and #{index})", node.name)
            by_name[node.name] = node
        edges: dict[str, list[tuple[str, int | None]]] = {}
        for node in graph_def.nodes:
            if node.op not in graph.registry.ops:
                raise self.fail(
                    f"unknown op {node.op!r}." + did_you_mean(node.op, graph.registry.ops.names()),
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
            graph.update_input(graph.node(consumer), index, graph.node(source).output(source_slot))
        return graph

    def topological_order(
        self,
        graph_def: GraphDef,
        edges: dict[str, list[tuple[str, int | None]]],
        back: set[str],
    ) -> list[str]:
        """Kahn's order, not counting the edges out of ``back`` nodes (a loop's
        NextIteration): those are the only cycles allowed."""
        forward = {
            name: {src for src, _ in inputs if src not in back} for name, inputs in edges.items()
        }
        pending = {n.name: len(forward[n.name]) for n in graph_def.nodes}
        users: dict[str, list[str]] = {}
        for name, sources in forward.items():
            for src in sources:
                users.setdefault(src, []).append(name)
        # Kahn's algorithm, taking the earliest ready node in file order, so a file that is
        # already in topological order (every file we write) loads in exactly that order.
        position = {n.name: i for i, n in enumerate(graph_def.nodes)}
        ready = [position[n.name] for n in graph_def.nodes if pending[n.name] == 0]
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            name = graph_def.nodes[heapq.heappop(ready)].name
            order.append(name)
            for user in users.get(name, []):
                pending[user] -= 1
                if pending[user] == 0:
                    heapq.heappush(ready, position[user])
        if len(order) != len(graph_def.nodes):
            stuck = next(n.name for n in graph_def.nodes if pending[n.name])
            cycle = [stuck]
            while True:  # walk back along unfinished inputs until a node repeats
                nxt = next(src for src in forward[cycle[-1]] if pending[src])
                if nxt in cycle:
                    cycle = [*cycle[cycle.index(nxt) :], nxt]
                    break
                cycle.append(nxt)
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
        data: list[Tensor] = []
        data_inputs = [(src, slot) for src, slot in inputs if slot is not None]
        for src, slot in data_inputs:
            if src not in graph:
                stand_in = next(((s, k) for s, k in data_inputs if s in graph), None)
                if stand_in is None:
                    raise self.fail(
                        f"every data input comes back from a loop ({src!r} first); a Merge "
                        f"needs an input from outside the loop too",
                        node.name,
                    )
                later.append((node.name, len(data), src, slot))
                src, slot = stand_in
            producer = graph.node(src)
            if slot >= len(producer.outputs):
                raise self.fail(
                    f"input '{src}:{slot}' asks for output {slot}, but node {src!r} "
                    f"(op {producer.op}) has {len(producer.outputs)} output(s)",
                    node.name,
                )
            data.append(producer.outputs[slot])
        controls = [graph.node(src) for src, slot in inputs if slot is None]
        op_def = graph.registry.op_def(node.op)
        grouped = self.group_inputs(op_def, data, attrs, node.name)
        try:
            graph.add_node(
                node.op,
                grouped,
                attrs,
                name=node.name,
                device=node.device,
                control_inputs=controls,
                exact_name=True,
            )
        except KernloomError as exc:
            raise InvalidArgumentError(f"{self.source}: {exc}") from None

    def group_inputs(
        self, op_def: Any, data: list[Tensor], attrs: Mapping[str, Any], node: str
    ) -> list[Tensor | list[Tensor]]:
        fixed = sum(1 for a in op_def.inputs if not a.is_list)
        lists = [a for a in op_def.inputs if a.is_list]
        if (not lists and len(data) != fixed) or (lists and len(data) < fixed):
            raise self.fail(f"op {op_def.name} takes {fixed} input(s), got {len(data)}", node)
        out: list[Tensor | list[Tensor]] = []
        position = 0
        for arg in op_def.inputs:
            if arg.is_list:
                count = attrs.get(arg.number_attr)
                if not isinstance(count, int):
                    count = len(data) - fixed if len(lists) == 1 else None
                if count is None or count < 0 or position + count > len(data):
                    raise self.fail(
                        f"cannot tell how many inputs belong to list '{arg.spec()}'", node
                    )
                out.append(data[position : position + count])
                position += count
            else:
                out.append(data[position])
                position += 1
        if position != len(data):
            raise self.fail(
                f"op {op_def.name} takes {position} input(s) with these attrs, got {len(data)}",
                node,
            )
        return out


def graph_from_json(
    text: str, *, registry: Registry | None = None, source: str = "<string>"
) -> Graph:
    loader = _Loader(source, registry)
    return loader.build(loader.parse(text))


def load_graph(path: str | Path, *, registry: Registry | None = None) -> Graph:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgumentError(f"{file}: cannot read the graph file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{file}: not a UTF-8 text file; a GraphDef is JSON") from None
    return graph_from_json(text, registry=registry, source=str(file))
