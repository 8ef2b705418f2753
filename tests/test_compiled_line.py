"""The compiled straight line: which nodes the plan writes as in-place calls (and which it
must not), results equal to numpy's computed directly, values that must survive (feeds,
fetches, values read twice, views), errors naming the node as the interpreter does, and
the deadline and cancellation between nodes."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.cancellation import CancellationManager
from kernloom.runtime.compiled_line import CompiledLine
from kernloom.runtime.executor import Executor, GraphView, RunArgs
from kernloom.runtime.step import Step

OFF = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


def executor_of(registry: klp.Registry, g: kl.Graph) -> Executor:
    device = registry.create_devices().lookup("CPU:0")
    return Executor(GraphView(g, device, lambda n: registry.create_kernel(n.to_node_def(), device)))


def in_place(registry: klp.Registry, g: kl.Graph) -> set[str]:
    """The names of the nodes the compiled form writes as in-place calls."""
    executor = executor_of(registry, g)
    compiled = executor.compiled
    assert compiled is not None
    assert executor.straight_line_for(parallel=False, observed=False) is compiled
    assert executor.straight_line_for(parallel=False, observed=True) is None
    return {executor.view.items[node].name for node in compiled.in_place}


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """Per compiled form a session builds, the names of its in-place nodes."""
    made: list[set[str]] = []
    original = CompiledLine.compile.__func__  # type: ignore[attr-defined]

    def spy(cls: type[CompiledLine], schedule: Any) -> CompiledLine | None:
        compiled: CompiledLine | None = original(cls, schedule)
        if compiled is not None:
            made.append({compiled.view.items[node].name for node in compiled.in_place})
        return compiled

    monkeypatch.setattr(CompiledLine, "compile", classmethod(spy))
    return made


# -- the plan ------------------------------------------------------------------------------------


def test_a_chain_is_compiled_and_all_but_its_first_add_write_in_place(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        y = x
        for i in range(5):
            y = kl.ops.add(y, kl.constant(np.float32(i)), name=f"add{i}")
    # add0 reads the feed and a constant (neither may be overwritten): the usual step.
    assert in_place(registry, g) == {"add1", "add2", "add3", "add4"}


def test_nothing_to_write_in_place_leaves_the_interpreter(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 2], name="x")
        kl.ops.mat_mul(kl.ops.add(x, x), x)
    executor = executor_of(registry, g)
    assert executor.schedule is not None and executor.compiled is None
    assert executor.straight_line_for(parallel=False, observed=False) is executor.schedule


def test_unknown_or_growing_shapes_fetches_shared_values_and_views_are_not_overwritten(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        u = kl.placeholder(kl.float32, None, name="u")
        a = kl.ops.add(x, x, name="a")
        b = kl.ops.add(a, kl.constant(np.ones(16, np.float32)), name="b")  # in place
        square = kl.ops.mul(b, b, name="square")  # reads b twice: not in place
        c = kl.ops.add(square, np.float32(1), name="c")  # square is read twice more:
        h = kl.ops.sub(square, np.float32(1), name="h")  # neither is in place
        s = kl.ops.add(c, h, name="s")  # c: fresh, read once, the result's shape
        grown = kl.ops.add(s, kl.constant(np.ones((2, 16), np.float32)), name="grown")
        d = kl.ops.neg(grown, name="d")  # grown is fresh, [2, 16] both: in place
        view = kl.ops.reshape(d, [32], name="view")
        e = kl.ops.add(view, np.float32(1), name="e")  # a view: not in place
        f = kl.ops.add(e, u, name="f")  # unknown shape: not in place
        kl.ops.neg(f, name="g")  # f's shape unknown: not in place
    assert in_place(registry, g) == {"b", "s", "d"}


def test_without_a_call_frame_a_compiled_partition_runs_or_its_arg_node_explains(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        c = kl.constant(np.arange(4, dtype=np.float32), name="c")
        kl.ops.neg(kl.ops.add(c, c, name="a"), name="n")  # n in place over a
    executor = executor_of(registry, g)
    assert executor.compiled is not None
    executor.run(RunArgs(Step()))  # nothing to feed or fetch: runs compiled
    with g.as_default():
        node = g.add_node("_Arg", [], {"T": kl.float32, "index": 0}, name="feed")
        kl.ops.neg(kl.ops.add(node.outputs[0], c), name="m")
    executor = executor_of(registry, g)
    assert executor.compiled is not None
    with pytest.raises(kl.KernelError, match=r"'feed'.*there is no call frame"):
        executor.run(RunArgs(Step()))


# -- results -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fed", "constant"),
    [
        ((16,), ()),
        ((16,), (1,)),
        ((16,), (16,)),
        ((4, 16), (16,)),
        ((4, 1), (1, 16)),
        ((), ()),  # one-element values: a new result each node, not written in place
        ((1,), ()),
        ((1, 1), (1,)),
    ],
    ids=["scalar", "one", "vector", "rank", "outer", "0-d", "[1]", "[1, 1]"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_a_chain_equals_numpy_and_leaves_the_feed_alone(
    registry: klp.Registry, fed: tuple[int, ...], constant: tuple[int, ...], dtype: Any
) -> None:
    rng = np.random.default_rng(3)
    constants = [rng.integers(-4, 5, constant).astype(dtype) for _ in range(6)]
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), list(fed), name="x")
        y = x
        for i, c in enumerate(constants):
            op = (kl.ops.add, kl.ops.sub, kl.ops.mul)[i % 3]
            y = op(y, kl.constant(c), name=f"n{i}")
    xv = rng.integers(-4, 5, fed).astype(dtype)
    kept = xv.copy()
    want: Any = kept
    for i, c in enumerate(constants):
        want = (np.add, np.subtract, np.multiply)[i % 3](want, c)
    with kl.Session(g, OFF) as sess:
        run = sess.make_callable(y, [x])
        for _ in range(2):  # the second run reuses nothing of the first
            got = run(xv)
            assert type(got) is np.ndarray and got.dtype == np.dtype(dtype)
            assert got.shape == np.shape(want)
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(xv, kept)
    assert in_place(registry, g) >= {f"n{i}" for i in range(2, 6)}


def test_a_maximum_minimum_chain_writes_in_place_without_numpy_warnings(
    registry: klp.Registry,
) -> None:
    """np.maximum/np.minimum deprecate ``out`` by position (numpy 2.4 warns, and a warning
    costs three calls): the compiled line passes it by keyword. NaN propagates as in
    TensorFlow."""
    rng = np.random.default_rng(5)
    constants = [rng.standard_normal(16).astype(np.float32) for _ in range(6)]
    constants[3][4] = np.nan
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        y = x
        for i, c in enumerate(constants):
            y = (kl.ops.maximum, kl.ops.minimum)[i % 2](y, kl.constant(c), name=f"m{i}")
    xv = rng.standard_normal(16).astype(np.float32)
    want: Any = xv
    for i, c in enumerate(constants):
        want = (np.maximum, np.minimum)[i % 2](want, c)
    assert np.isnan(want[4]) and not np.isnan(want).all()
    with kl.Session(g, OFF) as sess, warnings.catch_warnings():
        warnings.simplefilter("error")
        run = sess.make_callable(y, [x])
        for _ in range(2):
            np.testing.assert_array_equal(run(xv), want)
    assert in_place(registry, g) == {f"m{i}" for i in range(1, 6)}


UNARY_IN_PLACE = {
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,
    "sin": np.sin,
    "reciprocal": np.reciprocal,
    "rsqrt": lambda v: 1 / np.sqrt(v),
    "relu6": lambda v: np.clip(v, 0, 6),
    "elu": lambda v: np.where(v > 0, v, np.expm1(v)),
    "softsign": lambda v: v / (1 + np.abs(v)),
}


@pytest.mark.parametrize("name", sorted(UNARY_IN_PLACE))
def test_unary_math_and_activation_chains_write_in_place(registry: klp.Registry, name: str) -> None:
    """Not only the arithmetic table: every unary kernel with an in-place form (the
    activations and the unary math) runs as one call per node in the compiled line."""
    fn = UNARY_IN_PLACE[name]
    xv = np.array([0.3, -1.7, 2.5, 0.5, -0.5, 4.0, -3.2, 1.0], np.float64)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float64, [8], name="x")
        y = kl.ops.add(x, kl.constant(np.float64(0.25)), name="shift")
        for i in range(3):
            y = getattr(kl.ops, name)(y, name=f"u{i}")
    want = xv + 0.25
    with np.errstate(invalid="ignore", divide="ignore"):  # rsqrt of negatives: NaN
        for _ in range(3):
            want = fn(want)
    with kl.Session(g, OFF) as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv}), want, rtol=1e-13, equal_nan=True)
    assert in_place(registry, g) == {"u0", "u1", "u2"}


def test_float_pow_and_channels_last_bias_add_write_in_place(registry: klp.Registry) -> None:
    rng = np.random.default_rng(8)
    xv = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3, 4], name="x")
        y = kl.ops.mul(x, kl.constant(np.float32(1)), name="first")
        y = kl.ops.pow(y, kl.constant(np.float32(2)), name="pow")
        y = kl.ops.bias_add(y, kl.constant(bias), name="bias")
        y = kl.ops.bias_add(y, kl.constant(bias), name="bias2")
    with kl.Session(g, OFF) as sess:
        got = sess.run(y, {x: xv})
    np.testing.assert_allclose(got, xv**2 + bias + bias, rtol=1e-6)
    assert in_place(registry, g) == {"pow", "bias", "bias2"}


def test_integer_pow_to_a_negative_power_is_an_error_and_the_feed_is_intact(
    registry: klp.Registry,
) -> None:
    """Integer Pow keeps no in-place form: numpy's ValueError comes mid-write."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.int32, [3], name="x")
        y = kl.ops.add(x, kl.constant(np.int32(1)), name="first")
        y = kl.ops.pow(y, kl.constant(np.array([2, -1, 2], np.int32)), name="power")
    xv = np.array([1, 2, 3], np.int32)
    with kl.Session(g, OFF) as sess, pytest.raises(kl.errors.KernloomError, match="power"):
        sess.run(y, {x: xv})
    np.testing.assert_array_equal(xv, [1, 2, 3])


