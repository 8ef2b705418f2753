"""``_FusedElementwise`` on the CPU through the torch plugin (its default there for float32
and float64): random expressions over inputs of the output's shape and broadcast ones, on
both of its paths (numpy's functions under ``SMALL_ELEMENTWISE`` elements, torch's above),
against float64 numpy written out here; the output keeps the inputs' memory order, reuses
an input nothing else holds, and a chain keeps its intermediates in the output. On
torch's path the values are also the numpy kernels' op by op, bit for bit: each op rounded
once (no fused multiply-add), NaN, infinities, signed zeros and subnormals (flushed on
torch's threads too, or kept) as unfused."""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry, run_tanh_mul_add, spy_on_compute
from test_torch_labelled_cpu import REGISTRY

import kernloom as kl
from kernloom.plugin import NUMPY_ELEMENTWISE
from kernloom.testing import run_kernel
from kernloom_cpu_numpy.denormals import FLUSH_SUPPORTED, FlushDenormals
from kernloom_gpu_torch.kernels import _team_fp, fused
from kernloom_gpu_torch.kernels.fused import SMALL_ELEMENTWISE

UNARY: dict[str, Callable[[Any], Any]] = {
    "Neg": lambda a: -a,
    "Tanh": np.tanh,
    "Sigmoid": lambda a: 1 / (1 + np.exp(-a)),
    "Relu": lambda a: np.where(np.isnan(a), np.nan, np.maximum(a, 0)),
    "Square": np.square,
}
"""(No Exp: a chain of them amplifies a one-ulp difference between libraries past any
tolerance; Exp is in the fixed cases of ``test_kernels``.)"""
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "AddV2": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
}


