"""Python and numpy values as arrays of a kernloom dtype: the one conversion rule.

Every place that takes a caller's value for a tensor of a known dtype uses it: the feeds
of ``Session.run`` (and ``make_callable``), ``kl.constant`` with a dtype, the Python
numbers the builder turns into constants (``x_int32 * 2**40``), the CLI's ``--feed``
files and an ONNX frontend's inputs. A value converts only when every element is
representable in the dtype, as TensorFlow's ``convert_to_tensor`` decides:

- integers convert to any integer type whose range holds them, and to floating types;
- floats convert to floating types, rounding as needed, but a finite value that
  overflows the target (``1e300`` into float32) is an error; into integer types only
  when every value is finite, whole and in range (``[1.5]`` into int32 is an error);
- bools convert only to bool, and nothing else converts to bool;
- complex values convert only to complex types;
- ``None``, strings, bytes and other objects are errors.

The errors are ``InvalidArgumentError``s that start with what the caller says the value
is for (``what``: "feed for 'x:0'") and name the dtype and the first offending value.
What would fix the value is a ``Hint`` naming the setting through which the caller gives
it (``given_as``: a feed, by default a constant), so that each interface spells the fix in
its own terms: ``feed_dict={'x': np.asarray(values, dtype='int32')}`` in Python,
``--feed x=FILE.npy`` with an int32 file under ``kernloom run``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import numpy as np

from kernloom.dtypes import DType, as_dtype, int32, int64
from kernloom.errors import Hint, InvalidArgumentError, Setting

__all__ = ["convert_to_dtype", "infer_array"]

Array = np.ndarray[Any, Any]
_NUMERIC_KINDS: Final = frozenset("biufc")
_SHOWN: Final = 80
"""Characters of an offending value an error message shows."""
_CONSTANT: Final = Setting("constant_array")
"""How a value is given when the caller names no setting: as a constant."""


def _show(value: object) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


_GIVE_NUMBERS: Final = "Give numbers as {given}."


def _error(message: str, template: str, given: Setting | None) -> InvalidArgumentError:
    """What went wrong, and as a hint the fix in terms of ``given`` (the setting through
    which the value comes, its ``value`` the target dtype's name)."""
    if given is None:
        return InvalidArgumentError(message)
    return InvalidArgumentError(message, hint=Hint(template, given=given))


def _source_array(value: object, what: str, given: Setting | None) -> Array:
    """``value`` as numpy sees it, without a dtype; errors for ragged or odd values."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _error(
            f"{what}: cannot make an array of {_show(value)}: {exc}.",
            "Give a rectangular array of numbers as {given}.",
            given,
        ) from None


_NUMBER_TYPES: Final = (bool, int, float, complex, np.number, np.bool_)
"""Numbers as an object array holds them (Python's, or numpy's scalars); not str, None."""


def _numbers_from_objects(
    array: Array, target: np.dtype[Any], what: str, dtype: DType, given: Setting
) -> Array:
    """An object array of Python numbers (``np.array([1, 2], dtype=object)``, or numpy's
    array of a list holding an int beyond 64 bits) as the numbers it holds, for the checks
    that follow: as numpy reads the same list, or for a floating target taken in that type
    directly (``2**70`` is a float64; TensorFlow feeds it), where an int beyond the
    target's range is an overflow error like a float's. Anything else (strings, None,
    other objects) comes back as it is, for the caller's error that names it."""
    if not all(isinstance(item, _NUMBER_TYPES) for item in array.reshape(-1).tolist()):
        return array
    items = array.tolist()
    try:
        plain = np.asarray(items)
    except (TypeError, ValueError, OverflowError):
        return array
    if plain.dtype.kind != "O" or target.kind not in "fc":
        return plain if plain.dtype.kind != "O" else array
    try:
        with np.errstate(over="ignore"):
            converted = np.asarray(items, dtype=target)
    except OverflowError:  # an int beyond float64's range
        converted = None
    except (TypeError, ValueError):
        return array
    if converted is None or np.isinf(converted).any():
        _check_ints_fit(array, target, what, dtype, given)
    return array if converted is None else converted


def _check_ints_fit(
    array: Array, target: np.dtype[Any], what: str, dtype: DType, given: Setting
) -> None:
    """No Python int of the object array ``array`` is beyond floating ``target``'s range
    (numpy makes it infinite, or cannot convert it at all beyond float64's)."""
    for item in array.reshape(-1).tolist():
        if not isinstance(item, int) or isinstance(item, bool):
            continue
        try:
            with np.errstate(over="ignore"):
                fits = bool(np.isfinite(np.asarray(item, dtype=target)))
        except OverflowError:
            fits = False
        if not fits:
            raise _overflow_error(item, what, dtype, given)


def _first(array: Array, bad: Array) -> object:
    """The first element of ``array`` where ``bad`` is set."""
    return array[bad][0] if array.ndim else array[()]


def _first_of(array: Array) -> object:
    return array.reshape(-1)[0] if array.size else array


def _non_numeric(
    array: Array, what: str, target: str, given: Setting | None
) -> InvalidArgumentError:
    """The error for an array numpy could only hold as objects or text."""
    flat = array.reshape(-1)
    offending: object = flat[0] if flat.size else array
    for item in flat:
        if not isinstance(item, bool | int | float | complex | np.generic) or isinstance(
            item, np.str_ | np.bytes_
        ):
            offending = item
            break
    for item in flat:
        if isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item < 2**64:
            return _error(
                f"{what}: value {_show(item)} is out of range for {target} (no 64-bit "
                f"integer holds it).",
                "Give values a 64-bit integer holds as {given}.",
                given,
            )
    plain = offending.item() if isinstance(offending, np.generic) else offending
    kind = "" if offending is None else f" ({type(plain).__name__})"
    return _error(
        f"{what}: value {_show(offending)}{kind} cannot be converted to {target}.",
        _GIVE_NUMBERS,
        given,
    )


def _integer_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _check_integers(array: Array, target: np.dtype[Any], what: str, given: Setting) -> None:
    """Every integer of ``array`` fits ``target``'s range."""
    if array.size == 0 or np.can_cast(array.dtype, target, "safe"):
        return
    low, high = _integer_range(target)
    smallest, largest = int(array.min()), int(array.max())
    if smallest < low or largest > high:
        bad = np.asarray((array < low) | (array > high))
        raise _error(
            f"{what}: value {_show(_first(array, bad))} is out of range for "
            f"{as_dtype(target).name} ({low}..{high}).",
            "Give values within that range as {given}, or use a wider dtype for the tensor.",
            given,
        )


def _check_floats_to_integers(
    array: Array, target: np.dtype[Any], what: str, given: Setting
) -> None:
    """Every float of ``array`` is finite, whole and in ``target``'s range."""
    if array.size == 0:
        return
    name = as_dtype(target).name
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(array)
        whole = finite & (np.trunc(array) == array)
    if not whole.all():
        raise _error(
            f"{what}: value {_show(_first(array, ~whole))} is not a whole number, so it "
            f"cannot be converted to {name} without losing its fractional part.",
            "Round the values to whole numbers and give them as {given}, or use a floating "
            "dtype for the tensor.",
            given,
        )
    bits = target.itemsize * 8
    # Bounds that are exact in binary floating point: [-2**(b-1), 2**(b-1)) or [0, 2**b).
    low, end = (0.0, 2.0**bits) if target.kind == "u" else (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1))
    inside = (array >= low) & (array < end)
    if not inside.all():
        raise _error(
            f"{what}: value {_show(_first(array, ~inside))} is out of range for {name} "
            f"({int(low)}..{int(end) - 1}).",
            "Give values within that range as {given}, or use a wider dtype for the tensor.",
            given,
        )


