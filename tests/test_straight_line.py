"""The straight-line executor: when it runs, what it compiles, forwarding and release on it,
kernels' direct entries (in place, declining, wrong dtype, raising), and how a step on it
ends early (a failure, the deadline, a cancellation)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from runtime_helpers import (
    chain_reference,
    elementwise_chain,
    make_registry,
    spy_on_compute,
    two_chains,
)

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.cancellation import CancellationManager
from kernloom.runtime.compiled_line import CompiledLine
from kernloom.runtime.executor import Executor, GraphView, RunArgs
from kernloom.runtime.step import Step
from kernloom.runtime.straight_line import StraightLine

MiB = 1 << 20


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry(faults=True)


@pytest.fixture
def straight_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the devices whose partitions ran on the straight-line executor."""
    runs: list[str] = []
    for form in (StraightLine, CompiledLine):
        original = form.execute

        def spy(
            self: Any, args: RunArgs, original: Callable[..., Any] = original
        ) -> BaseException | None:
            runs.append(self.view.device.name)
            return original(self, args)  # type: ignore[no-any-return]

        monkeypatch.setattr(form, "execute", spy)
    return runs


def interpret_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps run the interpreted straight line, never its compiled form."""
    monkeypatch.setattr(CompiledLine, "compile", classmethod(lambda cls, schedule: None))


@pytest.fixture
def interpreted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests of the interpreter's own paths (``interpret_only``)."""
    interpret_only(monkeypatch)


