"""The executor under the session: compiled views, forwarding and memory, threads,
asynchronous kernels, failures, deadlines and cancellation."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from runtime_helpers import (
    NEVER_FINISHES_STARTED,
    chain_reference,
    elementwise_chain,
    make_registry,
    two_chains,
)

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.cancellation import CancellationManager
from kernloom.runtime.executor import Executor, GraphView, RunArgs
from kernloom.runtime.step import Step

MiB = 1 << 20


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry(faults=True)


@pytest.fixture(scope="module")
def accel_faults() -> klp.Registry:
    return make_registry(accel=True, faults=True)


def cpu(registry: klp.Registry) -> klp.Device:
    return registry.create_devices().lookup("CPU:0")


# -- the compiled view ----------------------------------------------------------------------------


def test_graph_view_flattens_slots_edges_and_pending_counts(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        a = kl.constant(np.float32(2), name="a")
        b = kl.constant(np.float32(3), name="b")
        c = kl.ops.add(a, b, name="c")
        with g.control_dependencies([c]):
            d = kl.ops.mul(c, a, name="d")
    device = cpu(registry)
    view = GraphView(g, device, lambda n: registry.create_kernel(n.to_node_def(), device))
    items = {i.name: i for i in view.items}
    assert view.num_slots == 4  # c: 2 inputs, d: 2 inputs
    assert (items["c"].input_start, items["c"].num_inputs) == (0, 2)
    assert (items["d"].input_start, items["d"].num_inputs) == (2, 2)
    # a feeds c's slot 0 and d's slot 1; c feeds d's slot 0 (its control edge is
    # dropped as redundant by the graph, since c is already a data input).
    assert set(items["a"].out_edges) == {(0, items["c"].id, 0), (0, items["d"].id, 3)}
    assert items["c"].out_edges == ((0, items["d"].id, 2),)
    assert [view.pending[items[n].id] for n in "abcd"] == [0, 0, 2, 2]
    assert sorted(view.roots) == sorted([items["a"].id, items["b"].id])
    assert items["a"].is_expensive is False and items["c"].is_expensive is True
    got: dict[str, float] = {}
    Executor(view).run(RunArgs(Step(), node_outputs=lambda n, o: got.update({n: float(o[0])})))
    assert got == {"a": 2.0, "b": 3.0, "c": 5.0, "d": 10.0}
    assert d.name == "d:0"


# -- forwarding and memory ------------------------------------------------------------------------


def test_the_elementwise_chain_peaks_at_one_tensor_beyond_the_feed(registry: klp.Registry) -> None:
    g, x, y = elementwise_chain(registry, 8)
    xv = np.random.default_rng(0).standard_normal(4 * MiB // 4).astype(np.float32)
    original = xv.copy()
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        out = sess.run(y, {x: xv}, kl.RunOptions(trace=True), md)
    np.testing.assert_allclose(out, chain_reference(original, 8), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(xv, original)  # the feed is never written
    peak = next(iter(md.memory.values())).peak_bytes_in_use
    assert peak == xv.nbytes  # one buffer, reused by the seven later ops
    assert md.step_stats is not None
    forwarded = [s.node for s in md.step_stats.nodes if s.forwarded]
    assert len(forwarded) == 7


def test_a_fetched_tensor_is_never_overwritten_by_a_later_consumer(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [1000], name="x")
        a = kl.ops.neg(x, name="a")
        b = kl.ops.exp(a, name="b")  # a's last consumer: would reuse a if a were not fetched
        c = kl.ops.neg(b, name="c")
    xv = np.linspace(-1, 1, 1000, dtype=np.float32)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        for fetches in ([a, c], [c, a], [a, b, c]):
            md = kl.RunMetadata()
            out = sess.run(fetches, {x: xv}, kl.RunOptions(trace=True), md)
            got = dict(zip([t.name for t in fetches], out, strict=True))
            np.testing.assert_array_equal(got["a:0"], -xv)
            np.testing.assert_allclose(got["c:0"], -np.exp(-xv), rtol=1e-6)
            assert md.step_stats is not None
            assert md.step_stats.for_node("b").forwarded == ()
        # Not fetched, a *is* reused by b, and c reuses b: one buffer for the chain.
        md = kl.RunMetadata()
        sess.run(c, {x: xv}, kl.RunOptions(trace=True), md)
        assert md.step_stats is not None
        assert md.step_stats.for_node("b").forwarded == ((0, 0),)


def test_a_value_with_two_consumers_is_only_reused_by_the_last(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [64], name="x")
        a = kl.ops.neg(x, name="a")
        b = kl.ops.exp(a, name="b")
        c = kl.ops.tanh(a, name="c")
        d = kl.ops.add(b, c, name="d")
    xv = np.linspace(-2, 2, 64, dtype=np.float32)
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        out = sess.run(d, {x: xv}, kl.RunOptions(trace=True), md)
    np.testing.assert_allclose(out, np.exp(-xv) + np.tanh(-xv), rtol=1e-6)
    assert md.step_stats is not None
    reused = {s.node: s.forwarded for s in md.step_stats.nodes}
    assert [reused["b"], reused["c"]].count(((0, 0),)) == 1  # whichever ran second
    assert reused["d"] in (((0, 0),), ((1, 0),))


def test_constants_are_never_overwritten(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        k = kl.constant(np.arange(4, dtype=np.float32), name="k")
        y = kl.ops.neg(kl.ops.neg(k))
    with kl.Session(g) as sess:
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(y), np.arange(4))
        np.testing.assert_array_equal(sess.run(k), np.arange(4))


# -- threads --------------------------------------------------------------------------------------


def test_one_inter_op_thread_runs_everything_on_the_callers_thread(registry: klp.Registry) -> None:
    g, out, ref = two_chains(registry)
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        np.testing.assert_allclose(
            sess.run(out, options=kl.RunOptions(trace=True), run_metadata=md), ref
        )
    assert md.step_stats is not None
    assert {s.thread_name for s in md.step_stats.nodes} == {threading.current_thread().name}


def test_independent_expensive_chains_run_on_two_threads(registry: klp.Registry) -> None:
    g, out, ref = two_chains(registry, 384)
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2, graph_optimizer=False)) as sess:
        np.testing.assert_allclose(
            sess.run(out, options=kl.RunOptions(trace=True), run_metadata=md), ref
        )
    assert md.step_stats is not None
    threads = {s.thread_name for s in md.step_stats.nodes if s.op == "MatMul"}
    assert len(threads) == 2
    assert any(name.startswith("kernloom-inter-op") for name in threads)


def test_closing_the_session_stops_its_threads(registry: klp.Registry) -> None:
    g, out, _ = two_chains(registry, 32)
    before = threading.active_count()
    sess = kl.Session(g, kl.SessionConfig(inter_op_threads=4, intra_op_threads=2))
    sess.run(out)
    workers = sess._pool.threads
    assert len(workers) == 3 and all(t.is_alive() for t in workers)
    sess.close()
    assert not any(t.is_alive() for t in workers)
    assert threading.active_count() <= before


# -- asynchronous kernels -------------------------------------------------------------------------


def test_an_async_kernel_completing_on_another_thread(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        late = g.add_node("FinishesLater", [x], {"delay_s": 0.02}, name="late").outputs[0]
        y = kl.ops.add(late, x, name="y")
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(y, {x: [1, 2, 3]}), [3, 6, 9])


def test_an_async_kernel_that_never_calls_back_ends_at_the_deadline(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        stuck = g.add_node("NeverFinishes", [x], name="stuck").outputs[0]
        y = kl.ops.neg(stuck, name="y")
        z = kl.ops.neg(x, name="z")
    sess = kl.Session(g)
    stuck_run = sess.make_callable(y, [x])  # compiled here: the deadline times the step only
    started = time.monotonic()
    with pytest.raises(kl.DeadlineExceededError, match=r"within its timeout of 0\.2 s"):
        stuck_run([1, 2, 3], options=kl.RunOptions(timeout_s=0.2))
    # Well before any stuck-kernel grace would matter; generous, as this machine is shared.
    assert time.monotonic() - started < 10.0
    # The session stays usable.
    np.testing.assert_array_equal(sess.run(z, {x: [1, 2, 3]}), [-1, -2, -3])
    # The kernel never called back, so its step never ended: close frees nothing under it.
    with pytest.raises(kl.DeadlineExceededError, match="asynchronous kernel has not called done"):
        sess.close(timeout_s=0.05)


def test_cancelling_a_run_from_another_thread(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = g.add_node("NeverFinishes", [x], name="stuck").outputs[0]
    cancellation = CancellationManager()
    NEVER_FINISHES_STARTED.clear()

    def cancel_once_started() -> None:
        NEVER_FINISHES_STARTED.wait(10)  # the kernel runs: the step is in flight
        cancellation.cancel()

    canceller = threading.Thread(target=cancel_once_started)
    canceller.start()
    sess = kl.Session(g)
    with pytest.raises(kl.CancelledError, match="cancelled"):
        sess.run(y, {x: [1, 2, 3]}, cancellation=cancellation)
    canceller.join()
    with pytest.raises(kl.DeadlineExceededError, match="asynchronous kernel has not called done"):
        sess.close(timeout_s=0.05)


# -- failures -------------------------------------------------------------------------------------


def test_a_failing_kernel_names_its_node_and_keeps_the_original_error(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = kl.ops.neg(g.add_node("FailIfNegative", [x], name="guard").outputs[0])
    with kl.Session(g) as sess:
        with pytest.raises(
            kl.KernelError,
            match=r"node 'guard' \(op FailIfNegative\).*CPU:0.*ValueError: negative input",
        ) as info:
            sess.run(y, {x: [1, -2, 3]})
        assert isinstance(info.value.__cause__, ValueError)
        np.testing.assert_array_equal(sess.run(y, {x: [1, 2, 3]}), [-1, -2, -3])


@pytest.mark.parametrize("trace", [False, True], ids=["straight_line", "node_loop"])
def test_a_failing_kernels_error_names_the_plugin_that_registered_it(
    registry: klp.Registry, trace: bool
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = kl.ops.neg(g.add_node("FailIfNegative", [x], name="guard").outputs[0])
    with kl.Session(g) as sess, pytest.raises(kl.KernelError) as info:
        sess.run(y, {x: [1, -2, 3]}, options=kl.RunOptions(trace=trace))
    assert (
        "failed in kernel fail_if_negative registered by plugin 'faults': ValueError: "
        "negative input" in str(info.value)
    )


def test_a_failure_in_one_partition_wakes_the_partition_waiting_on_its_recv(
    accel_faults: klp.Registry,
) -> None:
    g = kl.Graph(accel_faults)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 2], name="x")
        guarded = g.add_node("FailIfNegative", [x], name="guard").outputs[0]  # CPU only
        y = kl.ops.mat_mul(guarded, guarded, name="y")  # FAKE_ACCEL: waits on a _Recv
    before = threading.active_count()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2)) as sess:
        md = kl.RunMetadata()
        sess.run(y, {x: np.eye(2, dtype=np.float32)}, run_metadata=md)
        assert md.placement is not None
        assert md.placement["guard"].endswith("CPU:0") and md.placement["y"].endswith("ACCEL:0")
        assert len(md.partition_graphs) == 2
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(kl.KernelError, match=r"node 'guard'.*negative input"):
                sess.run(y, {x: -np.eye(2, dtype=np.float32)})
            # The waiting _Recv is aborted, not left to a timeout (a hang would hit the
            # test's timeout); generous, as this machine is shared.
            assert time.monotonic() - started < 10.0
            out = sess.run(y, {x: 2 * np.eye(2, dtype=np.float32)})
            np.testing.assert_array_equal(out, 4 * np.eye(2))
    assert threading.active_count() <= before


def test_a_kernel_that_sets_no_output_is_blamed(registry: klp.Registry) -> None:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("Lazy").input("x: float32").output("y: float32")
            lib = klp.KernelLibrary()
            lib.kernel("Lazy", device="CPU")(lambda ctx: None)
            registry.register_kernels(lib)

    reg = make_registry()
    reg.register_plugin(Plugin(), name="lazy")
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = g.add_node("Lazy", [x], name="lazy").outputs[0]
    with (
        kl.Session(g) as sess,
        pytest.raises(kl.KernelError, match=r"node 'lazy'.*did not set output 0"),
    ):
        sess.run(y, {x: [1, 2, 3]})


class _Interrupts:
    """A plugin with op ``Interrupts`` (float32 -> float32, the identity) whose kernel raises
    ``raised`` while armed: a Ctrl-C arriving while it runs, or a kernel calling sys.exit."""

    def __init__(self, raised: type[BaseException]) -> None:
        self.raised = raised
        self.armed = True

    @klp.hookimpl
    def kernloom_register(self, registry: klp.Registrar) -> None:
        registry.register_op("Interrupts").input("x: float32").output("y: float32")
        lib = klp.KernelLibrary()
        lib.kernel("Interrupts", device="CPU")(self.compute)
        registry.register_kernels(lib)

    def compute(self, ctx: klp.OpKernelContext) -> None:
        if self.armed:
            raise self.raised()
        ctx.set_output(0, np.array(ctx.input(0), copy=True))


class _WaitsForCancel(klp.AsyncOpKernel):
    """Starts, and calls ``done`` only when the step is cancelled (armed) or at once."""

    armed = True
    started = threading.Event()
    cancelled = threading.Event()

    def compute_async(self, ctx: klp.OpKernelContext, done: Callable[[], None]) -> None:
        ctx.set_output(0, np.array(ctx.input(0), copy=True))
        if not _WaitsForCancel.armed:
            done()
            return

        def cancelled() -> None:
            _WaitsForCancel.cancelled.set()
            done()

        if ctx.cancellation.register(cancelled) is None:
            cancelled()
        _WaitsForCancel.started.set()


def _interrupting_graph(plugin: _Interrupts, loop: bool) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    reg = make_registry()
    reg.register_plugin(plugin, name="interrupts")
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        if loop:
            _, y = kl.while_loop(
                lambda i, v: i < 3,
                lambda i, v: (i + 1, kl.ops.neg(g.add_node("Interrupts", [v]).outputs[0])),
                [0, x],
                # Interrupts has no shape function: its output's shape is unknown.
                shape_invariants=[kl.TensorShape([]), kl.TensorShape(None)],
            )
        else:  # an in-place chain after it: the compiled straight line
            y = kl.ops.neg(kl.ops.abs(kl.ops.neg(g.add_node("Interrupts", [x]).outputs[0])))
    return g, x, y


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("trace", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("loop", [False, True], ids=["chain", "while_loop"])
def test_ctrl_c_in_a_kernel_reaches_the_caller_as_keyboard_interrupt(
    threads: int, trace: bool, loop: bool
) -> None:
    """KeyboardInterrupt is the caller's, not a kernel's failure: it is not wrapped into a
    KernelError (which ``except Exception`` would swallow); the step ends and the session
    runs on."""
    plugin = _Interrupts(KeyboardInterrupt)
    g, x, y = _interrupting_graph(plugin, loop)
    xv = np.array([1.0, -2.0, 3.0], np.float32)
    options = kl.RunOptions(trace=trace)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=threads)) as sess:
        with pytest.raises(KeyboardInterrupt):
            sess.run(y, {x: xv}, options=options)
        plugin.armed = False
        out = sess.run(y, {x: xv}, options=options)
        np.testing.assert_array_equal(out, -xv if loop else -np.abs(xv))


@pytest.mark.parametrize("threads", [1, 2])
def test_ctrl_c_while_the_caller_waits_stops_the_step(threads: int) -> None:
    """SIGINT while the caller's thread waits for the step (here, for an asynchronous
    kernel): KeyboardInterrupt reaches the caller, the step is stopped (its kernels
    cancelled) and ends, and the session runs on and closes cleanly."""

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("WaitsForCancel").input("x: float32").output("y: float32")
            lib = klp.KernelLibrary()
            lib.kernel("WaitsForCancel", device="CPU")(_WaitsForCancel)
            registry.register_kernels(lib)

    reg = make_registry()
    reg.register_plugin(Plugin(), name="waits")
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = kl.ops.neg(g.add_node("WaitsForCancel", [x]).outputs[0])
    xv = np.array([1.0, 2.0, 3.0], np.float32)
    _WaitsForCancel.armed = True
    _WaitsForCancel.started.clear()
    _WaitsForCancel.cancelled.clear()

    def interrupt() -> None:
        if _WaitsForCancel.started.wait(30.0):
            os.kill(os.getpid(), signal.SIGINT)

    errors = np.geterr()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=threads)) as sess:
        sender = threading.Thread(target=interrupt)
        sender.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                sess.run(y, {x: xv})
        finally:
            sender.join()
            # A signal lands between any two bytecodes: one that lands while the step's
            # scope is being left (the host's error state and subnormal flag put back)
            # leaves those as the step had them. Not for later tests to inherit.
            np.seterr(**errors)
        assert _WaitsForCancel.cancelled.is_set()  # the step was stopped, not left running
        _WaitsForCancel.armed = False
        np.testing.assert_array_equal(sess.run(y, {x: xv}), -xv)
    assert sess.closed


def test_sys_exit_in_a_kernel_stays_a_kernel_error() -> None:
    g, x, y = _interrupting_graph(_Interrupts(SystemExit), loop=False)
    with kl.Session(g) as sess, pytest.raises(kl.KernelError, match="SystemExit"):
        sess.run(y, {x: np.ones(3, np.float32)})