def _same_bits(got: Any, want: Any) -> np.ndarray[Any, Any]:
    """Per element: the same bits, or NaN on both sides (a NaN's payload is not compared)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    unsigned = np.dtype(f"u{got.itemsize}")
    return (got.view(unsigned) == want.view(unsigned)) | (np.isnan(got) & np.isnan(want))


def assert_same_bits(got: Any, want: Any) -> None:
    """``got`` is ``want`` bit for bit (signed zeros and subnormals included), NaN == NaN."""
    same = _same_bits(got, want)
    if not same.all():
        first = np.flatnonzero(~same)[:5]
        got_first, want_first = (np.asarray(v).ravel()[first].tolist() for v in (got, want))
        raise AssertionError(
            f"{(~same).sum()} elements differ, first at {first.tolist()}: got {got_first}, "
            f"want {want_first}"
        )


@st.composite
def expressions(draw: st.DrawFn, inputs: int) -> tuple[str, Callable[[list[Any]], Any]]:
    """A chain of 1-5 steps, each over the running value and maybe an input."""
    steps: list[str] = []
    fns: list[Callable[[list[Any], list[Any]], Any]] = []
    for k in range(draw(st.integers(1, 5))):
        current = f"t{k - 1}" if k else "i0"
        pick = draw(st.sampled_from(sorted(UNARY) + sorted(BINARY)))
        if pick in UNARY:
            steps.append(f"{pick}({current})")
            fns.append(lambda xs, ts, f=UNARY[pick], k=k: f(ts[k - 1] if k else xs[0]))
        else:
            other = draw(st.integers(0, inputs - 1))
            steps.append(f"{pick}({current}, i{other})")
            fns.append(
                lambda xs, ts, f=BINARY[pick], k=k, o=other: f(ts[k - 1] if k else xs[0], xs[o])
            )

    def reference(xs: list[Any]) -> Any:
        """float64 per step, rounded to the inputs' dtype after each (as the kernel's)."""
        wide = [x.astype(np.float64) for x in xs]
        ts: list[Any] = []
        with np.errstate(all="ignore"):
            for fn in fns:
                ts.append(fn(wide, ts).astype(xs[0].dtype).astype(np.float64))
        return ts[-1]

    return "; ".join(steps), reference


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from([(7,), (3, 40), (64, 600), (2, 8, 64, 40), (1 << 15,)]),
    dtype=st.sampled_from([np.float32, np.float64]),
    broadcast=st.booleans(),
    data=st.data(),
)
def test_random_expressions_match_float64_numpy(
    shape: tuple[int, ...], dtype: Any, broadcast: bool, data: st.DataObject
) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    second = (shape[-1],) if broadcast else shape
    xs = [rng.uniform(-3, 3, shape).astype(dtype), rng.uniform(-3, 3, second).astype(dtype)]
    xs[0].flat[rng.integers(0, xs[0].size, 3)] = [np.nan, np.inf, -np.inf]
    expression, reference = data.draw(expressions(2))
    run = run_kernel("_FusedElementwise", [xs], {"expression": expression}, registry=REGISTRY)
    assert type(run.kernel).__name__ == "CpuFusedElementwise"
    (y,) = run.outputs
    assert y.shape == shape and y.dtype == dtype
    want = reference(xs)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("size", [1000, SMALL_ELEMENTWISE * 2])
def test_an_input_nothing_else_holds_becomes_the_output(size: int) -> None:
    x = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    expression = "Tanh(i0); Mul(t0, i0); AddV2(t1, i0); Relu(t2)"
    run = run_kernel(
        "_FusedElementwise", [[x]], {"expression": expression}, registry=REGISTRY, forwardable=[0]
    )
    assert run.forwarded == [(0, 0)]
    z = x.astype(np.float64)
    np.testing.assert_allclose(run.outputs[0], np.maximum(np.tanh(z) * z + z, 0), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_ops_numpy_runs_on_torch_s_path_broadcast_and_strided(dtype: type) -> None:
    """Above ``SMALL_ELEMENTWISE`` Exp, Log and Tanh take numpy's ufuncs (``ON_NUMPY``) on
    the tensors' memory: as a new temporary, into the output, from a transposed input and
    from a broadcast row, NaN and infinities among the values."""
    from kernloom_gpu_torch.kernels.fused import ON_NUMPY

    assert {"Exp", "Log", "Tanh"} <= ON_NUMPY
    rng = np.random.default_rng(4)
    rows, cols = 256, 200
    assert rows * cols >= SMALL_ELEMENTWISE
    x = rng.standard_normal((cols, rows)).astype(dtype).T  # a transposed view
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    row = np.abs(rng.standard_normal((1, cols))).astype(dtype) + 0.5
    expression = "Exp(i0); Log(i1); Tanh(i0); Mul(t0, t1); AddV2(t3, t2); Tanh(t4)"
    run = run_kernel("_FusedElementwise", [[x, row]], {"expression": expression}, registry=REGISTRY)
    assert type(run.kernel).__name__ == "CpuFusedElementwise"
    with np.errstate(all="ignore"):
        z, r = x.astype(np.float64), row.astype(np.float64)
        want = np.tanh(np.exp(z) * np.log(r) + np.tanh(z))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(run.outputs[0], want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_sqrt_maximum_and_minimum_on_torch_s_path_are_numpy_s(dtype: type) -> None:
    """The ops added to ``ON_NUMPY`` for exact values -- Sigmoid (numpy's formula), Sqrt,
    Maximum and Minimum (of two zeros, the second) -- from a transposed input and a
    broadcast row, as new temporaries and into the output: numpy's values bit for bit
    (subnormals flushed, as the CPU device runs kernels by default)."""
    from kernloom_gpu_torch.kernels.fused import ON_NUMPY

    assert {"Sigmoid", "Sqrt", "Maximum", "Minimum"} <= ON_NUMPY
    rng = np.random.default_rng(7)
    rows, cols = 256, 200
    x = _property_values(rng, dtype, (cols, rows)).T  # a transposed view
    row = _property_values(rng, dtype, (1, cols))
    steps = [
        ("Sigmoid", ["i0"]),
        ("Maximum", ["i1", "t0"]),
        ("Sqrt", ["t1"]),
        ("Minimum", ["t2", "i1"]),
        ("Maximum", ["t3", "i0"]),
    ]
    expression = "; ".join(f"{op}({', '.join(args)})" for op, args in steps)
    run = run_kernel("_FusedElementwise", [[x, row]], {"expression": expression}, registry=REGISTRY)
    assert type(run.kernel).__name__ == "CpuFusedElementwise"
    with FlushDenormals():  # as the kernel ran: the CPU device's default
        want = _numpy_op_by_op(steps, [x, row], (rows, cols))
    assert_same_bits(run.outputs[0], want)


def test_a_large_chain_peaks_at_one_tensor_beyond_the_feed() -> None:
    """The torch path keeps a chain's intermediates in the output buffer: the allocator
    sees the output and nothing more (numpy's kernel: the output and block temporaries)."""
    g = kl.Graph(REGISTRY)
    with g.as_default():
        x = kl.placeholder(kl.float32, [1 << 20], name="x")
        y = kl.ops.sqrt(kl.ops.square(kl.ops.sigmoid(kl.ops.tanh(kl.ops.neg(x)))))
    xv = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    metadata = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1), registry=REGISTRY) as session:
        out = session.run(y, {x: xv}, kl.RunOptions(trace=True), metadata)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-np.tanh(-xv))), rtol=1e-5)
    assert metadata.step_stats is not None
    kernels = {n.op: n.kernel for n in metadata.step_stats.nodes}
    assert kernels["_FusedElementwise"] == "CpuFusedElementwise"
    peak = max(s.peak_bytes_in_use for s in metadata.memory.values())
    assert xv.nbytes <= peak < xv.nbytes * 1.1


