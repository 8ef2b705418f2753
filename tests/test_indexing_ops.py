"""The shape and indexing ops (issue 18): build-time errors naming the node, run-time
errors naming the node and the bad index, shape inference with partial knowledge, the
GPU kernels' out-of-range semantics, views that the executor never overwrites, and
StridedSlice against numpy's own indexing of random keys."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.cli import main
from kernloom.plugin import OpKernelContext
from kernloom.testing import FakeDeviceFactory, run_kernel, run_op
from kernloom.testing.cases.indexing import gather_reference, strided_slice_args
from kernloom_cpu_numpy import plugin as cpu_plugin
from kernloom_gpu_cupy.kernels import BACKEND as CUPY_BACKEND
from kernloom_gpu_cupy.kernels import build_library as cupy_library
from kernloom_gpu_torch.testing import cpu_bound_gpu_plugin

I32 = np.int32
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = klp.default_registry().create_devices().lookup("CPU:0")


@pytest.fixture
def g() -> Any:
    graph = kl.Graph(make_registry())
    with graph.as_default():
        yield graph


def c(value: Any, dtype: Any = I32) -> kl.Tensor:
    return kl.constant(np.asarray(value, dtype))


X23 = np.arange(6, dtype=np.float32).reshape(2, 3)

BUILD_ERRORS: list[tuple[str, str, Callable[[], Any], str]] = [
    ("Pad", "rows", lambda: kl.ops.pad(c(X23, np.float32), c([[1, 2]]), name="bad"), "1 rows"),
    (
        "Pad",
        "negative",
        lambda: kl.ops.pad(c(X23, np.float32), c([[1, 2], [0, -1]]), name="bad"),
        "Paddings must be non-negative",
    ),
    (
        "MirrorPad",
        "too-wide",
        lambda: kl.ops.mirror_pad(
            c(X23, np.float32), c([[0, 0], [3, 0]]), mode="REFLECT", name="bad"
        ),
        "no greater than the dimension size minus 1 in REFLECT mode",
    ),
    (
        "PadV2",
        "constant",
        lambda: kl.ops.pad_v2(
            c(X23, np.float32), c([[0, 0], [1, 0]]), c([1, 2], np.float32), name="bad"
        ),
        "constant_values must be a scalar",
    ),
    (
        "GatherV2",
        "axis",
        lambda: kl.ops.gather_v2(c(X23, np.float32), c([0]), c(2), name="bad"),
        "axis 2 is out of range",
    ),
    (
        "GatherV2",
        "batch-dims",
        lambda: kl.ops.gather_v2(c(X23, np.float32), c([[0], [1]]), c(0), batch_dims=1, name="bad"),
        "batch_dims (1) must be less than or equal to axis (0)",
    ),
    (
        "GatherNd",
        "depth",
        lambda: kl.ops.gather_nd(c(X23, np.float32), c([[0, 1, 0]]), name="bad"),
        "indices.shape[-1] must be <= params.rank",
    ),
    (
        "ScatterNd",
        "updates",
        lambda: kl.ops.scatter_nd(
            c([[0], [1]]), c([1.0, 2.0, 3.0], np.float32), c([4]), name="bad"
        ),
        "updates has shape [3], but must have shape [2]",
    ),
    (
        "Slice",
        "begin",
        lambda: kl.ops.slice(c(X23, np.float32), c([3, 0]), c([-1, -1]), name="bad"),
        "Expected begin[0] in [0, 2], but got 3",
    ),
    (
        "Slice",
        "size",
        lambda: kl.ops.slice(c(X23, np.float32), c([0, 1]), c([1, 3]), name="bad"),
        "Expected size[1] in [0, 2], but got 3",
    ),
    (
        "StridedSlice",
        "stride",
        lambda: kl.ops.strided_slice(c(X23, np.float32), c([0]), c([1]), c([0]), name="bad"),
        "strides[0] must be non-zero",
    ),
    (
        "StridedSlice",
        "ellipses",
        lambda: kl.ops.strided_slice(
            c(X23, np.float32), c([0, 0]), c([0, 0]), c([1, 1]), ellipsis_mask=3, name="bad"
        ),
        "Multiple ellipses in slice spec not allowed",
    ),
    (
        "StridedSlice",
        "shrink",
        lambda: kl.ops.strided_slice(
            c(X23, np.float32), c([5]), c([6]), c([1]), shrink_axis_mask=1, name="bad"
        ),
        "slice index 5 of dimension 0 out of bounds.",
    ),
    (
        "StridedSlice",
        "rank",
        lambda: kl.ops.strided_slice(
            c(X23, np.float32), c([0, 0, 0]), c([1, 1, 1]), c([1, 1, 1]), name="bad"
        ),
        "Index out of range using input dim 2; input has only 2 dims",
    ),
    (
        "Split",
        "uneven",
        lambda: kl.ops.split(c(1), c(X23, np.float32), num_split=2, name="bad"),
        "should evenly divide the split dimension",
    ),
    (
        "SplitV",
        "two-unknown",
        lambda: kl.ops.split_v(c(X23, np.float32), c([-1, -1]), c(1), num_split=2, name="bad"),
        "size_splits can only have one -1",
    ),
    (
        "SplitV",
        "sum",
        lambda: kl.ops.split_v(c(X23, np.float32), c([1, 1]), c(1), num_split=2, name="bad"),
        "can't split axis of size 3 into pieces of size [1, 1]",
    ),
    (
        "Squeeze",
        "not-one",
        lambda: kl.ops.squeeze(c(X23, np.float32), squeeze_dims=[1], name="bad"),
        "Can not squeeze dim[1], expected a dimension of 1, got 3",
    ),
    (
        "Squeeze",
        "range",
        lambda: kl.ops.squeeze(c(X23, np.float32), squeeze_dims=[5], name="bad"),
        "squeeze_dims[0] = 5 not in [-2, 2)",
    ),
    (
        "ExpandDims",
        "dim",
        lambda: kl.ops.expand_dims(c(X23, np.float32), c(4), name="bad"),
        "dim 4 not in the interval [-3, 2]",
    ),
    (
        "Pack",
        "shapes",
        lambda: kl.ops.pack([c(X23, np.float32), c([1.0], np.float32)], name="bad"),
        "values[1]",
    ),
    (
        "Pack",
        "axis",
        lambda: kl.ops.pack([c(X23, np.float32)], axis=3, name="bad"),
        "Invalid axis: 3; must be in [-3, 3)",
    ),
    (
        "Unpack",
        "num",
        lambda: kl.ops.unpack(c(X23, np.float32), num=3, name="bad"),
        "Dimension 0 of value has size 2, but num is 3",
    ),
    (
        "Tile",
        "length",
        lambda: kl.ops.tile(c(X23, np.float32), c([2]), name="bad"),
        "Expected multiples argument to be a vector of length 2 but got length 1",
    ),
    (
        "BroadcastTo",
        "shape",
        lambda: kl.ops.broadcast_to(c(X23, np.float32), c([2, 4]), name="bad"),
        "Unable to broadcast tensor of shape [2,3] to tensor of shape [2, 4]",
    ),
    ("Range", "delta", lambda: kl.ops.range(c(0), c(5), c(0), name="bad"), "Requires delta != 0"),
    (
        "Range",
        "direction",
        lambda: kl.ops.range(c(5), c(0), c(1), name="bad"),
        "Requires start <= limit when delta > 0: 5/0",
    ),
    (
        "OneHot",
        "axis",
        lambda: kl.ops.one_hot(
            c([0, 1]), c(3), c(1.0, np.float32), c(0.0, np.float32), axis=-2, name="bad"
        ),
        "axis must be >= -1",
    ),
    (
        "OneHot",
        "depth",
        lambda: kl.ops.one_hot(
            c([0, 1]), c(-1), c(1.0, np.float32), c(0.0, np.float32), name="bad"
        ),
        "depth must be non-negative, got: -1",
    ),
    (
        "SelectV2",
        "broadcast",
        lambda: kl.ops.select_v2(
            c([True, False], np.bool_), c(X23, np.float32), c(X23, np.float32), name="bad"
        ),
        "cannot be broadcast together",
    ),
    (
        "ReverseV2",
        "twice",
        lambda: kl.ops.reverse_v2(c(X23, np.float32), c([1, -1]), name="bad"),
        "axis 1 specified more than once.",
    ),
]


@pytest.mark.parametrize(
    ("op", "build", "message"),
    [(op, build, message) for op, _, build, message in BUILD_ERRORS],
    ids=[f"{op}-{what}" for op, what, _, _ in BUILD_ERRORS],
)
def test_bad_attrs_and_shapes_fail_when_the_node_is_built(
    g: kl.Graph, op: str, build: Callable[[], Any], message: str
) -> None:
    with pytest.raises(kl.InvalidArgumentError) as info:
        build()
    assert f"node 'bad' (op {op})" in str(info.value)
    assert message in str(info.value)


def test_an_unknown_bad_indices_policy_is_rejected_when_built(g: kl.Graph) -> None:
    with pytest.raises(kl.InvalidArgumentError, match="bad_indices_policy") as info:
        kl.ops.gather_nd(c(X23, np.float32), c([[0, 1]]), bad_indices_policy="SKIP", name="bad")
    assert "'bad'" in str(info.value) and "'IGNORE'" in str(info.value)


def test_a_mirror_pad_mode_outside_reflect_and_symmetric_is_rejected(g: kl.Graph) -> None:
    with pytest.raises(kl.InvalidArgumentError, match="'REFLECT', 'SYMMETRIC'") as info:
        kl.ops.mirror_pad(c(X23, np.float32), c([[0, 0], [1, 1]]), mode="EDGE", name="bad")
    assert "bad" in str(info.value)


# -- shapes known only in part --------------------------------------------------------------------


def test_shape_functions_keep_what_is_known(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [None, 4, 5], name="x")
    index = kl.placeholder(kl.int32, [], name="index")
    assert kl.ops.strided_slice(x, c([0, 1]), c([0, 3]), c([1, 1]), begin_mask=1).shape == (
        kl.TensorShape([None, 2, 5])
    )
    assert kl.ops.strided_slice(x, c([1]), c([2]), c([1]), shrink_axis_mask=1).shape == (
        kl.TensorShape([4, 5])
    )
    assert kl.ops.strided_slice(
        x, c([0, 1]), c([0, 0]), c([1, 1]), ellipsis_mask=1, end_mask=2
    ).shape == (kl.TensorShape([None, 4, 4]))
    begin = kl.placeholder(kl.int32, [3], name="begin")
    assert kl.ops.strided_slice(
        x, begin, c([1, 1, 1]), c([1, 1, 1]), begin_mask=4, end_mask=4
    ).shape == (kl.TensorShape([None, None, 5]))
    assert kl.ops.gather_v2(x, kl.placeholder(kl.int64, [7, 2]), index).shape == (
        kl.TensorShape.unknown(4)
    )
    assert kl.ops.gather_v2(x, kl.placeholder(kl.int64, [7, 2]), c(1)).shape == (
        kl.TensorShape([None, 7, 2, 5])
    )
    assert kl.ops.where(x).shape == kl.TensorShape([None, 3])
    assert kl.ops.slice(x, c([0, 1, 2]), c([-1, 2, -1])).shape == kl.TensorShape([None, 2, 3])
    assert kl.ops.squeeze(kl.placeholder(kl.float32, [None, 1, 3]), squeeze_dims=[0]).shape == (
        kl.TensorShape([1, 3])
    )
    assert kl.ops.squeeze(kl.placeholder(kl.float32, [None, 1])).shape == kl.TensorShape(None)
    parts = kl.ops.split_v(x, kl.placeholder(kl.int64, [2]), c(2), num_split=2)
    assert [p.shape for p in parts] == [kl.TensorShape([None, 4, None])] * 2
    assert kl.ops.range(c(0), index, c(2)).shape == kl.TensorShape([None])
    assert kl.ops.one_hot(
        kl.placeholder(kl.int64, [3]), index, c(1.0, np.float32), c(0.0, np.float32)
    ).shape == (kl.TensorShape([3, None]))
    assert kl.ops.size(x).shape == kl.TensorShape([]) and kl.ops.rank(x).dtype == kl.int32
    assert kl.ops.pad(x, c([[1, 1], [0, 0], [2, 0]])).shape == kl.TensorShape([None, 4, 7])
    assert kl.ops.tile(x, c([2, 1, 3])).shape == kl.TensorShape([None, 4, 15])
    assert kl.ops.range(c(1.0, np.float32), c(2.0, np.float32), c(0.25, np.float32)).shape == (
        kl.TensorShape([4])
    )


# -- run-time errors ---------------------------------------------------------------------------


RUN_ERRORS: list[tuple[str, list[Any], dict[str, Any], str]] = [
    (
        "GatherV2",
        [np.ones((5, 2)), np.array([[0, 1], [4, 7]], I32), I32(0)],
        {},
        "indices[1,1] = 7 is not in [0, 5)",
    ),
    ("GatherV2", [np.ones((5, 2)), np.array([-1], I32), I32(0)], {}, "indices[0] = -1 is not in"),
    (
        "GatherNd",
        [np.ones((2, 2)), np.array([[1, 1], [2, 0]], I32)],
        {},
        "indices[1] = [2, 0] does not index into param shape [2, 2]",
    ),
    (
        "ScatterNd",
        [np.array([[1], [5]], I32), np.ones(2), np.array([4], I32)],
        {},
        "indices[1] = [5] does not index into shape [4]",
    ),
    ("Range", [I32(0), I32(3), I32(0)], {}, "Requires delta != 0"),
    ("Range", [np.float32(0), np.float32(np.inf), np.float32(1)], {}, "Requires a finite range"),
    ("Squeeze", [np.ones((2, 3))], {"squeeze_dims": [0]}, "Can not squeeze dim[0]"),
    (
        "Pack",
        [[np.ones(2), np.ones(3)]],
        {},
        "Shapes of all inputs must match: values[0].shape = [2] != values[1].shape = [3]",
    ),
    ("OneHot", [np.array([1]), I32(-2), np.float32(1), np.float32(0)], {}, "depth must be"),
    (
        "Slice",
        [np.ones((2, 3)), np.array([3, 0], I32), np.array([-1, -1], I32)],
        {},
        "Expected begin[0] in [0, 2], but got 3",
    ),
    (
        "StridedSlice",
        [np.ones((2, 3)), np.array([-3], I32), np.array([-2], I32), np.array([1], I32)],
        {"shrink_axis_mask": 1},
        "slice index -1 of dimension 0 out of bounds.",
    ),
    (
        "SplitV",
        [np.ones((2, 3)), np.array([2, 2], np.int64), I32(1)],
        {"num_split": 2},
        "can't split axis of size 3 into pieces of size [2, 2]",
    ),
    ("Split", [I32(2), np.ones((2, 3))], {"num_split": 1}, "split_dim 2 is out of range"),
    ("Tile", [np.ones((2, 3)), np.array([1, -1], I32)], {}, "Expected multiples[1] >= 0"),
    (
        "MirrorPad",
        [np.ones((2, 3)), np.array([[0, 0], [0, 4]], I32)],
        {"mode": "SYMMETRIC"},
        "[0, 4] for dimension 1 of size 3",
    ),
    ("ExpandDims", [np.ones(2), I32(-3)], {}, "dim -3 not in the interval [-2, 1]."),
    ("Unpack", [np.ones((2, 3))], {"num": 3}, "Input shape axis 0 must equal 3, got shape [2, 3]"),
    ("ReverseV2", [np.ones((2, 3)), np.array([2], I32)], {}, "'axis'[0] = 2 is out of valid range"),
    (
        "BroadcastTo",
        [np.ones((2, 3)), np.array([3], I32)],
        {},
        "Rank of input (2) must be no greater than rank of output shape (1)",
    ),
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "message"), RUN_ERRORS)
def test_bad_values_fail_when_the_kernel_runs_naming_the_node(
    op: str, inputs: list[Any], attrs: dict[str, Any], message: str
) -> None:
    with pytest.raises(kl.KernelError) as info:
        run_kernel(op, inputs, attrs, name="the_node")
    assert f"node 'the_node' (op {op})" in str(info.value)
    assert message in str(info.value)


def test_an_out_of_range_gather_fails_the_session_run_naming_node_and_index() -> None:
    graph = kl.Graph(make_registry())
    with graph.as_default():
        table = kl.constant(np.arange(12, dtype=np.float32).reshape(4, 3), name="table")
        ids = kl.placeholder(kl.int64, [None], name="ids")
        rows = kl.ops.gather_v2(table, ids, c(0), name="embedding")
    with kl.Session(graph) as session:
        np.testing.assert_array_equal(
            session.run(rows, {ids: np.array([3, 0])}), [[9, 10, 11], [0, 1, 2]]
        )
        with pytest.raises(
            kl.KernelError, match=r"node 'embedding' \(op GatherV2\).*indices\[2\] = 4"
        ):
            session.run(rows, {ids: np.array([0, 1, 4])})


# -- the GPU kernels: TensorFlow's GPU semantics for bad indices ---------------------------------


def _cupy_stand_in() -> types.SimpleNamespace:
    @klp.hookimpl
    def kernloom_register(registry: klp.Registrar) -> None:
        registry.register_device_factory(
            "GPU", FakeDeviceFactory("GPU", backend=CUPY_BACKEND), priority=210
        )
        registry.register_kernels(cupy_library(np))

    return types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2")


def _gpu_registry(backend: str) -> klp.Registry:
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    plugin = cpu_bound_gpu_plugin() if backend == "torch" else _cupy_stand_in()
    registry.register_plugin(plugin, name=f"gpu_{backend}")
    return registry


@pytest.mark.parametrize("backend", ["torch", "cupy"])
def test_gpu_gathers_give_zeros_and_scatters_skip_out_of_range_indices(backend: str) -> None:
    registry = _gpu_registry(backend)
    params = np.arange(1, 7, dtype=np.float32).reshape(3, 2)
    params[0, 0] = np.nan  # index 0 stands in for bad ones: its NaN must not leak
    (rows,), meta = run_op(registry, "GatherV2", [params, np.array([2, 3, -1], I32), I32(0)])
    assert meta.placement is not None and meta.placement["op"] == GPU0
    np.testing.assert_array_equal(rows, [[5, 6], [0, 0], [0, 0]])
    (picked,), _ = run_op(registry, "GatherNd", [params, np.array([[1, 1], [3, 0], [0, 1]], I32)])
    np.testing.assert_array_equal(picked, [4, 0, 2])
    updates = np.array([1.0, np.nan, 2.0], np.float32)
    (scattered,), _ = run_op(
        registry, "ScatterNd", [np.array([[1], [7], [1]], I32), updates, np.array([3], I32)]
    )
    np.testing.assert_array_equal(scattered, [0, 3, 0])


def test_size_and_rank_follow_their_input_as_metadata_ops() -> None:
    graph = kl.Graph(_gpu_registry("torch"))
    with graph.as_default():
        # (a dimension unknown until run time: a known shape's Size and Rank fold away)
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        with kl.device("CPU:0"):
            y = kl.ops.relu(x, name="y")
        size, rank = kl.ops.size(y, name="size"), kl.ops.rank(y, name="rank")
        on_gpu = kl.ops.size(kl.ops.tanh(x, name="t"), name="gpu_size")
        # Fetched through an Add: a fetched node itself is colocated with its _Retval.
        fetches = [kl.ops.add(v, c(0)) for v in (size, rank, on_gpu)]
    metadata = kl.RunMetadata()
    with kl.Session(graph) as session:
        values = session.run(fetches, {x: np.ones((2, 3))}, run_metadata=metadata)
    assert [int(v) for v in values] == [6, 2, 6]
    placement = metadata.placement
    assert placement is not None
    assert placement["size"].endswith("CPU:0") and placement["rank"].endswith("CPU:0")
    assert placement["gpu_size"] == GPU0


# -- views and the executor's forwarding -----------------------------------------------------------


def _outputs(op: str, inputs: list[Any], attrs: dict[str, Any] | None = None) -> list[Any]:
    """The kernel's outputs as it set them, before any copy off the device."""
    kernel = run_kernel(op, inputs, attrs).kernel
    ctx = OpKernelContext(kernel, inputs, CPU)
    kernel.compute(ctx)
    return ctx.outputs()


