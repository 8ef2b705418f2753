"""The remapper's residual form: ``Conv2D + BiasAdd + Add(residual) [+ activation]`` becomes
one ``_FusedConv2D`` (``fused_ops`` ``BiasAdd, Add [, act]``), as TensorFlow's oneDNN
remapper fuses a ResNet block, only where nothing broadcasts and only for a kernel that
declares the form. Values are checked against numpy written out by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optimizer_helpers import activated, node_named, ops_of, run_graph, run_pass, step_graph

import kernloom as kl
import kernloom.plugin as klp
from kernloom.optimizer import Remapper
from kernloom.testing.cases.nn import conv2d_reference
from kernloom.testing.fake_device import FakeDeviceFactory, fake_plugin

RNG = np.random.default_rng(7)


def _floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _block(
    fmt: str = "NHWC",
    activation: str | None = "relu",
    residual_first: bool = False,
    stride: int = 1,
    residual_shape: tuple[int, ...] | None = None,
    graph: kl.Graph | None = None,
) -> tuple[kl.Graph, kl.Tensor, kl.Tensor, kl.Tensor, dict[str, Any]]:
    """conv (3x3, SAME) + bias, plus a fed residual, then the activation."""
    x_shape = (2, 6, 5, 3) if fmt == "NHWC" else (2, 3, 6, 5)
    out_hw = (-(-6 // stride), -(-5 // stride))
    out_shape = (2, *out_hw, 4) if fmt == "NHWC" else (2, 4, *out_hw)
    strides = [1, stride, stride, 1] if fmt == "NHWC" else [1, 1, stride, stride]
    attrs = {"strides": strides, "padding": "SAME", "data_format": fmt}
    p = {"f": _floats(3, 3, 3, 4) * 0.3, "b": _floats(4), "attrs": attrs, "fmt": fmt}
    g = graph if graph is not None else kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, list(x_shape), name="x")
        r = kl.placeholder(kl.float32, list(residual_shape or out_shape), name="r")
        c = kl.ops.conv2d(x, kl.constant(p["f"]), name="conv", **attrs)
        h = kl.ops.bias_add(c, kl.constant(p["b"]), data_format=fmt, name="ba")
        h = kl.ops.add_v2(r, h, name="add") if residual_first else kl.ops.add_v2(h, r, name="add")
        if activation is not None:
            h = getattr(kl.ops, activation)(h, name="act")
    return g, x, r, h, p


def _reference(p: dict[str, Any], x: np.ndarray, r: np.ndarray, activation: str | None) -> Any:
    z = conv2d_reference(p["attrs"])(x.astype(np.float64), p["f"].astype(np.float64))
    axis = [1, 1, 1, -1] if p["fmt"] == "NHWC" else [1, -1, 1, 1]
    return activated(activation, z + p["b"].reshape(axis) + r)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("activation", [None, "relu", "relu6", "elu", "leaky_relu"])
@pytest.mark.parametrize("residual_first", [False, True])
def test_a_residual_block_becomes_one_fused_conv(
    fmt: str, activation: str | None, residual_first: bool
) -> None:
    g, x, r, y, p = _block(fmt, activation, residual_first)
    xv, rv = _floats(*x.shape.as_list()), _floats(*r.shape.as_list())
    out, nodes = run_graph(g, y, {x: xv, r: rv})
    np.testing.assert_allclose(out, _reference(p, xv, rv, activation), rtol=1e-4, atol=1e-4)
    assert ops_of(nodes).count("_FusedConv2D") == 1 and "AddV2" not in ops_of(nodes)
    last = "act" if activation else "add"
    fused = node_named(nodes, last)
    act_op = {"relu": "Relu", "relu6": "Relu6", "elu": "Elu", "leaky_relu": "LeakyRelu"}
    assert list(fused.attrs["fused_ops"]) == ["BiasAdd", "Add"] + (
        [act_op[activation]] if activation else []
    )
    assert fused.attrs["num_args"] == 2
    assert fused.attrs["_fused_from"] == ["conv", "ba", "add"] + (["act"] if activation else [])
    unoptimized, _ = run_graph(g, y, {x: xv, r: rv}, graph_optimizer=False)
    np.testing.assert_allclose(out, unoptimized, rtol=1e-5, atol=1e-5)


def test_stride_two_residual_block_matches_numpy() -> None:
    g, x, r, y, p = _block("NCHW", "relu", stride=2)
    xv, rv = _floats(*x.shape.as_list()), _floats(*r.shape.as_list())
    out, nodes = run_graph(g, y, {x: xv, r: rv})
    assert "AddV2" not in ops_of(nodes)
    np.testing.assert_allclose(out, _reference(p, xv, rv, "relu"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("residual_shape", [(4,), (1, 1, 1, 4), (1, 6, 1, 4)])
def test_a_residual_that_broadcasts_is_not_fused(residual_shape: tuple[int, ...]) -> None:
    """``Add`` broadcasts; the fused op adds a residual of the output's own shape only."""
    g, x, r, y, p = _block("NHWC", "relu", residual_shape=residual_shape)
    xv, rv = _floats(*x.shape.as_list()), _floats(*residual_shape)
    out, nodes = run_graph(g, y, {x: xv, r: rv})
    fused = [n for n in nodes if n.op == "_FusedConv2D"]
    assert [list(n.attrs["fused_ops"]) for n in fused] == [["BiasAdd"]]
    np.testing.assert_allclose(out, _reference(p, xv, rv, "relu"), rtol=1e-4, atol=1e-4)


