"""Concurrency stress: one session run from several Python threads at once.

Kernels keep state between calls to go faster (the oneDNN convolution's ``_Plan`` and
reordered filter, ``PackedWeight``'s packed matrix, ``ConstantInput``'s converted bias, the
dense chain's ``_Replay``, the LRN's per-shape scratch), and one kernel instance serves
every run of a session; the executor reuses buffers and contexts. Each test here runs a
session from ``WORKERS`` threads, each looping over its own inputs (alternating batch
sizes and memory layouts, so that every cache is invalidated and refilled while other
runs use it), and checks every result against the one computed for that same input
sequentially, in a separate session, beforehand. Every future must finish within
``TIMEOUT_S``: a hang fails the test instead of stalling the suite.

Exact equality holds where the same kernels run with the same thread counts. With two
intra-op threads and two inter-op threads a node runs on one torch thread when an
inter-op worker takes it and on two on the caller's thread (``use_threads``), and
oneDNN's and MKL's sums may be split differently across those teams, so there the
comparison is ``rtol=1e-5``.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import kernloom as kl
import kernloom.onnx as ko
from kernloom_gpu_torch.kernels import packed_matmul
from kernloom_gpu_torch.kernels.packed_matmul import MKL, PLAIN

WORKERS = 4
LOOPS = int(os.environ.get("KERNLOOM_STRESS", "1"))
"""Multiplies every thread's loop count (``KERNLOOM_STRESS=20`` for a long soak)."""
TIMEOUT_S = 120.0
"""Per future: far above a loop's time (a second or two), far below pytest's timeout."""

THREADS = [(1, 1), (1, 2), (2, 1), (2, 2)]
"""(inter_op_threads, intra_op_threads) of the sessions under test."""

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

Array = np.ndarray[Any, Any]


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    """Threads switch every 20 µs instead of every 5 ms, so that a check-then-act in a
    kernel's cache is far more likely to be interrupted between its check and its act."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def config(inter: int, intra: int) -> kl.SessionConfig:
    return kl.SessionConfig(inter_op_threads=inter, intra_op_threads=intra, device_filters=("CPU",))


def exact(inter: int, intra: int) -> bool:
    """Whether a run's values are bit-for-bit reproducible (module docstring)."""
    return inter == 1 or intra == 1


