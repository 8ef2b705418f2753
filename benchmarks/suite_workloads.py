"""The benchmark suite's workloads as each runtime runs them (the child side of
``suite.py``; ``isolation.py`` loads this file by path in each runtime's interpreter).

Three factories, one per workload, each taking the runtime's name: ``chain`` (1000
``Add(x, c)`` on float32[16], ``c`` a vector or a scalar constant), ``mlp`` (784-1024-1024-10,
batch 256, MatMul+bias+Relu, softmax) and ``while_loop`` (``i + 1`` while ``i < n``). Every
runtime builds the same computation from the same constants, runs it once and checks the
output against numpy's (computed here, in the same child) before anything is timed; a
round is the best of ``repeats`` calls after one warm-up call.

Only numpy is imported at module level: the TensorFlow child runs in another virtual
environment, which has neither torch nor onnxruntime.
"""

from __future__ import annotations

import atexit
import itertools
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

N_ADDS = 1000
MLP_SIZES: tuple[int, ...] = (784, 1024, 1024, 10)
MLP_BATCH = 256
TF_QUIET = "3"
"""TF_CPP_MIN_LOG_LEVEL for the TensorFlow child: its C++ log lines are not results."""

Run = Callable[[], Any]
Built = tuple[Run, dict[str, Any]]
"""A runtime's workload, ready: one call of it, and what to say about it (its version)."""


