"""A session's lifetime and its misuse: closing under runs in flight, threads that fail to
start, arguments of the wrong type, out-of-memory, graphs changed after compiling."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp

_entered = threading.Event()


def _slow_copy(ctx: klp.OpKernelContext) -> None:
    """Copies its input after a short sleep: a long chain of these is a long step."""
    _entered.set()
    time.sleep(0.01)
    x = ctx.input(0)
    out = ctx.allocate_output(0, x.shape)
    out[...] = x


def _huge(ctx: klp.OpKernelContext) -> None:
    """Asks the host for 2**50 float32s: numpy refuses at once, with a raw MemoryError."""
    ctx.set_output(0, np.empty(1 << 50, np.float32))


def _slow_plugin() -> object:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("Huge").input("x: float32").output("y: float32")
            registry.register_op("SlowCopy").input("x: float32").output("y: float32").shape_fn(
                lambda c: c.set_output(0, c.input_shape(0))
            )
            lib = klp.KernelLibrary()
            lib.kernel("SlowCopy", device="CPU")(_slow_copy)
            lib.kernel("Huge", device="CPU")(_huge)
            registry.register_kernels(lib)

    return Plugin()


def _slow(x: kl.Tensor) -> kl.Tensor:
    from kernloom.graph.builder import apply_op

    result = apply_op("SlowCopy", [x], {})
    assert isinstance(result, kl.Tensor)
    return result


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    registry = make_registry()
    registry.register_plugin(_slow_plugin(), name="slow")
    return registry


def _close_while_running(session: kl.Session, run: object) -> BaseException | None:
    """Start ``run`` on another thread, close the session once a kernel has started, and
    return what the run raised (None if it finished)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            run()  # type: ignore[operator]
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    _entered.clear()
    thread = threading.Thread(target=target)
    thread.start()
    assert _entered.wait(30)
    session.close()
    thread.join(30)
    assert not thread.is_alive()
    return outcome[0]


@pytest.mark.parametrize("threads", [1, 2])
def test_close_cancels_a_straight_line_run_in_flight(registry: klp.Registry, threads: int) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        w = kl.Variable(np.ones(2, np.float32), name="w")
        y = x
        for _ in range(3000):  # 30 s of sleeping kernels if nothing stops them
            y = _slow(y)
        y = y + w.value()
        init = kl.variables_initializer()
    session = kl.Session(g, kl.SessionConfig(inter_op_threads=threads))
    session.run(init)
    error = _close_while_running(session, lambda: session.run(y, {x: np.zeros(2)}))
    assert isinstance(error, kl.CancelledError)
    assert "session closed" in str(error)
    with pytest.raises(kl.KernloomError, match="this session is closed"):
        session.run(y, {x: np.zeros(2)})