@pytest.fixture(params=["compiled", "interpreted"])
def line(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs twice: on the compiled straight line where a step has one, and on the
    interpreted one only."""
    if request.param == "interpreted":
        interpret_only(monkeypatch)
    return str(request.param)


def view_of(registry: klp.Registry, g: kl.Graph) -> GraphView:
    device = registry.create_devices().lookup("CPU:0")
    return GraphView(g, device, lambda n: registry.create_kernel(n.to_node_def(), device))


# -- what is compiled and when it runs -------------------------------------------------------------


def test_the_program_follows_the_general_executors_order_and_frees_values_at_last_use(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.constant(np.float32(2), name="x")
        a = kl.ops.neg(x, name="a")
        b = kl.ops.add(a, x, name="b")  # x's last reader, but a constant is never taken
        kl.ops.mul(b, a, name="c")  # a's last reader
    view = view_of(registry, g)
    straight = StraightLine.compile(view)
    assert straight is not None and straight.sequential
    names = [view.items[entry[-1]].name for entry in straight.program]
    assert names == ["x", "a", "b", "c"]
    kinds = {view.items[e[-1]].name: e[0] for e in straight.program}
    assert kinds["a"] == 0 and kinds["b"] == 1 and kinds["c"] == 1  # unary, binary direct
    assert kinds["x"] == 3  # a constant: its device value is in the program
    assert np.asarray(straight.program[0][2]) == 2
    entry = {view.items[e[-1]].name: e for e in straight.program}
    # b reads a (still needed by c: not taken) and x (its last reader, but x is a
    # constant, which its kernel keeps: not taken either); c is the last reader of b and a.
    assert entry["b"][4] == 0
    assert entry["c"][4] == 0b11
    assert straight.num_values == 3  # x, a, b; c's output has no consumer
    assert entry["c"][5] == -1


def test_expensive_nodes_in_a_chain_are_sequential_two_chains_are_not(
    registry: klp.Registry,
) -> None:
    g, _, _ = two_chains(registry, 64, 3)
    straight = StraightLine.compile(view_of(registry, g))
    assert straight is not None and not straight.sequential
    chain = kl.Graph(registry)
    with chain.as_default():
        y = kl.constant(np.eye(3), name="w")
        for _ in range(4):
            y = kl.ops.tanh(kl.ops.mat_mul(y, y))
    straight = StraightLine.compile(view_of(registry, chain))
    assert straight is not None and straight.sequential


def test_partitions_with_async_kernels_or_control_flow_are_not_compiled(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        g.add_node("FinishesLater", [x], name="late")
    assert StraightLine.compile(view_of(registry, g)) is None
    loop = kl.Graph(registry)
    with loop.as_default():
        kl.while_loop(lambda i: kl.ops.less(i, 3), lambda i: kl.ops.add(i, 1), [kl.constant(0)])
    assert StraightLine.compile(view_of(registry, loop)) is None


def test_which_executor_runs_a_step(registry: klp.Registry, straight_runs: list[str]) -> None:
    g, out, ref = two_chains(registry, 64, 3)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        np.testing.assert_allclose(sess.run(out), ref)
        assert straight_runs == ["/job:localhost/replica:0/task:0/device:CPU:0"]
        # A trace needs per-node records: the general executor runs traced steps.
        np.testing.assert_allclose(sess.run(out, options=kl.RunOptions(trace=True)), ref)
        assert len(straight_runs) == 1
    with kl.Session(g, kl.SessionConfig(inter_op_threads=2, graph_optimizer=False)) as sess:
        np.testing.assert_allclose(sess.run(out), ref)  # two chains to run at once
        assert len(straight_runs) == 1
    chain = kl.Graph(registry)
    with chain.as_default():
        x = kl.placeholder(kl.float64, [2, 2], name="x")
        y = kl.ops.softmax(kl.ops.relu(kl.ops.mat_mul(x, x)))
    xv = np.array([[1.0, -2.0], [0.5, 3.0]])
    with kl.Session(chain, kl.SessionConfig(inter_op_threads=2, graph_optimizer=False)) as sess:
        got = sess.run(y, {x: xv})
    h = np.maximum(xv @ xv, 0)
    np.testing.assert_allclose(got, np.exp(h) / np.exp(h).sum(axis=1, keepdims=True))
    assert len(straight_runs) == 2  # a chain: nothing to run at once, even with a pool


@pytest.fixture
def through_context(monkeypatch: pytest.MonkeyPatch, interpreted: None) -> list[str]:
    """The ops of the nodes the (interpreted) straight-line executor ran through
    ``compute``."""
    return spy_on_compute(monkeypatch, op_names=True)


def test_feeds_fetches_and_constants_are_moved_by_the_program_itself(
    registry: klp.Registry, straight_runs: list[str], through_context: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float64, [2, 2], name="x")
        k = kl.constant(np.array([[1.0, 2.0], [3.0, 4.0]]), name="k")
        y = kl.ops.sum(kl.ops.mul(x, k), [1], name="y")  # Sum has no direct entry
    xv = np.array([[1.0, -1.0], [0.5, 2.0]])
    want = (xv * [[1.0, 2.0], [3.0, 4.0]]).sum(axis=1)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv}), want)
        got = sess.run([y, k, x], {x: xv})  # a fetched constant and a fetched feed
    np.testing.assert_allclose(got[0], want)
    np.testing.assert_array_equal(got[1], [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(got[2], xv)
    assert len(straight_runs) == 2
    # Only Sum runs through compute: Mul's direct entry writes into a buffer of its own
    # (its feed is the caller's, the constant the kernel's); _Arg, Const, _Retval and
    # Sum's constant axis never run through compute either.
    assert through_context == ["Sum", "Sum"]


def test_a_product_runs_directly_its_buffer_is_counted_and_bad_shapes_are_explained(
    registry: klp.Registry, straight_runs: list[str], through_context: list[str]
) -> None:
    g = kl.Graph(registry)
    w = np.arange(12.0).reshape(3, 4)
    with g.as_default():
        x = kl.placeholder(kl.float64, None, name="x")  # any shape: the kernel checks
        y = kl.ops.relu(kl.ops.mat_mul(x, kl.constant(w), name="y"), name="r")
    xv = np.array([[1.0, -2.0, 0.5], [0.0, 1.0, -1.0]])
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        got = sess.run(y, {x: xv}, run_metadata=md)
        np.testing.assert_allclose(got, np.maximum(xv @ w, 0))
        stats = next(iter(md.memory.values()))
        assert (stats.num_allocs, stats.peak_bytes_in_use) == (1, got.nbytes)  # relu in place
        assert through_context == []  # MatMul and Relu both ran their direct entries
        with pytest.raises(kl.KernelError, match=r"node 'y' \(op MatMul\).*inner dimensions"):
            sess.run(y, {x: np.ones((2, 5))})
        assert through_context == ["MatMul"]  # the entry declined; compute explained
    assert len(straight_runs) == 2


def test_a_device_that_wraps_compute_sees_every_kernel(
    registry: klp.Registry, through_context: list[str]
) -> None:
    from kernloom_cpu_numpy.device import NumpyCPUDevice

    seen: list[str] = []

    class Wrapping(NumpyCPUDevice):
        def compute(self, kernel: Any, ctx: Any) -> None:
            seen.append(ctx.signature.op_def.name)
            super().compute(kernel, ctx)

    cpu = registry.create_devices().lookup("CPU:0")
    device = Wrapping(cpu.attributes, 1)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.constant(np.float32(3), name="x")
        kl.ops.neg(x, name="y")
    view = GraphView(g, device, lambda n: registry.create_kernel(n.to_node_def(), device))
    assert StraightLine.compile(view) is not None
    assert {entry[0] for entry in StraightLine.compile(view).program} == {2}  # all through compute
    Executor(view).run(RunArgs(Step()))
    assert seen == ["Const", "Neg"]
    assert through_context == ["Const", "Neg"]
    device.close()


def test_a_step_without_a_call_frame_fails_in_the_arg_node(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        node = g.add_node("_Arg", [], {"T": kl.float32, "index": 0}, name="feed")
        g.add_node("_Retval", [node.outputs[0]], {"T": kl.float32, "index": 0}, name="fetch")
    view = view_of(registry, g)
    assert StraightLine.compile(view) is not None
    with pytest.raises(kl.KernelError, match=r"'feed'.*there is no call frame"):
        Executor(view).run(RunArgs(Step()))


# -- forwarding and release --------------------------------------------------------------------


def test_the_elementwise_chain_runs_in_one_buffer(
    registry: klp.Registry, straight_runs: list[str]
) -> None:
    g, x, y = elementwise_chain(registry, 8, add_feed=True)
    xv = np.random.default_rng(0).standard_normal(MiB).astype(np.float32)
    original = xv.copy()
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        out = sess.run(y, {x: xv}, run_metadata=md)
    assert straight_runs
    np.testing.assert_allclose(
        out, chain_reference(original, 8, add_feed=True), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(xv, original)  # the feed is never written
    stats = next(iter(md.memory.values()))
    assert stats.peak_bytes_in_use == xv.nbytes  # one buffer for the nine ops


def test_fetched_fed_constant_and_shared_values_are_never_overwritten(
    registry: klp.Registry, straight_runs: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [1000], name="x")
        k = kl.constant(np.full(1000, 0.5, np.float32), name="k")
        a = kl.ops.neg(x, name="a")
        b = kl.ops.exp(a, name="b")  # a's reader; a is fetched in some runs
        c = kl.ops.tanh(a, name="c")  # a's other reader
        d = kl.ops.add(b, c, name="d")
        e = kl.ops.mul(d, k, name="e")
    xv = np.linspace(-1, 1, 1000, dtype=np.float32)
    want = {
        "a:0": -xv,
        "b:0": np.exp(-xv),
        "c:0": np.tanh(-xv),
        "d:0": np.exp(-xv) + np.tanh(-xv),
        "e:0": (np.exp(-xv) + np.tanh(-xv)) * 0.5,
    }
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        for fetches in ([e], [a, e], [e, a], [a, b, c, d, e], [d, e], [b, e]):
            got = sess.run(fetches, {x: xv})
            for tensor, value in zip(fetches, got, strict=True):
                np.testing.assert_allclose(value, want[tensor.name], rtol=1e-6)
        np.testing.assert_array_equal(sess.run(k), np.full(1000, 0.5))
    np.testing.assert_array_equal(xv, np.linspace(-1, 1, 1000, dtype=np.float32))
    assert len(straight_runs) == 7


@pytest.mark.parametrize("trace", [False, True], ids=["straight-line", "general"])
def test_a_kernel_without_a_direct_entry_forwards_its_last_read_input(
    registry: klp.Registry, straight_runs: list[str], trace: bool
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [4, 8], name="x")
        y = kl.ops.softmax(kl.ops.neg(x, name="n"), name="s")  # Softmax has no direct entry
    xv = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    e = np.exp(-xv - (-xv).max(axis=1, keepdims=True))
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        before = sess.devices.lookup("CPU:0").memory_stats().num_allocs
        got = sess.run(y, {x: xv}, kl.RunOptions(trace=trace))
        allocs = sess.devices.lookup("CPU:0").memory_stats().num_allocs - before
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    assert allocs == 1  # Neg's output (the feed is the caller's); Softmax writes into it
    assert len(straight_runs) == (0 if trace else 1)


def test_a_node_reading_one_value_twice_never_overwrites_it_while_reading(
    registry: klp.Registry, straight_runs: list[str]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float64, [5], name="x")
        a = kl.ops.exp(x)
        y = kl.ops.sub(kl.ops.mul(a, a), a)  # mul reads a twice; sub reads its result and a
    xv = np.arange(5.0)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv}), np.exp(xv) ** 2 - np.exp(xv))
    assert straight_runs


CHAIN = 6


@pytest.mark.parametrize(
    ("fed", "constant"),
    [
        ((16,), ()),  # a 0-d constant (a scalar)
        ((16,), (1,)),
        ((16,), (16,)),
        ((4, 1), (1, 16)),  # the first Add grows the value to [4, 16]
        ((), (16,)),  # a fed scalar
        ((2, 16), (16,)),  # rank mismatch
    ],
    ids=["scalar", "one", "vector", "outer", "fed-scalar", "rank"],
)
@pytest.mark.parametrize("running_first", [True, False], ids=["y+c", "c+y"])
def test_a_chain_with_broadcasting_operands_stays_on_the_direct_entries(
    registry: klp.Registry,
    monkeypatch: pytest.MonkeyPatch,
    interpreted: None,
    fed: tuple[int, ...],
    constant: tuple[int, ...],
    running_first: bool,
) -> None:
    """Whatever the operands' shapes, every Add of the chain is a direct entry of the
    program and runs as one -- the first too, whose inputs are the caller's feed and a
    constant (neither may be overwritten): its entry writes into a new buffer."""
    through_compute = spy_on_compute(monkeypatch)
    rng = np.random.default_rng(7)
    constants = [rng.standard_normal(constant).astype(np.float32) for _ in range(CHAIN)]
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, list(fed), name="x")
        y = x
        for i, c in enumerate(constants):
            k = kl.constant(c, name=f"c{i}")
            y = kl.ops.add(y, k, name=f"add{i}") if running_first else kl.ops.add(k, y)
    xv = rng.standard_normal(fed).astype(np.float32)
    original_xv = xv.copy()
    want = original_xv.astype(np.float64)
    for c in constants:  # the reference: numpy broadcasting, one add after another
        want = want + c
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        executor = sess.make_callable(y, [x])
        got = executor(xv)
        through_compute.clear()
        got = executor(xv)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(xv, original_xv)  # the feed was never written
    assert through_compute == []  # none ran through compute
    # The plan: every Add is a binary direct entry (kind 1) that takes the running value.
    view = view_of(registry, g)
    program = StraightLine.compile(view)
    assert program is not None
    adds = [e for e in program.program if view.items[e[-1]].node.op in ("Add", "AddV2")]
    assert len(adds) == CHAIN and all(e[0] == 1 for e in adds)
    assert [e[4] for e in adds[1:]] == [1 if running_first else 2] * (CHAIN - 1)


@pytest.mark.parametrize(
    ("dtype", "fed", "other"),
    [
        (np.float32, (16,), (16,)),
        (np.float64, (4, 16), ()),  # a scalar operand
        (np.float32, (4, 1), (1, 16)),  # the result larger than both
        (np.int32, (4, 16), (16,)),
        (np.complex64, (3,), (3,)),
    ],
    ids=["same", "scalar", "outer", "int32", "complex"],
)
def test_fan_out_nodes_run_their_direct_entries_into_counted_buffers(
    registry: klp.Registry,
    monkeypatch: pytest.MonkeyPatch,
    line: str,
    dtype: Any,
    fed: tuple[int, ...],
    other: tuple[int, ...],
) -> None:
    """A node whose input is still needed (the caller's feed read by two nodes, a value
    with two consumers) cannot write in place; its direct entry writes into a buffer of
    its own from the device's ``allocate`` (counted: the step's allocations and bytes),
    so no node of these graphs runs through ``compute``."""
    through_compute = spy_on_compute(monkeypatch)
    rng = np.random.default_rng(3)

    def value(shape: tuple[int, ...]) -> Any:
        v = rng.standard_normal(shape) * 4
        if np.dtype(dtype).kind == "c":
            v = v + 1j * rng.standard_normal(shape)
        return np.asarray(v).astype(dtype)

    xv, cv = value(fed), value(other)
    kl_dtype = kl.as_dtype(dtype)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl_dtype, list(fed), name="x")
        c = kl.constant(cv, name="c")
        h = x
        for i in range(3):  # h feeds a Neg and an Add: neither may overwrite it
            h = kl.ops.mul(kl.ops.neg(h, name=f"neg{i}"), kl.ops.add(h, c, name=f"add{i}"))
    want = xv
    for _ in range(3):
        want = np.negative(want) * (want + cv)
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        call = sess.make_callable(h, [x])
        call(xv)
        (device,) = [d for d in sess.devices if d.device_type == "CPU"]
        before = device.memory_stats().num_allocs
        got = call(xv)
        allocated = device.memory_stats().num_allocs - before
    if np.dtype(dtype).kind == "c":  # numpy's complex multiply rounds differently in place
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:  # the same ufuncs, in the same order
        np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    assert through_compute == []
    # Each round's first reader of h allocates and its second writes into h -- but for the
    # caller's feed, which both readers must leave alone; Mul writes into an operand.
    assert allocated == 4


DIVISION_REFERENCES: dict[str, Callable[[Any, Any], Any]] = {
    # TensorFlow's semantics, computed in float64 (exact for these small integers).
    "floor_div": lambda x, y: np.floor(x / y),
    "floor_mod": lambda x, y: x - np.floor(x / y) * y,
    "truncate_div": lambda x, y: np.trunc(x / y),
    "truncate_mod": lambda x, y: x - np.trunc(x / y) * y,
}


@pytest.mark.parametrize("op", sorted(DIVISION_REFERENCES))
@pytest.mark.parametrize(
    ("dtype", "fed", "other"),
    [(np.int32, (4, 6), (6,)), (np.int64, (6,), (3, 1)), (np.float32, (2, 6), ())],
    ids=["int32-vector", "int64-outer", "float32-scalar"],
)
def test_fan_out_divisions_run_their_direct_entries_and_still_refuse_zero(
    registry: klp.Registry,
    monkeypatch: pytest.MonkeyPatch,
    line: str,
    op: str,
    dtype: Any,
    fed: tuple[int, ...],
    other: tuple[int, ...],
) -> None:
    """A division whose dividend is still needed elsewhere writes into a counted buffer of
    its own from its direct entry (no ``compute``), broadcasting to a higher rank too; an
    integer zero divisor is still TensorFlow's error, naming the node."""
    through_compute = spy_on_compute(monkeypatch)
    rng = np.random.default_rng(5)
    xv = rng.integers(-50, 50, fed).astype(dtype)
    divisor = rng.integers(1, 7, other) * rng.choice([-1, 1], other)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), list(fed), name="x")
        d = kl.placeholder(kl.as_dtype(dtype), list(other), name="d")
        # x is read by the division and the Neg after it: the division may not overwrite it.
        q = getattr(kl.ops, op)(x, d, name="division")
        y = kl.ops.add(kl.ops.neg(x), q)
    want = -xv.astype(np.float64) + DIVISION_REFERENCES[op](
        xv.astype(np.float64), divisor.astype(np.float64)
    )
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        call = sess.make_callable(y, [x, d])
        got = call(xv, np.asarray(divisor, dtype))
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.dtype == dtype and got.shape == np.broadcast_shapes(fed, other)
        assert through_compute == []
        if np.dtype(dtype).kind == "i":
            zero = np.asarray(divisor, dtype).copy()
            zero.flat[0] = 0
            with pytest.raises(kl.KernelError, match=r"node 'division'.*Integer division by zero"):
                call(xv, zero)


