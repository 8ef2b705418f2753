"""Math ops: elementwise arithmetic with numpy broadcasting, reductions, matmul, casts.

dtypes (the groups of ``kernloom.op_library.types``):

- Add, Sub, Mul, Square, AddN, Sum, Mean: every number type (ints, unsigned, floats, complex).
- Neg: signed ints, floats and complex (unsigned has no negation).
- RealDiv: floats and complex (integer division is a different op).
- Maximum, Minimum, Max, Min, Less, Greater: ordered types (ints and floats); ArgMax, ArgMin
  also bool.
- Pow: every number type; a negative integer exponent of an integer base is an error.
- Exp, Log, Sqrt, Tanh: floats and complex.
- Equal: every type, bool included. Select (TensorFlow's, not SelectV2): any T, condition bool.
- MatMul: float16/32/64, int32, int64, complex.
- Cast: any type to any type, with TensorFlow's CPU conversions (NaN, inf and out-of-range
  floats to integers, Truncate; ``kernloom.framework.cast_rules``).

Like TensorFlow's, the CPU device's kernels flush subnormals to zero (FTZ/DAZ, set once
per step on the thread that runs them; ``SessionConfig(flush_denormals=False)`` keeps them).
Complex products and quotients with infinite or NaN parts follow Eigen's packet formulas, as
TensorFlow's CPU kernels do. The cases that still differ are listed in
``docs/tensorflow_fidelity.md`` and in the op's doc.
- Mean of an integer tensor sums in 64 bits and truncates toward zero, as TensorFlow's does.

The ops added for real models (issue 18) and those current TensorFlow emits (issue 21:
AddV2, Div, DivNoNan) take TensorFlow's op-def type lists (without bfloat16, which
kernloom has no dtype for); where TensorFlow's CPU kernels cover fewer types than its op
def (Reciprocal on integers, FloorDiv on complex...), kernloom's kernels cover
the same fewer types, so such a node fails at kernel lookup exactly as it does in
TensorFlow. Each op's doc names its edge cases (integer division by zero, NaN, -0.0).
"""

from __future__ import annotations

import functools

import numpy as np

from kernloom import dtypes as d
from kernloom.errors import InvalidArgumentError
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import (
    InferenceContext,
    broadcast_binary_shape,
    normalize_axis,
    reduction_shape,
    unchanged_shape,
)
from kernloom.op_library.types import (
    ALL,
    COMPLEX,
    FLOATS,
    INDEX,
    INEXACT,
    NUMBERS,
    REALS,
    SIGNED,
    SIGNED_INTEGERS,
    spec,
)
from kernloom.shapes import TensorShape

__all__ = ["define"]

MATMUL_TYPES = "{float16, float32, float64, int32, int64, complex64, complex128}"


def _add_n_shape(ctx: InferenceContext) -> None:
    merged = TensorShape(None)
    for i in range(ctx.num_inputs):
        merged = ctx.merge(merged, ctx.input_shape(i), f"input {i}")
    ctx.set_output(0, merged)


def _matmul_shape(ctx: InferenceContext) -> None:
    a = ctx.input_shape(0).with_rank(2) if ctx.input_shape(0).rank in (2, None) else None
    b = ctx.input_shape(1).with_rank(2) if ctx.input_shape(1).rank in (2, None) else None
    if a is None or b is None:
        raise ctx.fail("MatMul takes matrices (rank 2)")
    if ctx.attr("transpose_a"):
        a = TensorShape([a[1], a[0]])
    if ctx.attr("transpose_b"):
        b = TensorShape([b[1], b[0]])
    inner_a, inner_b = a[1], b[0]
    if inner_a is not None and inner_b is not None and inner_a != inner_b:
        raise ctx.fail(
            f"inner dimensions differ: {inner_a} vs {inner_b} "
            f"(after transpose_a={ctx.attr('transpose_a')}, transpose_b={ctx.attr('transpose_b')})"
        )
    ctx.set_output(0, [a[0], b[1]])