@pytest.mark.parametrize(
    "expression",
    [
        "Mul(i0, i1); AddV2(t0, i2); Relu(t1)",  # the sum overwrites the product's slot
        "Mul(i0, i1); AddV2(i2, t0)",  # the sum is the output
    ],
)
def test_a_batch_norm_s_multiply_add_rounds_the_product(expression: str) -> None:
    """``x * s + b`` (a batch norm folded to its affine, before a ReLU or not), whichever
    slot the planner gives the sum: the product rounded, then the sum, numpy's values bit
    for bit (a fused multiply-add, ``addcmul``, rounded once and differed)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 64, 32, 32)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    s = rng.standard_normal((1, 64, 1, 1)).astype(np.float32)
    b = rng.standard_normal((1, 64, 1, 1)).astype(np.float32)
    attrs = {"expression": expression, "T": kl.float32, "N": 3}
    run = run_kernel("_FusedElementwise", [[x, s, b]], attrs, registry=REGISTRY)
    assert type(run.kernel).__name__ == "CpuFusedElementwise"
    want = x * s + b
    if "Relu" in expression:
        want = np.maximum(want, np.float32(0))
    assert_same_bits(run.outputs[0], want)
    assert np.isnan(run.outputs[0][0, 0, 0, 0])


def test_kept_shapes_and_constant_tensors_follow_new_shapes_feeds_and_variables() -> None:
    """The kernel keeps, per input shapes, the output shape, and each constant input's
    tensor while it is the same read-only array: a new batch gets its own shape, a fed
    scale changed in place between runs and a variable assigned between runs are read
    anew (neither is a constant), and the constant shift stays right."""
    c, h, w = 8, 64, 80  # above SMALL_ELEMENTWISE: torch's path
    assert c * h * w >= SMALL_ELEMENTWISE
    rng = np.random.default_rng(5)
    shift = rng.standard_normal((c, 1, 1)).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, c, h, w], name="x")
        scale = kl.placeholder(kl.float32, [c, 1, 1], name="scale")
        v = kl.Variable(np.ones((c, 1, 1), np.float32), name="v")
        y = kl.ops.relu(kl.ops.add_v2(kl.ops.mul(x, scale), kl.constant(shift)), name="y")
        z = kl.ops.relu(kl.ops.add_v2(kl.ops.mul(x, v.value()), kl.constant(shift)), name="z")
        assign = v.assign(kl.constant(np.full((c, 1, 1), -2.0, np.float32)))
    fed = rng.standard_normal((c, 1, 1)).astype(np.float32)
    config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=2)
    with kl.Session(g, config, registry=REGISTRY) as sess:
        sess.run(v.initializer)
        first = {x: rng.random((1, c, h, w), np.float32), scale: fed}
        kernels = {n.op: n.kernel for n in _traced_nodes(sess, [y, z], first)}
        assert kernels["_FusedElementwise"] == "CpuFusedElementwise"
        for step, batch in enumerate((1, 2, 1, 3)):
            xv = rng.standard_normal((batch, c, h, w)).astype(np.float32)
            if step == 2:
                sess.run(assign)
            got_y, got_z = sess.run([y, z], {x: xv, scale: fed})
            vv = np.full((c, 1, 1), -2.0 if step >= 2 else 1.0, np.float32)
            np.testing.assert_allclose(got_y, np.maximum(xv * fed + shift, 0), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got_z, np.maximum(xv * vv + shift, 0), rtol=1e-6, atol=1e-6)
            fed *= -1.5  # in place: the same array object, new content


def _traced_nodes(sess: kl.Session, fetches: Any, feeds: Any) -> list[Any]:
    metadata = kl.RunMetadata()
    sess.run(fetches, feeds, options=kl.RunOptions(trace=True), run_metadata=metadata)
    assert metadata.step_stats is not None
    return list(metadata.step_stats.nodes)


@pytest.mark.parametrize(
    ("fed", "operand", "runs_compute"),
    [
        ((16,), (16,), False),
        ((4, 16), (), False),
        ((4, 1), (1, 16), False),  # the result larger than both inputs
        ((64, 1024), (1024,), True),  # torch's path (SMALL_ELEMENTWISE and more)
    ],
)
def test_a_small_fused_node_runs_its_direct_entry(
    monkeypatch: pytest.MonkeyPatch,
    fed: tuple[int, ...],
    operand: tuple[int, ...],
    runs_compute: bool,
) -> None:
    """Small outputs take the direct entry (numpy's functions into a
    counted buffer, no context); larger ones compute's torch path. Both give the float64
    reference, and the caller's feed is never written."""
    computed = spy_on_compute(monkeypatch)
    rng = np.random.default_rng(6)
    xv = rng.standard_normal(fed).astype(np.float32)
    run_tanh_mul_add(REGISTRY, xv, rng.standard_normal(operand).astype(np.float32), "AddV2")
    assert ("f" in computed) is runs_compute