def test_a_residual_of_unknown_shape_is_not_fused() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 4, 4, 2], name="x")
        r = kl.placeholder(kl.float32, [None, 4, 4, 2], name="r")
        c = kl.ops.conv2d(x, kl.constant(_floats(1, 1, 2, 2)), strides=[1] * 4, padding="SAME")
        y = kl.ops.relu(kl.ops.add_v2(kl.ops.bias_add(c, kl.constant(_floats(2))), r))
    sg = step_graph(g, [y.name], ["x:0", "r:0"])
    new, _ = run_pass(Remapper(), sg, device_types=("CPU",))
    fused = [n for n in new.nodes if n.op == "_FusedConv2D"]
    assert [list(n.attrs["fused_ops"]) for n in fused] == [["BiasAdd"]]


def test_a_bias_add_with_another_consumer_keeps_its_add() -> None:
    g, _x, _r, y, _ = _block()
    sg = step_graph(g, [y.name, "ba:0"], ["x:0", "r:0"])
    new, _ = run_pass(Remapper(), sg, device_types=("CPU",))
    assert "AddV2" in [n.op for n in new.nodes]  # ba is fetched: conv+ba fuse, the add stays


def _legacy_fused_conv_plugin() -> object:
    """A plugin whose CPU ``_FusedConv2D`` kernel (above numpy's) says nothing about
    ``fused_ops``, as every kernel registered before the residual forms existed."""

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()

            def legacy(ctx: klp.OpKernelContext) -> None:  # never run: only looked up
                raise AssertionError("not run")

            lib.kernel("_FusedConv2D", device="CPU", backend="numpy", priority=50)(legacy)
            registry.register_kernels(lib)

    return Plugin()


def test_no_residual_form_for_a_kernel_that_does_not_declare_it() -> None:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(_legacy_fused_conv_plugin(), name="legacy")
    g, _x, _r, y, _ = _block(graph=kl.Graph(registry))
    sg = step_graph(g, [y.name], ["x:0", "r:0"])
    new, _ = run_pass(Remapper(), sg, device_types=("CPU",))
    fused = [n for n in new.nodes if n.op == "_FusedConv2D"]
    assert [list(n.attrs["fused_ops"]) for n in fused] == [["BiasAdd"]]
    assert "AddV2" in [n.op for n in new.nodes]


