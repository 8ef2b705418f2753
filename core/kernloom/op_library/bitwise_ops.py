"""Bitwise ops on integers (``tf.bitwise``): BitwiseAnd, BitwiseOr, BitwiseXor, Invert,
LeftShift and RightShift, as TensorFlow's CPU kernels compute them; and Bitcast
(``tf.bitcast``), which reads a tensor's bytes as another dtype.

TensorFlow documents a shift by a negative amount or by the bit width or more as
implementation-defined; its CPU kernels clamp the amount to ``[0, bits - 1]`` (``1 << 8``
in int8 is ``1 << 7``, which wraps to -128), and so does kernloom, on every device. The
shifted value wraps to the dtype; RightShift of a signed integer is arithmetic (it keeps
the sign).
"""

from __future__ import annotations

from kernloom.framework.kernel_checks import bitcast_dims
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import (
    InferenceContext,
    broadcast_binary_shape,
    unchanged_shape,
)
from kernloom.op_library.types import INTEGERS, NUMBERS, spec

__all__ = ["define"]

_SHIFT_RULE = (
    "The amount is clamped to [0, bits - 1] (TensorFlow's CPU kernels; its docs leave a "
    "negative or too large amount undefined) and the result wraps to the dtype."
)


def _bitcast_shape(ctx: InferenceContext) -> None:
    """TensorFlow's Bitcast shape function (``bitcast_dims``); an unknown rank stays so."""
    shape = ctx.input_shape(0)
    if shape.rank is None:
        ctx.set_output(0, shape)
        return
    ctx.set_output(0, bitcast_dims(ctx, shape.as_list(), ctx.attr("T"), ctx.attr("type")))


def define(lib: OpLibrary) -> None:
    integers = spec(INTEGERS)
    for name, doc, commutative in (
        ("BitwiseAnd", "x & y, elementwise, with broadcasting.", True),
        ("BitwiseOr", "x | y, elementwise, with broadcasting.", True),
        ("BitwiseXor", "x ^ y, elementwise, with broadcasting.", True),
        ("LeftShift", f"x << y, elementwise, with broadcasting. {_SHIFT_RULE}", False),
        (
            "RightShift",
            f"x >> y, elementwise, with broadcasting; arithmetic for signed x (the sign "
            f"stays). {_SHIFT_RULE}",
            False,
        ),
    ):
        builder = (
            lib.register_op(name)
            .input("x: T")
            .input("y: T")
            .output("z: T")
            .attr(f"T: {integers}")
            .shape_fn(broadcast_binary_shape)
            .doc(doc)
        )
        if commutative:
            builder.commutative()
    (
        lib.register_op("Invert")
        .input("x: T")
        .output("y: T")
        .attr(f"T: {integers}")
        .shape_fn(unchanged_shape)
        .doc("~x: every bit flipped (-x - 1 for signed integers).")
    )
    (
        lib.register_op("Bitcast")
        .input("input: T")
        .output("output: type")
        .attr(f"T: {spec(NUMBERS)}")
        .attr(f"type: {spec(NUMBERS)}")
        .shape_fn(_bitcast_shape)
        .doc(
            "The input's bytes read as `type` (little-endian, as the host stores them), "
            "no value converted.",
            "Types of one size keep the shape. A narrower `type` adds a last dimension of "
            "in_size / out_size (float32 -> uint8: [..., 4]); a wider one needs a last "
            "dimension of out_size / in_size and removes it (uint8 [..., 4] -> int32). "
            "TensorFlow's bfloat16 and quantized types have no kernloom dtype; bool is not "
            "in TensorFlow's list either.",
        )
    )
