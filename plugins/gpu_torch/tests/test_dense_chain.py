"""The ``torch_dense_chain`` pass and its ``_TorchDenseChain`` kernel: which layers become
one node, and that the node computes what the layers did -- what the unfused kernels give
(the same library calls; up to a few ulps, since oneDNN's and MKL's products are not
bitwise reproducible across buffer addresses), and numpy's float64 values within
float32's tolerance -- on every path a layer can take (numpy's GEMM for small products, the packed
GEMM, torch's ordinary one), every activation, with and without a softmax head."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_torch_labelled_cpu import REGISTRY
from torch_helpers import torch_registry

import kernloom as kl
from kernloom.testing import check_graph_pass
from kernloom_gpu_torch.kernels import packed_matmul

PASS = "torch_dense_chain"
RNG = np.random.default_rng(5)

ACTIVATIONS: dict[str, Callable[[Any], Any]] = {
    "": lambda z: z,
    "Relu": lambda z: np.where(np.isnan(z), np.nan, np.maximum(z, 0)),
    "Relu6": lambda z: np.where(np.isnan(z), np.nan, np.clip(z, 0, 6)),
    "Elu": lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0))),
    "LeakyRelu": lambda z: np.where(z > 0, z, 0.3 * z),
}


def _apply(h: Any, activation: str) -> Any:
    if activation == "LeakyRelu":
        return kl.ops.leaky_relu(h, alpha=0.3)
    return getattr(kl.ops, activation.lower())(h) if activation else h


def _mlp(
    sizes: list[int],
    activations: list[str],
    head: str,
    *,
    transpose: bool = False,
    registry: Any = None,
    columns: int | None = -1,
) -> tuple[kl.Graph, kl.Tensor, kl.Tensor, Callable[[Any], Any]]:
    """Dense layers (MatMul + BiasAdd + activation) and a head, as the user writes them;
    with the numpy float64 function they compute."""
    weights = [
        (RNG.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        for a, b in itertools.pairwise(sizes)
    ]
    biases = [RNG.standard_normal(b).astype(np.float32) for b in sizes[1:]]
    g = kl.Graph(registry if registry is not None else REGISTRY)
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, sizes[0] if columns == -1 else columns], name="x")
        h = x
        for i, (w, b, act) in enumerate(zip(weights, biases, activations, strict=True)):
            w_const = kl.constant(np.ascontiguousarray(w.T) if transpose else w, name=f"w{i}")
            h = kl.ops.mat_mul(h, w_const, transpose_b=transpose, name=f"mm{i}")
            h = _apply(kl.ops.bias_add(h, kl.constant(b, name=f"b{i}"), name=f"ba{i}"), act)
        if head:
            h = getattr(kl.ops, {"Softmax": "softmax", "LogSoftmax": "log_softmax"}[head])(h)

    def reference(xv: Any) -> Any:
        z = xv.astype(np.float64)
        with np.errstate(all="ignore"):  # inf * 0 is NaN, as in the kernels
            for w, b, act in zip(weights, biases, activations, strict=True):
                z = ACTIVATIONS[act](z @ w + b)
            if head:
                shifted = z - z.max(axis=-1, keepdims=True)
                log_sum = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
                z = shifted - log_sum if head == "LogSoftmax" else np.exp(shifted - log_sum)
        return z

    return g, x, h, reference


def _run(
    g: kl.Graph, fetch: Any, feeds: dict[Any, Any], *, threads: int = 1, fused: bool = True
) -> tuple[Any, list[tuple[str, str]]]:
    """The fetch's value and the (name, op) of each node the step ran."""
    config = kl.SessionConfig(
        inter_op_threads=1,
        intra_op_threads=threads,
        disabled_passes=() if fused else (PASS,),
    )
    with kl.Session(g, config, registry=g.registry or REGISTRY) as session:
        metadata = kl.RunMetadata()
        value = session.run(fetch, feeds, kl.RunOptions(trace=True), metadata)
    assert metadata.step_stats is not None
    return value, [(n.node, n.op) for n in metadata.step_stats.nodes]


