"""The NN ops' edge cases against TensorFlow 2.21's CPU kernels.

``fixtures/tf_nn_edge/cases.npz`` holds TensorFlow's inputs and answers (written by
``fixtures/tf_nn_edge/make_fixtures.py`` through ``tf.raw_ops``): Conv2D and its
depthwise and backprop-input forms, the pools, MaxPoolWithArgmax, FusedBatchNormV3,
BiasAdd, the activations, Softmax/LogSoftmax, LRN, the resizes, SpaceToDepth/DepthToSpace,
Pad/MirrorPad, and the chains the optimizer fuses (Conv2D -> BiasAdd -> act, Conv2D ->
FusedBatchNormV3 -> act, MatMul -> BiasAdd -> act) fed NaN and inf. Every case runs on the
numpy CPU kernels and on the torch plugin's CPU kernels (label ``torch`` where it has one),
each with the graph optimizer on and off; the first input is fed, the others are
constants (so that the optimizer can fuse and fold them).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_torch_labelled_cpu import real_plugins

import kernloom as kl
import kernloom.plugin as klp
from kernloom.graph.builder import apply_op

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tf_nn_edge" / "cases.npz"
ARRAYS = np.load(FIXTURE)
META: list[dict[str, Any]] = json.loads(str(ARRAYS["__meta__"]))

BATCH_NORM_OUTPUTS = 3
"""FusedBatchNormV3's outputs compared: y, running mean, running variance (the reserve
spaces are each implementation's own)."""

ACTIVATION_OPS = {"Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Softplus", "Softsign"}
"""Ops whose zeros' signs are compared too."""

DEVIATIONS = {
    **dict.fromkeys(
        ("elu_edge_float32", "elu_edge_float64", "selu_edge_float32", "selu_edge_float64"),
        "Elu/Selu of a tiny negative x: TensorFlow computes exp(x) - 1 (Elu(-1e-20) = 0), "
        "kernloom expm1(x) (-1e-20)",
    ),
    **dict.fromkeys(
        ("relu6_edge_float32", "relu6_edge_float64"),
        "Relu6(-0.0): TensorFlow's vectorised kernel gives +0.0 (its sign of zero depends on "
        "the element's position), kernloom's -0.0",
    ),
    **dict.fromkeys(
        (
            "maxpool_nan_inf",
            "maxpool_nan_inf_overlap",
            "maxpool_all_neg_inf",
            "maxpool_all_neg_inf_f64",
            "maxpool_all_nan_c9",
            "maxpool_nan_f16",
            "argmax_nan",
            "argmax_nan_first",
        ),
        "MaxPool and MaxPoolWithArgmax: TensorFlow's CPU kernels start at the lowest finite "
        "value and skip NaN unless it is the window's first element (a window of -inf alone "
        "gives -FLT_MAX); kernloom's NaN in a window wins and -inf stays -inf",
    ),
    **dict.fromkeys(
        ("lrn_nan_inf", "lrn_deep_nan_inf_b0.5", "lrn_deep_nan_inf_b0.75"),
        "LRN with an inf or NaN input: TensorFlow's CPU kernel multiplies by a band matrix "
        "(0 * inf makes NaN of channels outside the window) or keeps a running sum (inf - inf "
        "makes NaN of every later channel); kernloom computes the documented window sum",
    ),
}
"""TensorFlow's CPU results that kernloom does not follow on purpose
(docs/tensorflow_fidelity.md, "Deliberate differences"): strict xfails, so that a change
of either side is seen."""

DOCUMENTED_SOFTMAX = "Softmax"
"""docs/tensorflow_fidelity.md: TensorFlow's float32 Softmax (oneDNN) gives 0 beside the NaN
of a row holding +inf (or NaN); kernloom's whole row is NaN. Such rows are not compared."""


@cache
def registry(backend: str) -> klp.Registry:
    """``numpy``: the numpy CPU plugin alone; ``torch``: with the torch plugin's CPU
    kernels (its GPU factory left out: ``test_torch_labelled_cpu.real_plugins``)."""
    if backend == "torch":
        return real_plugins()
    from kernloom_cpu_numpy import plugin as cpu_plugin

    result = klp.Registry()
    result.register_plugin(cpu_plugin, name="cpu_numpy")
    return result


CHAIN_OPS: tuple[str, ...] = (
    "Conv2D",
    "BiasAdd",
    "FusedBatchNormV3",
    "MatMul",
    "Relu",
    "Relu6",
    "Elu",
)
CHAIN_OPS += ("LeakyRelu", "_FusedConv2D", "_FusedMatMul", "_FusedElementwise")


@cache
def torch_labels() -> dict[str, str]:
    """Every op with a CPU kernel labelled ``torch``, mapped to that label."""
    kernels = registry("torch").kernels
    ops = {m["op"] for m in META} | set(CHAIN_OPS)
    return {
        op: "torch"
        for op in sorted(ops)
        if any(
            k.kernel_def.device_type == "CPU" and k.kernel_def.label == "torch"
            for k in kernels.kernels(op)
        )
    }