def test_fetched_shared_and_viewed_values_keep_their_values(
    registry: klp.Registry, plans: list[set[str]]
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        a = kl.ops.add(x, np.float32(1), name="a")
        b = kl.ops.add(a, np.float32(1), name="b")  # fetched, and read by c
        c = kl.ops.add(b, np.float32(1), name="c")
        twice = kl.ops.mul(c, np.float32(2), name="twice")  # read by d and e
        d = kl.ops.add(twice, np.float32(1), name="d")
        e = kl.ops.sub(twice, np.float32(1), name="e")
        s = kl.ops.add(d, e, name="s")
        view = kl.ops.reshape(s, [4, 4], name="view")  # fetched; its buffer is s's
        out = kl.ops.add(view, np.float32(1), name="out")
    xv = np.arange(16, dtype=np.float32)
    kept = xv.copy()
    bv = kept + 2
    cv = bv + 1
    twv = cv * 2
    sv = (twv + 1) + (twv - 1)
    with kl.Session(g, OFF) as sess:
        run = sess.make_callable([b, twice, view, out], [x])
        for _ in range(2):
            got_b, got_twice, got_view, got_out = run(xv)
            np.testing.assert_array_equal(got_b, bv)
            np.testing.assert_array_equal(got_twice, twv)
            np.testing.assert_array_equal(got_view, sv.reshape(4, 4))
            np.testing.assert_array_equal(got_out, sv.reshape(4, 4) + 1)
    np.testing.assert_array_equal(xv, kept)
    # In place: b (over a), twice (over c), s (over d). Not: a (reads the feed), c (b is
    # fetched), d and e (twice is read twice), out (its input is a view, and fetched).
    assert plans == [{"b", "twice", "s"}]


OPS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "add": (kl.ops.add, np.add),
    "add_v2": (kl.ops.add_v2, np.add),
    "squared_difference": (kl.ops.squared_difference, lambda x, y: (x - y) * (x - y)),
    "sub": (kl.ops.sub, np.subtract),
    "mul": (kl.ops.mul, np.multiply),
    "maximum": (kl.ops.maximum, np.maximum),
}
SHAPES: Sequence[tuple[int, ...]] = [(), (1,), (3,), (2, 1), (2, 3)]


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(sorted(OPS)), st.sampled_from(SHAPES), st.booleans()),
        min_size=1,
        max_size=8,
    ),
    fetch=st.integers(0, 7),
    dtype=st.sampled_from([np.int32, np.float64]),
)
def test_random_chains_equal_numpy(
    registry: klp.Registry,
    steps: list[tuple[str, tuple[int, ...], bool]],
    fetch: int,
    dtype: Any,
) -> None:
    """Chains of binary ops with constants of every broadcasting shape (some grow the
    value), on either side, and one value in the middle fetched as well."""
    g = kl.Graph(registry)
    rng = np.random.default_rng(len(steps))
    xv = rng.integers(-3, 4, (3,)).astype(dtype)
    want: list[Any] = []
    value: Any = xv.copy()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), [3], name="x")
        y = x
        tensors = []
        for i, (name, shape, left) in enumerate(steps):
            c = rng.integers(-3, 4, shape).astype(dtype)
            ours, theirs = OPS[name]
            k = kl.constant(c)
            y = ours(k, y, name=f"n{i}") if left else ours(y, k, name=f"n{i}")
            value = theirs(c, value) if left else theirs(value, c)
            tensors.append(y)
            want.append(value)
    middle = min(fetch, len(steps) - 1)
    with kl.Session(g, OFF) as sess:
        got_middle, got_last = sess.run([tensors[middle], tensors[-1]], {x: xv})
    np.testing.assert_array_equal(got_middle, want[middle])
    np.testing.assert_array_equal(got_last, want[-1])


