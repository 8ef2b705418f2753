"""The fused ops' definitions: bad expressions and attrs fail at graph-building time with
the node named; a bias that does not fit fails at run time with the node named."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_helpers import make_registry, run_tanh_mul_add, spy_on_compute

import kernloom as kl
from kernloom.plugin import parse_fused_expression, plan_fused_expression

NUMPY = make_registry()
"""The numpy plugin alone: the tests of its fused kernel (installed, the torch plugin's
``_FusedElementwise`` is the CPU default; ``plugins/gpu_torch/tests`` test that one)."""


def test_an_expression_parses_into_steps() -> None:
    steps = parse_fused_expression("Add(i0, i1); Relu(t0);Mul(t1,i0)", 2)
    assert steps == [
        ("Add", [("i", 0), ("i", 1)]),
        ("Relu", [("t", 0)]),
        ("Mul", [("t", 1), ("i", 0)]),
    ]


@pytest.mark.parametrize(
    ("text", "inputs", "message"),
    [
        ("Add(i0 i1)", 2, "step 0 'Add(i0 i1)' is not 'Op(a, b)'"),
        ("MatMul(i0, i1)", 2, "op 'MatMul' cannot be fused; fusable: Add, AddV2"),
        ("Add(i0)", 1, "Add takes 2 operand(s), got 1"),
        ("Neg(i2)", 2, "step 0 reads i2, which does not exist (2 inputs)"),
        ("Neg(i0); Exp(t1)", 1, "step 1 reads t1, which does not exist (yet)"),
    ],
)
def test_bad_expressions_are_refused_with_the_reason(text: str, inputs: int, message: str) -> None:
    with pytest.raises(kl.InvalidArgumentError) as e:
        parse_fused_expression(text, inputs)
    assert message in str(e.value)


def test_a_fused_node_with_a_bad_expression_fails_when_built() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        with pytest.raises(kl.InvalidArgumentError) as e:
            g.add_node("_FusedElementwise", [[x]], {"expression": "Tan(i0)"}, name="bad")
    assert "node 'bad' (op _FusedElementwise)" in str(e.value)
    assert "op 'Tan' cannot be fused" in str(e.value)


@pytest.mark.parametrize(
    ("fused_ops", "bias", "message"),
    [
        (["Relu"], 3, "fused_ops must be ['BiasAdd'] or ['BiasAdd', activation]"),
        (["BiasAdd", "Sigmoid"], 3, "fused activation 'Sigmoid' is not one of Relu, Relu6"),
        (["BiasAdd"], 4, "bias has 4 values for 3 columns"),
    ],
)
def test_fused_matmul_checks_its_attrs_and_bias_when_built(
    fused_ops: list[str], bias: int, message: str
) -> None:
    g = kl.Graph()
    with g.as_default():
        a = kl.constant(np.ones((2, 5), np.float32))
        b = kl.constant(np.ones((5, 3), np.float32))
        c = kl.constant(np.ones(bias, np.float32))
        with pytest.raises(kl.InvalidArgumentError) as e:
            g.add_node("_FusedMatMul", [a, b, [c]], {"fused_ops": fused_ops}, name="fm")
    assert "node 'fm' (op _FusedMatMul)" in str(e.value) and message in str(e.value)


def test_fused_conv_checks_the_bias_against_the_filter() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.constant(np.ones((1, 4, 4, 2), np.float32))
        f = kl.constant(np.ones((3, 3, 2, 5), np.float32))
        c = kl.constant(np.ones(4, np.float32))
        with pytest.raises(kl.InvalidArgumentError) as e:
            g.add_node(
                "_FusedConv2D",
                [x, f, [c]],
                {"strides": [1, 1, 1, 1], "padding": "SAME", "fused_ops": ["BiasAdd"]},
                name="fc",
            )
    assert "node 'fc' (op _FusedConv2D)" in str(e.value)
    assert "bias has 4 values for 5 output channels" in str(e.value)


def test_a_bias_that_does_not_fit_fails_at_run_time_naming_the_node() -> None:
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.float32, [None, None], name="a")
        bias = kl.placeholder(kl.float32, [None], name="bias")
        y = g.add_node(
            "_FusedMatMul", [a, a, [bias]], {"fused_ops": ["BiasAdd", "Relu"]}, name="fm"
        ).outputs[0]
    config = kl.SessionConfig(graph_optimizer=False)
    with kl.Session(g, config) as sess, pytest.raises(kl.KernloomError) as e:
        sess.run(y, {a: np.ones((3, 3), np.float32), bias: np.ones(2, np.float32)})
    assert "node 'fm' (op _FusedMatMul)" in str(e.value)
    assert "bias has shape (2,); it needs (3,)" in str(e.value)


@pytest.mark.parametrize("rows", [3, 70])  # one pass, and blocks of rows
def test_the_numpy_fused_kernel_writes_into_an_input_nothing_else_holds(rows: int) -> None:
    """Every step of a block reads the input's block before the last step overwrites it."""
    from kernloom.testing import run_kernel

    x = np.random.default_rng(0).standard_normal((rows, 300)).astype(np.float32)
    v = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    expression = "Tanh(i0); Mul(t0, i1); Add(t1, i0); Sigmoid(t2); Maximum(t3, i0); Neg(t4)"
    run = run_kernel(
        "_FusedElementwise", [[x, v]], {"expression": expression}, forwardable=[0], registry=NUMPY
    )
    assert run.forwarded == [(0, 0)]
    t = np.tanh(x.astype(np.float64)) * v + x
    want = -np.maximum(1 / (1 + np.exp(-t)), x)
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-5, atol=1e-6)


