"""A ResNet-style block with inference batch norm: the norms fold into the convolutions
(no FusedBatchNormV3 left in the graph that runs) and the block returns what the
unoptimised graph returns, and what numpy computes directly."""

from __future__ import annotations

import numpy as np
import pytest
from optimizer_helpers import activated, ops_of, run_graph, run_pass, step_graph

import kernloom as kl
from kernloom.optimizer import BatchNormFolding

RNG = np.random.default_rng(7)
EPS = 1e-3


def _norm_params(channels: int) -> list[np.ndarray]:
    scale = RNG.uniform(0.5, 1.5, channels).astype(np.float32)
    offset = RNG.standard_normal(channels).astype(np.float32)
    mean = RNG.standard_normal(channels).astype(np.float32)
    variance = RNG.uniform(0.2, 2.0, channels).astype(np.float32)
    return [scale, offset, mean, variance]


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """SAME convolution, stride 1, NHWC x HWIO, as a sum over the filter taps."""
    kh, kw = w.shape[:2]
    padded = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    out = np.zeros((*x.shape[:3], w.shape[3]), np.float64)
    for i in range(kh):
        for j in range(kw):
            window = padded[:, i : i + x.shape[1], j : j + x.shape[2], :]
            out += np.einsum("nhwc,cd->nhwd", window, w[i, j])
    return out


def _block() -> tuple[kl.Graph, kl.Tensor, kl.Tensor, dict[str, list[np.ndarray]]]:
    w1 = (RNG.standard_normal((3, 3, 4, 4)) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((3, 3, 4, 4)) * 0.3).astype(np.float32)
    p1, p2 = _norm_params(4), _norm_params(4)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 6, 6, 4], name="x")

        def conv_bn(inp: kl.Tensor, w: np.ndarray, params: list[np.ndarray], tag: str) -> kl.Tensor:
            conv = kl.ops.conv2d(
                inp, kl.constant(w), strides=[1, 1, 1, 1], padding="SAME", name=f"{tag}_conv"
            )
            outs = kl.ops.fused_batch_norm_v3(
                conv,
                *(kl.constant(p) for p in params),
                epsilon=EPS,
                is_training=False,
                name=f"{tag}_bn",
            )
            return outs[0]

        h = kl.ops.relu(conv_bn(x, w1, p1, "a"), name="a_relu")
        y = kl.ops.relu(kl.ops.add(conv_bn(h, w2, p2, "b"), x, name="residual"), name="out")
    return g, x, y, {"w": [w1, w2], "p1": p1, "p2": p2}


def _bn(z: np.ndarray, params: list[np.ndarray]) -> np.ndarray:
    scale, offset, mean, variance = (p.astype(np.float64) for p in params)
    return (z - mean) / np.sqrt(variance + EPS) * scale + offset


