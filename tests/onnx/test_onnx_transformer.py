"""RotaryEmbedding, SwiGLU, CausalConvWithState, LinearAttention, FlexAttention and
Attention's external KV cache (nonpad_kv_seqlen): converters composed of other kernloom
ops, checked against onnx's reference evaluator on shapes, attributes and dtypes beyond
onnx's node suite, with sizes known at import and only at run time, and their import
errors, which must name the node, its op and its opset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_helpers import FLOAT, INT64, check_against_oracle, model

import kernloom.onnx as ko

FLOAT16 = TensorProto.FLOAT16
DOUBLE = TensorProto.DOUBLE
BOOL = TensorProto.BOOL
ELEM = {np.float32: FLOAT, np.float16: FLOAT16, np.float64: DOUBLE}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _inputs(
    feeds: dict[str, np.ndarray[Any, Any]], runtime: Sequence[str] = (), unknown: Sequence[int] = ()
) -> dict[str, tuple[int, Sequence[int | str | None]]]:
    """Graph inputs for ``feeds``; those named in ``runtime`` with their dims at positions
    ``unknown`` left open (sizes only known at run time)."""
    declared: dict[str, tuple[int, Sequence[int | str | None]]] = {}
    for name, value in feeds.items():
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        dims: list[int | str | None] = list(value.shape)
        if name in runtime:
            for axis in unknown:
                if axis < len(dims):
                    dims[axis] = None
        declared[name] = (elem, dims)
    return declared


def _outputs(names: Sequence[str], elem: int) -> dict[str, tuple[int, None]]:
    return dict.fromkeys(names, (elem, None))


# -- RotaryEmbedding -----------------------------------------------------------------------


def _rotary(feeds: dict[str, np.ndarray[Any, Any]], runtime: bool, **attrs: int) -> onnx.ModelProto:
    names = list(feeds)
    node = helper.make_node("RotaryEmbedding", names, ["y"], name="rope", **attrs)
    elem = ELEM[feeds["x"].dtype.type]
    inputs = _inputs(feeds, ["x", "pos", "cos", "sin"] if runtime else [], [0, 1])
    return model([node], inputs, _outputs(["y"], elem), opset=23)


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary", [0, 4])
def test_rotary_embedding_4d_with_positions(runtime: bool, interleaved: int, rotary: int) -> None:
    rng = _rng()
    half = (rotary or 6) // 2
    feeds = {
        "x": rng.standard_normal((3, 2, 5, 6)).astype(np.float32),  # [B, heads, seq, size]
        "cos": rng.standard_normal((11, half)).astype(np.float32),
        "sin": rng.standard_normal((11, half)).astype(np.float32),
        "pos": rng.integers(0, 11, (3, 5)).astype(np.int64),
    }
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary}
    check_against_oracle(_rotary(feeds, runtime, **attrs), feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_3d_without_positions(runtime: bool, interleaved: int) -> None:
    rng = _rng(1)
    feeds = {
        "x": rng.standard_normal((2, 4, 3 * 8)).astype(np.float32),  # [B, seq, heads * size]
        "cos": rng.standard_normal((2, 4, 3)).astype(np.float32),  # rotary dim 6 of 8
        "sin": rng.standard_normal((2, 4, 3)).astype(np.float32),
    }
    attrs = {"interleaved": interleaved, "num_heads": 3, "rotary_embedding_dim": 6}
    check_against_oracle(_rotary(feeds, runtime, **attrs), feeds, rtol=1e-5, atol=1e-6)


def test_rotary_embedding_float16() -> None:
    rng = _rng(2)
    feeds = {
        "x": rng.standard_normal((1, 2, 3, 4)).astype(np.float16),
        "cos": rng.standard_normal((3, 2)).astype(np.float16),
        "sin": rng.standard_normal((3, 2)).astype(np.float16),
        "pos": np.asarray([[2, 0, 1]], np.int64),
    }
    check_against_oracle(_rotary(feeds, False), feeds, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("shape", "attrs", "message"),
    [
        ((2, 3, 8), {}, "needs the num_heads attribute"),
        ((2, 3, 8), {"num_heads": 3}, "not a multiple of num_heads 3"),
        ((2, 2, 3, 8), {"rotary_embedding_dim": 3}, "positive even number, got 3"),
        ((2, 8), {}, "must be 3-D or 4-D, got rank 2"),
    ],
)
def test_rotary_embedding_errors_name_the_node(
    shape: tuple[int, ...], attrs: dict[str, int], message: str
) -> None:
    feeds = {
        "x": np.zeros(shape, np.float32),
        "cos": np.zeros((4, 2), np.float32),
        "sin": np.zeros((4, 2), np.float32),
        "pos": np.zeros((2, 3), np.int64),
    }
    with pytest.raises(
        ko.OnnxImportError, match=rf"'rope' \(RotaryEmbedding, opset 23\).*{message}"
    ):
        ko.import_model(_rotary(feeds, False, **attrs))


# -- SwiGLU --------------------------------------------------------------------------------


def _swiglu(
    feeds: dict[str, np.ndarray[Any, Any]], runtime: bool, **attrs: float
) -> onnx.ModelProto:
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], name="glu", **attrs)
    elem = ELEM[feeds["a"].dtype.type]
    inputs = _inputs(feeds, ["a", "b"] if runtime else [], [0, 1, 2])
    return model([node], inputs, _outputs(["y"], elem), opset=28)


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize("alpha", [None, 1.702, -0.5])
@pytest.mark.parametrize("shape", [(3, 5, 8), (7,), (), (2, 0)])
def test_swiglu(runtime: bool, alpha: float | None, shape: tuple[int, ...]) -> None:
    rng = _rng(3)
    feeds = {
        "a": (rng.standard_normal(shape) * 4).astype(np.float32),
        "b": rng.standard_normal(shape).astype(np.float32),
    }
    attrs = {} if alpha is None else {"alpha": alpha}
    check_against_oracle(_swiglu(feeds, runtime, **attrs), feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_swiglu_other_dtypes(dtype: type) -> None:
    rng = _rng(4)
    feeds = {
        "a": rng.standard_normal((4, 6)).astype(dtype),
        "b": rng.standard_normal((4, 6)).astype(dtype),
    }
    check_against_oracle(_swiglu(feeds, False, alpha=0.5), feeds, rtol=2e-3, atol=1e-3)


def test_swiglu_refuses_shapes_that_differ() -> None:
    feeds = {"a": np.zeros((2, 3), np.float32), "b": np.zeros((1, 3), np.float32)}
    with pytest.raises(ko.OnnxImportError, match=r"'glu' \(SwiGLU, opset 28\).*no broadcast"):
        ko.import_model(_swiglu(feeds, False))


# -- CausalConvWithState -------------------------------------------------------------------


def _causal_conv(
    feeds: dict[str, np.ndarray[Any, Any]], runtime: bool, **attrs: str
) -> onnx.ModelProto:
    names = ["x", "w", "bias" if "bias" in feeds else "", "past" if "past" in feeds else ""]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], name="conv", **attrs)
    elem = ELEM[feeds["x"].dtype.type]
    inputs = _inputs(feeds, ["x", "past"] if runtime else [], [0, 2])
    return model([node], inputs, _outputs(["y", "state"], elem), opset=27)


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize("activation", [None, "silu", "swish", "none"])
@pytest.mark.parametrize(
    ("k", "length", "bias", "past"),
    [
        (4, 9, False, False),
        (4, 9, True, True),
        (3, 1, True, True),  # a decode step
        (5, 2, False, False),  # shorter than the state: the zero padding stays in it
        (5, 2, False, True),
        (1, 6, True, False),  # no state at all: [B, C, 0]
    ],
)
def test_causal_conv_with_state(
    runtime: bool, activation: str | None, k: int, length: int, bias: bool, past: bool
) -> None:
    rng = _rng(k * 10 + length)
    feeds = {
        "x": rng.standard_normal((2, 3, length)).astype(np.float32),
        "w": rng.standard_normal((3, 1, k)).astype(np.float32),
    }
    if bias:
        feeds["bias"] = rng.standard_normal(3).astype(np.float32)
    if past:
        feeds["past"] = rng.standard_normal((2, 3, k - 1)).astype(np.float32)
    attrs = {} if activation is None else {"activation": activation}
    check_against_oracle(_causal_conv(feeds, runtime, **attrs), feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("w_shape", "attrs", "message"),
    [
        ((3, 1, None), {}, "dimension 2 of weight must be known at import time"),
        ((3, 1, 2), {"activation": "gelu"}, "'silu' or 'swish', got 'gelu'"),
        ((3, 2), {}, "weight must be 3-D, got rank 2"),
    ],
)
def test_causal_conv_with_state_errors_name_the_node(
    w_shape: tuple[int | None, ...], attrs: dict[str, str], message: str
) -> None:
    node = helper.make_node(
        "CausalConvWithState", ["x", "w"], ["y", "state"], name="conv", **attrs
    )  # (both outputs: the schema requires them)
    proto = model(
        [node],
        {"x": (FLOAT, [1, 3, 4]), "w": (FLOAT, list(w_shape))},
        {"y": (FLOAT, None)},
        opset=27,
    )
    with pytest.raises(
        ko.OnnxImportError, match=rf"'conv' \(CausalConvWithState, opset 27\).*{message}"
    ):
        ko.import_model(proto)


# -- LinearAttention -----------------------------------------------------------------------


def _l2(x: np.ndarray[Any, Any], heads: int) -> np.ndarray[Any, Any]:
    b, t, width = x.shape
    split = x.reshape(b, t, heads, width // heads)
    return (split / np.linalg.norm(split, axis=-1, keepdims=True)).reshape(x.shape)


def _linear_attention(
    feeds: dict[str, np.ndarray[Any, Any]], runtime: bool, **attrs: Any
) -> onnx.ModelProto:
    """The model of one LinearAttention node; ``runtime``: batch and sequence lengths (and
    the state's heads) are left to run time, which takes the while loop."""
    names = ["q", "k", "v", "past", "decay", "beta"]
    used = [n if n in feeds else "" for n in names]
    while used[-1] == "":
        used.pop()
    node = helper.make_node("LinearAttention", used, ["y", "state"], name="la", **attrs)
    elem = ELEM[feeds["q"].dtype.type]
    inputs = _inputs(feeds, list(feeds) if runtime else [], [0, 1])
    return model([node], inputs, _outputs(["y", "state"], elem), opset=27)


LINEAR_CASES = [
    # rule, q heads, kv heads, steps, decay width (0: none, 1: per head, 2: per key dim),
    # beta width (0: none, 1: one for all heads, 2: per head), past state
    ("linear", 2, 2, 5, 0, 0, False),
    ("linear", 4, 2, 3, 0, 0, True),
    ("gated", 2, 2, 4, 2, 0, True),
    ("gated", 3, 1, 4, 1, 0, False),
    ("delta", 2, 2, 4, 0, 2, False),
    ("delta", 4, 2, 1, 0, 1, True),
    ("gated_delta", 2, 1, 6, 2, 2, True),
    ("gated_delta", 4, 4, 3, 1, 1, False),
    ("gated_delta", 2, 2, 0, 2, 2, True),  # no token: the state passes through
    ("linear", 2, 2, 0, 0, 0, False),  # no token and no state: zeros
]


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize(("rule", "hq", "hkv", "t", "decay", "beta", "past"), LINEAR_CASES)
def test_linear_attention(
    runtime: bool,
    rule: str,
    hq: int,
    hkv: int,
    t: int,
    decay: int,
    beta: int,
    past: bool,
) -> None:
    rng = _rng(hq * 7 + t)
    b, dk, dv = 2, 3, 5
    feeds = {
        "q": rng.standard_normal((b, t, hq * dk)).astype(np.float32),
        "k": _l2(rng.standard_normal((b, t, hkv * dk)), hkv).astype(np.float32),
        "v": rng.standard_normal((b, t, hkv * dv)).astype(np.float32),
    }
    if past:
        feeds["past"] = rng.standard_normal((b, hkv, dk, dv)).astype(np.float32)
    if decay:
        width = hkv if decay == 1 else hkv * dk
        feeds["decay"] = (-np.abs(rng.standard_normal((b, t, width))) * 0.2).astype(np.float32)
    if beta:
        width = 1 if beta == 1 else hkv
        feeds["beta"] = rng.random((b, t, width)).astype(np.float32)
    attrs = {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv}
    proto = _linear_attention(feeds, runtime, **attrs)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("rule", "hq", "hkv", "t", "decay", "beta", "past"), LINEAR_CASES)