def _chains(nodes: list[tuple[str, str]]) -> list[str]:
    return [name for name, op in nodes if op == "_TorchDenseChain"]


@settings(max_examples=40, deadline=None)
@given(
    depth=st.integers(1, 3),
    activation=st.sampled_from(sorted(ACTIVATIONS)),
    head=st.sampled_from(["", "Softmax", "LogSoftmax"]),
    rows=st.sampled_from([0, 1, 5, 64, 300]),
    transpose=st.booleans(),
    threads=st.sampled_from([1, 2]),
    library=st.sampled_from([packed_matmul.MKL, packed_matmul.ONEDNN, packed_matmul.PLAIN]),
)
def test_a_chain_gives_what_its_layers_give(
    depth: int,
    activation: str,
    head: str,
    rows: int,
    transpose: bool,
    threads: int,
    library: str,
) -> None:
    """Fused when it has two nodes or more; then equal to the unfused run (to a few ulps)
    and to numpy's float64 values."""
    sizes = [40, 300, 200, 10][: depth + 1] if depth < 3 else [40, 300, 200, 10]
    original = packed_matmul.GEMM_LIBRARY
    packed_matmul.GEMM_LIBRARY = library
    try:
        g, x, y, reference = _mlp(sizes, [activation] * depth, head, transpose=transpose)
        xv = RNG.standard_normal((rows, sizes[0])).astype(np.float32)
        got, nodes = _run(g, y, {x: xv}, threads=threads)
        want, unfused = _run(g, y, {x: xv}, threads=threads, fused=False)
    finally:
        packed_matmul.GEMM_LIBRARY = original
    assert _chains(nodes) == ([y.node.name] if depth + bool(head) >= 2 else [])
    assert _chains(unfused) == []
    assert got.shape == (rows, sizes[depth]) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, reference(xv), rtol=2e-4, atol=2e-4)