@pytest.mark.skipif("FusedBatchNormV3" not in kl.Graph().ops, reason="no conv ops")
def test_a_resnet_block_runs_with_its_norms_folded_away() -> None:
    g, x, y, p = _block()
    xv = RNG.standard_normal((2, 6, 6, 4)).astype(np.float32)
    on, nodes = run_graph(g, y, {x: xv})
    off, plain_nodes = run_graph(g, y, {x: xv}, graph_optimizer=False)
    assert "FusedBatchNormV3" in ops_of(plain_nodes)
    assert "FusedBatchNormV3" not in ops_of(nodes)
    # Folded into Conv2D + BiasAdd, which the remapper then fuses (with the first Relu).
    fused = [n for n in nodes if n.op == "_FusedConv2D"]
    assert [n.attrs["fused_ops"] for n in fused] == [["BiasAdd", "Relu"], ["BiasAdd"]]
    assert [n.attrs["_fused_from"] for n in fused] == [
        ["a_conv", "a_bn", "a_relu"],
        ["b_conv", "b_bn"],
    ]
    np.testing.assert_allclose(on, off, rtol=1e-4, atol=1e-5)
    unfused, unfused_nodes = run_graph(g, y, {x: xv}, disabled_passes=("remapper",))
    assert sorted(ops_of(unfused_nodes)).count("BiasAdd") == 2
    assert "FusedBatchNormV3" not in ops_of(unfused_nodes)
    np.testing.assert_allclose(unfused, off, rtol=1e-4, atol=1e-5)
    h = np.maximum(_bn(_conv_reference(xv, p["w"][0]), p["p1"]), 0)
    want = np.maximum(_bn(_conv_reference(h, p["w"][1]), p["p2"]) + xv, 0)
    np.testing.assert_allclose(on, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif("FusedBatchNormV3" not in kl.Graph().ops, reason="no conv ops")
def test_a_training_norm_or_a_shared_convolution_is_left_alone() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 4, 4, 2], name="x")
        w = kl.constant(np.ones((1, 1, 2, 2), np.float32))
        conv = kl.ops.conv2d(x, w, strides=[1, 1, 1, 1], padding="VALID", name="conv")
        params = [kl.constant(v) for v in _norm_params(2)]
        kl.ops.fused_batch_norm_v3(conv, *params, is_training=True, name="train_bn")
        shared = kl.ops.conv2d(x, w, strides=[1, 1, 1, 1], padding="VALID", name="shared")
        kl.ops.fused_batch_norm_v3(shared, *params, is_training=False, name="infer_bn")
        kl.ops.neg(shared, name="other_use")
    sg = step_graph(g, ["train_bn:0", "infer_bn:0", "other_use:0"], ["x:0"])
    new, _ = run_pass(BatchNormFolding(), sg)
    # No filter folded: both convolutions read the original constant. The inference norm
    # after the shared convolution became the affine it computes; the training one stays.
    assert [n.inputs[1].node.op for n in new.nodes if n.op == "Conv2D"] == ["Const", "Const"]
    assert new.node("train_bn").op == "FusedBatchNormV3"
    assert new.node("infer_bn").op == "AddV2"


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("scale_layer", [False, True])
def test_a_norm_after_anything_else_becomes_a_per_channel_affine(
    data_format: str, scale_layer: bool
) -> None:
    """DenseNet's norms follow a concat: each becomes ``x * s + b`` (fused with what
    follows), a Caffe scale layer after it absorbed into the two constants; the values are
    the unoptimised graph's and numpy's."""
    channels = 3
    nchw = data_format == "NCHW"
    scale, offset, mean, variance = _norm_params(channels)
    c, d = RNG.standard_normal((2, channels)).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, channels, 4, 4] if nchw else [2, 4, 4, channels])
        joined = kl.ops.concat_v2([x, x], axis=0, name="joined")
        params = [kl.constant(v) for v in (scale, offset, mean, variance)]
        y = kl.ops.fused_batch_norm_v3(
            joined, *params, is_training=False, epsilon=EPS, data_format=data_format, name="bn"
        )[0]
        if scale_layer:
            shape = [1, channels, 1, 1] if nchw else [channels]
            y = kl.ops.mul(y, kl.constant(c.reshape(shape)), name="scale")
            y = kl.ops.add_v2(y, kl.constant(d.reshape(shape)), name="shift")
        out = kl.ops.relu(y, name="out")
    xv = RNG.standard_normal(x.shape.as_list()).astype(np.float32)
    (got,), nodes = run_graph(g, [out], {x: xv})
    (want,), as_built = run_graph(g, [out], {x: xv}, graph_optimizer=False)
    assert "FusedBatchNormV3" in ops_of(as_built) and "FusedBatchNormV3" not in ops_of(nodes)
    z = np.concatenate([xv, xv]).astype(np.float64)
    axis = [1, channels, 1, 1] if nchw else [channels]
    factor = (scale / np.sqrt(variance.astype(np.float64) + EPS)).reshape(axis)
    z = z * factor + (offset - mean * factor.ravel()).reshape(axis)
    if scale_layer:
        z = z * c.reshape(axis) + d.reshape(axis)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, np.maximum(z, 0), rtol=1e-5, atol=1e-5)
    fused = next(n for n in nodes if n.name == "out")
    expected = ["bn", "scale", "shift", "out"] if scale_layer else ["bn", "out"]
    assert list(fused.attrs["_fused_from"]) == expected