def best_of(run: Run, repeats: int) -> float:
    """The shortest of ``repeats`` timed calls, after one untimed one (the other children
    ran since this child's last round: the first call pays for cold caches)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def _measured(
    name: str, built: Built, expected: Any, repeats: int, *, rtol: float, atol: float
) -> tuple[Callable[[], float], dict[str, Any]]:
    """Check one call's output against ``expected`` (numpy's), then hand the round back."""
    run, info = built
    got = np.asarray(_first(run()))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=name)
    diff = float(np.max(np.abs(got.astype(np.float64) - expected))) if got.size else 0.0
    info = {
        **info,
        "python": platform.python_version(),
        "check": f"allclose to numpy direct (rtol={rtol:g}, atol={atol:g}): max |diff| {diff:.3g}",
    }
    return (lambda: best_of(run, repeats)), info


def _first(value: Any) -> Any:
    """The one output of a runtime that returns a list of outputs (ONNX Runtime)."""
    return value[0] if isinstance(value, list | tuple) else value


# -- chain of 1000 Add(x, c) ------------------------------------------------------------


def chain(runtime: str, scalar: bool, repeats: int) -> tuple[Callable[[], float], dict[str, Any]]:
    """``y = x + c_1 + ... + c_1000`` as 1000 separate adds; ``c_i`` = 0.001 i, a float32[16]
    vector or a float32 scalar. kernloom's optimizer folds the chain to one Add; the
    suite divides by 1000 all the same (time per *original* node)."""
    constants = [
        np.float32(0.001 * i) if scalar else np.full(16, 0.001 * i, np.float32)
        for i in range(N_ADDS)
    ]
    x = np.ones(16, np.float32)
    expected = _numpy_chain(x, constants)()
    builders: dict[str, Callable[[], Built]] = {
        "numpy": lambda: (_numpy_chain(x, constants), {"version": f"numpy {np.__version__}"}),
        "kernloom_off": lambda: _kernloom_chain(x, constants, optimizer=False),
        "kernloom_on": lambda: _kernloom_chain(x, constants, optimizer=True),
        "onnxruntime": lambda: _onnxruntime_chain(x, constants),
        "torch": lambda: _torch_chain(x, constants),
        "tf": lambda: _tf_chain(x, constants),
    }
    return _measured(runtime, builders[runtime](), expected, repeats, rtol=1e-4, atol=1e-6)


def _numpy_chain(x: Any, constants: list[Any]) -> Run:
    def run() -> Any:
        v = x
        for c in constants:
            v = np.add(v, c)
        return v

    return run


def _kernloom_chain(x: Any, constants: list[Any], *, optimizer: bool) -> Built:
    import kernloom as kl

    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [16], name="x")
        y = xp
        for c in constants:
            y = kl.ops.add(y, kl.constant(c))
    sess = _closed_at_exit(
        kl.Session(g, kl.SessionConfig(inter_op_threads=1, graph_optimizer=optimizer))
    )
    started = time.perf_counter()
    call = sess.make_callable(y, [xp])
    compile_s = time.perf_counter() - started
    return (lambda: call(x)), {
        "version": f"kernloom {kl.__version__}",
        "compile_s": compile_s,
        "optimizer": optimizer,
    }


def _onnxruntime_chain(x: Any, constants: list[Any]) -> Built:
    from onnx import TensorProto, helper, numpy_helper

    nodes, initializers, h = [], [], "x"
    for i, c in enumerate(constants):
        initializers.append(numpy_helper.from_array(np.asarray(c, np.float32), f"c{i}"))
        nodes.append(helper.make_node("Add", [h, f"c{i}"], [f"y{i}"]))
        h = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, [16])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = _onnxruntime_session(model, threads=1)
    return (lambda: session.run(None, {"x": x})), _onnxruntime_info()


def _torch_chain(x: Any, constants: list[Any]) -> Built:
    import torch

    torch.set_num_threads(1)
    xt = torch.from_numpy(x)
    cs = [torch.from_numpy(np.asarray(c)) for c in constants]

    def run() -> Any:
        with torch.inference_mode():
            v = xt
            for c in cs:
                v = torch.add(v, c)
            return v.numpy()

    return run, {"version": f"torch {torch.__version__}", "mode": "eager, inference_mode"}


def _tf_chain(x: Any, constants: list[Any]) -> Built:
    tf = _tensorflow()
    g = tf.Graph()
    with g.as_default():
        xp = tf.compat.v1.placeholder(tf.float32, [16], name="x")
        y = xp
        for c in constants:
            y = tf.add(y, tf.constant(c))
    return _tf_callable(g, y, xp, x, threads=1)


# -- MLP 784-1024-1024-10 -----------------------------------------------------------------


def mlp_weights() -> tuple[list[Any], list[Any], Any]:
    """The weights, biases and batch every runtime uses (seeded: the same in each child)."""
    rng = np.random.default_rng(0)
    pairs = list(itertools.pairwise(MLP_SIZES))
    weights = [(rng.standard_normal((a, b)) * 0.05).astype(np.float32) for a, b in pairs]
    biases = [rng.standard_normal(b).astype(np.float32) for _, b in pairs]
    x = rng.standard_normal((MLP_BATCH, MLP_SIZES[0])).astype(np.float32)
    return weights, biases, x


def mlp(runtime: str, threads: int, repeats: int) -> tuple[Callable[[], float], dict[str, Any]]:
    """The MLP at ``threads`` threads, each runtime with its own thread settings."""
    weights, biases, x = mlp_weights()
    expected = numpy_mlp(x, weights, biases)
    builders: dict[str, Callable[[], Built]] = {
        "numpy": lambda: (
            lambda: numpy_mlp(x, weights, biases),
            {"version": f"numpy {np.__version__}", "blas": _numpy_blas()},
        ),
        "kernloom_on": lambda: _kernloom_mlp(x, weights, biases, threads),
        "onnxruntime": lambda: (
            _bind_onnxruntime(onnxruntime_mlp(weights, biases, threads), x),
            _onnxruntime_info(),
        ),
        "torch": lambda: _torch_mlp_built(x, weights, biases, threads),
        "tf": lambda: _tf_mlp(x, weights, biases, threads),
    }
    built = builders[runtime]()
    built[1]["threads"] = threads
    return _measured(runtime, built, expected, repeats, rtol=1e-3, atol=1e-5)


def numpy_mlp(x: Any, weights: list[Any], biases: list[Any]) -> Any:
    """numpy written by hand: ``h @ w``, the bias and ReLU in place, a stable softmax."""
    h = x
    for i, (w, bias) in enumerate(zip(weights, biases, strict=True)):
        h = h @ w
        h += bias
        if i < len(weights) - 1:
            np.maximum(h, 0, out=h)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def kernloom_mlp_graph(
    weights: list[Any], biases: list[Any], batch: int | None = MLP_BATCH
) -> tuple[Any, Any, Any]:
    """The MLP as a kernloom graph: (graph, placeholder ``x``, softmax output); ``batch``
    None leaves the batch dimension unknown."""
    import kernloom as kl

    g = kl.Graph()
    with g.as_default():
        xp = kl.placeholder(kl.float32, [batch, MLP_SIZES[0]], name="x")
        h = xp
        for i, (w, bias) in enumerate(zip(weights, biases, strict=True)):
            h = kl.ops.bias_add(kl.ops.mat_mul(h, kl.constant(w)), kl.constant(bias))
            if i < len(weights) - 1:
                h = kl.ops.relu(h)
        y = kl.ops.softmax(h)
    return g, xp, y


def _kernloom_mlp(x: Any, weights: list[Any], biases: list[Any], threads: int) -> Built:
    import kernloom as kl

    g, xp, y = kernloom_mlp_graph(weights, biases)
    config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads)
    call = _closed_at_exit(kl.Session(g, config)).make_callable(y, [xp])
    return (lambda: call(x)), {"version": f"kernloom {kl.__version__}", "optimizer": True}


def onnxruntime_mlp(weights: list[Any], biases: list[Any], threads: int) -> Any:
    """An ONNX Runtime session of the MLP as Gemm and Relu nodes (which it fuses) and a
    Softmax; ``threads`` intra-op threads, one inter-op thread, sequential execution."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, initializers, h = [], [], "x"
    for i, (w, bias) in enumerate(zip(weights, biases, strict=True)):
        initializers += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(bias, f"b{i}"),
        ]
        nodes.append(helper.make_node("Gemm", [h, f"w{i}", f"b{i}"], [f"gemm{i}"]))
        h = f"gemm{i}"
        if i < len(weights) - 1:
            nodes.append(helper.make_node("Relu", [h], [f"relu{i}"]))
            h = f"relu{i}"
    nodes.append(helper.make_node("Softmax", [h], ["y"], axis=1))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [MLP_BATCH, MLP_SIZES[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [MLP_BATCH, MLP_SIZES[-1]])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _onnxruntime_session(model, threads=threads)


def torch_mlp(weights: list[Any], biases: list[Any], threads: int) -> Callable[[Any], Any]:
    """torch eager: ``nn.Linear``/``ReLU``/``Softmax`` under ``inference_mode``, ``threads``
    threads; the function takes and returns numpy arrays."""
    import torch

    torch.set_num_threads(threads)
    layers: list[Any] = []
    for i, (w, bias) in enumerate(zip(weights, biases, strict=True)):
        linear = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w.T))
            linear.bias.copy_(torch.from_numpy(bias))
        layers.append(linear)
        if i < len(weights) - 1:
            layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Softmax(dim=1))
    model = torch.nn.Sequential(*layers).eval()

    def run(x: Any) -> Any:
        with torch.inference_mode():
            return model(torch.from_numpy(x)).numpy()

    return run


