"""Edge cases of elementwise, division, reduction and scan ops where kernloom differed from
TensorFlow 2.21's CPU kernels, on the numpy CPU kernels and on the torch plugin's (its
``torch``-labelled CPU kernels, its CPU defaults for float32/float64 Sum and Mean, and its
GPU kernels on a CPU-bound GPU device).

Every expected value is TensorFlow's (``tf.raw_ops`` on tensorflow-cpu 2.21.0, x86-64 with
AVX), hard-coded here; ``fixtures/tf_edge/tf_edge_values.py`` prints them again where
TensorFlow is installed. Signed zeros are compared by sign: ``np.array_equal`` would not see
them.

- An integer ``Div``/``FloorDiv``/``FloorMod`` whose result is empty returns it, whatever the
  divisor: TF's binary kernel returns before looking at the values.
- ``Sum``/``Mean`` that reduce one element per output (or no axes) copy the input: TF drops
  reduced dimensions of size 1 first, so ``Sum([-0.0])`` is -0.0 (two elements: +0.0).
- ``Cumsum`` starts its accumulator at +0: no sum is -0.0 (``cumsum([-0.0])`` is +0.0).
- ``Relu(-0.0)`` in float32/float64 is +0.0 (the vectorised max kernloom follows, as for its
  numpy kernel); float16 keeps -0.0 (TF's half Relu is scalar ``std::max``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_kernel

torch = pytest.importorskip("torch")

from kernloom_gpu_torch.testing import cpu_bound_gpu_plugin  # noqa: E402

Array = np.ndarray[Any, Any]
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def _numpy_only() -> klp.Registry:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    return registry


def _with_torch() -> klp.Registry:
    """The numpy CPU plugin and the torch kernels (the CPU-labelled and CPU-default ones,
    and the GPU ones on a CPU-bound GPU)."""
    registry = _numpy_only()
    registry.register_plugin(cpu_bound_gpu_plugin(), name="gpu_torch")
    return registry


NUMPY = _numpy_only()
TORCH = _with_torch()
BACKENDS: dict[str, tuple[klp.Registry, str, str]] = {
    "numpy": (NUMPY, CPU0, ""),
    "cpu-default": (TORCH, CPU0, ""),  # torch's Sum/Mean for float32/float64, else numpy's
    "torch-label": (TORCH, CPU0, "torch"),
    "torch-gpu": (TORCH, GPU0, ""),
}


def _run(backend: str, op: str, inputs: list[Any], attrs: dict[str, Any] | None = None) -> Array:
    registry, device, label = BACKENDS[backend]
    run = run_kernel(op, inputs, attrs or {}, registry=registry, device=device, label=label)
    return np.asarray(run.outputs[0])


def _assert_same(got: Array, want: Array) -> None:
    """Equal values, dtype and shape, NaN where NaN is, and zeros of the same sign."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":
        assert np.signbit(got).tolist() == np.signbit(want).tolist(), (got, want)


# -- integer division by zero with an empty result ---------------------------------------------

DIVISIONS = ("Div", "FloorDiv", "FloorMod")
INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8)
DIVISION_BACKENDS = ("numpy", "torch-gpu")  # the torch plugin has no CPU division kernels


@pytest.mark.parametrize("backend", DIVISION_BACKENDS)
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", DIVISIONS)
@pytest.mark.parametrize(
    ("x_shape", "y"),
    [((0,), [0]), ((0, 2), [0, 1])],
    ids=["empty-by-[0]", "empty-rows-by-[0,1]"],
)
def test_integer_division_with_an_empty_result_ignores_zero_divisors(
    backend: str, dtype: Any, op: str, x_shape: tuple[int, ...], y: list[int]
) -> None:
    # TF: Div/FloorDiv/FloorMod(zeros((0,)), [0]) is [] (and zeros((0, 2)) by [0, 1]).
    got = _run(backend, op, [np.zeros(x_shape, dtype), np.array(y, dtype)])
    _assert_same(got, np.zeros(x_shape, dtype))


@pytest.mark.parametrize("backend", DIVISION_BACKENDS)
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", DIVISIONS)
def test_integer_division_by_zero_is_still_an_error(backend: str, dtype: Any, op: str) -> None:
    # TF: InvalidArgumentError "Integer division by zero" for [4, 0, 3] by [1, 0, 1].
    with pytest.raises(kl.InvalidArgumentError, match="Integer division by zero"):
        _run(backend, op, [np.array([4, 0, 3], dtype), np.array([1, 0, 1], dtype)])