@pytest.mark.parametrize(
    ("dtype", "fed", "other"),
    [(np.float32, (3, 5), (5,)), (np.float64, (5,), ()), (np.int32, (5,), (2, 1))],
    ids=["float32-vector", "float64-scalar", "int32-outer"],
)
def test_comparisons_write_new_bool_buffers_from_their_direct_entries(
    registry: klp.Registry,
    monkeypatch: pytest.MonkeyPatch,
    line: str,
    dtype: Any,
    fed: tuple[int, ...],
    other: tuple[int, ...],
) -> None:
    """Less, Greater, LessEqual and GreaterEqual never write into an operand (their bool
    output is another dtype) -- not even one nothing else holds -- and need no
    ``compute``: NaN compares false, broadcasting as numpy's."""
    through_compute = spy_on_compute(monkeypatch)
    rng = np.random.default_rng(11)
    xv = rng.integers(-3, 4, fed).astype(dtype)
    cv = rng.integers(-3, 4, other).astype(dtype)
    if np.dtype(dtype).kind == "f":
        xv.flat[0] = np.nan
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), list(fed), name="x")
        c = kl.constant(cv, name="c")
        h = kl.ops.neg(x)  # a value nothing else holds: still not an output buffer for a bool
        results = [
            kl.ops.less(h, c),
            kl.ops.greater(x, c),
            kl.ops.less_equal(c, x),
            kl.ops.greater_equal(x, c),
        ]
        y = kl.ops.logical_or(kl.ops.logical_and(results[0], results[1]), results[2])
        z = kl.ops.logical_and(y, results[3])
    want = (((-xv < cv) & (xv > cv)) | (cv <= xv)) & (xv >= cv)
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        call = sess.make_callable(z, [x])
        call(xv)
        got = call(xv)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.bool_
    assert through_compute == []


