"""``import_graph_def``: a TensorFlow GraphDef as a kernloom ``Graph``.

Steps, each refusing bad input with an ``InvalidArgumentError`` that starts with the
source's name (the file) and names the node at fault:

1. parse the bytes (``wire.py``), binary or text, with kernloom's own schema;
2. refuse what kernloom does not run: a function library, and ops it does not have --
   every unknown op with every node using it, in one error -- after rewriting each
   ``_SwitchN`` (a frozen ``tf.switch_case``) into ``Switch`` nodes (``switch_n.py``);
3. check names and inputs, and order the nodes so that each comes after its inputs, not
   counting a loop's back edges (out of ``NextIteration``): a GraphDef lists nodes in any
   order;
4. add each node with its attrs converted (``attrs.py``); a ``Merge`` whose back edge
   comes from a node not added yet gets a stand-in input until that node exists.

Shapes are inferred as nodes are added. A loop variable's static shape is the most
specific one that holds on every iteration: the graph is built again with the shapes
relaxed where a back edge brings a different shape (a few rounds at most): the loop's
shape invariant, which a GraphDef does not record.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kernloom.errors import InvalidArgumentError, KernloomError, did_you_mean
from kernloom.fileio import (
    DEFAULT_MAX_READ_BYTES,
    FileReadError,
    describe_os_error,
    open_regular_file,
)
from kernloom.framework.op_def import OpDef
from kernloom.graph.graph import BACK_EDGE_OPS, Graph
from kernloom.graph.graph_def import GraphLoader, file_order
from kernloom.op_library.control_flow_ops import relaxed_shape
from kernloom.registry import Registry, default_registry
from kernloom.shapes import TensorShape
from kernloom.tf.attrs import convert_attrs
from kernloom.tf.node_spec import NodeSpec
from kernloom.tf.switch_n import SWITCH_N, lower_switch_n
from kernloom.tf.tensors import ConversionError
from kernloom.tf.wire import parse_graph_def, text_by_suffix

__all__ = ["import_graph_def"]

_NAME: Final = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*")
"""kernloom's node names: TensorFlow's, but without '>' (which TF uses only in functions)."""
_MAX_ROUNDS: Final = 8
"""Builds of a graph with loops before its loop variables' shapes are left unknown."""
_LIMIT_HINT: Final = "pass import_graph_def(..., max_bytes=N) to allow more"
_DT_STRING: Final = 7
_REF_VARIABLE_OPS: Final = frozenset(
    {
        "Variable",
        "VariableV2",
        "TemporaryVariable",
        "Assign",
        "AssignAdd",
        "AssignSub",
        "IsVariableInitialized",
        "ScatterAdd",
        "ScatterSub",
        "ScatterUpdate",
        "ScatterNdUpdate",
        "CountUpTo",
    }
)
_REF_HINT: Final = (
    "the ops of TensorFlow 1 ref variables, which kernloom does not have: build the graph with "
    "resource variables (tf.compat.v1.get_variable(..., use_resource=True), "
    "tf.compat.v1.enable_resource_variables()), or freeze it "
    "(tf.compat.v1.graph_util.convert_variables_to_constants)"
)
_FUNCTION_OPS: Final = frozenset(
    {"PartitionedCall", "StatefulPartitionedCall", "SymbolicGradient", "RemoteCall"}
)
_CASE_OPS: Final = frozenset({"Case", "StatelessCase"})
_FUNCTIONAL_FLOW_OPS: Final = (
    frozenset({"While", "StatelessWhile", "If", "StatelessIf", "For"}) | _CASE_OPS
)
_FREEZE_HINT: Final = (
    "freeze the model with convert_variables_to_constants_v2(..., lower_control_flow=True), "
    "which inlines the functions"
)
_FLOW_V2_HINT: Final = (
    "control flow v2 (functional While/If): build the graph after "
    "tf.compat.v1.disable_control_flow_v2() (or tf.compat.v1.disable_v2_behavior()), which "
    "writes TF1 control flow (Switch, Merge, Enter, ...), or " + _FREEZE_HINT
)
_CASE_HINT: Final = (
    "tf.switch_case, which TensorFlow writes as a functional Case even with control flow v2 "
    "disabled: freeze the model with convert_variables_to_constants_v2(..., "
    "lower_control_flow=True), which lowers it to _SwitchN and Merge (kernloom runs those); "
    "for a TF1 graph, freeze it through tf.compat.v1.wrap_function: "
    "convert_variables_to_constants_v2(tf.compat.v1.wrap_function(lambda: "
    "tf.compat.v1.import_graph_def(graph_def, name=''), []).prune(feeds, fetches))"
)


