"""The image and batched linear algebra ops: wrappers with TensorFlow's names and arguments,
shape inference over partly known shapes, build-time and run-time errors that name the
node, and randomised checks of the numpy kernels against second formulations."""

from __future__ import annotations

import inspect
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernloom as kl
import kernloom.plugin as klp
from kernloom.cli import main
from kernloom.testing import run_kernel
from kernloom.testing.cases.image_linalg import (
    brute_einsum,
    reference_batch_matmul,
    reference_bicubic,
    reference_bilinear,
    reference_crop_and_resize,
    reference_nearest,
)
from kernloom_cpu_numpy import plugin as cpu_plugin

OPS = ["ResizeBilinear", "ResizeBicubic", "ResizeNearestNeighbor", "SpaceToDepth", "DepthToSpace"]
OPS += ["CropAndResize", "BatchMatMulV2", "Einsum"]


def numpy_only() -> klp.Registry:
    """The numpy kernels alone (the torch plugin's CPU BatchMatMulV2 would win otherwise)."""
    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    return registry


NUMPY = numpy_only()


@pytest.fixture
def g() -> Any:
    graph = kl.Graph()
    with graph.as_default():
        yield graph


def size(h: int, w: int) -> kl.Tensor:
    return kl.constant(np.array([h, w], np.int32))


# -- wrappers and the command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrapper", "arguments"),
    [
        ("resize_bilinear", ["images", "size", "align_corners", "half_pixel_centers", "name"]),
        ("resize_bicubic", ["images", "size", "align_corners", "half_pixel_centers", "name"]),
        (
            "resize_nearest_neighbor",
            ["images", "size", "align_corners", "half_pixel_centers", "name"],
        ),
        (
            "crop_and_resize",
            ["image", "boxes", "box_ind", "crop_size", "method", "extrapolation_value", "name"],
        ),
        ("space_to_depth", ["input", "block_size", "data_format", "name"]),
        ("depth_to_space", ["input", "block_size", "data_format", "name"]),
        ("batch_mat_mul_v2", ["x", "y", "adj_x", "adj_y", "name"]),
        ("einsum", ["inputs", "equation", "name"]),
    ],
)
def test_wrappers_have_tensorflows_names_and_arguments(wrapper: str, arguments: list[str]) -> None:
    parameters = inspect.signature(getattr(kl.ops, wrapper)).parameters
    assert [p for p in parameters if p in arguments] == arguments


def test_kernloom_ops_shows_each_op(capsys: pytest.CaptureFixture[str]) -> None:
    for op in OPS:
        assert main(["ops", op]) == 0
        assert op in capsys.readouterr().out
    assert main(["ops", "--json"]) == 0
    listed = {o["name"]: o for o in json.loads(capsys.readouterr().out)}
    assert "align_corners: bool = false" in listed["ResizeBilinear"]["attrs"]
    assert "data_format: {'NHWC', 'NCHW'} = 'NHWC'" in listed["SpaceToDepth"]["attrs"]
    assert "equation: string" in listed["Einsum"]["attrs"]


# -- shape inference -----------------------------------------------------------------------------


def test_resize_shapes(g: kl.Graph) -> None:
    images = kl.placeholder(kl.uint8, [None, 4, 6, 3])
    assert kl.ops.resize_bilinear(images, size(8, 2)).shape.as_list() == [None, 8, 2, 3]
    assert kl.ops.resize_bilinear(images, size(8, 2)).dtype == kl.float32
    nearest = kl.ops.resize_nearest_neighbor(images, size(1, 9))
    assert (nearest.shape.as_list(), nearest.dtype) == ([None, 1, 9, 3], kl.uint8)
    fed = kl.placeholder(kl.int32, [2])
    assert kl.ops.resize_bilinear(images, fed).shape.as_list() == [None, None, None, 3]
    bicubic = kl.ops.resize_bicubic(images, size(1, 7), half_pixel_centers=True)
    assert (bicubic.shape.as_list(), bicubic.dtype) == ([None, 1, 7, 3], kl.float32)
    assert kl.ops.resize_bicubic(images, fed).shape.as_list() == [None, None, None, 3]


