"""The CPU kernels this plugin registers unlabelled, above numpy's: installing the torch
plugin makes them the CPU default (BatchMatMulV2 on Intel's CPUs, measured faster there in
``benchmarks/BATCH_MATMUL.md`` and 2x slower on an AMD EPYC; Conv2D and ``_FusedConv2D``
through oneDNN for float32 and ``_FusedMatMul``, measured in ``benchmarks/ONNX.md`` and
``OPTIMIZER.md``; Softmax and LogSoftmax for float32 and float64,
``kernels/__init__.CPU_PREFERRED``; Mean and Sum for float32 and float64,
``CPU_PREFERRED_REDUCTIONS``). They must match the shared cases, as numpy's do."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_torch_kernels import on_gpu
from test_torch_labelled_cpu import REGISTRY

from kernloom.testing import run_kernel
from kernloom.testing.cases import Case, assert_matches, cases
from kernloom.testing.cases.standard import reference_softmax
from kernloom_gpu_torch.kernels import build_library, packed_matmul
from kernloom_gpu_torch.kernels.linalg import CPU_BATCH_MATMUL_PRIORITY

ON_INTEL = packed_matmul.GEMM_LIBRARY == packed_matmul.MKL
"""What this machine's torch picks (``packed_matmul``): BatchMatMulV2 is torch's by default
only where torch's batched product, MKL's, is the fast one."""
DEFAULT_OPS = (
    *(("BatchMatMulV2",) if ON_INTEL else ()),
    *("Conv2D", "_FusedConv2D", "_FusedMatMul", "Softmax", "LogSoftmax", "Mean", "Sum"),
)
SOFTMAX_TYPES = ("float32", "float64")  # float16 stays numpy's (so do Mean's and Sum's)
FLOAT_ONLY = ("Softmax", "LogSoftmax", "Mean", "Sum")


def _torch_default(case: Case) -> bool:
    if case.op not in DEFAULT_OPS or not on_gpu(case):
        return False
    return case.op not in FLOAT_ONLY or np.asarray(case.inputs[0]).dtype.name in SOFTMAX_TYPES


DEFAULTS = [c for c in cases() if _torch_default(c)]


def test_there_are_cases_for_the_torch_cpu_defaults() -> None:
    assert len(DEFAULTS) > 10
    assert {c.op for c in DEFAULTS} == set(DEFAULT_OPS)


@pytest.mark.parametrize("case", DEFAULTS, ids=[c.id for c in DEFAULTS])
def test_torch_cpu_default_kernel_matches_numpy(case: Case) -> None:
    run = run_kernel(case.op, case.inputs, case.attrs, registry=REGISTRY)
    kernel_def = run.kernel.signature.kernel_def
    assert (kernel_def.device_type, kernel_def.label) == ("CPU", "")
    assert kernel_def.priority >= CPU_BATCH_MATMUL_PRIORITY > 0  # torch's, not numpy's
    assert type(run.kernel).__module__.startswith("kernloom_gpu_torch")
    assert_matches(run.outputs, case.expected())


@pytest.mark.parametrize(
    ("library", "default"),
    [(packed_matmul.MKL, True), (packed_matmul.ONEDNN, False), (packed_matmul.PLAIN, False)],
)
def test_batch_matmul_is_torch_s_by_default_only_where_its_library_is_mkl(
    monkeypatch: pytest.MonkeyPatch, library: str, default: bool
) -> None:
    """Whichever CPU runs the tests: the library the plugin would build on each kind of
    CPU, and the labelled kernel on all of them."""
    monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", library)
    found = {
        (k.label, k.priority)
        for k, _ in build_library().entries
        if k.op == "BatchMatMulV2" and k.device_type == "CPU"
    }
    assert ("torch", 0) in found
    assert (("", CPU_BATCH_MATMUL_PRIORITY) in found) is default


def test_batch_matmul_default_on_this_machine_matches_numpy() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    run = run_kernel("BatchMatMulV2", [x, x], {"adj_y": True}, registry=REGISTRY)
    assert (run.kernel.signature.kernel_def.priority > 0) is ON_INTEL
    np.testing.assert_allclose(run.outputs[0], x @ x.swapaxes(-1, -2), rtol=1e-5, atol=1e-5)


def test_integer_batch_matmul_stays_with_numpy() -> None:
    """Integer products are not registered for torch: numpy's kernel serves them."""
    x = np.arange(6, dtype=np.int32).reshape(1, 2, 3)
    run = run_kernel("BatchMatMulV2", [x, x], {"adj_y": True}, registry=REGISTRY)
    assert run.kernel.signature.kernel_def.priority == 0
    np.testing.assert_array_equal(run.outputs[0], x @ x.swapaxes(-1, -2))


SHAPES_ROW_BY_ROW = [(300, 1), (256, 10), (64, 16), (8, 3), (4, 5, 3), (0, 3), (3, 0), (5,)]
SHAPES_TRANSPOSED = [(1024, 10), (2048, 4), (600, 15), (64, 40, 4), (8192, 1)]