def test_a_fetched_norm_keeps_its_value_and_its_scale_layer_stays() -> None:
    scale, offset, mean, variance = _norm_params(2)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3, 2], name="x")
        bn = kl.ops.fused_batch_norm_v3(
            kl.ops.reshape(x, [3, 1, 1, 2]),
            *[kl.constant(v) for v in (scale, offset, mean, variance)],
            is_training=False,
            epsilon=EPS,
            name="bn",
        )[0]
        scaled = kl.ops.add_v2(kl.ops.mul(bn, kl.constant(np.float32(2))), kl.constant(1.0))
    xv = RNG.standard_normal((3, 2)).astype(np.float32)
    got, nodes = run_graph(g, [bn, scaled], {x: xv})
    want, _ = run_graph(g, [bn, scaled], {x: xv}, graph_optimizer=False)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    ops = {n.name: n.op for n in nodes}
    assert ops["bn"] in ("AddV2", "_FusedElementwise")  # the affine, under the norm's name
    assert "FusedBatchNormV3" not in ops.values()


@pytest.mark.skipif("Conv2D" not in kl.Graph().ops, reason="no conv ops")
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("activation", [None, "relu", "relu6", "elu", "leaky_relu"])
def test_conv_bias_add_activation_become_one_fused_conv(
    data_format: str, activation: str | None
) -> None:
    w = (RNG.standard_normal((3, 3, 2, 5)) * 0.5).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    nchw = data_format == "NCHW"
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 2, 5, 5] if nchw else [2, 5, 5, 2], name="x")
        conv = kl.ops.conv2d(
            x,
            kl.constant(w),
            strides=[1, 1, 1, 1],
            padding="SAME",
            data_format=data_format,
            name="conv",
        )
        h = kl.ops.bias_add(conv, kl.constant(b), data_format=data_format, name="ba")
        if activation is not None:
            h = getattr(kl.ops, activation)(h, name="act")
    xv = RNG.standard_normal((2, 5, 5, 2)).astype(np.float32) * 2
    fed = xv.transpose(0, 3, 1, 2) if nchw else xv
    out, nodes = run_graph(g, h, {x: fed})
    z = _conv_reference(xv, w) + b
    want = activated(activation, z)
    np.testing.assert_allclose(
        out, want.transpose(0, 3, 1, 2) if nchw else want, rtol=1e-4, atol=1e-5
    )
    fused = [n for n in nodes if n.op == "_FusedConv2D"]
    assert len(fused) == 1 and fused[0].attrs["data_format"] == data_format
    assert fused[0].attrs["_fused_from"] == ["conv", "ba"] + (["act"] if activation else [])