def test_crop_and_resize_shapes(g: kl.Graph) -> None:
    image = kl.placeholder(kl.int64, [None, 5, 6, 3])
    boxes = kl.placeholder(kl.float32, [None, 4])
    crops = kl.ops.crop_and_resize(image, boxes, kl.placeholder(kl.int32, [7]), size(2, 9))
    assert (crops.shape.as_list(), crops.dtype) == ([7, 2, 9, 3], kl.float32)
    fed = kl.placeholder(kl.int32, [2])
    unknown = kl.ops.crop_and_resize(kl.placeholder(kl.uint8), boxes, [0, 1], fed)
    assert unknown.shape.as_list() == [2, None, None, None]  # one box per box_ind entry


def test_space_depth_shapes(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [None, 4, None, 3])
    assert kl.ops.space_to_depth(x, block_size=2).shape.as_list() == [None, 2, None, 12]
    nchw = kl.placeholder(kl.float32, [1, 18, 2, None])
    out = kl.ops.depth_to_space(nchw, block_size=3, data_format="NCHW")
    assert out.shape.as_list() == [1, 2, 6, None]
    assert kl.ops.space_to_depth(kl.placeholder(kl.float32), block_size=2).shape.rank == 4


def test_batch_matmul_shapes(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [None, 1, 3, 4])
    y = kl.placeholder(kl.float32, [5, 4, 2])
    assert kl.ops.batch_mat_mul_v2(x, y).shape.as_list() == [None, 5, 3, 2]
    adj = kl.ops.batch_mat_mul_v2(x, kl.placeholder(kl.float32, [7, 4]), adj_y=True)
    assert adj.shape.as_list() == [None, 1, 3, 7]
    assert kl.ops.batch_mat_mul_v2(kl.placeholder(kl.float32), y).shape.rank is None


def test_einsum_shapes(g: kl.Graph) -> None:
    a = kl.placeholder(kl.float32, [2, None, 3, 4])
    b = kl.placeholder(kl.float32, [5, 4, None])
    assert kl.ops.einsum([a, b], equation="...ij,...jk->...ik").shape.as_list() == [
        2,
        5,
        3,
        None,
    ]
    m = kl.placeholder(kl.float32, [None, 3])
    assert kl.ops.einsum([m], equation="ii->i").shape.as_list() == [3]
    assert kl.ops.einsum([m], equation="ij->jii").shape.as_list() == [3, None, None]
    unknown = kl.placeholder(kl.float32)
    assert kl.ops.einsum([unknown, b], equation="...j,ajk->ak").shape.as_list() == [5, None]
    assert kl.ops.einsum([unknown], equation="i...->...").shape.rank is None


# -- build-time errors ---------------------------------------------------------------------------


def _fails(build: Any, message: str, op: str) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=message) as info:
        build()
    assert f"node 'bad' (op {op})" in str(info.value)


IMAGE = [2, 4, 6, 3]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: kl.ops.resize_bilinear(
                kl.placeholder(kl.float32, [4, 6, 3]), size(2, 2), name="bad"
            ),
            "images must be 4-D",
        ),
        (
            lambda: kl.ops.resize_bilinear(
                kl.placeholder(kl.float32, IMAGE),
                kl.constant(np.array([2, 2, 2], np.int32)),
                name="bad",
            ),
            "size must be a vector of 2 elements",
        ),
        (
            lambda: kl.ops.resize_bilinear(
                kl.placeholder(kl.float32, IMAGE), size(0, 3), name="bad"
            ),
            "size must be positive",
        ),
        (
            lambda: kl.ops.resize_bilinear(
                kl.placeholder(kl.float32, IMAGE),
                size(3, 3),
                align_corners=True,
                half_pixel_centers=True,
                name="bad",
            ),
            "half_pixel_centers=True needs align_corners=False",
        ),
        (
            lambda: kl.ops.resize_bilinear(
                kl.placeholder(kl.float32, [1, 0, 2, 3]), size(2, 2), name="bad"
            ),
            "height must be positive",
        ),
    ],
)
def test_resize_bilinear_rejects_at_build_time(g: kl.Graph, build: Any, message: str) -> None:
    _fails(build, message, "ResizeBilinear")