def _inputs(name: str) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    while f"{name}|in{len(out)}" in ARRAYS:
        out.append(ARRAYS[f"{name}|in{len(out)}"])
    return out


def _op(op: str, inputs: list[Any], attrs: dict[str, Any], **kw: Any) -> Any:
    return apply_op(op, inputs, attrs, **kw)


def _build(meta: dict[str, Any], inputs: list[np.ndarray]) -> tuple[list[kl.Tensor], Any]:
    """The case's graph (in the default graph): the first input a placeholder."""
    x = kl.placeholder(kl.as_dtype(inputs[0].dtype), list(inputs[0].shape), name="x")
    rest = [kl.constant(v) for v in inputs[1:]]
    op, attrs = meta["op"], dict(meta["attrs"])
    if not op.startswith("chain:"):
        if op == "MaxPoolWithArgmax":
            attrs.setdefault("Targmax", kl.int64)
        out = _op(op, [x, *rest], attrs, name="op")
        return (list(out) if isinstance(out, tuple) else [out]), x
    act = attrs.pop("activation")
    fmt = attrs.get("data_format", "NHWC")
    kind = op.split(":")[1]
    if kind == "conv_bias":
        f, b = rest
        strides = [1, 1, 1, 1]
        y = _op("Conv2D", [x, f], {"strides": strides, "padding": "SAME", "data_format": fmt})
        y = _op("BiasAdd", [y, b], {"data_format": fmt})
    elif kind == "conv_bn":
        f, scale, offset, mean, var = rest
        y = _op("Conv2D", [x, f], {"strides": [1, 1, 1, 1], "padding": "SAME"})
        y = _op(
            "FusedBatchNormV3",
            [y, scale, offset, mean, var],
            {"epsilon": 0.001, "is_training": False},
        )[0]
    else:
        w, b = rest
        y = _op("BiasAdd", [_op("MatMul", [x, w], {}), b], {})
    if act == "LeakyRelu":
        y = _op("LeakyRelu", [y], {"alpha": 0.2}, name="op")
    elif act != "None":
        y = _op(act, [y], {}, name="op")
    return [y], x


def run_kernloom(name: str, backend: str, optimize: bool) -> list[np.ndarray]:
    meta = next(m for m in META if m["name"] == name)
    inputs = _inputs(name)
    graph = kl.Graph(registry(backend))
    with graph.as_default():
        fetches, x = _build(meta, inputs)
    labels = torch_labels() if backend == "torch" else {}
    try:
        return _run(graph, fetches, {x: inputs[0]}, optimize, labels)
    except kl.InvalidArgumentError as error:  # no torch kernel for this dtype: the default
        if "asks for label 'torch'" not in str(error):
            raise
        labels = {k: v for k, v in labels.items() if k != meta["op"]}
        return _run(graph, fetches, {x: inputs[0]}, optimize, labels)


def _run(
    graph: kl.Graph, fetches: list[kl.Tensor], feeds: Any, optimize: bool, labels: Any
) -> list[np.ndarray]:
    config = kl.SessionConfig(graph_optimizer=optimize, kernel_labels=labels)
    with kl.Session(graph, config) as session:
        values = session.run(fetches, feeds)
    return [np.asarray(v) for v in values]


def _tolerance(dtype: np.dtype[Any]) -> tuple[float, float]:
    if dtype == np.float16:
        return 2e-3, 2e-3
    if dtype == np.float64:
        return 1e-12, 1e-12
    return 2e-6, 1e-6


def assert_same(got: np.ndarray, want: np.ndarray, *, signed_zeros: bool = False) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    rtol, atol = _tolerance(want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if signed_zeros:
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


def _case(name: str) -> Any:
    if name in DEVIATIONS:
        return pytest.param(name, marks=pytest.mark.xfail(reason=DEVIATIONS[name], strict=True))
    return name


def _comparable_rows(meta: dict[str, Any], value: np.ndarray) -> Any:
    """The rows of a float32 Softmax's logits compared (see ``DOCUMENTED_SOFTMAX``)."""
    if meta["op"] != DOCUMENTED_SOFTMAX or value.dtype != np.float32:
        return ...
    return ~(np.isnan(value) | (value == np.inf)).any(axis=-1)


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("name", [_case(m["name"]) for m in META])
def test_matches_tensorflow(name: str, backend: str, optimize: bool) -> None:
    meta = next(m for m in META if m["name"] == name)
    if meta["error"]:
        with pytest.raises(kl.InvalidArgumentError):  # an error that explains, not a crash
            run_kernloom(name, backend, optimize)
        return
    got = run_kernloom(name, backend, optimize)
    rows = _comparable_rows(meta, ARRAYS[f"{name}|in0"])
    n = BATCH_NORM_OUTPUTS if meta["op"] == "FusedBatchNormV3" else meta["n_out"]
    assert len(got) >= n
    for j in range(n):
        want = ARRAYS[f"{name}|out{j}"]
        assert_same(got[j][rows], want[rows], signed_zeros=meta["op"] in ACTIVATION_OPS)
