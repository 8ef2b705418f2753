"""ONNX's small element types, which kernloom has no dtype for: float8 (e4m3fn, e4m3fnuz,
e5m2, e5m2fnuz, e8m0), float4e2m1, int4, uint4, int2 and uint2 -- and bfloat16.

The core keeps its dtypes; a value of such a type is its codes, one per element
(``_values.OnnxCoded``): the bit pattern as uint8 for the float types (uint16 for
bfloat16), the value itself as int8/uint8 for the integer ones (unpacked). The
conversions follow onnx's reference (``onnx.reference.ops.op_cast``, which casts with
ml_dtypes and ``numpy_helper``):

- codes to float32: a constant table of every code's value, gathered (exact; NaN codes
  give NaN);
- float16/32 to a float8 or float4 type: round to nearest, ties to the even code, done
  as a binary search of |x| among the midpoints between representable values (compared
  in x's own dtype, in which every midpoint is exact); a float64 or an integer is
  rounded to float32 first, as ml_dtypes does (so a float64 just above a midpoint can
  tie, as in the reference);
  ``saturate`` (default) takes what is beyond the largest finite value to it, else to
  inf (e5m2) or NaN; the fnuz types have one NaN code (0x80) and no negative zero.
  float4e2m1 has neither inf nor NaN: ml_dtypes saturates, and takes NaN to a zero whose
  sign is the NaN's flipped, which the reference (and so this) reproduces;
- float8e8m0: onnx's ``to_float8e8m0`` on float32 bits (round_mode up, down, nearest);
- bfloat16: float32's top 16 bits, rounded to nearest even, NaN the quiet NaN of its
  sign (ml_dtypes); decoded by shifting them back;
- to int4/uint4/int2/uint2 (Cast): as ml_dtypes, truncation toward zero through int32
  (NaN and what int32 cannot hold give 0), then the low 4 or 2 bits, sign-extended for
  the signed types; QuantizeLinear rounds half to even and clamps (``quantize.py``).

The comparisons and bit operations are exact on every device. One deviation follows
the runtime: kernloom's CPU kernels flush float32 subnormals to zero by default, as
TensorFlow's do (``SessionConfig(flush_denormals=False)`` keeps them), so a bfloat16
subnormal cast to or from float64 (through a float32 cast) becomes zero there; float8
and float4 values are never subnormal in float32.

ml_dtypes (installed with onnx) is only read here, in the onnx frontend: for the tables
and for the numpy arrays a feed and a result are (``to_codes`` / ``from_codes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import ml_dtypes
import numpy as np
import onnx
import onnx.defs
from onnx import TensorProto

import kernloom.dtypes as d
from kernloom import ops
from kernloom.dtypes import DType
from kernloom.graph.builder import constant
from kernloom.graph.tensor import Tensor
from kernloom.onnx._values import OnnxCoded
from kernloom.onnx.errors import OnnxImportError

__all__ = [
    "SMALL_TYPES",
    "SmallType",
    "bfloat16_outputs",
    "cast_value",
    "clamp_range",
    "coded_array",
    "decode",
    "encode",
    "from_codes",
    "is_small",
    "small_type",
    "takes_tensors_only",
    "to_codes",
]


@dataclass(frozen=True, slots=True)
class _FloatFormat:
    """How a float8/float4 type encodes what is not an ordinary finite value."""

    max_code: int
    """The largest finite positive code; codes 0..max_code are the non-negative values
    in increasing order."""
    sign_bit: int
    nan_code: int | None
    """The positive NaN; None for float4e2m1 (no NaN)."""
    overflow_code: int | None
    """What overflows without ``saturate`` (inf or NaN); None: always saturates."""
    unsigned_nan: bool = False
    """The fnuz types: one NaN (0x80), no negative zero."""


@dataclass(frozen=True, slots=True)
class SmallType:
    """One small ONNX element type and how kernloom holds it."""

    elem_type: int
    numpy_dtype: np.dtype[Any]
    """ml_dtypes' dtype, as onnx's numpy helpers and test data give the values."""
    storage: DType
    """The kernloom dtype of the codes."""
    float_format: _FloatFormat | None = None
    bits: int = 8
    """The width of an integer type (4 or 2)."""

    @property
    def name(self) -> str:
        return str(TensorProto.DataType.Name(self.elem_type)).lower()

    @property
    def is_float(self) -> bool:
        return self.float_format is not None or self.is_e8m0 or self.is_bfloat16

    @property
    def is_bfloat16(self) -> bool:
        return self.elem_type == TensorProto.BFLOAT16

    @property
    def is_e8m0(self) -> bool:
        return self.elem_type == TensorProto.FLOAT8E8M0

    def values(self) -> np.ndarray[Any, Any]:
        """The float32 value of every code (a float type's table)."""
        count = 16 if self.elem_type == TensorProto.FLOAT4E2M1 else 256
        codes = np.arange(count, dtype=np.uint8)
        return np.asarray(codes.view(self.numpy_dtype).astype(np.float32))


def _dtype(name: str) -> np.dtype[Any]:
    return np.dtype(getattr(ml_dtypes, name))


SMALL_TYPES: Final[dict[int, SmallType]] = {
    t.elem_type: t
    for t in (
        SmallType(
            TensorProto.FLOAT8E4M3FN,
            _dtype("float8_e4m3fn"),
            d.uint8,
            _FloatFormat(0x7E, 0x80, 0x7F, 0x7F),
        ),
        SmallType(
            TensorProto.FLOAT8E4M3FNUZ,
            _dtype("float8_e4m3fnuz"),
            d.uint8,
            _FloatFormat(0x7F, 0x80, 0x80, 0x80, unsigned_nan=True),
        ),
        SmallType(
            TensorProto.FLOAT8E5M2,
            _dtype("float8_e5m2"),
            d.uint8,
            _FloatFormat(0x7B, 0x80, 0x7E, 0x7C),
        ),
        SmallType(
            TensorProto.FLOAT8E5M2FNUZ,
            _dtype("float8_e5m2fnuz"),
            d.uint8,
            _FloatFormat(0x7F, 0x80, 0x80, 0x80, unsigned_nan=True),
        ),
        SmallType(
            TensorProto.FLOAT4E2M1,
            _dtype("float4_e2m1fn"),
            d.uint8,
            _FloatFormat(0x7, 0x8, None, None),
        ),
        SmallType(TensorProto.FLOAT8E8M0, _dtype("float8_e8m0fnu"), d.uint8),
        SmallType(TensorProto.BFLOAT16, _dtype("bfloat16"), d.uint16),
        SmallType(TensorProto.INT4, _dtype("int4"), d.int8, bits=4),
        SmallType(TensorProto.UINT4, _dtype("uint4"), d.uint8, bits=4),
        SmallType(TensorProto.INT2, _dtype("int2"), d.int8, bits=2),
        SmallType(TensorProto.UINT2, _dtype("uint2"), d.uint8, bits=2),
    )
}


def is_small(elem_type: int) -> bool:
    return elem_type in SMALL_TYPES


def small_type(elem_type: int) -> SmallType:
    return SMALL_TYPES[elem_type]


def _of_numpy(dtype: np.dtype[Any]) -> SmallType | None:
    for found in SMALL_TYPES.values():
        if found.numpy_dtype == dtype:
            return found
    return None


# -- the numpy boundary: feeds, results, initializers ---------------------------------------


def to_codes(array: Any, elem_type: int, what: str) -> np.ndarray[Any, Any]:
    """A numpy array of ``elem_type`` (ml_dtypes', as onnx gives it) as kernloom's codes;
    ``what`` names the value for the error a wrong dtype gets."""
    small = small_type(elem_type)
    values = np.asarray(array)
    if values.dtype == small.numpy_dtype:
        if small.is_float:
            return values.view(small.storage.numpy_dtype)
        return values.astype(small.storage.numpy_dtype)
    raise OnnxImportError(
        f"{what} is {small.name}: give a numpy array of dtype ml_dtypes.{small.numpy_dtype}"
        f" (as onnx.numpy_helper.to_array makes it), not {values.dtype}"
    )


def from_codes(codes: Any, elem_type: int) -> np.ndarray[Any, Any]:
    """Kernloom's codes as the numpy array of ``elem_type`` onnx and onnxruntime give."""
    small = small_type(elem_type)
    values = np.asarray(codes)
    if small.is_float:
        return values.astype(small.storage.numpy_dtype).view(small.numpy_dtype)
    return values.astype(small.numpy_dtype)


def is_float_type(value: OnnxCoded) -> bool:
    """Whether a coded tensor holds one of the small float types (not an integer one)."""
    return small_type(value.elem_type).is_float


def coded_array(value: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], int] | None:
    """A numpy array of a small type (an initializer, a Constant) as (codes, elem type);
    None for an array of an ordinary dtype."""
    small = _of_numpy(value.dtype)
    if small is None:
        return None
    return to_codes(value, small.elem_type, "the value"), small.elem_type