def test_resize_bicubic_rejects_at_build_time(g: kl.Graph) -> None:
    images = kl.placeholder(kl.float32, IMAGE)
    _fails(
        lambda: kl.ops.resize_bicubic(images, size(3, 0), name="bad"),
        "size must be positive",
        "ResizeBicubic",
    )
    _fails(
        lambda: kl.ops.resize_bicubic(
            images, size(3, 3), align_corners=True, half_pixel_centers=True, name="bad"
        ),
        "half_pixel_centers=True needs align_corners=False",
        "ResizeBicubic",
    )
    with pytest.raises(kl.InvalidArgumentError, match="bool"):  # T is TensorFlow's list
        kl.ops.resize_bicubic(kl.placeholder(kl.bool_, IMAGE), size(2, 2))


@pytest.mark.parametrize(
    ("image", "boxes", "box_ind", "crop", "message"),
    [
        ([2, 3], [1, 4], [1], (2, 2), "image must be 4-D"),
        ([1, 3, 3, 1], [4], [1], (2, 2), "boxes must be 2-D"),
        ([1, 3, 3, 1], [1, 3], [1], (2, 2), "boxes must have 4 columns"),
        ([1, 3, 3, 1], [2, 4], [3], (2, 2), "box_ind has 3 entries but boxes has 2 rows"),
        ([1, 3, 3, 1], [2, 4], [2, 1], (2, 2), "box_ind must be 1-D"),
        ([1, 3, 3, 1], [2, 4], [2], (2, 0), "crop_size must be positive"),
    ],
)
def test_crop_and_resize_rejects_at_build_time(
    g: kl.Graph,
    image: list[int],
    boxes: list[int],
    box_ind: list[int],
    crop: tuple[int, int],
    message: str,
) -> None:
    args = (
        kl.placeholder(kl.float32, image),
        kl.placeholder(kl.float32, boxes),
        kl.placeholder(kl.int32, box_ind),
        size(*crop),
    )
    _fails(lambda: kl.ops.crop_and_resize(*args, name="bad"), message, "CropAndResize")


def test_crop_and_resize_checks_its_method(g: kl.Graph) -> None:
    image, boxes = kl.placeholder(kl.float32, [1, 3, 3, 1]), kl.placeholder(kl.float32, [1, 4])
    with pytest.raises(kl.InvalidArgumentError, match="bicubic"):
        kl.ops.crop_and_resize(image, boxes, [0], size(2, 2), method="bicubic")


def test_resize_nearest_rejects_at_build_time(g: kl.Graph) -> None:
    images = kl.placeholder(kl.int32, IMAGE)
    _fails(
        lambda: kl.ops.resize_nearest_neighbor(images, size(-1, 2), name="bad"),
        "size must be positive",
        "ResizeNearestNeighbor",
    )
    _fails(
        lambda: kl.ops.resize_nearest_neighbor(images, kl.placeholder(kl.int32, [3]), name="bad"),
        "size must be a vector of 2 elements",
        "ResizeNearestNeighbor",
    )
    with pytest.raises(kl.InvalidArgumentError, match="bool"):  # T is TensorFlow's list
        kl.ops.resize_nearest_neighbor(kl.placeholder(kl.bool_, IMAGE), size(2, 2))


