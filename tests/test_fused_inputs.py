"""``FusedInputs``: a fused kernel's plan is made again exactly when an input changes shape
or a kept input is replaced, and the output is only ever taken from an input that changes
between runs; through a session, a fused node gives numpy's values when the fed shapes
change from run to run (numpy-only and torch CPU kernels)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.plugin import FusedInputs


class _Planner:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], ...]] = []

    def __call__(self, shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], str]:
        self.calls.append(shapes)
        return tuple(np.broadcast_shapes(*shapes)), f"plan {len(self.calls)}"


def test_the_plan_is_kept_while_the_same_constants_and_shapes_come_back() -> None:
    constants = [np.ones(4, np.float32), np.ones((3, 1), np.float32)]
    kept: FusedInputs[str] = FusedInputs()
    make = _Planner()
    first = kept.plan([np.zeros(4, np.float32), *constants], make)
    assert first == ((3, 4), "plan 1", [])  # no input has the output's shape
    # A new fed value each run: planned once more (it is learnt to change), then kept.
    assert kept.plan([np.zeros(4, np.float32), *constants], make)[:2] == ((3, 4), "plan 2")
    for _ in range(3):
        assert kept.plan([np.zeros(4, np.float32), *constants], make)[:2] == ((3, 4), "plan 2")
    assert len(make.calls) == 2
    # The changing input's shape changes: planned again, with the new shapes.
    shape, plan, _ = kept.plan([np.zeros((3, 4), np.float32), *constants], make)
    assert (shape, plan) == ((3, 4), "plan 3")
    assert make.calls[-1] == ((3, 4), (4,), (3, 1))
    # A kept input replaced by another object (of another shape): planned again.
    other = np.ones((2, 3, 1), np.float32)
    shape, plan, _ = kept.plan([np.zeros((3, 4), np.float32), constants[0], other], make)
    assert (shape, plan) == ((2, 3, 4), "plan 4")


def test_only_a_changing_input_may_become_the_output() -> None:
    constant = np.ones(5, np.float32)
    kept: FusedInputs[None] = FusedInputs()

    def make(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], None]:
        return tuple(np.broadcast_shapes(*shapes)), None

    # First run: nothing is known to change, so every input of the output's shape counts.
    assert kept.plan([np.zeros(5, np.float32), constant], make)[2] == [0, 1]
    # From the second run the constant is known to stay: only the fed input remains.
    assert kept.plan([np.zeros(5, np.float32), constant], make)[2] == [0]
    assert kept.plan([np.zeros(5, np.float32), constant], make)[2] == [0]
    # Where no changing input has the output's shape, the kept ones still give the layout.
    assert kept.plan([np.zeros(1, np.float32), constant], make)[2] == [1]


def test_a_shape_that_does_not_broadcast_raises_and_keeps_nothing() -> None:
    kept: FusedInputs[None] = FusedInputs()

    def make(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], None]:
        return tuple(np.broadcast_shapes(*shapes)), None

    constant = np.ones(3, np.float32)
    assert kept.plan([np.zeros(3, np.float32), constant], make)[0] == (3,)
    with pytest.raises(ValueError, match="broadcast"):
        kept.plan([np.zeros(4, np.float32), constant], make)
    assert kept.plan([np.zeros((2, 3), np.float32), constant], make)[0] == (2, 3)


def _numpy_only() -> klp.Registry:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    return registry


@pytest.mark.parametrize("registry", [_numpy_only, torch_registry], ids=["numpy", "torch"])
def test_a_fused_node_follows_the_fed_shapes_from_run_to_run(registry: Any) -> None:
    rng = np.random.default_rng(7)
    constants = [rng.standard_normal(6).astype(np.float32) for _ in range(40)]
    g = kl.Graph(registry())
    with g.as_default():
        x = kl.placeholder(kl.float32, None, name="x")
        y = x
        for i, c in enumerate(constants):
            y = (kl.ops.add, kl.ops.mul, kl.ops.sub)[i % 3](y, kl.constant(c))
    metadata = kl.RunMetadata()
    with kl.Session(g) as session:
        for shape in [(6,), (6,), (6,), (2, 6), (6,), (1,), (3, 1, 6), (3, 1, 6), (6,)]:
            xv = rng.standard_normal(shape).astype(np.float32)
            fed = xv.copy()
            expected = xv
            for i, c in enumerate(constants):
                expected = (np.add, np.multiply, np.subtract)[i % 3](expected, c)
            got = session.run(y, {x: xv}, kl.RunOptions(trace=True), metadata)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(xv, fed)  # the fed value is never written
    assert any("FusedElementwise" in n.op for n in metadata.step_stats.nodes)
