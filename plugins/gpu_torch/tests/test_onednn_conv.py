"""The oneDNN CPU convolution (``kernels/onednn.py``): its reordered-filter cache must never
serve a filter that changed (a variable, a feed), its geometry must be TF's (asymmetric
SAME, groups, both layouts), and its channels_last outputs must read as the NCHW values
they are. References are the case table's loop convolution, in float64."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from test_torch_labelled_cpu import REGISTRY

import kernloom as kl
from kernloom.testing import run_kernel
from kernloom.testing.cases.nn import conv2d_reference
from kernloom_gpu_torch.kernels._util import is_constant

RNG = np.random.default_rng(7)


def _floats(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.standard_normal(shape).astype(np.float32)


def _reference(x: Any, f: Any, **attrs: Any) -> np.ndarray[Any, Any]:
    result: np.ndarray[Any, Any] = conv2d_reference(attrs)(
        np.asarray(x, np.float64), np.asarray(f, np.float64)
    )
    return result


def _session(graph: kl.Graph, threads: int = 1, optimizer: bool = True) -> kl.Session:
    config = kl.SessionConfig(
        inter_op_threads=1, intra_op_threads=threads, graph_optimizer=optimizer
    )
    return kl.Session(graph, config, registry=REGISTRY)


def _kernels(session: kl.Session, fetch: Any, feeds: dict[Any, Any]) -> dict[str, str]:
    """op -> kernel class of a traced run, to show which kernel computed it."""
    metadata = kl.RunMetadata()
    session.run(fetch, feeds, options=kl.RunOptions(trace=True), run_metadata=metadata)
    assert metadata.step_stats is not None
    return {n.op: n.kernel for n in metadata.step_stats.nodes}


LAYOUTS = ["NHWC", "NCHW"]


def _image(fmt: str, n: int, h: int, w: int, c: int) -> np.ndarray[Any, Any]:
    return _floats(n, h, w, c) if fmt == "NHWC" else _floats(n, c, h, w)


def _strides(fmt: str, s: int) -> list[int]:
    return [1, s, s, 1] if fmt == "NHWC" else [1, 1, s, s]


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_a_variable_filter_changed_between_runs_gives_the_new_result(fmt: str) -> None:
    x, f1, f2 = _image(fmt, 1, 6, 6, 4), _floats(3, 3, 4, 5), _floats(3, 3, 4, 5)
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, list(x.shape))
        v = kl.Variable(f1, name="filter")
        y = kl.ops.conv2d(xp, v.value(), strides=_strides(fmt, 1), padding="SAME", data_format=fmt)
        assign = v.assign(kl.constant(f2))
    attrs = {"strides": _strides(fmt, 1), "padding": "SAME", "data_format": fmt}
    with _session(g) as sess:
        sess.run(v.initializer)
        assert _kernels(sess, y, {xp: x})["Conv2D"] == "OneDnnConv2D"
        np.testing.assert_allclose(sess.run(y, {xp: x}), _reference(x, f1, **attrs), atol=1e-4)
        sess.run(assign)
        np.testing.assert_allclose(sess.run(y, {xp: x}), _reference(x, f2, **attrs), atol=1e-4)


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_a_fed_filter_is_never_served_from_the_cache(fmt: str) -> None:
    """The same numpy array, changed in place between runs: every run sees its content."""
    x, f = _image(fmt, 2, 5, 5, 3), _floats(2, 2, 3, 4)
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, list(x.shape))
        fp = kl.placeholder(kl.float32, list(f.shape))
        y = kl.ops.conv2d(xp, fp, strides=_strides(fmt, 1), padding="VALID", data_format=fmt)
    attrs = {"strides": _strides(fmt, 1), "padding": "VALID", "data_format": fmt}
    with _session(g) as sess:
        for scale in (1.0, -2.0, 0.5):
            expected = _reference(x, f, **attrs)
            np.testing.assert_allclose(sess.run(y, {xp: x, fp: f}), expected, atol=1e-4)
            f *= scale + 1.0  # in place: the same object, new content


@pytest.mark.parametrize("fmt", LAYOUTS)
@pytest.mark.parametrize("size", [7, 8])
def test_asymmetric_same_padding_matches_tf(fmt: str, size: int) -> None:
    """Stride 2 on an even size pads only at the end (TF's SAME): oneDNN takes symmetric
    padding, so the kernel pads the input first."""
    x, f = _image(fmt, 1, size, size, 3), _floats(3, 3, 3, 6)
    attrs = {"strides": _strides(fmt, 2), "padding": "SAME", "data_format": fmt}
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, list(x.shape))
        y = kl.ops.conv2d(xp, kl.constant(f), **attrs)
    with _session(g) as sess:
        assert _kernels(sess, y, {xp: x})["Conv2D"] == "OneDnnConv2D"
        for _ in range(2):  # the second run reads the reordered filter from the cache
            np.testing.assert_allclose(sess.run(y, {xp: x}), _reference(x, f, **attrs), atol=1e-4)


@pytest.mark.parametrize("fmt", LAYOUTS)
@pytest.mark.parametrize(("channels", "depth", "out"), [(8, 2, 12), (6, 1, 6), (4, 1, 8)])
def test_grouped_and_depthwise_convolutions(fmt: str, channels: int, depth: int, out: int) -> None:
    """Filter depth below the input's: 4 groups; depth 1 is a depthwise convolution (with
    a channel multiplier of 2 in the last case), with dilation 2."""
    x, f = _image(fmt, 2, 9, 9, channels), _floats(3, 3, depth, out)
    dilations = [1, 2, 2, 1] if fmt == "NHWC" else [1, 1, 2, 2]
    attrs = {"strides": _strides(fmt, 1), "padding": "SAME", "data_format": fmt}
    g = kl.Graph()
    with g.as_default():
        y = kl.ops.conv2d(kl.constant(x), kl.constant(f), dilations=dilations, **attrs)
    with _session(g) as sess:
        expected = _reference(x, f, dilations=dilations, **attrs)
        np.testing.assert_allclose(sess.run(y), expected, atol=1e-4)


def test_a_new_batch_size_reorders_again() -> None:
    """The cache is per input shape too: batch 1, then 3, then 1 again."""
    f = _floats(3, 3, 4, 4)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW"}
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [None, 4, 6, 6])
        y = kl.ops.conv2d(xp, kl.constant(f), **attrs)
    with _session(g) as sess:
        for n in (1, 3, 1):
            x = _floats(n, 4, 6, 6)
            np.testing.assert_allclose(sess.run(y, {xp: x}), _reference(x, f, **attrs), atol=1e-4)


def test_a_new_spatial_size_gets_its_own_padding() -> None:
    """The geometry (padding, output size) is kept per input shape: SAME with stride 2
    pads symmetrically on a 7x7 input and only after on a 6x6 one, run alternately."""
    f = _floats(3, 3, 4, 5)
    attrs = {"strides": [1, 1, 2, 2], "padding": "SAME", "data_format": "NCHW"}
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [None, 4, None, None])
        y = kl.ops.conv2d(xp, kl.constant(f), **attrs)
    with _session(g) as sess:
        for n, h, w in ((1, 6, 6), (2, 7, 7), (1, 6, 6), (1, 7, 5), (2, 7, 7)):
            x = _floats(n, 4, h, w)
            got = sess.run(y, {xp: x})
            assert got.shape == (n, 5, (h + 1) // 2, (w + 1) // 2)
            np.testing.assert_allclose(got, _reference(x, f, **attrs), atol=1e-4)


def _resnet_block(fmt: str) -> tuple[kl.Graph, Any, Any, Any]:
    """conv+bias+relu, conv+bias, add the input, relu: the optimizer makes two
    ``_FusedConv2D``, the second adding the fed input as its residual (a fed NCHW array is
    in C order while oneDNN writes NHWC memory: the two layouts meet in the add)."""
    x = _image(fmt, 2, 6, 6, 8)
    f1, f2, b1, b2 = _floats(3, 3, 8, 8), _floats(1, 1, 8, 8), _floats(8), _floats(8)
    attrs = {"strides": _strides(fmt, 1), "padding": "SAME", "data_format": fmt}
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, list(x.shape))
        h = kl.ops.relu(
            kl.ops.bias_add(kl.ops.conv2d(xp, kl.constant(f1), **attrs), b1, data_format=fmt)
        )
        h = kl.ops.bias_add(kl.ops.conv2d(h, kl.constant(f2), **attrs), b2, data_format=fmt)
        y = kl.ops.relu(kl.ops.add_v2(h, xp))
    axis = [1, 1, 1, -1] if fmt == "NHWC" else [1, -1, 1, 1]
    h_ref = np.maximum(_reference(x, f1, **attrs) + b1.reshape(axis), 0)
    expected = np.maximum(_reference(h_ref, f2, **attrs) + b2.reshape(axis) + x, 0)
    return g, (xp, x), y, expected


@pytest.mark.parametrize("fmt", LAYOUTS)
def test_a_fused_residual_block_matches_the_reference(fmt: str) -> None:
    g, (xp, x), y, expected = _resnet_block(fmt)
    with _session(g) as sess:
        metadata = kl.RunMetadata()
        value = sess.run(y, {xp: x}, options=kl.RunOptions(trace=True), run_metadata=metadata)
        assert metadata.step_stats is not None
        ran = [(n.op, n.kernel) for n in metadata.step_stats.nodes if n.op.startswith("_Fused")]
        assert ran == [("_FusedConv2D", "OneDnnFusedConv2D")] * 2
        (graph,) = metadata.partition_graphs.values()
        fused = graph.node(y.node.name)
        assert list(fused.attrs["fused_ops"]) == ["BiasAdd", "Add", "Relu"]
    np.testing.assert_allclose(value, expected, atol=1e-3)
    with _session(g, optimizer=False) as sess:
        np.testing.assert_allclose(sess.run(y, {xp: x}), expected, atol=1e-3)


def test_an_nchw_result_stays_in_channels_last_memory() -> None:
    """Two convolutions' outputs (one fused with bias and ReLU, one alone), and the fused
    add+relu of both, keep NHWC memory (no transpose between layers); read as NCHW, the
    values are the reference's. (A lone numpy elementwise kernel would write C order.)"""
    x, f1, f2 = _image("NCHW", 2, 6, 6, 8), _floats(3, 3, 8, 8), _floats(1, 1, 8, 8)
    b1 = _floats(8)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW"}
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, list(x.shape))
        h = kl.ops.conv2d(xp, kl.constant(f1), **attrs)
        h = kl.ops.relu(kl.ops.bias_add(h, kl.constant(b1), data_format="NCHW"))
        y = kl.ops.relu(kl.ops.add_v2(kl.ops.conv2d(h, kl.constant(f2), **attrs), h))
    h_ref = np.maximum(_reference(x, f1, **attrs) + b1.reshape(1, -1, 1, 1), 0)
    expected = np.maximum(_reference(h_ref, f2, **attrs) + h_ref, 0)
    with _session(g) as sess:
        assert "_FusedElementwise" in _kernels(sess, y, {xp: x})
        value = sess.run(y, {xp: x})  # (a fetch is a C-order copy)
    np.testing.assert_allclose(value, expected, atol=1e-3)