def _torch_mlp_built(x: Any, weights: list[Any], biases: list[Any], threads: int) -> Built:
    import torch

    run = torch_mlp(weights, biases, threads)
    return (lambda: run(x)), {"version": f"torch {torch.__version__}", "mode": "eager"}


def _tf_mlp(x: Any, weights: list[Any], biases: list[Any], threads: int) -> Built:
    tf = _tensorflow()
    g = tf.Graph()
    with g.as_default():
        xp = tf.compat.v1.placeholder(tf.float32, [MLP_BATCH, MLP_SIZES[0]], name="x")
        h = xp
        for i, (w, bias) in enumerate(zip(weights, biases, strict=True)):
            h = tf.nn.bias_add(tf.matmul(h, tf.constant(w)), tf.constant(bias))
            if i < len(weights) - 1:
                h = tf.nn.relu(h)
        y = tf.nn.softmax(h)
    return _tf_callable(g, y, xp, x, threads=threads)


# -- while_loop(i < n, i + 1) -------------------------------------------------------------


def while_loop(
    runtime: str, iterations: int, repeats: int
) -> tuple[Callable[[], float], dict[str, Any]]:
    """``i = 0; while i < n: i = i + 1`` with ``n`` fed; numpy direct is that loop in
    Python on numpy int32 scalars (``np.less``, ``np.add``)."""
    builders: dict[str, Callable[[], Built]] = {
        "numpy": lambda: (_numpy_loop(iterations), {"version": f"numpy {np.__version__}"}),
        "kernloom_on": lambda: _kernloom_loop(iterations),
        "tf": lambda: _tf_loop(iterations),
    }
    return _measured(runtime, builders[runtime](), np.int32(iterations), repeats, rtol=0, atol=0)