def _check_no_overflow(
    array: Array, converted: Array, what: str, target: DType, given: Setting
) -> None:
    """No finite value became infinite: it was beyond ``target``'s range."""
    if converted.size == 0 or array.dtype.kind not in "fciu":
        return
    with np.errstate(invalid="ignore"):
        overflowed = np.isinf(converted) & np.isfinite(array)
    if overflowed.any():
        raise _overflow_error(_first(array, overflowed), what, target, given)


def _overflow_error(
    value: object, what: str, target: DType, given: Setting
) -> InvalidArgumentError:
    """The error for a finite ``value`` beyond floating ``target``'s range."""
    return _error(
        f"{what}: value {_show(value)} overflows {target.name} "
        f"(largest finite value {float(np.finfo(target.numpy_dtype).max):.6g}).",
        "Scale the values into that range and give them as {given}, or use a wider "
        "dtype for the tensor.",
        given,
    )


def convert_to_dtype(
    value: object, dtype: DType, *, what: str, given_as: Setting | None = None
) -> Array:
    """``value`` as an array of ``dtype``, or an ``InvalidArgumentError`` that starts with
    ``what`` and names the dtype and the first offending value (see the module doc).

    ``given_as``: how the caller hands such values over, for the error's hint: a
    ``Setting("feed_array", key=tensor)``; by default a constant (``constant_array``).
    The setting's ``value`` is filled in with the dtype's name.

    An array already of ``dtype`` is returned as it is (not copied): callers that keep
    the result copy it themselves.
    """
    target = dtype.numpy_dtype
    if type(value) is np.ndarray and value.dtype == target:
        return value
    given = replace(given_as or _CONSTANT, value=dtype.name)
    if value is None:
        raise _error(
            f"{what}: value None cannot be converted to {dtype.name}.", _GIVE_NUMBERS, given
        )
    if isinstance(value, str | bytes):
        raise _error(
            f"{what}: value {_show(value)} ({type(value).__name__}) cannot be converted to "
            f"{dtype.name}.",
            _GIVE_NUMBERS,
            given,
        )
    array = _source_array(value, what, given)
    if array.dtype.kind == "O":
        array = _numbers_from_objects(array, target, what, dtype, given)
    kind = array.dtype.kind
    if kind not in _NUMERIC_KINDS:
        raise _non_numeric(array, what, dtype.name, given)
    if array.dtype == target:
        return array
    wanted = target.kind
    if (kind == "b") != (wanted == "b"):
        found = "a bool" if kind == "b" else f"a number ({array.dtype.name})"
        advice = (
            "Compare the numbers with zero (x != 0) and give the result as {given}."
            if wanted == "b"
            else "Convert the bools to numbers and give them as {given}."
        )
        raise _error(
            f"{what}: value {_show(_first_of(array))} is {found}, which does not convert to "
            f"{dtype.name}.",
            advice,
            given,
        )
    if kind == "c" and wanted != "c":
        raise _error(
            f"{what}: value {_show(_first_of(array))} is {array.dtype.name}, and complex "
            f"values do not convert to {dtype.name}.",
            "Take the real part or the magnitude and give it as {given}.",
            given,
        )
    if wanted in "iu":
        if kind in "iu":
            _check_integers(array, target, what, given)
        else:
            _check_floats_to_integers(array, target, what, given)
        return array.astype(target)
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.astype(target)
    _check_no_overflow(array, converted, what, dtype, given)
    return converted


def infer_array(value: object, *, what: str) -> Array:
    """``value`` as an array when no dtype is asked for (``kl.constant(value)``), as
    TensorFlow infers one: numpy arrays and scalars keep their dtype; Python floats become
    float32, Python ints int32 (int64 when one does not fit), bools bool."""
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.kind not in _NUMERIC_KINDS:
            raise _non_numeric(array, what, "a tensor", None)
        return array
    if value is None or isinstance(value, str | bytes):
        raise _non_numeric(np.asarray(value, dtype=object), what, "a tensor", None)
    array = _source_array(value, what, None)
    kind = array.dtype.kind
    if kind not in _NUMERIC_KINDS:
        raise _non_numeric(array, what, "a tensor", None)
    if array.dtype == np.float64:
        return convert_to_dtype(array, as_dtype(np.float32), what=what)
    if kind in "iu":
        lo, hi = _integer_range(np.dtype(np.int32))
        fits = array.size == 0 or (int(array.min()) >= lo and int(array.max()) <= hi)
        return array.astype((int32 if fits else int64).numpy_dtype)
    return array