NUMPY_ONLY = make_registry()


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.sampled_from([((7,), (7,)), ((3, 40), (40,)), ((40,), (3, 40)), ((5, 1), (1, 6))]),
    numpy_kernel=st.booleans(),
    data=st.data(),
)
def test_random_expressions_through_the_direct_entry_match_float64_numpy(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], numpy_kernel: bool, data: st.DataObject
) -> None:
    """Both CPU kernels' direct entries (two fed inputs: a new output, which holds the
    first temporary -- also where the running value starts smaller than the output,
    ``[40]`` against ``[3, 40]``, and is broadcast into it)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    xs = [rng.uniform(-3, 3, shape).astype(np.float32) for shape in shapes]
    expression, reference = data.draw(expressions(2))
    g = kl.Graph(NUMPY_ONLY if numpy_kernel else REGISTRY)
    with g.as_default():
        feeds = [kl.placeholder(kl.float32, list(s), name=f"x{i}") for i, s in enumerate(shapes)]
        y = g.add_node("_FusedElementwise", [feeds], {"expression": expression}).outputs[0]
    kept = [x.copy() for x in xs]
    with kl.Session(g, kl.SessionConfig(graph_optimizer=False, inter_op_threads=1)) as sess:
        got = sess.run(y, dict(zip(feeds, xs, strict=True)))
    want = np.broadcast_to(reference(xs), got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for x, k in zip(xs, kept, strict=True):
        np.testing.assert_array_equal(x, k)


# -- IEEE edges: the torch path computes each op as its unfused numpy kernel does --------

LARGE = SMALL_ELEMENTWISE + 7232
"""40000 elements: above ``SMALL_ELEMENTWISE``, so torch's path runs the group."""