def _numpy_loop(iterations: int) -> Run:
    def run() -> Any:
        i = np.int32(0)
        n = np.int32(iterations)
        one = np.int32(1)
        while np.less(i, n):
            i = np.add(i, one)
        return i

    return run


def _kernloom_loop(iterations: int) -> Built:
    import kernloom as kl

    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        (out,) = kl.while_loop(lambda i: i < n, lambda i: i + 1, [0])
    sess = _closed_at_exit(kl.Session(g, kl.SessionConfig(inter_op_threads=1)))
    call = sess.make_callable(out, [n])
    feed = np.int32(iterations)
    return (lambda: call(feed)), {"version": f"kernloom {kl.__version__}"}


def _tf_loop(iterations: int) -> Built:
    tf = _tensorflow()
    g = tf.Graph()
    with g.as_default():
        n = tf.compat.v1.placeholder(tf.int32, [], name="n")
        out = tf.compat.v1.while_loop(lambda i: i < n, lambda i: i + 1, [tf.constant(0)])
    return _tf_callable(g, out, n, np.int32(iterations), threads=1)


# -- the runtimes' sessions ---------------------------------------------------------------


def _closed_at_exit(session: Any) -> Any:
    """``session``, closed when the child exits (its worker threads must not outlive it)."""
    atexit.register(session.close)
    return session


def _onnxruntime_session(model: Any, *, threads: int) -> Any:
    import onnxruntime  # type: ignore[import-untyped]

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _bind_onnxruntime(session: Any, x: Any) -> Run:
    return lambda: session.run(None, {"x": x})


def _onnxruntime_info() -> dict[str, Any]:
    import onnxruntime

    return {"version": f"onnxruntime {onnxruntime.__version__}"}


def _tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", TF_QUIET)
    import tensorflow as tf  # type: ignore[import-untyped]

    tf.compat.v1.disable_eager_execution()
    return tf


def _tf_callable(g: Any, fetch: Any, feed: Any, value: Any, *, threads: int) -> Built:
    """A TF1 ``Session`` on ``g`` (grappler's default passes; ``threads`` intra-op threads,
    one inter-op thread) and ``Session.make_callable`` for one feed and one fetch. The info
    counts the nodes the step really runs (its partition graph, after grappler)."""
    tf = _tensorflow()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads, inter_op_parallelism_threads=1
    )
    sess = _closed_at_exit(tf.compat.v1.Session(graph=g, config=config))
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    metadata = tf.compat.v1.RunMetadata()
    sess.run(fetch, {feed: value}, options=options, run_metadata=metadata)
    nodes = sum(len(partition.node) for partition in metadata.partition_graphs)
    call = sess.make_callable(fetch, [feed])
    return (lambda: call(value)), {
        "version": f"tensorflow {tf.__version__}",
        "nodes_after_grappler": nodes,
    }


def _numpy_blas() -> str:
    try:
        config: Any = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas.get('version', '')}".strip()
    except (TypeError, KeyError):  # numpy 1.x has no mode="dicts"
        return "unknown"