# -- graphs: codes to values ----------------------------------------------------------------


def decode(codes: Tensor, elem_type: int, target: DType) -> Tensor:
    """The values of ``codes`` as ``target`` (a float or an integer dtype)."""
    small = small_type(elem_type)
    if not small.is_float:
        return codes if target == small.storage else ops.cast(codes, DstT=target)
    if small.is_bfloat16:  # a bfloat16 is the top half of a float32
        wide = ops.left_shift(ops.cast(codes, DstT=d.int32), _const(np.int32(16), codes))
        as_f32 = ops.bitcast(wide, type=d.float32)
        return as_f32 if target == d.float32 else ops.cast(as_f32, DstT=target)
    table = small.values()
    index = ops.bitwise_and(ops.cast(codes, DstT=d.int32), _const(np.int32(len(table) - 1), codes))
    as_f32 = ops.gather_v2(_const(table, codes), index, _const(np.int32(0), codes))
    return as_f32 if target == d.float32 else ops.cast(as_f32, DstT=target)


def _const(value: Any, like: Tensor) -> Tensor:
    return constant(np.asarray(value), name="const", graph=like.graph)


# -- graphs: values to codes ----------------------------------------------------------------


_SIGNED_BITS = {d.float16: d.int16, d.float32: d.int32, d.float64: d.int64}


