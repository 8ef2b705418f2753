"""kl.cond and kl.while_loop end to end, against results computed directly in Python."""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry, run_workers

import kernloom as kl
import kernloom.plugin as klp
from kernloom import ops
from kernloom.graph.builder import apply_op
from kernloom.runtime import executor as executor_module
from kernloom.runtime import loop_schedule as loop_schedule_module


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry(faults=True)


@pytest.fixture(scope="module")
def accel_registry() -> klp.Registry:
    return make_registry(accel=True)


X = np.array([1.0, -2.0, 3.5], np.float32)


def guard(x: kl.Tensor, name: str = "guard") -> kl.Tensor:
    """FailIfNegative (a test op of the faults plugin)."""
    out = apply_op("FailIfNegative", [x], {}, name=name)
    assert isinstance(out, kl.Tensor)
    return out


# -- cond ------------------------------------------------------------------------------------------


def test_cond_runs_only_the_taken_branch(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        p = kl.placeholder(kl.bool_, [], name="p")
        y = kl.cond(p, lambda: x * 2.0 + 1.0, lambda: guard(x))
    with kl.Session(g) as s:
        # The false branch fails on negative input: it must not run when p is true.
        np.testing.assert_array_equal(s.run(y, {x: X, p: True}), X * 2 + 1)
        np.testing.assert_array_equal(s.run(y, {x: np.abs(X), p: False}), np.abs(X))
        with pytest.raises(kl.KernelError, match=r"'cond/guard'.*negative input"):
            s.run(y, {x: X, p: False})


def test_cond_branches_of_constants_and_structures(registry: klp.Registry) -> None:
    Pair = collections.namedtuple("Pair", "a b")
    g = kl.Graph(registry)
    with g.as_default():
        p = kl.placeholder(kl.bool_, [], name="p")
        n = kl.placeholder(kl.int32, [], name="n")
        out = kl.cond(
            p,
            lambda: {"k": Pair(kl.constant(1), n + 1), "z": [3.0]},
            lambda: {"k": Pair(2, n * 10), "z": [kl.constant(4.0)]},
        )
    assert isinstance(out["k"], Pair)
    with kl.Session(g) as s:
        assert s.run(out, {p: True, n: 5}) == {"k": Pair(1, 6), "z": [3.0]}
        assert s.run(out, {p: False, n: 5}) == {"k": Pair(2, 50), "z": [4.0]}


def test_cond_that_returns_an_outside_tensor_unchanged(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        p = kl.placeholder(kl.bool_, [], name="p")
        y = kl.cond(p, lambda: x, lambda: -x)
    with kl.Session(g) as s:
        np.testing.assert_array_equal(s.run(y, {x: X, p: True}), X)
        np.testing.assert_array_equal(s.run(y, {x: X, p: False}), -X)


def test_cond_errors_name_what_is_wrong(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        p = kl.placeholder(kl.bool_, [], name="p")
        f = kl.placeholder(kl.float32, [], name="f")
        with pytest.raises(kl.InvalidArgumentError, match="output 0 is int32 in true_fn"):
            kl.cond(p, lambda: kl.constant(1), lambda: kl.constant(1.0))
        with pytest.raises(kl.InvalidArgumentError, match="same structure"):
            kl.cond(p, lambda: [f, f], lambda: [f])
        with pytest.raises(kl.InvalidArgumentError, match=r"pred must be a bool scalar.*float32"):
            kl.cond(f, lambda: f, lambda: f)
        vector = kl.placeholder(kl.bool_, [2], name="v")
        with pytest.raises(kl.InvalidArgumentError, match="must be a scalar"):
            kl.cond(vector, lambda: f, lambda: f)


def test_fetching_a_tensor_of_the_untaken_branch_is_an_error(registry: klp.Registry) -> None:
    inside: list[kl.Tensor] = []
    g = kl.Graph(registry)
    with g.as_default():
        p = kl.placeholder(kl.bool_, [], name="p")

        def true_fn() -> kl.Tensor:
            inside.append(kl.constant(7.0) * 2.0)
            return inside[0]

        y = kl.cond(p, true_fn, lambda: kl.constant(1.0))
    with kl.Session(g) as s:
        assert s.run(inside[0], {p: True}) == 14.0
        with pytest.raises(kl.InvalidArgumentError, match="dead"):
            s.run(inside[0], {p: False})
        assert s.run(y, {p: False}) == 1.0  # and the session goes on


# -- while_loop ------------------------------------------------------------------------------------


def python_loop(n: int, x: np.ndarray) -> tuple[int, np.ndarray]:
    acc = np.zeros_like(x)
    for _ in range(n):
        acc = acc * np.float32(0.5) + x
    return n, acc


def counting_loop(
    registry: klp.Registry, parallel_iterations: int = 10
) -> tuple[kl.Graph, kl.Tensor, kl.Tensor, tuple[kl.Tensor, kl.Tensor]]:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        n = kl.placeholder(kl.int32, [], name="n")
        out = kl.while_loop(
            lambda i, a: i < n,
            lambda i, a: (i + 1, a * 0.5 + x),
            [0, ops.zeros_like(x)],
            parallel_iterations=parallel_iterations,
        )
    return g, x, n, out


@pytest.mark.parametrize("iterations", [0, 1, 2, 1000])
def test_while_loop_against_python(registry: klp.Registry, iterations: int) -> None:
    g, x, n, (i, acc) = counting_loop(registry)
    with kl.Session(g) as s:
        got_i, got_acc = s.run([i, acc], {x: X, n: iterations})
    want_i, want_acc = python_loop(iterations, X)
    assert got_i == want_i
    np.testing.assert_allclose(got_acc, want_acc, rtol=1e-6)


def test_parallel_iterations_1_and_16_give_identical_results(registry: klp.Registry) -> None:
    rng = np.random.default_rng(0)
    m = rng.standard_normal((16, 16)).astype(np.float32) / 4
    results = []
    for parallel in (1, 16):
        g = kl.Graph(registry)
        with g.as_default():
            w = kl.constant(m)

            def body(
                i: kl.Tensor, a: kl.Tensor, b: kl.Tensor, w: kl.Tensor = w
            ) -> tuple[kl.Tensor, ...]:
                # b does not depend on a: iterations overlap when parallel_iterations allows
                return i + 1, ops.tanh(ops.mat_mul(a, w)), b + ops.sum(ops.mat_mul(w, w), [0, 1])

            out = kl.while_loop(
                lambda i, a, b: i < 40,
                body,
                [0, kl.constant(np.eye(16, dtype=np.float32)), 0.0],
                parallel_iterations=parallel,
            )
        with kl.Session(g, kl.SessionConfig(inter_op_threads=4)) as s:
            results.append(s.run(out))
    a, b = np.eye(16, dtype=np.float32), np.float32(0)
    for _ in range(40):
        a, b = np.tanh(a @ m), b + np.sum(m @ m)
    for got in results:
        assert got[0] == 40
        np.testing.assert_allclose(got[1], a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2], b, rtol=1e-5)
    for x, y in zip(results[0], results[1], strict=True):
        np.testing.assert_array_equal(x, y)


def nested_sum(n: int) -> int:
    total = 0
    for i in range(n):
        for _ in range(i):
            total += 1
    return total


def test_nested_loops(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")

        def outer(i: kl.Tensor, total: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            _, inner = kl.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + 1), [0, total])
            return i + 1, inner

        _, total = kl.while_loop(lambda i, t: i < n, outer, [0, 0])
    with kl.Session(g) as s:
        for value in (0, 1, 2, 7, 20):
            assert s.run(total, {n: value}) == nested_sum(value)


def test_cond_inside_a_loop_and_a_loop_inside_a_cond(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        k = kl.placeholder(kl.int32, [], name="k")
        p = kl.placeholder(kl.bool_, [], name="p")
        _, acc = kl.while_loop(
            lambda i, a: i < n,
            lambda i, a: (i + 1, kl.cond(i < k, lambda: a + 1, lambda: a + 100)),
            [0, 0],
        )
        chosen = kl.cond(
            p,
            lambda: kl.while_loop(lambda v: v < 50, lambda v: v * 2, [n + 1])[0],
            lambda: kl.while_loop(lambda v: v > 0, lambda v: v - 3, [n])[0],
        )
    with kl.Session(g) as s:
        for nv, kv in ((0, 0), (5, 2), (10, 10), (6, 0)):
            assert s.run(acc, {n: nv, k: kv}) == sum(1 if i < kv else 100 for i in range(nv))
        for nv in (0, 3, 10, 70):
            v = nv + 1
            while v < 50:
                v *= 2
            assert s.run(chosen, {n: nv, p: True}) == v
            w = nv
            while w > 0:
                w -= 3
            assert s.run(chosen, {n: nv, p: False}) == w


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 6),
    st.integers(0, 6),
    st.integers(-3, 3),
    st.sampled_from([1, 2, 16]),
)
def test_random_nested_loops_with_conds(
    outer_n: int, inner_n: int, threshold: int, parallel: int
) -> None:
    registry = _shared_registry()
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        m = kl.placeholder(kl.int32, [], name="m")
        t = kl.placeholder(kl.int32, [], name="t")

        def outer(i: kl.Tensor, acc: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            def inner(j: kl.Tensor, a: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
                return j + 1, kl.cond(j - i < t, lambda: a + j, lambda: a - i)

            _, acc = kl.while_loop(
                lambda j, a: j < m, inner, [0, acc], parallel_iterations=parallel
            )
            return i + 1, acc * 2

        _, out = kl.while_loop(lambda i, a: i < n, outer, [0, 1], parallel_iterations=parallel)
    acc = 1
    for i in range(outer_n):
        for j in range(inner_n):
            acc = acc + j if j - i < threshold else acc - i
        acc *= 2
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2)) as s:
        assert s.run(out, {n: outer_n, m: inner_n, t: threshold}) == acc


_registry_cache: list[klp.Registry] = []


def _shared_registry() -> klp.Registry:
    if not _registry_cache:
        _registry_cache.append(make_registry())
    return _registry_cache[0]


def test_maximum_iterations_and_shape_invariants(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        (capped,) = kl.while_loop(lambda i: i < 100, lambda i: i + 1, [0], maximum_iterations=7)
        grown = kl.while_loop(
            lambda v: ops.less(ops.sum(v, [0]), 20.0),
            lambda v: ops.concat_v2([v, v], 0),
            kl.constant([1.0, 2.0]),
            shape_invariants=kl.TensorShape([None]),
        )
        with pytest.raises(
            kl.InvalidArgumentError, match=r"shape \(2,\), but has shape \(4,\) after one iteration"
        ):
            kl.while_loop(
                lambda v: ops.less(ops.sum(v, [0]), 20.0),
                lambda v: ops.concat_v2([v, v], 0),
                kl.constant([1.0, 2.0]),
            )
        with pytest.raises(kl.InvalidArgumentError, match="enters the loop as int32"):
            kl.while_loop(lambda i: i < 3, lambda i: ops.cast(i, DstT=kl.float32), [0])
        with pytest.raises(kl.InvalidArgumentError, match="parallel_iterations"):
            kl.while_loop(lambda i: i < 3, lambda i: i + 1, [0], parallel_iterations=0)
    assert grown.shape == kl.TensorShape([None])
    with kl.Session(g) as s:
        assert s.run(capped) == 7
        np.testing.assert_array_equal(s.run(grown), np.tile([1.0, 2.0], 8))


def test_a_loop_body_across_the_cpu_and_the_fake_accelerator(accel_registry: klp.Registry) -> None:
    g, x, n, (i, acc) = counting_loop(accel_registry, parallel_iterations=4)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2)) as s:
        for iterations in (0, 1, 30):
            md = kl.RunMetadata()
            got_i, got_acc = s.run([i, acc], {x: X, n: iterations}, run_metadata=md)
            want_i, want_acc = python_loop(iterations, X)
            assert got_i == want_i
            np.testing.assert_allclose(got_acc, want_acc, rtol=1e-6)
            devices = {md.placement[node] for node in md.placement}
            assert len(devices) == 2  # the float body on FAKE_ACCEL, the int counter on CPU
            # Per iteration, the predicate crosses to the accelerator's control loop.
            assert sum(md.copies.values()) >= iterations