@pytest.mark.skipif("Conv2D" not in kl.Graph().ops, reason="no conv ops")
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_the_numpy_fused_conv_kernel_alone(data_format: str) -> None:
    """With only the numpy plugin (no torch CPU library above it)."""
    from runtime_helpers import make_registry

    registry = make_registry()
    w = (RNG.standard_normal((2, 2, 3, 4)) * 0.5).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    nchw = data_format == "NCHW"
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 3, 4, 4] if nchw else [1, 4, 4, 3], name="x")
        conv = kl.ops.conv2d(
            x, kl.constant(w), strides=[1, 1, 1, 1], padding="VALID", data_format=data_format
        )
        h = kl.ops.relu6(kl.ops.bias_add(conv, kl.constant(b), data_format=data_format))
    xv = RNG.standard_normal((1, 4, 4, 3)).astype(np.float32) * 3
    out, nodes = run_graph(g, h, {x: xv.transpose(0, 3, 1, 2) if nchw else xv})
    assert [n.op for n in nodes if n.op.startswith("_Fused")] == ["_FusedConv2D"]
    z = np.zeros((1, 3, 3, 4))
    for i in range(2):
        for j in range(2):
            z += np.einsum("nhwc,cd->nhwd", xv[:, i : i + 3, j : j + 3, :], w[i, j])
    want = np.clip(z + b, 0, 6)
    want = want.transpose(0, 3, 1, 2) if nchw else want
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def _dead_channel_graph(
    registry: kl.Registry, after: str, stats: list[list[float]], epsilon: float, fmt: str
) -> tuple[kl.Graph, kl.Tensor, kl.Tensor]:
    """x [1, 1, 3, 2] (or NCHW) -> ``after`` -> an inference norm of ``stats`` -> out; the
    convolution is a 1x1 identity, so the norm sees x (or relu(x)) itself."""
    nchw = fmt == "NCHW"
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 2, 1, 3] if nchw else [1, 1, 3, 2], name="x")
        if after == "Conv2D":
            eye = kl.constant(np.eye(2, dtype=np.float32).reshape(1, 1, 2, 2))
            h = kl.ops.conv2d(
                x, eye, strides=[1, 1, 1, 1], padding="VALID", data_format=fmt, name="conv"
            )
        else:
            h = kl.ops.relu(x, name="pre")
        params = [kl.constant(np.float32(v)) for v in stats]
        y = kl.ops.fused_batch_norm_v3(
            h, *params, epsilon=epsilon, is_training=False, data_format=fmt, name="bn"
        )[0]
        out = kl.ops.identity(kl.ops.mul(y, 1.0), name="out")
    return g, x, out


# (scale, offset, mean, variance) per channel, epsilon; channel 1 an ordinary one.
_STATS = {
    "dead channel": ([[1, 0.5], [0, 0.25], [1, 0], [0, 4]], 0.0),
    "dead channel, zero scale": ([[0, 0.5], [2, 0.25], [1, 0], [0, 4]], 0.0),
    "negative variance + epsilon": ([[1, 0.5], [0, 0.25], [1, 0], [-1, 4]], 0.5),
    "nan mean": ([[1, 0.5], [0, 0.25], [np.nan, 0], [1, 4]], 1e-3),
    "nan scale": ([[np.nan, 0.5], [0, 0.25], [1, 0], [1, 4]], 1e-3),
    "infinite offset": ([[1, 0.5], [np.inf, 0.25], [1, 0], [1, 4]], 1e-3),
    "finite": ([[1.5, 0.5], [0, 0.25], [1, 0], [0.25, 4]], 1e-3),
}


@pytest.mark.skipif("FusedBatchNormV3" not in kl.Graph().ops, reason="no conv ops")
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("after", ["Conv2D", "Relu"])
@pytest.mark.parametrize("stats", list(_STATS))
def test_a_norm_whose_folded_constants_are_not_finite_stays_as_it_was(
    stats: str, after: str, fmt: str
) -> None:
    """``variance + epsilon == 0`` (a dead channel, epsilon 0) makes ``s`` infinite: the
    folded ``x * s + (offset - mean * s)`` is ``inf - inf``, NaN, where the norm gives
    +inf, NaN or -inf by the sign of ``x - mean``. A norm whose ``s`` or shift is not
    finite is not folded, into its convolution or into an affine; a finite one still is.
    The numpy kernels alone: the optimizer off runs the numpy FusedBatchNormV3."""
    from runtime_helpers import make_registry

    params, epsilon = _STATS[stats]
    nchw = fmt == "NCHW"
    g, x, out = _dead_channel_graph(make_registry(), after, params, epsilon, fmt)
    # x - mean positive, zero, negative on channel 0 (after the Relu too: 2, 1, 0 - 1).
    xv = np.float32([[[[2, 1], [1, -2], [0.5 if after == "Conv2D" else -3, 3]]]])
    fed = xv.transpose(0, 3, 1, 2) if nchw else xv
    got, nodes = run_graph(g, out, {x: fed})
    off, _ = run_graph(g, out, {x: fed}, graph_optimizer=False)
    z = (np.maximum(xv, 0) if after == "Relu" else xv).astype(np.float64)
    scale, offset, mean, variance = (np.float64(v) for v in params)
    with np.errstate(all="ignore"):
        want = (z - mean) / np.sqrt(variance + epsilon) * scale + offset
    want = want.transpose(0, 3, 1, 2) if nchw else want
    np.testing.assert_allclose(off, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, off, rtol=1e-6, atol=1e-6)
    if stats == "dead channel":
        channel0 = got[0, 0, 0] if nchw else got[0, 0, :, 0]
        assert np.isposinf(channel0[0]) and np.isnan(channel0[1]) and np.isneginf(channel0[2])
    assert ("FusedBatchNormV3" in ops_of(nodes)) == (stats != "finite")