def check_equal(got: Array, want: Array, bitwise: bool, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, what
    if bitwise:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


def nhwc_memory(x: Array) -> Array:
    """NCHW values stored as NHWC in memory (a channels_last array, as torch makes)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def nchw_memory(x: Array) -> Array:
    """NHWC values stored as NCHW in memory."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)


def in_threads(work: Callable[[int], None], workers: int = WORKERS) -> None:
    """``work(index)`` on ``workers`` threads at once, started together; every one must
    finish within ``TIMEOUT_S`` of the start (a hang fails here, without waiting for the
    hung thread), and the first failure is raised."""
    start = threading.Barrier(workers)

    def run(index: int) -> None:
        start.wait(TIMEOUT_S)
        work(index)

    pool = ThreadPoolExecutor(workers, thread_name_prefix="concurrent-run")
    try:
        futures: list[Future[None]] = [pool.submit(run, i) for i in range(workers)]
        deadline = time.monotonic() + TIMEOUT_S
        for index, future in enumerate(futures):
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                pytest.fail(f"thread {index} did not finish within {TIMEOUT_S} s: a hang")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


class Case(NamedTuple):
    """One input of a test: its key (for the reference) and its feed."""

    key: tuple[Any, ...]
    feed: dict[Any, Any]


def schedule(cases: Sequence[Case], index: int, loops: int) -> Iterator[Case]:
    """Thread ``index``'s inputs (the cases whose key starts with it), cycling, each thread
    from another start (so that at any moment the threads run different shapes and
    layouts), ``loops`` times ``LOOPS``."""
    mine = [c for c in cases if c.key[0] == index]
    assert mine, f"no inputs for thread {index}"
    for i in range(loops * LOOPS):
        yield mine[(i + index) % len(mine)]


def references(
    graph: kl.Graph, fetches: Any, cases: Sequence[Case], cfg: kl.SessionConfig
) -> dict[tuple[Any, ...], list[Array]]:
    """Each case's values, run one after another in a session of their own."""
    with kl.Session(graph, cfg) as session:
        return {c.key: list(session.run(fetches, c.feed)) for c in cases}


# -- a convolutional net ------------------------------------------------------------------


def conv_net(data_format: str, rng: np.random.Generator) -> tuple[kl.Graph, Any, list[Any]]:
    """Conv2D+BiasAdd+Relu, a Conv2D+FusedBatchNorm (folded into the convolution), MaxPool,
    two branches (a 1x1 convolution; AvgPool then a 3x3 one) concatenated, LRN, a 3x3
    convolution whose bias and the concatenation are added (a residual) before a Relu,
    then a mean, a dense layer and a softmax. Fetches: the residual block and the softmax."""
    nhwc = data_format == "NHWC"
    channel = 3 if nhwc else 1

    def w(*shape: int) -> Any:
        return kl.constant((rng.standard_normal(shape) * 0.3).astype(np.float32))

    def window(k: int) -> list[int]:
        return [1, k, k, 1] if nhwc else [1, 1, k, k]

    def conv(x: Any, f: Any, bias: Any | None = None, stride: int = 1) -> Any:
        y = kl.ops.conv2d(x, f, strides=window(stride), padding="SAME", data_format=data_format)
        return y if bias is None else kl.ops.bias_add(y, bias, data_format=data_format)

    g = kl.Graph()
    with g.as_default():
        shape = [None, 16, 16, 3] if nhwc else [None, 3, 16, 16]
        x = kl.placeholder(kl.float32, shape, name="x")
        h = kl.ops.relu(conv(x, w(3, 3, 3, 12), w(12)))
        scale = kl.constant(rng.uniform(0.5, 1.5, 12).astype(np.float32))
        offset, mean = w(12), w(12)
        var = kl.constant(rng.uniform(0.5, 2.0, 12).astype(np.float32))
        normed, *_ = kl.ops.fused_batch_norm_v3(
            conv(h, w(3, 3, 12, 12)),
            scale,
            offset,
            mean,
            var,
            epsilon=1e-3,
            is_training=False,
            data_format=data_format,
        )
        h = kl.ops.max_pool(
            kl.ops.relu(normed),
            ksize=window(2),
            strides=window(2),
            padding="VALID",
            data_format=data_format,
        )
        a = kl.ops.relu(conv(h, w(1, 1, 12, 8), w(8)))
        b = kl.ops.avg_pool(
            h, ksize=window(3), strides=window(1), padding="SAME", data_format=data_format
        )
        b = kl.ops.relu(conv(b, w(3, 3, 12, 8), w(8)))
        cat = kl.ops.concat_v2([a, b], channel, name="cat")
        if nhwc:
            normalized = kl.ops.lrn(cat, depth_radius=2, bias=1.0, alpha=1e-3, beta=0.75)
        else:  # TensorFlow's LRN normalizes the last axis (as the ONNX importer does)
            normalized = kl.ops.transpose(
                kl.ops.lrn(
                    kl.ops.transpose(cat, [0, 2, 3, 1]),
                    depth_radius=2,
                    bias=1.0,
                    alpha=1e-3,
                    beta=0.75,
                ),
                [0, 3, 1, 2],
            )
        block = kl.ops.relu(kl.ops.add(conv(normalized, w(3, 3, 16, 16), w(16)), cat), name="block")
        pooled = kl.ops.mean(block, [1, 2] if nhwc else [2, 3])
        logits = kl.ops.bias_add(pooled @ w(16, 10), w(10))
        probs = kl.ops.softmax(logits, name="probs")
    return g, x, [block, probs]


def conv_cases(x: Any, data_format: str, rng: np.random.Generator) -> list[Case]:
    """Per thread, batch 1 and batch 3, each in C order and in the other memory layout."""
    cases = []
    for thread in range(WORKERS):
        for batch in (1, 3):
            shape = (batch, 16, 16, 3) if data_format == "NHWC" else (batch, 3, 16, 16)
            value = rng.standard_normal(shape).astype(np.float32)
            other = nchw_memory(value) if data_format == "NHWC" else nhwc_memory(value)
            cases.append(Case((thread, batch, "C"), {x: value}))
            cases.append(Case((thread, batch, "other"), {x: other}))
    return cases


@pytest.mark.parametrize(("inter", "intra"), THREADS)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_a_conv_net_gives_each_thread_its_own_results(
    data_format: str, inter: int, intra: int
) -> None:
    rng = np.random.default_rng(1)
    g, x, fetches = conv_net(data_format, rng)
    cases = conv_cases(x, data_format, rng)
    cfg = config(inter, intra)
    want = references(g, fetches, cases, cfg)
    bitwise = exact(inter, intra)
    with kl.Session(g, cfg) as session:

        def work(index: int) -> None:  # (the first runs compile the step, all at once)
            for case in schedule(cases, index, 24):
                got = session.run(fetches, case.feed)
                for value, expected, name in zip(
                    got, want[case.key], ("block", "probs"), strict=True
                ):
                    check_equal(value, expected, bitwise, f"{name} for {case.key}")

        in_threads(work)
        metadata = kl.RunMetadata()
        session.run(fetches, cases[0].feed, kl.RunOptions(trace=True), metadata)
    assert metadata.step_stats is not None
    ops = {n.op for n in metadata.step_stats.nodes}
    assert "_FusedConv2D" in ops and "LRN" in ops and "ConcatV2" in ops, ops
    assert "FusedBatchNormV3" not in ops, "the batch norm was not folded"


def test_a_conv_net_through_make_callable_from_threads() -> None:
    """``make_callable``'s resolved call shared by the threads, in NCHW with inter-op
    workers: the same results as the session's own runs."""
    rng = np.random.default_rng(2)
    g, x, fetches = conv_net("NCHW", rng)
    cases = conv_cases(x, "NCHW", rng)
    cfg = config(2, 1)
    want = references(g, fetches, cases, cfg)
    with kl.Session(g, cfg) as session:
        call = session.make_callable(fetches, [x])

        def work(index: int) -> None:
            for case in schedule(cases, index, 20):
                got = call(case.feed[x])
                for value, expected in zip(got, want[case.key], strict=True):
                    check_equal(value, expected, True, f"{case.key}")

        in_threads(work)


# -- an MLP that becomes one _TorchDenseChain ---------------------------------------------


def mlp(rng: np.random.Generator) -> tuple[kl.Graph, Any, Any]:
    sizes = [256, 512, 512, 10]
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, sizes[0]], name="x")
        h = x
        for i, (k, n) in enumerate(itertools.pairwise(sizes)):
            weight = kl.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
            bias = kl.constant((rng.standard_normal(n) * 0.1).astype(np.float32))
            h = kl.ops.bias_add(kl.ops.mat_mul(h, weight), bias)
            if i < len(sizes) - 2:
                h = kl.ops.relu(h)
        y = kl.ops.softmax(h, name="y")
    return g, x, y


