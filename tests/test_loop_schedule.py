"""Loop frames on their static per-iteration schedule (``runtime/loop_schedule.py``).

Every loop is checked against a Python reference, and -- where it matters -- against the
same loop run by the general frame-aware propagator (a traced step always takes it). The
structural tests spy on ``LoopSchedule.run``: which frames ran on a schedule, never how
long they took.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry, run_workers

import kernloom as kl
import kernloom.plugin as klp
from kernloom import ops
from kernloom.framework.cancellation import CancellationManager
from kernloom.graph.builder import apply_op
from kernloom.runtime import executor as executor_module
from kernloom.runtime.loop_schedule import LoopSchedule
from kernloom.tf import import_graph_def


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry(faults=True)


ONE_THREAD = kl.SessionConfig(inter_op_threads=1)

_shared: list[klp.Registry] = []


def shared_registry() -> klp.Registry:
    if not _shared:
        _shared.append(make_registry(faults=True))
    return _shared[0]


@pytest.fixture
def scheduled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the frames that ran on their schedule, one entry per loop run."""
    ran: list[str] = []
    run = LoopSchedule.run

    def spy(self: LoopSchedule, *args: Any) -> Any:
        ran.append(self.frame.name)
        return run(self, *args)

    monkeypatch.setattr(LoopSchedule, "run", spy)
    return ran


def traced(s: kl.Session, fetches: Any, feeds: dict[Any, Any]) -> Any:
    """The same run on the general executor (a traced step never uses a schedule)."""
    return s.run(fetches, feeds, kl.RunOptions(trace=True), kl.RunMetadata())


def guard(x: kl.Tensor, name: str = "guard") -> kl.Tensor:
    """FailIfNegative (a test op of the faults plugin)."""
    out = apply_op("FailIfNegative", [x], {}, name=name)
    assert isinstance(out, kl.Tensor)
    return out


# -- chosen, and where not --------------------------------------------------------------------