class _Importer(GraphLoader):
    def __init__(
        self, source: str, registry: Registry, *, max_bytes: int, clear_devices: bool
    ) -> None:
        super().__init__(source)
        self.registry = registry
        self.max_bytes = max_bytes
        self.clear_devices = clear_devices

    # -- structure ----------------------------------------------------------------------

    def specs(self, graph_def: Any) -> dict[str, NodeSpec]:
        library = graph_def.library
        functions = len(library.function) + len(library.gradient)
        if functions:
            raise self.fail(_library_message(graph_def, functions))
        specs: dict[str, NodeSpec] = {}
        for position, node in enumerate(graph_def.node):
            name = str(node.name)
            label = name if name else f"#{position}"
            if _NAME.fullmatch(name) is None:
                raise self.fail(
                    f"node #{position} has name {name!r}; a node name is letters, digits and "
                    f"'_', '.', '-', '/', starting with a letter, digit or '.'"
                )
            if name in specs:
                first = specs[name].position
                raise self.fail(f"duplicate node name (nodes #{first} and #{position})", name)
            if not node.op:
                raise self.fail("the node has no op", label)
            data: list[tuple[str, int]] = []
            control: list[str] = []
            for text in node.input:
                if text.startswith("^"):
                    control.append(text[1:])
                    continue
                source, colon, slot = text.partition(":")
                if colon and not (slot.isascii() and slot.isdigit() and len(slot) < 10):
                    raise self.fail(f"input {text!r} is not 'node', 'node:slot' or '^node'", name)
                data.append((source, int(slot) if colon else 0))
            device = "" if self.clear_devices else str(node.device)
            specs[name] = NodeSpec(position, name, str(node.op), device, data, control, node.attr)
        for spec in specs.values():
            for source in [s for s, _ in spec.data] + spec.control:
                if source not in specs:
                    raise self.fail(
                        f"input {source!r} refers to no node in the graph."
                        + did_you_mean(source, specs),
                        spec.name,
                    )
        return specs

    def check_ops(self, specs: Mapping[str, NodeSpec]) -> None:
        """Every op kernloom does not have, with the nodes using it, in one error."""
        missing: dict[str, list[str]] = {}
        for spec in specs.values():
            if spec.op not in self.registry.ops:
                missing.setdefault(spec.op, []).append(spec.name)
        if not missing:
            return
        parts = []
        for op, nodes in sorted(missing.items()):
            shown = ", ".join(repr(n) for n in nodes[:5])
            more = f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""
            noun = "node" if len(nodes) == 1 else "nodes"
            if op in _REF_VARIABLE_OPS:
                hint = ""
            elif op in _CASE_OPS:
                hint = _CASE_HINT
            elif op in _FUNCTIONAL_FLOW_OPS:
                hint = _FLOW_V2_HINT
            elif op in _FUNCTION_OPS:
                hint = "a call of a TensorFlow function: " + _FREEZE_HINT
            else:
                hint = did_you_mean(op, self.registry.ops.names()).strip()
            parts.append(f"{op} ({noun} {shown}{more}){' -- ' + hint if hint else ''}")
        refs = sorted(_REF_VARIABLE_OPS & set(missing))
        if refs:
            parts.append(f"{', '.join(refs)} are {_REF_HINT}")
        raise self.fail(
            f"{len(missing)} op(s) that kernloom does not have: {'; '.join(parts)}. A "
            f"plugin can register ops kernloom lacks, or the graph can be rewritten without them"
        )

    def order(self, specs: Mapping[str, NodeSpec]) -> list[NodeSpec]:
        """Kahn's order, not counting data edges out of a loop's ``NextIteration``; among
        ready nodes the earliest in the file first, so an ordered file keeps its order."""
        forward = {
            spec.name: {s for s, _ in spec.data if specs[s].op not in BACK_EDGE_OPS}
            | set(spec.control)
            for spec in specs.values()
        }
        by_position = sorted(specs.values(), key=lambda s: s.position)
        order, cycle = file_order(
            [s.name for s in by_position], {k: sorted(v) for k, v in forward.items()}
        )
        if cycle:
            raise self.fail(
                "the graph has a cycle that is not a loop's back edge (NextIteration -> "
                "Merge): " + " <- ".join(repr(c) for c in cycle)
            )
        return [specs[name] for name in order]

    def check_strings(self, specs: Mapping[str, NodeSpec]) -> None:
        """Every string constant in one error, saying which are assertions' messages
        (``tf.debugging.assert_*`` write theirs as string tensors)."""
        strings = [
            s.name
            for s in specs.values()
            if s.op == "Const" and "dtype" in s.attrs and s.attrs["dtype"].type == _DT_STRING
        ]
        if not strings:
            return
        asserts = sorted(
            s.name
            for s in specs.values()
            if s.op == "Assert" and any(src in strings for src, _ in s.data)
        )
        more = f" and {len(strings) - 5} more" if len(strings) > 5 else ""
        shown = ", ".join(repr(n) for n in strings[:5]) + more
        message = (
            f"{len(strings)} string constant(s) ({shown}): kernloom has no string dtype (DT_STRING)"
        )
        if asserts:
            more = f" and {len(asserts) - 3} more" if len(asserts) > 3 else ""
            listed = ", ".join(repr(n) for n in asserts[:3]) + more
            message += (
                f"; they are the messages of assertions (Assert {listed}), as "
                f"tf.debugging.assert_* write them: export the graph without the assertions, "
                f"or check with tf.debugging.Assert(condition, [tensors]) over numbers only"
            )
        else:
            message += ": export the graph without string tensors"
        raise self.fail(message)

    # -- building -----------------------------------------------------------------------

    def attrs_of(
        self,
        spec: NodeSpec,
        op_def: OpDef,
        targets: Mapping[str, object],
    ) -> Any:
        """``spec``'s attrs converted; ``targets`` are the nodes it may be colocated with."""
        if spec.converted is None:
            try:
                spec.converted = convert_attrs(
                    op_def, spec.attrs, targets, max_bytes=self.max_bytes
                )
            except ConversionError as exc:
                raise self.fail(f"(op {spec.op}) {exc}", spec.name) from None
        return dict(spec.converted)

    def build(
        self,
        specs: Mapping[str, NodeSpec],
        order: list[NodeSpec],
        loop_shapes: Mapping[str, TensorShape],
    ) -> tuple[Graph, dict[str, TensorShape]]:
        """The graph, and the shape each back-edged Merge must be relaxed to (empty when
        every loop variable keeps the shape the graph was built with)."""
        graph = Graph(self.registry)
        later: list[tuple[str, int, str, int]] = []
        for spec in order:
            op_def = self.registry.op_def(spec.op)
            attrs = self.attrs_of(spec, op_def, specs)
            data = self.data_inputs(graph, spec.name, spec.data, later)
            controls = [graph.node(c) for c in spec.control]
            node = self.add_node(
                graph, op_def, spec.name, data, attrs, device=spec.device, controls=controls
            )
            relaxed = loop_shapes.get(spec.name)
            if relaxed is not None:
                try:
                    graph.set_output_shape(node.outputs[0], relaxed)
                except KernloomError as exc:
                    raise InvalidArgumentError(f"{self.source}: {exc.message}") from None
        relax: dict[str, TensorShape] = {}
        for consumer, index, source, slot in later:
            merge = graph.node(consumer)
            tensor = self.output(graph, consumer, source, slot)
            try:
                graph.update_input(merge, index, tensor)
            except KernloomError as exc:  # a back edge of another dtype
                raise InvalidArgumentError(f"{self.source}: {exc.message}") from None
            if merge.outputs:
                current = merge.outputs[0].shape
                wider = relaxed_shape(current, tensor.shape)
                if wider != current:
                    relax[consumer] = relaxed_shape(wider, relax.get(consumer, wider))
        return graph, relax

    def run(self, data: bytes, text: bool | None) -> Graph:
        try:
            graph_def = parse_graph_def(data, text=text)
        except ConversionError as exc:
            raise self.fail(str(exc)) from None
        specs = self.specs(graph_def)
        if SWITCH_N not in self.registry.ops:
            specs = lower_switch_n(specs, self.fail)
        self.check_ops(specs)
        self.check_strings(specs)
        order = self.order(specs)
        loop_shapes: dict[str, TensorShape] = {}
        for _ in range(_MAX_ROUNDS):
            graph, relax = self.build(specs, order, loop_shapes)
            if not relax:
                return graph
            for name, shape in relax.items():
                loop_shapes[name] = relaxed_shape(loop_shapes.get(name, shape), shape)
        unknown = dict.fromkeys(loop_shapes, TensorShape(None))
        graph, _ = self.build(specs, order, unknown)
        return graph