def _bias_add_shape(ctx: InferenceContext) -> None:
    value, bias = ctx.input_shape(0), ctx.input_shape(1)
    if bias.rank not in (1, None):
        raise ctx.fail(f"bias must be a vector, got shape {bias}")
    if value.rank is None:
        ctx.set_output(0, None)
        return
    if value.rank < 2:
        raise ctx.fail(f"value must have rank >= 2, got shape {value}")
    if ctx.attr("data_format") == "NCHW" and value.rank < 3:
        raise ctx.fail(f"NCHW needs value of rank >= 3, got shape {value}")
    channel = value.rank - 1 if ctx.attr("data_format") == "NHWC" else 1
    merged = ctx.merge(
        TensorShape([value[channel]]),
        bias if bias.rank else TensorShape([None]),
        f"bias length vs value dimension {channel}",
    )
    dims = list(value.dims or ())
    dims[channel] = merged[0]
    ctx.set_output(0, dims)


def _select_shape(ctx: InferenceContext) -> None:
    """TensorFlow's Select: t and e have one shape; the condition is a scalar, has that
    shape, or is a vector as long as its first dimension (picking rows)."""
    data = ctx.merge(ctx.input_shape(1), ctx.input_shape(2), "'then' and 'else'")
    condition = ctx.input_shape(0)
    if condition.rank is None or data.rank is None or condition.rank == 0:
        ctx.set_output(0, data)
        return
    if condition.rank != 1 or data.rank <= 1:
        ctx.set_output(0, ctx.merge(data, condition, "condition and 'then'"))
        return
    ctx.merge(condition, TensorShape([data[0]]), "condition and the first dimension of 'then'")
    ctx.set_output(0, data)


def _reduction_shape(ctx: InferenceContext) -> None:
    """``reduction_shape`` after TensorFlow's checks of the axes: a scalar or a vector,
    each in [-rank, rank) (a scalar has no axis 0), none twice."""
    if ctx.input_shape(1).rank not in (None, 0, 1):
        raise ctx.fail(
            f"reduction_indices must be a scalar or a vector, got shape {ctx.input_shape(1)}"
        )
    rank, value = ctx.input_shape(0).rank, ctx.input_value(1)
    if rank is not None and value is not None:
        seen: set[int] = set()
        for axis in (int(a) for a in np.asarray(value).reshape(-1)):
            if not -rank <= axis < rank:
                raise ctx.fail(f"axis {axis} is out of range for rank {rank} (a reduction axis)")
            if axis % rank in seen:
                raise ctx.fail(f"reduction_indices contain dimension {axis % rank} twice")
            seen.add(axis % rank)
    reduction_shape(ctx)


def _argmax_shape(ctx: InferenceContext) -> None:
    shape = ctx.input_shape(0)
    axis = ctx.input_value(1)
    if shape.rank is None:
        ctx.set_output(0, None)
        return
    if shape.rank == 0:
        raise ctx.fail(f"{ctx.op_def.name} needs a tensor of rank >= 1")
    if axis is None:
        ctx.set_output(0, TensorShape.unknown(shape.rank - 1))
        return
    if np.asarray(axis).ndim != 0:
        raise ctx.fail(f"dimension must be a scalar, got shape {list(np.asarray(axis).shape)}")
    a = normalize_axis(int(axis), shape.rank, ctx)
    if shape[a] == 0:
        raise ctx.fail(f"cannot take {ctx.op_def.name} over dimension {a}, which has size 0")
    ctx.set_output(0, [d for i, d in enumerate(shape.dims or ()) if i != a])


def _not_equal_shape(ctx: InferenceContext) -> None:
    """Broadcasting; with ``incompatible_shape_error=false`` shapes that cannot broadcast
    give a scalar (TensorFlow's answer is then a single ``True``)."""
    try:
        broadcast_binary_shape(ctx)
    except InvalidArgumentError:
        if ctx.attr("incompatible_shape_error"):
            raise
        ctx.set_output(0, [])


def _clip_shape(ctx: InferenceContext) -> None:
    t = ctx.input_shape(0)
    for i, name in ((1, "clip_value_min"), (2, "clip_value_max")):
        bound = ctx.input_shape(i)
        if bound.rank in (None, 0) or bound.is_compatible_with(t):
            continue
        raise ctx.fail(
            f"{name} must be a scalar or have the shape of t ({t}), got {bound} "
            "(ClipByValue does not broadcast; use Maximum and Minimum for that)"
        )
    ctx.set_output(0, t)


def _cumsum_shape(ctx: InferenceContext) -> None:
    shape = ctx.input_shape(0)
    axis_shape = ctx.input_shape(1)
    if axis_shape.rank not in (None, 0):
        raise ctx.fail(f"axis must be a scalar, got shape {axis_shape}")
    if shape.rank == 0:
        raise ctx.fail(f"{ctx.op_def.name} needs a tensor of rank >= 1")
    axis = ctx.input_value(1)
    if axis is not None and shape.rank is not None:
        normalize_axis(int(axis), shape.rank, ctx)
    ctx.set_output(0, shape)