@pytest.mark.parametrize(
    ("op", "shape", "attrs", "message"),
    [
        ("space_to_depth", [1, 5, 4, 3], {"block_size": 2}, "height 5 must be evenly divisible"),
        ("space_to_depth", [1, 4, 6, 3], {"block_size": 4}, "width 6 must be evenly divisible"),
        ("space_to_depth", [4, 6, 3], {"block_size": 2}, "input must be 4-D"),
        (
            "depth_to_space",
            [1, 2, 2, 8],
            {"block_size": 2, "data_format": "NCHW"},
            "depth 2 must be evenly divisible by block_size \\* block_size = 4",
        ),
        ("depth_to_space", [1, 2, 2, 12], {"block_size": 3}, "depth 12 must be evenly divisible"),
    ],
)
def test_space_depth_rejects_at_build_time(
    g: kl.Graph, op: str, shape: list[int], attrs: dict[str, Any], message: str
) -> None:
    name = "SpaceToDepth" if op == "space_to_depth" else "DepthToSpace"
    x = kl.placeholder(kl.float32, shape)
    _fails(lambda: getattr(kl.ops, op)(x, name="bad", **attrs), message, name)


def test_space_depth_attrs_are_checked(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [1, 4, 4, 3])
    with pytest.raises(kl.InvalidArgumentError, match="block_size"):
        kl.ops.space_to_depth(x, block_size=1)
    with pytest.raises(kl.InvalidArgumentError, match="NCHW_VECT_C"):
        kl.ops.space_to_depth(x, block_size=2, data_format="NCHW_VECT_C")


@pytest.mark.parametrize(
    ("x", "y", "attrs", "message"),
    [
        ([3], [3, 2], {}, "x must have rank >= 2"),
        ([2, 3], [4, 5], {}, "inner dimensions"),
        ([2, 3], [2, 5], {"adj_x": True, "adj_y": True}, "inner dimensions"),
        ([2, 3, 4], [3, 4, 5], {}, "cannot be broadcast together"),
    ],
)
def test_batch_matmul_rejects_at_build_time(
    g: kl.Graph, x: list[int], y: list[int], attrs: dict[str, Any], message: str
) -> None:
    a, b = kl.placeholder(kl.float32, x), kl.placeholder(kl.float32, y)
    _fails(lambda: kl.ops.batch_mat_mul_v2(a, b, name="bad", **attrs), message, "BatchMatMulV2")


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("ij,jk", [[2, 3], [3, 4]], "exactly one '->'"),
        ("i,i,i->i", [[2], [2], [2]], "TensorFlow's Einsum takes 1 or 2"),
        ("ij,jk->ik", [[2, 3]], "has 2 input subscripts but the op has 1 inputs"),
        ("ij,jk->iz", [[2, 3], [3, 4]], "output label 'z' is not present"),
        ("ij,jk->ik", [[2, 3, 1], [3, 4]], "input 0 must have rank 2"),
        ("...ijk->i", [[2, 3]], "input 0 must have rank >= 3"),
        ("ij,jk->ik", [[2, 3], [4, 4]], "label 'j'|dimension 0 of input 1"),
        ("...ij,...jk->ik", [[5, 2, 3], [3, 4]], "no ellipsis \\(...\\) in its output"),
        ("i1,1k->ik", [[2, 3], [3, 4]], "label '1' is not a letter"),
        ("i....j->ij", [[2, 3]], "at most one\\s+ellipsis"),
        ("...i,...i->...i", [[2, 3], [4, 3]], "cannot be broadcast together"),
    ],
)
def test_einsum_rejects_at_build_time(
    g: kl.Graph, equation: str, shapes: list[list[int]], message: str
) -> None:
    inputs = [kl.placeholder(kl.float32, s) for s in shapes]
    _fails(lambda: kl.ops.einsum(inputs, equation=equation, name="bad"), message, "Einsum")