def _run_optimized(
    build: Callable[[list[Any]], Any],
    feeds: list[np.ndarray[Any, Any]],
    **config: Any,
) -> np.ndarray[Any, Any]:
    """``build(placeholders)`` run with the graph optimizer on (its elementwise fusion),
    the group checked to have run as the torch plugin's CPU kernel."""
    g = kl.Graph(REGISTRY)
    with g.as_default():
        xs = [
            kl.placeholder(kl.as_dtype(v.dtype), list(v.shape), name=f"x{i}")
            for i, v in enumerate(feeds)
        ]
        y = build(xs)
    settings_ = kl.SessionConfig(inter_op_threads=1, **config)
    with kl.Session(g, settings_, registry=REGISTRY) as sess:
        metadata = kl.RunMetadata()
        options = kl.RunOptions(trace=True)
        got = sess.run(y, dict(zip(xs, feeds, strict=True)), options, metadata)
    assert metadata.step_stats is not None
    kernels = {n.op: n.kernel for n in metadata.step_stats.nodes}
    assert kernels.get("_FusedElementwise") == "CpuFusedElementwise", kernels
    return np.asarray(got)


@pytest.mark.parametrize(
    ("x", "z"),
    [
        (1e30, -np.inf),  # x * x overflows to inf; inf + -inf is NaN
        (1 + 2**-12, -float(np.float32(1 + 2**-12) * np.float32(1 + 2**-12))),  # exactly 0
    ],
    ids=["overflow", "cancellation"],
)
def test_a_multiply_then_add_rounds_twice_as_the_graph_does(x: float, z: float) -> None:
    """``relu(x * x + z)``: Mul then Add, each rounded, as built (TensorFlow and the numpy
    kernels give NaN and +0.0 here); a fused multiply-add gave 0.0 and 5.96e-08."""
    xv, zv = np.full(LARGE, x, np.float32), np.full(LARGE, z, np.float32)
    got = _run_optimized(lambda v: kl.ops.relu(kl.ops.add(kl.ops.mul(v[0], v[0]), v[1])), [xv, zv])
    with np.errstate(all="ignore"):
        want = np.maximum(xv * xv + zv, np.float32(0))
    assert_same_bits(got, want)
    assert np.isnan(got).all() if np.isinf(z) else not np.signbit(got).any() and not got.any()


def test_relu_of_minus_zero_is_plus_zero_and_nan_stays_nan() -> None:
    """``1 / relu(-x)`` at x = 0 is +inf (TensorFlow's Relu and the numpy kernel's rule:
    -0.0 gives +0.0); a NaN stays NaN. ``torch.clamp(min=0)`` kept -0.0 (-inf here)."""
    xv = np.zeros(LARGE, np.float32)
    xv[1] = np.nan
    got = _run_optimized(
        lambda v: kl.ops.real_div(kl.constant(np.float32(1)), kl.ops.relu(kl.ops.neg(v[0]))),
        [xv],
    )
    assert got[0] == np.inf and np.isnan(got[1])
    assert (got[2:] == np.inf).all()


def test_torch_s_threads_can_take_the_caller_s_environment_here() -> None:
    """On x86-64 Linux with torch's OpenMP runtime (this repository's CI) the kernel keeps
    torch's threads; elsewhere it falls back to one thread where it must flush."""
    if sys.platform == "linux" and platform.machine() == "x86_64":
        assert "OpenMP" in torch.__config__.parallel_info()
        assert _team_fp.TEAM_ENVIRONMENT is not None


@pytest.mark.parametrize("activation", ["Relu", "Relu6", "Elu", "LeakyRelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_activations_follow_the_numpy_kernel_s_rules_on_edges(
    activation: str, dtype: Any
) -> None:
    """``_FusedMatMul``'s and ``_FusedConv2D``'s activations (``apply_activation``) on
    -0.0, NaN, infinities, subnormals and the bounds: the numpy kernels' values
    (``bias_and_activation``, a -0.0 bias keeping -0.0), bit for bit. Relu makes +0.0 of
    -0.0 there, and did not here (``torch.relu_``); Relu6, Elu and LeakyRelu keep it.
    (Elu of an ordinary negative number is torch's ``expm1``, an ulp from numpy's at
    times, as the product before it sums in its library's order.)"""
    from kernloom_cpu_numpy.kernels.fused import bias_and_activation

    x = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, -1e-39, 1e-39, 6, 7, -1e30, 2], dtype)
    want = x.copy()
    bias_and_activation(want, np.full(1, -0.0, dtype), 0, activation, 0.2)
    got = torch.from_numpy(x.copy())
    fused.apply_activation(activation, got, 0.2)
    assert_same_bits(got.numpy(), want)