def test_linear_attention_with_a_known_batch_and_a_run_time_length(
    rule: str, hq: int, hkv: int, t: int, decay: int, beta: int, past: bool
) -> None:
    """The sequence length known at run time only (the while loop), the batch and the
    past state's shape at import: the outputs' invariant took the state's batch though
    theirs was unknown (every loop with a past state was refused), and a state update
    through inputs of run-time shape infers (2, ?, 3, 5) for (2, 1, 3, 5), which
    kl.while_loop refuses as less specific than the state's invariant."""
    rng = _rng(hq * 7 + t)
    b, dk, dv = 2, 3, 5
    feeds = {
        "q": rng.standard_normal((b, t, hq * dk)).astype(np.float32),
        "k": _l2(rng.standard_normal((b, t, hkv * dk)), hkv).astype(np.float32),
        "v": rng.standard_normal((b, t, hkv * dv)).astype(np.float32),
    }
    if past:
        feeds["past"] = rng.standard_normal((b, hkv, dk, dv)).astype(np.float32)
    if decay:
        width = hkv if decay == 1 else hkv * dk
        feeds["decay"] = (-np.abs(rng.standard_normal((b, t, width))) * 0.2).astype(np.float32)
    if beta:
        width = 1 if beta == 1 else hkv
        feeds["beta"] = rng.random((b, t, width)).astype(np.float32)
    attrs = {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv}
    names = ["q", "k", "v", "past", "decay", "beta"]
    used = [n if n in feeds else "" for n in names]
    while used[-1] == "":
        used.pop()
    node = helper.make_node("LinearAttention", used, ["y", "state"], name="la", **attrs)
    inputs = _inputs(feeds, [n for n in feeds if n != "past"], [1])
    proto = model([node], inputs, _outputs(["y", "state"], FLOAT), opset=27)
    check_against_oracle(proto, feeds, rtol=1e-5, atol=1e-5)