def _channels_last(*shape: int) -> tuple[int, ...]:
    return tuple(torch.empty(*shape).to(memory_format=torch.channels_last).numpy().strides)


def test_an_nchw_convolution_writes_channels_last_memory() -> None:
    x, f = _image("NCHW", 2, 5, 5, 4), _floats(3, 3, 4, 6)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW"}
    run = run_kernel("Conv2D", [x, f], attrs, registry=REGISTRY)
    assert type(run.kernel).__name__ == "OneDnnConv2D"
    (y,) = run.outputs
    assert y.shape == (2, 6, 5, 5) and y.strides == _channels_last(2, 6, 5, 5)
    np.testing.assert_allclose(y, _reference(x, f, **attrs), atol=1e-4)


def test_fused_elementwise_keeps_its_inputs_memory_order() -> None:
    """``_FusedElementwise`` (the torch plugin's CPU default, on its numpy path at this
    size and its torch path at the size after) on two NCHW arrays in NHWC memory writes
    NHWC memory too (so the next convolution needs no transpose)."""
    a, b = (np.ascontiguousarray(_floats(2, 5, 5, 3)).transpose(0, 3, 1, 2) for _ in range(2))
    attrs = {"expression": "AddV2(i0, i1); Relu(t0)"}
    (y,) = run_kernel("_FusedElementwise", [[a, b]], attrs, registry=REGISTRY).outputs
    assert y.strides == a.strides
    np.testing.assert_array_equal(y, np.maximum(a + b, 0))
    big = [np.ascontiguousarray(_floats(2, 64, 32, 16)).transpose(0, 3, 1, 2) for _ in range(2)]
    (y,) = run_kernel("_FusedElementwise", [big], attrs, registry=REGISTRY).outputs
    assert y.strides == big[0].strides
    np.testing.assert_allclose(y, np.maximum(big[0] + big[1], 0), rtol=1e-6)