def test_a_temporary_read_twice_by_one_step_is_freed_once() -> None:
    """Add(t0, t0) frees t0's buffer once: were it freed twice, Relu(i0) would get the
    buffer t3 still lives in (found by test_executor_random: a wrong result, no error)."""
    from kernloom.testing import run_kernel

    x = np.random.default_rng(0).uniform(-1, 1, (4, 4))
    expression = "Neg(i0); Add(t0, t0); Tanh(t1); Neg(t2); Relu(i0); Add(t3, t4); Tanh(t5)"
    run = run_kernel("_FusedElementwise", [[x]], {"expression": expression}, registry=NUMPY)
    want = np.tanh(-np.tanh(-x + -x) + np.maximum(x, 0))
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-12, atol=1e-12)


def test_a_fused_chain_peaks_at_one_tensor_beyond_the_feed() -> None:
    g = kl.Graph(NUMPY)
    with g.as_default():
        x = kl.placeholder(kl.float32, [1 << 20], name="x")
        y = kl.ops.sqrt(kl.ops.square(kl.ops.sigmoid(kl.ops.tanh(kl.ops.neg(x)))))
    xv = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    md = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
        out = sess.run(y, {x: xv}, run_metadata=md)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-np.tanh(-xv))), rtol=1e-5)
    assert md.partition_graphs and any(
        n.op == "_FusedElementwise" for part in md.partition_graphs.values() for n in part.nodes
    )
    peak = max(s.peak_bytes_in_use for s in md.memory.values())
    assert xv.nbytes <= peak < xv.nbytes * 1.1  # the output, plus block-sized temporaries


def test_a_plan_reuses_the_slots_of_values_that_died() -> None:
    """The register allocation both CPU kernels evaluate with: a chain needs one slot, a
    value read twice by one step is freed once, the last step writes the output (-1)."""
    steps, temps = plan_fused_expression("Neg(i0); Tanh(t0); Add(t1, t1); Relu(t2)", 1)
    assert temps == 1
    assert [s.slot for s in steps] == [0, 0, 0, -1]
    assert steps[2].operands == ((False, 0), (False, 0))
    steps, temps = plan_fused_expression("Neg(i0); Exp(i0); Add(t0, t1); Mul(t2, t0)", 1)
    assert temps == 2  # t0 lives until the last step
    assert [s.slot for s in steps] == [0, 1, 1, -1]