def test_linear_attention_scale_and_float16() -> None:
    rng = _rng(9)
    feeds = {
        "q": rng.standard_normal((1, 3, 2 * 4)).astype(np.float16),
        "k": _l2(rng.standard_normal((1, 3, 2 * 4)), 2).astype(np.float16),
        "v": rng.standard_normal((1, 3, 2 * 2)).astype(np.float16),
        "past": rng.standard_normal((1, 2, 4, 2)).astype(np.float32),  # a float32 state
        "decay": (-np.abs(rng.standard_normal((1, 3, 2)))).astype(np.float16),
        "beta": rng.random((1, 3, 2)).astype(np.float16),
    }
    attrs = {"q_num_heads": 2, "kv_num_heads": 2, "scale": 0.3, "chunk_size": 2}
    check_against_oracle(_linear_attention(feeds, False, **attrs), feeds, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("inputs", "attrs", "message"),
    [
        ({"q": [1, 2, None]}, {}, "dimension 2 of query must be known at import time"),
        ({}, {"update_rule": "gated"}, "update_rule 'gated' needs decay"),
        ({"beta": [1, 2, 2]}, {"update_rule": "linear"}, "takes no beta .*remove it"),
        ({}, {"update_rule": "rwkv"}, "must be one of linear, gated, delta, gated_delta"),
        ({}, {"q_num_heads": 3}, r"q_num_heads \(3\) must be a positive multiple"),
        (
            {"decay": [1, 2, 3], "beta": [1, 2, 2]},
            {"update_rule": "gated_delta"},
            "decay's last dimension 3",
        ),
    ],
)
def test_linear_attention_errors_name_the_node(
    inputs: dict[str, list[int | None]], attrs: dict[str, Any], message: str
) -> None:
    shapes: dict[str, list[int | None]] = {"q": [1, 2, 4], "k": [1, 2, 4], "v": [1, 2, 4]}
    shapes.update(inputs)
    names = [n if n in shapes else "" for n in ["q", "k", "v", "past", "decay", "beta"]]
    while names[-1] == "":
        names.pop()
    settings = {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "linear", **attrs}
    # (both outputs: the schema requires them)
    node = helper.make_node("LinearAttention", names, ["y", "state"], name="la", **settings)
    declared = {n: (FLOAT, s) for n, s in shapes.items()}
    proto = model([node], declared, {"y": (FLOAT, None)}, opset=27)
    with pytest.raises(ko.OnnxImportError, match=rf"'la' \(LinearAttention, opset 27\).*{message}"):
        ko.import_model(proto)