def test_the_error_policy_keeps_gathers_on_the_cpu_which_checks_every_index() -> None:
    registry = _gpu_registry("torch")
    params, indices = np.ones((2, 2), np.float32), np.array([[0, 1], [2, 0]], I32)
    with pytest.raises(kl.KernelError, match=r"indices\[1\] = \[2, 0\] does not index"):
        run_op(registry, "GatherNd", [params, indices], {"bad_indices_policy": "ERROR"})
    (out,), meta = run_op(
        registry, "GatherNd", [params, indices[:1]], {"bad_indices_policy": "ERROR"}
    )
    assert meta.placement is not None and meta.placement["op"].endswith("CPU:0")
    (out,), meta = run_op(registry, "GatherNd", [params, indices], {"bad_indices_policy": ""})
    assert meta.placement is not None and meta.placement["op"] == GPU0
    np.testing.assert_array_equal(out, [1, 0])


def test_selecting_ops_return_views_that_share_the_input() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    begin, end, strides, masks = strided_slice_args((slice(None), 1, slice(None, None, 2)))
    key = [np.array(v, I32) for v in (begin, end, strides)]
    (view,) = _outputs("StridedSlice", [x, *key], masks)
    np.testing.assert_array_equal(view, x[:, 1, ::2])
    assert np.shares_memory(view, x) and not view.flags.owndata
    for op, inputs, attrs in (
        ("Slice", [x, np.array([0, 1, 1], I32), np.array([-1, 1, 2], I32)], {}),
        ("Squeeze", [x[:1]], {"squeeze_dims": [0]}),
        ("ExpandDims", [x, I32(1)], {}),
        ("Split", [I32(2), x], {"num_split": 2}),
        ("Unpack", [x], {"num": 2}),
    ):
        assert all(np.shares_memory(v, x) for v in _outputs(op, inputs, attrs)), op
    reverse = strided_slice_args(slice(None, None, -1))
    (flipped,) = _outputs("StridedSlice", [x, *(np.array(v, I32) for v in reverse[:3])], reverse[3])
    assert flipped.flags.owndata and flipped.flags.c_contiguous  # a copy: no reversed view