def _unary(lib: OpLibrary, name: str, types: str, doc: str, *, out: str = "T") -> None:
    """An elementwise op of one input ``x``, output ``y`` of the same shape."""
    (
        lib.register_op(name)
        .input("x: T")
        .output(f"y: {out}")
        .attr(f"T: {types}")
        .shape_fn(unchanged_shape)
        .doc(doc)
    )


def _binary(
    lib: OpLibrary,
    name: str,
    types: str,
    doc: str,
    *,
    out: str = "T",
    commutative: bool = False,
) -> None:
    """An elementwise op of ``x`` and ``y`` with numpy broadcasting, output ``z``."""
    builder = (
        lib.register_op(name)
        .input("x: T")
        .input("y: T")
        .output(f"z: {out}")
        .attr(f"T: {types}")
        .shape_fn(broadcast_binary_shape)
        .doc(doc)
    )
    if commutative:
        builder.commutative()


def _equality(lib: OpLibrary, name: str, doc: str) -> None:
    """Equal and NotEqual: every dtype, and TensorFlow's ``incompatible_shape_error``."""
    (
        lib.register_op(name)
        .input("x: T")
        .input("y: T")
        .output("z: bool")
        .attr(f"T: {spec(ALL)}")
        .attr("incompatible_shape_error: bool = true")
        .shape_fn(_not_equal_shape)
        .commutative()
        .doc(doc)
    )


def _reduction(lib: OpLibrary, name: str, types: str, doc: str) -> None:
    """A reduction over the axes in ``reduction_indices`` (host memory), with ``keep_dims``."""
    (
        lib.register_op(name)
        .input("input: T")
        .input("reduction_indices: Tidx")
        .output("output: T")
        .attr("keep_dims: bool = false")
        .attr(f"T: {types}")
        .attr(f"Tidx: {spec(INDEX)} = int32")
        .shape_fn(_reduction_shape)
        .doc(doc)
    )


