"""Measured kernel costs (``kernloom.runtime.kernel_costs``): nodes whose kernels are
marked expensive but measure cheap run inline, so a step with an inter-op pool runs small
work on the caller's thread (and a loop on its schedule) instead of handing each node to
another thread; nodes that measure expensive still run at once on two threads."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import kernloom as kl
import kernloom.plugin as klp
from kernloom.runtime.compiled_line import CompiledLine
from kernloom.runtime.kernel_costs import CHEAP_S, EXPENSIVE_S, KernelCosts
from kernloom.runtime.loop_schedule import LoopSchedule
from kernloom.runtime.straight_line import StraightLine

SEEN: list[int] = []


def thread_spy(ctx: klp.OpKernelContext) -> None:
    """Records the thread it runs on; sleeps ``sleep_s`` (off the GIL), then copies."""
    SEEN.append(threading.get_ident())
    delay = ctx.attr("sleep_s")
    if delay:
        time.sleep(delay)
    x = ctx.input(0)
    out = ctx.allocate_output(0, x.shape)
    out[...] = x + 1.0


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            (
                registry.register_op("ThreadSpy")
                .input("x: float32")
                .output("y: float32")
                .attr("sleep_s: float = 0.0")
            )
            lib = klp.KernelLibrary()
            lib.kernel("ThreadSpy", device="CPU")(thread_spy)
            registry.register_kernels(lib)

    reg = klp.Registry()
    reg.register_plugin(cpu_plugin, name="cpu_numpy")
    reg.register_plugin(Plugin(), name="spy")
    return reg


def spy(x: kl.Tensor, sleep_s: float = 0.0) -> kl.Tensor:
    return x.graph.add_node("ThreadSpy", [x], attrs={"sleep_s": sleep_s}).outputs[0]


def spy_chains(
    registry: klp.Registry, count: int, depth: int, sleep_s: float
) -> tuple[Any, Any, Any]:
    """``count`` independent chains of ``depth`` spies from one feed, summed."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [4], name="x")
        chains = []
        for _ in range(count):
            y = x
            for _ in range(depth):
                y = spy(y, sleep_s)
            chains.append(y)
        out = kl.ops.add_n(chains)
    return g, x, out


CONFIG = kl.SessionConfig(inter_op_threads=2, graph_optimizer=False)


def test_cheap_branches_run_on_the_caller_s_thread_once_measured(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four chains of 8 cheap nodes marked expensive: once timed, the step runs on the
    straight line, every node on the caller's thread (before, each step ran on the general
    executor and handed three chains to the pool)."""
    lines: list[str] = []
    for line in (StraightLine, CompiledLine):
        execute = line.execute

        def spy_on_execute(self: Any, args: Any, execute: Any = execute) -> Any:
            lines.append(type(self).__name__)
            return execute(self, args)

        monkeypatch.setattr(line, "execute", spy_on_execute)
    g, x, out = spy_chains(registry, count=4, depth=8, sleep_s=0.0)
    xv = np.arange(4, dtype=np.float32)
    with kl.Session(g, CONFIG) as sess:
        run = sess.make_callable(out, [x])
        for _ in range(40):
            np.testing.assert_array_equal(run(xv), 4 * (xv + 8))
        SEEN.clear()
        lines.clear()
        for _ in range(5):
            np.testing.assert_array_equal(run(xv), 4 * (xv + 8))
        assert len(lines) == 5
        assert set(SEEN) == {threading.get_ident()}


def test_expensive_branches_still_run_on_two_threads(registry: klp.Registry) -> None:
    """Two chains of nodes that take 5 ms each (off the GIL): their times keep them
    expensive, so the chains still go to two threads."""
    g, x, out = spy_chains(registry, count=2, depth=3, sleep_s=0.005)
    xv = np.arange(4, dtype=np.float32)
    with kl.Session(g, CONFIG) as sess:
        run = sess.make_callable(out, [x])
        for _ in range(5):
            run(xv)
        SEEN.clear()
        np.testing.assert_array_equal(run(xv), 2 * (xv + 3))
        assert len(set(SEEN)) == 2


def test_a_loop_of_cheap_independent_updates_runs_on_its_schedule(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``(i + 1, spy(s), spy(t))``: independent nodes marked expensive kept the loop on
    the general executor of a two-thread step (35 µs an iteration against 5 on one thread
    for ``(i + 1, s + 1.0)``); measured cheap, the loop runs on its schedule, on this
    thread."""
    scheduled: list[str] = []
    run = LoopSchedule.run

    def spy_on_run(self: LoopSchedule, *args: Any) -> Any:
        scheduled.append(self.frame.name)
        return run(self, *args)

    monkeypatch.setattr(LoopSchedule, "run", spy_on_run)
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        zeros = kl.constant(np.zeros(4, np.float32))
        count, s, t = kl.while_loop(
            lambda i, s, t: i < n,
            lambda i, s, t: (i + 1, spy(s), spy(t)),
            [0, zeros, zeros],
            # The spy op has no shape function: its output's shape is unknown.
            shape_invariants=[kl.TensorShape([]), kl.TensorShape(None), kl.TensorShape(None)],
        )
    with kl.Session(g, CONFIG) as sess:
        for _ in range(3):
            sess.run([count, s, t], {n: 50})
        SEEN.clear()
        scheduled.clear()
        got = sess.run([count, s, t], {n: 200})
        assert got[0] == 200
        np.testing.assert_array_equal(got[1], np.full(4, 200.0, np.float32))
        np.testing.assert_array_equal(got[2], np.full(4, 200.0, np.float32))
        assert scheduled == ["while"]
        assert set(SEEN) == {threading.get_ident()}


