"""Arithmetic simplification (grappler's ``ArithmeticOptimizer``).

- identities: ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` and
  ``-(-x)`` become ``x``, where the constant does not broadcast ``x`` to a larger shape
  and has no control inputs (the result waits for those, and is dead with them in a
  ``kl.cond`` branch) (``x + 0`` turns ``-0.0`` into ``0.0``; the values compare equal);
- constant push-down: in a chain of ``Add``/``AddV2``/``Sub`` (or of ``Mul``) with a
  constant at each link, the constants are combined first, so ``((x + c1) - c2) + c3``
  becomes ``x + ((c1 - c2) + c3)``, which constant folding then turns into one constant;
  a ``Sub`` from a constant flips the sign of what follows: ``c1 - (c2 - x)`` becomes
  ``x + (c1 - c2)`` and ``c1 - (x + c2)`` becomes ``(c1 - c2) - x``.
  Floats are reassociated (allowed); integer arithmetic wraps modulo 2^bits in numpy and
  TensorFlow alike, where reassociation is exact, so overflow cannot change a result.
  A chain of ``Maximum`` (or of ``Minimum``) with constants becomes one as well,
  ``max(max(x, c1), c2)`` -> ``max(x, max(c1, c2))``: exact, NaN included (a NaN in
  either constant makes both NaN); of two equal zeros the result may keep the other
  sign (the values compare equal, as with ``x + 0``);
- AddN merging: a tree of ``Add``/``AddV2`` over same-shaped tensors becomes one ``AddN``.

A rewritten node keeps its name (so a fetched node is simplified in place; one that
would vanish becomes an ``Identity`` instead). Inner links are absorbed only when this
chain is their one consumer; nodes in loop frames are left alone.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from kernloom.graph.graph import Graph, Node, constant_value
from kernloom.graph.tensor import Tensor
from kernloom.optimizer.analysis import Consumers, frame_nodes, may_rewrite, name_list
from kernloom.optimizer.graph_pass import GraphPass, PassContext
from kernloom.optimizer.rewriter import GraphRewriter

__all__ = ["ArithmeticSimplification"]

ADDS: Final = frozenset({"Add", "AddV2"})
ADDITIVE: Final = frozenset({"Add", "AddV2", "Sub"})
_IDENTITY_CONSTANT: Final = {"Add": 0, "AddV2": 0, "Sub": 0, "Mul": 1, "RealDiv": 1, "Div": 1}
_COMMUTATIVE: Final = frozenset({"Add", "AddV2", "Mul"})
_EXTREMA: Final = frozenset({"Maximum", "Minimum"})
"""Associative and commutative with no sign to track: pushed down like ``Mul``."""
_SAME_OP_CHAINS: Final = frozenset({"Mul", *_EXTREMA})


class ArithmeticSimplification(GraphPass):
    name = "arithmetic"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        return _Run(graph, ctx).result


class _Run:
    def __init__(self, graph: Graph, ctx: PassContext) -> None:
        self.source = graph
        self.ctx = ctx
        self.consumers = Consumers(graph)
        self.frames = frame_nodes(graph)
        self.rewriter = GraphRewriter(graph)
        self.constants: set[str] = set()
        """New-graph nodes this pass built from constants only (folded later)."""
        self.done: dict[str, list[str]] = {"identity": [], "push-down": [], "AddN": []}
        for node in graph.nodes:
            if not self._simplify(node):
                self.rewriter.copy(node)
        if not any(self.done.values()):
            self.result = graph
            return
        for kind, names in self.done.items():
            if names:
                ctx.note(f"{kind}: {len(names)} node(s): {name_list(names)}")
        self.result = self.rewriter.finish(ctx.preserved)

    # -- helpers ---------------------------------------------------------------------------

    def _rewritable(self, node: Node) -> bool:
        """``node`` may be rewritten in place (a preserved node keeps its name)."""
        probe = self.ctx.preserved - {node.name}
        return may_rewrite(node, probe, self.frames)

    def _absorbable(self, new: Node) -> bool:
        """Inner link ``new`` (a node of the new graph) may be folded into its consumer."""
        if new.control_inputs or new.name in self.constants:
            return False
        if new.name not in self.source:
            return True
        old = self.source.node(new.name)
        return may_rewrite(old, self.ctx.preserved, self.frames) and self.consumers.count(old) == 1

    def _is_constant(self, tensor: Tensor) -> bool:
        return tensor.node.op == "Const" or tensor.node.name in self.constants

    def _replace(self, node: Node, value: Tensor) -> None:
        """``node`` computes ``value``: alias it, or keep the name as an Identity."""
        if node.name in self.ctx.preserved or node.control_inputs:
            self._identity(node, value)
        else:
            self.rewriter.alias(node, [value])

    def _identity(self, node: Node, value: Tensor) -> None:
        new = self.rewriter.add(
            "Identity",
            [value],
            name=node.name,
            exact_name=True,
            device=node.requested_device,
            control_inputs=self.rewriter.controls(node),
        )
        self.rewriter.alias(node, new.outputs, new)

    def _emit(self, node: Node, op: str, inputs: list[Any]) -> None:
        """Replace ``node`` by ``op(inputs)`` under its own name."""
        new = self.rewriter.add(
            op,
            inputs,
            name=node.name,
            exact_name=True,
            device=node.requested_device,
            control_inputs=self.rewriter.controls(node),
        )
        self.rewriter.alias(node, new.outputs, new)

    def _constant(self, op: str, a: Tensor, b: Tensor, hint: str) -> Tensor:
        node = self.rewriter.add(op, [a, b], name=f"{hint}/const_{op.lower()}")
        self.constants.add(node.name)
        return node.outputs[0]

    # -- rewrites --------------------------------------------------------------------------

    def _simplify(self, node: Node) -> bool:
        if not self._rewritable(node) or node.op not in (*_IDENTITY_CONSTANT, "Neg", *_EXTREMA):
            return False
        inputs = [self.rewriter.mapped(t) for t in node.inputs]
        return (
            self._identity_rewrite(node, inputs)
            or self._push_down(node, inputs)
            or self._add_n(node, inputs)
        )

    def _identity_rewrite(self, node: Node, inputs: list[Tensor]) -> bool:
        if node.op == "Neg":
            inner = inputs[0].node
            if inner.op == "Neg" and not inner.control_inputs:
                self._replace(node, inner.inputs[0])
                self.done["identity"].append(node.name)
                return True
            return False
        if node.op not in _IDENTITY_CONSTANT:
            return False
        neutral = _IDENTITY_CONSTANT[node.op]
        sides = [(0, 1), (1, 0)] if node.op in _COMMUTATIVE else [(0, 1)]
        for keep, drop in sides:
            value = constant_value(inputs[drop])
            if value is None or not _all_equal(value, neutral):
                continue
            if inputs[drop].node.control_inputs:
                # The constant waits for its control inputs and is dead with them (a
                # constant inside a cond branch): dropping it would make ``node`` live
                # where the graph as built has it dead, and stop it waiting.
                continue
            shape = node.outputs[0].shape
            if not shape.is_fully_defined() or inputs[keep].shape != shape:
                continue
            self._replace(node, inputs[keep])
            self.done["identity"].append(node.name)
            return True
        return False

    def _push_down(self, node: Node, inputs: list[Tensor]) -> bool:
        link = _link(node.op, inputs, self._is_constant)
        if link is None:
            return False
        inner_tensor, c2, x_sign2, sign2 = link
        inner = inner_tensor.node
        group = ADDITIVE if node.op in ADDITIVE else frozenset({node.op})
        if inner.op not in group or not self._absorbable(inner):
            return False
        inner_link = _link(inner.op, list(inner.inputs), self._is_constant)
        if inner_link is None:
            return False
        x, c1, x_sign1, sign1 = inner_link
        if self._is_constant(x):
            return False  # all constant: constant folding's job
        if node.op in _SAME_OP_CHAINS:
            self._emit(node, node.op, [x, self._constant(node.op, c1, c2, node.name)])
            self.done["push-down"].append(node.name)
            return True
        # outer = x_sign2 * inner + sign2 * c2, inner = x_sign1 * x + sign1 * c1: the
        # result is x's sign times x plus (x_sign2 * sign1) c1 + sign2 c2.
        sign1 *= x_sign2
        add = _add_op(node, inner)
        if sign1 > 0 and sign2 > 0:
            constant, negative = self._constant("AddV2", c1, c2, node.name), False
        elif sign1 > 0:
            constant, negative = self._constant("Sub", c1, c2, node.name), False
        elif sign2 > 0:
            constant, negative = self._constant("Sub", c2, c1, node.name), False
        else:  # -(c1 + c2): only ever with x positive (the outer link is ``v - c2``)
            constant, negative = self._constant("AddV2", c1, c2, node.name), True
        if x_sign1 * x_sign2 > 0:
            self._emit(node, "Sub" if negative else add, [x, constant])
        else:  # constant - x
            self._emit(node, "Sub", [constant, x])
        self.done["push-down"].append(node.name)
        return True

    def _add_n(self, node: Node, inputs: list[Tensor]) -> bool:
        if node.op not in ADDS:
            return False
        shape = node.outputs[0].shape
        if not shape.is_fully_defined() or any(t.shape != shape for t in inputs):
            return False
        leaves: list[Tensor] = []
        merged = False
        for tensor in inputs:
            inner = tensor.node
            if (
                inner.op in (*ADDS, "AddN")
                and self._absorbable(inner)
                and all(t.shape == shape for t in inner.inputs)
            ):
                leaves.extend(inner.inputs)
                merged = True
            else:
                leaves.append(tensor)
        if not merged or len(leaves) < 3:
            return False
        self._emit(node, "AddN", [leaves])
        self.done["AddN"].append(node.name)
        return True


def _add_op(node: Node, inner: Node) -> str:
    for candidate in (node.op, inner.op):
        if candidate in ADDS:
            return candidate
    return "AddV2"


def _link(
    op: str, inputs: list[Tensor], is_constant: Any
) -> tuple[Tensor, Tensor, int, int] | None:
    """``op(inputs)`` as ``(+|-) x (+|-|*) c`` with ``c`` constant: (x, c, x's sign, c's
    sign), or None."""
    if len(inputs) != 2:
        return None
    a, b = inputs
    if op in _COMMUTATIVE or op in _EXTREMA:
        if is_constant(b) and not is_constant(a):
            return a, b, 1, 1
        if is_constant(a) and not is_constant(b):
            return b, a, 1, 1
        return None
    if op == "Sub":
        if is_constant(b) and not is_constant(a):
            return a, b, 1, -1
        if is_constant(a) and not is_constant(b):
            return b, a, -1, 1
    return None


def _all_equal(value: np.ndarray[Any, Any], scalar: int) -> bool:
    return bool(value.size) and bool(np.all(value == scalar))
