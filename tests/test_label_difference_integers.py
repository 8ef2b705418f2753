"""``label_compare.difference`` of integer outputs is exact: a labelled kernel that
computes int64 through float64 loses low bits, and the A/B must show it (through float64
the values below were equal, and the report said 0)."""

from __future__ import annotations

import numpy as np
import pytest

from kernloom.runtime.label_compare import difference


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_low_bits_of_large_integers_count(dtype: type) -> None:
    exact = np.array([2**60 + 1, 7, 5, 2**62 + 3], dtype)
    via_float = np.array([2**60, 7, 5, 2**62], dtype)  # what float64 makes of them
    absolute, relative = difference(via_float, exact)
    assert absolute == 3.0
    assert relative == pytest.approx(3.0 / 2**62)


def test_the_extremes_of_int64_and_uint64_do_not_wrap() -> None:
    low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    assert difference(np.array([low], np.int64), np.array([high], np.int64))[0] == float(2**64 - 1)
    top = np.iinfo(np.uint64).max
    assert difference(np.array([top], np.uint64), np.array([top - 1000], np.uint64))[0] == 1000.0
    assert difference(np.array([0], np.uint8), np.array([255], np.uint8))[0] == 255.0


def test_signed_against_unsigned_outputs_are_compared_as_integers() -> None:
    assert difference(np.array([-1], np.int32), np.array([2**32 - 1], np.uint32))[0] == 2.0**32
