"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations, Cast, Clip, Where.

ONNX broadcasts as numpy from opset 7 on, which is TensorFlow's rule: the binary ops
map one to one. Opsets before 7 (the ``broadcast`` attribute) are not converted. The
variadic Sum, Max, Min and Mean broadcast from version 8; version 6 (opsets 6 and 7) wants
inputs of one shape, for which broadcasting changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import reduce

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.dtypes import DType
from kernloom.graph.builder import control_dependencies
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx._small_types import cast_value, is_small
from kernloom.onnx._values import OnnxCoded
from kernloom.onnx.ops._helpers import run_time_check, same_dtype

Result = Sequence[Tensor | None]
CodedResult = Sequence[Tensor | OnnxCoded | None]


def _binary(
    op_type: str,
    first: int,
    fn: Callable[[Tensor, Tensor], Tensor],
    fold: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> None:
    """``fold``: the op in numpy, for a comparison or logical op whose inputs are both
    known at import time; its result is then known too, so an If on it (the expanded
    AffineGrid's ``Size(size) == 4``) takes its branch at import, as TensorFlow's
    smart_cond does with a constant predicate. Exact: bools and integers or floats
    compared, nothing rounded."""

    @converter(op_type, first)
    def convert(node: OnnxNode, ctx: ConversionContext) -> Result:
        known = [ctx.static.get(name) for name in node.inputs[:2]]
        if fold is not None and known[0] is not None and known[1] is not None:
            value = np.asarray(fold(known[0], known[1]))
            if node.outputs and node.outputs[0]:
                ctx.static[node.outputs[0]] = value
            return [ctx.const(value, d.bool_)]
        return [fn(ctx.input(0), ctx.input(1))]


def _div(x: Tensor, y: Tensor) -> Tensor:
    # Integers divide truncating toward zero (C, as onnxruntime); floats divide exactly.
    return ops.div(x, y) if x.dtype.is_integer else ops.real_div(x, y)


_binary("Add", 7, ops.add_v2)
_binary("Sub", 7, ops.sub)
_binary("Mul", 7, ops.mul)
_binary("Div", 7, _div)
_binary("Equal", 7, ops.equal, np.equal)
_binary("Less", 7, ops.less, np.less)
_binary("Greater", 7, ops.greater, np.greater)
_binary("LessOrEqual", 12, ops.less_equal, np.less_equal)
_binary("GreaterOrEqual", 12, ops.greater_equal, np.greater_equal)
_binary("And", 7, ops.logical_and, np.logical_and)
_binary("Or", 7, ops.logical_or, np.logical_or)
_binary("Xor", 7, ops.not_equal, np.logical_xor)
_binary("BitwiseAnd", 18, ops.bitwise_and)
_binary("BitwiseOr", 18, ops.bitwise_or)
_binary("BitwiseXor", 18, ops.bitwise_xor)


@converter("BitwiseNot", 18)
def _bitwise_not(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [ops.invert(ctx.input(0))]


@converter("Pow", 7)
def _pow(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, exponent = ctx.input(0), ctx.input(1)
    if x.dtype.is_integer and exponent.dtype.is_floating:
        # The result takes the base's type, the power is taken in floating point (as
        # onnxruntime and onnx's reference): 4 ** 0.5 is 2, not 4 ** int(0.5) = 1.
        wide = ops.pow(ops.cast(x, DstT=d.float64), ops.cast(exponent, DstT=d.float64))
        return [ops.cast(wide, DstT=x.dtype)]
    return [ops.pow(x, same_dtype(ctx, x, exponent))]


_TRUNCATE_MOD_TYPES = (d.float32, d.float64, d.int32, d.int64)
"""The dtypes of TensorFlow's TruncateMod (no float16 CPU kernel)."""


@converter("Mod", 10, attrs=("fmod",))
def _mod(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, y = ctx.input(0), ctx.input(1)
    if int(node.attr("fmod", 0)) == 0:
        # The remainder takes the divisor's sign (Python's %), for floats too.
        return [ops.floor_mod(x, y)]
    # fmod: the remainder takes the dividend's sign: TruncateMod where it has the dtype (C's
    # fmod and %), else x - trunc(x / y) * y for integers.
    if x.dtype in _TRUNCATE_MOD_TYPES:
        return [ops.truncate_mod(x, y)]
    if x.dtype.is_integer:
        return [ops.sub(x, ops.mul(ops.div(x, y), y))]
    # Floats: FloorMod of the magnitudes (exact, as C's fmod: both are non-negative) with
    # the dividend's sign. x - trunc(x / y) * y is not: the rounded quotient of
    # fmod(1, 0.1) is 10, which gives 0 instead of 0.0999999.
    remainder = ops.floor_mod(ops.abs(x), ops.abs(y))
    return [ops.select_v2(ops.less(x, ctx.const_like(0, x)), ops.neg(remainder), remainder)]


def _variadic(op_type: str, first: int, fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    @converter(op_type, first)
    def convert(node: OnnxNode, ctx: ConversionContext) -> Result:
        values = ctx.inputs()
        if not values:
            raise node.fail("needs at least one input")
        return [reduce(fn, values[1:], ops.identity(values[0]))]


# From version 6 (opsets 6 and 7), whose inputs must have one shape: broadcasting them as
# version 8 does gives those the same result, so one converter serves both.
_variadic("Sum", 6, ops.add_v2)
_variadic("Max", 6, ops.maximum)
_variadic("Min", 6, ops.minimum)


@converter("Mean", 6)
def _mean(node: OnnxNode, ctx: ConversionContext) -> Result:
    values = ctx.inputs()
    total = reduce(ops.add_v2, values[1:], values[0])
    return [ops.real_div(total, ctx.const_like(len(values), total))]


def _unary(op_type: str, first: int, fn: Callable[[Tensor], Tensor]) -> None:
    @converter(op_type, first)
    def convert(node: OnnxNode, ctx: ConversionContext) -> Result:
        return [fn(ctx.input(0))]


_unary("Relu", 6, ops.relu)
_unary("Sigmoid", 6, ops.sigmoid)
_unary("Tanh", 6, ops.tanh)
_unary("Exp", 6, ops.exp)
_unary("Log", 6, ops.log)
_unary("Sqrt", 6, ops.sqrt)
_unary("Neg", 6, ops.neg)
_unary("Floor", 6, ops.floor)
_unary("Ceil", 6, ops.ceil)
_unary("Reciprocal", 6, ops.reciprocal)
_unary("Erf", 9, ops.erf)
_unary("Sin", 7, ops.sin)
_unary("Cos", 7, ops.cos)
_unary("Atan", 7, ops.atan)
_unary("Tan", 7, ops.tan)
_unary("Asin", 7, ops.asin)
_unary("Acos", 7, ops.acos)
_unary("Sinh", 9, ops.sinh)
_unary("Cosh", 9, ops.cosh)
_unary("Asinh", 9, ops.asinh)
_unary("Acosh", 9, ops.acosh)
_unary("Atanh", 9, ops.atanh)


@converter("Abs", 6)
def _abs(node: OnnxNode, ctx: ConversionContext) -> Result:
    # TensorFlow's Abs takes no unsigned integers, which are their own absolute value.
    x = ctx.input(0)
    return [ops.identity(x) if x.dtype.is_unsigned else ops.abs(x)]


@converter("Sign", 9)
def _sign(node: OnnxNode, ctx: ConversionContext) -> Result:
    # TensorFlow's Sign takes no unsigned integers: their sign is 1 above 0, else 0.
    x = ctx.input(0)
    if x.dtype.is_unsigned:
        return [ops.cast(ops.greater(x, ctx.const_like(0, x)), DstT=x.dtype)]
    return [ops.sign(x)]


@converter("Det", 11)
def _det(node: OnnxNode, ctx: ConversionContext) -> Result:
    """[..., M, M] -> [...], the same batched determinant as TensorFlow's
    MatrixDeterminant; float16, which ONNX allows and it has no kernel for, is computed in
    float32 and rounded once."""
    x = ctx.input(0)
    if x.dtype == d.float16:
        return [ops.cast(ops.matrix_determinant(ops.cast(x, DstT=d.float32)), DstT=d.float16)]
    return [ops.matrix_determinant(x)]


_unary("Round", 11, ops.round)
_unary("Not", 1, ops.logical_not)
_unary("Softsign", 1, ops.softsign)
_unary("Softplus", 1, ops.softplus)


@converter("IsNaN", 9)
def _is_nan(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [ops.is_nan(ctx.input(0))]


@converter("IsInf", 10, attrs=("detect_negative", "detect_positive"))
def _is_inf(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    negative, positive = int(node.attr("detect_negative", 1)), int(node.attr("detect_positive", 1))
    inf = ops.is_inf(x)
    if negative and positive:
        return [inf]
    zero = ctx.const_like(0, x)
    if positive:
        return [ops.logical_and(inf, ops.greater(x, zero))]
    if negative:
        return [ops.logical_and(inf, ops.less(x, zero))]
    return [ops.logical_and(inf, ops.logical_not(inf))]


@converter("LeakyRelu", 6, attrs=("alpha",))
def _leaky_relu(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [ops.leaky_relu(ctx.input(0), alpha=float(node.attr("alpha", 0.01)))]


@converter("Elu", 6, attrs=("alpha",))
def _elu(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    alpha = float(node.attr("alpha", 1.0))
    if alpha == 1.0:
        return [ops.elu(x)]
    negative = ops.mul(ctx.const_like(alpha, x), ops.expm1(x))
    return [ops.select_v2(ops.greater(x, ctx.const_like(0, x)), x, negative)]


@converter("Selu", 6, attrs=("alpha", "gamma"))
def _selu(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    negative = ops.mul(ctx.const_like(alpha, x), ops.expm1(x))
    chosen = ops.select_v2(ops.greater(x, ctx.const_like(0, x)), x, negative)
    return [ops.mul(ctx.const_like(gamma, x), chosen)]


@converter("Celu", 12, attrs=("alpha",))
def _celu(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    alpha = ctx.const_like(float(node.attr("alpha", 1.0)), x)
    zero = ctx.const_like(0, x)
    negative = ops.minimum(zero, ops.mul(alpha, ops.expm1(ops.real_div(x, alpha))))
    return [ops.add_v2(ops.maximum(zero, x), negative)]


@converter("ThresholdedRelu", 10, attrs=("alpha",))
def _thresholded_relu(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    alpha = ctx.const_like(float(node.attr("alpha", 1.0)), x)
    return [ops.select_v2(ops.greater(x, alpha), x, ops.zeros_like(x))]


@converter("HardSigmoid", 6, attrs=("alpha", "beta"))
def _hard_sigmoid(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    alpha = ctx.const_like(float(node.attr("alpha", 0.2)), x)
    beta = ctx.const_like(float(node.attr("beta", 0.5)), x)
    linear = ops.add_v2(ops.mul(alpha, x), beta)
    return [ops.minimum(ops.maximum(linear, ctx.const_like(0, x)), ctx.const_like(1, x))]


@converter("HardSwish", 14)
def _hard_swish(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    linear = ops.add_v2(ops.mul(ctx.const_like(1 / 6, x), x), ctx.const_like(0.5, x))
    gate = ops.minimum(ops.maximum(linear, ctx.const_like(0, x)), ctx.const_like(1, x))
    return [ops.mul(x, gate)]


@converter("Mish", 18)
def _mish(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    return [ops.mul(x, ops.tanh(ops.softplus(x)))]


@converter("PRelu", 7)
def _prelu(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, slope = ctx.input(0), ctx.input(1)
    negative = ops.mul(x, slope)
    return [ops.select_v2(ops.less(x, ctx.const_like(0, x)), negative, x)]


@converter("Clip", 6, 6, attrs=("min", "max"))
def _clip_6(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    low = float(node.attr("min", np.finfo(np.float32).min))
    high = float(node.attr("max", np.finfo(np.float32).max))
    return [ops.minimum(ops.maximum(x, ctx.const_like(low, x)), ctx.const_like(high, x))]


@converter("Clip", 11)
def _clip(node: OnnxNode, ctx: ConversionContext) -> Result:
    # min(max(x, low), high): where low > high every value becomes high, as ONNX says.
    x = ctx.input(0)
    low, high = ctx.optional(1), ctx.optional(2)
    out = ops.maximum(x, low) if low is not None else ops.identity(x)
    return [ops.minimum(out, high) if high is not None else out]


@converter("Where", 9)
def _where(node: OnnxNode, ctx: ConversionContext) -> Result:
    return [ops.select_v2(ctx.input(0), ctx.input(1), ctx.input(2))]


def _cast_to(node: OnnxNode, ctx: ConversionContext, target: DType | int) -> CodedResult:
    """Input 0 cast to ``target`` (a dtype, or a small ONNX type: ``_small_types``);
    ``saturate`` and ``round_mode`` concern the float8 targets only."""
    mode = str(node.attr("round_mode", "up"))
    if mode not in ("up", "down", "nearest"):
        raise node.fail(f"round_mode {mode!r} is not one of 'up', 'down', 'nearest'")
    saturate = bool(node.attr("saturate", 1))
    return [cast_value(ctx.tensor_or_coded(0), target, saturate=saturate, round_mode=mode)]


@converter("Cast", 6, attrs=("to", "saturate", "round_mode"))
def _cast(node: OnnxNode, ctx: ConversionContext) -> CodedResult:
    to = int(node.attr("to"))
    target = to if is_small(to) else kernloom_dtype(to, f"node {node.name!r} attribute 'to'")
    return _cast_to(node, ctx, target)


@converter("CastLike", 15, attrs=("saturate", "round_mode"))
def _cast_like(node: OnnxNode, ctx: ConversionContext) -> CodedResult:
    like = ctx.tensor_or_coded(1)
    return _cast_to(node, ctx, like.elem_type if isinstance(like, OnnxCoded) else like.dtype)


@converter("Dropout", 7, attrs=("ratio", "seed", "is_test"))
def _dropout(node: OnnxNode, ctx: ConversionContext) -> Result:
    """Dropout where its result is deterministic: the identity (and a mask all true) in
    inference, and in training mode with a ratio of 0. A training_mode or ratio known only
    at run time is checked there: a random dropout (training with a ratio above 0) fails
    naming the node, since kernloom has no random ops."""
    x = ctx.input(0)
    mask = ops.cast(ops.ones_like(x), DstT=d.bool_) if len(node.outputs) > 1 else None
    if not ctx.has_input(2):
        return [ops.identity(x), mask]
    training = ctx.static_input(2)
    ratio = ctx.static_input(1) if ctx.has_input(1) else np.float32(0.5)
    if training is not None and not bool(np.asarray(training).item()):
        return [ops.identity(x), mask]
    if training is not None and ratio is not None:
        if float(np.asarray(ratio).item()) != 0.0:
            raise node.fail(
                "training_mode is true with a ratio above 0: a random dropout is not "
                "supported (kernloom has no random ops); give training_mode false or ratio 0"
            )
        return [ops.identity(x), mask]
    # Decided at run time: pass x through once not (training and ratio != 0) holds.
    train = ops.reshape(ctx.input(2), ctx.int32s([]))
    rate = ctx.input(1) if ctx.has_input(1) else ctx.const(np.float32(0.5))
    random = ops.logical_and(
        train, ops.not_equal(ops.reshape(rate, ctx.int32s([])), ctx.const_like(0, rate))
    )
    message = (
        f"ONNX node {node.describe()}: training_mode is true with a ratio above 0 at run "
        "time: a random dropout is not supported (kernloom has no random ops); feed "
        "training_mode false or ratio 0"
    )
    check = run_time_check(ops.logical_not(random), [train], message, "random")
    with control_dependencies([check]):
        y = ops.identity(x)
        if mask is not None:
            mask = ops.identity(mask)
    return [y, mask]


def _half(ctx: ConversionContext, x: Tensor) -> Tensor:
    return ctx.const_like(0.5, x)


@converter("Gelu", 20, attrs=("approximate",))
def _gelu(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    half = _half(ctx, x)
    if str(node.attr("approximate", "none")) == "tanh":
        inner = ops.mul(
            ctx.const_like(np.sqrt(2 / np.pi), x),
            ops.add_v2(x, ops.mul(ctx.const_like(0.044715, x), ops.pow(x, ctx.const_like(3, x)))),
        )
        return [ops.mul(ops.mul(half, x), ops.add_v2(ctx.const_like(1, x), ops.tanh(inner)))]
    erf = ops.erf(ops.mul(x, ctx.const_like(1 / np.sqrt(2), x)))
    return [ops.mul(ops.mul(half, x), ops.add_v2(ctx.const_like(1, x), erf))]


@converter("Shrink", 9, attrs=("bias", "lambd"))
def _shrink(node: OnnxNode, ctx: ConversionContext) -> Result:
    """x + bias where x < -lambd, else x - bias where x > lambd, else 0 (the first test
    wins where lambd < 0, as in onnxruntime and onnx's reference). Integers compare with
    the integer bounds those tests amount to and are shifted in their own type (wrapping,
    as onnxruntime's casts do), or in float64 and truncated back where bias is not whole;
    unsigned ones never go below a bound under 0."""
    x = ctx.input(0)
    bias = float(node.attr("bias", 0.0))
    limit = float(node.attr("lambd", 0.5))
    low, high = (math.ceil(-limit), math.floor(limit)) if x.dtype.is_integer else (-limit, limit)
    zero = ops.zeros_like(x)
    above = _beyond(ctx, x, high, ops.greater)
    y = zero if above is False else _shifted(ctx, x, -bias)
    if isinstance(above, Tensor):
        y = ops.select_v2(above, y, zero)
    below = _beyond(ctx, x, low, ops.less)
    if below is False:
        return [y]
    return [ops.select_v2(below, _shifted(ctx, x, bias), y)]


def _beyond(
    ctx: ConversionContext, x: Tensor, bound: float, compare: Callable[[Tensor, Tensor], Tensor]
) -> Tensor | bool:
    """compare(x, bound); for unsigned x, where bound < 0 (which their dtype cannot hold),
    True for ``greater`` and False for ``less`` (every element)."""
    if x.dtype.is_unsigned and bound < 0:
        return compare is ops.greater
    return compare(x, ctx.const_like(bound, x))


def _shifted(ctx: ConversionContext, x: Tensor, amount: float) -> Tensor:
    """x + amount in x's dtype (integers: truncated toward 0 where amount is not whole)."""
    if amount == 0:
        return x
    if not x.dtype.is_integer:
        return ops.add_v2(x, ctx.const_like(amount, x))
    if amount.is_integer():
        step = ctx.const_like(abs(int(amount)), x)
        return ops.add_v2(x, step) if amount > 0 else ops.sub(x, step)
    wide = ops.add_v2(ops.cast(x, DstT=d.float64), ctx.const(np.float64(amount)))
    return ops.cast(wide, DstT=x.dtype)


@converter("Swish", 24, attrs=("alpha",))
def _swish(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    alpha = float(node.attr("alpha", 1.0))
    return [ops.mul(x, ops.sigmoid(ops.mul(x, ctx.const_like(alpha, x))))]


@converter("BitShift", 11, attrs=("direction",))
def _bit_shift(node: OnnxNode, ctx: ConversionContext) -> Result:
    """LeftShift and RightShift, with ONNX's rule for an amount that is negative or the bit
    width or more (BitShift-28's words; earlier versions left it open): a left shift gives
    0, a right shift what the sign fills in (-1 for a negative signed x, else 0).
    kernloom's shifts clamp the amount to [0, bits - 1] (TensorFlow's rule), so a right
    shift by a negative amount is made one by bits - 1, and a left shift out of range is
    replaced by 0."""
    x, y = ctx.input(0), ctx.input(1)
    if not x.dtype.is_integer:
        raise node.fail(f"BitShift is defined for integers, got {x.dtype}")
    bits = x.dtype.itemsize * 8
    zero = ctx.const_like(0, y)
    if str(node.attr("direction")) == "LEFT":
        inside = ops.logical_and(ops.greater_equal(y, zero), ops.less(y, ctx.const_like(bits, y)))
        return [ops.select_v2(inside, ops.left_shift(x, y), ctx.const_like(0, x))]
    amount = ops.select_v2(ops.less(y, zero), ctx.const_like(bits - 1, y), y)
    return [ops.right_shift(x, amount)]