def test_equality_predicates_and_casts_run_their_direct_entries(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """Equal, NotEqual, IsNan, IsInf, IsFinite and Cast on values another node still
    reads need no ``compute``; Equal of shapes that cannot broadcast (its
    ``incompatible_shape_error=False``) is declined there and is one scalar False from
    ``compute``; a Cast to the same type hands its input on."""
    through_compute = spy_on_compute(monkeypatch, op_names=True)
    xv = np.array([[1.5, np.nan, -np.inf], [np.inf, -2.5, 3e9]], np.float32)
    cv = np.array([1.5, 0.0, -np.inf], np.float32)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        c = kl.constant(cv, name="c")
        h = kl.ops.neg(kl.ops.neg(x))  # a value of the step's own, read by several nodes
        fetches = [
            kl.ops.equal(h, c),
            kl.ops.not_equal(x, c),
            kl.ops.is_nan(h),
            kl.ops.is_inf(x),
            kl.ops.is_finite(h),
            kl.ops.cast(h, DstT=kl.int32),  # TF's CPU: INT_MIN for NaN, +-inf, out of range
            kl.ops.cast(h, DstT=kl.float32),  # the same type: the input itself
            kl.ops.equal(x, kl.constant(np.ones(2, np.float32)), incompatible_shape_error=False),
        ]
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        call = sess.make_callable(fetches, [x])
        call(xv)
        through_compute.clear()
        got = call(xv)
    np.testing.assert_array_equal(got[0], [[True, False, True], [False, False, False]])
    np.testing.assert_array_equal(got[1], [[False, True, False], [True, True, True]])
    np.testing.assert_array_equal(got[2], np.isnan(xv))
    np.testing.assert_array_equal(got[3], np.isinf(xv))
    np.testing.assert_array_equal(got[4], np.isfinite(xv))
    imin = np.iinfo(np.int32).min
    np.testing.assert_array_equal(got[5], [[1, imin, imin], [imin, -2, imin]])
    assert got[5].dtype == np.int32
    np.testing.assert_array_equal(got[6], xv)
    assert got[7].shape == () and not got[7]
    assert [g.dtype for g in got[:5]] == [np.bool_] * 5
    assert through_compute == ["Equal"]  # the shapes that do not broadcast, only


def test_select_v2_runs_its_direct_entry_in_place_or_into_a_new_buffer(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """SelectV2 writes into ``otherwise`` where nothing else holds it and it has the
    result's shape, else into a new buffer (a broadcast condition and operands, the
    caller's feed); shapes that do not broadcast are ``compute``'s error, naming the node."""
    through_compute = spy_on_compute(monkeypatch)
    xv = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, np.nan]], np.float32)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None], name="x")
        row = kl.placeholder(kl.float32, [None], name="row")
        positive = kl.ops.greater(x, 0.0)
        mine = kl.ops.neg(x)  # read by the select alone: may become its output
        picked = kl.ops.select_v2(positive, x, mine, name="picked")  # |x|, NaN -> -NaN
        mixed = kl.ops.select_v2(kl.ops.less(row, 0.0), row, x, name="mixed")  # broadcast
    want_mixed = np.where(np.array([-1.0, 2.0, -3.0]) < 0, [-1.0, 2.0, -3.0], xv)
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        call = sess.make_callable([picked, mixed], [x, row])
        rv = np.array([-1.0, 2.0, -3.0], np.float32)
        call(xv, rv)
        (device,) = [d for d in sess.devices if d.device_type == "CPU"]
        before = device.memory_stats().num_allocs
        got = call(xv, rv)
        # Neg, the two comparisons and ``mixed`` allocate; ``picked`` writes into Neg's.
        assert device.memory_stats().num_allocs - before == 4
        np.testing.assert_array_equal(got[0], np.where(xv > 0, xv, -xv))
        np.testing.assert_array_equal(got[1], want_mixed)
        np.testing.assert_array_equal(xv[0], [1.0, -2.0, 3.0])  # the feed is untouched
        assert through_compute == []
        with pytest.raises(kl.KernelError, match=r"node 'mixed' \(op SelectV2\)"):
            call(xv, np.ones(2, np.float32))


