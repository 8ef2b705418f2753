"""The 3-D window ops (Conv3D, MaxPool3D, AvgPool3D): wrappers with TF's names, shape
inference, every backend against the direct-loop references of the case table, and
TensorFlow's errors (checked against TF 2.21's CPU kernels and shape functions)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_kernel
from kernloom.testing.cases.windows3d import conv3d_reference, pool3d_reference, window3d

F32 = kl.float32


@pytest.fixture
def g() -> Any:
    graph = kl.Graph()
    with graph.as_default():
        yield graph


def test_wrappers_have_tensorflows_names_and_arguments() -> None:
    expected = {
        "conv3d": (["input", "filter"], {"strides", "padding", "data_format", "dilations"}),
        "max_pool3d": (["input"], {"ksize", "strides", "padding", "data_format"}),
        "avg_pool3d": (["input"], {"ksize", "strides", "padding", "data_format"}),
    }
    for name, (inputs, attrs) in expected.items():
        params = inspect.signature(getattr(kl.ops, name)).parameters
        positional = [p for p, v in params.items() if v.kind is v.POSITIONAL_OR_KEYWORD]
        keyword = {p for p, v in params.items() if v.kind is v.KEYWORD_ONLY} - {"name"}
        assert positional == inputs, name
        assert attrs <= keyword, name


def test_shapes_are_inferred_at_build_time(g: kl.Graph) -> None:
    x = kl.placeholder(F32, [2, 5, None, 7, 4])
    f = kl.constant(np.zeros((2, 3, 2, 4, 6), np.float32))
    y = kl.ops.conv3d(x, f, strides=[1, 2, 1, 3, 1], padding="SAME")
    assert y.shape.as_list() == [2, 3, None, 3, 6]
    y = kl.ops.conv3d(x, f, strides=[1, 1, 1, 1, 1], padding="VALID", dilations=[1, 2, 1, 1, 1])
    assert y.shape.as_list() == [2, 3, None, 6, 6]
    xc = kl.placeholder(F32, [1, 4, 6, 8, 10])  # NCDHW
    y = kl.ops.max_pool3d(
        xc, ksize=[1, 1, 2, 3, 3], strides=[1, 1, 2, 2, 3], padding="VALID", data_format="NCDHW"
    )
    assert y.shape.as_list() == [1, 4, 3, 3, 3]
    y = kl.ops.avg_pool3d(x, ksize=[1, 3, 3, 3, 1], strides=[1, 2, 2, 2, 1], padding="SAME")
    assert y.shape.as_list() == [2, 3, None, 4, 4]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda x, f: kl.ops.conv3d(x, f[..., :3, :], strides=[1] * 5, padding="SAME", name="c"),
            r"node 'c' \(op Conv3D\): Depth of input \(4\) is not a multiple of input depth "
            r"of filter \(3\)",
        ),
        (
            lambda x, f: kl.ops.conv3d(x, f, strides=[1, 1, 1, 1], padding="SAME", name="c"),
            r"node 'c'.*strides",
        ),
        (
            lambda x, f: kl.ops.conv3d(x, f, strides=[2, 1, 1, 1, 1], padding="SAME", name="c"),
            r"node 'c' \(op Conv3D\): strides \[2, 1, 1, 1, 1\]: the batch and channel entries "
            r"must be 1 \(windows move over D, H and W only\)",
        ),
        (
            lambda x, f: kl.ops.conv3d(x[0], f, strides=[1] * 5, padding="SAME", name="c"),
            r"node 'c' \(op Conv3D\): input must be 5-D",
        ),
        (
            lambda x, f: kl.ops.max_pool3d(
                x, ksize=[1, 2, 2, 2, 2], strides=[1] * 5, padding="SAME", name="p"
            ),
            r"node 'p' \(op MaxPool3D\): ksize \[1, 2, 2, 2, 2\]: the batch and channel",
        ),
        (
            lambda x, f: kl.ops.avg_pool3d(
                x, ksize=[1, 0, 2, 2, 1], strides=[1] * 5, padding="SAME", name="p"
            ),
            r"node 'p' \(op AvgPool3D\): ksize must be positive",
        ),
        (
            lambda x, f: kl.ops.avg_pool3d(
                x, ksize=[1, 6, 2, 2, 1], strides=[1] * 5, padding="VALID", name="p"
            ),
            r"node 'p' \(op AvgPool3D\): computed output size would be negative: the D "
            r"dimension is 5",
        ),
        (
            lambda x, f: kl.ops.max_pool3d(
                kl.ops.cast(x, DstT=kl.float64),
                ksize=[1, 2, 2, 2, 1],
                strides=[1] * 5,
                padding="SAME",
                name="p",
            ),
            r"float64",
        ),
    ],
)
def test_bad_attrs_and_shapes_fail_when_the_node_is_built(
    g: kl.Graph, build: Any, message: str
) -> None:
    x = kl.placeholder(F32, [1, 5, 6, 7, 4])
    f = kl.constant(np.zeros((2, 3, 2, 4, 6), np.float32))
    with pytest.raises((kl.InvalidArgumentError, TypeError, ValueError), match=message):
        build(x, f)


def _registry(kind: str) -> klp.Registry | None:
    if kind == "torch-gpu":
        return torch_registry()
    if kind == "cupy-gpu":
        return stand_in_registry()
    return None


KINDS = ["numpy-cpu", "torch-gpu", "cupy-gpu"]
DEVICE = {"numpy-cpu": "CPU:0", "torch-gpu": "GPU:0", "cupy-gpu": "GPU:0"}


@pytest.mark.parametrize("kind", KINDS)
def test_run_time_errors_are_tensorflows(kind: str) -> None:
    registry, device = _registry(kind), DEVICE[kind]
    x = np.zeros((1, 3, 4, 4, 4), np.float32)
    same = {"strides": [1] * 5, "padding": "SAME"}
    with pytest.raises(
        kl.KernelError, match=r"node 'c'.*input and filter must have the same depth: 4 vs 2"
    ):
        run_kernel(
            "Conv3D",
            [x, np.zeros((1, 1, 1, 2, 3), np.float32)],
            same,
            name="c",
            registry=registry,
            device=device,
        )
    with pytest.raises(kl.KernelError, match=r"node 'c'.*filter must not have zero elements"):
        run_kernel(
            "Conv3D",
            [x, np.zeros((1, 1, 1, 4, 0), np.float32)],
            same,
            name="c",
            registry=registry,
            device=device,
        )
    valid = {"ksize": [1, 4, 2, 2, 1], "strides": [1] * 5, "padding": "VALID"}
    with pytest.raises(kl.KernelError, match=r"node 'p'.*computed output size would be negative"):
        run_kernel("MaxPool3D", [x], valid, name="p", registry=registry, device=device)


def _geometries() -> list[tuple[str, dict[str, Any], tuple[int, ...], tuple[int, ...]]]:
    """(id, attrs, input shape, filter shape): SAME with odd and even totals, strides that
    skip the last rows, dilations, NCDHW."""
    return [
        ("same-odd", window3d((2, 1, 3), "SAME"), (2, 5, 4, 7, 3), (2, 3, 2, 3, 2)),
        ("valid", window3d((1, 2, 1), "VALID"), (1, 4, 6, 5, 2), (3, 2, 2, 2, 4)),
        (
            "dilated",
            window3d((1, 1, 2), "SAME", dilations=(2, 1, 3)),
            (1, 6, 4, 7, 2),
            (2, 2, 3, 2, 3),
        ),
        ("ncdhw", window3d((2, 2, 1), "SAME", "NCDHW"), (2, 3, 5, 4, 6), (3, 2, 2, 3, 2)),
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "attrs", "x_shape", "f_shape"), _geometries())
def test_conv3d_matches_the_loop_reference(
    kind: str, name: str, attrs: dict[str, Any], x_shape: Any, f_shape: Any
) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal(x_shape)
    f = rng.standard_normal(f_shape)
    (y,) = run_kernel(
        "Conv3D", [x, f], attrs, registry=_registry(kind), device=DEVICE[kind]
    ).outputs
    np.testing.assert_allclose(y, conv3d_reference(attrs)(x, f), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("op", "pool"), [("MaxPool3D", "max"), ("AvgPool3D", "avg")])
@pytest.mark.parametrize(
    ("window", "padding", "fmt"),
    [
        ((3, 2, 3), "SAME", "NDHWC"),
        ((2, 2, 2), "VALID", "NDHWC"),
        ((2, 3, 2), "SAME", "NCDHW"),
    ],
)
def test_pools_match_the_loop_reference(
    kind: str, op: str, pool: str, window: Any, padding: str, fmt: str
) -> None:
    attrs = window3d((2, 1, 2), padding, fmt, ksize=window)
    x = np.random.default_rng(3).standard_normal((2, 5, 4, 6, 3)).astype(np.float32)
    (y,) = run_kernel(op, [x], attrs, registry=_registry(kind), device=DEVICE[kind]).outputs
    np.testing.assert_allclose(y, pool3d_reference(attrs, pool)(x), rtol=1e-6, atol=1e-6)


def test_the_average_leaves_the_padding_out_of_its_divisor() -> None:
    """TF: AvgPool3D of ones with SAME padding is ones everywhere (checked with TF 2.21)."""
    attrs = window3d((2, 2, 2), "SAME", ksize=(2, 2, 2))
    (y,) = run_kernel("AvgPool3D", [np.ones((1, 3, 3, 3, 1), np.float32)], attrs).outputs
    np.testing.assert_array_equal(y, np.ones((1, 2, 2, 2, 1), np.float32))
