"""Conv3DBackpropInputV2 (tf.nn.conv3d_transpose's op): the wrapper with TF's name and
arguments, shape inference, every backend against a direct numpy loop, the adjoint of
Conv3D, and TensorFlow's errors (checked against TF 2.21's Eigen CPU kernel)."""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_kernel
from kernloom.testing.cases.windows3d import window3d

F32 = kl.float32
KINDS = ["numpy-cpu", "torch-gpu", "cupy-gpu"]
DEVICE = {"numpy-cpu": "CPU:0", "torch-gpu": "GPU:0", "cupy-gpu": "GPU:0"}


def _registry(kind: str) -> klp.Registry | None:
    if kind == "torch-gpu":
        return torch_registry()
    if kind == "cupy-gpu":
        return stand_in_registry()
    return None


def _loop_gradient(
    sizes: list[int],
    f: Any,
    dy: Any,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    padding: str,
) -> Any:
    """The input gradient from its definition, NDHWC: dx = d(sum(conv3d(x, f) * dy)) / dx,
    each input element's gradient summed over the (output position, tap) pairs that read
    it; TF's SAME pads (out - 1) * stride + span - size in total, the odd one at the end."""
    n, *spatial, c = sizes
    pads = []
    for size, k, s, dl in zip(spatial, f.shape[:3], strides, dilations, strict=True):
        span = (k - 1) * dl + 1
        out = -(-size // s) if padding == "SAME" else (size - span) // s + 1
        pads.append(max((out - 1) * s + span - size, 0) // 2 if padding == "SAME" else 0)
    dx = np.zeros((n, *spatial, c))
    for x_pos in itertools.product(*(range(size) for size in spatial)):
        for tap in itertools.product(*(range(k) for k in f.shape[:3])):
            # The output position o with o * s - pad + t * d == x, if there is one.
            out_pos = []
            for xi, t, s, dl, p, o_max in zip(
                x_pos, tap, strides, dilations, pads, dy.shape[1:4], strict=True
            ):
                q, r = divmod(xi + p - t * dl, s)
                out_pos.append(q if r == 0 and 0 <= q < o_max else None)
            if None in out_pos:
                continue
            dx[(slice(None), *x_pos, slice(None))] += (
                dy[(slice(None), *out_pos, slice(None))].astype(np.float64) @ f[tap].T
            )
    return dx


def test_the_wrapper_has_tensorflows_name_and_arguments() -> None:
    params = inspect.signature(kl.ops.conv3d_backprop_input_v2).parameters
    positional = [p for p, v in params.items() if v.kind is v.POSITIONAL_OR_KEYWORD]
    keyword = {p for p, v in params.items() if v.kind is v.KEYWORD_ONLY}
    assert positional == ["input_sizes", "filter", "out_backprop"]
    assert {"strides", "padding", "data_format", "dilations", "name"} <= keyword


def test_the_shape_is_input_sizes_at_build_time() -> None:
    with kl.Graph().as_default():
        f = kl.constant(np.zeros((2, 3, 2, 4, 6), np.float32))
        dy = kl.placeholder(F32, [2, 3, 3, 4, 6])
        sizes = kl.constant(np.array([2, 5, 5, 7, 4], np.int64))
        y = kl.ops.conv3d_backprop_input_v2(sizes, f, dy, strides=[1, 2, 2, 2, 1], padding="SAME")
        assert y.shape.as_list() == [2, 5, 5, 7, 4]
        unknown = kl.placeholder(kl.int32, [5])
        y = kl.ops.conv3d_backprop_input_v2(unknown, f, dy, strides=[1] * 5, padding="VALID")
        assert y.shape.as_list() == [2, None, None, None, 4]
        y = kl.ops.conv3d_backprop_input_v2(
            unknown,
            f,
            kl.placeholder(F32, [1, 6, 2, 2, 2]),
            strides=[1] * 5,
            padding="VALID",
            data_format="NCDHW",
        )
        assert y.shape.as_list() == [1, 4, None, None, None]


@pytest.mark.parametrize(
    ("sizes", "f_shape", "dy_shape", "attrs", "message"),
    [
        (
            [1, 5, 5, 5, 2],
            (3, 3, 3, 2, 4),
            (1, 3, 3, 3, 4),
            {"padding": "SAME"},
            r"Size of out_backprop doesn't match computed: its D size is 3, but an input of 5 "
            r"with a filter of 3, stride 1, dilation 1 and SAME padding gives 5",
        ),
        (
            [1, 5, 5, 5, 2],
            (3, 3, 3, 3, 4),
            (1, 3, 3, 3, 4),
            {},
            r"input and filter must have the same number of channels. Got 2 for input "
            r"\(input_sizes\) and 3 for filter",
        ),
        (
            [1, 5, 5, 5, 2],
            (3, 3, 3, 2, 5),
            (1, 3, 3, 3, 4),
            {},
            r"out_backprop and filter must have the same number of channels. Got 4 for "
            r"out_backprop and 5 for filter",
        ),
        (
            [2, 5, 5, 5, 2],
            (3, 3, 3, 2, 4),
            (1, 3, 3, 3, 4),
            {},
            r"input and out_backprop must have the same batch size: input_sizes gives 2, "
            r"out_backprop has 1",
        ),
        (
            [1, 5, 5, 5],
            (3, 3, 3, 2, 4),
            (1, 3, 3, 3, 4),
            {},
            r"input_sizes must have 5 entries \(the input's shape\), got",
        ),
        (
            [1, -5, 5, 5, 2],
            (3, 3, 3, 2, 4),
            (1, 3, 3, 3, 4),
            {},
            r"input_sizes must be non-negative",
        ),
        ([1, 5, 5, 5, 0], (3, 3, 3, 0, 4), (1, 3, 3, 3, 4), {}, r"filter depth must be strictly"),
        (
            [1, 5, 5, 5, 2],
            (3, 3, 3, 2, 4),
            (1, 3, 3, 3, 4),
            {"strides": [2, 1, 1, 1, 1]},
            r"strides \[2, 1, 1, 1, 1\]: the batch and channel entries must be 1",
        ),
        (
            [1, 5, 5, 5, 2],
            (3, 3, 3, 2, 4),
            (1, 3, 3, 3, 4),
            {"strides": [1, 0, 1, 1, 1]},
            r"strides must be positive",
        ),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_run_time_errors_are_tensorflows(
    kind: str, sizes: list[int], f_shape: Any, dy_shape: Any, attrs: Any, message: str
) -> None:
    """The conditions TF 2.21's CPU kernel refuses (TF_ENABLE_ONEDNN_OPTS=0), each named
    with this op's arguments, on every backend and at build time where shapes are known."""
    inputs = [
        np.array(sizes, np.int32),
        np.zeros(f_shape, np.float32),
        np.zeros(dy_shape, np.float32),
    ]
    full = {"strides": [1] * 5, "padding": "VALID", **attrs}
    with pytest.raises(kl.KernelError, match=r"node 'g' \(op Conv3DBackpropInputV2\): " + message):
        run_kernel(
            "Conv3DBackpropInputV2",
            inputs,
            full,
            name="g",
            registry=_registry(kind),
            device=DEVICE[kind],
        )
    with kl.Graph().as_default(), pytest.raises(kl.InvalidArgumentError, match=message):
        kl.ops.conv3d_backprop_input_v2(*(kl.constant(v) for v in inputs), **full, name="g")


def test_ranks_are_checked_when_the_node_is_built() -> None:
    with kl.Graph().as_default():
        f = kl.constant(np.zeros((3, 3, 3, 2, 4), np.float32))
        dy = kl.placeholder(F32, [1, 3, 3, 3, 4])
        sizes = kl.constant(np.array([1, 5, 5, 5, 2], np.int32))
        with pytest.raises(kl.InvalidArgumentError, match=r"filter must be 5-D"):
            kl.ops.conv3d_backprop_input_v2(sizes, f[0], dy, strides=[1] * 5, padding="VALID")
        with pytest.raises(kl.InvalidArgumentError, match=r"out_backprop must be 5-D"):
            kl.ops.conv3d_backprop_input_v2(sizes, f, dy[0], strides=[1] * 5, padding="VALID")
        with pytest.raises(kl.InvalidArgumentError, match=r"input_sizes must have 5 entries"):
            kl.ops.conv3d_backprop_input_v2(sizes[:4], f, dy, strides=[1] * 5, padding="VALID")
        with pytest.raises((kl.InvalidArgumentError, ValueError), match=r"strides"):
            kl.ops.conv3d_backprop_input_v2(sizes, f, dy, strides=[1] * 4, padding="VALID")


GEOMETRIES = [
    # (id, input_sizes NDHWC, filter shape, strides, dilations, padding)
    ("valid", [2, 4, 5, 3, 3], (2, 3, 2, 3, 2), (1, 1, 1), (1, 1, 1), "VALID"),
    ("valid-strided", [1, 7, 5, 6, 2], (3, 2, 2, 2, 3), (2, 3, 2), (1, 1, 1), "VALID"),
    ("same-odd", [2, 5, 4, 7, 3], (2, 3, 2, 3, 2), (2, 1, 3), (1, 1, 1), "SAME"),
    ("same-even", [1, 4, 6, 4, 2], (3, 2, 3, 2, 2), (1, 2, 1), (1, 1, 1), "SAME"),
    ("dilated", [1, 6, 4, 7, 2], (2, 2, 3, 2, 3), (1, 1, 2), (2, 1, 3), "SAME"),
    ("dilated-valid", [1, 7, 5, 6, 2], (2, 3, 2, 2, 2), (2, 1, 1), (3, 2, 2), "VALID"),
]


def _dy_shape(sizes: list[int], f_shape: Any, strides: Any, dilations: Any, padding: str) -> Any:
    out = []
    for size, k, s, dl in zip(sizes[1:4], f_shape[:3], strides, dilations, strict=True):
        span = (k - 1) * dl + 1
        out.append(-(-size // s) if padding == "SAME" else (size - span) // s + 1)
    return (sizes[0], *out, f_shape[4])


@pytest.mark.parametrize("fmt", ["NDHWC", "NCDHW"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("name", "sizes", "f_shape", "strides", "dilations", "padding"),
    GEOMETRIES,
    ids=[g[0] for g in GEOMETRIES],
)
def test_matches_the_loop_on_every_backend(
    kind: str,
    fmt: str,
    name: str,
    sizes: list[int],
    f_shape: Any,
    strides: Any,
    dilations: Any,
    padding: str,
) -> None:
    rng = np.random.default_rng(5)
    f = rng.standard_normal(f_shape)
    dy = rng.standard_normal(_dy_shape(sizes, f_shape, strides, dilations, padding))
    expected = _loop_gradient(sizes, f, dy, strides, dilations, padding)
    attrs = window3d(strides, padding, fmt, dilations=dilations)
    laid_sizes, laid_dy = list(sizes), dy
    if fmt == "NCDHW":
        laid_sizes = [sizes[0], sizes[4], *sizes[1:4]]
        laid_dy, expected = np.moveaxis(dy, -1, 1), np.moveaxis(expected, -1, 1)
    (y,) = run_kernel(
        "Conv3DBackpropInputV2",
        [np.array(laid_sizes, np.int64), f, laid_dy],
        attrs,
        registry=_registry(kind),
        device=DEVICE[kind],
    ).outputs
    assert y.dtype == np.float64 and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_float16_and_float32(kind: str) -> None:
    rng = np.random.default_rng(9)
    sizes, f_shape, strides = [1, 4, 5, 4, 2], (2, 3, 2, 2, 3), (2, 2, 1)
    f = rng.integers(-3, 4, f_shape).astype(np.float64)
    dy = rng.integers(-3, 4, _dy_shape(sizes, f_shape, strides, (1, 1, 1), "SAME"))
    expected = _loop_gradient(sizes, f, dy.astype(np.float64), strides, (1, 1, 1), "SAME")
    for dtype in (np.float16, np.float32):
        (y,) = run_kernel(
            "Conv3DBackpropInputV2",
            [np.array(sizes, np.int32), f.astype(dtype), dy.astype(dtype)],
            window3d(strides, "SAME"),
            registry=_registry(kind),
            device=DEVICE[kind],
        ).outputs
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, expected.astype(dtype))  # small integers: exact


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("sizes", "f_shape", "dy_shape"),
    [
        ([0, 3, 3, 3, 2], (2, 2, 2, 2, 3), (0, 3, 3, 3, 3)),  # an empty batch
        ([1, 3, 3, 3, 2], (2, 2, 2, 2, 0), (1, 3, 3, 3, 0)),  # no output channels
        ([1, 0, 3, 3, 2], (1, 2, 2, 2, 3), (1, 0, 3, 3, 3)),  # an empty depth
    ],
)
def test_empty_gradients_are_zeros_of_input_sizes(
    kind: str, sizes: list[int], f_shape: Any, dy_shape: Any
) -> None:
    """TF 2.21 gives zeros of input_sizes' shape for each of these."""
    (y,) = run_kernel(
        "Conv3DBackpropInputV2",
        [np.array(sizes, np.int32), np.ones(f_shape, np.float32), np.ones(dy_shape, np.float32)],
        window3d((1, 1, 1), "SAME"),
        registry=_registry(kind),
        device=DEVICE[kind],
    ).outputs
    np.testing.assert_array_equal(y, np.zeros(sizes, np.float32))


def test_it_is_the_adjoint_of_conv3d() -> None:
    """<conv3d(x, f), dy> == <x, conv3d_backprop_input_v2(shape(x), f, dy)> for random x
    and dy: the defining property of the input gradient, with Conv3D's own kernel."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 5, 6, 4, 3))
    f = rng.standard_normal((3, 2, 2, 3, 4))
    attrs = window3d((2, 3, 1), "SAME", dilations=(1, 1, 2))
    (y,) = run_kernel("Conv3D", [x, f], attrs).outputs
    dy = rng.standard_normal(y.shape)
    (dx,) = run_kernel("Conv3DBackpropInputV2", [np.array(x.shape, np.int32), f, dy], attrs).outputs
    np.testing.assert_allclose(np.vdot(y, dy), np.vdot(x, dx), rtol=1e-10)