@pytest.mark.parametrize("optimizer", [True, False])
def test_a_bias_that_does_not_fit_gets_the_same_words_fused_or_not(optimizer: bool) -> None:
    """BiasAdd as built and the ``_FusedMatMul`` the remapper makes of it say the same."""
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.float32, [None, None], name="a")
        bias = kl.placeholder(kl.float32, [None], name="bias")
        y = kl.ops.bias_add(kl.ops.mat_mul(a, a, name="mm"), bias, name="ba")
    config = kl.SessionConfig(graph_optimizer=optimizer)
    with kl.Session(g, config) as sess, pytest.raises(kl.KernloomError) as e:
        sess.run(y, {a: np.ones((5, 5), np.float32), bias: np.ones(3, np.float32)})
    assert "node 'ba' (op " + ("_FusedMatMul" if optimizer else "BiasAdd") in str(e.value)
    assert "bias has shape (3,); it needs (5,)" in str(e.value)


@pytest.mark.parametrize(
    ("fed", "operand", "runs_compute"),
    [
        ((16,), (16,), False),
        ((4, 16), (16,), False),  # broadcast into a new buffer
        ((4, 1), (1, 16), False),  # the result larger than both inputs
        ((4, 16), (), False),
        ((16, 4), (16, 4), True),  # a fed transposed view: compute keeps its memory order
        ((300, 100), (100,), True),  # more than one block: compute's blocks
    ],
)
def test_a_small_fused_node_runs_its_direct_entry(
    monkeypatch: pytest.MonkeyPatch,
    fed: tuple[int, ...],
    operand: tuple[int, ...],
    runs_compute: bool,
) -> None:
    """The numpy kernel's direct entry (one block's output) gives what compute gives:
    the caller's feed is never written, a new buffer is counted, and what it cannot take
    (another memory order, several blocks) runs compute."""
    computed = spy_on_compute(monkeypatch)
    rng = np.random.default_rng(5)
    xv = rng.standard_normal(fed).astype(np.float32)
    if runs_compute and fed == operand:
        xv = np.ascontiguousarray(xv.T).T  # the same values in Fortran order
    run_tanh_mul_add(NUMPY, xv, rng.standard_normal(operand).astype(np.float32))
    assert ("f" in computed) is runs_compute


def test_a_fused_node_s_shapes_that_do_not_broadcast_are_explained_by_compute() -> None:
    g = kl.Graph(NUMPY)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None], name="x")
        c = kl.constant(np.ones(3, np.float32))
        y = g.add_node("_FusedElementwise", [[x, c]], {"expression": "Add(i0, i1)"}, name="f")
    with (
        kl.Session(g, kl.SessionConfig(graph_optimizer=False)) as sess,
        pytest.raises(kl.KernloomError, match=r"node 'f' \(op _FusedElementwise\).*broadcast"),
    ):
        sess.run(y.outputs[0], {x: np.ones(4, np.float32)})


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "interpreted"])
def test_a_fused_node_of_many_inputs_runs_its_direct_entry_too(
    monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    """A direct entry is offered any number of inputs (API 1.11): a fused node of four
    operands, behind an in-place Neg (which makes the step a compiled line) or not, runs
    without compute and writes into the Neg's buffer, which nothing else holds."""
    from kernloom.runtime.compiled_line import CompiledLine

    if not compiled:
        monkeypatch.setattr(CompiledLine, "compile", classmethod(lambda cls, schedule: None))
    computed = spy_on_compute(monkeypatch)
    rng = np.random.default_rng(8)
    xv = rng.standard_normal((3, 5)).astype(np.float32)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5,), (3, 1), ()))
    g = kl.Graph(NUMPY)
    with g.as_default():
        x = kl.placeholder(kl.float32, [3, 5], name="x")
        h = kl.ops.neg(kl.ops.tanh(x))  # the fused node's first input: a buffer of its own
        operands = [h, kl.constant(a), kl.constant(b), kl.constant(c)]
        expression = "Mul(i0, i1); Add(t0, i2); Maximum(t1, i3)"
        y = g.add_node("_FusedElementwise", [operands], {"expression": expression}, name="f")
    kept = xv.copy()
    with kl.Session(g, kl.SessionConfig(graph_optimizer=False, inter_op_threads=1)) as sess:
        got = sess.run(y.outputs[0], {x: xv})
    v = -np.tanh(kept.astype(np.float64))
    np.testing.assert_allclose(got, np.maximum(v * a + b, c), rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(xv, kept)
    assert computed == []