def test_expand_dims_and_squeeze_are_views_from_their_direct_entries(
    registry: klp.Registry, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    """ExpandDims (negative and positive ``dim``) and Squeeze (given axes, or every 1) make
    their views without ``compute``; a ``dim`` or axis out of range is ``compute``'s error,
    naming the node."""
    through_compute = spy_on_compute(monkeypatch)
    xv = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None, None], name="x")
        dim = kl.placeholder(kl.int32, [], name="dim")
        h = kl.ops.neg(x)
        fetches = [
            kl.ops.expand_dims(h, dim, name="expanded"),
            kl.ops.expand_dims(x, kl.constant(np.int32(-1))),
            kl.ops.squeeze(kl.ops.neg(x), squeeze_dims=[1], name="squeezed"),
            kl.ops.squeeze(kl.ops.exp(x)),
        ]
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        call = sess.make_callable(fetches, [x, dim])
        got = call(xv, np.int32(0))
        assert through_compute == []
        np.testing.assert_array_equal(got[0], -xv[np.newaxis])
        np.testing.assert_array_equal(got[1], xv[..., np.newaxis])
        np.testing.assert_array_equal(got[2], -xv.reshape(2, 3))
        np.testing.assert_allclose(got[3], np.exp(xv).reshape(2, 3), rtol=1e-6)
        np.testing.assert_array_equal(call(xv, np.int32(-4))[0], -xv[np.newaxis])
        with pytest.raises(kl.KernelError, match=r"node 'expanded' \(op ExpandDims\).*dim 4"):
            call(xv, np.int32(4))
        with pytest.raises(kl.KernelError, match=r"node 'squeezed' \(op Squeeze\)"):
            call(np.zeros((2, 2, 3), np.float32), np.int32(0))