def test_close_cancels_a_while_loop_in_flight(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        w = kl.Variable(np.ones(2, np.float32), name="w")
        _, acc = kl.while_loop(
            lambda i, a: i < 1_000_000_000,
            lambda i, a: (i + 1, _slow(a) + w.value()),
            [0, np.zeros(2, np.float32)],
        )
        init = kl.variables_initializer()
    session = kl.Session(g)
    session.run(init)
    error = _close_while_running(session, lambda: session.run(acc))
    # Not "variable does not exist": the variables are dropped only after the run stopped.
    assert isinstance(error, kl.CancelledError), error
    assert "session closed" in str(error)


def test_a_callable_fails_clearly_after_close(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        y = x * 2.0
    session = kl.Session(g)
    run = session.make_callable(y, [x])
    np.testing.assert_array_equal(run(np.ones(2, np.float32)), [2, 2])
    session.close()
    session.close()  # twice is fine
    for call in (
        lambda: run(np.ones(2, np.float32)),
        lambda: session.make_callable(y, [x]),
        lambda: session.explain(y),
    ):
        with pytest.raises(kl.KernloomError, match="this session is closed"):
            call()


def _inter_op_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("kernloom-inter-op")}


def test_a_pool_that_cannot_start_its_threads_stops_those_it_started(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _inter_op_threads()
    real_start = threading.Thread.start
    started = []

    def start(self: threading.Thread) -> None:
        if self.name.startswith("kernloom-inter-op") and len(started) >= 3:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    g = kl.Graph(registry)
    with pytest.raises(
        kl.ResourceExhaustedError,
        match=r"7 inter-op thread.*fewer than 8 threads \(SessionConfig\(inter_op_threads=",
    ):
        kl.Session(g, kl.SessionConfig(inter_op_threads=8))
    monkeypatch.undo()
    for thread in started:
        thread.join(10)
    assert _inter_op_threads() == before


def test_thread_counts_are_bounded_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"inter_op_threads=1000000 is more than the 1024"):
        kl.SessionConfig(inter_op_threads=10**6)
    with pytest.raises(ValueError, match=r"intra_op_threads=5000 is more than"):
        kl.SessionConfig(intra_op_threads=5000)


def test_misused_arguments_are_type_errors_naming_them(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        y = x * 2.0
    with pytest.raises(TypeError, match=r"kl.Session: graph must be a kl.Graph or None, got int"):
        kl.Session(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"config must be a kl.SessionConfig or None, got dict"):
        kl.Session(g, {"inter_op_threads": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"registry must be a kernloom.plugin.Registry"):
        kl.Session(g, registry="cpu")  # type: ignore[arg-type]
    feed = {x: np.ones(2, np.float32)}
    with kl.Session(g) as s:
        cases: list[tuple[object, str]] = [
            (lambda: s.run(y, feed, options={"trace": True}), r"options must be a kl.RunOptions"),
            (lambda: s.run(y, feed, None, {}), r"run_metadata must be a kl.RunMetadata"),
            (lambda: s.run(y, [np.ones(2)]), r"feed_dict must be a dict"),
            (lambda: s.run(y, feed, cancellation=True), r"cancellation must be a kl"),
            (lambda: s.run(y, feed, targets=y.node), r"targets must be a list"),
            (lambda: s.run(42), r"cannot fetch 42 \(int\)"),
            (lambda: s.run([y, 3.5], feed), r"cannot fetch 3.5 \(float\)"),
            (lambda: s.run(y, {3: np.ones(2)}), r"feed 3 is a int"),
            (lambda: s.make_callable(y, x), r"feed_list must be a list or tuple"),
        ]
        for call, match in cases:
            with pytest.raises(TypeError, match=match):
                call()  # type: ignore[operator]
        np.testing.assert_array_equal(s.run(y, feed), [2, 2])  # still usable


def test_out_of_memory_is_resource_exhausted_naming_node_device_and_bytes() -> None:
    registry = make_registry(accel=True)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 1], name="x")
        with kl.device("FAKE_ACCEL:0"):
            outer = kl.ops.mat_mul(x, x, transpose_b=True, name="outer")  # n x n
            y = kl.ops.add(x, x, name="twice")
    config = kl.SessionConfig(memory_limit={"FAKE_ACCEL": 1 << 16})
    with kl.Session(g, config) as s:
        np.testing.assert_array_equal(s.run(outer, {x: np.ones((2, 1), np.float32)}), 1)
        with pytest.raises(
            kl.ResourceExhaustedError,
            match=r"node 'outer' \(op MatMul\) on .*FAKE_ACCEL:0 ran out of memory.*160000 bytes",
        ):
            s.run(outer, {x: np.ones((200, 1), np.float32)})
        with pytest.raises(kl.ResourceExhaustedError, match=r"FAKE_ACCEL:0.*400000 bytes"):
            s.run(y, {x: np.ones((100_000, 1), np.float32)})
        np.testing.assert_array_equal(s.run(y, {x: np.ones((3, 1), np.float32)}), 2)


def test_host_out_of_memory_is_resource_exhausted_too(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernloom.graph.builder import apply_op
    from kernloom.runtime import run_plan

    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None], name="x")
        huge = apply_op("Huge", [x], {}, name="huge")
    with kl.Session(g) as s:
        with pytest.raises(
            kl.ResourceExhaustedError,
            match=r"node 'huge' \(op Huge\) on .*CPU:0 ran out of memory \(4503599627370496 "
            r"bytes\)",
        ):
            s.run(huge, {x: np.ones(2, np.float32)})

        def no_memory(value: object, dtype: object, **kwargs: object) -> object:
            raise MemoryError("Unable to allocate 8.00 GiB")

        monkeypatch.setattr(run_plan, "convert_to_dtype", no_memory)
        with pytest.raises(
            kl.ResourceExhaustedError, match=r"feed for 'x:0' .*out of host memory.*8.00 GiB"
        ):
            s.run(x, {x: [1.0, 2.0]})