@pytest.mark.parametrize(
    ("activation", "fn"), [("Relu", "relu"), ("Relu6", "relu6"), ("Elu", "elu")]
)
def test_fused_activations_and_nan(activation: str, fn: str) -> None:
    """ReLU of NaN is NaN in TensorFlow (oneDNN's ReLU post-op would give 0): a NaN in the
    input stays NaN in every output it reaches."""
    x, f, b = _floats(1, 4, 4, 2), _floats(1, 1, 2, 3), _floats(3)
    x[0, 1, 2, 0] = np.nan
    attrs = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC"}
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, list(x.shape))
        h = kl.ops.bias_add(kl.ops.conv2d(xp, kl.constant(f), **attrs), kl.constant(b))
        y = getattr(kl.ops, fn)(h)
    z = _reference(x, f, **attrs) + b
    expected = {
        "relu": np.where(np.isnan(z), np.nan, np.maximum(z, 0)),
        "relu6": np.where(np.isnan(z), np.nan, np.clip(z, 0, 6)),
        "elu": np.where(z > 0, z, np.expm1(np.minimum(z, 0))),
    }[fn]
    with _session(g) as sess:
        kernels = _kernels(sess, y, {xp: x})
        assert kernels["_FusedConv2D"] == "OneDnnFusedConv2D", kernels
        np.testing.assert_allclose(sess.run(y, {xp: x}), expected, atol=1e-5)


