"""The convolution family's ops: wrappers with TF's names and arguments, shape inference,
build-time errors that name the node, run-time errors that name it, a small ResNet-style
block end to end, and which CPU kernel the installed plugins make the default."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_kernel
from kernloom.testing.cases import nn as ref

F32 = kl.float32


@pytest.fixture
def g() -> Any:
    graph = kl.Graph()
    with graph.as_default():
        yield graph


def _x(shape: list[int | None], name: str = "x") -> kl.Tensor:
    return kl.placeholder(F32, shape, name=name)


def test_wrappers_have_tensorflows_names_and_arguments() -> None:
    """Inputs positional, attrs keyword-only (kernloom's wrapper convention), every name
    as in tf.raw_ops."""
    expected = {
        "conv2d": (
            ["input", "filter"],
            {"strides", "use_cudnn_on_gpu", "padding", "explicit_paddings", "data_format"}
            | {"dilations"},
        ),
        "depthwise_conv2d_native": (
            ["input", "filter"],
            {"strides", "padding", "explicit_paddings", "data_format", "dilations"},
        ),
        "conv2d_backprop_input": (
            ["input_sizes", "filter", "out_backprop"],
            {"strides", "use_cudnn_on_gpu", "padding", "explicit_paddings", "data_format"}
            | {"dilations"},
        ),
        "max_pool": (
            ["input"],
            {"ksize", "strides", "padding", "explicit_paddings", "data_format"},
        ),
        "avg_pool": (["value"], {"ksize", "strides", "padding", "data_format"}),
        "max_pool_with_argmax": (
            ["input"],
            {"ksize", "strides", "Targmax", "padding", "include_batch_in_index"},
        ),
        "fused_batch_norm_v3": (
            ["x", "scale", "offset", "mean", "variance"],
            {"epsilon", "exponential_avg_factor", "data_format", "is_training"},
        ),
        "lrn": (["input"], {"depth_radius", "bias", "alpha", "beta"}),
    }
    for name, (inputs, attrs) in expected.items():
        parameters = inspect.signature(getattr(kl.ops, name)).parameters.values()
        positional = [p.name for p in parameters if p.kind is not p.KEYWORD_ONLY]
        keywords = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY} - {"name"}
        assert (positional, keywords) == (inputs, attrs), name


def test_shapes_are_inferred_at_build_time(g: kl.Graph) -> None:
    x = _x([None, 224, 224, 3])
    f = kl.constant(np.zeros((7, 7, 3, 64), np.float32))
    stem = kl.ops.conv2d(x, f, strides=[1, 2, 2, 1], padding="SAME")
    assert stem.shape.as_list() == [None, 112, 112, 64]
    pooled = kl.ops.max_pool(stem, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    assert pooled.shape.as_list() == [None, 56, 56, 64]
    nchw = kl.ops.avg_pool(
        _x([8, 64, 7, 9], "y"),
        ksize=[1, 1, 7, 7],
        strides=[1, 1, 1, 1],
        padding="VALID",
        data_format="NCHW",
    )
    assert nchw.shape.as_list() == [8, 64, 1, 3]
    dw = kl.ops.depthwise_conv2d_native(
        pooled,
        kl.constant(np.zeros((3, 3, 64, 2), np.float32)),
        strides=[1, 1, 1, 1],
        padding="VALID",
    )
    assert dw.shape.as_list() == [None, 54, 54, 128]
    back = kl.ops.conv2d_backprop_input(
        kl.constant(np.array([4, 56, 56, 64], np.int32)),
        kl.constant(np.zeros((3, 3, 64, 8), np.float32)),
        _x([4, 28, 28, 8], "dy"),
        strides=[1, 2, 2, 1],
        padding="SAME",
    )
    assert back.shape.as_list() == [4, 56, 56, 64]
    outputs = kl.ops.fused_batch_norm_v3(
        stem, *(kl.constant(np.ones(64, np.float32)) for _ in range(4)), is_training=False
    )
    assert [o.shape.as_list() for o in outputs] == [
        [None, 112, 112, 64],
        [64],
        [64],
        [64],
        [64],
        [],
    ]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda x, f: kl.ops.conv2d(x, f, strides=[1, 1, 1], padding="SAME", name="c"),
            r"node 'c' \(op Conv2D\): strides must have 4 entries",
        ),
        (
            lambda x, f: kl.ops.conv2d(x, f, strides=[2, 1, 1, 1], padding="SAME", name="c"),
            r"node 'c' \(op Conv2D\): strides \[2, 1, 1, 1\]: the batch and channel entries",
        ),
        (
            lambda x, f: kl.ops.conv2d(
                x, f, strides=[1, 1, 1, 1], padding="SAME", dilations=[1, 0, 1, 1], name="c"
            ),
            r"node 'c' \(op Conv2D\): dilations must be positive",
        ),
        (
            lambda x, f: kl.ops.conv2d(x, f, strides=[1, 1, 1, 1], padding="EXPLICIT", name="c"),
            r"node 'c' .*explicit_paddings must have 8 entries",
        ),
        (
            lambda x, f: kl.ops.conv2d(
                x, f, strides=[1, 1, 1, 1], padding="SAME", explicit_paddings=[0] * 8, name="c"
            ),
            r"node 'c' .*explicit_paddings must be empty unless padding is EXPLICIT",
        ),
        (
            lambda x, f: kl.ops.conv2d(
                x,
                f,
                strides=[1, 1, 1, 1],
                padding="EXPLICIT",
                explicit_paddings=[1, 0, 0, 0, 0, 0, 0, 0],
                name="c",
            ),
            r"node 'c' .*the batch and channel dimensions cannot be padded",
        ),
        (
            lambda x, f: kl.ops.conv2d(x, f, strides=[1, 1, 1, 1], padding="VALID", name="c"),
            r"node 'c' \(op Conv2D\): computed output size would be negative: the H dimension",
        ),
        (
            lambda x, f: kl.ops.conv2d(
                x,
                kl.constant(np.zeros((1, 1, 2, 4), np.float32)),
                strides=[1, 1, 1, 1],
                padding="SAME",
                name="c",
            ),
            r"node 'c' .*input depth 3 must be a multiple of the filter's input depth 2",
        ),
        (
            lambda x, f: kl.ops.conv2d(
                kl.placeholder(F32, [2, 3, 3]), f, strides=[1, 1, 1, 1], padding="SAME", name="c"
            ),
            r"node 'c' .*input must be 4-D",
        ),
        (
            lambda x, f: kl.ops.conv2d(x, f, strides=[1, 1, 1, 1], padding="FULL", name="c"),
            r"FULL",
        ),
        (
            lambda x, f: kl.ops.depthwise_conv2d_native(
                x,
                kl.constant(np.zeros((3, 3, 4, 1), np.float32)),
                strides=[1, 1, 1, 1],
                padding="SAME",
                name="d",
            ),
            r"node 'd' .*input depth 3 must equal the filter's in_channels 4",
        ),
        (
            lambda x, f: kl.ops.max_pool(
                x, ksize=[1, 2, 2], strides=[1, 1, 1, 1], padding="SAME", name="p"
            ),
            r"node 'p' \(op MaxPool\): ksize must have 4 entries",
        ),
        (
            lambda x, f: kl.ops.avg_pool(
                x, ksize=[2, 2, 2, 1], strides=[1, 1, 1, 1], padding="SAME", name="p"
            ),
            r"node 'p' \(op AvgPool\): ksize \[2, 2, 2, 1\]: the batch and channel entries",
        ),
        (
            lambda x, f: kl.ops.conv2d_backprop_input(
                kl.constant(np.array([1, 5, 5, 3], np.int32)),
                f,
                kl.placeholder(F32, [1, 4, 4, 8]),
                strides=[1, 1, 1, 1],
                padding="SAME",
                name="b",
            ),
            r"node 'b' .*out_backprop's H size 4 does not match the 5",
        ),
        (
            lambda x, f: kl.ops.fused_batch_norm_v3(
                x, *(kl.constant(np.ones(4, np.float32)) for _ in range(4)), name="bn"
            ),
            r"node 'bn' \(op FusedBatchNormV3\): scale has 4 entries for 3 channels",
        ),
        (
            lambda x, f: kl.ops.lrn(x, depth_radius=-1, name="n"),
            r"node 'n' \(op LRN\): depth_radius must be non-negative",
        ),
    ],
)
def test_bad_attrs_and_shapes_fail_when_the_node_is_built(
    g: kl.Graph, build: Any, message: str
) -> None:
    x = _x([1, 2, 3, 3])
    f = kl.constant(np.zeros((3, 3, 3, 8), np.float32))
    with pytest.raises(kl.InvalidArgumentError, match=message):
        build(x, f)


def test_run_time_shape_errors_name_the_node() -> None:
    x = np.zeros((1, 2, 2, 3), np.float32)
    f = np.zeros((3, 3, 3, 4), np.float32)
    with pytest.raises(
        kl.KernelError, match=r"node 'tiny'.*computed output size would be negative"
    ):
        run_kernel("Conv2D", [x, f], {"strides": [1, 1, 1, 1], "padding": "VALID"}, name="tiny")
    with pytest.raises(kl.KernelError, match=r"node 'grad'.*out_backprop has shape"):
        run_kernel(
            "Conv2DBackpropInput",
            [np.array([1, 5, 5, 3], np.int32), f, np.zeros((1, 2, 2, 4), np.float32)],
            {"strides": [1, 1, 1, 1], "padding": "SAME"},
            name="grad",
        )
    stats = [np.ones(3, np.float32)] * 3 + [np.ones(2, np.float32)]
    with pytest.raises(kl.KernelError, match=r"node 'bn'.*variance must have shape \[3\]"):
        run_kernel("FusedBatchNormV3", [x, *stats], {"is_training": False}, name="bn")


def _registry(kind: str) -> klp.Registry:
    """numpy CPU only; or with a GPU: torch's kernels on a GPU bound to torch's CPU, or the
    CuPy plugin's kernels over numpy on a stand-in GPU of backend cupy."""
    if kind == "torch-gpu":
        return torch_registry()
    if kind == "cupy-gpu":
        return stand_in_registry()
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    return registry


@pytest.mark.parametrize("kind", ["numpy-cpu", "torch-gpu", "cupy-gpu"])
def test_a_resnet_style_block_matches_a_loop_reference(kind: str) -> None:
    """conv 3x3/2 -> batch norm (inference) -> relu -> conv 1x1 -> + projection shortcut ->
    max pool; references from the case table's loop formulations."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 9, 9, 4)).astype(np.float32)
    w1 = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    w2 = rng.standard_normal((1, 1, 6, 6)).astype(np.float32)
    ws = rng.standard_normal((1, 1, 4, 6)).astype(np.float32)
    bn = [rng.standard_normal(6).astype(np.float32) for _ in range(3)]
    bn.append(rng.random(6).astype(np.float32) + 0.5)
    registry = _registry(kind)
    graph = kl.Graph(registry)
    with graph.as_default():
        inp = kl.placeholder(F32, [None, 9, 9, 4], name="x")
        conv_a = {"strides": [1, 2, 2, 1], "padding": "SAME"}
        h = kl.ops.conv2d(inp, kl.constant(w1), **conv_a)
        h = kl.ops.fused_batch_norm_v3(
            h, *(kl.constant(v) for v in bn), epsilon=0.001, is_training=False
        )[0]
        h = kl.ops.conv2d(kl.ops.relu(h), kl.constant(w2), strides=[1, 1, 1, 1], padding="VALID")
        h = h + kl.ops.conv2d(inp, kl.constant(ws), **conv_a)
        pool = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}
        out = kl.ops.max_pool(h, **pool)
    metadata = kl.RunMetadata()
    with kl.Session(graph, registry=registry) as session:
        (value,) = session.run(
            [out], {inp: x}, options=kl.RunOptions(trace=True), run_metadata=metadata
        )
    assert metadata.step_stats is not None
    devices = {n.device.rsplit(":", 2)[-2] for n in metadata.step_stats.nodes if n.op == "Conv2D"}
    assert devices == {"CPU" if kind == "numpy-cpu" else "GPU"}
    a = ref.conv2d_reference(conv_a)(x.astype(np.float64), w1)
    a = ref.batch_norm_reference({"is_training": False, "epsilon": 0.001})(a, *bn)[0]
    a = np.maximum(a, 0) @ w2[0, 0]
    a = a + ref.conv2d_reference({"strides": [1, 2, 2, 1], "padding": "SAME"})(x, ws)
    expected = ref.max_pool_reference(pool)(a)
    np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-4)


def test_kernloom_ops_shows_the_ops() -> None:
    for op in ("Conv2D", "MaxPoolWithArgmax", "FusedBatchNormV3"):
        shown = subprocess.run(
            [sys.executable, "-m", "kernloom", "ops", op],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert op in shown and ("strides" in shown or "epsilon" in shown)


def test_installing_torch_makes_its_cpu_kernels_the_default_where_measured_faster() -> None:
    from kernloom_cpu_numpy import plugin as cpu_plugin
    from kernloom_gpu_torch import plugin as torch_plugin
    from kernloom_gpu_torch.kernels.conv import CPU_PREFERRED_OPS

    numpy_only = klp.Registry()
    numpy_only.register_plugin(cpu_plugin, name="cpu_numpy")
    both = klp.Registry()
    both.register_plugin(cpu_plugin, name="cpu_numpy")
    both.register_plugin(torch_plugin, name="gpu_torch")
    assert set(CPU_PREFERRED_OPS) == {
        "Conv2D",
        "DepthwiseConv2dNative",
        "Conv2DBackpropInput",
        "MaxPool",
        "AvgPool",
        "FusedBatchNormV3",
        "LRN",
    }
    x = np.random.default_rng(0).standard_normal((1, 5, 5, 2)).astype(np.float32)
    pool = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}
    expected = ref.max_pool_reference(pool)(x)
    for registry, plugin in ((numpy_only, "cpu_numpy"), (both, "gpu_torch")):
        run = run_kernel("MaxPool", [x], pool, registry=registry)
        np.testing.assert_array_equal(run.outputs[0], expected)
        chosen = [
            r
            for r in registry.kernels.kernels("MaxPool")
            if r.kernel_def.device_type == "CPU" and not r.kernel_def.label
        ]
        best = max(chosen, key=lambda r: r.kernel_def.priority)
        assert best.origin.plugin == plugin
    # A dtype torch cannot compute (uint16) keeps numpy's kernel even with torch installed.
    u16 = np.arange(25, dtype=np.uint16).reshape(1, 5, 5, 1)
    (out,) = run_kernel("MaxPool", [u16], pool, registry=both).outputs
    np.testing.assert_array_equal(out, ref.max_pool_reference(pool)(u16))


def test_zero_sized_filters_fail_when_the_node_is_built(g: kl.Graph) -> None:
    f = kl.constant(np.zeros((0, 3, 3, 8), np.float32))
    with pytest.raises(kl.InvalidArgumentError, match=r"node 'z'.*spatial size must be positive"):
        kl.ops.conv2d(_x([1, 4, 4, 3]), f, strides=[1, 1, 1, 1], padding="SAME", name="z")


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_geometries_match_the_loop_references(data: st.DataObject) -> None:
    """Conv2D and the pools over random sizes, windows, strides, dilations and paddings,
    NHWC and NCHW, on the numpy kernels and (where installed) the torch CPU kernels."""
    from kernloom_cpu_numpy import plugin as cpu_plugin

    numpy_only = klp.Registry()
    numpy_only.register_plugin(cpu_plugin, name="cpu_numpy")
    fmt = data.draw(st.sampled_from(["NHWC", "NCHW"]))
    h, w, c = (data.draw(st.integers(1, 7)) for _ in range(3))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    sh, sw, dh, dw = (data.draw(st.integers(1, 3)) for _ in range(4))
    padding = data.draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    pads = [data.draw(st.integers(0, 2)) for _ in range(4)]

    def four(a: int, b: int) -> list[int]:
        return [1, a, b, 1] if fmt == "NHWC" else [1, 1, a, b]

    attrs: dict[str, Any] = {"strides": four(sh, sw), "padding": padding, "data_format": fmt}
    if padding == "EXPLICIT":
        hw_pads = [[0, 0], pads[:2], pads[2:], [0, 0]]
        order = (0, 1, 2, 3) if fmt == "NHWC" else (0, 3, 1, 2)
        attrs["explicit_paddings"] = [p for i in order for p in hw_pads[i]]
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    extra = (pads[0] + pads[1], pads[2] + pads[3]) if padding == "EXPLICIT" else (0, 0)
    if padding != "SAME" and (h + extra[0] < span_h or w + extra[1] < span_w):
        return  # no output: the error path is tested above
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((2, h, w, c)).astype(np.float64)
    x = x if fmt == "NHWC" else x.transpose(0, 3, 1, 2).copy()
    f = rng.standard_normal((kh, kw, c, 2))
    conv = {**attrs, "dilations": four(dh, dw)}
    expected = ref.conv2d_reference(conv)(x, f)
    for registry in (numpy_only, klp.default_registry()):
        (out,) = run_kernel("Conv2D", [x, f], conv, registry=registry).outputs
        np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)
    if padding == "EXPLICIT" and (max(pads[:2]) >= kh or max(pads[2:]) >= kw):
        return  # a pool window wholly in the padding has no real element
    pool = {**attrs, "ksize": four(kh, kw)}
    for op, reference in (("MaxPool", ref.max_pool_reference), ("AvgPool", ref.avg_pool_reference)):
        if op == "AvgPool" and padding == "EXPLICIT":
            continue  # AvgPool takes SAME and VALID only
        for registry in (numpy_only, klp.default_registry()):
            (out,) = run_kernel(op, [x], pool, registry=registry).outputs
            np.testing.assert_allclose(out, reference(pool)(x), rtol=1e-10, atol=1e-10)


KINDS = ["numpy-cpu", "torch-cpu", "torch-gpu", "cupy-gpu"]
"""The kernels the grouped and epsilon-0 tests run: numpy's, the torch plugin's CPU kernel
(label ``torch``), torch's GPU kernel on the CPU-bound stand-in, CuPy's over numpy."""


def _run_on(kind: str, op: str, inputs: list[Any], attrs: dict[str, Any], **kw: Any) -> Any:
    if kind == "torch-cpu":
        from kernloom_cpu_numpy import plugin as cpu_plugin
        from kernloom_gpu_torch import plugin as torch_plugin

        registry = klp.Registry()
        registry.register_plugin(cpu_plugin, name="cpu_numpy")
        registry.register_plugin(torch_plugin, name="gpu_torch")
        return run_kernel(op, inputs, attrs, registry=registry, label="torch", **kw)
    device = "CPU:0" if kind == "numpy-cpu" else "GPU:0"
    return run_kernel(op, inputs, attrs, registry=_registry(kind), device=device, **kw)


# TensorFlow 2.21 (tf.raw_ops.Conv2DBackpropInput, its default oneDNN CPU kernel; NCHW gave
# the same values transposed) for GROUPED_W and GROUPED_DY below: SAME padding, stride 1
# into input_sizes [1, 3, 4, 4], stride 2 into [1, 5, 7, 4]. Integer-valued, so exact.
GROUPED_W = (np.arange(32) % 7 - 3).astype(np.float32).reshape(2, 2, 2, 4)  # 2 groups
GROUPED_DY = (np.arange(48) % 5 - 2).astype(np.float32).reshape(1, 3, 4, 4)
TF_GROUPED_DX = {  # stride: dx [1, H, W, 4] flattened, a row of the image per line
    1: (
        "8 -4 0 -3 3 -9 2 -5 -9 3 2 0 -6 10 -3 20 "
        "5 -4 1 -4 7 14 4 -8 0 -14 -4 1 -7 -7 -7 0 "
        "-1 -1 3 8 4 2 7 -7 7 14 4 -8 0 -14 -4 1"
    ),
    2: (
        "8 -4 0 -3 5 -7 1 -2 -2 -2 1 -3 -2 -2 0 3 -7 5 2 -3 -4 8 -1 8 -2 2 -2 12 "
        "2 -3 2 -1 -1 8 3 0 -2 12 -1 2 -2 -2 -2 1 -1 -3 -4 5 2 -7 -7 2 0 -3 -2 -2 "
        "3 -1 -1 -3 2 -2 2 -7 8 -4 0 -3 5 -7 1 -2 -2 -2 1 -3 -2 -2 0 3 -7 5 2 -3 "
        "1 -3 5 -4 0 3 8 -1 2 -3 2 -1 -1 8 3 0 -2 12 -1 2 -2 -2 -2 1 -1 -3 -4 5 "
        "-2 2 -2 12 -1 3 -2 -2 3 -1 -1 -3 2 -2 2 -7 8 -4 0 -3 5 -7 1 -2 -2 -2 1 -3"
    ),
}


def _grouped_dx_loop(sizes: list[int], w: np.ndarray, dy: np.ndarray, stride: int) -> Any:
    """The gradient of grouped Conv2D (SAME) w.r.t. its input, element by element: group g's
    input channels get dy's group-g channels times the filter's group-g columns."""
    n, h, wd, c = sizes
    kh, kw, group_depth, out_depth = w.shape
    groups = c // group_depth
    per = out_depth // groups
    oh, ow = dy.shape[1:3]
    top = max((oh - 1) * stride + kh - h, 0) // 2
    left = max((ow - 1) * stride + kw - wd, 0) // 2
    dx = np.zeros((n, h, wd, c))
    for i, j, p, q, g in np.ndindex(oh, ow, kh, kw, groups):
        r, s = i * stride + p - top, j * stride + q - left
        if 0 <= r < h and 0 <= s < wd:
            for ci, co in np.ndindex(group_depth, per):
                dx[:, r, s, g * group_depth + ci] += (
                    dy[:, i, j, g * per + co] * w[p, q, ci, g * per + co]
                )
    return dx


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("stride", [1, 2])
def test_grouped_backprop_input_matches_tensorflow(
    kind: str, data_format: str, stride: int
) -> None:
    """Conv2DBackpropInput of a grouped convolution (input depth 4, filter [2, 2, 2, 4]: 2
    groups), which Conv2D accepts and TensorFlow computes; kernloom refused it."""
    sizes = [1, 3, 4, 4] if stride == 1 else [1, 5, 7, 4]
    expected = np.array(TF_GROUPED_DX[stride].split(), np.float32).reshape(1, sizes[1], sizes[2], 4)
    np.testing.assert_array_equal(_grouped_dx_loop(sizes, GROUPED_W, GROUPED_DY, stride), expected)
    attrs: dict[str, Any] = {"strides": [1, stride, stride, 1], "padding": "SAME"}
    dy = GROUPED_DY
    if data_format == "NCHW":
        attrs = {"strides": [1, 1, stride, stride], "padding": "SAME", "data_format": "NCHW"}
        sizes = [sizes[0], sizes[3], sizes[1], sizes[2]]
        dy, expected = dy.transpose(0, 3, 1, 2), expected.transpose(0, 3, 1, 2)
    for dtype in (np.float32, np.float64, np.float16):
        inputs = [np.array(sizes, np.int32), GROUPED_W.astype(dtype), dy.astype(dtype)]
        (out,) = _run_on(kind, "Conv2DBackpropInput", inputs, attrs).outputs
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, expected.astype(dtype))


@pytest.mark.parametrize("kind", KINDS)
def test_grouped_backprop_input_matches_the_loop_reference(kind: str) -> None:
    """Random values, 3 groups of 2 input and 3 output channels, stride 2 with SAME's odd pad:
    against the element-by-element loop, and the transpose of grouped Conv2D (<dx, x> ==
    <dy, conv(x)>)."""
    rng = np.random.default_rng(7)
    sizes = [2, 6, 5, 6]
    w = rng.standard_normal((3, 2, 2, 9))
    dy = rng.standard_normal((2, 3, 3, 9))
    x = rng.standard_normal(sizes)
    attrs = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    expected = _grouped_dx_loop(sizes, w, dy, 2)
    (conv,) = run_kernel("Conv2D", [x, w], attrs, registry=_registry("numpy-cpu")).outputs
    assert np.isclose((expected * x).sum(), (dy * conv).sum(), rtol=1e-12)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        inputs = [np.array(sizes, np.int32), w.astype(dtype), dy.astype(dtype)]
        (out,) = _run_on(kind, "Conv2DBackpropInput", inputs, attrs).outputs
        np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("depth", "f_shape", "message"),
    [
        (5, (3, 3, 2, 6), r"input depth 5 must be a multiple of the filter's input depth 2"),
        (2, (3, 3, 4, 6), r"input depth 2 must be a multiple of the filter's input depth 4"),
        (4, (3, 3, 2, 5), r"the filter's output depth 5 must be a multiple of the number of gr"),
    ],
)
def test_backprop_input_groups_rule_fails_when_the_node_is_built(
    g: kl.Graph, depth: int, f_shape: tuple[int, ...], message: str
) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=rf"node 'b' .*{message}"):
        kl.ops.conv2d_backprop_input(
            kl.constant(np.array([1, 4, 4, depth], np.int32)),
            kl.constant(np.zeros(f_shape, np.float32)),
            kl.placeholder(F32, [1, 4, 4, f_shape[3]]),
            strides=[1, 1, 1, 1],
            padding="SAME",
            name="b",
        )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("depth", "f_shape"), [(5, (3, 3, 2, 6)), (2, (3, 3, 4, 6)), (4, (3, 3, 2, 5))]
)
def test_backprop_input_groups_rule_fails_in_the_kernel(
    kind: str, depth: int, f_shape: tuple[int, ...]
) -> None:
    inputs = [
        np.array([1, 4, 4, depth], np.int32),
        np.zeros(f_shape, np.float32),
        np.zeros((1, 4, 4, f_shape[3]), np.float32),
    ]
    rule = (
        rf"node 'grad'.*input depth {depth} must be a multiple of the filter's input depth "
        rf"{f_shape[2]}, and the filter's output depth {f_shape[3]} of the group count"
    )
    with pytest.raises(kl.KernelError, match=rule):
        _run_on(
            kind,
            "Conv2DBackpropInput",
            inputs,
            {"strides": [1] * 4, "padding": "SAME"},
            name="grad",
        )


# TensorFlow 2.21 (tf.raw_ops.FusedBatchNormV3, is_training=True, epsilon=0.0, CPU; float16
# x gave y rounded to float16, NCHW the same values transposed) for BN_X, BN_SCALE, BN_OFFSET,
# BN_MEAN, BN_VARIANCE below. Channel 0 is constant: variance 0, y NaN (0 / 0).
BN_X = np.array(
    [[[[1.5, 0.25, -1.0], [1.5, 2.0, 0.5]], [[1.5, -0.75, 3.0], [1.5, 1.0, -2.5]]]], np.float32
)
BN_SCALE, BN_OFFSET = np.array([1, 2, 0.5], np.float32), np.array([0.5, -1, 0], np.float32)
BN_MEAN, BN_VARIANCE = np.array([0.5, -1, 2], np.float32), np.array([1, 2, 3], np.float32)
TF_BN_Y = {  # y [1, 2, 2, 3] flattened
    np.float32: (
        "nan -1.7442083358764648 -0.24618297815322876 nan 1.7287640571594238 "
        "0.12309148907661438 nan -3.728764057159424 0.7385489344596863 "
        "nan -0.2557916045188904 -0.6154574155807495"
    ),
    np.float16: (
        "nan -1.744140625 -0.2462158203125 nan 1.728515625 0.12310791015625 "
        "nan -3.728515625 0.73876953125 nan -0.255859375 -0.615234375"
    ),
}
TF_BN_RUNNING = {  # exponential_avg_factor: (batch_mean, batch_variance (Bessel-corrected))
    1.0: ([1.5, 0.625, 0.0], [0.0, 1.3541667461395264, 5.5]),
    0.25: ([0.75, -0.59375, 1.5], [0.75, 1.8385417461395264, 3.625]),
}


@pytest.mark.parametrize("kind", ["torch-cpu", "torch-gpu", "cupy-gpu"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("factor", [1.0, 0.25])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_training_batch_norm_with_epsilon_0_matches_tensorflow(
    kind: str, data_format: str, factor: float, dtype: Any
) -> None:
    """epsilon 0 in training: y = (x - mean) / sqrt(variance), NaN where the variance is 0,
    as TensorFlow and the numpy kernel (run beside each, the two must agree); torch's
    batch_norm refuses eps 0 in training."""
    x = BN_X.astype(dtype)
    y = np.array(TF_BN_Y[dtype].split(), dtype).reshape(BN_X.shape)
    # numpy directly (float64): the same values, and NaN in the constant channel.
    m, v = BN_X.astype(np.float64).mean(axis=(0, 1, 2)), BN_X.astype(np.float64).var(axis=(0, 1, 2))
    with np.errstate(invalid="ignore"):
        direct = (BN_X - m) / np.sqrt(v) * BN_SCALE + BN_OFFSET
    tf_y = np.array(TF_BN_Y[np.float32].split(), np.float32).reshape(BN_X.shape)
    np.testing.assert_allclose(direct, tf_y, rtol=1e-6, equal_nan=True)
    if data_format == "NCHW":
        x, y = x.transpose(0, 3, 1, 2), y.transpose(0, 3, 1, 2)
    attrs = {
        "epsilon": 0.0,
        "is_training": True,
        "exponential_avg_factor": factor,
        "data_format": data_format,
    }
    inputs = [x, BN_SCALE, BN_OFFSET, BN_MEAN, BN_VARIANCE]
    numpy_out = _run_on("numpy-cpu", "FusedBatchNormV3", inputs, attrs).outputs
    out = _run_on(kind, "FusedBatchNormV3", inputs, attrs).outputs
    tol = 1e-3 if dtype == np.float16 else 1e-6
    for got in (numpy_out, out):
        assert got[0].dtype == dtype
        np.testing.assert_allclose(got[0], y, rtol=tol, atol=tol)  # NaN where TF's is NaN
        mean, variance = TF_BN_RUNNING[factor]
        np.testing.assert_allclose(got[1], mean, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got[2], variance, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got[3], [1.5, 0.625, 0.0], rtol=1e-6, atol=1e-7)  # mean
        np.testing.assert_allclose(got[4], v, rtol=1e-6, atol=1e-7)  # biased variance
    for got, want in zip(out, numpy_out, strict=True):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