def define(lib: OpLibrary) -> None:
    unary = functools.partial(_unary, lib)
    binary = functools.partial(_binary, lib)
    compare = functools.partial(_binary, lib, out="bool")
    reduction = functools.partial(_reduction, lib)

    numbers, reals, inexact = spec(NUMBERS), spec(REALS), spec(INEXACT)
    add_types = spec((*FLOATS, *SIGNED_INTEGERS, d.uint8, *COMPLEX))
    binary(
        "Add",
        add_types,
        "x + y, broadcasting (TF's list: no uint16/32/64; AddV2 has them).",
        commutative=True,
    )
    binary("Sub", numbers, "x - y, broadcasting.")
    binary(
        "Mul",
        numbers,
        "x * y, broadcasting. Complex: (ac - bd) + (ad + bc)i with no recovery of infinities "
        "(Eigen's, so (big + inf j)^2 is nan + inf j; numpy's complex128 gives -inf + inf j).",
        commutative=True,
    )
    binary(
        "RealDiv",
        inexact,
        "x / y, broadcasting (floating and complex types). Complex: Eigen's quotient, the "
        "divisor scaled by the larger magnitude of its parts (1 / (inf + 0j) is nan + nan j).",
    )
    binary("Maximum", reals, "The larger of x and y, elementwise, broadcasting.", commutative=True)
    binary("Minimum", reals, "The smaller of x and y, elementwise, broadcasting.", commutative=True)
    binary(
        "Pow",
        spec((*FLOATS, *SIGNED_INTEGERS, *COMPLEX)),
        "x ** y, broadcasting (no unsigned, as TF). A subnormal float reads as 0 (CPU: "
        "flushed); TensorFlow's vectorised pow reads it exactly (0^tiny is 0 here, 1 there).",
    )
    unary("Neg", spec(SIGNED), "-x.")
    unary("Exp", inexact, "e ** x.")
    unary(
        "Log",
        inexact,
        "The natural logarithm of x. A float32 subnormal reads as 0 on the CPU (-inf), where "
        "TensorFlow's vectorised float32 log reads it exactly (log(1e-40) = -92.1); complex "
        "with a part near the largest float is exact here (NaN real part in TensorFlow).",
    )
    unary("Sqrt", inexact, "The square root of x.")
    unary("Square", numbers, "x * x.")
    unary("Tanh", inexact, "The hyperbolic tangent of x.")
    _equality(
        lib,
        "Equal",
        "x == y, elementwise, broadcasting (NaN == NaN is false). With "
        "incompatible_shape_error=false, shapes that cannot broadcast give a scalar false.",
    )
    compare("Less", reals, "x < y, elementwise, broadcasting.")
    compare("Greater", reals, "x > y, elementwise, broadcasting.")
    (
        lib.register_op("AddN")
        .input("inputs: N * T")
        .output("sum: T")
        .attr("N: int >= 1")
        .attr(f"T: {numbers}")
        .shape_fn(_add_n_shape)
        .commutative()
        .doc("The sum of N tensors of one shape.")
    )
    (
        lib.register_op("MatMul")
        .input("a: T")
        .input("b: T")
        .output("product: T")
        .attr("transpose_a: bool = false")
        .attr("transpose_b: bool = false")
        .attr(f"T: {MATMUL_TYPES}")
        .attr("grad_a: bool = false")
        .attr("grad_b: bool = false")
        .shape_fn(_matmul_shape)
        .doc(
            "The matrix product of a and b, either transposed first.",
            "grad_a and grad_b (TensorFlow marks the products its gradients make) change "
            "nothing here; they are accepted so that TensorFlow's NodeDefs load.",
        )
    )
    (
        lib.register_op("BiasAdd")
        .input("value: T")
        .input("bias: T")
        .output("output: T")
        .attr(f"T: {numbers}")
        .attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'")
        .shape_fn(_bias_add_shape)
        .doc(
            "value + bias along the channel dimension (last for NHWC, 1 for NCHW).",
            "NCHW needs rank >= 3 when the graph is built; a matrix that arrives at run time "
            "with NCHW gets its bias along the last dimension (TensorFlow's kernel).",
        )
    )
    reduction("Sum", numbers, "The sum over the given axes.")
    reduction(
        "Mean",
        numbers,
        "The mean over the given axes. For integers, as TensorFlow: summed in 64 bits (int8 "
        "to int32, uint8 to uint32; int64 and uint64 wrap in their own width) and divided "
        "truncating toward zero; the mean over an empty dimension is 0.",
    )
    reduction("Max", reals, "The maximum over the given axes.")
    reduction("Min", reals, "The minimum over the given axes.")
    (
        lib.register_op("Cast")
        .input("x: SrcT")
        .output("y: DstT")
        .attr(f"SrcT: {spec(ALL)}")
        .attr(f"DstT: {spec(ALL)}")
        .attr("Truncate: bool = false")
        .shape_fn(unchanged_shape)
        .doc(
            "x converted to DstT, as TensorFlow's CPU kernel converts.",
            "Floats to int32/int64: NaN, +-inf and out-of-range values give the most "
            "negative integer; to int8/int16/uint8/uint16 the int32 value's low bits "
            "(300.7 -> int8 44, NaN -> 0; TensorFlow's answer for out-of-range values and "
            "NaN depends on the element's position there); to uint32/uint64 in-range "
            "values exactly, the "
            "rest through int32/int64 (TensorFlow's uint32 answer for those depends on the "
            "element's position; kernloom takes its vectorised rule). Truncate=True "
            "truncates float to narrower float (and complex) toward zero instead of "
            "rounding. Complex to real keeps the real part; to bool, x != 0 (NaN is true).",
        )
    )
    (
        lib.register_op("Select")
        .input("condition: bool")
        .input("t: T")
        .input("e: T")
        .output("output: T")
        .attr(f"T: {spec(ALL)}")
        .shape_fn(_select_shape)
        .doc(
            "TensorFlow's Select: t where condition else e. t and e have one shape; the "
            "condition is a scalar (picks t or e whole), has that shape (elementwise) or is a "
            "vector as long as t's first dimension (picks rows of t or e). It does not "
            "broadcast otherwise: that is SelectV2."
        )
    )
    (
        lib.register_op("ArgMax")
        .input("input: T")
        .input("dimension: Tidx")
        .output("output: output_type")
        .attr(f"T: {spec((*REALS, d.bool_))}")
        .attr(f"Tidx: {spec((d.int16, *INDEX))} = int32")
        .attr(f"output_type: {spec((d.int16, d.uint16, *INDEX))} = int64")
        .shape_fn(_argmax_shape)
        .doc(
            "The index of the largest value along a dimension: the first, on ties. NaN is "
            "never the largest (TF's Eigen reduction skips it); a slice whose values are all "
            "NaN or -inf gives 0. No complex (unordered)."
        )
    )
    _define_model_ops(lib)


