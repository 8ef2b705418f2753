"""The linear-algebra and image ops' edge cases against TensorFlow 2.21's CPU kernels.

``fixtures/tf_linalg_edge/cases.npz`` holds TensorFlow's inputs and answers (written by
``fixtures/tf_linalg_edge/make_fixtures.py``, one TF1 graph per case, grappler off) for every
linear-algebra and image op kernloom has: MatMul (transposes, integer and complex types,
empty inner dimensions, NaN and inf), BatchMatMulV2 (broadcast batch dimensions of any
rank, adjoints of complex matrices, empty batches), Einsum (diagonals, traces, ellipses,
outer products, equations TensorFlow refuses), ResizeBilinear and ResizeNearestNeighbor
(align_corners, half_pixel_centers, up- and downsampling, sizes of 1, every input type,
bad sizes and images), SpaceToDepth/DepthToSpace and the pads of NHWC images. kernloom
has no matrix decompositions, solvers, MatrixDiag/BandPart, ResizeBicubic, CropAndResize,
SpaceToBatchND or ExtractImagePatches to compare. Each case runs

- in two modes: ``static`` (the first input fed with its shape known, the others
  constants, so the shape functions see their values and the optimizer may fold them) and
  ``dynamic`` (every input fed through a placeholder whose dimensions are all unknown);
- on the numpy CPU kernels, on the CPU with the torch plugin (its kernels labelled
  ``torch`` where it has them, and its CPU defaults), and on the torch plugin's GPU kernels
  bound to torch's CPU (``torchgpu``; ops or types without a torch GPU kernel stay on the
  CPU);
- with the graph optimizer on and off.

Where TensorFlow raises, kernloom must raise ``InvalidArgumentError`` (when the graph is
built or when it runs), not crash and not return a value.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tf_edge_harness as harness

import kernloom as kl
from kernloom.graph.builder import apply_op

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tf_linalg_edge" / "cases.npz"
ARRAYS = np.load(FIXTURE)
META: list[dict[str, Any]] = json.loads(str(ARRAYS["__meta__"]))
BY_NAME = {m["name"]: m for m in META}

NO_TF_KERNEL = (
    "reported, kept: TensorFlow's CPU has no {op} kernel for {types} (the node is refused when "
    "it runs); kernloom's kernels compute it (integer products wrap around), which misleads "
    "no one; the op's doc string says so"
)
EINSUM_HALF = (
    "reported, to be documented in docs/tensorflow_fidelity.md: TensorFlow's CPU Einsum of "
    "float16 sums in float16 (Eigen's contraction and reduction: 1000 times float16(0.1) "
    "sums to 105.2, not 100), kernloom's kernels in float32, rounding once (100.0), as "
    "TensorFlow's own MatMul and BatchMatMulV2 (oneDNN) do"
)
EINSUM_LABELS = (
    "reported, not fixed here: TensorFlow's Einsum takes any character but '.' as a label "
    "('i1,1k->ki', '#@,@$->$#', 'i j->j i' compute), kernloom refuses every label that is "
    "not a letter; the fix (linalg_ops.EinsumEquation.parse spelling each label as a letter) "
    "needs tests/test_image_linalg_ops.py's test_einsum_rejects_at_build_time[i1,1k->ik], "
    "which expects the refusal, changed"
)
DEVIATIONS: dict[str, str] = {
    **dict.fromkeys(
        ("bmm_uint8", "bmm_uint16", "bmm_uint32", "bmm_uint64", "bmm_uint8_wrap"),
        NO_TF_KERNEL.format(op="BatchMatMulV2", types="unsigned types"),
    ),
    **dict.fromkeys(
        ("es_int8", "es_int16", "es_uint8", "es_uint16", "es_uint32", "es_uint64", "es_int8_wrap"),
        NO_TF_KERNEL.format(op="Einsum", types="int8, int16 and unsigned types"),
    ),
    **dict.fromkeys(
        (
            "es_bad_char",
            "es_digit_label",
            "es_digit_diag",
            "es_punct_labels",
            "es_space_label",
            "es_space_summed",
        ),
        EINSUM_LABELS,
    ),
    "es_f16_long": EINSUM_HALF,
    "es_f16_long_one": EINSUM_HALF,
}
"""Cases kernloom does not follow on purpose or cannot follow in the files this suite may
change (strict xfails, so that a change of either side is seen); keys: a case's name, or
``name-mode-backend``."""

EINSUM_SPACES = (
    "Einsum's equation with spaces: TensorFlow's op reads a space as a label (' ij , jk -> "
    "ik ' wants inputs of rank 4, and is refused here); kernloom stripped the spaces and "
    "computed 'ij,jk->ik'"
)
FIXED: dict[str, tuple[tuple[str, ...], str]] = {
    "es_spaces": (("numpy", "torchgpu"), EINSUM_SPACES)
}
"""The deviations fixed with this suite: case -> (the backends where kernloom differed,
what it did). Run in both modes, with the optimizer on and off."""

REPRESENTATIVE = frozenset(
    {
        "mm_ta_tb",
        "mm_complex_ta",
        "mm_empty_inner",
        "mm_nan_inf",
        "mm_f16_long",
        "mm_rank3",
        "bmm_rank2_rank4",
        "bmm_complex64_adj_both",
        "bmm_empty_batch_both",
        "bmm_empty_inner_int",
        "bmm_f16_long",
        "bmm_batch_bad_rank4",
        "es_inflate_two",
        "es_diag_two_in_sum",
        "es_ellipsis_middle",
        "es_ellipsis_dropped",
        "es_broadcast_named_1",
        "es_complex_inflate",
        "rb_half_9x4",
        "rb_align_row1_to5",
        "rb_plain_sweep3to7",
        "rb_float64",
        "rb_width0_batch0",
        "rn_align_sweep5to8",
        "rn_half_3x9",
        "rn_int64_big",
        "rn_size3",
        "s2d_bool",
        "d2s_complex128",
        "d2s_depth_bad",
        "mirror_image_symmetric_full",
    }
)
"""Cases that matched TensorFlow everywhere when this suite was written, run by default as
a sample of each op; the rest run with ``KERNLOOM_TF_EDGE_ALL=1``."""


@cache
def torch_labels() -> dict[str, str]:
    """Every op of the fixture with a CPU kernel labelled ``torch``, mapped to that label."""
    return harness.torch_labels({m["op"] for m in META})


@cache
def torch_cpu_ops() -> frozenset[str]:
    """The fixture's ops the torch plugin adds CPU kernels for (``harness.torch_cpu_ops``)."""
    return harness.torch_cpu_ops({m["op"] for m in META})