def test_the_mlp_is_one_node_that_lists_every_node_it_replaced() -> None:
    g, x, y, reference = _mlp([784, 1024, 1024, 10], ["Relu", "Relu", ""], "Softmax")
    xv = RNG.standard_normal((256, 784)).astype(np.float32)
    (value,) = check_graph_pass(g, PASS, [y], {x: xv}, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(value, reference(xv), rtol=1e-4, atol=1e-6)
    with kl.Session(g, registry=REGISTRY) as session:
        report = session.explain(y, {x: xv})
    replaced = "mm0, ba0, relu, mm1, ba1, relu_1, mm2, ba2, softmax"
    assert f"    {y.node.name} <- {replaced}" in report
    assert "fused 1 dense chain(s): softmax <- relu + relu_1 + ba2 + softmax" in report


def test_nan_and_inf_go_through_the_layers_as_tensorflow_lets_them() -> None:
    """ReLU keeps NaN (TensorFlow's Relu), and a NaN logit makes its row's softmax NaN."""
    g, x, y, reference = _mlp([8, 300, 300, 4], ["Relu", "Relu", ""], "Softmax")
    xv = RNG.standard_normal((80, 8)).astype(np.float32)
    xv[3, 2] = np.nan
    xv[7, 0] = np.inf
    got, nodes = _run(g, y, {x: xv}, threads=2)
    assert _chains(nodes) == [y.node.name]
    assert np.isnan(got[3]).all() and np.isnan(got[7]).all()
    np.testing.assert_allclose(got, reference(xv), rtol=1e-4, atol=1e-6)


def test_a_fetched_layer_ends_a_chain_and_keeps_its_value() -> None:
    g, x, y, _ = _mlp([16, 200, 200, 200, 5], ["Relu", "Relu", "Relu", ""], "Softmax")
    middle = g.node("relu_1").outputs[0]
    xv = RNG.standard_normal((64, 16)).astype(np.float32)
    with kl.Session(g, kl.SessionConfig(inter_op_threads=1), registry=REGISTRY) as session:
        got = session.run([middle, y], {x: xv})
        metadata = kl.RunMetadata()
        session.run([middle, y], {x: xv}, kl.RunOptions(trace=True), metadata)
    assert metadata.step_stats is not None
    chains = sorted(n.node for n in metadata.step_stats.nodes if n.op == "_TorchDenseChain")
    assert chains == ["relu_1", "softmax"]  # mm0..relu_1, then mm2..softmax
    config = kl.SessionConfig(inter_op_threads=1, disabled_passes=(PASS,))
    with kl.Session(g, config, registry=REGISTRY) as session:
        want = session.run([middle, y], {x: xv})
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_layers_a_gpu_would_run_stay_layers() -> None:
    """With a GPU in the session (here a CPU-bound torch one) the placer puts the layers
    there: no chain, which has a CPU kernel only. Pinned to the CPU, they chain."""
    registry = torch_registry()
    g, x, y, reference = _mlp([8, 64, 4], ["Relu", ""], "Softmax", registry=registry)
    xv = RNG.standard_normal((5, 8)).astype(np.float32)
    got, nodes = _run(g, y, {x: xv})
    assert _chains(nodes) == []
    np.testing.assert_allclose(got, reference(xv), rtol=1e-4, atol=1e-6)
    pinned = kl.Graph(registry)
    with pinned.as_default(), kl.device("/device:CPU:0"):
        xp = kl.placeholder(kl.float32, [None, 8], name="x")
        w = kl.constant(RNG.standard_normal((8, 3)).astype(np.float32))
        h = kl.ops.relu(kl.ops.bias_add(kl.ops.mat_mul(xp, w), kl.constant(np.ones(3, np.float32))))
        out = kl.ops.softmax(h)
    got, nodes = _run(pinned, out, {xp: xv})
    assert _chains(nodes) == [out.node.name]


def test_a_layer_in_a_loop_or_with_a_label_is_left_alone() -> None:
    g, x, y, _ = _mlp([8, 64, 64, 4], ["Relu", "Relu", ""], "")
    with g.as_default(), kl.kernel_label("torch"):
        labelled = kl.ops.softmax(y, name="labelled")
    xv = RNG.standard_normal((3, 8)).astype(np.float32)
    _, nodes = _run(g, labelled, {x: xv})
    assert _chains(nodes) == [y.node.name]  # the three layers; the labelled head stays out
    assert ("labelled", "Softmax") in nodes

    loop = kl.Graph()
    with loop.as_default():
        w = kl.constant(np.eye(4, dtype=np.float32) * 0.5)
        b = kl.constant(np.zeros(4, np.float32))

        def body(i: Any, h: Any) -> tuple[Any, Any]:
            h = kl.ops.relu(kl.ops.bias_add(kl.ops.mat_mul(h, w), b))
            return i + 1, kl.ops.softmax(kl.ops.relu(kl.ops.bias_add(kl.ops.mat_mul(h, w), b)))

        start = kl.constant(np.ones((2, 4), np.float32))
        _, result = kl.while_loop(lambda i, h: i < 3, body, [kl.constant(0), start])
    value, nodes = _run(loop, result, {})
    assert _chains(nodes) == []
    assert value.shape == (2, 4)


def test_a_layer_that_does_not_fit_at_run_time_is_named_in_the_error() -> None:
    """Shapes unknown until the run: the second layer's weight does not fit the first's
    output; the error names the chain node, the nodes it replaced and the layer."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None], name="x")
        w1 = kl.placeholder(kl.float32, [None, None], name="w1")
        b1 = kl.placeholder(kl.float32, [None], name="b1")
        h = kl.ops.relu(kl.ops.bias_add(kl.ops.mat_mul(x, w1), b1))
        w2 = kl.constant(np.ones((5, 2), np.float32))
        b2 = kl.constant(np.zeros(2, np.float32))
        y = kl.ops.bias_add(kl.ops.mat_mul(h, w2, name="second"), b2, name="out")
    feeds = {
        x: np.ones((3, 4), np.float32),
        w1: np.ones((4, 6), np.float32),
        b1: np.zeros(6, np.float32),
    }
    with pytest.raises(kl.KernelError) as info, kl.Session(g, registry=REGISTRY) as session:
        session.run(y, feeds)
    message = str(info.value)
    assert "node 'out' (op _TorchDenseChain, fused from " in message
    assert "second, out" in message
    assert "layer 2 of 2 (out): inner dimensions differ: [3, 6] x [5, 2]" in message


def test_a_variable_weight_gives_each_run_its_value() -> None:
    """A weight that is not a constant is not packed: an assignment between runs shows."""
    w2 = (RNG.standard_normal((300, 3)) / 20).astype(np.float32)
    b2 = np.arange(3, dtype=np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 8], name="x")
        v = kl.Variable(np.ones((8, 300), np.float32), name="v")
        zeros = kl.constant(np.zeros(300, np.float32))
        h = kl.ops.relu(kl.ops.bias_add(kl.ops.mat_mul(x, v.value()), zeros))
        y = kl.ops.softmax(kl.ops.bias_add(kl.ops.mat_mul(h, kl.constant(w2)), kl.constant(b2)))
        assign = v.assign(np.full((8, 300), 0.5, np.float32))
        init = kl.variables_initializer()
    xv = np.ones((70, 8), np.float32)
    with kl.Session(g, kl.SessionConfig(intra_op_threads=2), registry=REGISTRY) as session:
        session.run(init)
        before = session.run(y, {x: xv})
        session.run(assign)
        after = session.run(y, {x: xv})
        metadata = kl.RunMetadata()
        session.run(y, {x: xv}, kl.RunOptions(trace=True), metadata)
    assert metadata.step_stats is not None
    assert "_TorchDenseChain" in {n.op for n in metadata.step_stats.nodes}
    for value, weight in ((before, 1.0), (after, 0.5)):
        z = np.full((70, 300), 8.0 * weight) @ w2.astype(np.float64) + b2
        e = np.exp(z - z.max(axis=1, keepdims=True))
        np.testing.assert_allclose(value, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("library", [packed_matmul.MKL, packed_matmul.ONEDNN, packed_matmul.PLAIN])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_chain_run_again_replays_its_calls_and_decides_again_when_a_shape_changes(
    library: str, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of one session with new values, alternating batch sizes, a NaN and a bad
    shape: each gives numpy's value (or the layer's error); the checks run only when the
    input's shape is new (the replayed runs make the library calls alone)."""
    from kernloom_gpu_torch.kernels import dense_chain

    checked = []
    real_check = dense_chain.matmul_shape
    monkeypatch.setattr(
        dense_chain, "matmul_shape", lambda *a, **k: checked.append(1) or real_check(*a, **k)
    )
    monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", library)
    g, x, y, reference = _mlp([64, 300, 200, 10], ["Relu", "Relu6", ""], "Softmax", columns=None)
    config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads)
    with kl.Session(g, config, registry=REGISTRY) as session:
        run = session.make_callable(y, [x])
        for rows in (128, 128, 128, 9, 9, 128):
            xv = RNG.standard_normal((rows, 64)).astype(np.float32)
            xv[0, 0] = np.nan if rows == 9 else xv[0, 0]
            before = len(checked)
            np.testing.assert_allclose(run(xv), reference(xv), rtol=2e-4, atol=2e-5)
            assert np.isnan(run(xv)[0]).all() == (rows == 9)
            assert len(checked) - before in (0, 3)  # decided again, or replayed
        # first sight of each shape (128, 9, 128 again after 9) decides; the rest replay
        assert len(checked) == 3 * 3
        with pytest.raises(kl.KernelError, match=r"layer 1 of 3 .*inner dimensions differ"):
            run(np.ones((128, 63), np.float32))


