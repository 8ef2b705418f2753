"""Random DAGs of elementwise nodes (arithmetic, divisions, comparisons picking with
SelectV2, casts, ExpandDims/Squeeze) whose values have several consumers, with operands
that broadcast, in float and integer dtypes: every node runs its kernel's direct entry,
in place where nothing else holds an input and into a new counted buffer where something
does (a feed, a value read again later, a fetched value). Against numpy computed node by
node, with the optimizer off and on, the interpreted and the compiled straight line; the
caller's feed is never written and every fetched intermediate keeps its value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernloom as kl
from kernloom.runtime.compiled_line import CompiledLine

BINARY: dict[str, tuple[Callable[..., kl.Tensor], Callable[..., Any]]] = {
    "add": (kl.ops.add, np.add),
    "sub": (kl.ops.sub, np.subtract),
    "mul": (kl.ops.mul, np.multiply),
    "maximum": (kl.ops.maximum, np.maximum),
    "minimum": (kl.ops.minimum, np.minimum),
}
UNARY: dict[str, tuple[Callable[..., kl.Tensor], Callable[..., Any]]] = {
    "neg": (kl.ops.neg, np.negative),
    "abs": (kl.ops.abs, np.absolute),
    "square": (kl.ops.square, np.square),
}


def _positive(b: kl.Tensor) -> kl.Tensor:
    """|b| + 1: a divisor that is never 0."""
    one: kl.Tensor = kl.ops.cast(kl.constant(np.int32(1)), DstT=b.dtype)
    positive: kl.Tensor = kl.ops.add(kl.ops.abs(b), one)
    return positive


def _floor_div(a: Any, b: Any) -> Any:
    q = np.floor_divide(a, b) if a.dtype.kind == "i" else np.floor(a / b)
    return q.astype(a.dtype)


COMPOSITE: dict[str, tuple[Callable[..., kl.Tensor], Callable[..., Any]]] = {
    # A division by |b| + 1 (TF's floor semantics), the pick of the smaller by a
    # comparison, the pick by equality, a cast there and back (exact for these values),
    # and an axis added and taken away: the kernels with direct entries besides arithmetic.
    "floor_div": (
        lambda a, b: kl.ops.floor_div(a, _positive(b)),
        lambda a, b: _floor_div(a, np.abs(b) + 1),
    ),
    "floor_mod": (
        lambda a, b: kl.ops.floor_mod(a, _positive(b)),
        lambda a, b: (a - _floor_div(a, np.abs(b) + 1) * (np.abs(b) + 1)).astype(a.dtype),
    ),
    "select_less": (
        lambda a, b: kl.ops.select_v2(kl.ops.less(a, b), a, b),
        lambda a, b: np.where(a < b, a, b),
    ),
    "select_equal": (
        lambda a, b: kl.ops.select_v2(kl.ops.equal(a, b), kl.ops.neg(a), b),
        lambda a, b: np.where(a == b, -a, b),
    ),
    "cast_back": (
        lambda a, b: kl.ops.cast(kl.ops.cast(a, DstT=kl.float64), DstT=a.dtype),
        lambda a, b: a,
    ),
    "expand_squeeze": (
        lambda a, b: kl.ops.squeeze(
            kl.ops.expand_dims(a, kl.constant(np.int32(0))), squeeze_dims=[0]
        ),
        lambda a, b: a,
    ),
}
SHAPES = [(3, 4), (4,), (1, 4), (3, 1), ()]
"""The feed is [3, 4]; constants take any of these (all broadcast to [3, 4])."""


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[str, list[int]]]:
    """Nodes as (op, operand indices); index 0 is the feed, 1-3 constants, then the nodes
    in order. Operands are drawn with repetition: values get several consumers."""
    nodes: list[tuple[str, list[int]]] = []
    for k in range(draw(st.integers(3, 14))):
        available = 4 + k
        op = draw(st.sampled_from(sorted(BINARY) + sorted(UNARY) + sorted(COMPOSITE)))
        arity = 1 if op in UNARY else 2
        nodes.append((op, [draw(st.integers(0, available - 1)) for _ in range(arity)]))
    return nodes


def _squash(value: Any) -> Any:
    """Keep integers small and floats bounded between nodes (no overflow to compare)."""
    return value % 7 - 3 if value.dtype.kind == "i" else np.tanh(value)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dag=dags(),
    dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64]),
    optimizer=st.booleans(),
    compiled=st.booleans(),
    fetch_every=st.integers(2, 5),
    seed=st.integers(0, 2**16),
)
def test_random_fan_out_dags_match_numpy(
    dag: list[tuple[str, list[int]]],
    dtype: Any,
    optimizer: bool,
    compiled: bool,
    fetch_every: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)

    def value(shape: tuple[int, ...]) -> Any:
        if np.dtype(dtype).kind == "i":
            return rng.integers(-3, 4, shape).astype(dtype)
        return rng.uniform(-2, 2, shape).astype(dtype)

    feed = value((3, 4))
    constants = [value(SHAPES[rng.integers(0, len(SHAPES))]) for _ in range(3)]
    reference: list[Any] = [feed, *constants]
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), [3, 4], name="x")
        built: list[kl.Tensor] = [x, *(kl.constant(c) for c in constants)]
        for op, operands in dag:
            build, numpy_fn = {**BINARY, **UNARY, **COMPOSITE}[op]
            out = build(*(built[i] for i in operands))
            want = numpy_fn(*(reference[i] for i in operands))
            if dtype in (np.float32, np.float64):
                out, want = kl.ops.tanh(out), np.tanh(want)
            else:  # floor_mod of a positive divisor: the same in TF and numpy
                seven = kl.constant(np.asarray(7, dtype))
                out = kl.ops.sub(kl.ops.floor_mod(out, seven), kl.constant(np.asarray(3, dtype)))
                want = _squash(want)
            built.append(out)
            reference.append(np.asarray(want, dtype=dtype))
    fetched = [*range(4, len(built), fetch_every), len(built) - 1]
    kept = feed.copy()
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=optimizer)
    with pytest.MonkeyPatch.context() as patch:
        if not compiled:
            patch.setattr(CompiledLine, "compile", classmethod(lambda cls, schedule: None))
        with kl.Session(g, config) as sess:
            call = sess.make_callable([built[i] for i in fetched], [x])
            first = call(feed)
            second = call(feed)  # the same again: nothing left over from the first step
    for got in (first, second):
        for index, value_ in zip(fetched, got, strict=True):
            want = np.broadcast_to(reference[index], value_.shape)
            assert value_.dtype == np.dtype(dtype)
            if np.dtype(dtype).kind == "i":
                np.testing.assert_array_equal(value_, want)
            else:
                np.testing.assert_allclose(value_, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(feed, kept)
