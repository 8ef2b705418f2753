"""The segment reductions: wrappers with TensorFlow's names and arguments, graph-building
errors naming the node, run-time errors with TensorFlow's CPU messages on every backend,
and random inputs against a Python loop (TensorFlow's CPU fold, written out).

The case table (``kernloom.testing.cases.segment``) checks the values per dtype; here are
the rules that differ between the CPU and the GPU kernels (ids >= num_segments).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_op
from kernloom.testing.cases.segment import segment_reference, unsorted_segment_reference

WRAPPERS = {
    "UnsortedSegmentSum": ("unsorted_segment_sum", ["data", "segment_ids", "num_segments"]),
    "UnsortedSegmentMax": ("unsorted_segment_max", ["data", "segment_ids", "num_segments"]),
    "UnsortedSegmentMin": ("unsorted_segment_min", ["data", "segment_ids", "num_segments"]),
    "UnsortedSegmentProd": ("unsorted_segment_prod", ["data", "segment_ids", "num_segments"]),
    "SegmentSum": ("segment_sum", ["data", "segment_ids"]),
    "SegmentMean": ("segment_mean", ["data", "segment_ids"]),
    "SegmentMax": ("segment_max", ["data", "segment_ids"]),
    "SegmentMin": ("segment_min", ["data", "segment_ids"]),
    "SegmentProd": ("segment_prod", ["data", "segment_ids"]),
}
BACKENDS = {
    "numpy": klp.default_registry,
    "torch": torch_registry,
    "cupy": stand_in_registry,
}


@pytest.mark.parametrize("op", sorted(WRAPPERS))
def test_wrappers_have_tf_names_and_arguments(op: str) -> None:
    name, arguments = WRAPPERS[op]
    assert klp.default_registry().op_def(op).name == op
    assert list(inspect.signature(getattr(kl.ops, name)).parameters)[: len(arguments)] == arguments


def test_op_def_type_lists_are_tensorflows() -> None:
    registry = klp.default_registry()
    names = {op: registry.op_def(op) for op in WRAPPERS}

    def allowed(op: str, attr: str) -> set[str]:
        return {t.name for t in names[op].attr(attr).allowed_values}

    assert allowed("UnsortedSegmentSum", "Tindices") == {"int16", "int32", "int64"}
    assert allowed("UnsortedSegmentMax", "Tindices") == {"int32", "int64"}
    assert "complex64" in allowed("SegmentMean", "T")
    assert "complex64" not in allowed("SegmentMax", "T")
    assert "bool" not in allowed("UnsortedSegmentSum", "T")
    assert names["UnsortedSegmentProd"].attr("Tnumsegments").default == kl.int32


def test_static_shapes() -> None:
    g = kl.Graph()
    with g.as_default():
        data = kl.placeholder(kl.float32, [4, 3, 2])
        ids = kl.placeholder(kl.int32, [4, 3])
        assert kl.ops.unsorted_segment_sum(data, ids, np.int32(7)).shape.dims == (7, 2)
        unknown = kl.placeholder(kl.int64, [])
        assert kl.ops.unsorted_segment_max(data, ids, unknown).shape.dims == (None, 2)
        rows = kl.placeholder(kl.int32, [4])
        assert kl.ops.segment_mean(data, rows).shape.dims == (None, 3, 2)
        constant = kl.ops.segment_sum(data, np.array([0, 0, 2, 2], np.int32))
        assert constant.shape.dims == (3, 3, 2)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda d: kl.ops.unsorted_segment_sum(d, np.zeros(3, np.int32), 2, name="n"),
            r"data.shape = \[4,3\] does not start with segment_ids.shape = \[3\]",
        ),
        (
            lambda d: kl.ops.unsorted_segment_min(d, np.zeros((4, 3, 1), np.int32), 2, name="n"),
            "does not start with",
        ),
        (
            lambda d: kl.ops.unsorted_segment_max(d, np.zeros(4, np.int32), -1, name="n"),
            "num_segments == -1 must not be negative",
        ),
        (
            lambda d: kl.ops.unsorted_segment_prod(
                d, np.zeros(4, np.int32), np.array([2]), name="n"
            ),
            "num_segments should be a scalar",
        ),
        (
            lambda d: kl.ops.segment_sum(d, np.zeros((4, 1), np.int32), name="n"),
            "segment_ids should be a vector",
        ),
        (
            lambda d: kl.ops.segment_sum(np.float32(1), np.zeros(1, np.int32), name="n"),
            "input must be at least rank 1",
        ),
        (
            lambda d: kl.ops.segment_max(d, np.array([0, 2, 1, 3], np.int32), name="n"),
            "segment ids are not increasing",
        ),
        (
            lambda d: kl.ops.segment_sum(d, np.zeros(2, np.int32), name="n"),
            "same size as dimension 0",
        ),
        (
            lambda d: kl.ops.segment_max(kl.ops.cast(d, DstT=kl.complex64), [0, 0, 0, 0], name="n"),
            "complex64",
        ),
        (
            lambda d: kl.ops.unsorted_segment_sum(d, np.zeros(4, np.int8), 1, name="n"),
            "int8",
        ),
    ],
)
def test_bad_graphs_fail_when_built_naming_the_node(build: Any, message: str) -> None:
    with kl.Graph().as_default():
        data = kl.placeholder(kl.float32, [4, 3])
        with pytest.raises((kl.InvalidArgumentError, TypeError, ValueError), match=message) as info:
            build(data)
    assert "'n'" in str(info.value)


RUNTIME_ERRORS: list[tuple[str, list[Any], str, tuple[str, ...]]] = [
    # (op, inputs, message, the backends that give it)
    (
        "UnsortedSegmentSum",
        [np.ones((2, 2), np.float32), np.array([[0, 3], [1, -1]]), np.int32(2)],
        r"segment_ids\[0,1\] = 3 is out of range \[0, 2\)",
        ("numpy",),
    ),
    (
        "UnsortedSegmentMax",
        [np.ones(3, np.int32), np.array([0, 1, 1]), np.int64(0)],
        r"segment_ids\[0\] = 0 is out of range \[0, 0\)",
        ("numpy",),
    ),
    (
        "UnsortedSegmentProd",
        [np.ones(3), np.zeros(3, np.int32), np.int32(-2)],
        "num_segments == -2 must not be negative",
        ("numpy", "torch", "cupy"),
    ),
    (
        "SegmentSum",
        [np.ones(4), np.array([0, 2, 1, 3], np.int32)],
        "segment ids are not increasing",
        ("numpy", "torch", "cupy"),
    ),
    (
        "SegmentMean",
        [np.ones(3), np.array([-2, -1, 0], np.int64)],
        r"Segment id -2 out of range \[0, 1\), possibly because 'segment_ids' input is not "
        "sorted",
        ("numpy", "torch", "cupy"),
    ),
    (
        "SegmentMin",
        [np.ones(3), np.array([0, 0, -1], np.int32)],
        "segment ids must be >= 0",
        ("numpy", "torch", "cupy"),
    ),
    (
        "SegmentProd",
        [np.ones(3), np.array([0, 1], np.int32)],
        "segment_ids should be the same size as dimension 0 of input",
        ("numpy", "torch", "cupy"),
    ),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(
    ("op", "inputs", "message", "backends"), RUNTIME_ERRORS, ids=[e[2][:30] for e in RUNTIME_ERRORS]
)
def test_bad_values_fail_at_run_time_naming_the_node(
    backend: str, op: str, inputs: list[Any], message: str, backends: tuple[str, ...]
) -> None:
    if backend not in backends:
        pytest.skip("the GPU kernels drop ids past num_segments, as TensorFlow's GPU kernels")
    registry = BACKENDS[backend]()
    graph = kl.Graph(registry)
    feeds: dict[kl.Tensor, Any] = {}
    with graph.as_default():  # placeholders of unknown shape: nothing is known when built
        for value in inputs:
            feeds[kl.placeholder(kl.as_dtype(np.asarray(value).dtype), None)] = value
        out = getattr(kl.ops, WRAPPERS[op][0])(*feeds, name="op")
    with (
        kl.Session(graph, registry=registry) as session,
        pytest.raises(kl.KernelError, match=message) as info,
    ):
        session.run(out, feeds)
    assert f"node 'op' (op {op})" in str(info.value)


@pytest.mark.parametrize("op", ["UnsortedSegmentProd", "SegmentProd"])
def test_a_complex_product_runs_on_the_cpu_beside_the_torch_gpu(op: str) -> None:
    """CUDA's scatter_reduce has no complex product, nor has TensorFlow's GPU: the torch
    GPU registers none, so the node goes to the CPU (found by the kit on an H100)."""
    registry = torch_registry()
    gpu = [
        r.kernel_def
        for r in registry.kernels.kernels()
        if r.kernel_def.op == op and r.kernel_def.device_type == "GPU"
    ]
    dtypes = {t.name for kernel_def in gpu for t in kernel_def.constraints["T"]}
    assert dtypes and not {"complex64", "complex128"} & dtypes
    assert "float32" in dtypes
    data = np.array([1 + 2j, 3 - 1j, 2j], np.complex64)
    ids = np.array([0, 0, 1], np.int32)
    inputs = [data, ids, np.int32(2)] if op.startswith("Unsorted") else [data, ids]
    (out,), metadata = run_op(registry, op, inputs)  # GPU first in placement order
    np.testing.assert_allclose(out, [(1 + 2j) * (3 - 1j), 2j], rtol=1e-6)
    (node,) = [n for n in metadata.step_stats.nodes if "segment" in n.kernel]
    assert node.device.endswith("CPU:0"), node.device


@pytest.mark.parametrize("backend", ["torch", "cupy"])
def test_the_gpu_kernels_drop_ids_past_num_segments(backend: str) -> None:
    data = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    ids = np.array([0, 5, 1, 0], np.int32)
    (out,), _ = run_op(BACKENDS[backend](), "UnsortedSegmentSum", [data, ids, np.int32(2)])
    np.testing.assert_array_equal(out, np.array([9.0, 4.0], np.float32))


_FLOATS = st.sampled_from([np.float32, np.float64])
_VALUES = st.one_of(
    st.floats(-4, 4, width=32, allow_subnormal=False),  # the CPU flushes them, as TF's does
    st.just(float("nan")),
    st.just(float("inf")),
)


@settings(max_examples=40, deadline=None)
@given(
    ids=st.lists(st.integers(-2, 4), min_size=0, max_size=9),
    data=st.data(),
    dtype=_FLOATS,
    kind=st.sampled_from(["Sum", "Max", "Min", "Prod"]),
)
def test_unsorted_matches_the_loop(ids: list[int], data: Any, dtype: Any, kind: str) -> None:
    values = np.array(data.draw(st.lists(_VALUES, min_size=len(ids), max_size=len(ids))), dtype)
    inputs = [values.reshape(len(ids), 1), np.array(ids, np.int64), np.int32(5)]
    expected = unsorted_segment_reference(kind)(*inputs)
    for backend in sorted(BACKENDS):
        (out,), _ = run_op(BACKENDS[backend](), f"UnsortedSegment{kind}", inputs)
        np.testing.assert_allclose(out, expected, rtol=1e-6, err_msg=backend)


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(0, 3), min_size=1, max_size=5),
    data=st.data(),
    kind=st.sampled_from(["Sum", "Mean", "Max", "Min", "Prod"]),
)
def test_sorted_matches_the_loop(counts: list[int], data: Any, kind: str) -> None:
    ids = np.repeat(np.arange(len(counts)), counts).astype(np.int32)
    values = np.array(data.draw(st.lists(_VALUES, min_size=ids.size, max_size=ids.size)))
    inputs = [values.reshape(ids.size, 1), ids]
    expected = segment_reference(kind)(*inputs)
    for backend in sorted(BACKENDS):
        (out,), _ = run_op(BACKENDS[backend](), f"Segment{kind}", inputs)
        np.testing.assert_allclose(out, expected, rtol=1e-12, err_msg=backend)
