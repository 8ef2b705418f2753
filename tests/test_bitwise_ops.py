"""The ops added beside TensorFlow's bitwise family -- BitwiseAnd/Or/Xor, Invert,
LeftShift, RightShift, Cumprod, TruncateDiv, TruncateMod, Mod, Xdivy, Xlogy, Xlog1py, Rint --
on the numpy CPU kernels and the torch kernels (on a GPU device bound to torch's CPU):
TensorFlow 2.21's values for the edge cases (a shift by a negative amount or by the bit
width or more is clamped to [0, bits - 1] by TF's CPU kernels), and hypothesis against
numpy with that rule for the rest."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernloom.plugin as klp
from kernloom.testing import run_kernel

torch = pytest.importorskip("torch")

from kernloom_gpu_torch.testing import cpu_bound_gpu_plugin  # noqa: E402

Array = np.ndarray[Any, Any]
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def _registry(torch_too: bool) -> klp.Registry:
    from kernloom_cpu_numpy import plugin as cpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    if torch_too:
        registry.register_plugin(cpu_bound_gpu_plugin(), name="gpu_torch")
    return registry


BACKENDS = {"numpy": (_registry(False), CPU0), "torch": (_registry(True), GPU0)}
TORCH_INTEGERS = ("int8", "int16", "int32", "int64", "uint8")
"""The integers the torch kernels take (its uint16/32/64 have few kernels: CPU only)."""


def _run(backend: str, op: str, inputs: list[Any], attrs: dict[str, Any] | None = None) -> Array:
    registry, device = BACKENDS[backend]
    if backend == "torch" and np.asarray(inputs[0]).dtype.name not in TORCH_INTEGERS:
        device = CPU0  # those stay on the CPU (the placer's choice too)
    return run_kernel(op, inputs, attrs or {}, registry=registry, device=device).outputs[0]


X8 = np.array([1, -1, 100, -128, 127], np.int8)
S8 = np.array([-1, 0, 7, 8, 100], np.int8)
U8 = np.array([1, 255, 100, 128, 7], np.uint8)
US8 = np.array([0, 1, 7, 8, 200], np.uint8)

TF_VALUES = [  # tf.compat.v1 sessions, TensorFlow 2.21 CPU
    ("LeftShift", X8, S8, [1, -1, 0, 0, -128]),
    ("RightShift", X8, S8, [1, -1, 0, -1, 0]),
    ("LeftShift", U8, US8, [1, 254, 0, 0, 128]),
    ("RightShift", U8, US8, [1, 127, 0, 1, 0]),
    ("BitwiseAnd", X8, S8, [1, 0, 4, 0, 100]),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(("op", "x", "y", "want"), TF_VALUES)
def test_tensorflow_s_values(backend: str, op: str, x: Array, y: Array, want: list[int]) -> None:
    got = _run(backend, op, [x, y])
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, np.array(want, x.dtype))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_invert_matches_tensorflow(backend: str) -> None:
    np.testing.assert_array_equal(_run(backend, "Invert", [X8]), [-2, 0, -101, 127, -128])
    np.testing.assert_array_equal(_run(backend, "Invert", [U8]), [254, 0, 155, 127, 248])


INTEGER_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _reference(op: str, x: Array, y: Array) -> Array:
    """numpy, with TensorFlow's clamp of the shift amount."""
    bits = x.dtype.itemsize * 8
    if op in ("LeftShift", "RightShift"):
        y = np.clip(y.astype(np.int64), 0, bits - 1).astype(x.dtype)
    fn = {
        "BitwiseAnd": np.bitwise_and,
        "BitwiseOr": np.bitwise_or,
        "BitwiseXor": np.bitwise_xor,
        "LeftShift": np.left_shift,
        "RightShift": np.right_shift,
    }[op]
    return np.asarray(fn(x, y), x.dtype)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from(INTEGER_DTYPES),
    op=st.sampled_from(["BitwiseAnd", "BitwiseOr", "BitwiseXor", "LeftShift", "RightShift"]),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
    backend=st.sampled_from(sorted(BACKENDS)),
)
def test_broadcast_integers_match_numpy_with_tf_s_shift_rule(
    data: st.DataObject, dtype: Any, op: str, shapes: Any, backend: str
) -> None:
    x = data.draw(hnp.arrays(dtype, shapes.input_shapes[0]))
    if op in ("LeftShift", "RightShift"):  # amounts around the width, negative ones too
        info = np.iinfo(dtype)
        low, high = max(int(info.min), -3), min(int(info.max), x.itemsize * 8 + 3)
        y = data.draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=st.integers(low, high)))
    else:
        y = data.draw(hnp.arrays(dtype, shapes.input_shapes[1]))
    got = _run(backend, op, [x, y])
    np.testing.assert_array_equal(got, _reference(op, x, y))
    assert got.dtype == np.dtype(dtype) and got.shape == shapes.result_shape


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(
    ("exclusive", "reverse", "want"),
    [  # tf.math.cumprod of [[1, 2, 3], [4, -0.0, 6]] along axis 1, TensorFlow 2.21
        (False, False, [[1.0, 2.0, 6.0], [4.0, -0.0, -0.0]]),
        (True, False, [[1.0, 1.0, 2.0], [1.0, 4.0, -0.0]]),
        (False, True, [[6.0, 6.0, 3.0], [-0.0, -0.0, 6.0]]),
        (True, True, [[6.0, 3.0, 1.0], [-0.0, 6.0, 1.0]]),
    ],
)
def test_cumprod_matches_tensorflow(
    backend: str, exclusive: bool, reverse: bool, want: list[list[float]]
) -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, -0.0, 6.0]], np.float32)
    attrs = {"exclusive": exclusive, "reverse": reverse}
    got = _run(backend, "Cumprod", [x, np.int32(1)], attrs)
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.array(want, np.float32)))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_cumprod_wraps_integers_and_takes_empty_and_negative_axes(backend: str) -> None:
    wrapped = _run(backend, "Cumprod", [np.array([100000, 100000, 3], np.int32), np.int32(0)])
    np.testing.assert_array_equal(wrapped, [100000, 1410065408, -64771072])  # TensorFlow's
    empty = _run(backend, "Cumprod", [np.zeros((0, 3), np.float32), np.int32(0)])
    assert empty.shape == (0, 3)
    x = np.arange(1, 7, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(_run(backend, "Cumprod", [x, np.int32(-2)]), np.cumprod(x, 0))


def test_floats_and_bad_axes_are_refused_naming_the_op() -> None:
    registry, device = BACKENDS["numpy"]
    with pytest.raises(klp.InvalidArgumentError, match="LeftShift"):
        run_kernel("LeftShift", [np.ones(2), np.ones(2)], {}, registry=registry, device=device)
    with pytest.raises(klp.InvalidArgumentError, match=r"\(op Cumprod\): axis 2 is out of range"):
        run_kernel("Cumprod", [np.ones(3), np.int32(2)], {}, registry=registry, device=device)


XI = np.array([7, -7, 7, -7, 0], np.int32)
YI = np.array([2, 2, -2, -2, 3], np.int32)
XF = np.array([7.5, -7.5, 7.5, -7.5, 1.0, np.nan, 0.0, -0.0], np.float32)
YF = np.array([2, 2, -2, -2, 0, 1, 0, 3], np.float32)
NAN, INF = np.nan, np.inf

TRUNCATING_TF_VALUES = [  # tf.compat.v1 sessions, TensorFlow 2.21 CPU
    ("TruncateDiv", XI, YI, [3, -3, -3, 3, 0]),
    ("TruncateDiv", XF, YF, [3, -3, -3, 3, INF, NAN, NAN, -0.0]),
    ("TruncateMod", XI, YI, [1, -1, 1, -1, 0]),
    ("TruncateMod", XF, YF, [1.5, -1.5, 1.5, -1.5, NAN, NAN, NAN, -0.0]),
    ("Mod", XI, YI, [1, -1, 1, -1, 0]),
    ("Mod", XF, YF, [1.5, -1.5, 1.5, -1.5, NAN, NAN, NAN, -0.0]),
    ("Xdivy", XF, YF, [3.75, -3.75, -3.75, 3.75, INF, NAN, 0.0, -0.0]),
    ("Xlogy", XF, YF, [5.1986036, -5.1986036, NAN, NAN, -INF, NAN, 0.0, -0.0]),
    ("Xlog1py", XF, YF, [8.239593, -8.239593, NAN, NAN, 0.0, NAN, 0.0, -0.0]),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(("op", "x", "y", "want"), TRUNCATING_TF_VALUES)
def test_truncating_and_x_ops_match_tensorflow(
    backend: str, op: str, x: Array, y: Array, want: list[float]
) -> None:
    got = _run_any(backend, op, [x, y])
    expected = np.array(want, x.dtype)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_array_equal(
        np.signbit(got[expected == 0]), np.signbit(expected[expected == 0])
    )


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_rint_halves_to_even_and_integer_division_by_zero_is_an_error(backend: str) -> None:
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, NAN, INF, -0.0], np.float32)
    got = _run_any(backend, "Rint", [halves])
    want = np.array([0.0, 2.0, 2.0, -0.0, -2.0, 2.0, NAN, INF, -0.0], np.float32)  # TF's
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    for op in ("TruncateDiv", "TruncateMod", "Mod"):
        with pytest.raises(klp.InvalidArgumentError, match="Integer division by zero"):
            _run_any(backend, op, [XI, np.zeros(5, np.int32)])