def encode(x: Tensor, elem_type: int, *, saturate: bool = True, round_mode: str = "up") -> Tensor:
    """The codes of ``x`` (any kernloom numeric dtype) as ``elem_type``, rounded and
    saturated as onnx's Cast does."""
    small = small_type(elem_type)
    if small.float_format is not None:
        if x.dtype not in (d.float16, d.float32):
            # ml_dtypes rounds a float64 (or an integer) to float32 first, then to the
            # small type: the reference's double rounding, reproduced.
            x = ops.cast(x, DstT=d.float32)
        return _encode_float(x, small, small.float_format, saturate)
    if small.is_e8m0:
        return _encode_e8m0(x, saturate, round_mode)
    if small.is_bfloat16:
        return _encode_bfloat16(x)
    return _encode_integer(x, small)


def _boundaries(small: SmallType, fmt: _FloatFormat, dtype: DType) -> np.ndarray[Any, Any]:
    """For the codes 1..max_code (and the overflow, when the type has one), the largest
    |x| that still rounds below each, in ``dtype``: |x| > boundary[i-1] reaches code i.
    A midpoint tie goes to the even code, so an even code's boundary is the midpoint's
    predecessor. Padded with +inf to a power of two for the binary search."""
    np_dtype = dtype.numpy_dtype
    values = small.values()[: fmt.max_code + 1].astype(np.float64)
    if fmt.overflow_code is not None:
        # The value the next code would have, if the format went on: one more step.
        values = np.append(values, 2 * values[-1] - values[-2])
    mids = (values[:-1] + values[1:]) / 2
    exact = mids.astype(np_dtype)
    if not np.array_equal(exact.astype(np.float64), mids):
        raise AssertionError(f"a midpoint of {small.name} is not exact in {dtype}")
    codes = np.arange(1, len(mids) + 1)
    bounds = np.where(codes % 2 == 0, np.nextafter(exact, np_dtype.type(-np.inf)), exact)
    size = 1 << int(np.ceil(np.log2(len(bounds) + 1)))
    return np.concatenate([bounds, np.full(size - len(bounds), np.inf, np_dtype)]).astype(np_dtype)


