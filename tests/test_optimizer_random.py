"""Random-graph differential tests: random DAGs of elementwise ops, matrix products and
reductions over constants and placeholders (shapes that broadcast to [4, 4]) return the
same fetches with the optimizer on and off, and match a numpy evaluation of the same DAG
written here independently."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernloom as kl

Array = np.ndarray[Any, Any]
SHAPES = ((), (4,), (4, 1), (4, 4))

BINARY: dict[str, tuple[Callable[..., Any], Callable[[Array, Array], Array]]] = {
    "add": (kl.ops.add, np.add),
    "sub": (kl.ops.sub, np.subtract),
    "mul": (kl.ops.mul, np.multiply),
    "maximum": (kl.ops.maximum, np.maximum),
    "minimum": (kl.ops.minimum, np.minimum),
}
UNARY: dict[str, tuple[Callable[..., Any], Callable[[Array], Array]]] = {
    "neg": (kl.ops.neg, np.negative),
    "tanh": (kl.ops.tanh, np.tanh),
    "square": (kl.ops.square, np.square),
    "sigmoid": (kl.ops.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "relu": (kl.ops.relu, lambda x: np.maximum(x, 0)),
    "identity": (kl.ops.identity, lambda x: x),
}


@st.composite
def programs(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Instructions over a growing pool of values: leaves first, then ops."""
    steps: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(2, 4))):
        kind = draw(st.sampled_from(["const", "const", "feed"]))
        shape = draw(st.sampled_from(SHAPES))
        value = draw(st.integers(0, 2**31 - 1))
        special = draw(st.sampled_from(["random", "random", "zeros", "ones"]))
        steps.append((kind, shape, value, special))
    for _ in range(draw(st.integers(1, 14))):
        size = len(steps)
        choice = draw(st.sampled_from(["binary", "binary", "unary", "matmul", "sum", "add_n"]))
        a, b = draw(st.integers(0, size - 1)), draw(st.integers(0, size - 1))
        if choice == "binary":
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), a, b))
        elif choice == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), a))
        else:
            steps.append((choice, a, b))
    fetched = draw(st.lists(st.integers(0, len(steps) - 1), min_size=1, max_size=3, unique=True))
    steps.append(("fetch", *fetched))
    return steps


def _leaf(shape: tuple[int, ...], seed: int, special: str) -> Array:
    if special == "zeros":
        return np.zeros(shape)
    if special == "ones":
        return np.ones(shape)
    return np.random.default_rng(seed).uniform(-1.5, 1.5, shape)


def build(
    steps: list[tuple[Any, ...]],
) -> tuple[kl.Graph, list[Any], dict[Any, Array], list[Array]]:
    """The graph, its fetches and feeds, and the numpy values of the fetches."""
    g = kl.Graph()
    tensors: list[Any] = []
    values: list[Array] = []
    feeds: dict[Any, Array] = {}
    with g.as_default():
        for step in steps[:-1]:
            kind = step[0]
            if kind in ("const", "feed"):
                value = _leaf(step[1], step[2], step[3])
                if kind == "const":
                    tensors.append(kl.constant(value))
                else:
                    tensor = kl.placeholder(kl.float64, step[1])
                    feeds[tensor] = value
                    tensors.append(tensor)
                values.append(value)
            elif kind == "binary":
                op, fn = BINARY[step[1]]
                tensors.append(op(tensors[step[2]], tensors[step[3]]))
                values.append(fn(values[step[2]], values[step[3]]))
            elif kind == "unary":
                op1, fn1 = UNARY[step[1]]
                tensors.append(op1(tensors[step[2]]))
                values.append(fn1(values[step[2]]))
            elif kind == "matmul":
                a, b = (np.broadcast_to(values[i], (4, 4)) for i in step[1:])
                ta, tb = (
                    tensors[i] if values[i].shape == (4, 4) else tensors[i] + np.zeros((4, 4))
                    for i in step[1:]
                )
                tensors.append(kl.ops.mat_mul(ta, tb))
                values.append(sum(a[:, [k]] * b[[k], :] for k in range(4)))  # outer products
            elif kind == "sum":
                x = values[step[1]]
                if x.ndim < 2:
                    tensors.append(kl.ops.identity(tensors[step[1]]))
                    values.append(x)
                else:
                    tensors.append(kl.ops.sum(tensors[step[1]], kl.constant(1), keep_dims=True))
                    values.append(x.sum(axis=1, keepdims=True))
            else:  # add_n of two same-shaped values, else an Add
                a, b = step[1], step[2]
                if values[a].shape == values[b].shape:
                    tensors.append(kl.ops.add_n([tensors[a], tensors[b], tensors[a]]))
                    values.append(values[a] + values[b] + values[a])
                else:
                    tensors.append(kl.ops.add(tensors[a], tensors[b]))
                    values.append(values[a] + values[b])
    fetched = list(steps[-1][1:])
    return g, [tensors[i] for i in fetched], feeds, [values[i] for i in fetched]


