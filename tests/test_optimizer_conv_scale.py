"""A per-channel scale after a convolution folds into it (ONNX Runtime's ConvMulFusion
and ConvAddFusion; Inception v2's Caffe2 export has a Mul and an Add after each of its 69
batch norms): ``Conv2D`` [-> ``BiasAdd``] -> ``Mul(c)`` [-> ``Add(d)``] runs as one fused
convolution with the values of the graph as built and of numpy computed directly; a
constant that is not one value per channel, or not finite, or a value someone else reads,
stays as it is."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from optimizer_helpers import run_graph

import kernloom as kl

pytestmark = pytest.mark.skipif("Conv2D" not in kl.Graph().ops, reason="no conv ops")

RNG = np.random.default_rng(11)
C = 5


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """VALID 1x1 convolution, NHWC x HWIO, in float64."""
    return np.einsum("nhwc,cd->nhwd", x.astype(np.float64), w[0, 0].astype(np.float64))


def _channel_shape(kind: str, nchw: bool) -> tuple[int, ...]:
    return {
        "scalar": (),
        "vector": (1, C, 1, 1) if nchw else (C,),
        "image": (C, 1, 1) if nchw else (1, 1, 1, C),
    }[kind]


def _graph(
    nchw: bool, bias: bool, add: bool, c: np.ndarray, d: np.ndarray, w: np.ndarray, b: np.ndarray
) -> tuple[kl.Graph, kl.Tensor, dict[str, kl.Tensor]]:
    fmt = "NCHW" if nchw else "NHWC"
    g = kl.Graph()
    tensors: dict[str, kl.Tensor] = {}
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3, 4, 4] if nchw else [2, 4, 4, 3], name="x")
        h = kl.ops.conv2d(
            x, kl.constant(w), strides=[1, 1, 1, 1], padding="VALID", data_format=fmt, name="conv"
        )
        tensors["conv"] = h
        if bias:
            h = kl.ops.bias_add(h, kl.constant(b), data_format=fmt, name="ba")
            tensors["ba"] = h
        h = kl.ops.mul(kl.constant(c), h, name="scale")  # the constant on either side
        tensors["scale"] = h
        if add:
            h = kl.ops.add_v2(h, kl.constant(d), name="shift")
            tensors["shift"] = h
        tensors["out"] = kl.ops.relu(h, name="out")
    return g, x, tensors


def _reference(
    xv: np.ndarray, w: np.ndarray, b: np.ndarray | None, c: np.ndarray, d: np.ndarray | None
) -> np.ndarray:
    """In NHWC, the constants as one value per channel (or a scalar)."""
    z = _conv_reference(xv, w)
    if b is not None:
        z = z + b
    z = z * np.broadcast_to(c.reshape(-1), (C,))
    if d is not None:
        z = z + np.broadcast_to(d.reshape(-1), (C,))
    return z


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("kind", ["scalar", "vector", "image"])
def test_a_per_channel_scale_folds_into_the_convolution(
    data_format: str, bias: bool, add: bool, kind: str
) -> None:
    nchw = data_format == "NCHW"
    w = RNG.standard_normal((1, 1, 3, C)).astype(np.float32)
    b = RNG.standard_normal(C).astype(np.float32)
    c = RNG.uniform(-2, 2, _channel_shape(kind, nchw)).astype(np.float32)
    d = RNG.standard_normal(_channel_shape("vector", nchw)).astype(np.float32)
    g, x, t = _graph(nchw, bias, add, c, d, w, b)
    xv = RNG.standard_normal((2, 4, 4, 3)).astype(np.float32)
    fed = xv.transpose(0, 3, 1, 2) if nchw else xv
    out, nodes = run_graph(g, t["out"], {x: fed})
    want, _ = run_graph(g, t["out"], {x: fed}, graph_optimizer=False)
    z = np.maximum(_reference(xv, w, b if bias else None, c, d if add else None), 0)
    np.testing.assert_allclose(out, z.transpose(0, 3, 1, 2) if nchw else z, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    (fused,) = [n for n in nodes if n.op == "_FusedConv2D"]
    replaced = ["ba"] * bias + ["scale"] + ["shift"] * add
    assert list(fused.attrs["_fused_from"]) == ["conv", *replaced, "out"]
    assert not {"Mul", "AddV2", "BiasAdd", "Relu"} & {n.op for n in nodes}


def test_a_batch_norm_and_the_scale_layer_after_it_become_one_fused_convolution() -> None:
    """Inception v2's pattern: Conv, BatchNorm, Mul, Add, Relu (NCHW, [C, 1, 1] constants)."""
    w = RNG.standard_normal((1, 1, 3, C)).astype(np.float32)
    scale, offset, mean = RNG.standard_normal((3, C)).astype(np.float32)
    variance = RNG.uniform(0.5, 2, C).astype(np.float32)
    c = RNG.uniform(0.5, 2, (C, 1, 1)).astype(np.float32)
    d = RNG.standard_normal((C, 1, 1)).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3, 4, 4], name="x")
        conv = kl.ops.conv2d(
            x,
            kl.constant(w),
            strides=[1, 1, 1, 1],
            padding="VALID",
            data_format="NCHW",
            name="conv",
        )
        bn = kl.ops.fused_batch_norm_v3(
            conv,
            *(kl.constant(v) for v in (scale, offset, mean, variance)),
            epsilon=1e-3,
            is_training=False,
            data_format="NCHW",
            name="bn",
        )[0]
        y = kl.ops.relu(
            kl.ops.add_v2(kl.ops.mul(bn, kl.constant(c), name="mul"), kl.constant(d), name="add"),
            name="out",
        )
    xv = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    out, nodes = run_graph(g, y, {x: xv})
    want, _ = run_graph(g, y, {x: xv}, graph_optimizer=False)
    z = _conv_reference(xv.transpose(0, 2, 3, 1), w)
    z = (z - mean) / np.sqrt(variance.astype(np.float64) + 1e-3) * scale + offset
    z = np.maximum(z * c.ravel() + d.ravel(), 0).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, z, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert [n.op for n in nodes if n.op not in ("_Arg", "_Retval", "Const")] == ["_FusedConv2D"]
    (fused,) = [n for n in nodes if n.op == "_FusedConv2D"]
    assert list(fused.attrs["_fused_from"]) == ["conv", "bn", "mul", "add", "out"]