def _define_trigonometric(lib: OpLibrary) -> None:
    """Tan, the inverse and hyperbolic functions, Atan2 and Erfc, with TensorFlow's op-def
    type lists (floating and complex, except Atan2 and Erfc: floating only). TensorFlow's
    CPU registers a kernel for every type each list names, and so do kernloom's kernels;
    an integer tensor fails when the node is built, as in TensorFlow."""
    unary = functools.partial(_unary, lib)
    inexact = spec(INEXACT)
    unary("Tan", inexact, "The tangent of x; +-inf and NaN give NaN, -0.0 stays -0.0.")
    unary(
        "Asin",
        inexact,
        "The arcsine of x, in [-pi/2, pi/2]; NaN where |x| > 1 (and for +-inf), -0.0 "
        "stays -0.0. Complex: the principal branch (C99 casin).",
    )
    unary(
        "Acos",
        inexact,
        "The arccosine of x, in [0, pi]; NaN where |x| > 1 (and for +-inf). Complex: the "
        "principal branch (C99 cacos).",
    )
    unary(
        "Sinh",
        inexact,
        "The hyperbolic sine of x; overflows to +-inf (float32 past |x| ~ 89.4), -0.0 stays -0.0.",
    )
    unary(
        "Cosh",
        inexact,
        "The hyperbolic cosine of x; overflows to +inf (float32 past |x| ~ 89.4), "
        "cosh(+-inf) = +inf.",
    )
    unary(
        "Asinh",
        inexact,
        "The inverse hyperbolic sine of x; asinh(+-inf) = +-inf, -0.0 stays -0.0.",
    )
    unary(
        "Acosh",
        inexact,
        "The inverse hyperbolic cosine of x, >= 0; NaN for x < 1 (and for -inf), "
        "acosh(1) = 0, acosh(inf) = inf.",
    )
    unary(
        "Atanh",
        inexact,
        "The inverse hyperbolic tangent of x; atanh(+-1) = +-inf, NaN where |x| > 1, -0.0 "
        "stays -0.0.",
    )
    unary(
        "Erfc",
        spec(FLOATS),
        "The complementary error function 1 - erf(x), computed without the cancellation "
        "(erfc(10) = 2.1e-45 in float64, 0 in float32); erfc(-inf) = 2, erfc(inf) = 0.",
    )
    (
        lib.register_op("Atan2")
        .input("y: T")
        .input("x: T")
        .output("z: T")
        .attr(f"T: {spec(FLOATS)}")
        .shape_fn(broadcast_binary_shape)
        .doc(
            "The angle of the point (x, y) from the positive x axis, in [-pi, pi]: "
            "arctan(y / x) with the quadrant from both signs; broadcasting.",
            "IEEE atan2 on every edge: signed zeros pick the half-plane (atan2(+-0, -0) "
            "= +-pi, atan2(+-0, +0) = +-0), atan2(+-inf, +-inf) = +-pi/4 or +-3pi/4, and "
            "NaN in either input gives NaN.",
        )
    )