# -- run-time errors (shapes known only when values arrive) --------------------------------------


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "message"),
    [
        (
            "ResizeBilinear",
            [np.zeros((1, 2, 2, 1)), np.array([2, 0], np.int32)],
            {},
            "size must be positive",
        ),
        (
            "ResizeBilinear",
            [np.zeros((1, 2, 2, 0)), np.array([2, 2], np.int32)],
            {},
            "at least one channel",
        ),
        (
            "ResizeNearestNeighbor",
            [np.zeros((1, 0, 2, 1)), np.array([2, 2], np.int32)],
            {},
            "non-zero size",
        ),
        (
            "ResizeBicubic",
            [np.zeros((1, 2, 0, 1)), np.array([2, 2], np.int32)],
            {},
            "non-zero size",
        ),
        (
            "ResizeBicubic",
            [np.zeros((1, 2, 2, 1)), np.array([2, 2, 2], np.int32)],
            {},
            "size must be a vector of 2 elements",
        ),
        (
            "CropAndResize",
            [
                np.zeros((2, 2, 2, 1)),
                np.zeros((2, 4), np.float32),
                np.array([0, 2], np.int32),
                np.array([2, 2], np.int32),
            ],
            {},
            "box_ind has values outside \\[0, batch_size\\) = \\[0, 2\\): \\[2\\]",
        ),
        (
            "CropAndResize",
            [
                np.zeros((1, 2, 2, 1)),
                np.array([[0, 0, np.inf, 1]], np.float32),
                np.zeros(1, np.int32),
                np.array([2, 2], np.int32),
            ],
            {},
            "not finite",
        ),
        (
            "CropAndResize",
            [
                np.zeros((1, 2, 2, 1)),
                np.zeros((0, 4), np.float32),
                np.zeros(0, np.int32),
                np.array([2, 2, 1], np.int32),
            ],
            {},
            "crop_size must be a vector of 2 elements",
        ),
        ("SpaceToDepth", [np.zeros((1, 3, 4, 1))], {"block_size": 2}, "height 3 must be evenly"),
        ("DepthToSpace", [np.zeros((1, 1, 1, 6))], {"block_size": 2}, "depth 6 must be evenly"),
        ("BatchMatMulV2", [np.zeros((2, 3, 4)), np.zeros((3, 4, 5))], {}, "cannot be broadcast"),
        (
            "BatchMatMulV2",
            [np.zeros((3, 4)), np.zeros((3, 5))],
            {},
            "inner dimensions differ: 4 vs 3",
        ),
        ("Einsum", [[np.zeros((2, 3)), np.zeros((4, 5))]], {"equation": "ij,jk->ik"}, "label 'j'"),
        ("Einsum", [[np.zeros((2, 3))]], {"equation": "ijk->i"}, "must have rank 3"),
    ],
)
def test_kernels_reject_bad_values_naming_the_node(
    op: str, inputs: list[Any], attrs: dict[str, Any], message: str
) -> None:
    with pytest.raises(kl.KernelError, match=message) as info:
        run_kernel(op, inputs, attrs, name="the_node", registry=NUMPY)
    assert f"node 'the_node' (op {op})" in str(info.value)


def test_run_time_errors_name_the_node_in_a_session(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [None, None, None], name="x")
    y = kl.placeholder(kl.float32, [None, None], name="y")
    product = kl.ops.batch_mat_mul_v2(x, y, name="scores")
    with kl.Session(g) as session, pytest.raises(kl.KernloomError, match="node 'scores'") as info:
        session.run(product, {x: np.zeros((2, 3, 4), np.float32), y: np.zeros((5, 6), np.float32)})
    assert "inner dimensions differ" in str(info.value)