@pytest.mark.parametrize(
    "case",
    [
        "infinite scale",
        "nan scale",
        "spatial scale",
        "batch scale",
        "rank-5 scale",
        "conv fetched",
        "bias fetched",
    ],
)
def test_what_is_not_one_finite_value_per_channel_or_is_read_elsewhere_stays(case: str) -> None:
    w = RNG.standard_normal((1, 1, 3, C)).astype(np.float32)
    b = RNG.standard_normal(C).astype(np.float32)
    c: Any = RNG.uniform(0.5, 2, C).astype(np.float32)
    if case == "infinite scale":
        c[1] = np.inf
    elif case == "nan scale":
        c[2] = np.nan
    elif case == "spatial scale":
        c = RNG.uniform(0.5, 2, (1, 4, 1, C)).astype(np.float32)
    elif case == "batch scale":
        c = RNG.uniform(0.5, 2, (2, 1, 1, 1)).astype(np.float32)  # one value per image
    elif case == "rank-5 scale":
        c = RNG.uniform(0.5, 2, (2, 1, 1, 1, C)).astype(np.float32)  # makes the value 5-D
    d = RNG.standard_normal(C).astype(np.float32)
    g, x, t = _graph(False, True, True, c, d, w, b)
    fetches = [t["out"]]
    if case == "conv fetched":
        fetches.append(t["conv"])
    elif case == "bias fetched":
        fetches.append(t["ba"])
    xv = RNG.standard_normal((2, 4, 4, 3)).astype(np.float32)
    xv[0, 0, 0] = 0.0  # a zero product times inf: NaN, as the graph as built gives
    got, nodes = run_graph(g, fetches, {x: xv})
    want, _ = run_graph(g, fetches, {x: xv}, graph_optimizer=False)
    for a, e in zip(got, want, strict=True):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    assert any(n.name == "scale" or "scale" in n.attrs.get("_fused_from", ()) for n in nodes)
    fused_conv = [n for n in nodes if n.op == "_FusedConv2D"]
    assert all("scale" not in n.attrs["_fused_from"] for n in fused_conv)


