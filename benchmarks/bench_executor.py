"""The executor's per-node and per-iteration cost, timed in this thread's CPU time.

    .venv/bin/python benchmarks/bench_executor.py          # about 20 s
    .venv/bin/python benchmarks/bench_executor.py ops      # other elementwise ops, ~30 s
    .venv/bin/python benchmarks/bench_executor.py fanout   # fan-out and one-node steps, ~40 s
    .venv/bin/python benchmarks/bench_executor.py threads  # one vs two inter-op threads, ~30 s

``bench_optimizer.py chain`` and ``bench_loop.py`` time wall-clock; on the shared 2-core
machine, where other sessions' test suites take the cores away, their numbers move by 2x
from one run to the next. This script times the same workloads by the CPU time of the
thread that runs them (``time.thread_time``, best of many short runs), which a busy
neighbour disturbs far less -- only through caches -- so before/after comparisons of the
executor hold from one run to the next. Each ratio is taken against a plain numpy loop
timed the same way in the same run.

- chain: 1000 ``Add(y, c)`` (optimizer off, one inter-op thread) on float32[16] for ``c``
  a vector, a 0-d scalar, a [1] vector, for a [4, 1] feed with [1, 16] constants (the
  first Add grows the value to [4, 16]), and for one-element values (a [1] feed and a 0-d
  feed, scalar ``c``); against ``v = np.add(v, c)`` in Python (for the 0-d feed numpy's
  loop runs on numpy scalars); and 1000 ``FloorDiv(y, 1)`` on int32[16] (each checks its
  divisor for a zero, as TensorFlow's integer division does).
- while_loop: ``i + 1`` while ``i < n``, 2000 iterations, against the same in numpy.
- while_loop, three variables: ``(i, a, b) -> (i + 1, b, (a + b) * c)`` while ``i < n``
  (``c`` a loop invariant, float32 scalars), 2000 iterations, against the same in numpy.
- nested while_loops: 100 outer iterations around an inner loop of 20 (``(j + 1, u + 1)``),
  per inner iteration, against the same in numpy.
- ops: chains of 1000 of each elementwise op beyond Add (``OP_CHAINS``: unary math,
  activations, Pow, Maximum, Minimum, BiasAdd, Mul of integers), optimizer off, each
  against its numpy function in a loop: the straight line's fast path is not Add's alone.
- fanout: 300 diamonds ``h -> tanh(h) * exp(-h)`` (``h`` read by two nodes: the first
  cannot overwrite it) and 300 ``h -> tanh(h) + sin(h)`` (Sin is not fusable: with the
  optimizer on, a fused node of two inputs and a Sin), float32[16] and [4096], optimizer
  off and on, against the same numpy expressions in a loop; and one step of one node
  (``tanh`` of a fed float32[16]) through ``make_callable``, wall-clock median, against
  ``np.tanh`` and, where installed, an ONNX Runtime session of one Tanh.
- threads: the same graphs in sessions of one and of two inter-op threads (the default
  here, one per core), graph optimizer off, through ``make_callable``, wall-clock (the
  pool's threads work too),
  best of 7 runs after 20 warm-up runs (which is when measured kernel costs settle,
  ``kernel_costs``): loops of one, two and three variables (``i + 1``; ``(i + 1, s +
  1.0)``; ``(i + 1, s + 1.0, t * 1.5)``), 2000 iterations, µs an iteration; two
  branches ``tanh(exp(x)) + sin(cos(x))`` on float32[16] to [1048576], µs a step (where
  a second thread starts to pay: ``kernel_costs``'s threshold); and two chains of 4
  768x768 MatMul+Tanh (intra-op threads 1), ms a step, where the second thread should
  halve the time.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import kernloom as kl

N = 1000
ITERATIONS = 2000


def cpu_best_of(
    fn: Callable[[], Any],
    repeats: int,
    warmup: int = 3,
    clock: Callable[[], float] = time.thread_time,
) -> float:
    """The best time of ``repeats`` calls after ``warmup``, by this thread's CPU time
    (``clock=time.perf_counter`` for wall-clock, where other threads work too)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        started = clock()
        fn()
        best = min(best, clock() - started)
    return best