@pytest.mark.parametrize("after", ["Conv2D", "Relu"])
def test_a_dead_channel_norm_stays_in_the_pass_output(after: str) -> None:
    """The pass alone: the norm of infinite ``s`` is left as it was (its convolution too);
    the same norm with a finite variance is folded."""
    for variance, folded in ((0.0, False), (1.0, True)):
        stats = [[1.0], [0.0], [1.0], [variance]]
        g = kl.Graph()
        with g.as_default():
            x = kl.placeholder(kl.float32, [1, 1, 3, 1], name="x")
            if after == "Conv2D":
                w = kl.constant(np.ones((1, 1, 1, 1), np.float32))
                h = kl.ops.conv2d(x, w, strides=[1, 1, 1, 1], padding="VALID", name="conv")
            else:
                h = kl.ops.relu(x, name="pre")
            params = [kl.constant(np.float32(v)) for v in stats]
            kl.ops.fused_batch_norm_v3(h, *params, epsilon=0.0, is_training=False, name="bn")
        new, ctx = run_pass(BatchNormFolding(), step_graph(g, ["bn:0"], ["x:0"]))
        assert (new.node("bn").op == "FusedBatchNormV3") is not folded, variance
        assert bool(ctx.notes) is folded


@pytest.mark.skipif("FusedBatchNormV3" not in kl.Graph().ops, reason="no conv ops")
def test_a_scale_layer_whose_product_with_s_overflows_is_not_absorbed() -> None:
    """``s`` and ``c`` finite but ``s * c`` beyond float32: absorbed, ``x * inf + ...``
    would be inf or NaN where ``((x - mean) * s + b) * c + d`` is finite. The norm still
    becomes its affine; the scale layer stays after it. (The arithmetic pass then joins
    the two products of constants, overflowing the same way: checked with it off.)"""
    from runtime_helpers import make_registry

    g = kl.Graph(make_registry())
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 1, 1, 2], name="x")

        def f(v: list[float]) -> kl.Tensor:
            return kl.constant(np.float32(v))

        norm = kl.ops.fused_batch_norm_v3(
            kl.ops.concat_v2([x, x], axis=0),
            *(f(v) for v in ([1e20, 1], [0, 0], [0, 0], [1, 1])),
            epsilon=0.0,
            is_training=False,
            name="bn",
        )[0]
        scaled = kl.ops.mul(norm, f([1e20, 1]), name="mul")
        y = kl.ops.identity(kl.ops.add_v2(scaled, f([0, 0]), name="add"), name="y")
    xv = np.float32([[[[1e-30, 3]]]])  # x * s * c: 1e10, where x * (s * c) is inf
    got, nodes = run_graph(g, y, {x: xv}, disabled_passes=("arithmetic",))
    want, _ = run_graph(g, y, {x: xv}, graph_optimizer=False)
    np.testing.assert_allclose(want[:, 0, 0, 0], [1e10, 1e10], rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "FusedBatchNormV3" not in ops_of(nodes)
    new, _ = run_pass(BatchNormFolding(), step_graph(g, ["y:0"], ["x:0"]))
    assert [new.node(name).op for name in ("bn", "mul", "add")] == ["AddV2", "Mul", "AddV2"]
