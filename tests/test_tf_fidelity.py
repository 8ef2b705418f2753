"""TensorFlow's behaviour where kernloom once differed (issue 21, items 1 and 2): error
classes, what the shape functions reject when a graph is built, what the kernels accept
when shapes are only known at run time (TensorFlow's legacy forms), on every backend.

Values are checked by the shared case table (``kernloom.testing.cases.tf_edges``); the
expected results here are TensorFlow's (tensorflow-cpu 2.21, TF1 graph session), written
out by hand.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.graph.builder import apply_op

BACKENDS: dict[str, Callable[[], klp.Registry]] = {
    "numpy": klp.default_registry,
    "torch": torch_registry,
    "cupy": stand_in_registry,
}


def _run_dynamic(
    registry: klp.Registry, op: str, inputs: list[Any], attrs: dict[str, Any] | None = None
) -> list[np.ndarray[Any, Any]]:
    """Run ``op`` on placeholders of unknown shape: only the kernel sees the shapes."""
    graph = kl.Graph(registry)
    feeds: dict[kl.Tensor, Any] = {}
    with graph.as_default():
        for value in inputs:
            feeds[kl.placeholder(kl.as_dtype(np.asarray(value).dtype), None)] = value
        out = apply_op(op, list(feeds), dict(attrs or {}), name="op")
    fetches = list(out) if isinstance(out, tuple) else [out]
    with kl.Session(graph, registry=registry) as session:
        return [np.asarray(v) for v in session.run(fetches, feeds)]


# -- error classes ----------------------------------------------------------------------------


def test_a_kernels_bad_argument_is_an_invalid_argument_error() -> None:
    """``except kl.InvalidArgumentError`` catches what TF's ``except
    tf.errors.InvalidArgumentError`` does: a bad value found when the step runs."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, None, name="x")
        y = kl.ops.reshape(x, kl.constant(np.array([4], np.int32)), name="y")
    with kl.Session(g) as session, pytest.raises(kl.InvalidArgumentError) as info:
        session.run(y, {x: np.ones(6, np.float32)})
    assert isinstance(info.value, kl.KernelArgumentError)
    assert isinstance(info.value, kl.KernelError)  # still every kernel failure
    assert "node 'y' (op Reshape): cannot reshape a tensor of shape [6]" in str(info.value)


def test_a_crash_of_kernel_code_is_a_kernel_error_but_not_a_bad_argument() -> None:
    def crash(ctx: klp.OpKernelContext) -> None:
        raise ZeroDivisionError("a bug in the kernel")

    lib = klp.KernelLibrary()
    lib.kernel("Square", device="CPU", backend="numpy", label="crashing")(crash)
    registry = klp.Registry()
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry.register_plugin(cpu_plugin, name="cpu_numpy")

    @klp.hookimpl
    def kernloom_register(registry: klp.Registrar) -> None:
        registry.register_kernels(lib)

    registry.register_plugin(
        types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2"),
        name="crashing",
    )
    g = kl.Graph(registry)
    with g.as_default(), kl.kernel_label("crashing"):
        y = kl.ops.square(kl.constant(np.ones(2, np.float32)), name="y")
    with kl.Session(g, registry=registry) as session, pytest.raises(kl.KernelError) as info:
        session.run(y)
    assert not isinstance(info.value, kl.InvalidArgumentError)
    assert "node 'y' (op Square)" in str(info.value) and "ZeroDivisionError" in str(info.value)


def test_a_bad_argument_inside_a_loop_stays_an_invalid_argument_error() -> None:
    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")

        def body(i: kl.Tensor) -> kl.Tensor:
            # A reshape that fails in the second iteration.
            shaped = kl.ops.reshape(kl.ops.fill(kl.ops.expand_dims(i, 0), 1.0), [2])
            return i + kl.ops.cast(kl.ops.sum(shaped, [0]), DstT=kl.int32)

        (out,) = kl.while_loop(lambda i: kl.ops.less(i, n), body, [kl.constant(2)])
    with kl.Session(g) as session, pytest.raises(kl.InvalidArgumentError) as info:
        session.run(out, {n: 10})
    assert "(op Reshape)" in str(info.value) and "cannot reshape" in str(info.value)