@pytest.mark.parametrize("read", ["fetched", "read twice"])
def test_a_scale_read_elsewhere_folds_and_keeps_its_name_and_value(read: str) -> None:
    """The fold's result takes the last node's name: a fetched Mul, or one another node
    reads too (whose Add then stays outside), still gives its value."""
    w = RNG.standard_normal((1, 1, 3, C)).astype(np.float32)
    b = RNG.standard_normal(C).astype(np.float32)
    c = RNG.uniform(0.5, 2, C).astype(np.float32)
    d = RNG.standard_normal(C).astype(np.float32)
    g, x, t = _graph(False, True, read == "read twice", c, d, w, b)
    with g.as_default():
        other = t["scale"] if read == "fetched" else kl.ops.neg(t["scale"], name="other")
    xv = RNG.standard_normal((2, 4, 4, 3)).astype(np.float32)
    (got, out), nodes = run_graph(g, [other, t["out"]], {x: xv})
    z = _reference(xv, w, b, c, None)
    np.testing.assert_allclose(got, z if read == "fetched" else -z, rtol=1e-5, atol=1e-5)
    z = z + d if read == "read twice" else z
    np.testing.assert_allclose(out, np.maximum(z, 0), rtol=1e-5, atol=1e-5)
    assert "Mul" not in {n.op for n in nodes}


def test_a_scale_whose_folded_bias_overflows_stays() -> None:
    """``(conv + b) * c`` with ``b * c`` beyond float32: folded, ``conv * c + b * c`` is
    ``-inf + inf`` where the graph as built gives 0. Not folded."""
    w = np.eye(C, dtype=np.float32).reshape(1, 1, C, C)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 1, 1, C], name="x")
        h = kl.ops.conv2d(x, kl.constant(w), strides=[1, 1, 1, 1], padding="VALID", name="conv")
        h = kl.ops.bias_add(h, kl.constant(np.full(C, 1e30, np.float32)), name="ba")
        y = kl.ops.identity(kl.ops.mul(h, kl.constant(np.float32(1e10)), name="scale"), name="y")
    xv = np.full((1, 1, 1, C), -1e30, np.float32)
    got, nodes = run_graph(g, y, {x: xv})
    want, _ = run_graph(g, y, {x: xv}, graph_optimizer=False)
    np.testing.assert_array_equal(want, np.zeros_like(xv))
    np.testing.assert_array_equal(got, want)
    assert all("scale" not in n.attrs.get("_fused_from", ()) for n in nodes if n.op != "Mul")


@pytest.mark.parametrize("variance", [0.0, 1.0])
def test_a_dead_channel_norm_and_its_scale_layer_stay_as_they_were(variance: float) -> None:
    """Inception's Conv, BatchNorm, Mul, Add with ``variance + epsilon == 0`` on a channel:
    the norm is not folded (its ``s`` is infinite), nor its scale layer, and the values
    are the graph's as built (numpy kernels: +inf, NaN, -inf by the sign of ``x - mean``)
    and numpy's; with a finite variance all of it is one fused convolution."""
    from runtime_helpers import make_registry

    w = np.eye(C, dtype=np.float32).reshape(1, 1, C, C)
    scale, offset, mean = np.ones(C, np.float32), np.zeros(C, np.float32), np.ones(C, np.float32)
    var = np.full(C, variance, np.float32)
    c, d = np.full(C, 2, np.float32), np.full(C, 0.5, np.float32)
    g = kl.Graph(make_registry())
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 1, 3, C], name="x")
        conv = kl.ops.conv2d(x, kl.constant(w), strides=[1, 1, 1, 1], padding="VALID", name="conv")
        bn = kl.ops.fused_batch_norm_v3(
            conv, *map(kl.constant, (scale, offset, mean, var)), epsilon=0.0, is_training=False
        )[0]
        y = kl.ops.add_v2(kl.ops.mul(bn, kl.constant(c)), kl.constant(d), name="y")
    xv = np.broadcast_to(np.float32([2, 1, 0.5]).reshape(1, 1, 3, 1), (1, 1, 3, C)).copy()
    got, nodes = run_graph(g, y, {x: xv})
    want, _ = run_graph(g, y, {x: xv}, graph_optimizer=False)
    with np.errstate(all="ignore"):
        z = (xv.astype(np.float64) - mean) / np.sqrt(var + 0.0) * scale + offset
    np.testing.assert_allclose(want, z * c + d, rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    ops = {n.op for n in nodes}
    assert ("FusedBatchNormV3" in ops) is (variance == 0), ops
