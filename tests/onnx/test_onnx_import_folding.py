"""Import-time constant propagation: a node whose inputs are all known at import (shape
arithmetic on constants, as torch's exporter writes for nn.MultiheadAttention) has its
outputs known at import too, computed by kernloom's own kernels, so the converters after
it see them (a Reshape's shape, hence the rank the next Unsqueeze needs). Checked against
onnxruntime; a random op and large values are never folded."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper
from onnx_helpers import FLOAT, model, run_both

import kernloom.onnx as ko
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._folding import MAX_FOLDED_ELEMENTS, folded_outputs


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _reshape_of_constant_arithmetic(x_shape: list[int | str]) -> onnx.ModelProto:
    """Reshape(x, Concat(Slice(Shape(x), 0, Add(2, 0)), -1)) then Unsqueeze(axes=[0]):
    the Slice's end is an Add of two constants (torch writes Mod/Add of constants there)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Add", ["two", "zero"], ["end"], name="end"),
        helper.make_node("Slice", ["s", "zero", "end"], ["head"], name="head"),
        helper.make_node("Concat", ["head", "minus1"], ["shape"], axis=0, name="join"),
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("Unsqueeze", ["r", "zero"], ["y"], name="unsqueeze"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [_ints("two", [2]), _ints("zero", [0]), _ints("minus1", [-1])],
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    made.ir_version = 8
    return made


@pytest.mark.parametrize("x_shape", [[2, 5, 4], ["b", 5, 4], ["b", "t", "c"]])
def test_shape_arithmetic_on_constants_gives_the_reshape_its_rank(
    x_shape: list[int | str],
) -> None:
    x = np.arange(40, dtype=np.float32).reshape(2, 5, 4)
    proto = _reshape_of_constant_arithmetic(x_shape)
    (ours,), (ort,) = run_both(proto, {"x": x})
    assert ours.shape == ort.shape == (1, 2, 5, 4)
    np.testing.assert_array_equal(ours, ort)


def test_the_folded_value_is_what_the_graph_computes() -> None:
    """A Slice's end computed from integer Div, Mod and Abs of constants: ONNX's Div
    truncates toward zero (-7 / 2 = -3) and its Mod takes the divisor's sign (-7 mod 2 =
    1), so the end is 3 - 1 = 2 and y is x reshaped to [2, 3, 4] with a new axis in front;
    a floor division or a C remainder would give another end, and another shape."""
    nodes = [
        helper.make_node("Div", ["a", "b"], ["q"], name="div"),
        helper.make_node("Mod", ["a", "b"], ["m"], name="mod"),
        helper.make_node("Abs", ["q"], ["size"], name="abs"),
        helper.make_node("Sub", ["size", "m"], ["end"], name="end"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "zero", "end"], ["head"], name="head"),
        helper.make_node("Concat", ["head", "minus1"], ["target"], axis=0, name="join"),
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("Unsqueeze", ["r", "zero"], ["y"], name="unsqueeze"),
    ]
    proto = model(
        nodes,
        {"x": (FLOAT, ["n", 3, 4])},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers={
            "a": np.array([-7], np.int64),
            "b": np.array([2], np.int64),
            "zero": np.array([0], np.int64),
            "minus1": np.array([-1], np.int64),
        },
    )
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (ours,), (ort,) = run_both(proto, {"x": x})
    assert ours.shape == ort.shape == (1, 2, 3, 4)
    np.testing.assert_array_equal(ours, ort)


def test_a_random_op_is_never_folded() -> None:
    """(kernloom converts no random op today; were one added, its draws stay draws.)"""
    from kernloom import ops

    ctx = _context_with({"c": np.zeros(3, np.float32)})
    with ctx.graph.as_default():
        stand_in = ops.identity(ctx.values["c"])
    node = _node("RandomUniformLike", ["c"], ["r"])
    assert folded_outputs(ctx, node, [stand_in]) == {}


def test_a_value_behind_a_run_time_check_is_not_folded() -> None:
    """A converter's Assert (a control input) runs before the value: folding would skip it."""
    from kernloom import ops
    from kernloom.graph.builder import control_dependencies
    from kernloom.onnx.ops._helpers import run_time_check

    ctx = _context_with({"b": np.ones(3, np.float32), "ok": np.array(False)})
    with ctx.graph.as_default():
        check = run_time_check(ctx.values["ok"], [ctx.values["b"]], "never holds", "check")
        with control_dependencies([check]):
            guarded = ops.add_v2(ctx.values["b"], ctx.values["b"])
    assert folded_outputs(ctx, _node("Add", ["b", "b"], ["s"]), [guarded]) == {}


def _context_with(values: dict[str, np.ndarray[Any, Any]]) -> ConversionContext:
    import kernloom as kl

    ctx = ConversionContext(kl.Graph(), {"": 17})
    with ctx.graph.as_default():
        for name, value in values.items():
            ctx.static[name] = value
            ctx.values[name] = ctx.const(value)
    return ctx


def _node(op: str, inputs: list[str], outputs: list[str]) -> OnnxNode:
    return OnnxNode(helper.make_node(op, inputs, outputs, name=op.lower()), op.lower(), 17)


def test_values_over_the_size_cap_are_not_folded() -> None:
    from kernloom import ops

    big = MAX_FOLDED_ELEMENTS + 1
    ctx = _context_with({"a": np.ones(big, np.float32), "b": np.ones(3, np.float32)})
    with ctx.graph.as_default():
        summed = ops.add_v2(ctx.values["a"], ctx.values["a"])
        small = ops.add_v2(ctx.values["b"], ctx.values["b"])
    assert folded_outputs(ctx, _node("Add", ["a", "a"], ["s"]), [summed]) == {}
    found = folded_outputs(ctx, _node("Add", ["b", "b"], ["t"]), [small])
    np.testing.assert_array_equal(found["t"], [2.0, 2.0, 2.0])


def test_an_input_not_known_at_import_stops_folding() -> None:
    from kernloom import ops
    from kernloom.graph.builder import placeholder

    ctx = _context_with({"b": np.ones(3, np.float32)})
    with ctx.graph.as_default():
        fed = placeholder(ctx.values["b"].dtype, [3], name="x")
        ctx.values["x"] = fed
        summed = ops.add_v2(fed, ctx.values["b"])
    assert folded_outputs(ctx, _node("Add", ["x", "b"], ["s"]), [summed]) == {}


# -- torch's exports --------------------------------------------------------------------


def _torch_export(kind: str, dynamic: bool) -> tuple[bytes, np.ndarray[Any, Any]]:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    class Attention(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.MultiheadAttention(16, 4, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.a(x, x, x, need_weights=False)[0]

    class Encoder(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.l = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.l(x)

    module = (Attention if kind == "attention" else Encoder)().eval()
    x = torch.randn(2, 5, 16)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (x,),
            buffer,
            opset_version=17,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch", 1: "seq"}} if dynamic else None,
            dynamo=False,
        )
    return buffer.getvalue(), x.numpy()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-batch"])
@pytest.mark.parametrize("kind", ["attention", "encoder"])
def test_torch_attention_exports_match_onnxruntime(kind: str, dynamic: bool) -> None:
    data, x = _torch_export(kind, dynamic)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    session = ko.InferenceSession(onnx.load_from_string(data))
    (got,) = session.run(None, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if dynamic:  # another batch than the export's (torch's trace keeps the length)
        other = np.random.default_rng(0).standard_normal((3, 5, 16)).astype(np.float32)
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
            None, {"x": other}
        )[0]
        (got,) = session.run(None, {"x": other})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