def test_the_fused_op_checks_the_residual_when_built() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.constant(np.ones((1, 4, 4, 2), np.float32))
        f = kl.constant(np.ones((3, 3, 2, 5), np.float32))
        b = kl.constant(np.ones(5, np.float32))
        conv = {"strides": [1, 1, 1, 1], "padding": "SAME"}
        with pytest.raises(kl.InvalidArgumentError) as e:
            g.add_node(
                "_FusedConv2D",
                [x, f, [b, kl.constant(np.ones((1, 4, 4, 4), np.float32))]],
                {**conv, "fused_ops": ["BiasAdd", "Add", "Relu"]},
                name="fc",
            )
        assert "node 'fc' (op _FusedConv2D)" in str(e.value)
        assert "the residual and the output" in str(e.value)
        with pytest.raises(kl.InvalidArgumentError, match=r"num_args 2\), got 1 argument"):
            g.add_node("_FusedConv2D", [x, f, [b]], {**conv, "fused_ops": ["BiasAdd", "Add"]})
        with pytest.raises(kl.InvalidArgumentError, match=r"\['BiasAdd', 'Add', activation\]"):
            g.add_node("_FusedConv2D", [x, f, [b]], {**conv, "fused_ops": ["Add", "BiasAdd"]})
        with pytest.raises(kl.InvalidArgumentError, match=r"fused into _FusedConv2D only"):
            g.add_node(
                "_FusedMatMul",
                [kl.constant(np.ones((2, 2), np.float32))] * 2 + [[b, b]],
                {"fused_ops": ["BiasAdd", "Add"]},
            )


@pytest.mark.parametrize(
    ("kernel", "dtype"), [("numpy", np.float32), ("onednn", np.float32), ("torch", np.float64)]
)
def test_the_kernel_refuses_a_residual_of_another_shape_at_run_time(
    kernel: str, dtype: type
) -> None:
    """A graph built by hand with an unknown residual shape: the kernel names the shapes.
    numpy's kernel alone in its registry; with torch's plugin, float32 goes to oneDNN's
    and float64 to torch's general kernel."""
    from runtime_helpers import make_registry

    g = kl.Graph(make_registry()) if kernel == "numpy" else kl.Graph()
    with g.as_default():
        x = kl.constant(np.ones((1, 4, 4, 2), dtype))
        f = kl.constant(np.ones((1, 1, 2, 3), dtype))
        b = kl.constant(np.ones(3, dtype))
        r = kl.placeholder(kl.as_dtype(dtype), None, name="r")
        y = g.add_node(
            "_FusedConv2D",
            [x, f, [b, r]],
            {"strides": [1] * 4, "padding": "SAME", "fused_ops": ["BiasAdd", "Add"]},
            name="fc",
        ).outputs[0]
    with (
        kl.Session(g, kl.SessionConfig(graph_optimizer=False)) as sess,
        pytest.raises(kl.InvalidArgumentError) as e,
    ):
        sess.run(y, {r: np.ones((1, 4, 4, 1), dtype)})
    message = str(e.value)
    assert "'fc'" in message and "_FusedConv2D" in message
    assert "residual has shape (1, 4, 4, 1)" in message and "(1, 4, 4, 3)" in message


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["NHWC", "NCHW"]),
    st.sampled_from([None, "relu", "leaky_relu"]),
    st.integers(1, 2),
    st.integers(0, 2**31 - 1),
)
def test_residual_blocks_match_numpy_for_any_values(
    fmt: str, activation: str | None, stride: int, seed: int
) -> None:
    g, x, r, y, p = _block(fmt, activation, stride=stride)
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal(x.shape.as_list()).astype(np.float32)
    rv = rng.standard_normal(r.shape.as_list()).astype(np.float32)
    out, nodes = run_graph(g, y, {x: xv, r: rv})
    assert "AddV2" not in ops_of(nodes)
    np.testing.assert_allclose(out, _reference(p, xv, rv, activation), rtol=1e-4, atol=1e-4)