def item(expensive: bool = True) -> Any:
    return SimpleNamespace(id=0, is_expensive=expensive)


def test_a_cheap_time_turns_the_mark_and_the_generation() -> None:
    costs = KernelCosts(1)
    node = item()
    costs.record(node, CHEAP_S / 2)  # the first time is the estimate
    assert not node.is_expensive and costs.generation == 1
    assert costs.estimate(0) == pytest.approx(CHEAP_S / 2)


def test_a_shorter_time_replaces_the_estimate_a_longer_one_moves_it_a_tenth() -> None:
    """Times read beside another thread holding the GIL are longer than the node's cost:
    the shortest one counts at once; a longer one moves the estimate a tenth of the way."""
    costs = KernelCosts(1)
    node = item()
    for seconds in (5 * EXPENSIVE_S / 4, EXPENSIVE_S):  # 75 then 60 µs: still expensive
        costs.record(node, seconds)
    assert costs.estimate(0) == pytest.approx(EXPENSIVE_S) and node.is_expensive
    costs.record(node, CHEAP_S / 3)  # one uncontended run
    assert costs.estimate(0) == pytest.approx(CHEAP_S / 3) and not node.is_expensive
    costs.record(node, 2 * EXPENSIVE_S)  # contended again: a tenth of the way
    assert costs.estimate(0) == pytest.approx(CHEAP_S / 3 + (2 * EXPENSIVE_S - CHEAP_S / 3) / 10)
    assert not node.is_expensive


def test_the_mark_comes_back_only_above_the_upper_threshold() -> None:
    """Between the two thresholds the mark stays as it is; one long time (a wait for the
    GIL) counts at most 4 x EXPENSIVE_S, a tenth of it into the estimate."""
    costs = KernelCosts(1)
    node = item()
    costs.record(node, 0.0)
    assert not node.is_expensive
    costs.record(node, 1.0)  # one second: capped, 0.1 x 4 x EXPENSIVE_S
    assert costs.estimate(0) == pytest.approx(0.4 * EXPENSIVE_S)
    assert not node.is_expensive
    for _ in range(30):
        costs.record(node, (CHEAP_S + EXPENSIVE_S) / 2)
    assert not node.is_expensive and costs.generation == 1
    for _ in range(30):
        costs.record(node, 2 * EXPENSIVE_S)
    assert node.is_expensive and costs.generation == 2


def test_an_untimed_node_has_no_estimate() -> None:
    assert KernelCosts(2).estimate(1) is None