@pytest.mark.parametrize(
    ("inter", "intra", "library"),
    [*((inter, intra, "") for inter, intra in THREADS), (2, 2, MKL), (1, 1, PLAIN)],
)
def test_a_dense_chain_gives_each_thread_its_own_results(
    inter: int, intra: int, library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of 64 and 96 alternate, so the chain's ``_Replay`` (and oneDNN's or MKL's
    packed weights, packed for a row count) is replaced while other runs replay it. Also
    on MKL's packed path and on torch's plain GEMM (``library``; "" is this CPU's own),
    which a kernel reads when it is built."""
    if library:
        monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", library)
    rng = np.random.default_rng(3)
    g, x, y = mlp(rng)
    cases = [
        Case((thread, rows), {x: rng.standard_normal((rows, 256)).astype(np.float32)})
        for rows in (64, 96)
        for thread in range(WORKERS)
    ]
    cfg = config(inter, intra)
    want = references(g, [y], cases, cfg)
    with kl.Session(g, cfg) as session:
        metadata = kl.RunMetadata()
        session.run(y, cases[0].feed, kl.RunOptions(trace=True), metadata)
        assert metadata.step_stats is not None
        assert [n.op for n in metadata.step_stats.nodes if n.op.startswith("_Torch")] == [
            "_TorchDenseChain"
        ]

        def work(index: int) -> None:
            for case in schedule(cases, index, 30):
                check_equal(
                    session.run(y, case.feed), want[case.key][0], exact(inter, intra), f"{case.key}"
                )

        in_threads(work)


# -- elementwise chains ------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", [True, False])
@pytest.mark.parametrize(("inter", "intra"), [(1, 1), (2, 2)])
def test_elementwise_chains_from_threads(inter: int, intra: int, optimizer: bool) -> None:
    """Elementwise chains: with the optimizer, ``_FusedElementwise`` nodes (numpy's ufuncs
    below ``SMALL_ELEMENTWISE``, torch's above, into the output or a forwarded input);
    without, one node each, whose buffers the executor forwards and the compiled straight
    line overwrites in place. A fetched intermediate must never be overwritten by a later
    node of its own run or of another."""
    rng = np.random.default_rng(8)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 256], name="x")
        scale = kl.constant(rng.uniform(0.5, 1.5, 256).astype(np.float32))
        a = kl.ops.tanh(x * scale + 0.25, name="a")
        b = kl.ops.maximum(a * a - 0.5, x, name="b")
        c = kl.ops.sigmoid(kl.ops.exp(-kl.ops.abs(b)) * 3.0 + a, name="c")
        d = kl.ops.relu(c - kl.ops.mean(c, [1], keep_dims=True), name="d")
    fetches = [a, d]
    cases = [
        Case((t, rows), {x: rng.standard_normal((rows, 256)).astype(np.float32)})
        for rows in (3, 200)
        for t in range(WORKERS)
    ]
    cfg = config(inter, intra).model_copy(update={"graph_optimizer": optimizer})
    want = references(g, fetches, cases, cfg)
    with kl.Session(g, cfg) as session:

        def work(index: int) -> None:
            for case in schedule(cases, index, 40):
                got = session.run(fetches, case.feed)
                for value, expected in zip(got, want[case.key], strict=True):
                    check_equal(value, expected, exact(inter, intra), f"{case.key}")

        in_threads(work)


# -- control flow --------------------------------------------------------------------------


@pytest.mark.parametrize(("inter", "intra"), [(1, 1), (2, 2)])
def test_a_loop_and_a_cond_from_threads(inter: int, intra: int) -> None:
    """A while loop whose body runs a convolution and a packed product (the same kernel
    instances, called once per iteration of every thread's run, a fed trip count each) and
    a cond choosing between two branches per run."""
    rng = np.random.default_rng(9)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 8, 8, 4], name="x")
        n = kl.placeholder(kl.int32, [], name="n")
        f = kl.constant((rng.standard_normal((3, 3, 4, 4)) * 0.3).astype(np.float32))
        w = kl.constant((rng.standard_normal((256, 256)) / 16).astype(np.float32))

        def body(i: Any, h: Any) -> Any:
            h = kl.ops.relu(kl.ops.conv2d(h, f, strides=[1, 1, 1, 1], padding="SAME"))
            flat = kl.ops.reshape(h, [-1, 256])
            return i + 1, kl.ops.reshape(kl.ops.tanh(flat @ w), [-1, 8, 8, 4])

        _, looped = kl.while_loop(lambda i, h: i < n, body, [0, x], maximum_iterations=10)
        chosen = kl.cond(n > 2, lambda: looped * 2.0, lambda: looped - 1.0)
    cases = [
        Case(
            (t, batch, trips),
            {x: rng.standard_normal((batch, 8, 8, 4)).astype(np.float32), n: trips},
        )
        for t in range(WORKERS)
        for batch, trips in ((1, 2), (3, 4))
    ]
    cfg = config(inter, intra)
    want = references(g, [looped, chosen], cases, cfg)
    with kl.Session(g, cfg) as session:

        def work(index: int) -> None:
            for case in schedule(cases, index, 16):
                got = session.run([looped, chosen], case.feed)
                for value, expected in zip(got, want[case.key], strict=True):
                    check_equal(value, expected, exact(inter, intra), f"{case.key}")

        in_threads(work)


# -- filters that change -------------------------------------------------------------------


@pytest.mark.parametrize(("inter", "intra"), [(1, 1), (2, 2)])
def test_a_variable_filter_assigned_while_other_threads_run(inter: int, intra: int) -> None:
    """One thread assigns the filter variable version after version while three run the
    convolution; each run fetches the filter it read (the same ReadVariableOp feeds the
    convolution), and its output must be that filter's, exactly: never a mix of two
    versions, never another version's cached weights."""
    rng = np.random.default_rng(4)
    versions = [rng.standard_normal((3, 3, 3, 8)).astype(np.float32) for _ in range(3)]
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 12, 12, 3], name="x")
        w = kl.Variable(versions[0], name="w")
        read = w.value()
        bias = kl.constant(rng.standard_normal(8).astype(np.float32))
        y = kl.ops.relu(
            kl.ops.bias_add(kl.ops.conv2d(x, read, strides=[1, 1, 1, 1], padding="SAME"), bias),
            name="y",
        )
        plain = kl.ops.conv2d(x, read, strides=[1, 2, 2, 1], padding="VALID", name="plain")
        new_value = kl.placeholder(kl.float32, [3, 3, 3, 8], name="new_value")
        assign = w.assign(new_value)
        init = kl.variables_initializer()
    inputs = {
        (t, batch): rng.standard_normal((batch, 12, 12, 3)).astype(np.float32)
        for t in range(WORKERS - 1)
        for batch in (1, 3)
    }
    cfg = config(inter, intra)
    want: dict[tuple[Any, ...], list[Array]] = {}
    with kl.Session(g, cfg) as session:
        session.run(init)
        for v, version in enumerate(versions):
            session.run(assign, {new_value: version})
            for key, value in inputs.items():
                want[(*key, v)] = list(session.run([y, plain], {x: value}))
    bitwise = exact(inter, intra)
    with kl.Session(g, cfg) as session:
        session.run(init)
        seen: set[int] = set()
        running = threading.Semaphore(0)
        assignments = [0]

        def work(index: int) -> None:
            if index == WORKERS - 1:  # the assigning thread, until the others are done
                # (a count cap let it finish its 10,000 assignments while the workers were
                # still compiling their first run: every run then saw the last version)
                finished = 0
                deadline = time.monotonic() + TIMEOUT_S / 2
                while finished < WORKERS - 1 and time.monotonic() < deadline:
                    version = versions[(assignments[0] + 1) % 3]
                    assert np.array_equal(session.run(assign, {new_value: version}), version)
                    assignments[0] += 1
                    finished += running.acquire(blocking=False)
                return
            keys = [k for k in inputs if k[0] == index]
            try:
                loop(keys)
            finally:
                running.release()

        def loop(keys: list[tuple[int, int]]) -> None:
            for i in range(LOOPS * 40):
                key = keys[i % len(keys)]
                got_y, got_plain, filt = session.run([y, plain, read], {x: inputs[key]})
                (v,) = [v for v, version in enumerate(versions) if np.array_equal(filt, version)]
                seen.add(v)
                check_equal(got_y, want[(*key, v)][0], bitwise, f"y for {key}, version {v}")
                check_equal(got_plain, want[(*key, v)][1], bitwise, f"plain for {key}, v{v}")

        in_threads(work)
        assert len(seen) > 1 and assignments[0] > 1, "no run saw the filter change"


@pytest.mark.parametrize(("inter", "intra"), [(1, 1), (2, 2)])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_fed_filters_that_change_every_run(data_format: str, inter: int, intra: int) -> None:
    """Each run feeds its own filter and bias (a new read-only array every time: the
    oneDNN kernel's plan and packed-filter cache see a new object on every call, from four
    threads), in batch 1 and 3, and in both memory layouts."""
    rng = np.random.default_rng(5)
    nhwc = data_format == "NHWC"
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 10, 10, 4] if nhwc else [None, 4, 10, 10])
        f = kl.placeholder(kl.float32, [3, 3, 4, 6], name="f")
        b = kl.placeholder(kl.float32, [6], name="b")
        strides = [1, 1, 1, 1]
        y = kl.ops.relu(
            kl.ops.bias_add(
                kl.ops.conv2d(x, f, strides=strides, padding="SAME", data_format=data_format),
                b,
                data_format=data_format,
            ),
            name="y",
        )
    cases = []
    for thread in range(WORKERS):
        for i in range(6):
            batch = 1 + 2 * (i % 2)
            shape = (batch, 10, 10, 4) if nhwc else (batch, 4, 10, 10)
            value = rng.standard_normal(shape).astype(np.float32)
            if i % 3 == 2:
                value = nchw_memory(value) if nhwc else nhwc_memory(value)
            feed = {
                x: value,
                f: rng.standard_normal((3, 3, 4, 6)).astype(np.float32),
                b: rng.standard_normal(6).astype(np.float32),
            }
            cases.append(Case((thread, i), feed))
    cfg = config(inter, intra)
    want = references(g, [y], cases, cfg)
    with kl.Session(g, cfg) as session:

        def work(index: int) -> None:
            mine = [c for c in cases if c.key[0] == index]
            for i in range(LOOPS * 24):
                case = mine[i % len(mine)]
                got = session.run(y, case.feed)
                check_equal(got, want[case.key][0], exact(inter, intra), f"{case.key}")

        in_threads(work)