def chain(fed: tuple[int, ...], constant: tuple[int, ...]) -> tuple[float, float]:
    """(kernloom, numpy) seconds per node."""
    constants = [np.full(constant, 0.001 * i, np.float32) for i in range(N)]
    return _chain(kl.ops.add, np.add, np.ones(fed, np.float32), constants)


def floor_div_chain() -> tuple[float, float]:
    """(kernloom, numpy) seconds per node: int32[16] // 1 (checked for a zero divisor)."""
    constants = [np.ones((), np.int32) for _ in range(N)]
    return _chain(kl.ops.floor_div, np.floor_divide, np.full(16, 7, np.int32), constants)


def _chain(op: Any, numpy_op: Any, xv: Any, constants: list[Any]) -> tuple[float, float]:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(xv.dtype), list(xv.shape), name="x")
        y = x
        for c in constants:
            y = op(y, kl.constant(c))
    want = xv
    for c in constants:
        want = numpy_op(want, c)
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
    with kl.Session(g, config) as sess:
        run = sess.make_callable(y, [x])
        np.testing.assert_allclose(run(xv), want, rtol=1e-4)
        ours = cpu_best_of(lambda: run(xv), 40) / N

    def loop() -> None:
        v = xv
        for c in constants:
            v = numpy_op(v, c)

    return ours, cpu_best_of(loop, 40) / N


def while_loop() -> tuple[float, float]:
    """(kernloom, numpy) seconds per iteration."""
    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        (out,) = kl.while_loop(lambda i: i < n, lambda i: i + 1, [0])
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        assert sess.run(out, {n: ITERATIONS}) == ITERATIONS
        ours = cpu_best_of(lambda: sess.run(out, {n: ITERATIONS}), 25, 1) / ITERATIONS

    def loop() -> None:
        i = np.int32(0)
        limit = np.int32(ITERATIONS)
        while np.less(i, limit):
            i = np.add(i, np.int32(1))

    return ours, cpu_best_of(loop, 25, 1) / ITERATIONS


def while_loop_vars() -> tuple[float, float]:
    """(kernloom, numpy) seconds per iteration of a loop with three loop variables and
    an invariant."""
    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        c = kl.placeholder(kl.float32, [], name="c")
        out = kl.while_loop(
            lambda i, a, b: i < n,
            lambda i, a, b: (i + 1, b, (a + b) * c),
            [0, kl.constant(1.0), kl.constant(0.5)],
        )
    feeds = {n: ITERATIONS, c: np.float32(0.5)}
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        assert sess.run(out, feeds)[0] == ITERATIONS
        ours = cpu_best_of(lambda: sess.run(out, feeds), 25, 1) / ITERATIONS

    def loop() -> None:
        i, limit, one = np.int32(0), np.int32(ITERATIONS), np.int32(1)
        a, b, cv = np.float32(1.0), np.float32(0.5), np.float32(0.5)
        while np.less(i, limit):
            i, a, b = np.add(i, one), b, np.multiply(np.add(a, b), cv)

    return ours, cpu_best_of(loop, 25, 1) / ITERATIONS


