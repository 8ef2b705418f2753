"""The math family added for real models (issue 18) and the names current TF emits (issue 21):
wrappers with TF's names and arguments, graph-building errors naming the node, run-time
errors naming the node on every backend, and properties checked against Python integers.

Values on every dtype, edge value and shape are checked by the shared case table
(``kernloom.testing.cases.elementwise``) on the numpy, torch and CuPy kernels.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_kernel, run_op

NEW_OPS = {
    "Relu6": "relu6",
    "Elu": "elu",
    "Selu": "selu",
    "LeakyRelu": "leaky_relu",
    "Softplus": "softplus",
    "Softsign": "softsign",
    "Erf": "erf",
    "Rsqrt": "rsqrt",
    "Reciprocal": "reciprocal",
    "Abs": "abs",
    "Sign": "sign",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Sin": "sin",
    "Cos": "cos",
    "Atan": "atan",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
    "Atan2": "atan2",
    "Erfc": "erfc",
    "Expm1": "expm1",
    "Log1p": "log1p",
    "IsNan": "is_nan",
    "IsInf": "is_inf",
    "IsFinite": "is_finite",
    "FloorDiv": "floor_div",
    "FloorMod": "floor_mod",
    "SquaredDifference": "squared_difference",
    "NotEqual": "not_equal",
    "GreaterEqual": "greater_equal",
    "LessEqual": "less_equal",
    "LogicalAnd": "logical_and",
    "LogicalOr": "logical_or",
    "LogicalNot": "logical_not",
    "ClipByValue": "clip_by_value",
    "AddV2": "add_v2",
    "Div": "div",
    "DivNoNan": "div_no_nan",
    "Prod": "prod",
    "All": "all",
    "Any": "any",
    "ArgMin": "arg_min",
    "Cumsum": "cumsum",
    "TopKV2": "top_kv2",
}


@pytest.fixture
def g() -> Any:
    graph = kl.Graph()
    with graph.as_default():
        yield graph


def test_every_op_has_a_wrapper_with_tf_name_and_arguments() -> None:
    registry = klp.default_registry()
    for op, wrapper in NEW_OPS.items():
        assert registry.op_def(op).name == op
        assert callable(getattr(kl.ops, wrapper)), wrapper
    parameters = inspect.signature(kl.ops.top_kv2).parameters
    assert list(parameters)[:2] == ["input", "k"]
    assert parameters["sorted"].default is True and parameters["index_type"].default == kl.int32
    assert inspect.signature(kl.ops.leaky_relu).parameters["alpha"].default == pytest.approx(0.2)
    assert list(inspect.signature(kl.ops.clip_by_value).parameters)[:3] == [
        "t",
        "clip_value_min",
        "clip_value_max",
    ]
    cumsum = inspect.signature(kl.ops.cumsum).parameters
    assert (cumsum["exclusive"].default, cumsum["reverse"].default) == (False, False)
    assert inspect.signature(kl.ops.arg_min).parameters["output_type"].default == kl.int64
    assert inspect.signature(kl.ops.not_equal).parameters["incompatible_shape_error"].default


def test_kernloom_ops_shows_each_op(capsys: pytest.CaptureFixture[str]) -> None:
    from kernloom.cli import main

    for op in ("TopKV2", "ClipByValue", "LeakyRelu", "Atan2", "Erfc"):
        assert main(["ops", op, "--json"]) == 0
        assert f'"{op}"' in capsys.readouterr().out


# -- graph-building errors ------------------------------------------------------------------------


def _constant(value: Any) -> kl.Tensor:
    return kl.constant(np.asarray(value))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: kl.ops.top_kv2(_constant(np.zeros((2, 3))), _constant(np.int32(5)), name="n"),
            "input must have at least k columns: had 3, needed 5",
        ),
        (
            lambda: kl.ops.top_kv2(_constant(np.zeros(3)), _constant(np.int32(-1)), name="n"),
            "k must be >= 0, got -1",
        ),
        (
            lambda: kl.ops.top_kv2(
                _constant(np.zeros(3)), _constant(np.ones(2, np.int32)), name="n"
            ),
            "k must be a scalar",
        ),
        (
            lambda: kl.ops.top_kv2(_constant(np.float32(1)), _constant(np.int32(1)), name="n"),
            "input must have rank >= 1",
        ),
        (
            lambda: kl.ops.clip_by_value(
                _constant(np.zeros((2, 3))), _constant(np.zeros(3)), _constant(1.0), name="n"
            ),
            "clip_value_min must be a scalar or have the shape of t",
        ),
        (
            lambda: kl.ops.cumsum(_constant(np.zeros((2, 3))), _constant(np.int32(2)), name="n"),
            "axis 2 is out of range for rank 2",
        ),
        (
            lambda: kl.ops.cumsum(
                _constant(np.zeros(3)), _constant(np.zeros(1, np.int32)), name="n"
            ),
            "axis must be a scalar",
        ),
        (
            lambda: kl.ops.cumsum(_constant(np.float32(1)), _constant(np.int32(0)), name="n"),
            "Cumsum needs a tensor of rank >= 1",
        ),
        (
            lambda: kl.ops.arg_min(_constant(np.zeros((2, 3))), _constant(np.int32(-3)), name="n"),
            "axis -3 is out of range for rank 2",
        ),
        (
            lambda: kl.ops.arg_min(_constant(np.float32(1)), _constant(np.int32(0)), name="n"),
            "ArgMin needs a tensor of rank >= 1",
        ),
        (
            lambda: kl.ops.arg_min(_constant(np.zeros((0, 3))), _constant(np.int32(0)), name="n"),
            "cannot take ArgMin over dimension 0, which has size 0",
        ),
        (
            lambda: kl.ops.prod(_constant(np.zeros((2, 3))), _constant(np.int32(2)), name="n"),
            "axis 2 is out of range for rank 2",
        ),
        (
            lambda: kl.ops.not_equal(_constant(np.zeros(2)), _constant(np.zeros(3)), name="n"),
            "cannot be broadcast together",
        ),
        (
            lambda: kl.ops.floor_div(_constant(np.zeros((2, 3))), _constant(np.zeros(4)), name="n"),
            "cannot be broadcast together",
        ),
    ],
)
def test_bad_shapes_fail_when_the_node_is_built(g: kl.Graph, build: Any, message: str) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=message) as info:
        build()
    assert "node 'n' (op " in str(info.value)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda x: kl.ops.floor(x, name="n"), "int32"),
        (lambda x: kl.ops.leaky_relu(x, name="n"), "int32"),
        (lambda x: kl.ops.is_nan(x, name="n"), "int32"),
        (lambda x: kl.ops.logical_not(x, name="n"), "bool"),
        (lambda x: kl.ops.tan(x, name="n"), "int32"),
        (lambda x: kl.ops.acosh(x, name="n"), "int32"),
        (lambda x: kl.ops.atan2(x, x, name="n"), "int32"),
        (lambda x: kl.ops.erfc(kl.ops.cast(x, DstT=kl.complex64), name="n"), "complex64"),
    ],
)
def test_types_outside_tf_lists_fail_when_built(g: kl.Graph, build: Any, message: str) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=message) as info:
        build(kl.placeholder(kl.int32, [2], name="x"))
    assert "'n'" in str(info.value)


def test_not_equal_without_shape_error_is_a_scalar(g: kl.Graph) -> None:
    z = kl.ops.not_equal(
        _constant(np.zeros(2)), _constant(np.zeros(3)), incompatible_shape_error=False
    )
    assert z.shape.as_tuple() == ()
    assert kl.Session(g).run(z) == np.True_


def test_top_k_shape_is_known_from_a_constant_k(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [None, 7], name="x")
    values, indices = kl.ops.top_kv2(x, _constant(np.int32(3)), index_type=kl.int64)
    assert values.shape.dims == (None, 3) and indices.dtype == kl.int64
    unknown_k = kl.ops.top_kv2(x, kl.placeholder(kl.int32, [], name="k"))[0]
    assert unknown_k.shape.dims == (None, None)


# -- run-time errors, on every backend ----------------------------------------------------------


BACKENDS = {
    "numpy": klp.default_registry,
    "torch": torch_registry,
    "cupy": stand_in_registry,
}

RUNTIME_ERRORS = [
    ("FloorDiv", [np.array([4, 5], np.int32), np.array([2, 0], np.int32)], {}, "division by zero"),
    ("FloorMod", [np.array([4], np.int64), np.array([0], np.int64)], {}, "division by zero"),
    ("Div", [np.array([4], np.int16), np.array([0], np.int16)], {}, "division by zero"),
    ("TopKV2", [np.zeros((2, 3), np.float32), np.int32(4)], {}, "had 3, needed 4"),
    ("TopKV2", [np.zeros(3, np.float32), np.int32(-2)], {}, "k must be >= 0"),
    ("Cumsum", [np.zeros((2, 3), np.float32), np.int32(-3)], {}, "axis -3 is out of range"),
    ("ArgMin", [np.zeros((2, 3), np.float32), np.int32(2)], {}, "axis 2 is out of range"),
    ("ArgMin", [np.zeros((0, 3), np.float32), np.int32(0)], {}, "has size 0"),
    ("Prod", [np.zeros((2, 3)), np.array([0, 5], np.int32)], {}, "reduction index 5"),
    (
        "ClipByValue",
        [np.zeros((2, 3), np.float32), np.zeros(3, np.float32), np.float32(1)],
        {},
        "clip_value_min must be a scalar or have the shape of t",
    ),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "message"),
    RUNTIME_ERRORS,
    ids=[f"{e[0]}-{e[3]}" for e in RUNTIME_ERRORS],
)
def test_bad_values_fail_at_run_time_naming_the_node(
    backend: str, op: str, inputs: list[Any], attrs: dict[str, Any], message: str
) -> None:
    registry = BACKENDS[backend]()
    graph = kl.Graph(registry)
    feeds: dict[kl.Tensor, Any] = {}
    with graph.as_default():  # placeholders of unknown shape: nothing is known when built
        for value in inputs:
            feeds[kl.placeholder(kl.as_dtype(np.asarray(value).dtype), None)] = value
        out = getattr(kl.ops, NEW_OPS[op])(*feeds, **attrs, name="op")
    fetches = list(out) if isinstance(out, tuple) else [out]
    metadata = kl.RunMetadata()
    with (
        kl.Session(graph, registry=registry) as session,
        pytest.raises(kl.KernelError, match=message) as info,
    ):
        session.run(fetches, feeds, run_metadata=metadata)
    assert f"node 'op' (op {op})" in str(info.value)


SIGNED_ZEROS = [
    # (op, inputs, the sign bits of the result): C99's signed zeros, which the case
    # table's closeness check cannot see.
    ("Tan", [np.array([-0.0, 0.0])], [True, False]),
    ("Asin", [np.array([-0.0, 0.0])], [True, False]),
    ("Sinh", [np.array([-0.0, 0.0])], [True, False]),
    ("Asinh", [np.array([-0.0, 0.0])], [True, False]),
    ("Atanh", [np.array([-0.0, 0.0])], [True, False]),
    (
        "Atan2",
        [np.array([-0.0, 0.0, -0.0, -1.0]), np.array([0.0, 0.0, 1.0, np.inf])],
        [True, False, True, True],
    ),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(
    ("op", "inputs", "negative"), SIGNED_ZEROS, ids=[z[0] for z in SIGNED_ZEROS]
)
def test_signed_zeros_keep_their_sign(
    backend: str, dtype: Any, op: str, inputs: list[Any], negative: list[bool]
) -> None:
    values, _ = run_op(BACKENDS[backend](), op, [x.astype(dtype) for x in inputs])
    assert np.all(values[0] == 0)
    assert np.signbit(values[0]).tolist() == negative


@pytest.mark.parametrize("backend", ["torch", "cupy"])
def test_the_gpu_kernels_run_on_the_gpu(backend: str) -> None:
    values, metadata = run_op(
        BACKENDS[backend](), "TopKV2", [np.array([[1.0, 3.0, 3.0]], np.float32), np.int32(2)]
    )
    assert metadata.placement is not None and metadata.placement["op"].endswith("GPU:0")
    assert values[1].tolist() == [[1, 2]]


# -- properties against Python integers and floats ----------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    x=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=8),
    data=st.data(),
)
def test_integer_division_matches_python(x: list[int], data: st.DataObject) -> None:
    y = data.draw(
        st.lists(st.integers(-(2**31), 2**31 - 1).filter(bool), min_size=len(x), max_size=len(x))
    )
    xs, ys = np.array(x, np.int32), np.array(y, np.int32)
    wrap = [((a // b) + 2**31) % 2**32 - 2**31 for a, b in zip(x, y, strict=True)]
    (floor,) = run_kernel("FloorDiv", [xs, ys]).outputs
    (mod,) = run_kernel("FloorMod", [xs, ys]).outputs
    (trunc,) = run_kernel("Div", [xs, ys]).outputs
    assert floor.tolist() == wrap
    assert mod.tolist() == [a % b for a, b in zip(x, y, strict=True)]
    truncated = [
        abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1) for a, b in zip(x, y, strict=True)
    ]
    assert trunc.tolist() == [(q + 2**31) % 2**32 - 2**31 for q in truncated]


@settings(max_examples=60, deadline=None)
@given(
    x=st.floats(-1e6, 1e6, allow_nan=False, width=64, allow_subnormal=False),  # flushed on CPU
    y=st.floats(-1e3, 1e3, allow_nan=False, width=64).filter(lambda v: abs(v) > 1e-3),
)
def test_float_floor_mod_has_the_divisor_sign(x: float, y: float) -> None:
    (mod,) = run_kernel("FloorMod", [np.array([x]), np.array([y])]).outputs
    (quotient,) = run_kernel("FloorDiv", [np.array([x]), np.array([y])]).outputs
    value = float(mod[0])
    assert value == 0 or math.copysign(1, value) == math.copysign(1, y)
    assert abs(value) <= abs(y)  # equal when a tiny remainder of the other sign rounds
    assert value == x % y  # CPython's float modulo: fmod, corrected toward y's sign
    exact = x / y
    if abs(exact) < 2.2250738585072014e-308:  # a subnormal quotient is flushed on CPU (FTZ)
        exact = 0.0
    assert float(quotient[0]) == math.floor(exact)


def test_a_gelu_built_from_erf_matches_python(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float64, [None], name="x")
    half = kl.constant(np.float64(0.5))
    one = kl.constant(np.float64(1.0))
    gelu = kl.ops.mul(
        kl.ops.mul(half, x),
        kl.ops.add_v2(one, kl.ops.erf(kl.ops.mul(x, kl.constant(np.float64(0.5**0.5))))),
    )
    values = np.linspace(-6, 6, 41)
    (out,) = kl.Session(g).run([gelu], {x: values})
    expected = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in values]
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(
    row=st.lists(
        st.sampled_from([-2.0, -0.0, 0.0, 1.0, 1.5, 3.0, math.inf, -math.inf, math.nan]),
        min_size=1,
        max_size=60,
    ),
    data=st.data(),
)
def test_top_k_orders_like_tf(row: list[float], data: st.DataObject) -> None:
    """Largest first, equal values lower index first (NaN above all), for every k: both the
    full sort and the partition-first path (k much smaller than the row)."""
    k = data.draw(st.integers(0, len(row)))
    values, indices = run_kernel("TopKV2", [np.array([row, row[::-1]]), np.int32(k)]).outputs
    for r, (got_values, got_indices) in enumerate(zip(values, indices, strict=True)):
        source = row if r == 0 else row[::-1]
        order = sorted(range(len(source)), key=lambda i: (source[i] == source[i], -source[i], i))
        assert got_indices.tolist() == order[:k]
        np.testing.assert_array_equal(got_values, [source[i] for i in order[:k]])