def test_steps_of_other_shapes_at_the_same_time_each_get_their_own_values() -> None:
    """Two threads run one session's chain at once with different batch sizes: a step
    replays only what was recorded for its own shape."""
    g, x, y, reference = _mlp([64, 300, 200, 10], ["Relu", "Relu", ""], "Softmax")
    failures: list[BaseException] = []
    with kl.Session(g, kl.SessionConfig(intra_op_threads=2), registry=REGISTRY) as session:
        run = session.make_callable(y, [x])

        def steps(rows: int) -> None:
            rng = np.random.default_rng(rows)
            try:
                for _ in range(30):
                    xv = rng.standard_normal((rows, 64)).astype(np.float32)
                    np.testing.assert_allclose(run(xv), reference(xv), rtol=2e-4, atol=2e-5)
            except BaseException as exc:  # reported below, from the test's thread
                failures.append(exc)

        workers = [threading.Thread(target=steps, args=(rows,)) for rows in (128, 9, 64)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert not failures, failures[0]


@pytest.mark.parametrize("head", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("activation", ["", "Relu", "Elu"])
@pytest.mark.parametrize(("threads", "transpose"), [(1, False), (2, False), (2, True)])
def test_a_narrow_last_layer_before_a_head_runs_on_the_transpose(
    head: str, activation: str, threads: int, transpose: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A classifier's last layer (few columns, many rows) and its head run on the
    transpose on oneDNN's path (``TRANSPOSED_HEAD_ROWS``): the same values as the unfused
    layers and numpy's float64 ones, NaN and inf rows included, on the deciding run and on
    the replayed ones; fewer rows, a wide layer or no head keep the direct product."""
    from kernloom_gpu_torch.kernels import dense_chain

    monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", packed_matmul.ONEDNN)
    transposed: list[tuple[int, ...]] = []
    real = dense_chain.onednn_linear
    monkeypatch.setattr(
        dense_chain,
        "onednn_linear",
        lambda a, w, b: transposed.append(tuple(a.shape)) or real(a, w, b),
    )
    g, x, y, reference = _mlp(
        [96, 512, 10], ["Relu", activation], head, transpose=transpose, columns=None
    )
    config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads)
    unfused = kl.SessionConfig(inter_op_threads=1, disabled_passes=(PASS,))
    with (
        kl.Session(g, config, registry=REGISTRY) as session,
        kl.Session(g, unfused, registry=REGISTRY) as plain,
    ):
        run, want = session.make_callable(y, [x]), plain.make_callable(y, [x])
        for rows in (300, 300, 255, 1000):
            xv = RNG.standard_normal((rows, 96)).astype(np.float32)
            xv[1, 5], xv[7, 0] = np.nan, -np.inf
            before = len(transposed)
            got = run(xv)
            assert got.shape == (rows, 10) and got.flags.c_contiguous
            assert np.isnan(got[1]).all() and np.isnan(got[7]).all()
            np.testing.assert_allclose(got, want(xv), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got, reference(xv), rtol=2e-4, atol=2e-5)
            # the [10, 512] weight as oneDNN's source: the transposed product, once a run
            on_transpose = rows >= dense_chain.TRANSPOSED_HEAD_ROWS
            assert transposed[before:] == ([(10, 512)] if on_transpose else [])


def test_a_wide_last_layer_or_one_without_a_head_keeps_the_direct_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernloom_gpu_torch.kernels import dense_chain

    monkeypatch.setattr(packed_matmul, "GEMM_LIBRARY", packed_matmul.ONEDNN)
    calls: list[int] = []
    real = dense_chain.onednn_linear
    monkeypatch.setattr(
        dense_chain, "onednn_linear", lambda a, w, b: calls.append(1) or real(a, w, b)
    )
    xv = RNG.standard_normal((400, 96)).astype(np.float32)
    for sizes, head in (([96, 512, 16], "Softmax"), ([96, 512, 10], "")):
        g, x, y, reference = _mlp(sizes, ["Relu", ""], head)
        got, nodes = _run(g, y, {x: xv}, threads=2)
        assert _chains(nodes) == [y.node.name]
        np.testing.assert_allclose(got, reference(xv), rtol=2e-4, atol=2e-5)
    assert calls == []