# -- randomised checks against second formulations ----------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    mode=st.sampled_from([(False, False), (True, False), (False, True)]),
    dtype=st.sampled_from([np.float32, np.uint8, np.float64]),
)
def test_resizes_match_a_pixel_loop(
    data: st.DataObject, mode: tuple[bool, bool], dtype: Any
) -> None:
    shape = data.draw(
        st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6), st.integers(1, 3))
    )
    target = np.array(data.draw(st.tuples(st.integers(1, 9), st.integers(1, 9))), np.int32)
    # No magnitudes near the subnormal range: the CPU device flushes subnormal inputs and
    # intermediate results to zero, as TensorFlow's kernels do; the loop reference does not.
    floats = st.floats(-1e3, 1e3, width=32).filter(lambda v: v == 0 or abs(v) >= 1e-30)
    elements = st.integers(0, 255) if dtype is np.uint8 else floats
    images = data.draw(hnp.arrays(dtype, shape, elements=elements))
    attrs = {"align_corners": mode[0], "half_pixel_centers": mode[1]}
    (bilinear,) = run_kernel("ResizeBilinear", [images, target], attrs, registry=NUMPY).outputs
    np.testing.assert_array_equal(bilinear, reference_bilinear(*mode)(images, target))
    (nearest,) = run_kernel(
        "ResizeNearestNeighbor", [images, target], attrs, registry=NUMPY
    ).outputs
    np.testing.assert_array_equal(nearest, reference_nearest(*mode)(images, target))


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    mode=st.sampled_from([(False, False), (True, False), (False, True)]),
    dtype=st.sampled_from([np.float32, np.uint8, np.int64, np.float64]),
)
def test_resize_bicubic_matches_keys_cubic_in_float64(
    data: st.DataObject, mode: tuple[bool, bool], dtype: Any
) -> None:
    """Every shape from 1 pixel up, up- and downsampling, against Keys' polynomial
    evaluated per output pixel in float64 (the kernel works in float32 from a table)."""
    shape = data.draw(
        st.tuples(st.integers(0, 2), st.integers(1, 7), st.integers(1, 7), st.integers(1, 3))
    )
    target = np.array(data.draw(st.tuples(st.integers(1, 9), st.integers(1, 9))), np.int32)
    floats = st.floats(-1e3, 1e3, width=32).filter(lambda v: v == 0 or abs(v) >= 1e-30)
    elements = floats if np.dtype(dtype).kind == "f" else st.integers(0, 255)
    images = data.draw(hnp.arrays(dtype, shape, elements=elements))
    attrs = {"align_corners": mode[0], "half_pixel_centers": mode[1]}
    (out,) = run_kernel("ResizeBicubic", [images, target], attrs, registry=NUMPY).outputs
    assert out.dtype == np.float32
    expected = reference_bicubic(*mode)(images, target)
    scale = max(1.0, float(np.abs(images).max(initial=0)))
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5 * scale)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    method=st.sampled_from(["bilinear", "nearest"]),
    dtype=st.sampled_from([np.float32, np.uint8, np.int32, np.float64]),
)
def test_crop_and_resize_matches_a_pixel_loop(data: st.DataObject, method: str, dtype: Any) -> None:
    """Random boxes (inside, outside, flipped, degenerate) on 1-pixel and larger images,
    crops of 1 and more, against TensorFlow's formula written out per output pixel."""
    shape = data.draw(
        st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 6), st.integers(1, 2))
    )
    num_boxes = data.draw(st.integers(0, 4))
    # No subnormal coordinates: the CPU device flushes them to zero, as TensorFlow does.
    coordinate = st.floats(-0.5, 1.5, width=32).filter(lambda v: v == 0 or abs(v) >= 1e-30)
    boxes = data.draw(hnp.arrays(np.float32, (num_boxes, 4), elements=coordinate))
    box_ind = data.draw(hnp.arrays(np.int32, num_boxes, elements=st.integers(0, shape[0] - 1)))
    crop = np.array(data.draw(st.tuples(st.integers(1, 6), st.integers(1, 6))), np.int32)
    floats = st.floats(-1e3, 1e3, width=32).filter(lambda v: v == 0 or abs(v) >= 1e-30)
    elements = floats if np.dtype(dtype).kind == "f" else st.integers(0, 255)
    image = data.draw(hnp.arrays(dtype, shape, elements=elements))
    attrs = {"method": method, "extrapolation_value": -3.25}
    inputs = [image, boxes, box_ind, crop]
    (out,) = run_kernel("CropAndResize", inputs, attrs, registry=NUMPY).outputs
    np.testing.assert_array_equal(out, reference_crop_and_resize(method, -3.25)(*inputs))


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    adj=st.tuples(st.booleans(), st.booleans()),
    dtype=st.sampled_from([np.float64, np.int32, np.complex128]),
)
def test_batch_matmul_matches_a_batch_loop(
    data: st.DataObject, adj: tuple[bool, bool], dtype: Any
) -> None:
    shapes = data.draw(
        hnp.mutually_broadcastable_shapes(signature="(m,n),(n,p)->(m,p)", max_dims=3, max_side=4)
    )
    sx, sy = shapes.input_shapes
    sx = (*sx[:-2], sx[-1], sx[-2]) if adj[0] else sx
    sy = (*sy[:-2], sy[-1], sy[-2]) if adj[1] else sy
    x = data.draw(hnp.arrays(dtype, sx, elements=st.integers(-9, 9)))
    y = data.draw(hnp.arrays(dtype, sy, elements=st.integers(-9, 9)))
    if dtype is np.complex128:
        x, y = x + 1j * x[..., ::-1, :], y - 2j * y
    attrs = {"adj_x": adj[0], "adj_y": adj[1]}
    (out,) = run_kernel("BatchMatMulV2", [x, y], attrs, registry=NUMPY).outputs
    np.testing.assert_array_equal(out, reference_batch_matmul(*adj)(x, y))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_einsum_matches_the_definition(data: st.DataObject) -> None:
    """Random two-operand equations over labels a-d (repeats, contractions, reductions,
    repeated output labels) against the brute-force sum."""
    labels = "abcd"
    sizes = dict(zip(labels, data.draw(st.tuples(*[st.integers(1, 3)] * 4)), strict=True))
    first = data.draw(st.text(labels, min_size=0, max_size=3))
    second = data.draw(st.text(labels, min_size=0, max_size=3))
    used = sorted(set(first + second))
    output = data.draw(st.lists(st.sampled_from(used), max_size=3)) if used else []
    equation = f"{first},{second}->{''.join(output)}"
    operands = [
        data.draw(hnp.arrays(np.int64, tuple(sizes[c] for c in s), elements=st.integers(-4, 4)))
        for s in (first, second)
    ]
    (out,) = run_kernel("Einsum", [operands], {"equation": equation}, registry=NUMPY).outputs
    np.testing.assert_array_equal(out, brute_einsum(equation)(*operands))