def _library_message(graph_def: Any, functions: int) -> str:
    """The function library refused: which nodes call its functions, and what to do."""
    callers: list[str] = []
    called: set[str] = set()
    flow_ops: set[str] = set()
    for node in graph_def.node:
        funcs = [node.attr[key].func for key in node.attr if node.attr[key].HasField("func")]
        funcs += [f for key in node.attr for f in node.attr[key].list.func]
        if funcs or node.op in _FUNCTION_OPS | _FUNCTIONAL_FLOW_OPS:
            callers.append(f"{node.name!r} (op {node.op})")
            called.update(str(f.name) for f in funcs)
            flow_ops.add(str(node.op))
    used = ""
    if callers:
        more = f" and {len(callers) - 5} more" if len(callers) > 5 else ""
        noun = "node" if len(callers) == 1 else "nodes"
        names = f" {', '.join(sorted(called))}" if 0 < len(called) <= 5 else ""
        used = f", whose functions{names} are called by {noun} {', '.join(callers[:5])}{more}"
    hints = [_CASE_HINT] if flow_ops & _CASE_OPS else []
    hints += [_FLOW_V2_HINT] if flow_ops & (_FUNCTIONAL_FLOW_OPS - _CASE_OPS) else []
    hint = "; ".join(hints) or _FREEZE_HINT
    return (
        f"the graph has a function library ({functions} function(s)){used}; kernloom imports "
        f"graphs without TensorFlow functions: {hint}"
    )