@settings(max_examples=80, deadline=None)
@given(
    shape=st.sampled_from([*SHAPES_ROW_BY_ROW, *SHAPES_TRANSPOSED]),
    op=st.sampled_from(["Softmax", "LogSoftmax"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    specials=st.lists(st.sampled_from([np.nan, -np.inf, np.inf]), max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_softmax_over_short_and_long_last_axes_matches_float64(
    shape: tuple[int, ...], op: str, dtype: Any, specials: list[float], seed: int
) -> None:
    """torch's softmax as the CPU default, on both of its paths (a short last axis of many
    rows goes through the transpose, ``math.SHORT_ROW``): float64 numpy's values with
    TensorFlow's special values -- a row with NaN or +inf is all NaN, -inf logits get
    probability 0, a row of -inf is NaN."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-80, 80, shape).astype(dtype)
    if x.size:
        x.flat[rng.integers(0, x.size, len(specials))] = specials
        if shape[-1] > 1 and specials:  # and one whole row of the first special value
            x.reshape(-1, shape[-1])[0] = specials[0]
    run = run_kernel(op, [x], registry=REGISTRY)
    assert run.kernel.signature.kernel_def.priority > 0  # torch's, not numpy's
    (y,) = run.outputs
    assert y.shape == x.shape and y.dtype == x.dtype
    expected = reference_softmax(x, log=op == "LogSoftmax")
    np.testing.assert_allclose(y, expected, rtol=2e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    data=st.data(),
    op=st.sampled_from(["Mean", "Sum"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    keep_dims=st.booleans(),
    nan=st.booleans(),
)
def test_torch_mean_and_sum_on_the_cpu_match_numpy(
    shape: list[int], data: Any, op: str, dtype: Any, keep_dims: bool, nan: bool
) -> None:
    """Any axes (negative, none, all), any memory order, empty inputs (a mean of nothing is
    NaN, a sum 0), NaN propagating: numpy's values in float64, within rounding."""
    rank = len(shape)
    axes = data.draw(
        st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank)
    )
    order = data.draw(st.permutations(range(rank)))
    x = np.random.default_rng(rank).standard_normal(shape).astype(dtype)
    if nan and x.size:
        x.reshape(-1)[0] = np.nan
    stored = np.ascontiguousarray(x.transpose(order)).transpose(np.argsort(order))
    run = run_kernel(
        op, [stored, np.array(axes, np.int32)], {"keep_dims": keep_dims}, registry=REGISTRY
    )
    assert type(run.kernel).__module__.startswith("kernloom_gpu_torch")
    reduce = np.mean if op == "Mean" else np.sum
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice"
        want = reduce(x.astype(np.float64), axis=tuple(a % rank for a in axes), keepdims=keep_dims)
    (got,) = run.outputs
    assert got.dtype == dtype and got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def _batch_norm_inference(x: Any, mean: Any, variance: Any, epsilon: float) -> tuple[Any, str]:
    """``FusedBatchNormV3`` (inference, NHWC, scale 1, offset 0) run through a session:
    its ``y`` and the module of the kernel that ran it."""
    import kernloom as kl

    depth = x.shape[-1]
    g = kl.Graph(REGISTRY)
    with g.as_default():
        xp = kl.placeholder(kl.float32, list(x.shape), name="x")
        consts = [
            kl.constant(np.asarray(v, np.float32))
            for v in (np.ones(depth), np.zeros(depth), mean, variance)
        ]
        y, *_ = kl.ops.fused_batch_norm_v3(
            xp, *consts, epsilon=epsilon, is_training=False, name="bn"
        )
    metadata = kl.RunMetadata()
    config = kl.SessionConfig(graph_optimizer=False, inter_op_threads=1)
    with kl.Session(g, config, registry=REGISTRY) as sess:
        got = sess.run(y, {xp: x}, kl.RunOptions(trace=True), metadata)
    assert metadata.step_stats is not None
    (stats,) = [n for n in metadata.step_stats.nodes if n.op == "FusedBatchNormV3"]
    return got, stats.kernel_class


def test_batch_norm_inference_with_zero_variance_and_epsilon_divides_by_zero() -> None:
    """``(x - mean) / sqrt(variance + epsilon) * scale + offset`` with ``variance +
    epsilon == 0``: +inf, NaN (0 * inf) and -inf by the sign of ``x - mean``, as the numpy
    kernel and TensorFlow give; ``x * gain + (offset - mean * gain)`` made inf - inf =
    NaN of all three."""
    x = np.array([2.0, 1.0, 0.5], np.float32).reshape(1, 1, 3, 1)
    got, kernel = _batch_norm_inference(x, [1.0], [0.0], 0.0)
    assert kernel.startswith("kernloom_gpu_torch")  # the CPU default where torch is installed
    got = got.ravel()
    assert got[0] == np.inf and np.isnan(got[1]) and got[2] == -np.inf


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    epsilon=st.sampled_from([0.0, 1e-3, 1e-5]),
)
def test_batch_norm_inference_is_the_numpy_kernel_s_arithmetic(seed: int, epsilon: float) -> None:
    """The op's formula in the numpy kernel's order and float32 roundings -- ``gain =
    scale / sqrt(variance + epsilon)``, then ``(x - mean) * gain + offset`` -- bit for bit,
    over zero, tiny and huge variances, infinities and NaN."""
    rng = np.random.default_rng(seed)
    depth = 6
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 3e38, -2.5], np.float32)
    x = rng.choice(specials, (2, 3, 4, depth))
    x = np.where(rng.random(x.shape) < 0.5, rng.standard_normal(x.shape), x).astype(np.float32)
    mean = rng.choice(np.array([0.0, 1.0, -2.0, 1e30, np.nan], np.float32), depth)
    variance = rng.choice(np.array([0.0, 1e-30, 1.0, 4.0, 1e38, np.inf], np.float32), depth)
    got, _ = _batch_norm_inference(x, mean, variance, epsilon)
    with np.errstate(all="ignore"):
        gain = np.float32(1) / np.sqrt(variance + np.float32(epsilon))
        want = (x - mean) * gain + np.float32(0)
    assert got.dtype == np.float32
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (got[~same][:5], want[~same][:5])