def test_a_direct_entrys_new_buffer_is_held_to_the_memory_limit(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [1024], name="x")
        y = kl.ops.add(kl.ops.tanh(x, name="big"), x)  # tanh's input is read again
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False, memory_limit={"CPU": 3000})
    error = r"node 'big' \(op Tanh\).*CPU"
    with kl.Session(g, config) as sess, pytest.raises(kl.ResourceExhaustedError, match=error):
        sess.run(y, {x: np.ones(1024, np.float32)})


def test_broadcasting_to_a_shape_larger_than_both_operands_gets_a_new_buffer(
    registry: klp.Registry, straight_runs: list[str]
) -> None:
    """Neither operand can hold the [3, 4] result: the direct entry allocates it; shapes
    that do not broadcast are declined there and explained by ``compute``."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None], name="x")
        y = kl.placeholder(kl.float32, [None], name="y")
        z = kl.ops.mul(kl.ops.add(kl.ops.neg(x), y), kl.ops.neg(y))
    xv = np.arange(3, dtype=np.float32).reshape(3, 1)
    yv = np.arange(4, dtype=np.float32)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        np.testing.assert_array_equal(sess.run(z, {x: xv, y: yv}), (-xv + yv) * -yv)
        with pytest.raises(kl.KernelError, match=r"node '\w+' \(op Add\).*broadcast"):
            sess.run(z, {x: np.ones((3, 2), np.float32), y: yv})
    assert straight_runs


# -- kernels with direct entries -----------------------------------------------------------------


def direct_registry(direct: Callable[..., Any]) -> klp.Registry:
    """The CPU plugin plus op ``Twice`` whose kernel has the given direct entry."""

    def twice(ctx: klp.OpKernelContext) -> None:
        x = ctx.input(0)
        np.multiply(x, 2, out=ctx.forward_input_or_allocate_output([0], 0, x.shape))

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("Twice").input("x: float32").output("y: float32")
            lib = klp.KernelLibrary()
            lib.kernel("Twice", device="CPU", direct=direct)(twice)
            registry.register_kernels(lib)

    reg = make_registry()
    reg.register_plugin(Plugin(), name="twice")
    return reg


def twice_graph(reg: klp.Registry, compiled: bool = False) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    """``twice(neg(x))``; ``compiled``: ``twice(neg(neg(neg(x))))``, whose later Negs write
    in place provably, so the step is a compiled line (which writes Twice's direct call
    into its generated code) -- the same values (run with the optimizer off, which would
    drop the double negation)."""
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        inner = kl.ops.neg(kl.ops.neg(x)) if compiled else x  # -(-x) = x: the same values
        source = kl.ops.neg(inner, name="n")
        y = g.add_node("Twice", [source], name="twice").outputs[0]
    return g, x, y


# Untraced, the straight-line executor runs these (interpreted, or compiled for the graph
# with an in-place node); traced, the general one (which calls direct entries too, and
# reports an input it returned as forwarded).
EXECUTORS = pytest.mark.parametrize(
    ("trace", "compiled"),
    [(False, False), (False, True), (True, False)],
    ids=["straight", "compiled", "general"],
)


@pytest.fixture
def compiled_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The steps run as a compiled line (after ``straight_runs``' spy, if both are used)."""
    runs: list[str] = []
    original = CompiledLine.execute

    def spy(self: Any, args: RunArgs) -> BaseException | None:
        runs.append(self.view.device.name)
        return original(self, args)

    monkeypatch.setattr(CompiledLine, "execute", spy)
    return runs


