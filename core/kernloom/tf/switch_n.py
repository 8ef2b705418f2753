"""``_SwitchN``, TensorFlow's lowered ``Case``, rewritten into ``Switch`` nodes.

TensorFlow writes ``tf.switch_case`` as a functional ``Case``/``StatelessCase`` (even with
control flow v2 disabled). Freezing with ``convert_variables_to_constants_v2`` lowers it
(``lower_case_op.cc``) to ``_SwitchN(data, output_index)`` nodes -- one per value the
branches read, one for the branch index -- and a ``Merge`` of the branches' outputs.
A ``_SwitchN`` of ``num_outs`` N forwards ``data`` to output ``output_index``, an index out
of range (negative included) to the last output, and makes every other output dead
(TensorFlow's ``SwitchNOp``).

kernloom's executor has ``Switch`` (two outputs, the one not taken dead), so each
``_SwitchN`` node ``s`` becomes, exactly::

    s/_switch_n/index = Identity(output_index)
    s/_switch_n/k     = Const(k), ^s/_switch_n/index     k = 0 .. N-1
    s/_switch_n/is_k  = Equal(index, k)                   k < N-1
    s/_switch_n/is_N-1 = LogicalNot(LogicalAnd(GreaterEqual(index, 0), Less(index, N-1)))
    s/_switch_n/out_k = Switch(data, is_k)                output k of s is out_k:1

One predicate is true for any index, so one ``out_k:1`` holds ``data`` and the others are
dead; when ``data`` or ``output_index`` is dead, every output is (a dead input makes
Identity, Equal and Switch dead). The constants take a control input from ``index`` so
they run in its loop frame, as the constants of TensorFlow's own lowered branches take one
from their pivot. ``s``'s control inputs go to ``index``; a control input from ``s``
waits for ``out_0``, which runs when ``s`` would have. With N = 1 every index picks output
0: ``out_0 = Identity(data)``.

The ``_SwitchN`` node itself is not in the imported graph: fetch the nodes that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from kernloom.dtypes import DType, int32
from kernloom.errors import InvalidArgumentError
from kernloom.tf.node_spec import NodeSpec
from kernloom.tf.tensors import ConversionError, to_dtype

__all__ = ["SWITCH_N", "lower_switch_n"]

SWITCH_N: Final = "_SwitchN"

Fail = Callable[[str, str], InvalidArgumentError]
"""The importer's error for a node: ``fail(message, node)``."""


def _num_outs(spec: NodeSpec, fail: Fail) -> int:
    value = spec.attrs.get("num_outs")
    if value is None:
        raise fail(f"(op {SWITCH_N}) has no attr 'num_outs' (how many outputs it has)", spec.name)
    if value.WhichOneof("value") != "i":
        raise fail(f"(op {SWITCH_N}) attr 'num_outs' must be an int", spec.name)
    count = int(value.i)
    if count < 1:
        raise fail(f"(op {SWITCH_N}) attr 'num_outs' = {count}; it must be at least 1", spec.name)
    return count


def _data_type(spec: NodeSpec, fail: Fail) -> DType:
    value = spec.attrs.get("T")
    if value is None or value.WhichOneof("value") != "type":
        raise fail(f"(op {SWITCH_N}) attr 'T' must be the data's type", spec.name)
    try:
        return to_dtype(int(value.type))
    except ConversionError as exc:
        raise fail(f"(op {SWITCH_N}) attr 'T': {exc}", spec.name) from None


class _Writer:
    """Adds the nodes that stand for one ``_SwitchN``, under names no node has."""

    def __init__(self, switch: NodeSpec, taken: set[str]) -> None:
        self.switch = switch
        self.taken = taken
        self.nodes: list[NodeSpec] = []

    def add(
        self,
        what: str,
        op: str,
        data: list[tuple[str, int]],
        attrs: dict[str, Any],
        control: list[str] | None = None,
    ) -> str:
        base = f"{self.switch.name}/_switch_n/{what}"
        name, count = base, 0
        while name in self.taken:
            count += 1
            name = f"{base}_{count}"
        self.taken.add(name)
        node = NodeSpec(0, name, op, self.switch.device, data, control or [], {}, attrs)
        self.nodes.append(node)
        return name

    def constant(self, k: int, pivot: str) -> tuple[str, int]:
        value = {"value": np.array(k, np.int32), "dtype": int32}
        return self.add(str(k), "Const", [], value, [pivot]), 0


def _lower(spec: NodeSpec, taken: set[str], fail: Fail) -> tuple[list[NodeSpec], list[str]]:
    """The nodes standing for ``spec``, and the name of the node giving each output
    (output ``k`` is that node's output 1, or 0 when ``num_outs`` is 1)."""
    if len(spec.data) != 2:
        raise fail(
            f"(op {SWITCH_N}) takes 2 inputs (data, output_index), got {len(spec.data)}",
            spec.name,
        )
    count = _num_outs(spec, fail)
    dtype = _data_type(spec, fail)
    data, index = spec.data
    writer = _Writer(spec, taken)
    if count == 1:
        only = writer.add("out_0", "Identity", [data], {"T": dtype}, list(spec.control))
        return writer.nodes, [only]
    pivot = writer.add("index", "Identity", [index], {"T": int32}, list(spec.control))
    on_index = (pivot, 0)
    compare = {"T": int32}
    constants = [writer.constant(k, pivot) for k in range(count)]
    predicates = [
        writer.add(f"is_{k}", "Equal", [on_index, constants[k]], compare) for k in range(count - 1)
    ]
    at_least_0 = writer.add("at_least_0", "GreaterEqual", [on_index, constants[0]], compare)
    below_last = writer.add(f"below_{count - 1}", "Less", [on_index, constants[-1]], compare)
    in_range = writer.add("in_range", "LogicalAnd", [(at_least_0, 0), (below_last, 0)], {})
    predicates.append(writer.add(f"is_{count - 1}", "LogicalNot", [(in_range, 0)], {}))
    outputs = [
        writer.add(f"out_{k}", "Switch", [data, (predicate, 0)], {"T": dtype})
        for k, predicate in enumerate(predicates)
    ]
    return writer.nodes, outputs


def lower_switch_n(specs: Mapping[str, NodeSpec], fail: Fail) -> dict[str, NodeSpec]:
    """``specs`` with every ``_SwitchN`` replaced by the nodes that compute it, and every
    input that read one reading those nodes; node positions follow the file's order."""
    switches = [spec for spec in specs.values() if spec.op == SWITCH_N]
    if not switches:
        return dict(specs)
    taken = set(specs)
    replaced: dict[str, list[NodeSpec]] = {}
    outputs: dict[str, list[str]] = {}
    for spec in switches:
        replaced[spec.name], outputs[spec.name] = _lower(spec, taken, fail)

    def source(consumer: str, name: str, slot: int) -> tuple[str, int]:
        given = outputs.get(name)
        if given is None:
            return name, slot
        if slot >= len(given):
            raise fail(
                f"input '{name}:{slot}' asks for output {slot}, but node {name!r} (op "
                f"{SWITCH_N}) has {len(given)} output(s)",
                consumer,
            )
        return given[slot], 0 if len(given) == 1 else 1

    lowered: dict[str, NodeSpec] = {}
    for spec in specs.values():
        for node in replaced.get(spec.name, [spec]):
            node.data = [source(node.name, name, slot) for name, slot in node.data]
            node.control = [outputs[c][0] if c in outputs else c for c in node.control]
            node.position = len(lowered)
            lowered[node.name] = node
    return lowered