def test_the_session_thread_count_is_torch_s() -> None:
    x, f = _floats(1, 5, 5, 2), _floats(3, 3, 2, 2)
    g = kl.Graph()
    with g.as_default():
        y = kl.ops.conv2d(kl.constant(x), kl.constant(f), strides=[1, 1, 1, 1], padding="SAME")
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            with _session(g, threads=threads) as sess:
                sess.run(y)
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


def test_only_read_only_arrays_count_as_constant() -> None:
    a = np.zeros(3, np.float32)
    assert not is_constant(a)
    view = a.view()
    view.setflags(write=False)
    assert is_constant(view)
    assert not is_constant(torch.zeros(3))


def test_a_fed_bias_is_never_served_from_the_cache() -> None:
    x, f, b = _floats(1, 4, 4, 2), _floats(1, 1, 2, 3), _floats(3)
    attrs = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC"}
    g = kl.Graph()
    with g.as_default():
        bp = kl.placeholder(kl.float32, [3])
        fused = {**attrs, "fused_ops": ["BiasAdd"]}  # (the optimizer fuses constant biases)
        y = g.apply_op("_FusedConv2D", [kl.constant(x), kl.constant(f), [bp]], fused)
    with _session(g) as sess:
        assert _kernels(sess, y, {bp: b})["_FusedConv2D"] == "OneDnnFusedConv2D"
        for step in (1.0, -4.0):
            np.testing.assert_allclose(
                sess.run(y, {bp: b}), _reference(x, f, **attrs) + b, atol=1e-5
            )
            b += step  # in place: the same array object, new content


@pytest.mark.parametrize("fused", [False, True])
def test_a_kept_plan_is_used_only_for_the_same_input_layout(fused: bool) -> None:
    """The call worked out for one input (its shape, strides, the constant filter and bias)
    is made again only for the same: an NCHW input fed in C order, then in NHWC memory,
    then a new batch, then C order again, each gives the reference's values."""
    f, b = _floats(3, 3, 4, 5), _floats(5)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW"}
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [None, 4, 6, 6])
        y = kl.ops.conv2d(xp, kl.constant(f), **attrs)
        if fused:
            y = kl.ops.relu(kl.ops.bias_add(y, kl.constant(b), data_format="NCHW"))
    axis = [1, -1, 1, 1]
    seen = []
    with _session(g) as sess:
        for n, nhwc in ((1, False), (1, True), (1, True), (2, True), (1, False)):
            x = _floats(n, 4, 6, 6)
            fed = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) if nhwc else x
            want = _reference(x, f, **attrs)
            want = np.maximum(want + b.reshape(axis), 0) if fused else want
            np.testing.assert_allclose(sess.run(y, {xp: fed}), want, atol=1e-4)
            seen.append((fed.shape, fed.strides))
    assert len(set(seen)) == 3  # (a feed reaches the kernel as a view with its strides)


def test_a_residual_of_the_wrong_shape_fails_after_a_kept_plan() -> None:
    x, f, b = _floats(1, 4, 4, 2), _floats(1, 1, 2, 3), _floats(3)
    attrs = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC"}
    g = kl.Graph()
    with g.as_default():
        rp = kl.placeholder(kl.float32, [None, None, None, None])
        fused = {**attrs, "fused_ops": ["BiasAdd", "Add", "Relu"]}
        y = g.apply_op(
            "_FusedConv2D", [kl.constant(x), kl.constant(f), [kl.constant(b), rp]], fused
        )
    good = _floats(1, 4, 4, 3)
    want = np.maximum(_reference(x, f, **attrs) + b + good, 0)
    with _session(g) as sess:
        np.testing.assert_allclose(sess.run(y, {rp: good}), want, atol=1e-5)
        with pytest.raises(kl.errors.KernloomError, match=r"residual has shape \(1, 4, 4, 1\)"):
            sess.run(y, {rp: _floats(1, 4, 4, 1)})
        np.testing.assert_allclose(sess.run(y, {rp: good}), want, atol=1e-5)