def test_a_value_viewed_by_a_slice_is_never_overwritten_in_place() -> None:
    graph = kl.Graph(make_registry())
    with graph.as_default():
        a = kl.placeholder(kl.float64, [3, 4], name="a")
        x = kl.ops.add(a, a, name="x")  # owned by the step: a candidate for reuse
        head = kl.ops.strided_slice(x, c([0]), c([2]), c([1]), name="head")
        part = kl.ops.slice(x, c([1, 1]), c([2, 2]), name="part")
        squeezed = kl.ops.squeeze(kl.ops.expand_dims(x, c(0)), name="squeezed")
        negated = kl.ops.neg(x, name="negated")  # x's last use: may run in place
        after = kl.ops.exp(negated, name="after")
    value = np.arange(12.0).reshape(3, 4)
    with kl.Session(graph) as session:
        got = session.run([head, part, squeezed, after], {a: value})
    np.testing.assert_array_equal(got[0], 2 * value[:2])
    np.testing.assert_array_equal(got[1], 2 * value[1:3, 1:3])
    np.testing.assert_array_equal(got[2], 2 * value)
    np.testing.assert_allclose(got[3], np.exp(-2 * value))


# -- StridedSlice against numpy on random keys -----------------------------------------------------


@st.composite
def keys(draw: st.DrawFn, rank: int) -> tuple[Any, ...]:
    items: list[Any] = []
    real = 0
    ellipsis = False
    for _ in range(draw(st.integers(0, rank + 2))):
        kind = draw(st.sampled_from(["slice", "index", "new", "ellipsis"]))
        if kind == "ellipsis" and not ellipsis:
            ellipsis = True
            items.append(Ellipsis)
        elif kind == "new":
            items.append(None)
        elif real < rank and kind == "index":
            items.append(draw(st.integers(-3, 2)))
            real += 1
        elif real < rank:
            bound = st.none() | st.integers(-6, 6)
            step = draw(st.none() | st.integers(-3, 3).filter(bool))
            items.append(slice(draw(bound), draw(bound), step))
            real += 1
    return tuple(items)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_strided_slice_matches_numpy_indexing(data: st.DataObject) -> None:
    x = np.arange(3 * 4 * 3, dtype=np.int64).reshape(3, 4, 3)
    key = data.draw(keys(x.ndim))
    begin, end, strides, masks = strided_slice_args(key)
    inputs = [x, *(np.array(v, I32).reshape(len(v)) for v in (begin, end, strides))]
    (out,) = run_kernel("StridedSlice", inputs, masks).outputs
    np.testing.assert_array_equal(out, x[key])
    graph = kl.Graph(make_registry())
    with graph.as_default():
        node = kl.ops.strided_slice(*(kl.constant(v) for v in inputs), **masks)
    assert node.shape == kl.TensorShape(x[key].shape)