# -- graph-building rejections -------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: kl.ops.sum(kl.constant(np.ones((2, 3))), [0, 0], name="n"),
            "reduction_indices contain dimension 0 twice",
        ),
        (
            lambda: kl.ops.mean(kl.constant(np.ones((2, 3))), [1, -1], name="n"),
            "reduction_indices contain dimension 1 twice",
        ),
        (
            lambda: kl.ops.max(kl.constant(np.float32(1)), 0, name="n"),
            "axis 0 is out of range for rank 0",
        ),
        (
            lambda: kl.ops.sum(kl.constant(np.ones((2, 3))), np.array([[0]], np.int32), name="n"),
            "reduction_indices must be a scalar or a vector",
        ),
        (
            lambda: kl.ops.transpose(
                kl.constant(np.ones((2, 3))), np.array([[1, 0]], np.int32), name="n"
            ),
            "perm must be a vector",
        ),
        (
            lambda: kl.ops.bias_add(
                kl.constant(np.ones((2, 3))), kl.constant(np.ones(3)), data_format="NCHW", name="n"
            ),
            "NCHW needs value of rank >= 3",
        ),
        (
            lambda: kl.ops.fill(
                np.array([2], np.int32), kl.constant(np.ones(1, np.float32)), name="n"
            ),
            "value must be a scalar",
        ),
        (
            lambda: kl.ops.reshape(kl.constant(np.ones(1)), np.int32(1), name="n"),
            "shape must be a vector",
        ),
        (
            lambda: kl.ops.select(
                kl.constant(np.array([[True], [False]])),
                kl.constant(np.ones((2, 2))),
                kl.constant(np.ones((2, 2))),
                name="n",
            ),
            "condition and 'then'",
        ),
        (
            lambda: kl.ops.select(
                kl.constant(np.array([True, False, True])),
                kl.constant(np.ones((2, 2))),
                kl.constant(np.ones((2, 2))),
                name="n",
            ),
            "condition and the first dimension of 'then'",
        ),
        (
            lambda: kl.ops.select(
                kl.constant(np.array(True)),
                kl.constant(np.ones((2, 2))),
                kl.constant(np.ones(2)),
                name="n",
            ),
            "'then' and 'else'",
        ),
    ],
)
def test_what_tensorflows_shape_functions_reject_fails_when_the_node_is_built(
    build: Callable[[], Any], message: str
) -> None:
    with kl.Graph().as_default(), pytest.raises(kl.InvalidArgumentError, match=message) as info:
        build()
    assert "node 'n'" in str(info.value)