def test_two_convolutions_into_one_add_fuse_one_residual_form() -> None:
    """A ResNet downsampling block: both branches end in a BiasAdd into the same Add. One
    convolution takes the Add (the other's output is its residual), the other fuses its
    bias alone; no node is absorbed twice."""
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    f1, f2 = _floats(3, 3, 3, 4) * 0.3, _floats(1, 1, 3, 4)
    b1, b2 = _floats(4), _floats(4)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 5, 5, 3], name="x")
        main = kl.ops.bias_add(kl.ops.conv2d(x, kl.constant(f1), **attrs), kl.constant(b1))
        short = kl.ops.bias_add(kl.ops.conv2d(x, kl.constant(f2), **attrs), kl.constant(b2))
        y = kl.ops.relu(kl.ops.add_v2(main, short), name="y")
    xv = _floats(2, 5, 5, 3)
    out, nodes = run_graph(g, y, {x: xv})
    forms = sorted(list(n.attrs["fused_ops"]) for n in nodes if n.op == "_FusedConv2D")
    assert forms == [["BiasAdd"], ["BiasAdd", "Add", "Relu"]]
    assert ops_of(nodes).count("AddV2") == 0
    conv = conv2d_reference({**attrs, "data_format": "NHWC"})
    x64 = xv.astype(np.float64)
    want = np.maximum(
        conv(x64, f1.astype(np.float64)) + b1 + conv(x64, f2.astype(np.float64)) + b2, 0
    )
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def _limited_forms_plugin() -> object:
    """Device type ACME: the plain ops, and fused kernels that declare only some forms --
    ``_FusedConv2D`` (BiasAdd) and (BiasAdd, Add), ``_FusedMatMul`` (BiasAdd) and
    (BiasAdd, Relu). Only looked up by the pass, never run."""

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registry: klp.Registrar) -> None:
            lib = klp.KernelLibrary()

            def never(ctx: klp.OpKernelContext) -> None:
                raise AssertionError("not run")

            for op in ("Conv2D", "MatMul", "BiasAdd", "AddV2", "Relu", "Elu"):
                lib.kernel(op, device="ACME", backend="numpy")(never)
            conv_forms = (("BiasAdd",), ("BiasAdd", "Add"))
            matmul_forms = (("BiasAdd",), ("BiasAdd", "Relu"))
            for op, forms in (("_FusedConv2D", conv_forms), ("_FusedMatMul", matmul_forms)):
                lib.kernel(
                    op, device="ACME", backend="numpy", attr_constraints={"fused_ops": forms}
                )(never)
            registry.register_kernels(lib)

    return Plugin()


def test_a_kernel_declaring_only_shorter_forms_gets_the_longest_it_takes() -> None:
    """An undeclared activation (or residual) does not cost the whole fusion: the pass
    falls back to the longest form the device's kernel declares."""
    registry = klp.Registry()
    registry.register_plugin(fake_plugin(("ACME", FakeDeviceFactory("ACME"), 10)), name="acme")
    registry.register_plugin(_limited_forms_plugin(), name="limited")
    g, _x, _r, y, _ = _block(graph=kl.Graph(registry), activation="relu")
    with g.as_default():
        w = kl.constant(_floats(4, 3))
        m = kl.ops.bias_add(kl.ops.mat_mul(kl.ops.reshape(y, [-1, 4]), w), kl.constant(_floats(3)))
        elu = kl.ops.elu(m, name="elu")
        relu = kl.ops.relu(
            kl.ops.bias_add(
                kl.ops.mat_mul(elu, kl.constant(_floats(3, 3))), kl.constant(_floats(3))
            ),
            name="relu_mm",
        )
    sg = step_graph(g, [relu.name], ["x:0", "r:0"])
    new, _ = run_pass(Remapper(), sg, device_types=("ACME",))
    fused = sorted(
        (n.op, list(n.attrs["fused_ops"])) for n in new.nodes if n.op.startswith("_Fused")
    )
    assert fused == [
        ("_FusedConv2D", ["BiasAdd", "Add"]),  # (BiasAdd, Add, Relu) is not declared
        ("_FusedMatMul", ["BiasAdd"]),  # (BiasAdd, Elu) is not declared
        ("_FusedMatMul", ["BiasAdd", "Relu"]),
    ]
    assert {"Relu", "Elu"} <= set(ops_of(new.nodes))