# -- errors, deadline, cancellation --------------------------------------------------------------


def bump_registry(form: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> klp.Registry:
    """The CPU plugin plus op ``Bump`` (x + 1, float32) whose kernel computes through
    ``form(x, out)`` on every path: its in-place form, its direct entry and ``compute``."""

    def bump(ctx: klp.OpKernelContext) -> None:
        x = ctx.input(0)
        form(x, ctx.allocate_output(0, x.shape))

    def direct(reuse: int, x: np.ndarray) -> Any:
        return form(x, x) if reuse and x.base is None else NotImplemented

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            (
                registry.register_op("Bump")
                .input("x: float32")
                .output("y: float32")
                .shape_fn(klp.unchanged_shape)
            )
            lib = klp.KernelLibrary()
            lib.kernel("Bump", device="CPU", direct=direct, inplace_form=form)(bump)
            registry.register_kernels(lib)

    reg = make_registry()
    reg.register_plugin(Plugin(), name="bump")
    return reg


def bump_chain(reg: klp.Registry, n: int) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        y = kl.ops.neg(x, name="neg")
        for i in range(n):
            y = g.add_node("Bump", [y], name=f"bump{i}").outputs[0]
    return g, x, y


def checked_bump(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    if x[0] > 100:
        raise ArithmeticError(f"too large: {x[0]}")
    return np.add(x, np.float32(1), out)


def test_an_error_in_the_middle_of_a_compiled_chain_names_the_node_as_interpreted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg = bump_registry(checked_bump)
    g, x, y = bump_chain(reg, 5)
    assert in_place(reg, g) == {f"bump{i}" for i in range(5)}
    messages = []
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(CompiledLine, "compile", classmethod(lambda cls, s: None))
        with kl.Session(g, OFF) as sess:
            # -98.5, then 99.5, 100.5: bump2 is the first to see more than 100
            with pytest.raises(kl.KernelError) as info:
                sess.run(y, {x: [-98.5, 0]})
            assert isinstance(info.value.__cause__, ArithmeticError)
            messages.append(str(info.value))
            # the session goes on
            np.testing.assert_array_equal(sess.run(y, {x: [0, 1]}), [5, 4])
    assert messages[0] == messages[1]
    assert "node 'bump2' (op Bump)" in messages[0] and "CPU:0" in messages[0]
    assert "too large: 100.5" in messages[0]


def test_an_error_in_a_node_the_compiled_chain_calls_names_that_node(
    registry: klp.Registry,
) -> None:
    reg = make_registry(faults=True)
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        y = kl.ops.add(kl.ops.add(x, np.float32(1), name="a0"), np.float32(1), name="a1")
        y = g.add_node("FailIfNegative", [y], name="check").outputs[0]
        y = kl.ops.reshape(y, [2])  # (FailIfNegative's output shape is unknown)
        y = kl.ops.add(kl.ops.add(y, np.float32(1), name="a2"), np.float32(1), name="a3")
    assert in_place(reg, g) == {"a1", "a3"}
    with kl.Session(g, OFF) as sess:
        with pytest.raises(kl.KernelError, match=r"node 'check' \(op FailIfNegative\).*negative"):
            sess.run(y, {x: [-5, 0]})
        np.testing.assert_array_equal(sess.run(y, {x: [0, 1]}), [4, 5])


SLOW_BUMPS: list[int] = []
"""One entry per ``slow_bump`` call: how far a step got before it was ended."""


first_bump = threading.Event()
"""Set by the first ``slow_bump`` call: a step is under way."""


def slow_bump(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    first_bump.set()
    time.sleep(0.02)
    SLOW_BUMPS.append(1)
    return np.add(x, np.float32(1), out)


def test_the_deadline_ends_a_compiled_step_between_nodes() -> None:
    reg = bump_registry(slow_bump)
    g, x, y = bump_chain(reg, 100)  # 2 s of kernels
    assert len(in_place(reg, g)) == 100
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        bump = sess.make_callable(y, [x])  # compiled here: the deadline times the step only
        SLOW_BUMPS.clear()
        with pytest.raises(kl.DeadlineExceededError, match=r"timeout of 0\.1 s"):
            bump([0, -1], options=kl.RunOptions(timeout_s=0.1))
        assert 0 < len(SLOW_BUMPS) < 100  # ended between nodes, not after the chain
        np.testing.assert_array_equal(sess.run(y, {x: [0, -1]}), [100, 101])


def test_a_cancellation_from_another_thread_ends_a_compiled_step() -> None:
    reg = bump_registry(slow_bump)
    g, x, y = bump_chain(reg, 100)
    cancellation = CancellationManager()
    SLOW_BUMPS.clear()
    first_bump.clear()

    def cancel_once_running() -> None:
        # Waits for the step's first kernel rather than a fixed time: a loaded machine can
        # spend longer than any fixed delay compiling the session.
        first_bump.wait(10)
        cancellation.cancel()

    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    with (
        kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess,
        pytest.raises(kl.CancelledError, match="cancelled"),
    ):
        sess.run(y, {x: [0, 1]}, cancellation=cancellation)
    canceller.join()
    assert 0 < len(SLOW_BUMPS) < 100  # ended between nodes, not after the chain


# -- integer divisions: written in place, the zero divisor still an error --------------------

DIVISIONS = {
    "floor_div": (kl.ops.floor_div, np.floor_divide),
    "floor_mod": (kl.ops.floor_mod, np.remainder),
}


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
@pytest.mark.parametrize("name", sorted(DIVISIONS))
def test_a_chain_of_divisions_by_constants_equals_numpy(
    registry: klp.Registry, name: str, dtype: Any
) -> None:
    ours, theirs = DIVISIONS[name]
    rng = np.random.default_rng(5)
    divisors = [np.array(rng.choice([-3, -2, 2, 5]), dtype) for _ in range(6)]
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), [8], name="x")
        y = kl.ops.add(x, kl.constant(np.array(100, dtype)), name="start")
        for i, c in enumerate(divisors):
            y = ours(kl.ops.mul(y, kl.constant(np.array(7, dtype)), name=f"m{i}"), c, name=f"d{i}")
    xv = rng.integers(-50, 50, 8).astype(dtype)
    want: Any = xv + dtype(100)
    for c in divisors:
        want = theirs(want * dtype(7), c)
    with kl.Session(g, OFF) as sess:
        run = sess.make_callable(y, [x])
        for _ in range(3):  # the later runs find the constants already checked
            np.testing.assert_array_equal(run(xv), want)
    assert in_place(registry, g) >= {f"d{i}" for i in range(1, 6)}


def test_a_zero_divisor_is_an_error_naming_its_node_on_every_run(registry: klp.Registry) -> None:
    """A zero constant divisor in the middle of a compiled chain, a fed divisor that the
    caller changes between runs (the same array, written in place), a variable assigned a
    zero: each is found on the run that has it; an empty result is no error."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.int32, [4], name="x")
        fed = kl.placeholder(kl.int32, [], name="fed")
        v = kl.Variable(np.array(3, np.int32), name="v")
        a = kl.ops.floor_div(kl.ops.add(x, kl.constant(np.int32(1))), kl.constant(np.int32(2)))
        b = kl.ops.floor_div(kl.ops.add(a, kl.constant(np.int32(1))), fed, name="by_fed")
        c = kl.ops.floor_mod(kl.ops.add(b, kl.constant(np.int32(1))), v.value(), name="by_v")
        zero = kl.ops.floor_div(kl.ops.add(c, kl.constant(np.int32(1))), kl.constant(np.int32(0)))
        empty = kl.placeholder(kl.int32, [0], name="empty")
        nothing = kl.ops.floor_div(empty, kl.constant(np.int32(0)))
        set_zero = v.assign(kl.constant(np.int32(0)))
    xv = np.array([1, 5, 9, -7], np.int32)
    divisor = np.array(2, np.int32)
    expected = (((xv + 1) // 2 + 1) // 2 + 1) % 3
    with kl.Session(g, OFF) as sess:
        sess.run(v.initializer)
        for _ in range(2):
            np.testing.assert_array_equal(sess.run(c, {x: xv, fed: divisor}), expected)
        with pytest.raises(kl.InvalidArgumentError, match="Integer division by zero") as info:
            sess.run(zero, {x: xv, fed: divisor})
        assert zero.node.name in str(info.value)
        divisor[...] = 0  # the caller's array, changed in place
        with pytest.raises(kl.InvalidArgumentError, match="by_fed"):
            sess.run(c, {x: xv, fed: divisor})
        divisor[...] = 2
        np.testing.assert_array_equal(sess.run(c, {x: xv, fed: divisor}), expected)
        sess.run(set_zero)
        with pytest.raises(kl.InvalidArgumentError, match="by_v"):
            sess.run(c, {x: xv, fed: divisor})
        assert sess.run(nothing, {empty: np.zeros(0, np.int32)}).shape == (0,)


def test_a_kernel_breaking_its_in_place_promise_is_blamed_not_its_consumer() -> None:
    """A plugin's Abs that declares an in-place form but returns its (read-only) input
    itself when nothing is negative: the numpy Neg after it, written in place, fails, and
    the error names the Abs kernel and its plugin as at fault; nothing fed or constant
    changes."""

    def direct(reuse: int, x: np.ndarray) -> np.ndarray:
        return x if (x >= 0).all() else np.absolute(x)

    lib = klp.KernelLibrary()

    @lib.kernel(
        "Abs",
        device="CPU",
        priority=5,
        type_constraints={"T": ["float32"]},
        inplace_form=np.absolute,
        direct=direct,
    )
    def abs_(ctx: klp.OpKernelContext) -> None:
        ctx.set_output(0, direct(0, ctx.input(0)))

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            registry.register_kernels(lib)

    reg = make_registry()
    reg.register_plugin(Plugin(), name="aliasing_abs")
    g = kl.Graph(reg)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        c = kl.constant(np.array([4, 5, 6], np.float32), name="c")
        y = kl.ops.neg(kl.ops.abs(x, name="ax"), name="y")
        z = kl.ops.neg(kl.ops.abs(c, name="ac"), name="z")
    assert in_place(reg, g) == {"y", "z"}
    fed = np.array([1, 2, 3], np.float32)
    with kl.Session(g, OFF) as sess:
        for fetch, source in ((y, "ax"), (z, "ac")):
            with pytest.raises(kl.KernelError) as info:
                sess.run(fetch, {x: fed})
            message = str(info.value)
            assert message.startswith(f"node '{fetch.node.name}' (op Neg)")
            assert f"writing into the output of node '{source}' (op Abs)" in message
            assert "the fault is kernel " in message
            assert "abs_ registered by plugin 'aliasing_abs'" in message
        np.testing.assert_array_equal(fed, [1, 2, 3])
        np.testing.assert_array_equal(sess.run(c), [4, 5, 6])
        np.testing.assert_array_equal(sess.run(y, {x: -fed}), -fed)