# -- run time, every backend ------------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_legacy_forms_tensorflows_kernels_accept(backend: str) -> None:
    registry = BACKENDS[backend]()
    (filled,) = _run_dynamic(registry, "Fill", [np.array([2], np.int32), np.float32([3.0])])
    np.testing.assert_array_equal(filled, np.array([3.0, 3.0], np.float32))
    (filled,) = _run_dynamic(registry, "Fill", [np.int32(2), np.float32(3.0)])
    np.testing.assert_array_equal(filled, np.array([3.0, 3.0], np.float32))
    (reshaped,) = _run_dynamic(registry, "Reshape", [np.float32([3.0]), np.int32(1)])
    np.testing.assert_array_equal(reshaped, np.array([3.0], np.float32))
    (summed,) = _run_dynamic(registry, "Sum", [np.ones((2, 3), np.float32), np.int32([[0]])])
    np.testing.assert_array_equal(summed, np.array([2.0, 2.0, 2.0], np.float32))
    # A matrix in NCHW gets its bias along the last dimension (TF's kernel).
    (biased,) = _run_dynamic(
        registry,
        "BiasAdd",
        [np.zeros((2, 3), np.float32), np.float32([1, 2, 3])],
        {"data_format": "NCHW"},
    )
    np.testing.assert_array_equal(biased, np.array([[1, 2, 3], [1, 2, 3]], np.float32))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(
    ("op", "inputs", "message"),
    [
        ("Sum", [np.ones((2, 3)), np.int32([0, -2])], "contain dimension 0 twice"),
        ("Mean", [np.float32(1), np.int32(0)], "reduction index 0 is out of range"),
        ("Prod", [np.float32(1), np.int32(-1)], "reduction index -1 is out of range"),
        ("Transpose", [np.ones((2, 3)), np.int32([[1, 0]])], "perm must be a vector"),
        ("Transpose", [np.ones((2, 3)), np.int32([0, -2])], "is not a permutation"),
        ("Transpose", [np.ones((2, 3)), np.int32([0, 2])], "is not a permutation"),
        ("Fill", [np.int32([2]), np.float32([1, 2])], "value must be a scalar"),
        (
            "Select",
            [np.array([[True], [False]]), np.ones((2, 2)), np.ones((2, 2))],
            "must be a scalar, a vector of length",
        ),
        (
            "Select",
            [np.array([True]), np.ones(2), np.ones(2)],
            "must be a scalar, a vector of length",
        ),
        (
            "Select",
            [np.array([True, False, True]), np.ones((2, 2)), np.ones((2, 2))],
            "Number of batches of 'then' must match size of 'cond'",
        ),
        (
            "Select",
            [np.array(True), np.ones((2, 2)), np.ones(2)],
            "'then' and 'else' must have the same shape",
        ),
        ("Reshape", [np.ones((2, 3)), np.int32([-1, 4])], "6 is not a multiple of 4"),
    ],
)
def test_run_time_errors_are_invalid_argument_errors_naming_the_node(
    backend: str, op: str, inputs: list[Any], message: str
) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=message) as info:
        _run_dynamic(BACKENDS[backend](), op, inputs)
    assert f"node 'op' (op {op})" in str(info.value)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_mean_of_a_long_int8_vector_neither_wraps_nor_overflows(backend: str) -> None:
    x = np.full(1000, 127, np.int8)
    (mean,) = _run_dynamic(BACKENDS[backend](), "Mean", [x, np.int32(0)])
    assert mean.dtype == np.int8 and int(mean) == 127


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_float16_reductions_accumulate_in_float32_a_documented_deviation(backend: str) -> None:
    """docs/tensorflow_fidelity.md, "Documented deviations": TensorFlow 2.21's CPU kernels
    accumulate float16 in float16 (Sum of 100 x 0.1: 9.99; AvgPool of a 2x2 window of
    60000: inf); kernloom's in float32, rounding once. The values, worked by hand:
    float16(0.1) is 0.0999755859375, times 100 is 9.99756, nearest float16 10.0; the window
    averages to 60000 (a float16); 300 * 300 * float16(1/300) = 90000 * 0.0033340454 =
    300.06, nearest float16 300.0; 4096 equal logits give 1/4096 each, whose log is
    -8.3178, nearest float16 -8.3203125 (a float16 sum of 4096 ones stops at 2048)."""
    registry = BACKENDS[backend]()
    tenth, big = np.full(100, 0.1, np.float16), np.full((1, 2, 2, 1), 60000, np.float16)
    (total,) = _run_dynamic(registry, "Sum", [tenth, np.int32(0)])
    (product,) = _run_dynamic(
        registry, "Prod", [np.array([300, 300, 1 / 300], np.float16), np.int32(0)]
    )
    (pooled,) = _run_dynamic(
        registry,
        "AvgPool",
        [big],
        {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"},
    )
    logits = np.zeros((1, 4096), np.float16)
    (probabilities,) = _run_dynamic(registry, "Softmax", [logits])
    (logs,) = _run_dynamic(registry, "LogSoftmax", [logits])
    assert total.dtype == np.float16 and float(total) == 10.0
    # torch's own float16 prod multiplies in float16 on the CPU (the doc's row says so)
    assert float(product) == (np.inf if backend == "torch" else 300.0)
    assert pooled.ravel().tolist() == [60000.0]
    assert set(probabilities.ravel().tolist()) == {2.0**-12}
    assert set(logs.ravel().tolist()) == {-8.3203125}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_where_of_a_scalar_is_refused_as_by_tensorflows_kernel(backend: str) -> None:
    with pytest.raises(kl.InvalidArgumentError, match="Where takes a tensor of rank 1 or more"):
        _run_dynamic(BACKENDS[backend](), "Where", [np.bool_(True)])
    (found,) = _run_dynamic(BACKENDS[backend](), "Where", [np.array([True])])
    np.testing.assert_array_equal(found, [[0]])


@pytest.mark.parametrize(
    ("op", "inputs"),
    [
        ("ClipByValue", [np.array([5], np.uint32), np.uint32(1), np.uint32(4)]),
        ("ClipByValue", [np.array([5], np.uint64), np.uint64(1), np.uint64(4)]),
        ("Where", [np.array([1.0, 0.0], np.float16)]),
    ],
)
def test_the_cpu_has_no_kernel_where_tensorflows_cpu_has_none(op: str, inputs: list[Any]) -> None:
    dtype = np.asarray(inputs[0]).dtype.name
    with pytest.raises(
        kl.KernloomError, match=rf"node 'op' \(op {op}\): CPU: constraint T"
    ) as info:
        _run_dynamic(klp.default_registry(), op, inputs)
    assert f"does not hold for T={dtype}" in str(info.value)


def test_complex_to_complex_truncation_keeps_infinite_and_nan_parts_apart() -> None:
    x = np.array([complex(1, np.nan), complex(3.0, np.inf), complex(np.nan, -2.0)], np.complex128)
    (out,) = _run_dynamic(
        klp.default_registry(), "Cast", [x], {"DstT": kl.complex64, "Truncate": True}
    )
    assert out.dtype == np.complex64
    np.testing.assert_array_equal(out.real, [1, 3, np.nan])  # NaN only where it was
    np.testing.assert_array_equal(out.imag, [np.nan, np.inf, -2])


# -- the op names current TensorFlow emits ----------------------------------------------------


def test_placeholder_with_default_runs_its_default_unless_fed() -> None:
    g = kl.Graph()
    with g.as_default():
        default = kl.constant(np.ones((2, 3), np.float32))
        x = kl.ops.placeholder_with_default(default, shape=[None, 3], name="x")
        y = kl.ops.mul(x, kl.constant(np.float32(2)), name="y")
    assert x.shape == kl.TensorShape([None, 3])
    with kl.Session(g) as session:
        np.testing.assert_array_equal(session.run(y), np.full((2, 3), 2, np.float32))
        fed = session.run(y, {x: np.zeros((4, 3), np.float32)})
    np.testing.assert_array_equal(fed, np.zeros((4, 3), np.float32))
    with g.as_default(), pytest.raises(kl.InvalidArgumentError, match=r"node 'bad'.*compatible"):
        kl.ops.placeholder_with_default(default, shape=[3], name="bad")


def test_unique_wants_a_vector() -> None:
    with kl.Graph().as_default(), pytest.raises(kl.InvalidArgumentError, match="node 'u'"):
        kl.ops.unique(kl.constant(np.ones((2, 2))), name="u")
    with pytest.raises(kl.InvalidArgumentError, match="unique expects a 1D vector"):
        _run_dynamic(klp.default_registry(), "Unique", [np.ones((2, 2))])


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_float32_to_int_casts_follow_c_truncation_or_int_min(value: float) -> None:
    """Each float32 to int32/int64/int8/uint8, against Python integers: truncation toward
    zero where the value fits the int32 (int64) it goes through, else the most negative
    value; narrower types keep the low bits (two's complement)."""
    x = np.array([value], np.float32)
    for dst, bits in ((np.int32, 32), (np.int64, 64), (np.int8, 32), (np.uint8, 32)):
        through_limit = 2 ** (bits - 1)
        fits = math.isfinite(value) and -through_limit <= math.trunc(value) < through_limit
        wide = math.trunc(value) if fits else -through_limit
        width = np.dtype(dst).itemsize * 8
        low = wide % 2**width
        if np.dtype(dst).kind == "i" and low >= 2 ** (width - 1):
            low -= 2**width
        (out,) = _run_dynamic(klp.default_registry(), "Cast", [x], {"DstT": kl.as_dtype(dst)})
        assert int(out[0]) == low, (value, np.dtype(dst).name)