@settings(max_examples=40, deadline=None)
@given(
    op=st.sampled_from(DIVISIONS),
    dtype=st.sampled_from(INTS),
    rows=st.sampled_from([0, 1, 3]),
    cols=st.integers(0, 3),
    divisors=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    broadcast=st.booleans(),
    backend=st.sampled_from(DIVISION_BACKENDS),
)
def test_integer_division_raises_exactly_when_a_zero_divisor_is_used(
    op: str,
    dtype: Any,
    rows: int,
    cols: int,
    divisors: list[int],
    broadcast: bool,
    backend: str,
) -> None:
    """TF's rule (checked against it on the cases above): the op fails iff the broadcast
    result has an element and some divisor is 0; otherwise it has the broadcast shape."""
    x = np.full((rows, cols), 6, dtype)
    y = np.array(divisors[:1] if broadcast else divisors[:cols], dtype).reshape(1, -1)
    shape = np.broadcast_shapes(x.shape, y.shape)
    if int(np.prod(shape)) and not y.all():
        with pytest.raises(kl.InvalidArgumentError, match="Integer division by zero"):
            _run(backend, op, [x, y])
    else:
        assert _run(backend, op, [x, y]).shape == shape


# -- reductions of one element are copies ------------------------------------------------------

FLOATS = (np.float16, np.float32, np.float64)
REDUCTION_BACKENDS = ("numpy", "cpu-default", "torch-label", "torch-gpu")
Z = -0.0
ONE_ELEMENT: list[tuple[str, Any, list[int], Any, bool]] = [
    # (id, x, axes, TF's result, keep_dims)
    ("vector-of-one", [Z], [0], Z, False),
    ("rows-of-one", [[Z, Z, 1.0]], [0], [Z, Z, 1.0], False),
    ("rows-of-one-kept", [[Z, Z, 1.0]], [0], [[Z, Z, 1.0]], True),
    ("two-axes-of-one", [[[Z, Z]]], [0, 1], [Z, Z], False),
    ("negative-axis", [[Z], [1.0]], [-1], [Z, 1.0], False),
    ("no-axes", [Z, 1.0], [], [Z, 1.0], False),
]


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize(
    ("x", "axes", "want", "keep"), [c[1:] for c in ONE_ELEMENT], ids=[c[0] for c in ONE_ELEMENT]
)
def test_sum_and_mean_of_one_element_keep_negative_zero(
    backend: str, dtype: Any, op: str, x: Any, axes: Any, want: Any, keep: bool
) -> None:
    axes_array = np.array(axes, np.int32)
    got = _run(backend, op, [np.array(x, dtype), axes_array], {"keep_dims": keep})
    _assert_same(got, np.array(want, dtype))


@pytest.mark.parametrize("backend", REDUCTION_BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_sum_and_mean_of_two_negative_zeros_are_positive_zero(
    backend: str, dtype: Any, op: str
) -> None:
    # TF: Sum([0.0, -0.0]) and Sum([-0.0, -0.0]) are +0.0 (its accumulator starts at +0).
    for x in ([0.0, Z], [Z, Z]):
        got = _run(backend, op, [np.array(x, dtype), np.array([0], np.int32)])
        _assert_same(got, np.array(0.0, dtype))


# -- Cumsum never gives -0.0 -------------------------------------------------------------------

SCAN_BACKENDS = ("numpy", "torch-gpu")  # no torch CPU Cumsum


@pytest.mark.parametrize("backend", SCAN_BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [1, 2, 3, 8])
@pytest.mark.parametrize(
    ("exclusive", "reverse"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["inclusive", "exclusive", "reverse", "exclusive-reverse"],
)
def test_cumsum_of_negative_zeros_is_positive_zero(
    backend: str, dtype: Any, n: int, exclusive: bool, reverse: bool
) -> None:
    # TF: Cumsum(fill(n, -0.0)) is n times +0.0, with or without exclusive and reverse.
    attrs = {"exclusive": exclusive, "reverse": reverse}
    got = _run(backend, "Cumsum", [np.full(n, Z, dtype), np.int32(0)], attrs)
    _assert_same(got, np.zeros(n, dtype))


@pytest.mark.parametrize("backend", SCAN_BACKENDS)
def test_cumsum_of_a_matrix_with_negative_zeros(backend: str) -> None:
    # TF: Cumsum([[-0., 1.], [-0., -1.]], axis=0) is [[0., 1.], [0., 0.]] (all +0).
    x = np.array([[Z, 1.0], [Z, -1.0]], np.float32)
    got = _run(backend, "Cumsum", [x, np.int32(0)])
    _assert_same(got, np.array([[0.0, 1.0], [0.0, 0.0]], np.float32))


# -- Relu of -0.0 ------------------------------------------------------------------------------

RELU_BACKENDS = ("numpy", "torch-label", "torch-gpu")


@pytest.mark.parametrize("backend", RELU_BACKENDS)
@pytest.mark.parametrize(
    ("dtype", "want"),
    [(np.float16, Z), (np.float32, 0.0), (np.float64, 0.0)],
    ids=["float16", "float32", "float64"],
)
def test_relu_of_negative_zero(backend: str, dtype: Any, want: float) -> None:
    # TF: Relu(fill(16, -0.0)) is +0.0 in float32/float64 (whole packets), -0.0 in float16.
    x = np.array([Z] * 16 + [np.nan, 2.0, -3.0], dtype)
    got = _run(backend, "Relu", [x])
    _assert_same(got, np.array([want] * 16 + [np.nan, 2.0, 0.0], dtype))