def _run(g: kl.Graph, fetches: list[Any], feeds: dict[Any, Array], **config: Any) -> list[Array]:
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, **config)) as sess:
        return list(sess.run(fetches, feeds))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_graphs_match_with_the_optimizer_on_and_off(steps: list[tuple[Any, ...]]) -> None:
    g, fetches, feeds, expected = build(steps)
    on = _run(g, fetches, feeds)
    off = _run(g, fetches, feeds, graph_optimizer=False)
    for got, plain, want in zip(on, off, expected, strict=True):
        assert got.shape == plain.shape == want.shape
        np.testing.assert_allclose(got, plain, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


CHAIN_OPS = ("add", "sub", "mul", "maximum", "minimum", "neg", "tanh", "square", "identity")


def _chain(ops: list[tuple[str, float, bool]], x: Any, numeric: bool) -> Any:
    """Apply ``ops`` (name, constant, constant on the left) to ``x``: a tensor, or a numpy
    value when ``numeric`` (the reference)."""
    for name, c, left in ops:
        const = np.float64(c) if numeric else kl.constant(np.float64(c))
        if name in BINARY:
            op, fn = BINARY[name]
            a, b = (const, x) if left else (x, const)
            x = fn(a, b) if numeric else op(a, b)
        else:
            op1, fn1 = UNARY[name]
            x = fn1(x) if numeric else op1(x)
    return x


chains = st.lists(
    st.tuples(
        st.sampled_from(CHAIN_OPS),
        st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0]),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains, chains, chains, st.sampled_from(["true", "false", "fed"]), st.booleans())
def test_random_conds_match_with_the_optimizer_on_and_off(
    before: list[Any], then: list[Any], otherwise: list[Any], pred: str, fed_value: bool
) -> None:
    """A random chain, then a kl.cond over two random chains (constants inside the
    branches), with a constant or a fed predicate: the optimizer folds, simplifies and
    removes dead branches without changing the result."""
    xv = np.linspace(-1.5, 1.5, 6).reshape(2, 3)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float64, [2, 3], name="x")
        p = kl.placeholder(kl.bool_, [], name="p") if pred == "fed" else kl.constant(pred == "true")
        h = _chain(before, x, numeric=False)
        out = kl.cond(
            p, lambda: _chain(then, h, numeric=False), lambda: _chain(otherwise, h, numeric=False)
        )
    feeds: dict[Any, Any] = {x: xv}
    if pred == "fed":
        feeds[p] = np.bool_(fed_value)
    taken = fed_value if pred == "fed" else pred == "true"
    want = _chain(then if taken else otherwise, _chain(before, xv, numeric=True), numeric=True)
    on = _run(g, [out], feeds)[0]
    off = _run(g, [out], feeds, graph_optimizer=False)[0]
    np.testing.assert_allclose(on, off, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(on, np.broadcast_to(want, (2, 3)), rtol=1e-9, atol=1e-12)
