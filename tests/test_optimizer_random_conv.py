"""Random convolutional graphs (the remapper's and batch-norm folding's territory):
chains and branches of Conv2D with or without BiasAdd, residual Adds of earlier values,
activations and inference batch norms, some intermediates fetched, in NHWC or NCHW. The
optimizer on and off return the same fetches, and both match a float64 numpy evaluation of
the same DAG written here independently."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernloom as kl
from kernloom.testing.cases.nn import conv2d_reference

Array = np.ndarray[Any, Any]
CHANNELS = 4
ACTIVATIONS: dict[str, Any] = {
    "": lambda z: z,
    "relu": lambda z: np.maximum(z, 0),
    "relu6": lambda z: np.clip(z, 0, 6),
    "elu": lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0))),
    "leaky_relu": lambda z: np.where(z > 0, z, 0.2 * z),
}


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, list[tuple[Any, ...]], list[int]]:
    fmt = draw(st.sampled_from(["NHWC", "NCHW"]))
    steps: list[tuple[Any, ...]] = []
    for index in range(draw(st.integers(1, 7))):
        pool = index + 1  # the input and every step so far
        kind = draw(st.sampled_from(["conv", "conv", "add", "norm"]))
        src = draw(st.integers(0, pool - 1))
        act = draw(st.sampled_from(sorted(ACTIVATIONS)))
        if kind == "conv":
            steps.append(("conv", src, draw(st.sampled_from([1, 3])), draw(st.booleans()), act))
        elif kind == "add":
            steps.append(("add", src, draw(st.integers(0, pool - 1)), act))
        else:
            steps.append(("norm", src, act))
    extra = draw(st.lists(st.integers(0, len(steps)), max_size=2))
    return fmt, steps, sorted({len(steps), *extra})


def build(
    fmt: str, steps: list[tuple[Any, ...]], seed: int
) -> tuple[kl.Graph, kl.Tensor, Array, list[kl.Tensor], list[Array]]:
    rng = np.random.default_rng(seed)
    shape = (2, 5, 5, CHANNELS) if fmt == "NHWC" else (2, CHANNELS, 5, 5)
    axis = [1, 1, 1, -1] if fmt == "NHWC" else [1, -1, 1, 1]
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": fmt}
    conv = conv2d_reference(attrs)
    xv = rng.standard_normal(shape).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, list(shape), name="x")
        tensors, values = [x], [xv.astype(np.float64)]
        for step in steps:
            act = step[-1]
            if step[0] == "conv":
                _, src, k, bias, _ = step
                f = (rng.standard_normal((k, k, CHANNELS, CHANNELS)) * 0.3).astype(np.float32)
                t = kl.ops.conv2d(tensors[src], kl.constant(f), **attrs)
                v = conv(values[src], f.astype(np.float64))
                if bias:
                    b = rng.standard_normal(CHANNELS).astype(np.float32)
                    t = kl.ops.bias_add(t, kl.constant(b), data_format=fmt)
                    v = v + b.reshape(axis)
            elif step[0] == "add":
                _, a, b_index, _ = step
                t = kl.ops.add_v2(tensors[a], tensors[b_index])
                v = values[a] + values[b_index]
            else:
                _, src, _ = step
                scale, offset = rng.uniform(0.5, 1.5, CHANNELS), rng.standard_normal(CHANNELS)
                mean, var = rng.standard_normal(CHANNELS), rng.uniform(0.5, 2.0, CHANNELS)
                params = [kl.constant(p.astype(np.float32)) for p in (scale, offset, mean, var)]
                t = kl.ops.fused_batch_norm_v3(
                    tensors[src], *params, epsilon=1e-3, is_training=False, data_format=fmt
                )[0]
                v = (values[src] - mean.reshape(axis)) / np.sqrt(var.reshape(axis) + 1e-3)
                v = v * scale.reshape(axis) + offset.reshape(axis)
            if act:
                t = getattr(kl.ops, act)(t)
            tensors.append(t)
            values.append(ACTIVATIONS[act](v))
    return g, x, xv, tensors, values


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_conv_graphs_match_with_the_optimizer_on_and_off(
    program: tuple[str, list[tuple[Any, ...]], list[int]], seed: int
) -> None:
    fmt, steps, fetched = program
    g, x, xv, tensors, values = build(fmt, steps, seed)
    fetches = [tensors[i] for i in fetched]
    results = []
    for on in (True, False):
        config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=on)
        with kl.Session(g, config) as sess:
            results.append(sess.run(fetches, {x: xv}))
    for got, plain, index in zip(*results, fetched, strict=True):
        want = values[index]
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, plain, rtol=1e-4, atol=1e-4 * scale)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
