"""TensorFlow's Cast on the CPU, value by value, written once over an array module.

numpy's ``astype`` differs from TensorFlow's CPU kernel where C++ leaves a conversion
undefined: a float that is NaN, infinite or out of the target's range. TensorFlow's
kernel (Eigen's cast, x86's truncating conversion) gives, as measured against
tensorflow-cpu 2.21:

- int32 and int64: the most negative value (``INT_MIN``) for NaN, +-inf and anything out
  of range; in range, truncation toward zero.
- int8, int16, uint8, uint16: the float goes through int32 first (``INT_MIN`` for
  invalid values, whose low bits are 0) and keeps its low bits: 300.7 -> int8 44,
  -1.5 -> uint8 255, NaN -> 0.
- uint32 and uint64: values in [0, 2**bits) exactly; anything else through int32
  (uint32) or int64 (uint64) as above, reinterpreted: -1.5 -> 2**32 - 1, NaN -> 2**31
  (uint32) or 2**63 (uint64). TensorFlow's own answer for a uint32 out of range depends
  on where the element sits in the array (vectorised or scalar tail), so no rule can
  match it everywhere; this one matches its vectorised body.

``Truncate=True`` (what TensorFlow's bfloat16 and half conversions may ask for) drops the
mantissa bits the narrower float cannot hold before converting, so the value is
truncated toward zero instead of rounded to nearest: float32 1.0019 -> float16 1.001,
not 1.002. It changes only float to narrower float (and complex to narrower complex),
as TensorFlow's ``LSBZeroSetter``.

Complex to real keeps the real part; anything to bool is ``x != 0`` (NaN is true).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["tf_cast"]

_MANTISSA_BITS = {np.dtype(np.float16): 10, np.dtype(np.float32): 23, np.dtype(np.float64): 52}
_BITS_VIEW: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype(np.float16): np.dtype(np.uint16),
    np.dtype(np.float32): np.dtype(np.uint32),
    np.dtype(np.float64): np.dtype(np.uint64),
}


def tf_cast(xp: ModuleType, x: Any, dst: np.dtype[Any], *, truncate: bool = False) -> Any:
    """``x`` (an array of module ``xp``) converted to ``dst`` as TensorFlow's CPU does."""
    src = x.dtype
    if src.kind == "c" and dst.kind == "c":
        if truncate:
            part = np.dtype(dst.type(0).real.dtype)
            out = xp.empty(x.shape, dst)
            # Part by part: `real + 1j * imag` would turn an infinite or NaN imaginary
            # part into a NaN real part (1j * inf is nan + inf j).
            out.real[...] = _truncated(xp, x.real, part)
            out.imag[...] = _truncated(xp, x.imag, part)
            return out
        return x.astype(dst)
    if src.kind == "c":
        x, src = x.real, x.real.dtype  # TensorFlow keeps the real part
    if dst.kind == "b":
        return x != 0
    if src.kind == "f" and dst.kind in "iu":
        return _float_to_int(xp, x, dst)
    if src.kind == "f" and dst.kind in "fc" and truncate:
        target = dst if dst.kind == "f" else np.dtype(dst.type(0).real.dtype)
        return _truncated(xp, x, target).astype(dst)
    return x.astype(dst)


def _truncated(xp: ModuleType, x: Any, target: np.dtype[Any]) -> Any:
    """``x`` with the low mantissa bits that ``target`` has no room for set to zero."""
    src = np.dtype(x.dtype)
    drop = _MANTISSA_BITS[src] - _MANTISSA_BITS.get(np.dtype(target), _MANTISSA_BITS[src])
    if drop <= 0:
        return x
    view = _BITS_VIEW[src]
    mask = view.type(~((1 << drop) - 1) & ((1 << (8 * view.itemsize)) - 1))
    bits = xp.ascontiguousarray(x).view(view) & mask
    return xp.where(xp.isnan(x), x, bits.view(src))


def _float_to_int(xp: ModuleType, x: Any, dst: np.dtype[Any]) -> Any:
    wide = dst.itemsize == 8
    through = np.dtype(np.int64 if wide else np.int32)
    limit = float(2 ** (through.itemsize * 8 - 1))
    if x.dtype == np.float16:
        x = x.astype(np.float32)
    t = xp.trunc(x)
    valid = (t >= -limit) & (t < limit)  # false for NaN
    out = xp.where(valid, t, 0).astype(through)
    lowest = -(1 << (through.itemsize * 8 - 1))
    out = xp.where(valid, out, lowest).astype(dst)  # wraps to dst's low bits
    if dst.kind == "u" and dst.itemsize >= 4:
        high = (t >= limit) & (t < 2 * limit)
        out = xp.where(high, xp.where(high, t, 0).astype(dst), out)
    return out