def _encode_float(x: Tensor, small: SmallType, fmt: _FloatFormat, saturate: bool) -> Tensor:
    bounds = _boundaries(small, fmt, x.dtype)
    table = _const(bounds, x)
    axis = _const(np.int32(0), x)
    magnitude = ops.abs(x)
    index: Tensor | None = None
    step = len(bounds) // 2
    while step >= 1:
        candidate = (
            _const(np.int32(step), x)
            if index is None
            else ops.add_v2(index, _const(np.int32(step), x))
        )
        probe = ops.gather_v2(table, ops.sub(candidate, _const(np.int32(1), x)), axis)
        below = index if index is not None else _const(np.int32(0), x)
        index = ops.select_v2(ops.greater(magnitude, probe), candidate, below)
        step //= 2
    assert index is not None
    top = _const(np.int32(fmt.max_code), x)
    if fmt.overflow_code is None or saturate:
        code = ops.minimum(index, top)
    else:
        code = ops.select_v2(ops.greater(index, top), _const(np.int32(fmt.overflow_code), x), index)
    bits_dtype = _SIGNED_BITS[x.dtype]
    zero_bits = _const(np.zeros((), bits_dtype.numpy_dtype), x)
    negative = ops.less(ops.bitcast(x, type=bits_dtype), zero_bits)
    signed = ops.bitwise_or(code, _const(np.int32(fmt.sign_bit), x))
    if fmt.unsigned_nan:
        negative = ops.logical_and(negative, ops.not_equal(code, _const(np.int32(0), x)))
    code = ops.select_v2(negative, signed, code)
    if fmt.nan_code is not None:
        nan = _const(np.int32(fmt.nan_code), x)
        if not fmt.unsigned_nan:
            nan = ops.select_v2(
                negative, ops.bitwise_or(nan, _const(np.int32(fmt.sign_bit), x)), nan
            )
    else:  # float4e2m1 (ml_dtypes): NaN becomes the zero of the opposite sign
        nan = ops.select_v2(negative, _const(np.int32(0), x), _const(np.int32(fmt.sign_bit), x))
    code = ops.select_v2(ops.is_nan(x), nan, code)
    return ops.cast(code, DstT=d.uint8)


def _encode_e8m0(x: Tensor, saturate: bool, round_mode: str) -> Tensor:
    """onnx's ``numpy_helper.to_float8e8m0``: the float32 exponent, rounded as asked."""
    x32 = x if x.dtype == d.float32 else ops.cast(x, DstT=d.float32)
    bits = ops.bitcast(x32, type=d.int32)

    def masked(mask: int) -> Tensor:
        return ops.bitwise_and(bits, _const(np.int32(mask), x))

    def positive(mask: int) -> Tensor:
        return ops.greater(masked(mask), _const(np.int32(0), x))

    exponent = ops.bitwise_and(
        ops.right_shift(bits, _const(np.int32(23), x)), _const(np.int32(0xFF), x)
    )
    special = ops.equal(exponent, _const(np.int32(0xFF), x))
    if round_mode == "nearest":
        ordinary = ops.logical_or(
            ops.logical_or(positive(0x200000), positive(0x1FFFFF)),
            ops.greater(exponent, _const(np.int32(0), x)),
        )
        round_up = ops.logical_and(positive(0x400000), ordinary)
    elif round_mode == "up":
        round_up = positive(0x7FFFFF)
    elif round_mode == "down":
        round_up = None
    else:
        raise ValueError(f"round_mode {round_mode!r} is not one of 'up', 'down', 'nearest'")
    if round_up is not None:
        round_up = ops.logical_and(round_up, ops.logical_not(special))
        if saturate:
            top = ops.equal(exponent, _const(np.int32(0xFE), x))
            round_up = ops.logical_and(round_up, ops.logical_not(top))
        exponent = ops.add_v2(exponent, ops.cast(round_up, DstT=d.int32))
    code = ops.select_v2(special, _const(np.int32(0xFF), x), exponent)
    return ops.cast(code, DstT=d.uint8)


def _encode_bfloat16(x: Tensor) -> Tensor:
    """ml_dtypes' bfloat16: float32's top half rounded to nearest even (overflowing to
    inf), a NaN the quiet NaN of its sign; anything else goes through float32 first."""
    x32 = x if x.dtype == d.float32 else ops.cast(x, DstT=d.float32)
    bits = ops.bitcast(x32, type=d.int32)
    unsigned = ops.bitwise_and(ops.cast(bits, DstT=d.int64), _const(np.int64(0xFFFFFFFF), x))
    sixteen = _const(np.int64(16), x)
    odd = ops.bitwise_and(ops.right_shift(unsigned, sixteen), _const(np.int64(1), x))
    biased = ops.add_v2(ops.add_v2(unsigned, _const(np.int64(0x7FFF), x)), odd)
    rounded = ops.bitwise_and(ops.right_shift(biased, sixteen), _const(np.int64(0xFFFF), x))
    negative = ops.less(bits, _const(np.int32(0), x))
    nan = ops.select_v2(negative, _const(np.int64(0xFFC0), x), _const(np.int64(0x7FC0), x))
    return ops.cast(ops.select_v2(ops.is_nan(x32), nan, rounded), DstT=d.uint16)