@pytest.mark.parametrize("team", [True, False], ids=["team", "one-thread-fallback"])
@pytest.mark.parametrize("threads", [1, 2])
def test_subnormals_are_flushed_on_torch_s_path_as_unfused(
    monkeypatch: pytest.MonkeyPatch, threads: int, team: bool
) -> None:
    """With ``flush_denormals`` (the default) a subnormal input reads as zero and a
    subnormal result is zero, on torch's threads too: ``sqrt(+-1e-39) * 1e20`` is 0.0 and
    -0.0 (TensorFlow's and the unfused kernels' values), ``x * 1e20 + 0`` is 0.0. torch's
    sqrt ignored the calling thread's flag (3.16 and NaN) and torch's own threads, started
    before the step, never had it. Where they cannot be given it (``TEAM_ENVIRONMENT`` is
    None) torch runs on the caller's thread alone."""
    if not FLUSH_SUPPORTED:
        pytest.skip("this machine cannot flush subnormals")
    if not team:
        monkeypatch.setattr(_team_fp, "TEAM_ENVIRONMENT", None)
    _warm_torch_threads(threads)
    xv = np.full(LARGE * 4, 1e-39, np.float32)
    xv[1] = -1e-39
    big = np.float32(1e20)
    got = _run_optimized(
        lambda v: kl.ops.mul(kl.ops.sqrt(v[0]), kl.constant(big)), [xv], intra_op_threads=threads
    )
    assert got[0] == 0 and not np.signbit(got[0]) and got[1] == 0 and np.signbit(got[1])
    assert not got.any()
    zeros = np.zeros_like(xv)
    got = _run_optimized(
        lambda v: kl.ops.add(kl.ops.mul(v[0], kl.constant(big)), v[1]),
        [xv, zeros],
        intra_op_threads=threads,
    )
    assert not got.any()


@pytest.mark.parametrize("threads", [1, 2])
def test_subnormals_stay_with_flush_denormals_off_and_after_the_step(threads: int) -> None:
    """``flush_denormals=False``: IEEE subnormals on every thread; and after a flushing
    step, torch on the caller's thread keeps IEEE subnormals (user code is not affected)."""
    _warm_torch_threads(threads)
    xv = np.full(LARGE * 4, 1e-39, np.float32)
    big = np.float32(1e20)
    zeros = np.zeros_like(xv)
    got = _run_optimized(
        lambda v: kl.ops.add(kl.ops.mul(v[0], kl.constant(big)), v[1]),
        [xv, zeros],
        intra_op_threads=threads,
        flush_denormals=False,
    )
    assert_same_bits(got, xv * big)
    _run_optimized(
        lambda v: kl.ops.add(kl.ops.mul(v[0], kl.constant(big)), v[1]),
        [xv, zeros],
        intra_op_threads=threads,
    )
    assert_same_bits((torch.from_numpy(xv) * big).numpy(), xv * big)


def _warm_torch_threads(threads: int) -> None:
    """Start torch's threads for this thread outside any step (as user code would)."""
    torch.set_num_threads(threads)
    (torch.ones(1 << 20) * 2).sum()


# The numpy functions the reference evaluates op by op (the unfused kernels' own).
PROPERTY_OPS: tuple[str, ...] = tuple(sorted(NUMPY_ELEMENTWISE))
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1 + 2**-12, 1e-20, 1e20]