# -- FlexAttention -------------------------------------------------------------------------


def _flex(
    feeds: dict[str, np.ndarray[Any, Any]],
    runtime: bool,
    **attrs: Any,
) -> onnx.ModelProto:
    node = helper.make_node(
        "FlexAttention", ["q", "k", "v"], ["y"], name="flex", domain="ai.onnx.preview", **attrs
    )
    elem = ELEM[feeds["q"].dtype.type]
    inputs = _inputs(feeds, list(feeds) if runtime else [], [0, 2])
    graph = helper.make_graph(
        [node],
        "flex",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    opsets = [helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)]
    made = helper.make_model(graph, opset_imports=opsets)
    made.ir_version = 10
    return made


def _causal_score_mod(elem: int) -> onnx.GraphProto:
    """scores where the key is at most the query's position (counted from the end, so
    that a longer key sequence is a cache), else -1e4: built from scores' run-time shape."""
    nodes = [
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["rows"], axis=0),
        helper.make_node("Gather", ["shape", "three"], ["cols"], axis=0),
        helper.make_node("Sub", ["cols", "rows"], ["offset"]),
        helper.make_node("Range", ["zero", "rows", "one"], ["r"]),
        helper.make_node("Add", ["r", "offset"], ["r_at"]),
        helper.make_node("Unsqueeze", ["r_at", "last"], ["r_col"]),
        helper.make_node("Range", ["zero", "cols", "one"], ["c"]),
        helper.make_node("LessOrEqual", ["c", "r_col"], ["keep"]),
        helper.make_node("Where", ["keep", "s", "low"], ["out"]),
    ]
    consts = [
        helper.make_tensor("two", INT64, [], [2]),
        helper.make_tensor("three", INT64, [], [3]),
        helper.make_tensor("zero", INT64, [], [0]),
        helper.make_tensor("one", INT64, [], [1]),
        helper.make_tensor("last", INT64, [1], [1]),
        helper.make_tensor("low", elem, [], [-1e4]),
    ]
    return helper.make_graph(
        nodes,
        "causal",
        [helper.make_tensor_value_info("s", elem, None)],
        [helper.make_tensor_value_info("out", elem, None)],
        consts,
    )