def test_a_graph_changed_in_place_after_compiling_is_compiled_again(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        one = kl.constant(np.ones(2, np.float32), name="one")
        ten = kl.constant(np.full(2, 10.0, np.float32), name="ten")
        y = kl.ops.add(x, one, name="y")
        z = y * 2.0
    feed = {x: np.zeros(2, np.float32)}
    with kl.Session(g) as s:
        run = s.make_callable(z, [x])
        np.testing.assert_array_equal(s.run(z, feed), [2, 2])
        np.testing.assert_array_equal(run(feed[x]), [2, 2])
        g.update_input(y.node, 1, ten)
        np.testing.assert_array_equal(s.run(z, feed), [20, 20])  # not the old graph
        np.testing.assert_array_equal(run(feed[x]), [20, 20])
        np.testing.assert_array_equal(s.run(y, feed), [10, 10])
        # Nodes added later (and changed as they are built) leave compiled steps alone.
        with g.as_default():
            w = kl.Variable(np.ones(2, np.float32), name="w")
            read = w.value()  # sets its output shape: a change of a new node
        np.testing.assert_array_equal(s.run(z, feed), [20, 20])
        s.run(w.initializer)
        np.testing.assert_array_equal(s.run(read), [1, 1])


def test_kernel_label_scopes_name_the_node_and_op(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        a = kl.constant(np.ones((2, 2), np.float32))
        with kl.kernel_label({"MatMul": "einsm"}):
            mm = kl.ops.mat_mul(a, a, name="mm")  # labels are checked where kernels are chosen
        with (
            kl.Session(g, registry=registry) as session,
            pytest.raises(
                kl.InvalidArgumentError,
                match=r"node 'mm' \(op MatMul\)(.|\n)*labelled 'einsum', not 'einsm'",
            ),
        ):
            session.run(mm)
        with pytest.raises(kl.NotFoundError, match=r"kl.kernel_label.*MatMull.*MatMul"):
            kl.kernel_label({"MatMull": "einsum"}).__enter__()
        with pytest.raises(kl.InvalidArgumentError, match=r"label map takes op names"):
            kl.kernel_label({"MatMul": 3}).__enter__()  # type: ignore[dict-item]
        with kl.kernel_label({"MatMul": "einsum"}):
            assert kl.ops.mat_mul(a, a).node.kernel_label == "einsum"


def test_explain_says_when_an_op_has_no_shape_function() -> None:
    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("NoShape").input("x: float32").output("y: float32")
            lib = klp.KernelLibrary()
            lib.kernel("NoShape", device="CPU")(_slow_copy)
            registry.register_kernels(lib)

    registry = make_registry()
    registry.register_plugin(Plugin(), name="noshape")
    g = kl.Graph(registry)
    from kernloom.graph.builder import apply_op

    with g.as_default():
        y = kl.ops.identity(kl.constant(np.ones(2, np.float32)))
        z = apply_op("NoShape", [y], {}, name="custom")
    with kl.Session(g) as s:
        text = s.explain(z)
        assert "node 'custom' (op NoShape): the op has no shape function" in text
        assert "op Identity" not in text.split("Notes:")[1]


NO_SHAPE_PLUGIN = """
@klp.hookimpl
def kernloom_register(registry):
    registry.register_op("NoShape").input("x: float32").output("y: float32")
    registry.register_op("Shaped").input("x: float32").output("y: float32").shape_fn(
        lambda c: c.set_output(0, c.input_shape(0))
    )
"""


def test_kernloom_ops_says_when_an_op_has_no_shape_function(
    install: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.metadata
    import json

    from kernloom.cli import main

    for var in ("KERNLOOM_PLUGINS", "KERNLOOM_DISABLE_PLUGINS", "KERNLOOM_STRICT_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    eps = [install("noshape", NO_SHAPE_PLUGIN)]  # type: ignore[operator]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: eps)
    assert main(["ops", "NoShape"]) == 0
    assert "no shape function: output shapes unknown until it runs" in capsys.readouterr().out
    assert main(["ops", "Shaped"]) == 0
    assert "no shape function" not in capsys.readouterr().out
    assert main(["ops", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["NoShape"]["has_shape_fn"] is False
    assert rows["Shaped"]["has_shape_fn"] is True
    assert rows["NoOp"]["has_shape_fn"] is True  # no outputs: nothing to infer
