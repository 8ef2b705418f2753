"""The packed GEMMs for MatMul and ``_FusedMatMul`` on the CPU (``kernels/packed_matmul``),
each test on both libraries (MKL's, oneDNN's) whichever this CPU picks: a packed weight is
reused only while it is the same constant; a variable or fed weight gives each run's
value. References are numpy in float64."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_torch_labelled_cpu import REGISTRY

import kernloom as kl
from kernloom.testing import run_kernel
from kernloom_gpu_torch.kernels import packed_matmul

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True, params=[packed_matmul.MKL, packed_matmul.ONEDNN, packed_matmul.PLAIN])
def library(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on both GEMM libraries, and on neither (a torch build without them)."""
    monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", request.param)
    return str(request.param)


@pytest.fixture(autouse=True)
def _torch_even_for_small_products(library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """These products are small and narrow; without this they would take numpy's GEMM or
    MKL's plain one, never the packed path."""
    monkeypatch.setattr(packed_matmul, "SMALL_PRODUCT", 0)
    monkeypatch.setattr(packed_matmul, "TINY_PRODUCT", 0)
    monkeypatch.setattr(packed_matmul, "NARROW", 1)


def _floats(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.standard_normal(shape).astype(np.float32)


def _session(graph: kl.Graph, optimizer: bool = True) -> kl.Session:
    config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=1, graph_optimizer=optimizer)
    return kl.Session(graph, config, registry=REGISTRY)


def _kernel_of(session: kl.Session, fetch: Any, feeds: dict[Any, Any], op: str) -> str:
    metadata = kl.RunMetadata()
    session.run(fetch, feeds, options=kl.RunOptions(trace=True), run_metadata=metadata)
    assert metadata.step_stats is not None
    return next(n.kernel for n in metadata.step_stats.nodes if n.op == op)


def _dense(x: Any, w: Any, b: Any) -> np.ndarray[Any, Any]:
    z: np.ndarray[Any, Any] = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0)
    return z


def test_a_variable_weight_changed_between_runs_gives_the_new_result() -> None:
    x, w1, w2, b = _floats(8, 4), _floats(4, 3), _floats(4, 3), _floats(3)
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [None, 4])
        v = kl.Variable(w1, name="weight")
        y = kl.ops.relu(kl.ops.bias_add(kl.ops.mat_mul(xp, v.value()), kl.constant(b)))
        assign = v.assign(kl.constant(w2))
    with _session(g) as sess:
        sess.run(v.initializer)
        assert _kernel_of(sess, y, {xp: x}, "_FusedMatMul") == "PackedFusedMatMul"
        np.testing.assert_allclose(sess.run(y, {xp: x}), _dense(x, w1, b), rtol=1e-5, atol=1e-5)
        sess.run(assign)
        np.testing.assert_allclose(sess.run(y, {xp: x}), _dense(x, w2, b), rtol=1e-5, atol=1e-5)


def test_a_fed_weight_is_never_served_from_the_cache() -> None:
    x, w, b = _floats(8, 4), _floats(4, 6), _floats(6)
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [8, 4])
        wp = kl.placeholder(kl.float32, [4, 6])
        y = kl.ops.relu(kl.ops.bias_add(kl.ops.mat_mul(xp, wp), kl.constant(b)))
    with _session(g) as sess:
        for scale in (1.0, -3.0, 0.5):
            expected = _dense(x, w, b)
            np.testing.assert_allclose(sess.run(y, {xp: x, wp: w}), expected, atol=1e-5)
            w *= scale  # in place: the same array object, new content


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_constant_weights_with_transposes_and_batch_changes(
    transpose_a: bool, transpose_b: bool
) -> None:
    w = _floats(6, 4) if transpose_b else _floats(4, 6)
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [4, None] if transpose_a else [None, 4])
        y = kl.ops.mat_mul(xp, kl.constant(w), transpose_a=transpose_a, transpose_b=transpose_b)
    with _session(g) as sess:
        assert _kernel_of(
            sess, y, {xp: _floats(*((4, 9) if transpose_a else (9, 4)))}, "MatMul"
        ) == ("PackedMatMul")
        for rows in (9, 20, 1, 9, 8):  # packed for 9 rows: any count >= 8 uses it
            x = _floats(*((4, rows) if transpose_a else (rows, 4)))
            a = x.T if transpose_a else x
            b = w.T if transpose_b else w
            np.testing.assert_allclose(sess.run(y, {xp: x}), a @ b, rtol=1e-5, atol=1e-5)