# -- errors in one thread -------------------------------------------------------------------


def test_a_failing_run_fails_alone() -> None:
    """Thread 0's runs alternate between good inputs, a feed of the wrong shape (refused
    before any kernel runs) and an image too small for the VALID convolution (failing
    inside a kernel, while other nodes of the step may run on an inter-op worker); each
    bad run raises its own clear error, and every other run, in every thread, is right."""
    rng = np.random.default_rng(6)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None, None, 3], name="x")
        f = kl.constant(rng.standard_normal((5, 5, 3, 8)).astype(np.float32))
        bias = kl.constant(rng.standard_normal(8).astype(np.float32))
        conv = kl.ops.relu(
            kl.ops.bias_add(kl.ops.conv2d(x, f, strides=[1, 1, 1, 1], padding="VALID"), bias)
        )
        side = kl.ops.max_pool(x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")
        y = kl.ops.mean(conv, [1, 2], name="y")
        z = kl.ops.sum(side, [1, 2, 3], name="z")
    cases = [
        Case((t, batch), {x: rng.standard_normal((batch, 12, 12, 3)).astype(np.float32)})
        for t in range(WORKERS)
        for batch in (1, 3)
    ]
    cfg = config(2, 1)
    want = references(g, [y, z], cases, cfg)
    wrong_channels = np.zeros((1, 12, 12, 4), np.float32)
    too_small = np.zeros((1, 3, 3, 3), np.float32)
    with kl.Session(g, cfg) as session:
        errors: list[str] = []

        def work(index: int) -> None:
            mine = [c for c in cases if c.key[0] == index]
            for i in range(LOOPS * 30):
                if index == 0 and i % 3 == 1:
                    with pytest.raises(kl.InvalidArgumentError) as shape_error:
                        session.run([y, z], {x: wrong_channels})
                    errors.append(str(shape_error.value))
                    continue
                if index == 0 and i % 3 == 2:
                    with pytest.raises(kl.KernelArgumentError) as kernel_error:
                        session.run([y, z], {x: too_small})
                    errors.append(str(kernel_error.value))
                    continue
                case = mine[i % 2]
                got = session.run([y, z], case.feed)
                for value, expected in zip(got, want[case.key], strict=True):
                    check_equal(value, expected, True, f"{case.key}")

        in_threads(work)
    assert len(errors) == 20 * LOOPS
    for shape_message in errors[::2]:
        assert shape_message.startswith("feed for 'x:0'") and "does not fit" in shape_message
    for kernel_message in errors[1::2]:
        assert kernel_message.startswith("node 'relu' (op _FusedConv2D, fused from conv2d")
        assert "the window spans 5" in kernel_message


# -- an ONNX model --------------------------------------------------------------------------


def light_model(name: str) -> tuple[bytes, str, tuple[int, ...]]:
    """A light model of the onnx wheel with any batch size (its input's batch dimension
    made symbolic and its batch-1 Reshapes -1, as ``benchmarks/bench_onnx.py`` does), its
    input's name and its shape for one image."""
    model = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    initializers = {i.name: i for i in model.graph.initializer}
    (value,) = [v for v in model.graph.input if v.name not in initializers]
    dims = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
    value.type.tensor_type.shape.dim[0].dim_param = "batch"
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in initializers:
            init = initializers[node.input[1]]
            shape = numpy_helper.to_array(init).copy()
            if shape.size and shape[0] == 1:
                shape[0] = -1
                init.CopyFrom(numpy_helper.from_array(shape, init.name))
    del model.graph.output[0].type.tensor_type.shape.dim[:]
    return model.SerializeToString(), value.name, (1, *dims[1:])


@pytest.mark.parametrize(
    ("name", "inter", "intra"),
    [("squeezenet", 1, 2), ("squeezenet", 2, 1), ("shufflenet", 2, 2), ("inception_v1", 2, 1)],
)
def test_a_light_onnx_model_from_threads(name: str, inter: int, intra: int) -> None:
    """A real CNN imported from ONNX (NCHW convolutions kept in channels_last memory, fire
    modules' concatenations, ShuffleNet's channel shuffles, Inception's LRN), batch 1 and
    3, its input in C order and in NHWC memory."""
    data, input_name, (_, *image) = light_model(name)
    rng = np.random.default_rng(7)
    cases = []
    for thread in range(WORKERS):
        for batch in (1, 3):
            value = rng.random((batch, *image), dtype=np.float32)
            cases.append(((thread, batch, "C"), value))
            cases.append(((thread, batch, "NHWC"), nhwc_memory(value)))
    cfg = config(inter, intra)
    with ko.InferenceSession(data, config=cfg) as session:
        want = {key: session.run(None, {input_name: value})[0] for key, value in cases}
    with ko.InferenceSession(data, config=cfg) as session:

        def work(index: int) -> None:
            mine = [c for c in cases if c[0][0] == index]
            for i in range(LOOPS * 8):
                key, value = mine[(i + index) % len(mine)]
                (got,) = session.run(None, {input_name: value})
                check_equal(got, want[key], exact(inter, intra), f"{name} {key}")

        in_threads(work)