def _power_prob_mod(elem: int) -> onnx.GraphProto:
    """probs squared, renormalised: a prob_mod that uses the values it gets."""
    nodes = [
        helper.make_node("Mul", ["p", "p"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axis"], ["total"], keepdims=1),
        helper.make_node("Div", ["sq", "total"], ["out"]),
    ]
    return helper.make_graph(
        nodes,
        "power",
        [helper.make_tensor_value_info("p", elem, None)],
        [helper.make_tensor_value_info("out", elem, None)],
        [helper.make_tensor("axis", INT64, [1], [-1])],
    )


FLEX_CASES = [
    # q heads, kv heads, q len, kv len, score_mod, prob_mod, scale
    (2, 2, 4, 4, False, False, None),
    (4, 2, 3, 5, True, False, None),
    (6, 3, 1, 6, True, True, 0.7),
    (3, 1, 5, 5, False, True, None),
]


@pytest.mark.parametrize("runtime", [False, True], ids=["import", "runtime"])
@pytest.mark.parametrize(("hq", "hkv", "lq", "lk", "score", "prob", "scale"), FLEX_CASES)
def test_flex_attention(
    runtime: bool,
    hq: int,
    hkv: int,
    lq: int,
    lk: int,
    score: bool,
    prob: bool,
    scale: float | None,
) -> None:
    rng = _rng(hq + lk)
    feeds = {
        "q": rng.standard_normal((2, hq, lq, 4)).astype(np.float32),
        "k": rng.standard_normal((2, hkv, lk, 4)).astype(np.float32),
        "v": rng.standard_normal((2, hkv, lk, 3)).astype(np.float32),
    }
    attrs: dict[str, Any] = {}
    if score:
        attrs["score_mod"] = _causal_score_mod(FLOAT)
    if prob:
        attrs["prob_mod"] = _power_prob_mod(FLOAT)
    if scale is not None:
        attrs["scale"] = scale
    check_against_oracle(_flex(feeds, runtime, **attrs), feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("dtype", "precision", "mod_elem"),
    [
        (np.float16, None, FLOAT),  # promoted to float32 for the softmax
        (np.float64, None, DOUBLE),
        (np.float32, DOUBLE, DOUBLE),
        (np.float16, FLOAT16, FLOAT16),
    ],
)
def test_flex_attention_dtypes(dtype: type, precision: int | None, mod_elem: int) -> None:
    rng = _rng(5)
    feeds = {
        "q": rng.standard_normal((1, 2, 3, 4)).astype(dtype),
        "k": rng.standard_normal((1, 2, 3, 4)).astype(dtype),
        "v": rng.standard_normal((1, 2, 3, 2)).astype(dtype),
    }
    attrs: dict[str, Any] = {"score_mod": _causal_score_mod(mod_elem)}
    if precision is not None:
        attrs["softmax_precision"] = precision
    tol = 2e-3 if dtype == np.float16 else 1e-6
    check_against_oracle(_flex(feeds, False, **attrs), feeds, rtol=tol, atol=tol)


def _two_input_graph() -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("Add", ["s", "t"], ["out"])],
        "two",
        [helper.make_tensor_value_info(n, FLOAT, None) for n in ("s", "t")],
        [helper.make_tensor_value_info("out", FLOAT, None)],
    )