def test_a_weight_first_used_on_a_few_rows_is_packed_for_many(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oneDNN's format for a 1-row packing ran 4- and 8-row products at about 2x the time of
    a 64-row one (``PACKED_FOR_ROWS``); the weight is packed once, on the first call."""
    if library != packed_matmul.ONEDNN or not packed_matmul.HAS_ONEDNN:
        pytest.skip("oneDNN's packing only")
    hints: list[int] = []
    reorder = packed_matmul._reorder_linear_weight

    def recording(weight: Any, rows: int) -> Any:
        hints.append(rows)
        return reorder(weight, rows)

    monkeypatch.setattr(packed_matmul, "_reorder_linear_weight", recording)
    w = _floats(4, 6)
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [None, 4])
        y = kl.ops.mat_mul(xp, kl.constant(w))
    with _session(g) as sess:
        for rows in (1, 8, 100):
            x = _floats(rows, 4)
            np.testing.assert_allclose(sess.run(y, {xp: x}), x @ w, rtol=1e-5, atol=1e-5)
    assert hints == [packed_matmul.PACKED_FOR_ROWS]


def test_relu_keeps_nan_and_other_activations() -> None:
    x, w, b = _floats(8, 2), _floats(2, 4), _floats(4)
    x[1, 0] = np.nan
    for activation, reference in (
        ("relu", lambda z: np.where(np.isnan(z), np.nan, np.maximum(z, 0))),
        ("relu6", lambda z: np.where(np.isnan(z), np.nan, np.clip(z, 0, 6))),
        ("elu", lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0)))),
    ):
        g = kl.Graph()
        with g.as_default():
            xp = kl.placeholder(kl.float32, [8, 2])
            z = kl.ops.bias_add(kl.ops.mat_mul(xp, kl.constant(w)), kl.constant(b))
            y = getattr(kl.ops, activation)(z)
        with _session(g) as sess:
            assert _kernel_of(sess, y, {xp: x}, "_FusedMatMul") == "PackedFusedMatMul"
            expected = reference(x.astype(np.float64) @ w + b)
            np.testing.assert_allclose(sess.run(y, {xp: x}), expected, atol=1e-5)


def test_empty_products_and_a_bad_bias() -> None:
    run = run_kernel("MatMul", [_floats(0, 3), _floats(3, 2)], {}, registry=REGISTRY)
    assert type(run.kernel).__name__ == "PackedMatMul"
    assert run.outputs[0].shape == (0, 2)
    (zeros,) = run_kernel("MatMul", [_floats(2, 0), _floats(0, 3)], {}, registry=REGISTRY).outputs
    np.testing.assert_array_equal(zeros, np.zeros((2, 3), np.float32))
    with pytest.raises(kl.InvalidArgumentError, match=r"bias has shape \(2,\); it needs \(3,\)"):
        run_kernel(
            "_FusedMatMul",
            [_floats(2, 4), _floats(4, 3), [_floats(2)]],
            {"fused_ops": ["BiasAdd"]},
            registry=REGISTRY,
        )


def test_equal_columns_stay_equal_for_one_row(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A matrix-vector product (one row) takes oneDNN on the MKL path: MKL's products,
    packed or not, and numpy's OpenBLAS sum column blocks in different orders on Intel's
    AVX-512 CPUs, and equal columns must give equal results (onnx's light ResNet-50 feeds
    its classifier 3e17 everywhere). A torch with neither library (``PLAIN``) runs
    ``addmm`` and promises nothing here."""
    if library == packed_matmul.PLAIN:
        pytest.skip("no packed library: torch's own GEMM decides the summation order")
    if not packed_matmul.HAS_ONEDNN and library == packed_matmul.MKL:
        pytest.skip("this torch has no oneDNN to take a one-row product from MKL")
    x = np.full((1, 2048), 3.2070878e17, np.float32)
    w = np.full((1000, 2048), 0.02, np.float32)
    w.setflags(write=False)  # as a constant arrives
    run = run_kernel("MatMul", [x, w], {"transpose_b": True}, registry=REGISTRY)
    assert type(run.kernel).__name__ == "PackedMatMul"
    assert np.unique(run.outputs[0]).size == 1
    # On one thread such a product is not numpy's either (it would be on the oneDNN path).
    monkeypatch.setattr(packed_matmul, "TINY_PRODUCT", 1 << 16)
    monkeypatch.setattr(packed_matmul, "SMALL_PRODUCT", 1 << 22)
    for_numpy = packed_matmul.for_numpy(x, w.T, (1, 1000), threads=1)
    assert for_numpy == (library == packed_matmul.ONEDNN)


def test_a_fed_bias_is_never_served_from_the_cache() -> None:
    x, w, b = _floats(8, 4), _floats(4, 6), _floats(6)
    g = kl.Graph()
    with g.as_default():
        bp = kl.placeholder(kl.float32, [6])
        fused = {"fused_ops": ["BiasAdd", "Relu"]}  # (the optimizer fuses constant biases)
        y = g.apply_op("_FusedMatMul", [kl.constant(x), kl.constant(w), [bp]], fused)
    with _session(g) as sess:
        assert _kernel_of(sess, y, {bp: b}, "_FusedMatMul") == "PackedFusedMatMul"
        for step in (1.0, -4.0):
            np.testing.assert_allclose(sess.run(y, {bp: b}), _dense(x, w, b), atol=1e-5)
            b += step  # in place: the same array object, new content


@pytest.mark.parametrize("activation", ["Relu", "Relu6", ""])
def test_small_products_take_numpy_s_gemm(
    monkeypatch: pytest.MonkeyPatch, activation: str, library: str
) -> None:
    """Under ``SMALL_PRODUCT`` multiply-adds the product, bias and activation are numpy's
    (no torch call): same results, NaN kept by ReLU, a bad bias named."""
    monkeypatch.undo()  # the real thresholds: 3x2x4 is under TINY_PRODUCT
    monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", library)
    if activation != "Relu6":  # (Relu6 alone runs in torch, in place on numpy's output)
        monkeypatch.setattr(packed_matmul, "tensor", None)  # a torch conversion would fail
    x, w, b = _floats(3, 2), _floats(4, 2), _floats(4)
    x[0, 1] = np.nan
    fused_ops = ["BiasAdd", activation] if activation else ["BiasAdd"]
    attrs = {"transpose_b": True, "fused_ops": fused_ops}
    (y,) = run_kernel("_FusedMatMul", [x, w, [b]], attrs, registry=REGISTRY).outputs
    z = x.astype(np.float64) @ w.T + b
    expected = {"Relu": np.maximum(z, 0), "Relu6": np.clip(z, 0, 6), "": z}[activation]
    np.testing.assert_allclose(y, np.where(np.isnan(z), np.nan, expected), atol=1e-6)
    with pytest.raises(kl.InvalidArgumentError, match=r"bias has shape \(3,\); it needs \(4,\)"):
        run_kernel("_FusedMatMul", [x, w, [_floats(3)]], attrs, registry=REGISTRY)


@pytest.mark.parametrize(
    ("m", "n", "k", "threads", "mkl_path", "onednn_path"),
    [
        (3, 4, 2, 1, "numpy", "numpy"),  # tiny: numpy at any thread count
        (3, 4, 2, 2, "numpy", "numpy"),
        (256, 1024, 10, 1, "numpy", "numpy"),  # small and wide: numpy on one thread
        (256, 1024, 10, 2, "packed", "packed"),
        (256, 10, 1024, 1, "addmm", "packed"),  # narrow output: MKL's plain GEMM
        (256, 10, 1024, 2, "addmm", "packed"),
        (16, 10, 1024, 1, "addmm", "numpy"),  # narrow and small: numpy on oneDNN's path
        (16, 10, 1024, 2, "addmm", "packed"),
        (64, 32, 512, 1, "addmm", "packed"),  # a million multiply-adds: oneDNN again
        # under MIN_PACKED_ROWS rows: oneDNN on the MKL path too (equal columns stay equal)
        (4, 1000, 2048, 1, "packed" if packed_matmul.HAS_ONEDNN else "addmm", "packed"),
        (256, 1024, 1024, 1, "packed", "packed"),
    ],
)
def test_each_product_takes_the_gemm_measured_fastest_for_its_shape(
    monkeypatch: pytest.MonkeyPatch,
    library: str,
    m: int,
    n: int,
    k: int,
    threads: int,
    mkl_path: str,
    onednn_path: str,
) -> None:
    """The path (numpy, MKL plain, packed) by library, shape and threads, as measured in
    ``packed_matmul``'s constants; every path gives numpy's float64 result."""
    monkeypatch.undo()  # the real thresholds
    monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", library)
    path = {
        packed_matmul.MKL: mkl_path,
        packed_matmul.ONEDNN: onednn_path,
        packed_matmul.PLAIN: "numpy" if mkl_path == "numpy" else "addmm",
    }[library]
    calls: list[str] = []
    real = packed_matmul.PackedMatMul._small_product

    def small(self: Any, *args: Any) -> None:
        calls.append("numpy")
        real(self, *args)

    monkeypatch.setattr(packed_matmul.PackedMatMul, "_small_product", small)
    packed = packed_matmul.PackedWeight._weights

    def weights(self: Any, *args: Any) -> Any:
        calls.append("packed")
        return packed(self, *args)

    monkeypatch.setattr(packed_matmul.PackedWeight, "_weights", weights)
    x, w = _floats(m, k), _floats(k, n)
    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [m, k])
        y = kl.ops.mat_mul(xp, kl.constant(w))
    config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads)
    with kl.Session(g, config, registry=REGISTRY) as sess:
        out = sess.run(y, {xp: x})
    np.testing.assert_allclose(out, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    assert (calls or ["addmm"]) == [path]
