"""``_FusedElementwise`` on the CPU through the torch plugin (its default there for float32
and float64): random expressions over inputs of the output's shape and broadcast ones, on
both of its paths (numpy's functions under ``SMALL_ELEMENTWISE`` elements, torch's above),
against float64 numpy written out here; the output keeps the inputs' memory order, reuses
an input nothing else holds, and a chain keeps its intermediates in the output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry, run_tanh_mul_add, spy_on_compute
from test_torch_labelled_cpu import REGISTRY

import kernloom as kl
from kernloom.testing import run_kernel
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
def test_a_batch_norm_s_multiply_add_is_one_pass(expression: str) -> None:
    """``x * s + b`` (a batch norm folded to its affine, before a ReLU or not) runs as one
    ``addcmul``, whichever slot the planner gives the sum, with numpy's values: DenseNet's
    121 such nodes made three passes each while the product's slot was reused."""
    from kernloom_gpu_torch.kernels import fused

    plan = fused._multiply_adds(
        [(fused.FUNCTIONS[op], refs, slot) for op, refs, slot in _plan(expression)]
    )
    assert plan[0][0] is fused._multiply_add
    assert len(plan) == expression.count(";")
    x = np.random.default_rng(3).standard_normal((1, 64, 32, 32)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    s = np.random.default_rng(4).standard_normal((1, 64, 1, 1)).astype(np.float32)
    b = np.random.default_rng(5).standard_normal((1, 64, 1, 1)).astype(np.float32)
    attrs = {"expression": expression, "T": kl.float32, "N": 3}
    (y,) = run_kernel("_FusedElementwise", [[x, s, b]], attrs, registry=REGISTRY).outputs
    want = x.astype(np.float64) * s + b
    if "Relu" in expression:
        want = np.where(np.isnan(want), np.nan, np.maximum(want, 0))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    assert np.isnan(y[0, 0, 0, 0])


def _plan(expression: str) -> list[Any]:
    from kernloom.plugin import plan_fused_expression

    steps, _ = plan_fused_expression(expression, 3)
    return steps


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