@pytest.mark.parametrize(
    ("k_heads", "attrs", "message"),
    [
        (2, {"score_mod": _two_input_graph()}, "score_mod must take one input and give one"),
        (3, {}, "Q's 4 heads must be a multiple of K's and V's 3"),
        (None, {}, "dimension 1 of K must be known at import time"),
    ],
)
def test_flex_attention_errors_name_the_node(
    k_heads: int | None, attrs: dict[str, Any], message: str
) -> None:
    node = helper.make_node(
        "FlexAttention", ["q", "k", "v"], ["y"], name="flex", domain="ai.onnx.preview", **attrs
    )
    graph = helper.make_graph(
        [node],
        "flex",
        [
            helper.make_tensor_value_info("q", FLOAT, [1, 4, 2, 4]),
            helper.make_tensor_value_info("k", FLOAT, [1, k_heads, 2, 4]),
            helper.make_tensor_value_info("v", FLOAT, [1, k_heads, 2, 4]),
        ],
        [helper.make_tensor_value_info("y", FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)]
    proto = helper.make_model(graph, opset_imports=opsets)
    with pytest.raises(
        ko.OnnxImportError, match=rf"'flex' \(ai.onnx.preview::FlexAttention, opset 1\).*{message}"
    ):
        ko.import_model(proto)


# -- Attention with an external KV cache (nonpad_kv_seqlen) --------------------------------


def _attention(
    feeds: dict[str, np.ndarray[Any, Any]], opset: int, outputs: int, **attrs: Any
) -> onnx.ModelProto:
    names = ["q", "k", "v", "mask", "past_k", "past_v", "nonpad"]
    used = [n if n in feeds else "" for n in names]
    while used[-1] == "":
        used.pop()
    outs = ["y", "present_k", "present_v", "qk"][:outputs]
    node = helper.make_node("Attention", used, outs, name="attn", **attrs)
    elem = ELEM[feeds["q"].dtype.type]
    return model([node], _inputs(feeds), _outputs(outs, elem), opset=opset)


NONPAD_CASES = [
    # q heads, kv heads, q len, kv len, causal, left, right, mask shape, nonpad, mode
    (2, 2, 3, 6, 0, -1, -1, None, [6, 2], 0),
    (2, 2, 3, 6, 1, -1, -1, None, [5, 3], 3),
    (4, 2, 1, 5, 1, -1, -1, None, [4, 1], 0),  # GQA decode
    (2, 2, 4, 6, 1, 1, -1, (4, 6), [6, 5], 2),
    (2, 1, 2, 6, 0, 2, 0, (2, 2, 6), [4, 6], 3),
    (2, 2, 3, 5, 1, -1, -1, (2, 1, 3, 5), [2, 5], 0),  # rows with nothing to attend
    (2, 2, 2, 7, 0, -1, 1, (7,), [0, 7], 3),  # an empty cache
]


@pytest.mark.parametrize("bool_mask", [False, True], ids=["float_mask", "bool_mask"])
@pytest.mark.parametrize(
    ("hq", "hkv", "lq", "lk", "causal", "left", "right", "mask", "nonpad", "mode"),
    NONPAD_CASES,
)
def test_attention_with_an_external_kv_cache(
    bool_mask: bool,
    hq: int,
    hkv: int,
    lq: int,
    lk: int,
    causal: int,
    left: int,
    right: int,
    mask: tuple[int, ...] | None,
    nonpad: list[int],
    mode: int,
) -> None:
    rng = _rng(lq * 10 + lk)
    feeds: dict[str, np.ndarray[Any, Any]] = {
        "q": rng.standard_normal((2, hq, lq, 4)).astype(np.float32),
        "k": rng.standard_normal((2, hkv, lk, 4)).astype(np.float32),
        "v": rng.standard_normal((2, hkv, lk, 3)).astype(np.float32),
    }
    if mask is not None:
        keep = rng.random(mask) < 0.8
        feeds["mask"] = (
            keep if bool_mask else np.where(keep, rng.random(mask), -np.inf).astype(np.float32)
        )
    feeds["nonpad"] = np.asarray(nonpad, np.int64)
    attrs = {"is_causal": causal, "qk_matmul_output_mode": mode}
    if left >= 0 or right >= 0:
        attrs |= {"left_window_size": left, "right_window_size": right}
    check_against_oracle(_attention(feeds, 25, 4, **attrs), feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_attention_with_an_external_kv_cache_3d_and_other_dtypes(dtype: type) -> None:
    rng = _rng(6)
    feeds = {
        "q": rng.standard_normal((2, 3, 4 * 2)).astype(dtype),  # [B, seq, heads * size]
        "k": rng.standard_normal((2, 5, 2 * 2)).astype(dtype),
        "v": rng.standard_normal((2, 5, 2 * 3)).astype(dtype),
        "nonpad": np.asarray([5, 3], np.int64),
    }
    attrs = {"is_causal": 1, "q_num_heads": 4, "kv_num_heads": 2, "softcap": 2.0}
    tol = 2e-3 if dtype == np.float16 else 1e-9
    check_against_oracle(_attention(feeds, 24, 1, **attrs), feeds, rtol=tol, atol=tol)


def test_attention_in_float64_with_a_mask_and_a_cache() -> None:
    rng = _rng(7)
    feeds = {
        "q": rng.standard_normal((1, 2, 2, 4)),
        "k": rng.standard_normal((1, 2, 3, 4)),
        "v": rng.standard_normal((1, 2, 3, 4)),
        "mask": rng.random((2, 5)) < 0.7,
        "past_k": rng.standard_normal((1, 2, 2, 4)),
        "past_v": rng.standard_normal((1, 2, 2, 4)),
    }
    check_against_oracle(_attention(feeds, 23, 4, is_causal=1), feeds, rtol=1e-12)


def test_attention_refuses_an_external_cache_with_past_key() -> None:
    feeds = {
        name: np.zeros((1, 2, 2, 4), np.float32) for name in ("q", "k", "v", "past_k", "past_v")
    }
    feeds["nonpad"] = np.asarray([2], np.int64)
    with pytest.raises(
        ko.OnnxImportError,
        match=r"'attn' \(Attention, opset 24\).*cannot be combined with past_key",
    ):
        ko.import_model(_attention(feeds, 24, 1))