def test_a_simple_loop_runs_on_its_schedule_and_no_body_node_through_the_node_loop(
    registry: klp.Registry, scheduled: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    run_sync = executor_module.run_sync

    def spy(ctx: Any, item: Any, inputs: list[Any], forward: bool) -> list[Any]:
        ran.append(item.node.op)
        return run_sync(ctx, item, inputs, forward)

    monkeypatch.setattr(executor_module, "run_sync", spy)
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        (out,) = kl.while_loop(lambda i: i < n, lambda i: i + 1, [0])
    with kl.Session(g, ONE_THREAD) as s:
        assert s.run(out, {n: 25}) == 25
        assert scheduled == ["while"]
        # The node loop ran no node of the frame: Less, LoopCond, Add ran on the schedule.
        assert not {"Less", "LoopCond", "Switch", "Merge", "Add"} & set(ran)
        assert traced(s, out, {n: 25}) == 25
        assert scheduled == ["while"]  # the traced step took the general executor


def test_loops_the_schedule_cannot_take_run_on_the_general_executor(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    """A kl.cond in the body (a Switch/Merge of its own) keeps a loop with the
    frame-aware propagator, and a loop nested in such a loop still runs on its schedule,
    once per outer iteration; a loop nesting a scheduled loop runs the inner loop as a
    row of its own schedule, once per outer iteration."""
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        k = kl.placeholder(kl.int32, [], name="k")
        _, with_cond = kl.while_loop(
            lambda i, a: i < n,
            lambda i, a: (i + 1, kl.cond(i < k, lambda: a + 1, lambda: a + 100)),
            [0, 0],
            name="with_cond",
        )

        def inner_loop(i: kl.Tensor, t: kl.Tensor) -> kl.Tensor:
            return kl.while_loop(
                lambda j, u: j < i, lambda j, u: (j + 1, u + j), [0, t], name="inner"
            )[1]

        def outer_body(i: kl.Tensor, t: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            return i + 1, inner_loop(i, t)

        def general_body(i: kl.Tensor, t: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            t = kl.cond(i < k, lambda: t * 2, lambda: t - 1)
            return i + 1, inner_loop(i, t)

        _, nested = kl.while_loop(lambda i, t: i < n, outer_body, [0, 0], name="outer")
        _, general = kl.while_loop(lambda i, t: i < n, general_body, [0, 1], name="general")
    with kl.Session(g, ONE_THREAD) as s:
        for nv, kv in ((0, 0), (5, 2), (6, 9)):
            scheduled.clear()
            got_cond, got_nested, got_general = s.run([with_cond, nested, general], {n: nv, k: kv})
            assert got_cond == sum(1 if i < kv else 100 for i in range(nv))
            assert got_nested == sum(j for i in range(nv) for j in range(i))
            want = 1
            for i in range(nv):
                want = want * 2 if i < kv else want - 1
                want += sum(range(i))
            assert got_general == want
            assert traced(s, general, {n: nv, k: kv}) == want  # the general executor alone
            assert "with_cond" not in scheduled and "general" not in scheduled
            assert scheduled.count("outer") == 1
            assert scheduled.count("outer/inner") == nv
            assert scheduled.count("general/inner") == nv
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2)) as s:
        scheduled.clear()
        assert s.run(nested, {n: 5, k: 0}) == sum(j for i in range(5) for j in range(i))
        # With other threads a loop around a loop stays general (the inner one too here:
        # its j + 1 and u + j could run at once).
        assert "outer" not in scheduled


def test_with_an_inter_op_pool_only_loops_whose_expensive_nodes_form_a_chain_are_scheduled(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    """``i + 1`` while ``i < n``: Less, Add, Less, ... each waits for the one before, in
    every iteration and across them. A second loop variable updated independently of the
    counter could overlap with it on the general executor's threads: a step with a pool
    keeps that loop there, a one-thread step schedules it."""
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        x = kl.placeholder(kl.float32, [3], name="x")
        (chained,) = kl.while_loop(lambda i: i < n, lambda i: i + 1, [0], name="chained")
        _, side = kl.while_loop(
            lambda i, v: i < n, lambda i, v: (i + 1, v * 2.0), [0, x], name="side"
        )
    xv = np.array([1.0, -1.0, 0.5], np.float32)
    for config, want in (
        (kl.SessionConfig(inter_op_threads=2), ["chained"]),
        (ONE_THREAD, ["chained", "side"]),
    ):
        scheduled.clear()
        with kl.Session(g, config) as s:
            got_chained, got_side = s.run([chained, side], {n: 4, x: xv})
        assert got_chained == 4
        np.testing.assert_array_equal(got_side, xv * 16)
        assert sorted(scheduled) == want


# -- results ---------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 12),
    st.floats(-2.0, 2.0, width=32),
    st.sampled_from([1, 2, 10]),
    st.sampled_from([1, 2]),
)
def test_several_loop_variables_and_invariants_against_python(
    iterations: int, scale: float, parallel: int, threads: int
) -> None:
    g = kl.Graph(shared_registry())
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        c = kl.placeholder(kl.float32, [], name="c")
        x = kl.placeholder(kl.float32, [3], name="x")

        def body(i: kl.Tensor, a: kl.Tensor, b: kl.Tensor, v: kl.Tensor) -> tuple[kl.Tensor, ...]:
            return i + 1, b, a + b * c, v * c + x  # c and x: invariants

        out = kl.while_loop(
            lambda i, a, b, v: i < n,
            body,
            [0, kl.constant(1.0), kl.constant(0.5), ops.zeros_like(x)],
            parallel_iterations=parallel,
        )
    xv = np.array([1.0, -2.0, 0.25], np.float32)
    i, a, b, v = 0, np.float32(1.0), np.float32(0.5), np.zeros(3, np.float32)
    cv = np.float32(scale)
    while i < iterations:
        i, a, b, v = i + 1, b, np.float32(a + b * cv), v * cv + xv
    feeds = {n: iterations, c: scale, x: xv}
    with kl.Session(g, kl.SessionConfig(inter_op_threads=threads)) as s:
        got = s.run(out, feeds)
        general = traced(s, out, feeds)
    assert got[0] == i
    np.testing.assert_array_equal(got[1], a)
    np.testing.assert_array_equal(got[2], b)
    np.testing.assert_array_equal(got[3], v)
    for mine, theirs in zip(got, general, strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_a_loop_whose_predicate_is_false_at_once(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        i, v = kl.while_loop(
            lambda i, v: i < 0,
            lambda i, v: (i + 1, guard(v - 100.0)),
            [5, x],
            # FailIfNegative has no shape function: its output's shape is unknown.
            shape_invariants=[kl.TensorShape([]), kl.TensorShape(None)],
        )
    xv = np.array([1.0, 2.0, 3.0], np.float32)
    with kl.Session(g, ONE_THREAD) as s:
        got_i, got_v = s.run([i, v], {x: xv})
    assert got_i == 5
    np.testing.assert_array_equal(got_v, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(xv, [1.0, 2.0, 3.0])
    assert scheduled == ["while"]


def test_the_body_overwrites_its_own_values_never_an_invariant_or_the_feed(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [4], name="x")
        c = kl.placeholder(kl.float32, [4], name="c")
        _, out = kl.while_loop(lambda i, v: i < 6, lambda i, v: (i + 1, v * 2.0 + c), [0, x])
    xv = np.arange(4, dtype=np.float32)
    cv = np.full(4, 0.5, np.float32)
    want = xv.copy()
    for _ in range(6):
        want = want * 2.0 + cv
    with kl.Session(g, ONE_THREAD) as s:
        for _ in range(2):
            np.testing.assert_array_equal(s.run(out, {x: xv, c: cv}), want)
    np.testing.assert_array_equal(xv, np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(cv, np.full(4, 0.5, np.float32))
    assert scheduled == ["while", "while"]


def test_a_stateful_body_updates_in_iteration_order_after_its_control_dependencies(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    """v.assign_add(i) then a read after it, and a value recorded under a control
    dependency on the update: the order of the updates shows in the result."""
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        v = kl.Variable(kl.constant(1), name="v")

        def body(i: kl.Tensor, trail: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            update = v.assign(v.value() * 3 + i)  # not commutative across iterations
            with kl.control_dependencies([update]):
                seen = ops.identity(v.value())
            return i + 1, trail * 10 + ops.floor_mod(seen, 7)

        _, trail = kl.while_loop(lambda i, t: i < n, body, [0, 0])
        read = v.value()
    with kl.Session(g, ONE_THREAD) as s:
        s.run(v.initializer)
        got_trail = s.run(trail, {n: 5})
        got_v = s.run(read)
    value, want_trail = 1, 0
    for i in range(5):
        value = value * 3 + i
        want_trail = want_trail * 10 + value % 7
    assert got_v == value
    assert got_trail == want_trail
    assert scheduled == ["while"]


def test_maximum_iterations_and_parallel_iterations(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        capped = kl.while_loop(
            lambda i, s: i < n, lambda i, s: (i + 1, s + i), [0, 0], maximum_iterations=7
        )
        one = kl.while_loop(
            lambda i, s: i < n, lambda i, s: (i + 1, s * 2 + i), [0, 1], parallel_iterations=1
        )
        many = kl.while_loop(
            lambda i, s: i < n, lambda i, s: (i + 1, s * 2 + i), [0, 1], parallel_iterations=32
        )
    with kl.Session(g, ONE_THREAD) as s:
        for nv in (0, 3, 7, 20):
            got_capped, got_one, got_many = s.run([capped, one, many], {n: nv})
            k = min(nv, 7)
            assert list(got_capped) == [k, sum(range(k))]
            want = 1
            for i in range(nv):
                want = want * 2 + i
            assert list(got_one) == list(got_many) == [nv, want]
    assert len(scheduled) == 4 * 3


def test_a_loop_inside_an_untaken_branch_is_dead_and_inside_a_taken_one_runs(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        p = kl.placeholder(kl.bool_, [], name="p")
        chosen = kl.cond(
            p,
            lambda: kl.while_loop(lambda v: v < 50, lambda v: v * 2, [n + 1], name="up")[0],
            lambda: kl.while_loop(lambda v: v > 0, lambda v: v - 3, [n], name="down")[0],
        )
    with kl.Session(g, ONE_THREAD) as s:
        for nv in (0, 3, 70):
            up, down = nv + 1, nv
            while up < 50:
                up *= 2
            while down > 0:
                down -= 3
            assert s.run(chosen, {n: nv, p: True}) == up
            assert s.run(chosen, {n: nv, p: False}) == down
    # Each run: the taken branch's loop ran on its schedule; the dead one ran nothing.
    assert len(scheduled) == 6
    assert scheduled[0].endswith("up") and scheduled[1].endswith("down")


# -- ending early --------------------------------------------------------------------------------


def test_an_error_in_iteration_k_names_node_frame_and_iteration_as_the_general_executor(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        start = kl.placeholder(kl.float32, [], name="start")
        _, out = kl.while_loop(
            lambda i, v: i < 10,
            lambda i, v: (i + 1, guard(v - 1.0, name="check")),
            [0, start],
            # FailIfNegative has no shape function: its output's shape is unknown.
            shape_invariants=[kl.TensorShape([]), kl.TensorShape(None)],
        )
    with kl.Session(g, ONE_THREAD) as s:
        with pytest.raises(kl.KernelError) as fast:
            s.run(out, {start: 3.5})  # v - 1: 2.5, 1.5, 0.5, then -0.5 in iteration 3
        with pytest.raises(kl.KernelError) as general:
            traced(s, out, {start: 3.5})
        assert s.run(out, {start: 20.0}) == 10.0  # the session is still usable
    message = str(fast.value)
    assert "'while/check'" in message and "frame 'while' iteration 3" in message
    assert message == str(general.value)
    assert scheduled == ["while", "while"]


def test_a_cancellation_from_another_thread_stops_a_loop_mid_way(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        (forever,) = kl.while_loop(lambda i: i > -1, lambda i: ops.floor_mod(i + 1, 1000), [0])
        (short,) = kl.while_loop(lambda i: i < 3, lambda i: i + 1, [0])
    with kl.Session(g, ONE_THREAD) as s:
        cancellation = CancellationManager()
        timer = threading.Timer(0.2, cancellation.cancel)
        timer.start()
        try:
            with pytest.raises(kl.CancelledError):
                s.run(forever, cancellation=cancellation)
        finally:
            timer.cancel()
        with pytest.raises(kl.DeadlineExceededError):
            s.run(forever, options=kl.RunOptions(timeout_s=0.2))
        assert s.run(short) == 3
    assert scheduled.count("while") == 2


def test_two_threads_and_an_inter_op_pool_run_scheduled_loops_at_once(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        _, a = kl.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + i), [0, 0], name="a")
        _, b = kl.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s - i), [0, 0], name="b")
    with kl.Session(g, kl.SessionConfig(inter_op_threads=3)) as s:

        def worker(seed: int) -> None:
            for k in range(15):
                m = (seed * 5 + k) % 11
                assert s.run([a, b], {n: m}) == [sum(range(m)), -sum(range(m))]

        errors = run_workers(worker, 4)
    assert not errors


def test_a_tensorflow_while_loop_runs_on_its_schedule_and_gives_tensorflow_s_outputs(
    scheduled: list[str],
) -> None:
    """The TF1 fixture (a matmul/tanh loop and a growing concat loop, as TensorFlow's
    while_loop builds them), run on one thread, against the outputs TensorFlow saved."""
    fixtures = Path(__file__).parent / "fixtures" / "tf"
    graph = import_graph_def(fixtures / "while_loop.pb")
    with np.load(fixtures / "while_loop.npz") as archive:
        feeds = {k.removeprefix("feed:"): archive[k] for k in archive.files if k[:5] == "feed:"}
        want = {k.removeprefix("fetch:"): archive[k] for k in archive.files if k[:6] == "fetch:"}
    with kl.Session(graph, ONE_THREAD) as s:
        got = s.run(list(want), feeds)
    for (name, expected), value in zip(want.items(), got, strict=True):
        assert value.dtype == expected.dtype, name
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=name)
    assert sorted(scheduled) == ["grow/while_context", "loop/while_context"]


def raw_loop(start: kl.Tensor, limit: kl.Tensor) -> kl.Tensor:
    """``i + 1`` while ``i < limit``, built node by node (as an imported graph has it)."""
    e_i = ops.enter(start, frame_name="raw")
    e_n = ops.enter(limit, frame_name="raw", is_constant=True)
    merged, _ = ops.merge([e_i, e_i])
    f, t = ops.switch(merged, ops.loop_cond(ops.less(merged, e_n)))
    body = ops.identity(t)
    following = ops.next_iteration(ops.add(body, ops.ones_like(body)))
    kl.get_default_graph().update_input(merged.node, 1, following)
    return ops.exit(f)


def test_a_loop_with_some_dead_enters_is_handed_back_to_the_general_frames(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    """A hand-built loop whose invariant comes through a Switch: live, the loop runs on
    its schedule; dead while the loop variable is live, the general frames decide what
    is dead (the Exit is), exactly as a traced step does."""
    g = kl.Graph(registry)
    with g.as_default():
        start = kl.placeholder(kl.int32, [], name="start")
        limit = kl.placeholder(kl.int32, [], name="limit")
        p = kl.placeholder(kl.bool_, [], name="p")
        _, live_limit = ops.switch(limit, p)
        out = raw_loop(start, live_limit)
    with kl.Session(g, ONE_THREAD) as s:
        assert s.run(out, {start: 2, limit: 9, p: True}) == 9
        assert scheduled == ["raw"]
        with pytest.raises(kl.KernloomError) as fast:
            s.run(out, {start: 2, limit: 9, p: False})
        with pytest.raises(kl.KernloomError) as general:
            traced(s, out, {start: 2, limit: 9, p: False})
        assert s.run(out, {start: 5, limit: 4, p: True}) == 5
    assert str(fast.value) == str(general.value)
    assert "dead" in str(fast.value) or "untaken" in str(fast.value)
    assert scheduled == ["raw", "raw"]


def test_an_error_in_a_nested_loop_names_the_inner_frame_as_the_general_executor(
    registry: klp.Registry, scheduled: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        start = kl.placeholder(kl.float32, [], name="start")

        def outer_body(i: kl.Tensor, v: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            _, w = kl.while_loop(
                lambda j, w: j < 2,
                lambda j, w: (j + 1, guard(w - 1.0, name="check")),
                [0, v],
                # FailIfNegative has no shape function: its output's shape is unknown.
                shape_invariants=[kl.TensorShape([]), kl.TensorShape(None)],
                name="inner",
            )
            return i + 1, w

        _, out = kl.while_loop(
            lambda i, v: i < 5,
            outer_body,
            [0, start],
            shape_invariants=[kl.TensorShape([]), kl.TensorShape(None)],
            name="outer",
        )
    with kl.Session(g, ONE_THREAD) as s:
        assert s.run(out, {start: 20.0}) == 10.0
        with pytest.raises(kl.KernelError) as fast:
            s.run(out, {start: 3.5})  # 2.5, 1.5 | 0.5, then -0.5: outer 1, inner 1
        with pytest.raises(kl.KernelError) as general:
            traced(s, out, {start: 3.5})
    message = str(fast.value)
    assert "'outer/inner/check'" in message and "frame 'outer/inner' iteration 1" in message
    assert message == str(general.value)
    assert scheduled.count("outer") == 2