def _encode_integer(x: Tensor, small: SmallType) -> Tensor:
    """ml_dtypes' cast to int4/int2: toward zero through int32, then the low bits."""
    if x.dtype.is_floating:
        limit = ops.cast(_const(np.float64(2.0**31), x), DstT=x.dtype)
        held = ops.less(ops.abs(x), limit)  # False for NaN and inf too
        x = ops.select_v2(held, x, ops.zeros_like(x))
        whole = ops.cast(x, DstT=d.int32)
    else:
        whole = ops.cast(x, DstT=d.int64)
    like = whole.dtype.numpy_dtype.type
    low = ops.bitwise_and(whole, _const(like((1 << small.bits) - 1), x))
    if small.storage == d.int8:
        half = _const(like(1 << (small.bits - 1)), x)
        low = ops.sub(ops.bitwise_xor(low, half), half)
    return ops.cast(low, DstT=small.storage)


def clamp_range(elem_type: int) -> tuple[int, int]:
    """An integer small type's range: what QuantizeLinear saturates to."""
    small = small_type(elem_type)
    if small.storage == d.int8:
        return -(1 << (small.bits - 1)), (1 << (small.bits - 1)) - 1
    return 0, (1 << small.bits) - 1


# -- Cast between any two types -------------------------------------------------------------


def cast_value(
    value: Tensor | OnnxCoded,
    target: DType | int,
    *,
    saturate: bool = True,
    round_mode: str = "up",
) -> Tensor | OnnxCoded:
    """``value`` cast to ``target``: a kernloom dtype, or a small ONNX type's elem type.
    A small type's value passes through float32 (every float8/float4 value is exact in
    it) or its integer codes; another value is encoded from its own dtype."""
    if isinstance(value, OnnxCoded):
        source_format = small_type(value.elem_type).float_format
        resaturate = saturate and source_format is not None and source_format.nan_code is not None
        if value.elem_type == target and not resaturate:
            # As the reference's astype; a saturating float8 cast to its own type clips
            # inf to the largest value and makes NaNs its NaN, through float32 below.
            return OnnxCoded(ops.identity(value.codes), value.elem_type)
        source = small_type(value.elem_type)
        plain = decode(
            value.codes, value.elem_type, d.float32 if source.is_float else source.storage
        )
    else:
        plain = value
    if isinstance(target, DType):
        return ops.identity(plain) if plain.dtype == target else ops.cast(plain, DstT=target)
    return OnnxCoded(encode(plain, target, saturate=saturate, round_mode=round_mode), target)


# -- bfloat16 arithmetic: decoded to float32, the node run, its results encoded ------------


def takes_tensors_only(schema: onnx.defs.OpSchema) -> bool:
    """Whether every input and output of ``schema`` is a tensor (no sequence, optional or
    subgraph-carried value): the ops whose converters see plain tensors only."""
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    for formal in [*schema.inputs, *schema.outputs]:
        types = allowed.get(formal.type_str, [formal.type_str])
        if any(not t.startswith("tensor(") for t in types):
            return False
    return True


def _formal(formals: list[Any], index: int) -> Any | None:
    """The formal parameter actual ``index`` binds to (a variadic last one takes the rest)."""
    if index < len(formals):
        return formals[index]
    if formals and formals[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return formals[-1]
    return None


def bfloat16_outputs(
    schema: onnx.defs.OpSchema, bfloat16_inputs: list[int], count: int
) -> set[int]:
    """The outputs (indices among ``count``) whose type is bfloat16: those of the same
    type variable as a bfloat16 input, by the op's type constraints. An output of a fixed
    type (ArgMax's int64, Unique's indices) or of another variable keeps its own."""
    variables = {c.type_param_str for c in schema.type_constraints}
    bound = set()
    for index in bfloat16_inputs:
        formal = _formal(list(schema.inputs), index)
        if formal is not None and formal.type_str in variables:
            bound.add(formal.type_str)
    result = set()
    for index in range(count):
        formal = _formal(list(schema.outputs), index)
        if formal is not None and formal.type_str in bound:
            result.add(index)
    return result