def test_nested_loops_across_devices(accel_registry: klp.Registry) -> None:
    g = kl.Graph(accel_registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        n = kl.placeholder(kl.int32, [], name="n")

        def outer(i: kl.Tensor, t: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            _, inner = kl.while_loop(lambda j, u: j < i, lambda j, u: (j + 1, u + x), [0, t])
            return i + 1, inner

        _, total = kl.while_loop(lambda i, t: i < n, outer, [0, ops.zeros_like(x)])
    with kl.Session(g) as s:
        for value in (0, 1, 6):
            np.testing.assert_allclose(s.run(total, {x: X, n: value}), X * nested_sum(value))


def test_an_error_in_a_loop_body_names_node_frame_and_iteration(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        start = kl.placeholder(kl.float32, [], name="start")
        # FailIfNegative has no shape function: its output's shape is unknown.
        _, out = kl.while_loop(
            lambda i, v: i < 10,
            lambda i, v: (i + 1, guard(v - 1.0, name="check")),
            [0, start],
            shape_invariants=[kl.TensorShape([]), kl.TensorShape(None)],
        )
    with kl.Session(g) as s:
        with pytest.raises(kl.KernelError) as info:
            s.run(out, {start: 3.5})  # v - 1: 2.5, 1.5, 0.5, then -0.5 in iteration 3
        message = str(info.value)
        assert "'while/check'" in message and "frame 'while' iteration 3" in message
        assert s.run(out, {start: 20.0}) == 10.0  # the session is still usable
        assert threading.active_count() < 50


@pytest.mark.parametrize("threads", [1, 4])
def test_a_kernels_bad_argument_in_a_loop_names_the_node_once(
    registry: klp.Registry, threads: int
) -> None:
    """``ctx.fail``'s error names the node already: the loop frame, the iteration and the
    device go into that name, not before a second copy of it."""
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        table = kl.constant([1.0, 2.0, 3.0])
        _, out = kl.while_loop(
            lambda i, a: i < n,
            lambda i, a: (i + 1, a + ops.gather_v2(table, i, 0, name="pick")),
            [0, 0.0],
        )
    with kl.Session(g, kl.SessionConfig(inter_op_threads=threads)) as s:
        with pytest.raises(kl.InvalidArgumentError) as info:
            s.run(out, {n: 5})  # index 3 in iteration 3
        assert isinstance(info.value, kl.KernelArgumentError)
        assert str(info.value) == (
            "node 'while/pick' (op GatherV2) in frame 'while' iteration 3 on "
            "/job:localhost/replica:0/task:0/device:CPU:0: indices[] = 3 is not in [0, 3)"
        )
        assert s.run(out, {n: 3}) == 6.0  # 1 + 2 + 3


def test_a_loop_that_never_ends_stops_at_the_deadline(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        (forever,) = kl.while_loop(lambda i: i > -1, lambda i: i + 1, [0])
        (short,) = kl.while_loop(lambda i: i < 3, lambda i: i + 1, [0])
    with kl.Session(g) as s:
        with pytest.raises(kl.DeadlineExceededError):
            s.run(forever, options=kl.RunOptions(timeout_s=0.3))
        assert s.run(short) == 3


def test_loops_survive_a_json_round_trip_and_trace(registry: klp.Registry) -> None:
    g, _, _, (i, acc) = counting_loop(registry)
    again = kl.Graph.from_json(g.to_json(), registry=registry)
    with kl.Session(again) as s:
        md = kl.RunMetadata()
        got = s.run([i.name, acc.name], {"x": X, "n": 5}, kl.RunOptions(trace=True), md)
    np.testing.assert_allclose(got[1], python_loop(5, X)[1], rtol=1e-6)
    assert md.step_stats is not None
    merges = [e for e in md.step_stats.nodes if e.node == "while/merge"]
    assert len(merges) == 6  # iterations 0..5 each pass the Merge once


def test_many_threads_run_loops_at_once(registry: klp.Registry) -> None:
    g, x, n, (_, acc) = counting_loop(registry)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=3)) as s:

        def worker(seed: int) -> None:
            for k in range(20):
                iterations = (seed * 7 + k) % 13
                got = s.run(acc, {x: X, n: iterations})
                np.testing.assert_allclose(got, python_loop(iterations, X)[1], rtol=1e-6)

        errors = run_workers(worker, 6)
    assert not errors


# -- malformed loops -------------------------------------------------------------------------------


def run_raw(registry: klp.Registry, build: object) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        fetch = build()  # type: ignore[operator]
    with kl.Session(g) as s:
        s.run(fetch)


def test_a_node_fed_from_two_frames_is_rejected(registry: klp.Registry) -> None:
    def build() -> kl.Tensor:
        outside = kl.constant(1, name="outside")
        e = ops.enter(kl.constant(0), frame_name="f")
        return ops.add(e, outside, name="mixed")

    with pytest.raises(kl.InvalidArgumentError, match=r"'mixed'.*fed from two frames.*'outside'"):
        run_raw(registry, build)


def test_an_exit_outside_any_frame_is_rejected(registry: klp.Registry) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=r"'lost'.*outside any loop frame"):
        run_raw(registry, lambda: ops.exit(kl.constant(1), name="lost"))


def test_a_next_iteration_that_feeds_no_merge_is_rejected(registry: klp.Registry) -> None:
    def build() -> kl.Tensor:
        e = ops.enter(kl.constant(1), frame_name="f")
        m, _ = ops.merge([e, e], name="top")
        following = ops.next_iteration(m, name="again")
        # The back edge goes into an Add instead of the Merge.
        add = ops.add(e, e, name="wrong")
        kl.get_default_graph().update_input(add.node, 1, following)
        return ops.exit(add)

    with pytest.raises(kl.InvalidArgumentError, match=r"'again' feeds node 'wrong'.*must feed"):
        run_raw(registry, build)


# -- buffers in loop frames ---------------------------------------------------------------------


@pytest.mark.parametrize("parallel_iterations", [1, 10])
def test_a_loop_body_overwrites_its_own_values_but_never_an_invariant_or_the_feed(
    registry: klp.Registry, parallel_iterations: int
) -> None:
    """The frame-aware propagator forwards by the simple one's rule: ``v * k + 1`` in the
    body writes into ``v``'s buffer (nothing else holds it once taken), while ``k`` -- a loop
    invariant delivered to every iteration -- and the fed start value stay intact."""
    n = 5
    g = kl.Graph(registry)
    with g.as_default():
        v0 = kl.placeholder(kl.float32, [64], name="v0")
        k = kl.placeholder(kl.float32, [64], name="k")
        _, out = kl.while_loop(
            lambda i, v: i < n,
            lambda i, v: (i + 1, ops.add(ops.mul(v, k, name="scale"), kl.constant(1.0))),
            [kl.constant(0), v0],
            parallel_iterations=parallel_iterations,
        )
    rng = np.random.default_rng(11)
    v0v = rng.standard_normal(64).astype(np.float32)
    kv = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    v0_before, k_before = v0v.copy(), kv.copy()
    want = v0v.astype(np.float64)
    for _ in range(n):  # the loop computed directly
        want = want * kv + 1.0
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        got = sess.run(out, {v0: v0v, k: kv}, kl.RunOptions(trace=True), run_metadata=md)
        again = sess.run(out, {v0: v0v, k: kv})  # untraced: the same node loop
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(again, want, rtol=1e-5)
    np.testing.assert_array_equal(v0v, v0_before)
    np.testing.assert_array_equal(kv, k_before)
    scale = [s.forwarded for s in md.step_stats.nodes if s.node.endswith("scale")]
    assert len(scale) == n
    # The first iteration's v is the caller's feed (never overwritten); every later one
    # is the previous iteration's own result, overwritten in place.
    assert scale.count(((0, 0),)) == n - 1


def test_an_unobserved_loop_delivers_through_pass_throughs_a_traced_one_runs_them(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Identity and NextIteration (the core's pass-through kernels) are delivered through
    without a node run when nobody observes the step; a traced step runs and reports each
    of them every iteration, and both give the loop's result."""
    n = 4
    ran: list[tuple[str, str]] = []
    run_sync = executor_module.run_sync

    def spy(ctx: Any, item: Any, inputs: list[Any], forward: bool) -> list[Any]:
        ran.append((item.name, item.node.op))
        return run_sync(ctx, item, inputs, forward)

    monkeypatch.setattr(executor_module, "run_sync", spy)
    run_rows = loop_schedule_module.LoopSchedule._run_rows

    def rows_spy(self: Any, rows: Any, *args: Any) -> Any:  # the loop's static schedule
        ran.extend((row[1].name, row[1].node.op) for row in rows)
        return run_rows(self, rows, *args)

    monkeypatch.setattr(loop_schedule_module.LoopSchedule, "_run_rows", rows_spy)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        _, out = kl.while_loop(
            lambda i, v: i < n,
            lambda i, v: (i + 1, ops.identity(ops.mul(v, kl.constant(2.0)), name="copy")),
            [kl.constant(0), x],
        )
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        plain = sess.run(out, {x: X})
        unobserved = list(ran)
        md = kl.RunMetadata()
        traced = sess.run(out, {x: X}, kl.RunOptions(trace=True), run_metadata=md)
    np.testing.assert_array_equal(plain, X * 2.0**n)
    np.testing.assert_array_equal(traced, X * 2.0**n)
    assert sum(1 for _, op in unobserved if op == "Mul") == n  # the body ran
    passes = {"Identity", "Enter", "Exit", "NextIteration"}
    assert not [name for name, op in unobserved if op in passes]
    seen = [s.node for s in md.step_stats.nodes]  # a traced step reports the live runs
    assert sum(1 for name in seen if name.endswith("copy")) == n
    assert sum(1 for name in seen if "next_iteration" in name) == 2 * n


# -- shape invariants: TensorFlow 1's rule ---------------------------------------------------------

# (entry shape, body result's shape, shape invariant or None for the default, accepted): each
# outcome is tf.compat.v1.while_loop's (control flow v1, TensorFlow 2.21), which raises
# "Input tensor 'x:0' enters the loop with shape (2,), but has shape (None,) after one
# iteration. To allow the shape to vary across iterations, use the `shape_invariants`
# argument of tf.while_loop to specify a less-specific shape." for each refused one.
# ``None`` as a shape: an unknown rank.
INVARIANT_CASES = [
    ([2], [None], None, False),
    ([2], [3], [None], True),
    ([2], [3], None, False),
    ([2], None, None, False),
    (None, [3], None, True),
    ([], None, None, False),
    ([], [], None, True),
    ([None, 2], [None, None], None, False),
    ([None, 2], [5, 2], None, True),
    ([2, 3], [None, None], [None, 3], False),
    ([2, 3], [None, 2], [None, 3], False),
    ([2], [2, 1], None, False),
]


@pytest.mark.parametrize(("entry", "body", "invariant", "accepted"), INVARIANT_CASES)
def test_a_body_result_must_be_as_specific_as_the_shape_invariant(
    registry: klp.Registry,
    entry: list[int | None] | None,
    body: list[int | None] | None,
    invariant: list[int | None] | None,
    accepted: bool,
) -> None:
    """The body's result for a loop variable must have the invariant's rank and every
    dimension the invariant knows (TensorFlow's ``_EnforceShapeInvariant``); a merely
    compatible one was accepted, and the loop's output claimed the invariant's shape."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, entry, name="x")
        y = kl.placeholder(kl.float32, body, name="y")
        kwargs: dict[str, Any] = {}
        if invariant is not None:
            kwargs["shape_invariants"] = [kl.TensorShape([]), kl.TensorShape(invariant)]
        if accepted:
            _, out = kl.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, y), [0, x], **kwargs)
            assert out.shape == kl.TensorShape(entry if invariant is None else invariant)
            return
        with pytest.raises(kl.InvalidArgumentError) as info:
            kl.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, y), [0, x], **kwargs)
    message = str(info.value)
    assert f"loop variable 1 ('x:0') enters the loop with shape {kl.TensorShape(entry)}" in message
    assert f"but has shape {kl.TensorShape(body)} after one iteration" in message
    assert "shape_invariants=" in message
    if invariant is not None:
        assert f"(shape invariant {kl.TensorShape(invariant)})" in message


def test_a_grown_loop_variable_needs_a_shape_invariant_and_then_gives_right_shapes(
    registry: klp.Registry,
) -> None:
    """concat([x, z]) of shape (?,) for an x that enters as (2,): refused as TensorFlow 1
    refuses it. It was accepted and the output kept the static shape (2,) while holding 4
    values, so fill(shape(out)) gave 2 values with the optimizer (constant folding trusts
    the static shape) and reshape(out, [-1, 2]) claimed (1, 2)."""
    g = kl.Graph(registry)
    with g.as_default():
        z = kl.placeholder(kl.float32, [None], name="z")
        x = kl.constant([1.0, 2.0], name="x")

        def body(i: kl.Tensor, v: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            return i + 1, ops.concat_v2([v, z], 0)

        with pytest.raises(
            kl.InvalidArgumentError,
            match=r"loop variable 1 \('x:0'\) enters the loop with shape \(2,\), but has shape "
            r"\(\?,\) after one iteration.*shape_invariants=",
        ):
            kl.while_loop(lambda i, v: i < 2, body, [0, x])
        _, out = kl.while_loop(
            lambda i, v: i < 2,
            body,
            [0, x],
            shape_invariants=[kl.TensorShape([]), kl.TensorShape([None])],
        )
        filled = ops.fill(ops.shape(out), 7.0)
        rows = ops.reshape(out, [-1, 2])
    assert out.shape == kl.TensorShape([None]) and rows.shape == kl.TensorShape([None, 2])
    for config in (None, kl.SessionConfig(graph_optimizer=False)):
        with kl.Session(g, config) as s:
            got, got_filled, got_rows = s.run([out, filled, rows], {z: [5.0]})
        np.testing.assert_array_equal(got, [1.0, 2.0, 5.0, 5.0])
        np.testing.assert_array_equal(got_filled, [7.0] * 4)
        assert got_rows.shape == (2, 2)


# -- namedtuple loop variables ---------------------------------------------------------------------

Point = collections.namedtuple("Point", "a b")


def test_namedtuple_loop_vars_are_unpacked_into_the_arguments(registry: klp.Registry) -> None:
    """tf.compat.v1.while_loop calls cond(*loop_vars) and body(*loop_vars) for a namedtuple
    as for a list or tuple; kl.while_loop passed the namedtuple as one argument. TensorFlow
    2.21's values: P(a=3, b=8.0); with maximum_iterations=2, P(a=2, b=4.0); nested in a
    list, (3, P(a=3, b=8.0)); kl.cond returning one, P(a=1, b=2.0)."""
    seen: list[tuple[Any, ...]] = []
    g = kl.Graph(registry)
    with g.as_default():

        def cond_fn(a: kl.Tensor, b: kl.Tensor) -> kl.Tensor:
            seen.append((a, b))
            return a < 3

        def body_fn(a: kl.Tensor, b: kl.Tensor) -> Point:
            return Point(a + 1, b * 2.0)

        start = Point(kl.constant(0), kl.constant(1.0))
        out = kl.while_loop(cond_fn, body_fn, start)
        capped = kl.while_loop(cond_fn, body_fn, start, maximum_iterations=2)
        nested = kl.while_loop(
            lambda i, p: i < 3, lambda i, p: [i + 1, Point(p.a + 1, p.b * 2.0)], [0, start]
        )
        # A tuple for the namedtuple is accepted (TensorFlow returns the body's structure,
        # a tuple; kl.while_loop returns that of loop_vars).
        as_tuple = kl.while_loop(cond_fn, lambda a, b: (a + 1, b * 2.0), start)
        chosen = kl.cond(kl.constant(True), lambda: Point(1, 2.0), lambda: Point(3, 4.0))
    assert all(isinstance(a, kl.Tensor) and isinstance(b, kl.Tensor) for a, b in seen)
    assert isinstance(out, Point) and isinstance(nested[1], Point) and isinstance(chosen, Point)
    with kl.Session(g) as s:
        assert s.run(out) == Point(3, 8.0)
        assert s.run(capped) == Point(2, 4.0)
        assert s.run(nested) == [3, Point(3, 8.0)]
        assert s.run(as_tuple) == Point(3, 8.0)
        assert s.run(chosen) == Point(1, 2.0)


def test_a_namedtuple_body_must_keep_the_structure(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        start = Point(kl.constant(0), kl.constant(1.0))
        with pytest.raises(kl.InvalidArgumentError, match="structure of loop_vars"):
            kl.while_loop(lambda a, b: a < 3, lambda a, b: (a + 1,), start)
        with pytest.raises(kl.InvalidArgumentError, match="structure of loop_vars"):
            kl.while_loop(lambda a, b: a < 3, lambda a, b: Point(a + 1, [b, b]), start)


def test_a_shape_known_outside_the_loop_keeps_the_body_s_results_as_specific() -> None:
    """A constant shape made outside the loop (an ``Enter`` brings it in) and ``shape(x)``
    of a fully known ``x`` are known to shape inference, as TensorFlow's shape refiner
    knows them: the reshape in the body keeps (2, 3), so the loop's shape invariant holds
    (it was (?, ?), refused by the invariant check)."""
    g = kl.Graph()
    with g.as_default():
        target = kl.constant(np.array([2, 3], np.int32))
        x = kl.placeholder(kl.float32, [2, 3])
        i0 = kl.constant(0)
        outside = kl.while_loop(
            lambda i, v: i < 3, lambda i, v: (i + 1, kl.ops.reshape(v * 2.0, target)), [i0, x]
        )
        shape_of = kl.while_loop(
            lambda i, v: i < 3,
            lambda i, v: (i + 1, kl.ops.reshape(v * 2.0, kl.ops.shape(x))),
            [i0, x],
        )
    assert outside[1].shape == (2, 3) and shape_of[1].shape == (2, 3)
    with kl.Session(g) as sess:
        a, b = sess.run([outside[1], shape_of[1]], {x: np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(a, np.full((2, 3), 8.0))
    np.testing.assert_array_equal(b, np.full((2, 3), 8.0))


def test_a_partly_known_shape_of_a_tensor_shapes_what_it_builds() -> None:
    """``shape(h)`` of an ``h`` of shape (?, 8, 8, 4) gives ``reshape``, ``fill`` and
    ``broadcast_to`` that shape (TensorFlow's MakeShapeFromShapeTensor), so a loop body that
    reshapes a dynamic batch keeps its loop variable's invariant (?, 8, 8, 4)."""
    g = kl.Graph()
    with g.as_default():
        h = kl.placeholder(kl.float32, [None, 8, 8, 4])
        flat = kl.placeholder(kl.float32, [None, 256])
        assert kl.ops.reshape(flat, kl.ops.shape(h)).shape.as_list() == [None, 8, 8, 4]
        assert kl.ops.fill(kl.ops.shape(h), kl.constant(1.0)).shape.as_list() == [None, 8, 8, 4]
        i0 = kl.constant(0)
        _, out = kl.while_loop(
            lambda i, v: i < 2,
            lambda i, v: (i + 1, kl.ops.reshape(kl.ops.reshape(v, [-1, 256]), kl.ops.shape(h))),
            [i0, h],
        )
    assert out.shape.as_list() == [None, 8, 8, 4]
    x = np.arange(3 * 256, dtype=np.float32).reshape(3, 8, 8, 4)
    with kl.Session(g) as sess:
        np.testing.assert_array_equal(sess.run(out, {h: x}), x)