@settings(max_examples=30, deadline=None)
@given(data=st.data(), transposed=st.booleans())
def test_einsum_ellipses_broadcast_like_matmul(data: st.DataObject, transposed: bool) -> None:
    shapes = data.draw(
        hnp.mutually_broadcastable_shapes(signature="(m,n),(n,p)->(m,p)", max_dims=3, max_side=3)
    )
    sx, sy = shapes.input_shapes
    x = data.draw(hnp.arrays(np.float64, sx, elements=st.integers(-9, 9)))
    y = data.draw(hnp.arrays(np.float64, sy, elements=st.integers(-9, 9)))
    equation = "...ij,...jk->...ki" if transposed else "...ij,...jk->...ik"
    (out,) = run_kernel("Einsum", [[x, y]], {"equation": equation}, registry=NUMPY).outputs
    expected = np.matmul(x, y)
    np.testing.assert_array_equal(out, np.swapaxes(expected, -1, -2) if transposed else expected)


def test_attention_runs_in_a_session() -> None:
    """Scaled dot-product attention built from BatchMatMulV2 and Softmax, and its context
    again through Einsum, on the installed CPU kernels, against numpy in float64."""
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)).astype(np.float32) for _ in range(3))
    g = kl.Graph()
    with g.as_default():
        qt, kt, vt = (kl.placeholder(kl.float32, [None, 3, None, 4], name=n) for n in "qkv")
        probs = kl.ops.softmax(kl.ops.batch_mat_mul_v2(qt, kt, adj_y=True) * 0.5)
        context = kl.ops.batch_mat_mul_v2(probs, vt)
        again = kl.ops.einsum([probs, vt], equation="bhqk,bhkd->bhqd")
    assert context.shape.as_list() == [None, 3, None, 4]
    with kl.Session(g) as session:
        got, got_again = session.run([context, again], {qt: q, kt: k, vt: v})
    scores = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) * 0.5
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    expected = weights @ v.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_again, expected, rtol=1e-5, atol=1e-6)
