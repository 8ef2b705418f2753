"""BitCast (opset 26): the input's bytes read as the ``to`` type, which ONNX requires to
be as wide as the input's, so the shape stays.

Kernloom's Bitcast (TensorFlow's) does the work. TensorFlow's Bitcast takes no bool, so a
bool <-> int8/uint8 bitcast is a Cast: a bool's byte is 0 or 1, which is what the Cast
gives; an integer byte other than 0 and 1 read as bool is true, as ``x != 0`` says
(numpy's view keeps the byte, which reads as true too). Float8, 4- and 2-bit and bfloat16
types have no kernloom dtype and fail at import.
"""

from __future__ import annotations

from collections.abc import Sequence

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import ONNX_TO_KERNLOOM, onnx_type_name
from kernloom.onnx._registry import converter

__all__: list[str] = []

Result = Sequence[Tensor | None]


@converter("BitCast", 26, attrs=("to",))
def _bitcast(node: OnnxNode, ctx: ConversionContext) -> Result:
    to = node.attr("to")
    if to is None:
        raise node.fail("the attribute 'to' (the target type) is required")
    target = ONNX_TO_KERNLOOM.get(int(to))
    if target is None:
        raise node.fail(f"the target type {onnx_type_name(int(to))} has no kernloom dtype")
    x = ctx.input(0)
    in_bits, out_bits = x.dtype.numpy_dtype.itemsize * 8, target.numpy_dtype.itemsize * 8
    if in_bits != out_bits:
        raise node.fail(
            f"BitCast from {x.dtype} ({in_bits} bits) to {target} ({out_bits} bits): ONNX "
            "requires types of one width"
        )
    if x.dtype == target:
        return [ops.identity(x)]
    if d.bool_ in (x.dtype, target):
        return [ops.cast(x, DstT=target)]
    return [ops.bitcast(x, type=target)]