GPU_REGISTRIES: dict[str, klp.Registry] = {}


@pytest.mark.parametrize("backend", ["torch", "cupy"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_strided_slice_on_the_gpus_matches_numpy_indexing(
    data: st.DataObject, backend: str
) -> None:
    registry = GPU_REGISTRIES.setdefault(backend, _gpu_registry(backend))
    x = np.arange(3 * 4 * 3, dtype=np.float32).reshape(3, 4, 3)
    key = data.draw(keys(x.ndim))
    begin, end, strides, masks = strided_slice_args(key)
    inputs = [x, *(np.array(v, I32).reshape(len(v)) for v in (begin, end, strides))]
    (out,), meta = run_op(registry, "StridedSlice", inputs, masks)
    assert meta.placement is not None and meta.placement["op"] == GPU0
    np.testing.assert_array_equal(out, x[key])


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_gather_v2_matches_a_loop_for_any_axis_and_batch_dims(data: st.DataObject) -> None:
    params_shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    axis = data.draw(st.integers(0, len(params_shape) - 1))
    batch_dims = data.draw(st.integers(0, axis))
    extra = data.draw(st.lists(st.integers(0, 3), max_size=2))
    indices_shape = (*params_shape[:batch_dims], *extra)
    limit = params_shape[axis]
    indices = data.draw(
        st.lists(
            st.integers(0, limit - 1),
            min_size=int(np.prod(indices_shape, dtype=int)),
            max_size=int(np.prod(indices_shape, dtype=int)),
        )
    )
    params = np.arange(np.prod(params_shape), dtype=np.float64).reshape(params_shape)
    index_array = np.array(indices, np.int64).reshape(indices_shape)
    negative_axis = axis - len(params_shape) if data.draw(st.booleans()) else axis
    inputs = [params, index_array, np.int64(negative_axis)]
    (out,) = run_kernel("GatherV2", inputs, {"batch_dims": batch_dims}).outputs
    np.testing.assert_array_equal(out, gather_reference(axis, batch_dims)(*inputs))


@settings(max_examples=60, deadline=None)
@given(
    targets=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=12),
    dtype=st.sampled_from([np.float64, np.int8, np.bool_]),
)
def test_scatter_nd_adds_duplicates_like_a_loop(targets: list[tuple[int, int]], dtype: Any) -> None:
    indices = np.array(targets, np.int64).reshape(len(targets), 2)
    updates = (np.arange(len(targets) * 5).reshape(len(targets), 5) % 7 * 41).astype(dtype)
    expected = np.zeros((4, 3, 5), dtype)
    for (a, b), row in zip(targets, updates, strict=True):
        expected[a, b] = expected[a, b] + row  # int8 wraps; bool adds as logical or
    (out,) = run_kernel("ScatterNd", [indices, updates, np.array([4, 3, 5], np.int64)]).outputs
    np.testing.assert_array_equal(out, expected)


# -- wrappers and the command line -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("pad_v2", ["input", "paddings", "constant_values", "name"]),
        ("mirror_pad", ["input", "paddings", "mode", "name"]),
        ("gather_v2", ["params", "indices", "axis", "batch_dims", "name"]),
        ("gather_nd", ["params", "indices", "name"]),
        ("scatter_nd", ["indices", "updates", "shape", "name"]),
        ("strided_slice", ["input", "begin", "end", "strides", "begin_mask", "end_mask"]),
        ("split_v", ["value", "size_splits", "split_dim", "num_split", "name"]),
        ("unpack", ["value", "num", "axis", "name"]),
        ("one_hot", ["indices", "depth", "on_value", "off_value", "axis", "name"]),
        ("select_v2", ["condition", "t", "e", "name"]),
        ("reverse_v2", ["tensor", "axis", "name"]),
        ("broadcast_to", ["input", "shape", "name"]),
        ("expand_dims", ["input", "dim", "name"]),
        ("stop_gradient", ["input", "name"]),
        ("range", ["start", "limit", "delta", "name"]),
        ("where", ["input", "name"]),
    ],
)
def test_wrappers_have_tensorflow_names_and_arguments(name: str, params: list[str]) -> None:
    found = list(inspect.signature(getattr(kl.ops, name)).parameters)
    assert [p for p in found if p in params] == params


def test_the_ops_command_shows_the_new_ops(capsys: pytest.CaptureFixture[str]) -> None:
    for op in ("StridedSlice", "GatherV2", "OneHot", "Where"):
        assert main(["ops", op]) == 0
    out = capsys.readouterr().out
    assert "shrink_axis_mask: int = 0" in out and "batch_dims: int = 0" in out
    assert "TI: {uint8, int8, int32, int64} = int64" in out and "index: int64" in out
