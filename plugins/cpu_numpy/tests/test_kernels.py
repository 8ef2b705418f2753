"""Every standard op's CPU kernel against numpy, and shape inference against the kernels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernloom as kl
import kernloom.plugin as klp
from kernloom.framework.node_def import NodeDef
from kernloom.framework.shape_inference import InferenceContext, infer_shapes
from kernloom.op_library import standard_ops
from kernloom.op_library.control_flow_ops import CONTROL_FLOW_OPS
from kernloom.op_library.resource_variable_ops import VARIABLE_OPS
from kernloom.testing import KernelRun
from kernloom.testing import run_kernel as run_any_kernel
from kernloom.testing.cases import Case, assert_matches, cases
from kernloom.testing.cases.standard import reference_softmax
from kernloom_cpu_numpy import plugin as cpu_plugin

CASES = list(cases())


def numpy_only() -> klp.Registry:
    """This plugin alone: the kernels tested here are numpy's, even where an installed kernel
    library (torch) registers faster unlabelled CPU kernels that would win by priority."""
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    return registry


REGISTRY = numpy_only()


def run_kernel(*args: Any, **kwargs: Any) -> KernelRun:
    return run_any_kernel(*args, registry=REGISTRY, **kwargs)


def test_every_standard_op_is_covered() -> None:
    covered = {c.op for c in CASES}
    public = {name for name in standard_ops().names() if not name.startswith("_")}
    # Placeholder and NoOp are tested below; control flow and variables only mean something
    # inside a step (frames, deadness, the session's ResourceMgr): tests/test_control_flow.py
    # and tests/test_variables.py run them through the session against Python references.
    # Assert has no outputs to compare: tests/test_type_list_ops.py runs it in sessions.
    assert public - covered == {"Placeholder", "NoOp", "Assert"} | CONTROL_FLOW_OPS | VARIABLE_OPS


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kernel_matches_numpy(case: Case) -> None:
    run = run_kernel(case.op, case.inputs, case.attrs, label=case.label)
    assert_matches(run.outputs, case.expected())


def _direct_of(case: Case) -> Any:
    """The case's kernel's direct entry, where the executors would call it."""
    if any(isinstance(item, list) for item in case.inputs) or len(case.inputs) not in (1, 2):
        return None
    run = run_kernel(case.op, case.inputs, case.attrs, label=case.label)
    if len(run.outputs) != 1 or run.kernel.signature.host_memory_inputs:
        return None
    return run.kernel.direct


DIRECT_CASES = [c for c in CASES if _direct_of(c) is not None]


@pytest.mark.parametrize("reuse", ["held", "handed-over"])
@pytest.mark.parametrize("case", DIRECT_CASES, ids=[c.id for c in DIRECT_CASES])
def test_direct_entries_match_numpy_or_decline(case: Case, reuse: str) -> None:
    direct = _direct_of(case)
    expected = case.expected()
    inputs = [np.array(v, copy=True) for v in case.inputs]  # owned and writeable
    before = [v.copy() for v in inputs]
    mask = 0 if reuse == "held" else (1 << len(inputs)) - 1
    with CPU.compute_scope():  # as the executors call it
        result = direct(mask, *inputs)
    if case.op == "MatMul" or (reuse == "handed-over" and len({v.shape for v in inputs}) == 1):
        # A product always runs directly; an elementwise op runs in place when it may.
        assert result is not NotImplemented
    if result is NotImplemented:
        return
    assert_matches([np.asarray(result)], expected)
    if mask == 0:  # nothing was handed over: nothing may be written
        for value, original in zip(inputs, before, strict=True):
            np.testing.assert_array_equal(value, original)


def test_the_product_entry_declines_what_compute_must_explain() -> None:
    run = run_kernel("MatMul", [np.ones((3, 2)), np.ones((3, 2))], {"transpose_a": True})
    np.testing.assert_array_equal(run.outputs[0], np.full((2, 2), 3.0))
    direct = run.kernel.direct
    assert direct is not None
    np.testing.assert_array_equal(direct(0, np.ones((3, 2)), np.ones((3, 2))), run.outputs[0])
    assert direct(0, np.zeros((2, 3)), np.zeros((3, 2))) is NotImplemented  # 3x2 @ 3x2
    assert direct(0, np.zeros(3), np.zeros((3, 2))) is NotImplemented  # not a matrix


CPU = REGISTRY.create_devices().lookup("CPU:0")


def inferred(case: Case, registry: klp.Registry, *, with_values: bool) -> list[kl.TensorShape]:
    op_def = registry.op_def(case.op)
    flat = [
        np.asarray(v) for item in case.inputs for v in (item if isinstance(item, list) else [item])
    ]
    dtypes = [
        [kl.as_dtype(np.asarray(v).dtype) for v in item]
        if isinstance(item, list)
        else kl.as_dtype(np.asarray(item).dtype)
        for item in case.inputs
    ]
    attrs = op_def.infer_attrs(dtypes, case.attrs, "node")
    node = NodeDef(name="node", op=case.op, attrs=attrs)
    host = registry.create_kernel(node, CPU).signature.host_memory_inputs
    values = [a if with_values and i in host else None for i, a in enumerate(flat)]
    ctx = InferenceContext(
        op_def,
        "node",
        attrs,
        [kl.TensorShape(a.shape) for a in flat],
        [kl.as_dtype(a.dtype) for a in flat],
        values,
    )
    return infer_shapes(ctx)


DATA_DEPENDENT_SHAPES = {
    "Where",
    "Unique",
    "PlaceholderWithDefault",
    "NonMaxSuppressionV3",
    *(f"Segment{kind}" for kind in ("Sum", "Mean", "Max", "Min", "Prod")),
}
"""Ops whose output shape depends on the values of an input that is not in host memory
(PlaceholderWithDefault: its declared shape, by design less precise than its default's;
the sorted segment reductions: their rows are the last segment id + 1; NonMaxSuppressionV3:
its selection, known only once every score and overlap is)."""


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_shape_inference_agrees_with_the_kernel(case: Case) -> None:
    registry = REGISTRY
    actual = [
        o.shape for o in run_kernel(case.op, case.inputs, case.attrs, label=case.label).outputs
    ]
    known = inferred(case, registry, with_values=True)
    if case.op in DATA_DEPENDENT_SHAPES:  # known only when it runs, whatever is constant
        assert all(s.is_compatible_with(list(a)) for s, a in zip(known, actual, strict=True))
        return
    assert [s.as_tuple() for s in known] == actual  # constants known: fully defined and exact
    unknown = inferred(case, registry, with_values=False)
    assert all(s.is_compatible_with(list(a)) for s, a in zip(unknown, actual, strict=True))


def test_placeholder_kernel_says_it_must_be_fed() -> None:
    with pytest.raises(
        kl.KernelError, match=r"node 'x' \(op Placeholder\): placeholder must be fed"
    ):
        run_kernel("Placeholder", [], {"dtype": kl.float32, "shape": [2, None]}, name="x")


def test_no_op_has_no_outputs() -> None:
    assert run_kernel("NoOp", []).outputs == []


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    op=st.sampled_from(["Add", "Mul", "Maximum", "Sub"]),
    dtype=st.sampled_from([np.float64, np.int32]),
)
def test_broadcasting_binary_ops_match_numpy(data: st.DataObject, op: str, dtype: type) -> None:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    # No magnitudes near the subnormal range: the CPU device flushes subnormal inputs and
    # results to zero, as TensorFlow's kernels do, where numpy's reference keeps them.
    floats = st.floats(-1e3, 1e3).filter(lambda v: v == 0 or abs(v) >= 1e-30)
    elements = st.integers(-100, 100) if dtype is np.int32 else floats
    x = data.draw(hnp.arrays(dtype, shapes.input_shapes[0], elements=elements))
    y = data.draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=elements))
    fn = {"Add": np.add, "Mul": np.multiply, "Maximum": np.maximum, "Sub": np.subtract}[op]
    (out,) = run_kernel(op, [x, y], forwardable=[0, 1]).outputs
    np.testing.assert_array_equal(out, fn(x, y))


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "message"),
    [
        (
            "Reshape",
            [np.zeros(6), np.array([4, -1], np.int32)],
            {},
            "cannot reshape 6 elements into",
        ),
        ("Reshape", [np.zeros(6), np.array([-1, -1], np.int32)], {}, "at most one -1"),
        (
            "Sum",
            [np.zeros((2, 3)), np.array([2], np.int32)],
            {},
            "reduction index 2 is out of range",
        ),
        ("MatMul", [np.zeros((2, 3)), np.zeros((2, 3))], {}, "inner dimensions differ"),
        (
            "ConcatV2",
            [[np.zeros((2, 3)), np.zeros((3, 3))], np.int32(1)],
            {},
            "incompatible with values",
        ),
        ("Transpose", [np.zeros((2, 3)), np.array([0, 0], np.int32)], {}, "is not a permutation"),
        ("ArgMax", [np.zeros((0, 3)), np.int32(0)], {}, "has size 0"),
        ("Pow", [np.array([2], np.int32), np.array([-1], np.int32)], {}, "negative integer powers"),
        ("Add", [np.zeros((2, 3)), np.zeros((4,))], {}, "cannot be broadcast together"),
    ],
)
def test_bad_inputs_fail_naming_the_node(
    op: str, inputs: list[Any], attrs: dict[str, Any], message: str
) -> None:
    with pytest.raises(kl.KernelError, match=message) as info:
        run_kernel(op, inputs, attrs, name="the_node")
    assert f"node 'the_node' (op {op})" in str(info.value)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from([(300, 1), (256, 10), (64, 16), (65, 4), (4, 5, 3), (0, 3), (3, 0)]),
    op=st.sampled_from(["Softmax", "LogSoftmax"]),
    data=st.data(),
)
def test_softmax_over_narrow_and_wide_last_axes_matches_float64(
    shape: tuple[int, ...], op: str, data: st.DataObject
) -> None:
    """Softmax and LogSoftmax where the kernel reduces column by column (rows outnumber
    16 per column) and where it reduces row by row: float64 numpy's values, NaN rows NaN,
    -inf logits 0 probability."""
    elements = st.floats(-80, 80, width=32) | st.sampled_from([np.nan, -np.inf])
    x = data.draw(hnp.arrays(np.float32, shape, elements=elements))
    (y,) = run_kernel(op, [x]).outputs
    expected = reference_softmax(x, log=op == "LogSoftmax")
    np.testing.assert_allclose(y, expected, rtol=2e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from([(1, 5, 5, 64), (2, 3, 4, 7), (1, 2, 2, 1), (3, 1, 1, 30), (0, 2, 2, 3)]),
    radius=st.sampled_from([0, 1, 2, 5, 8, 9, 40]),
    beta=st.sampled_from([0.5, 0.75, 1.0, 0.3]),
    bias=st.sampled_from([1.0, 2.0, 1e-3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_lrn_over_short_and_wide_windows_matches_float64(
    shape: tuple[int, ...], radius: int, beta: float, bias: float, seed: int
) -> None:
    """LRN sums a window by sliding adds (radius up to ``SLIDING_SUM_RADIUS``, channels
    fewer than the window included) and by its prefix sum beyond; both, and every
    exponent (the three TensorFlow special-cases and ``pow``), against float64 numpy."""
    from kernloom.testing.cases.nn import lrn_reference

    x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)
    attrs = {"depth_radius": radius, "bias": bias, "alpha": 0.4, "beta": beta}
    (y,) = run_kernel("LRN", [x], attrs).outputs
    np.testing.assert_allclose(y, lrn_reference(attrs)(x), rtol=2e-5, atol=1e-6)
