"""The shared op/dtype/attr case table: one entry per case, used by every plugin's tests
and by the conformance kit (torch's OpInfo database is the model).

Each family module yields ``Case`` objects whose references are computed independently of
any kernel. ``cases()`` is the whole table, in a fixed order.
"""

from __future__ import annotations

from collections.abc import Iterator

from kernloom.testing.cases import (
    bitwise,
    detection,
    elementwise,
    fused,
    image_linalg,
    indexing,
    kit_edges,
    linalg,
    nn,
    segment,
    space_batch,
    spectral,
    standard,
    tf_edges,
    windows3d,
)
from kernloom.testing.cases.case import RNG, Array, Case, assert_matches, sample, tolerance

__all__ = ["RNG", "Array", "Case", "assert_matches", "cases", "sample", "tolerance"]

FAMILIES = (
    standard,
    elementwise,
    bitwise,
    indexing,
    segment,
    space_batch,
    nn,
    windows3d,
    image_linalg,
    detection,
    linalg,
    spectral,
    fused,
    tf_edges,
    kit_edges,
)


def cases() -> Iterator[Case]:
    """Every reference case of every family."""
    for family in FAMILIES:
        yield from family.cases()