def nested_loops() -> tuple[float, float]:
    """(kernloom, numpy) seconds per inner iteration of a loop nested in a loop."""
    outer_n, inner_n = 100, 20
    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")

        def outer(i: kl.Tensor, t: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            _, t = kl.while_loop(lambda j, u: j < inner_n, lambda j, u: (j + 1, u + 1), [0, t])
            return i + 1, t

        _, out = kl.while_loop(lambda i, t: i < n, outer, [0, 0])
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        assert sess.run(out, {n: outer_n}) == outer_n * inner_n
        ours = cpu_best_of(lambda: sess.run(out, {n: outer_n}), 15, 1) / (outer_n * inner_n)

    def loop() -> None:
        i, t, one = np.int32(0), np.int32(0), np.int32(1)
        limit, inner_limit = np.int32(outer_n), np.int32(inner_n)
        while np.less(i, limit):
            j = np.int32(0)
            while np.less(j, inner_limit):
                j, t = np.add(j, one), np.add(t, one)
            i = np.add(i, one)

    return ours, cpu_best_of(loop, 15, 1) / (outer_n * inner_n)


OP_CHAINS: tuple[tuple[str, Callable[..., Any], Any, Any], ...] = (
    # (kl.ops name, numpy function, x, constant or None for a unary op)
    ("abs", np.abs, np.linspace(-1, 1, 16, dtype=np.float32), None),
    ("sin", np.sin, np.linspace(0.5, 1.5, 16, dtype=np.float32), None),
    ("floor", np.floor, np.linspace(0.5, 1.5, 16, dtype=np.float32), None),
    ("sign", np.sign, np.linspace(-1, 1, 16, dtype=np.float32), None),
    ("reciprocal", np.reciprocal, np.linspace(0.5, 1.5, 16, dtype=np.float32), None),
    ("tanh", np.tanh, np.linspace(0.5, 1.5, 16, dtype=np.float32), None),
    ("pow", np.power, np.linspace(0.5, 1.5, 16, dtype=np.float32), np.float32(1)),
    ("maximum", np.maximum, np.linspace(-1, 1, 16, dtype=np.float32), np.zeros(16, np.float32)),
    ("minimum", np.minimum, np.linspace(-1, 1, 16, dtype=np.float32), np.float32(2)),
    ("mul", np.multiply, np.arange(16, dtype=np.int32), np.int32(1)),
    ("bias_add", np.add, np.ones((4, 16), np.float32), np.zeros(16, np.float32)),
)


def _repeated(
    build: Any, reference: Any, xv: Any, repeats: int, *, optimizer: bool = False, runs: int = 40
) -> tuple[float, float]:
    """(kernloom, numpy) seconds a step of ``repeats`` applications, one after another, of
    ``build`` (to a fed ``xv``) and of ``reference`` (the numpy loop)."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(xv.dtype), list(xv.shape), name="x")
        h = x
        for _ in range(repeats):
            h = build(h)
    config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=optimizer)
    with kl.Session(g, config) as sess:
        run = sess.make_callable(h, [x])
        ours = cpu_best_of(lambda: run(xv), runs)

    def loop() -> None:
        v = xv
        for _ in range(repeats):
            v = reference(v)

    return ours, cpu_best_of(loop, runs)


def op_chain(name: str, fn: Callable[..., Any], xv: Any, c: Any) -> tuple[float, float]:
    """(kernloom, numpy) seconds per node for 1000 ``name`` nodes in a chain."""
    op = getattr(kl.ops, name)
    if c is not None:
        return _chain(op, fn, xv, [c] * N)
    ours, plain = _repeated(op, fn, xv, N)
    return ours / N, plain / N


def ops() -> int:
    print(f"elementwise op chains, thread CPU time, best of 40 (python {sys.version.split()[0]})")
    for name, fn, xv, c in OP_CHAINS:
        ours, plain = op_chain(name, fn, xv, c)
        shape = "x".join(map(str, xv.shape))
        print(
            f"chain of {N} {name:10s} {xv.dtype.name}[{shape}] {ours * 1e6:6.3f} us/node; "
            f"numpy loop {plain * 1e6:6.3f} us/node -> {ours / plain:5.2f}x"
        )
    return 0


FAN_OUT = 300
FAN_OUT_GRAPHS: tuple[tuple[str, Any, Any, int], ...] = (
    (
        "tanh(h) * exp(-h)",
        lambda h: kl.ops.mul(kl.ops.tanh(h), kl.ops.exp(kl.ops.neg(h))),
        lambda v: np.multiply(np.tanh(v), np.exp(np.negative(v))),
        4,
    ),
    (
        "tanh(h) + sin(h)",
        lambda h: kl.ops.add(kl.ops.tanh(h), kl.ops.sin(h)),
        lambda v: np.add(np.tanh(v), np.sin(v)),
        3,
    ),
)


def fan_out(build: Any, reference: Any, size: int, optimizer: bool) -> tuple[float, float]:
    """(kernloom, numpy) seconds per step of ``FAN_OUT`` repeats of ``build``."""
    xv = np.linspace(-1, 1, size, dtype=np.float32)
    return _repeated(build, reference, xv, FAN_OUT, optimizer=optimizer, runs=30)


def one_node_step() -> dict[str, float]:
    """Median wall-clock µs of one step of ``tanh(x)``, x a fed float32[16], interleaved."""
    import statistics

    xv = np.linspace(-1, 1, 16, dtype=np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        y = kl.ops.tanh(x)
    runs: dict[str, Callable[[], Any]] = {"numpy": lambda: np.tanh(xv)}
    for threads in (1, 2):
        config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads)
        call = kl.Session(g, config).make_callable(y, [x])
        runs[f"kernloom, {threads} intra-op thread(s)"] = functools.partial(call, xv)
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from onnx import TensorProto, helper
    except ImportError:
        pass
    else:
        info = helper.make_tensor_value_info
        model = helper.make_model(
            helper.make_graph(
                [helper.make_node("Tanh", ["x"], ["y"])],
                "tanh",
                [info("x", TensorProto.FLOAT, [16])],
                [info("y", TensorProto.FLOAT, [16])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        runs[f"onnxruntime {ort.__version__}"] = lambda: session.run(None, {"x": xv})
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(20000):
        for name, fn in runs.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(ts) * 1e6 for name, ts in times.items()}


def fanout() -> int:
    print(f"fan-out chains, thread CPU time, best of 30 (python {sys.version.split()[0]})")
    for label, build, reference, nodes in FAN_OUT_GRAPHS:
        for size in (16, 4096):
            for optimizer in (False, True):
                ours, plain = fan_out(build, reference, size, optimizer)
                per = nodes * FAN_OUT
                print(
                    f"{FAN_OUT} x {label:18s} float32[{size:4d}], optimizer "
                    f"{'on ' if optimizer else 'off'} {ours / per * 1e6:6.3f} us/node; numpy "
                    f"loop {plain / per * 1e6:6.3f} us/node -> {ours / plain:5.2f}x"
                )
    print("one step of tanh(x), x a fed float32[16], median wall-clock µs of 20000:")
    for name, median in one_node_step().items():
        print(f"  {name:34s} {median:6.2f}")
    return 0


def _thread_graphs() -> list[tuple[str, kl.Graph, Any, dict[Any, Any], float, str]]:
    """(label, graph, fetch, feed, what one run's seconds are multiplied by, unit) for
    ``threads``."""
    graphs: list[tuple[str, kl.Graph, Any, dict[Any, Any], float, str]] = []
    bodies: dict[str, tuple[Callable[..., Any], list[Any]]] = {
        "while_loop i + 1": (lambda i: (i + 1,), [0]),
        "while_loop (i + 1, s + 1.0)": (lambda i, s: (i + 1, s + 1.0), [0, 0.0]),
        "while_loop (i + 1, s + 1, t * 1.5)": (
            lambda i, s, t: (i + 1, s + 1.0, t * 1.5),
            [0, 0.0, 1.0],
        ),
    }
    for label, (body, start) in bodies.items():
        g = kl.Graph()
        with g.as_default():
            n = kl.placeholder(kl.int32, [], name="n")
            out = kl.while_loop(lambda i, *rest, n=n: i < n, body, start)
        graphs.append((label, g, out, {n: ITERATIONS}, 1e6 / ITERATIONS, "us/iteration"))
    for size in (16, 16384, 65536, 262144, 1048576):
        g = kl.Graph()
        with g.as_default():
            x = kl.placeholder(kl.float32, [size], name="x")
            y = kl.ops.add(kl.ops.tanh(kl.ops.exp(x)), kl.ops.sin(kl.ops.cos(x)))
        xv = np.linspace(-1, 1, size, dtype=np.float32)
        label = f"tanh(exp(x)) + sin(cos(x)), [{size}]"
        graphs.append((label, g, y, {x: xv}, 1e6, "us/step"))
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((768, 768)) / np.sqrt(768)).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        wp = kl.placeholder(kl.float32, [768, 768], name="w")
        chains = []
        for _ in range(2):
            h = wp
            for _ in range(4):
                h = kl.ops.tanh(kl.ops.mat_mul(h, wp))
            chains.append(h)
        out2 = kl.ops.add(*chains)
    graphs.append(("2 chains of 4 768x768 MatMul+Tanh", g, out2, {wp: w}, 1e3, "ms/step"))
    return graphs


def threads() -> int:
    print(f"one and two inter-op threads, wall-clock best of 7 (python {sys.version.split()[0]})")
    for label, g, fetch, feed, scale, unit in _thread_graphs():
        times = []
        for count in (1, 2):
            # (Optimizer off: it would fuse the small branches into one node.)
            config = kl.SessionConfig(
                inter_op_threads=count, intra_op_threads=1, graph_optimizer=False
            )
            with kl.Session(g, config) as sess:
                run = functools.partial(sess.make_callable(fetch, list(feed)), *feed.values())
                times.append(cpu_best_of(run, 7, 20, time.perf_counter) * scale)
        print(
            f"{label:36s} 1 thread {times[0]:8.2f} {unit}; 2 threads {times[1]:8.2f} "
            f"-> {times[0] / times[1]:5.2f}x"
        )
    return 0


def main() -> int:
    if sys.argv[1:] == ["ops"]:
        return ops()
    if sys.argv[1:] == ["threads"]:
        return threads()
    if sys.argv[1:] == ["fanout"]:
        return fanout()
    print(f"executor, thread CPU time, best of runs (python {sys.version.split()[0]})")
    for label, fed, constant in (
        ("vector c [16]", (16,), (16,)),
        ("scalar c (0-d)", (16,), ()),
        ("c [1]", (16,), (1,)),
        ("[4,1] feed, c [1,16]", (4, 1), (1, 16)),
        ("[1] feed, scalar c", (1,), ()),
        ("0-d feed, scalar c", (), ()),
    ):
        ours, plain = chain(fed, constant)
        print(
            f"chain of {N} Add, {label:22s} {ours * 1e6:6.3f} us/node; numpy loop "
            f"{plain * 1e6:6.3f} us/node -> {ours / plain:5.2f}x"
        )
    ours, plain = floor_div_chain()
    print(
        f"chain of {N} FloorDiv, int32[16] // 1    {ours * 1e6:6.3f} us/node; numpy loop "
        f"{plain * 1e6:6.3f} us/node -> {ours / plain:5.2f}x"
    )
    ours, plain = while_loop()
    print(
        f"while_loop i + 1, {ITERATIONS} iterations   {ours * 1e6:6.2f} us/iteration; numpy "
        f"loop {plain * 1e6:5.2f} us/iteration -> {ours / plain:5.1f}x"
    )
    ours, plain = while_loop_vars()
    print(
        f"while_loop 3 vars + invariant, {ITERATIONS} it. {ours * 1e6:6.2f} us/iteration; "
        f"numpy loop {plain * 1e6:5.2f} us/iteration -> {ours / plain:5.1f}x"
    )
    ours, plain = nested_loops()
    print(
        f"nested while_loops, 100 x 20         {ours * 1e6:6.2f} us/inner iteration; "
        f"numpy loop {plain * 1e6:5.2f} -> {ours / plain:5.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