def _define_model_ops(lib: OpLibrary) -> None:
    """The math ops real models need (issue 18) and the names current TF emits (issue 21)."""
    unary = functools.partial(_unary, lib)
    binary = functools.partial(_binary, lib)
    reduction = functools.partial(_reduction, lib)

    floats, inexact, numbers, reals = spec(FLOATS), spec(INEXACT), spec(NUMBERS), spec(REALS)
    signed = spec(SIGNED)
    unary(
        "Erf",
        floats,
        "The Gauss error function of x; erf(+-inf) = +-1 (TensorFlow's float64 gives NaN).",
    )
    unary(
        "Rsqrt",
        inexact,
        "1 / sqrt(x): inf at 0, NaN below 0. Complex: Eigen's complex_rsqrt (0 where a part "
        "is infinite, (inf, nan) at 0, -0j read as +0j on the negative real axis).",
    )
    unary(
        "Reciprocal",
        signed,
        "1 / x. TF's op def takes signed integers but its CPU kernels only floating and "
        "complex types; so do kernloom's kernels. Complex: Eigen's packet quotient for "
        "every element (TensorFlow's last, scalar-path elements use C99 Annex G division).",
    )
    unary("Abs", spec((*FLOATS, *SIGNED_INTEGERS)), "|x|; the most negative integer stays itself.")
    unary(
        "Sign",
        signed,
        "-1, 0 or 1 as x is negative, zero or positive; x / |x| for complex (0 at 0). NaN "
        "gives NaN (numpy's and current Eigen's answer; TensorFlow 1.x documented 0). "
        "Complex with infinite or NaN parts: numpy's x / |x| (TensorFlow's Eigen gives other "
        "NaN parts).",
    )
    unary("Floor", floats, "The largest integer not greater than x.")
    unary(
        "Rint",
        spec((d.float32, d.float64)),  # (TF's CPU has no float16 kernel)
        "The nearest integer to x, halves to the even one (2.5 -> 2).",
    )
    unary("Ceil", floats, "The smallest integer not less than x.")
    unary(
        "Round",
        signed,
        "x rounded to the nearest integer, halves to even (banker's rounding: 0.5 -> 0, "
        "1.5 -> 2, -2.5 -> -2); int32 and int64 are unchanged (TensorFlow 2.21's CPU "
        "kernel returns 0 for them, a bug kernloom does not copy); no int8/int16 or complex "
        "kernels (as TF's CPU).",
    )
    unary("Sin", inexact, "The sine of x.")
    unary("Cos", inexact, "The cosine of x.")
    unary(
        "Atan",
        inexact,
        "The arctangent of x, floating and complex (principal value), as TensorFlow 2.21's "
        "CPU kernels.",
    )
    _define_trigonometric(lib)
    unary(
        "Expm1",
        inexact,
        "exp(x) - 1, accurate near 0. Complex: Eigen's expm1(a) - 2 e^a sin(b/2)^2 + "
        "e^a sin(b) i (expm1(inf + 0j) is nan + nan j).",
    )
    unary(
        "Log1p",
        inexact,
        "log(1 + x), accurate near 0. Complex: Eigen's x * log(u) / (u - 1), u = 1 + x, as "
        "TensorFlow (a huge part gives a tiny imaginary part, not atan2's).",
    )
    unary("IsNan", floats, "Whether x is NaN.", out="bool")
    unary("IsInf", floats, "Whether x is +inf or -inf.", out="bool")
    unary("IsFinite", floats, "Whether x is neither NaN nor infinite.", out="bool")
    binary("AddV2", numbers, "x + y, broadcasting (what TF's `+` emits).", commutative=True)
    binary(
        "Div",
        numbers,
        "x / y, broadcasting. Integers divide as C does (truncating toward 0; TF's safe_div) "
        "and an integer division by zero is an error, as on TensorFlow's CPU.",
    )
    binary("DivNoNan", inexact, "x / y, but 0 wherever y is 0 (even for x NaN or inf).")
    binary(
        "FloorDiv",
        numbers,
        "floor(x / y), broadcasting. Integers round toward -inf and an integer division by "
        "zero is an error (TensorFlow's CPU kernel); floats compute floor(x / y), so 1 // 0 "
        "is inf. The most negative integer // -1 wraps to itself (TF's CPU traps). No complex "
        "kernels (as TF's CPU).",
    )
    binary(
        "FloorMod",
        reals,
        "x - floor(x / y) * y: the remainder has the sign of y. Integer modulo by zero is an "
        "error (TensorFlow's CPU kernel); float modulo by zero is NaN. A zero remainder of "
        "floats keeps fmod's sign (TF: -4.0 mod 2.0 is -0.0, where numpy gives +0.0).",
    )
    trunc_mod_types = spec((d.float32, d.float64, *INDEX))  # (TF's CPU: no float16)
    binary(
        "TruncateDiv",
        reals,
        "x / y truncated toward 0, broadcasting (C's integer division; trunc(x / y) for "
        "floats, so 1 / 0 is inf). An integer division by zero is an error.",
    )
    for name in ("TruncateMod", "Mod"):
        binary(
            name,
            trunc_mod_types,
            "The remainder of a truncating division, broadcasting: it has the sign of x (C's "
            "% and fmod; TruncateDiv(x, y) * y + TruncateMod(x, y) == x). Integer modulo by "
            "zero is an error, float modulo by zero NaN.",
        )
    binary(
        "Xdivy",
        inexact,
        "0 where x is 0 (keeping x's sign, even for y 0 or NaN), else x / y; broadcasting.",
    )
    binary(
        "Xlogy",
        inexact,
        "0 where x is 0 (keeping x's sign, even for y 0 or NaN), else x * log(y).",
    )
    binary(
        "Xlog1py",
        inexact,
        "0 where x is 0 (keeping x's sign, even for y -1 or NaN), else x * log1p(y).",
    )
    binary(
        "SquaredDifference",
        spec((*FLOATS, *INDEX, *COMPLEX)),
        "(x - y) * conj(x - y), broadcasting (|x - y|^2 for complex, as TF).",
        commutative=True,
    )
    comparison = "x {} y, elementwise, broadcasting."
    binary("GreaterEqual", reals, comparison.format(">="), out="bool")
    binary("LessEqual", reals, comparison.format("<="), out="bool")
    _equality(
        lib,
        "NotEqual",
        "x != y, elementwise, broadcasting (NaN != NaN is true). With "
        "incompatible_shape_error=false, shapes that cannot broadcast give a scalar true.",
    )
    for name, sign in (("LogicalAnd", "and"), ("LogicalOr", "or")):
        (
            lib.register_op(name)
            .input("x: bool")
            .input("y: bool")
            .output("z: bool")
            .shape_fn(broadcast_binary_shape)
            .commutative()
            .doc(f"x {sign} y, elementwise, broadcasting.")
        )
    (
        lib.register_op("LogicalNot")
        .input("x: bool")
        .output("y: bool")
        .shape_fn(unchanged_shape)
        .doc("not x, elementwise.")
    )
    (
        lib.register_op("ClipByValue")
        .input("t: T")
        .input("clip_value_min: T")
        .input("clip_value_max: T")
        .output("output: T")
        .attr(f"T: {numbers}")
        .shape_fn(_clip_shape)
        .doc(
            "min(max(t, clip_value_min), clip_value_max) as TF computes it "
            "(max(min(t, hi), lo): where lo > hi the result is lo). The bounds are scalars "
            "or have t's shape: the raw op does not broadcast (tf.clip_by_value's Python "
            "does). NaN in t stays NaN. No complex, uint32 or uint64 CPU kernels (as TF's "
            "CPU); the GPU plugins take uint32 and uint64."
        )
    )
    reduction("Prod", numbers, "The product over the given axes (1 over an empty dimension).")
    reduction(
        "EuclideanNorm",
        numbers,
        "sqrt(sum(x * conj(x))) over the given axes, summed as TensorFlow does: in the input's "
        "type (a float32 sum of squares overflows to inf; integers wrap, and the root is "
        "truncated to an integer); over no axes, |x|.",
    )
    for name, what in (("All", "and"), ("Any", "or")):
        (
            lib.register_op(name)
            .input("input: bool")
            .input("reduction_indices: Tidx")
            .output("output: bool")
            .attr("keep_dims: bool = false")
            .attr(f"Tidx: {spec(INDEX)} = int32")
            .shape_fn(_reduction_shape)
            .doc(f"The logical {what} over the given axes ({name == 'All'} over an empty axis).")
        )
    (
        lib.register_op("ArgMin")
        .input("input: T")
        .input("dimension: Tidx")
        .output("output: output_type")
        .attr(f"T: {spec((*REALS, d.bool_))}")
        .attr(f"Tidx: {spec(INDEX)} = int32")
        .attr(f"output_type: {spec(INDEX)} = int64")
        .shape_fn(_argmax_shape)
        .doc(
            "The index of the smallest value along a dimension: the first, on ties. NaN is "
            "never the smallest (TF's Eigen reduction skips it); a slice whose values are all "
            "NaN or +inf gives 0. No complex (unordered)."
        )
    )
    for name, what, start in (("Cumsum", "sum", 0), ("Cumprod", "product", 1)):
        (
            lib.register_op(name)
            .input("x: T")
            .input("axis: Tidx")
            .output("out: T")
            .attr("exclusive: bool = false")
            .attr("reverse: bool = false")
            .attr(f"T: {numbers}")
            .attr(f"Tidx: {spec(INDEX)} = int32")
            .shape_fn(_cumsum_shape)
            .doc(
                f"The running {what} along axis: exclusive starts at {start} (leaves out the "
                "element itself), reverse runs from the end. Integers wrap on overflow."
            )
        )