@EXECUTORS
def test_a_direct_entry_gets_the_reuse_mask_and_its_result_is_used(
    straight_runs: list[str], compiled_runs: list[str], trace: bool, compiled: bool
) -> None:
    calls: list[tuple[int, bool]] = []

    def direct(reuse: int, x: np.ndarray) -> Any:
        calls.append((reuse, x.flags.writeable))
        return np.multiply(x, 2, out=x) if reuse else NotImplemented

    g, x, y = twice_graph(direct_registry(direct), compiled)
    options = kl.RunOptions(trace=trace)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        md = kl.RunMetadata()
        np.testing.assert_array_equal(sess.run(y, {x: [1, 2, 3]}, options, md), [-2, -4, -6])
        if trace:
            assert md.step_stats is not None
            assert md.step_stats.for_node("twice").forwarded == ((0, 0),)
        # Fetched too, the Neg's output is held by the caller: no reuse, compute runs.
        got = sess.run([y, "n:0"], {x: [1, 2, 3]}, options)
        np.testing.assert_array_equal(got[0], [-2, -4, -6])
        np.testing.assert_array_equal(got[1], [-1, -2, -3])
    assert calls == [(1, True), (0, True)]
    assert len(straight_runs) == (0 if trace else 2)
    assert len(compiled_runs) == (2 if compiled else 0)


@EXECUTORS
@pytest.mark.parametrize("arity", [1, 3], ids=["one-input", "three-inputs"])
def test_a_direct_entry_with_the_wrong_dtype_is_blamed(
    straight_runs: list[str], compiled_runs: list[str], trace: bool, compiled: bool, arity: int
) -> None:
    """One input: a unary row of the straight line; three: a row of the general kind."""
    if arity == 1:
        reg = direct_registry(lambda reuse, x: x.astype(np.float64) * 2)
        g, x, y = twice_graph(reg, compiled)
        where = r"node 'twice' \(op Twice\)"
    else:
        reg = sum3_registry(lambda reuse, a, b, c: (a + b + c).astype(np.float64))
        g, x, y = sum3_graph(reg, compiled)
        where = r"node 'sum3' \(op Sum3\)"
    with (
        kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess,
        pytest.raises(kl.KernelError, match=where + r".*dtype float64.*declares float32"),
    ):
        sess.run(y, {x: [1, 2, 3]}, kl.RunOptions(trace=trace))
    assert len(straight_runs) == (0 if trace else 1)
    assert len(compiled_runs) == (1 if compiled else 0)


@EXECUTORS
def test_a_direct_entry_that_raises_names_the_node_and_the_session_goes_on(
    straight_runs: list[str], compiled_runs: list[str], trace: bool, compiled: bool
) -> None:
    def direct(reuse: int, x: np.ndarray) -> Any:
        if x[0] > 0:
            raise ArithmeticError("positive first element")
        return NotImplemented

    g, x, y = twice_graph(direct_registry(direct), compiled)
    options = kl.RunOptions(trace=trace)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        with pytest.raises(
            kl.KernelError,
            match=r"node 'twice' \(op Twice\) on .*CPU:0 failed.*ArithmeticError: positive",
        ) as info:
            sess.run(y, {x: [-1, 2, 3]}, options)
        assert isinstance(info.value.__cause__, ArithmeticError)
        np.testing.assert_array_equal(sess.run(y, {x: [1, 2, 3]}, options), [-2, -4, -6])
    assert len(straight_runs) == (0 if trace else 2)
    assert len(compiled_runs) == (2 if compiled else 0)


def sum3_registry(direct: Callable[..., Any]) -> klp.Registry:
    """The CPU plugin plus op ``Sum3`` (a + b + c) whose kernel has the given direct entry
    of three inputs: a row of the general kind in the straight line, a ``call`` line in
    the compiled one."""

    def sum3(ctx: klp.OpKernelContext) -> None:
        a, b, c = (ctx.input(i) for i in range(3))
        ctx.set_output(0, a + b + c)

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            (
                registry.register_op("Sum3")
                .input("a: float32")
                .input("b: float32")
                .input("c: float32")
                .output("y: float32")
            )
            lib = klp.KernelLibrary()
            lib.kernel("Sum3", device="CPU", direct=direct)(sum3)
            registry.register_kernels(lib)

    reg = make_registry()
    reg.register_plugin(Plugin(), name="sum3")
    return reg