def _inputs(name: str) -> list[np.ndarray]:
    return harness.fixture_inputs(ARRAYS, name)


def _build(meta: dict[str, Any], dynamic: bool) -> tuple[list[kl.Tensor], dict[Any, Any]]:
    """The case's node in the default graph: its first input fed (static), or all of them
    with every dimension unknown (dynamic)."""
    leaves = iter(_inputs(meta["name"]))
    feeds: dict[Any, Any] = {}

    def tensor(value: np.ndarray) -> kl.Tensor:
        if feeds and not dynamic:
            return kl.constant(value)
        shape = [None] * value.ndim if dynamic else list(value.shape)
        t = kl.placeholder(kl.as_dtype(value.dtype), shape)
        feeds[t] = value
        return t

    args: list[Any] = []
    for n in meta["arity"]:
        args.append(tensor(next(leaves)) if n is None else [tensor(next(leaves)) for _ in range(n)])
    out = apply_op(meta["op"], args, dict(meta["attrs"]), name="op")
    return (list(out) if isinstance(out, tuple) else [out]), feeds


def run_kernloom(name: str, mode: str, backend: str, optimize: bool) -> list[np.ndarray]:
    meta = BY_NAME[name]
    graph = kl.Graph(harness.registry(backend))
    with graph.as_default():
        fetches, feeds = _build(meta, mode == "dynamic")
    if mode == "static" and not meta["errors"][mode]:
        want = expected(name, mode)
        for fetch, value in zip(fetches, want, strict=False):  # the shape function's answer
            assert fetch.shape.is_compatible_with(value.shape), (fetch.shape, value.shape)
    labels = torch_labels() if backend == "torch" else {}
    try:
        return _run(graph, fetches, feeds, optimize, labels)
    except kl.InvalidArgumentError as error:  # no torch kernel for this dtype: the default
        if "asks for label 'torch'" not in str(error):
            raise
        labels = {k: v for k, v in labels.items() if k != meta["op"]}
        return _run(graph, fetches, feeds, optimize, labels)


def _run(
    graph: kl.Graph, fetches: list[kl.Tensor], feeds: Any, optimize: bool, labels: Any
) -> list[np.ndarray]:
    config = kl.SessionConfig(graph_optimizer=optimize, kernel_labels=labels)
    with kl.Session(graph, config) as session:
        values = session.run(fetches, feeds)
    return [np.asarray(v) for v in values]


def expected(name: str, mode: str) -> list[np.ndarray]:
    meta = BY_NAME[name]
    dynamic = mode == "dynamic" and not meta["dynamic_same"]
    prefix = f"{name}|dynamic|out" if dynamic else f"{name}|out"
    return [ARRAYS[f"{prefix}{j}"] for j in range(meta[f"n_out_{mode}"])]


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype and shape; integers equal, floats within the type's rounding (products
    may sum in another order: the inputs are small integers, so most are exact)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "fc":
        tol = {2: 2e-3, 4: 2e-6, 8: 1e-6, 16: 1e-12}[want.dtype.itemsize]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def _params() -> list[Any]:
    """The fixed cases on the backends where they differed, the strict xfails and a
    representative slice; every case on every backend with ``KERNLOOM_TF_EDGE_ALL=1``."""
    everything = bool(os.environ.get("KERNLOOM_TF_EDGE_ALL"))
    out = []
    for meta in META:
        name = meta["name"]
        for mode in ("static", "dynamic"):
            for backend in ("numpy", "torch", "torchgpu"):
                if backend == "torch" and meta["op"] not in torch_cpu_ops():
                    continue
                key = f"{name}-{mode}-{backend}"
                reason = DEVIATIONS.get(key) or DEVIATIONS.get(name)
                fixed = name in FIXED and backend in FIXED[name][0]
                if not (everything or reason or fixed or name in REPRESENTATIVE):
                    continue
                marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
                out.append(pytest.param(name, mode, backend, marks=marks, id=key))
    return out


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize(("name", "mode", "backend"), _params())
def test_matches_tensorflow(name: str, mode: str, backend: str, optimize: bool) -> None:
    meta = BY_NAME[name]
    if meta["errors"][mode]:
        with pytest.raises(kl.InvalidArgumentError):  # an error that explains, not a crash
            run_kernloom(name, mode, backend, optimize)
        return
    got = run_kernloom(name, mode, backend, optimize)
    want = expected(name, mode)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)