def _run_any(backend: str, op: str, inputs: list[Any]) -> Array:
    registry, device = BACKENDS[backend]
    return run_kernel(op, inputs, {}, registry=registry, device=device).outputs[0]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_euclidean_norm_matches_tensorflow(backend: str) -> None:
    """TensorFlow's values: summed in the input's type (float32 squares overflow to inf,
    int8 ones wrap and the NaN root casts to 0), an integer root truncated, |x| over no
    axes, complex as sqrt(sum(x * conj(x)))."""
    registry, device = BACKENDS[backend]

    def norm(x: Array, axes: list[int], keep: bool = False) -> Array:
        inputs = [x, np.array(axes, np.int32)]
        attrs = {"keep_dims": keep}
        return run_kernel("EuclideanNorm", inputs, attrs, registry=registry, device=device).outputs[
            0
        ]

    np.testing.assert_array_equal(
        norm(np.array([[3.0, 4.0], [6.0, 8.0]], np.float32), [1]), [5, 10]
    )
    np.testing.assert_array_equal(
        norm(np.array([[3, 4], [7, 8]], np.int32), [1], True), [[5], [10]]
    )
    np.testing.assert_allclose(norm(np.array([3 + 4j, 1j], np.complex64), [0]), 5.0990195 + 0j)
    np.testing.assert_array_equal(norm(np.zeros((0, 3), np.float32), [0]), [0, 0, 0])
    assert norm(np.array([1e30, 1e30], np.float32), [0]) == np.inf
    assert np.isnan(norm(np.array([NAN, INF], np.float32), [0]))
    np.testing.assert_array_equal(norm(np.array([[-3.0, 4.0]], np.float32), []), [[3, 4]])
    assert norm(np.array([-3.0], np.float32), [0]) == 3.0
    if backend == "numpy":  # (int8 sums: the torch GPU's too, but its int8 input is the case)
        assert norm(np.array([9, 12], np.int8), [0]) == 0
