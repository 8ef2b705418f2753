"""Differential and stress tests: random DAGs against numpy, on the CPU alone and split
across the CPU and the fake accelerator, and one session hammered from eight threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp

Array = np.ndarray
SHAPE = (4, 4)

# op -> (kl builder, numpy reference, arity). Every op that can grow values is followed
# by tanh, so a 50-node DAG stays finite and the comparison stays tight.
OPS: dict[str, tuple[Callable[..., kl.Tensor], Callable[..., Array], int]] = {
    "neg": (kl.ops.neg, np.negative, 1),
    "relu": (kl.ops.relu, lambda a: np.maximum(a, 0), 1),
    "sigmoid": (kl.ops.sigmoid, lambda a: 1 / (1 + np.exp(-a)), 1),
    "tanh": (kl.ops.tanh, np.tanh, 1),
    "square": (lambda a: kl.ops.tanh(kl.ops.square(a)), lambda a: np.tanh(a * a), 1),
    "add": (lambda a, b: kl.ops.tanh(kl.ops.add(a, b)), lambda a, b: np.tanh(a + b), 2),
    "sub": (lambda a, b: kl.ops.tanh(kl.ops.sub(a, b)), lambda a, b: np.tanh(a - b), 2),
    "mul": (lambda a, b: kl.ops.tanh(kl.ops.mul(a, b)), lambda a, b: np.tanh(a * b), 2),
    "matmul": (
        lambda a, b: kl.ops.tanh(kl.ops.mat_mul(a, b)),
        lambda a, b: np.tanh(a @ b),
        2,
    ),
}


@dataclass(frozen=True)
class Dag:
    nodes: tuple[tuple[str, tuple[int, ...]], ...]
    """(op, input indices); index 0 is the fed x, 1 and 2 are constants."""
    fetch_extra: tuple[int, ...]


@st.composite
def dags(draw: st.DrawFn) -> Dag:
    n = draw(st.integers(1, 25))  # up to 50 graph nodes with the tanh after binary ops
    nodes = []
    for i in range(n):
        op = draw(st.sampled_from(sorted(OPS)))
        arity = OPS[op][2]
        inputs = tuple(draw(st.integers(0, i + 2)) for _ in range(arity))
        nodes.append((op, inputs))
    extra = tuple(draw(st.lists(st.integers(0, n + 2), max_size=3)))
    return Dag(tuple(nodes), extra)


CONSTS = (
    np.linspace(-1, 1, 16).reshape(SHAPE),
    np.cos(np.arange(16.0)).reshape(SHAPE),
)


def fetched(dag: Dag) -> list[int]:
    used = {i for _, inputs in dag.nodes for i in inputs}
    sinks = [i + 3 for i in range(len(dag.nodes)) if i + 3 not in used]
    return sorted(set(sinks) | set(dag.fetch_extra))


def reference(dag: Dag, xv: Array) -> list[Array]:
    values = [xv, *CONSTS]
    for op, inputs in dag.nodes:
        values.append(OPS[op][1](*(values[i] for i in inputs)))
    return [values[i] for i in fetched(dag)]


def build(dag: Dag, registry: klp.Registry) -> tuple[kl.Graph, kl.Tensor, list[kl.Tensor]]:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float64, SHAPE, name="x")
        values = [x, *(kl.constant(c) for c in CONSTS)]
        for op, inputs in dag.nodes:
            values.append(OPS[op][0](*(values[i] for i in inputs)))
    return g, x, [values[i] for i in fetched(dag)]


@pytest.fixture(scope="module")
def registries() -> dict[str, klp.Registry]:
    return {"cpu": make_registry(), "cpu+accel": make_registry(accel=True)}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(dag=dags(), seed=st.integers(0, 2**16))
def test_random_dags_match_numpy_on_every_device_mix_and_thread_count(
    registries: dict[str, klp.Registry], dag: Dag, seed: int
) -> None:
    xv = np.random.default_rng(seed).uniform(-1, 1, SHAPE)
    expected = reference(dag, xv)
    for registry in registries.values():
        g, x, outputs = build(dag, registry)
        for threads in (1, 4):
            with kl.Session(g, kl.SessionConfig(inter_op_threads=threads)) as sess:
                # Untraced, one thread: the straight-line executor (and, with 4 threads,
                # for DAGs whose expensive nodes form a chain); traced: the general one.
                # With 4 threads the first run times the expensive nodes and their marks
                # turn (kernel_costs): the later runs take the schedules that allows.
                for trace in (False, True, False, False):
                    got = sess.run(outputs, {x: xv}, kl.RunOptions(trace=trace))
                    for want, have in zip(expected, got, strict=True):
                        np.testing.assert_allclose(have, want, rtol=1e-12, atol=1e-12)


def test_a_random_dag_really_is_split_across_both_devices(
    registries: dict[str, klp.Registry],
) -> None:
    dag = Dag((("matmul", (0, 1)), ("sigmoid", (3,)), ("add", (4, 2))), ())
    g, x, outputs = build(dag, registries["cpu+accel"])
    md = kl.RunMetadata()
    xv = np.random.default_rng(0).uniform(-1, 1, SHAPE)
    with kl.Session(g) as sess:
        got = sess.run(outputs, {x: xv}, run_metadata=md)
    np.testing.assert_allclose(got[0], reference(dag, xv)[0], rtol=1e-12)
    assert len(md.partition_graphs) == 2
    assert sum(md.copies.values()) >= 3  # feed in, the sigmoid round trip, fetch out


def test_eight_threads_times_200_runs_with_mixed_signatures() -> None:
    registry = make_registry(accel=True)
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((8, 16))
    w2 = rng.standard_normal((16, 4))
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float64, [None, 8], name="x")
        h = kl.ops.tanh(kl.ops.mat_mul(x, kl.constant(w1)), name="h")  # tanh: CPU only
        logits = kl.ops.mat_mul(h, kl.constant(w2), name="logits")
        probs = kl.ops.softmax(logits, name="probs")

    def ref_h(xv: Array) -> Array:
        return np.tanh(xv @ w1)

    def softmax(z: Array) -> Array:
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    signatures: list[Callable[[kl.Session, Array], None]] = [
        lambda s, v: np.testing.assert_allclose(
            s.run(probs, {x: v}), softmax(ref_h(v) @ w2), rtol=1e-10
        ),
        lambda s, v: np.testing.assert_allclose(s.run(h, {x: v}), ref_h(v), rtol=1e-10),
        lambda s, v: np.testing.assert_allclose(
            s.run(logits, {h: v[:, :4] @ np.ones((4, 16))}),
            (v[:, :4] @ np.ones((4, 16))) @ w2,
            rtol=1e-10,
        ),
        lambda s, v: [
            np.testing.assert_allclose(a, b, rtol=1e-10)
            for a, b in zip(
                s.run([h, probs], {x: v}), [ref_h(v), softmax(ref_h(v) @ w2)], strict=True
            )
        ],
    ]
    before = threading.active_count()
    errors: list[BaseException] = []
    with kl.Session(g, kl.SessionConfig(inter_op_threads=4, intra_op_threads=1)) as sess:

        def worker(k: int) -> None:
            local = np.random.default_rng(k)
            try:
                for i in range(200):
                    batch = int(local.integers(1, 6))
                    signatures[(k + i) % 4](sess, local.standard_normal((batch, 8)))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert not any(t.is_alive() for t in threads), "a run deadlocked"
        assert len(sess._compiled) == 4
    assert not errors, errors[0]
    assert threading.active_count() <= before