def sum3_graph(reg: klp.Registry, compiled: bool) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    """``sum3(neg(x), x, [10, 20, 30])``; ``compiled``: the Neg's input negated twice first
    (its later Neg writes in place provably, so the step is a compiled line)."""
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        inner = kl.ops.neg(kl.ops.neg(x)) if compiled else x
        n = kl.ops.neg(inner, name="n")
        c = kl.constant(np.array([10, 20, 30], np.float32))
        y = g.add_node("Sum3", [n, x, c], name="sum3").outputs[0]
    return g, x, y


@EXECUTORS
def test_a_direct_entry_of_three_inputs_gets_the_reuse_mask_and_may_decline(
    straight_runs: list[str], compiled_runs: list[str], trace: bool, compiled: bool
) -> None:
    calls: list[int] = []

    def direct(reuse: int, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Any:
        calls.append(reuse)
        if a[0] > 0:
            return NotImplemented  # compute runs instead
        return np.add(np.add(a, b, out=a), c, out=a) if reuse & 1 else a + b + c

    g, x, y = sum3_graph(sum3_registry(direct), compiled)
    options = kl.RunOptions(trace=trace)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)) as sess:
        xv = np.array([1, 2, 3], np.float32)
        np.testing.assert_array_equal(sess.run(y, {x: xv}, options), [10, 20, 30])
        np.testing.assert_array_equal(sess.run(y, {x: -xv}, options), [10, 20, 30])  # declined
        got = sess.run([y, "n:0"], {x: xv}, options)  # the Neg's output held: not reusable
        np.testing.assert_array_equal(got[0], [10, 20, 30])
        np.testing.assert_array_equal(got[1], -xv)
        np.testing.assert_array_equal(xv, [1, 2, 3])  # the caller's feed untouched
    # Only the Neg's output (input 0) may be overwritten: the feed and the constant never.
    assert calls == [1, 1, 0]
    assert len(straight_runs) == (0 if trace else 3)
    assert len(compiled_runs) == (3 if compiled else 0)


def test_direct_is_for_kernel_functions_only() -> None:
    class K(klp.OpKernel):
        def compute(self, ctx: klp.OpKernelContext) -> None: ...

    lib = klp.KernelLibrary()
    with pytest.raises(kl.InvalidArgumentError, match=r"direct= is for kernel functions.*K"):
        lib.kernel("Neg", device="CPU", direct=lambda reuse, x: x)(K)


# -- ending early ---------------------------------------------------------------------------------


def slow_registry(delay_s: float, ran: list[int] | None = None) -> klp.Registry:
    """A ``Slow`` op that sleeps ``delay_s`` and adds 1; each run appends to ``ran``."""

    def slow(ctx: klp.OpKernelContext) -> None:
        time.sleep(delay_s)
        ctx.set_output(0, ctx.input(0) + 1)
        if ran is not None:
            ran.append(1)

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_op("Slow").input("x: float32").output("y: float32")
            lib = klp.KernelLibrary()
            lib.kernel("Slow", device="CPU")(slow)
            registry.register_kernels(lib)

    reg = make_registry()
    reg.register_plugin(Plugin(), name="slow")
    return reg


def slow_chain(n: int, ran: list[int] | None = None) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    g = kl.Graph(slow_registry(0.02, ran))
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        y = x
        for i in range(n):
            y = g.add_node("Slow", [y], name=f"slow{i}").outputs[0]
    return g, x, y


def test_the_deadline_ends_a_straight_line_step_between_nodes(straight_runs: list[str]) -> None:
    ran: list[int] = []
    g, x, y = slow_chain(100, ran)  # 2 s of kernels
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        slow = sess.make_callable(y, [x])  # compiled here: the deadline times the step only
        with pytest.raises(kl.DeadlineExceededError, match=r"timeout of 0\.1 s"):
            slow([0, 1], options=kl.RunOptions(timeout_s=0.1))
        assert 0 < len(ran) < 100  # ended between nodes, not after the chain
        g2 = sess.run(y, {x: [0, 1]})  # no timeout: runs to the end
    np.testing.assert_array_equal(g2, [100, 101])
    assert len(straight_runs) == 2


def test_a_cancellation_from_another_thread_ends_a_straight_line_step(
    straight_runs: list[str],
) -> None:
    ran: list[int] = []
    g, x, y = slow_chain(100, ran)
    cancellation = CancellationManager()

    def cancel_once_running() -> None:
        # Waits for the step's first kernel rather than a fixed time: a loaded machine can
        # spend longer than any fixed delay compiling the session.
        deadline = time.monotonic() + 10
        while not ran and time.monotonic() < deadline:
            time.sleep(0.001)
        cancellation.cancel()

    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    with (
        kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess,
        pytest.raises(kl.CancelledError, match="cancelled"),
    ):
        sess.run(y, {x: [0, 1]}, cancellation=cancellation)
    canceller.join()
    assert 0 < len(ran) < 100  # ended between nodes, not after the chain
    assert straight_runs
