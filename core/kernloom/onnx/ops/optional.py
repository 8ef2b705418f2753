"""ONNX optionals (Optional, OptionalHasElement, OptionalGetElement), resolved at import.

An optional is "absent" or the tensor or sequence it holds
(``kernloom.onnx._values.OnnxOptional``), known at import, so OptionalHasElement is a
constant (known at import too, so an If on it takes its branch then) and
OptionalGetElement gives the held value itself. Getting the element of an empty optional
is an import error naming the node, where onnx's runtime fails when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx._values import OnnxCoded, OnnxOptional, OnnxSequence, Value

__all__: list[str] = []

Values = Sequence[Value | None]


@converter("Optional", 15, attrs=("type",))
def _optional(node: OnnxNode, ctx: ConversionContext) -> Values:
    if not ctx.has_input(0):
        if not isinstance(node.attr("type"), onnx.TypeProto):
            raise node.fail("an Optional without an input needs the attribute 'type'")
        return [OnnxOptional(None)]
    value = ctx.value(0)
    if isinstance(value, OnnxOptional):
        raise node.fail("input 0 is an optional already; Optional takes a tensor or a sequence")
    if isinstance(value, OnnxCoded):
        value = ctx.input(0)  # the error that names the ops a small type's values go to
    return [OnnxOptional(value)]


@converter("OptionalHasElement", 15)
def _has_element(node: OnnxNode, ctx: ConversionContext) -> Values:
    """From opset 18 the input may be a tensor or a sequence (then true) or missing
    (then false); opset 15 takes an optional only."""
    if not ctx.has_input(0):
        if node.opset < 18:
            raise node.fail("input 0 is required before opset 18")
        present = False
    else:
        value = ctx.value(0)
        if isinstance(value, OnnxOptional):
            present = value.element is not None
        elif node.opset < 18:
            raise node.fail("input 0 must be an optional before opset 18")
        else:
            present = True
    if node.outputs and node.outputs[0]:
        ctx.static[node.outputs[0]] = np.asarray(present)
    return [ctx.const(np.bool_(present))]


@converter("OptionalGetElement", 15)
def _get_element(node: OnnxNode, ctx: ConversionContext) -> Values:
    """From opset 18 a tensor or a sequence passes through as itself."""
    value = ctx.value(0)
    if not isinstance(value, OnnxOptional):
        if node.opset < 18:
            raise node.fail("input 0 must be an optional before opset 18")
        return [value]
    if value.element is None:
        raise node.fail(
            f"the optional {node.inputs[0]!r} is empty: there is no element to get (guard "
            "it with OptionalHasElement and an If)"
        )
    element = value.element
    if not isinstance(element, OnnxSequence):
        known = ctx.static.get(node.inputs[0])
        if known is not None and node.outputs and node.outputs[0]:
            ctx.static[node.outputs[0]] = known
    return [element]
