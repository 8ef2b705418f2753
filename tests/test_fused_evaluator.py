"""``compile_fused_steps``: a planned ``_FusedElementwise`` expression as one generated
function gives what the steps give one by one (numpy computed directly), with ``out`` by
position or by keyword, and refuses a plan that reads what it does not have."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kernloom as kl
from kernloom.plugin import (
    NUMPY_ELEMENTWISE,
    OUT_BY_POSITION,
    compile_fused_steps,
    plan_fused_expression,
)

RNG = np.random.default_rng(3)


@pytest.mark.parametrize(
    ("expression", "count", "want"),
    [
        ("Add(i0,i1)", 2, lambda a, b: a + b),
        ("Mul(i0,i1);Sub(t0,i0);Relu(t1)", 2, lambda a, b: np.maximum(a * b - a, 0)),
        (
            "Minimum(i0,i1);Tanh(i2);Maximum(t0,t1)",
            3,
            lambda a, b, c: np.maximum(np.minimum(a, b), np.tanh(c)),
        ),
        ("Sigmoid(i0)", 1, lambda a: 1 / (1 + np.exp(-a))),
        ("Add(i0,i0);Square(t0);Mul(t0,t1)", 1, lambda a: (a + a) * (a + a) ** 2),
    ],
)
@pytest.mark.parametrize("by_position", [True, False])
def test_the_function_computes_the_expression(
    expression: str, count: int, want: object, by_position: bool
) -> None:
    steps, temps = plan_fused_expression(expression, count)
    evaluate = compile_fused_steps(
        [(NUMPY_ELEMENTWISE[op], refs, slot) for op, refs, slot in steps],
        count,
        temps,
        out_by_position=OUT_BY_POSITION if by_position else frozenset(),
    )
    inputs = [RNG.standard_normal(12).astype(np.float32) for _ in range(count)]
    out = np.empty(12, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy 2.4 deprecates maximum(a, b, out)
        evaluate(inputs, out, [np.empty(12, np.float32) for _ in range(temps)])
    np.testing.assert_allclose(out, want(*inputs), rtol=1e-6)  # type: ignore[operator]


def test_a_chain_of_a_thousand_steps_of_a_thousand_inputs() -> None:
    """The optimizer's fused node of a long Add/Mul/Maximum chain on constants, against
    numpy's loop of the same ufuncs."""
    ufuncs = [np.add, np.multiply, np.maximum]
    constants = [RNG.uniform(0.5, 1.5, 16).astype(np.float32) for _ in range(999)]
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        y = x
        for i, c in enumerate(constants):
            y = [kl.ops.add, kl.ops.mul, kl.ops.maximum][i % 3](y, kl.constant(c))
    xv = RNG.uniform(0, 1, 16).astype(np.float32)
    want = xv
    for i, c in enumerate(constants):
        want = ufuncs[i % 3](want, c)
    with kl.Session(g) as session:
        metadata = kl.RunMetadata()
        got = session.run(y, {x: xv}, kl.RunOptions(trace=True), metadata)
        again = session.run(y, {x: xv})
    assert metadata.step_stats is not None
    assert "_FusedElementwise" in {n.op for n in metadata.step_stats.nodes}
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(again, got)


def test_a_plan_that_reads_what_it_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        compile_fused_steps([], 1, 0)
    with pytest.raises(ValueError, match="step reads input 2; the plan has 2"):
        compile_fused_steps([(np.add, ((True, 0), (True, 2)), -1)], 2, 0)
    with pytest.raises(ValueError, match="step reads temporary 0; the plan has 0"):
        compile_fused_steps([(np.add, ((True, 0), (False, 0)), -1)], 1, 0)
