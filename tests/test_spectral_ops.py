"""The FFT ops: wrappers with TensorFlow's names and arguments, shapes and graph-building
errors naming the node, run-time errors with TensorFlow's messages on every backend, and
random inputs against ``numpy.fft`` directly (in double precision) on every backend.

The case table (``kernloom.testing.cases.spectral``) checks fixed cases per dtype; here
are the rules (cropping, fft_length known only at run time, the dtype each op gives).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.testing import run_op

WRAPPERS = {
    "FFT": ("fft", ["input"]),
    "IFFT": ("ifft", ["input"]),
    "FFT2D": ("fft2d", ["input"]),
    "IFFT2D": ("ifft2d", ["input"]),
    "RFFT": ("rfft", ["input", "fft_length"]),
    "IRFFT": ("irfft", ["input", "fft_length"]),
}
BACKENDS = {
    "numpy": klp.default_registry,
    "torch": torch_registry,
    "cupy": stand_in_registry,
}
NUMPY_FFT = {
    "FFT": np.fft.fft,
    "IFFT": np.fft.ifft,
    "FFT2D": np.fft.fft2,
    "IFFT2D": np.fft.ifft2,
}


@pytest.mark.parametrize("op", sorted(WRAPPERS))
def test_wrappers_have_tf_names_and_arguments(op: str) -> None:
    name, arguments = WRAPPERS[op]
    assert klp.default_registry().op_def(op).name == op
    assert list(inspect.signature(getattr(kl.ops, name)).parameters)[: len(arguments)] == arguments


def test_op_def_type_lists_are_tensorflows() -> None:
    registry = klp.default_registry()
    for op in WRAPPERS:
        tcomplex = registry.op_def(op).attr("Tcomplex")
        assert {t.name for t in tcomplex.allowed_values} == {"complex64", "complex128"}
        assert tcomplex.default == kl.complex64
    for op in ("RFFT", "IRFFT"):
        treal = registry.op_def(op).attr("Treal")
        assert {t.name for t in treal.allowed_values} == {"float32", "float64"}
        assert treal.default == kl.float32


def test_static_shapes_and_dtypes() -> None:
    with kl.Graph().as_default():
        x = kl.placeholder(kl.complex128, [2, None, 5])
        assert kl.ops.fft(x).shape.dims == (2, None, 5)
        assert kl.ops.ifft2d(x).dtype == kl.complex128
        signal = kl.placeholder(kl.float32, [3, 8])
        assert kl.ops.rfft(signal, np.int32([8])).shape.dims == (3, 5)
        assert kl.ops.rfft(signal, np.int32([5])).shape.dims == (3, 3)  # cropped
        assert kl.ops.rfft(signal, np.int32([0])).shape.dims == (3, 0)
        length = kl.placeholder(kl.int32, [1])
        assert kl.ops.rfft(signal, length).shape.dims == (3, None)
        wide = kl.ops.rfft(kl.placeholder(kl.float64, [4]), [4], Tcomplex=kl.complex128)
        assert (wide.dtype, wide.shape.dims) == (kl.complex128, (3,))
        spectrum = kl.placeholder(kl.complex64, [3, 5])
        back = kl.ops.irfft(spectrum, np.int32([8]))
        assert (back.dtype, back.shape.dims) == (kl.float32, (3, 8))
        assert kl.ops.irfft(spectrum, np.int32([9])).shape.dims == (3, 9)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: kl.ops.fft(np.complex64(1), name="n"), r"rank of at least 1 but got: \[\]"),
        (
            lambda: kl.ops.ifft2d(np.ones(3, np.complex64), name="n"),
            r"rank of at least 2 but got: \[3\]",
        ),
        (
            lambda: kl.ops.rfft(np.ones(6, np.float32), np.int32([9]), name="n"),
            "Input dimension 0 must have length of at least 9 but got: 6",
        ),
        (
            lambda: kl.ops.irfft(np.ones((2, 4), np.complex64), np.int32([8]), name="n"),
            "Input dimension 1 must have length of at least 5 but got: 4",
        ),
        (
            lambda: kl.ops.rfft(np.ones(6, np.float32), np.int32([2, 2]), name="n"),
            r"fft_length must have shape \[1\]",
        ),
        (
            lambda: kl.ops.irfft(np.ones(6, np.complex64), np.int32([-1]), name="n"),
            r"fft_length\[0\] must >= 0, but got: -1",
        ),
        (
            lambda: kl.ops.rfft(np.ones(6, np.float64), np.int32([6]), name="n"),
            "not Treal=float64 with Tcomplex=complex64: set Tcomplex=complex128",
        ),
        (
            lambda: kl.ops.irfft(np.ones(6, np.complex128), np.int32([6]), name="n"),
            "not Treal=float32 with Tcomplex=complex128: set Treal=float64",
        ),
        (
            lambda: kl.ops.fft(np.ones(6, np.float32), name="n"),
            "float32",
        ),
    ],
)
def test_bad_graphs_fail_when_built_naming_the_node(build: Any, message: str) -> None:
    with (
        kl.Graph().as_default(),
        pytest.raises((kl.InvalidArgumentError, TypeError, ValueError), match=message) as info,
    ):
        build()
    assert "'n'" in str(info.value)


RUNTIME_ERRORS: list[tuple[str, list[Any], str]] = [
    ("FFT2D", [np.ones(4, np.complex64)], r"rank of at least 2 but got: \[4\]"),
    (
        "RFFT",
        [np.ones((2, 6), np.float32), np.int32([7])],
        "Input dimension 1 must have length of at least 7 but got: 6",
    ),
    (
        "IRFFT",
        [np.ones(3, np.complex128), np.int32([6])],
        "Input dimension 0 must have length of at least 4 but got: 3",
    ),
    ("RFFT", [np.ones(3, np.float32), np.int32([-2])], r"fft_length\[0\] must >= 0"),
    ("IRFFT", [np.ones(3, np.complex64), np.int32([2, 2])], r"fft_length must have shape \[1\]"),
]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(
    ("op", "inputs", "message"), RUNTIME_ERRORS, ids=[f"{e[0]}-{e[2][:24]}" for e in RUNTIME_ERRORS]
)
def test_bad_values_fail_at_run_time_naming_the_node(
    backend: str, op: str, inputs: list[Any], message: str
) -> None:
    registry = BACKENDS[backend]()
    graph = kl.Graph(registry)
    feeds: dict[kl.Tensor, Any] = {}
    with graph.as_default():  # placeholders of unknown shape: nothing is known when built
        for value in inputs:
            feeds[kl.placeholder(kl.as_dtype(np.asarray(value).dtype), None)] = value
        attrs = {"Treal": kl.float64} if inputs[0].dtype == np.complex128 else {}
        out = getattr(kl.ops, WRAPPERS[op][0])(*feeds, name="op", **attrs)
    with (
        kl.Session(graph, registry=registry) as session,
        pytest.raises(kl.KernelError, match=message) as info,
    ):
        session.run(out, feeds)
    assert f"node 'op' (op {op})" in str(info.value)


def _tolerance(dtype: np.dtype[Any], size: int) -> dict[str, float]:
    """Single precision: an FFT's error grows with the values' sum (log n rounding steps)."""
    if dtype in (np.float32, np.complex64):
        return {"rtol": 1e-4, "atol": 1e-5 * max(size, 1)}
    return {"rtol": 1e-10, "atol": 1e-10 * max(size, 1)}


_DIMS = st.lists(st.integers(0, 6), min_size=1, max_size=3)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@settings(max_examples=15, deadline=None)
@given(
    op=st.sampled_from(sorted(NUMPY_FFT)),
    dims=_DIMS,
    double=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_complex_transforms_match_numpy_fft(
    backend: str, op: str, dims: list[int], double: bool, seed: int
) -> None:
    if op.endswith("2D") and len(dims) < 2:
        dims = [2, *dims]
    rng = np.random.default_rng(seed)
    dtype = np.complex128 if double else np.complex64
    x = (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dtype)
    (out,), _ = run_op(BACKENDS[backend](), op, [x])
    assert (out.shape, out.dtype) == (x.shape, x.dtype)
    if x.size:
        expected = NUMPY_FFT[op](x.astype(np.complex128))
        np.testing.assert_allclose(out, expected, **_tolerance(out.dtype, x.size))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@settings(max_examples=20, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    length=st.integers(1, 12),
    extra=st.integers(0, 4),
    double=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_real_transforms_crop_and_match_numpy_fft(
    backend: str, batch: list[int], length: int, extra: int, double: bool, seed: int
) -> None:
    """RFFT of a signal ``extra`` values longer than fft_length, then IRFFT of a spectrum
    ``extra`` frequencies longer than it needs: both crop (fft_length fed at run time)."""
    rng = np.random.default_rng(seed)
    real, complex_ = (np.float64, np.complex128) if double else (np.float32, np.complex64)
    attrs = {"Treal": kl.as_dtype(real), "Tcomplex": kl.as_dtype(complex_)}
    signal = rng.standard_normal((*batch, length + extra)).astype(real)
    registry = BACKENDS[backend]()
    (spectrum,), _ = run_op(registry, "RFFT", [signal, np.int32([length])], attrs)
    assert (spectrum.shape, spectrum.dtype) == ((*batch, length // 2 + 1), complex_)
    expected = np.fft.rfft(signal[..., :length].astype(np.float64))
    np.testing.assert_allclose(spectrum, expected, **_tolerance(spectrum.dtype, length))
    longer = np.concatenate([spectrum, np.ones((*batch, extra), complex_)], axis=-1)
    (back,), _ = run_op(registry, "IRFFT", [longer, np.int32([length])], attrs)
    assert (back.shape, back.dtype) == ((*batch, length), real)
    reference = np.fft.irfft(longer[..., : length // 2 + 1].astype(np.complex128), length)
    np.testing.assert_allclose(back, reference, **_tolerance(back.dtype, length))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_irfft_ignores_the_imaginary_parts_of_the_zero_frequency_and_nyquist_terms(
    backend: str,
) -> None:
    """TensorFlow 2.21's CPU: IRFFT([1+5j, 2+1j, 3+7j], [4]) is [2, -1, 0, 0]."""
    spectrum = np.array([[1 + 5j, 2 + 1j, 3 + 7j]], np.complex64)
    (out,), _ = run_op(BACKENDS[backend](), "IRFFT", [spectrum, np.int32([4])])
    np.testing.assert_allclose(out, [[2, -1, 0, 0]], atol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_empty_inputs_give_empty_or_zero_outputs(backend: str) -> None:
    registry = BACKENDS[backend]()
    (out,), _ = run_op(registry, "FFT2D", [np.zeros((2, 0, 3), np.complex64)])
    assert (out.shape, out.dtype) == ((2, 0, 3), np.complex64)
    (out,), _ = run_op(registry, "RFFT", [np.zeros((2, 0), np.float32), np.int32([4])])
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.complex64))
    (out,), _ = run_op(registry, "IRFFT", [np.ones((2, 3), np.complex64), np.int32([0])])
    assert out.shape == (2, 0)