def _read(path: str | os.PathLike[str], max_bytes: int, limit_hint: str) -> bytes:
    with open_regular_file(path, max_bytes=max_bytes, limit_hint=limit_hint) as stream:
        try:
            data = stream.read(max_bytes + 1)
        except OSError as exc:
            raise FileReadError(path, describe_os_error(exc), exc.errno) from None
    if len(data) > max_bytes:
        raise FileReadError(path, f"more than the limit of {max_bytes} bytes; {limit_hint}")
    return data


def import_graph_def(
    source: bytes | str | os.PathLike[str],
    *,
    registry: Registry | None = None,
    text: bool | None = None,
    clear_devices: bool = False,
    max_bytes: int = DEFAULT_MAX_READ_BYTES,
    limit_hint: str = _LIMIT_HINT,
) -> Graph:
    """Load a TensorFlow GraphDef -- a binary ``.pb`` or a text ``.pbtxt``, a frozen graph
    with its constants -- into a new kernloom ``Graph``, without TensorFlow.

    ``source`` is a file's path or the serialized bytes. ``text`` says the format; by
    default a ``.pbtxt``/``.pbtext``/``.prototxt``/``.txt`` file is text, a ``.pb`` file
    binary, and anything else is recognised by its content. Node names, ops and attrs are
    TensorFlow's (feed ``"x:0"``, fetch ``"Identity:0"``); ``clear_devices`` drops the
    device each node asks for. ``max_bytes`` bounds the file and each constant (``limit_hint``
    says how to raise it, in the caller's terms).

    Every problem is an ``InvalidArgumentError`` naming the file (``"<bytes>"`` for bytes)
    and the node: malformed bytes, ops kernloom lacks (all of them at once), attrs it
    cannot honour, bad shapes and dtypes (``FileReadError`` when the file cannot be read).
    """
    if isinstance(source, bytes | bytearray | memoryview):
        data, name = bytes(source), "<bytes>"
        if len(data) > max_bytes:
            raise InvalidArgumentError(
                f"{name}: {len(data)} bytes, more than the limit of {max_bytes}; {limit_hint}"
            )
    elif isinstance(source, str | os.PathLike):
        name = os.fspath(source)
        data = _read(source, max_bytes, limit_hint)
        if text is None:
            text = text_by_suffix(Path(name))
    else:
        raise InvalidArgumentError(
            f"import_graph_def takes a file path or bytes, got {type(source).__name__}"
        )
    importer = _Importer(
        name, registry or default_registry(), max_bytes=max_bytes, clear_devices=clear_devices
    )
    return importer.run(data, text)
