"""The reference case: one op run on given inputs and attrs, and its expected outputs.

References are computed independently of any kernel (numpy directly, in float64 where the
kernel's algorithm differs from the plain formula, or values worked by hand), never by
the code under test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kernloom as kl

__all__ = [
    "RNG",
    "Array",
    "Case",
    "assert_matches",
    "reduction_cases",
    "sample",
    "tolerance",
]

Array = np.ndarray[Any, Any]


@dataclass
class Case:
    op: str
    inputs: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    reference: Callable[..., Any] | None = None
    label: str = ""
    id: str = ""
    declared: tuple[str, ...] = ()
    """Attrs whose value this case checks only on a kernel that lists it among its attr
    constraints: a form of an op kernels opt into (``_FusedConv2D``'s residual
    ``fused_ops``), which a kernel registered without saying so is never given."""

    def expected(self) -> list[Array]:
        assert self.reference is not None
        with np.errstate(all="ignore"):  # nan and inf are expected values, not errors
            out = self.reference(*self.inputs)
        return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def tolerance(dtype: np.dtype[Any]) -> dict[str, float]:
    if dtype == np.float16:
        return {"rtol": 2e-2, "atol": 2e-2}
    if dtype in (np.float32, np.complex64):
        return {"rtol": 2e-5, "atol": 2e-5}
    return {"rtol": 1e-10, "atol": 1e-12}


def assert_matches(actual: list[Array], expected: list[Array]) -> None:
    """Outputs equal the references: same shape and dtype, values within ``tolerance``."""
    for value, reference in zip(actual, expected, strict=True):
        assert value.shape == reference.shape
        assert value.dtype == reference.dtype, f"{value.dtype} != {reference.dtype}"
        if value.dtype.kind in "fc":
            tol = tolerance(value.dtype)
            np.testing.assert_allclose(value, reference, rtol=tol["rtol"], atol=tol["atol"])
        else:
            np.testing.assert_array_equal(value, reference)


RNG = np.random.default_rng(1234)


def sample(
    shape: tuple[int, ...], dtype: kl.DType, *, positive: bool = False, small: bool = False
) -> Array:
    np_dtype = dtype.numpy_dtype
    if dtype.is_bool:
        return RNG.random(shape) < 0.5
    if dtype.is_integer:
        low = 1 if positive else (0 if dtype.is_unsigned else -5)
        return RNG.integers(low, 4 if small else 9, size=shape).astype(np_dtype)
    values = RNG.standard_normal(shape) * (1 if small else 3)
    if positive:
        values = np.abs(values) + 0.1
    if dtype.is_complex:
        values = values + 1j * RNG.standard_normal(shape)
    return np.asarray(values).astype(np_dtype)


REDUCTION_AXES: list[Any] = [[1], [0, 2], [-1], [], [0, 1, 2], 1]
"""The axes every reduction op is checked over on a rank-3 input: one, several, negative,
none (the identity), all, and a scalar axis."""


def reduction_cases(
    op: str, x: Array, dtype: kl.DType, reference: Callable[[Any, bool], Callable[..., Any]]
) -> Iterator[Case]:
    """``op`` (a reduction with an ``axis`` input and ``keep_dims``) of ``x`` over each of
    ``REDUCTION_AXES``, with and without ``keep_dims``; ``reference(axes, keep)`` gives the
    reference function for one of them."""
    for axes in REDUCTION_AXES:
        for keep in (False, True):
            yield Case(
                op,
                [x, np.array(axes, np.int32)],
                {"keep_dims": keep},
                reference=reference(axes, keep),
                id=f"{op}-{dtype}-{axes}-{keep}",
            )