def _property_values(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]) -> Any:
    """Values drawn from NaN, infinities, signed zeros, subnormals, the smallest normal,
    numbers whose squares underflow or overflow, and ordinary numbers."""
    tiny = float(np.finfo(dtype).tiny)
    pool = np.array([*SPECIAL, tiny, -tiny, tiny / 3, -tiny / 7, tiny * 1.5], dtype)
    pool = np.concatenate([pool, rng.standard_normal(8).astype(dtype) * 4])
    return rng.choice(pool, shape)


@st.composite
def ieee_expressions(draw: st.DrawFn, inputs: int) -> list[tuple[str, list[str]]]:
    """A chain of 1-6 steps over all the fusable ops; a binary step takes the running
    value and an input, in either order (Maximum/Minimum of two zeros keep the second)."""
    steps: list[tuple[str, list[str]]] = []
    for k in range(draw(st.integers(1, 6))):
        current = f"t{k - 1}" if k else "i0"
        op = draw(st.sampled_from(PROPERTY_OPS))
        if op in ("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"):
            other = f"i{draw(st.integers(0, inputs - 1))}"
            steps.append((op, [current, other] if draw(st.booleans()) else [other, current]))
        else:
            steps.append((op, [current]))
    return steps


def _numpy_op_by_op(steps: list[tuple[str, list[str]]], xs: list[Any], shape: Any) -> Any:
    """Each step as the unfused numpy kernel computes it, over the whole broadcast value."""
    values: dict[str, Any] = {f"i{i}": x for i, x in enumerate(xs)}
    with np.errstate(all="ignore"):
        for k, (op, args) in enumerate(steps):
            operands = [values[a] for a in args]
            out = np.empty(np.broadcast_shapes(*(o.shape for o in operands)), xs[0].dtype)
            fn = NUMPY_ELEMENTWISE[op]
            if fn in (np.maximum, np.minimum):
                fn(*operands, out=out)
            else:
                fn(*operands, out)
            values[f"t{k}"] = out
    return np.broadcast_to(values[f"t{len(steps) - 1}"], shape)


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from([np.float32, np.float64]),
    shapes=st.sampled_from([((LARGE,), (LARGE,)), ((160, 256), (256,)), ((LARGE + 3,), ())]),
    flush=st.booleans(),
    threads=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_torch_path_equals_numpy_op_by_op_bit_for_bit(
    dtype: Any,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    flush: bool,
    threads: int,
    seed: int,
    data: st.DataObject,
) -> None:
    """Above ``SMALL_ELEMENTWISE`` the kernel's values are the numpy kernels' op by op,
    bit for bit, over NaN, infinities, signed zeros and subnormals, flushed or not, on
    one thread or two (torch's threads started before the step)."""
    if flush and not FLUSH_SUPPORTED:
        pytest.skip("this machine cannot flush subnormals")
    _warm_torch_threads(threads)
    rng = np.random.default_rng(seed)
    xs = [_property_values(rng, dtype, s) for s in shapes]
    steps = data.draw(ieee_expressions(len(xs)))
    expression = "; ".join(f"{op}({', '.join(args)})" for op, args in steps)
    g = kl.Graph(REGISTRY)
    with g.as_default():
        feeds = [
            kl.placeholder(kl.as_dtype(np.dtype(dtype)), list(s), name=f"x{i}")
            for i, s in enumerate(shapes)
        ]
        y = g.add_node("_FusedElementwise", [feeds], {"expression": expression}).outputs[0]
    config = kl.SessionConfig(
        graph_optimizer=False,
        inter_op_threads=1,
        intra_op_threads=threads,
        flush_denormals=flush,
    )
    with kl.Session(g, config, registry=REGISTRY) as sess:
        metadata = kl.RunMetadata()
        got = sess.run(y, dict(zip(feeds, xs, strict=True)), kl.RunOptions(trace=True), metadata)
    assert metadata.step_stats is not None
    assert [n.kernel for n in metadata.step_stats.nodes if n.op == "_FusedElementwise"] == [
        "CpuFusedElementwise"
    ]
    if flush:
        with FlushDenormals():
            want = _numpy_op_by_op(steps, xs, got.shape)
    else:
        want = _numpy_op_by_op(steps, xs, got.shape)
    assert_same_bits(got, want)
