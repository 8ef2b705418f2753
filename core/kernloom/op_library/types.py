"""The dtype groups the standard ops accept, as TensorFlow groups them.

Both spellings are exported: tuples of DTypes (for kernel constraints) and the
``{a, b}`` text used in attr specs.
"""

from __future__ import annotations

from typing import Final

from kernloom import dtypes as d
from kernloom.dtypes import DType

__all__ = [
    "ALL",
    "COMPLEX",
    "FLOATS",
    "INDEX",
    "INTEGERS",
    "NUMBERS",
    "OP_TYPES",
    "REALS",
    "SIGNED",
    "spec",
]

FLOATS: Final = (d.float16, d.float32, d.float64)
COMPLEX: Final = (d.complex64, d.complex128)
SIGNED_INTEGERS: Final = (d.int8, d.int16, d.int32, d.int64)
INTEGERS: Final = (*SIGNED_INTEGERS, d.uint8, d.uint16, d.uint32, d.uint64)
REALS: Final = (*FLOATS, *INTEGERS)
"""Ordered types: comparisons, max/min, relu."""
NUMBERS: Final = (*REALS, *COMPLEX)
SIGNED: Final = (*FLOATS, *SIGNED_INTEGERS, *COMPLEX)
"""Types with a negation (TensorFlow's Neg excludes unsigned integers)."""
INEXACT: Final = (*FLOATS, *COMPLEX)
"""Transcendental functions: exp, log, sqrt, tanh."""
ALL: Final = (*NUMBERS, d.bool_)
INDEX: Final = (d.int32, d.int64)
"""Shapes, axes and permutations."""


OP_TYPES: Final = None
"""In a kernel's type constraints (``type_constraints={"T": OP_TYPES}``, or a kernel
table's types column): every dtype the op's attr allows. An op declares its dtypes once, in
its OpDef (``T: {float16, float32, ...}``); a kernel that covers all of them says so instead
of listing them again, and lookup checks only what the op itself allows. List a group only
where a kernel covers fewer dtypes than its op."""


def spec(types: tuple[DType, ...]) -> str:
    """``{float16, float32, float64}`` for an attr spec."""
    return "{" + ", ".join(t.name for t in types) + "}"
