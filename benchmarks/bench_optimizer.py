"""The graph optimizer's benchmarks (issue 20): each a ratio to a reference measured in
the same run (the machine is shared and noisy: compare ratios, not times).

    .venv/bin/python benchmarks/bench_optimizer.py           # chain and mlp, ~1 minute
    .venv/bin/python benchmarks/bench_optimizer.py chain     # one of them
    .venv/bin/python benchmarks/bench_optimizer.py gemm      # the GEMM libraries (not default)

- chain: 1000 ``Add(x, c)`` on float32[16], ``c`` a vector or a scalar constant, and 1000
  ``Add``/``Mul`` in turn (vector constants): the step's time per *original* node with the
  optimizer on (an Add chain folds to one Add; the mixed one becomes one fused node), and
  off, next to a plain numpy loop of the same ops. Also the optimizer's own time.
- mlp: batch 256, 784-1024-1024-10 with MatMul+BiasAdd+Relu, at 1 and 2 threads: kernloom
  with the optimizer on (``_FusedMatMul``) and off, numpy by hand, ONNX Runtime and torch
  eager (where installed), interleaved in one process per thread count.
- elementwise: a chain of 8 elementwise ops (tanh, mul, add, sigmoid, sub, square, maximum,
  relu) on float32 vectors of 4 Ki, 1 Mi and 8 Mi elements: one ``_FusedElementwise``
  (blocked over cache-sized pieces) against op by op.

Each measurement runs in a fresh child interpreter with the BLAS thread count fixed.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
N = 1000


def best_of(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


CHAINS = {
    "vector": "Add, vector c",
    "scalar": "Add, scalar c",
    "mixed": "Add/Mul in turn",
    "from_constant": "Sub from c (c - x)",
}
"""``chain_<kind>``: what the chain's nodes are. ``mixed`` alternates ``Add`` and ``Mul``
(vector constants): it folds to nothing, so the optimizer's elementwise fusion makes it
one ``_FusedElementwise`` of 1000 steps. ``from_constant`` is ``c - x`` at every link
(vector constants), which push-down folds to one ``Sub`` (x's sign flips at each)."""


def chain(kind: str) -> dict[str, float]:
    import numpy as np

    import kernloom as kl

    g = kl.Graph()
    scalar = kind == "scalar"
    ops: list[Callable[[Any, Any], Any]] = (
        [kl.ops.add, kl.ops.mul] if kind == "mixed" else [kl.ops.add]
    )
    ufuncs: list[Callable[[Any, Any], Any]] = [np.add, np.multiply] if kind == "mixed" else [np.add]
    if kind == "from_constant":
        ops, ufuncs = [lambda v, c: kl.ops.sub(c, v)], [lambda v, c: np.subtract(c, v)]
    # Added 0.001 i, or (every other node of ``mixed``) multiplied by 1 + 1e-6 i: finite.
    values = [1 + 1e-6 * i if i % len(ops) else 0.001 * i for i in range(N)]
    constants = [np.float32(v) if scalar else np.full(16, v, np.float32) for v in values]
    with g.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        y = x
        for i, c in enumerate(constants):
            y = ops[i % len(ops)](y, kl.constant(c))
    xv = np.ones(16, np.float32)

    def loop() -> Any:
        v = xv
        for i, c in enumerate(constants):
            v = ufuncs[i % len(ufuncs)](v, c)
        return v

    expected = loop()
    results: dict[str, float] = {}
    for label, on in (("on", True), ("off", False)):
        config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=on)
        with kl.Session(g, config) as sess:
            started = time.perf_counter()
            run = sess.make_callable(y, [x])
            results[f"compile_{label}"] = time.perf_counter() - started
            np.testing.assert_allclose(run(xv), expected, rtol=1e-4)

            def call(run: Callable[..., Any] = run) -> Any:
                return run(xv)

            results[label] = best_of(call, 200 if on else 30) / N

    results["numpy"] = best_of(loop, 30) / N
    return results


MLP_SIZES = (784, 1024, 1024, 10)
MLP_BATCH = 256


def mlp(threads: int) -> dict[str, float]:
    """The MLP on kernloom (optimizer on and off), numpy written by hand, ONNX Runtime (Gemm
    and Relu nodes, which it fuses) and torch eager (``nn.Linear``/``ReLU`` under
    ``inference_mode``), where installed: the same weights, ``threads`` threads each."""
    import numpy as np
    from suite_workloads import kernloom_mlp_graph, mlp_weights, numpy_mlp

    import kernloom as kl

    weights, biases, xv = mlp_weights()
    g, x, y = kernloom_mlp_graph(weights, biases)
    runs: dict[str, Callable[[], Any]] = {}
    sessions = []
    for label, on in (("on", True), ("off", False)):
        config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads, graph_optimizer=on)
        sess = kl.Session(g, config)
        sessions.append(sess)
        runs[label] = functools.partial(sess.make_callable(y, [x]), xv)

    runs["numpy"] = functools.partial(numpy_mlp, xv, weights, biases)
    expected = runs["numpy"]()
    ort = _ort_mlp(weights, biases, threads)
    if ort is not None:
        runs["ort"] = lambda: ort.run(None, {"x": xv})
    torch_run = _torch_mlp(weights, biases, threads)
    if torch_run is not None:
        runs["torch"] = lambda: torch_run(xv)
    for run in runs.values():
        np.testing.assert_allclose(np.asarray(_first(run())), expected, rtol=1e-3, atol=1e-5)
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(5):  # interleaved rounds, best of all
        for label, run in runs.items():
            best[label] = min(best[label], best_of(run, 4, warmup=1))
    for sess in sessions:
        sess.close()
    return best


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list | tuple) else value


def _ort_mlp(weights: list[Any], biases: list[Any], threads: int) -> Any:
    """The suite's ONNX Runtime MLP (``suite_workloads.onnxruntime_mlp``), or None."""
    from suite_workloads import onnxruntime_mlp

    try:
        return onnxruntime_mlp(weights, biases, threads)
    except ImportError:  # onnx or onnxruntime not installed
        return None


def _torch_mlp(weights: list[Any], biases: list[Any], threads: int) -> Any:
    """The suite's torch eager MLP (``suite_workloads.torch_mlp``), or None."""
    from suite_workloads import torch_mlp

    try:
        return torch_mlp(weights, biases, threads)
    except ImportError:
        return None


def elementwise() -> dict[str, float]:
    import numpy as np

    import kernloom as kl

    results: dict[str, float] = {}
    for size in (4096, 1 << 20, 1 << 23):
        g = kl.Graph()
        with g.as_default():
            x = kl.placeholder(kl.float32, [size], name="x")
            v = kl.ops.mul(kl.ops.tanh(x), kl.constant(np.float32(1.5)))
            v = kl.ops.sigmoid(kl.ops.add(v, x))
            v = kl.ops.square(kl.ops.sub(v, kl.constant(np.float32(0.25))))
            y = kl.ops.relu(kl.ops.maximum(v, x))
        xv = np.random.default_rng(0).standard_normal(size).astype(np.float32)
        for label, on in (("on", True), ("off", False)):
            config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=1, graph_optimizer=on)
            with kl.Session(g, config) as sess:
                run = sess.make_callable(y, [x])

                def call(run: Callable[..., Any] = run, xv: np.ndarray[Any, Any] = xv) -> Any:
                    return run(xv)

                results[f"{label}_{size}"] = best_of(call, 15)
    return results


GEMM_SHAPES = ((256, 784, 1024), (256, 1024, 1024), (256, 1024, 10))


def gemm(threads: int) -> dict[str, float]:
    """The MLP's three products (M, K, N) with their bias, best of 15 each, in every GEMM
    library the CPU kernels can take: numpy's (OpenBLAS), MKL's ``addmm`` and packed
    ``_mkl_linear``, oneDNN's ``_linear_pointwise`` on a reordered weight, and ONNX
    Runtime's Gemm (MLAS) as the reference (``packed_matmul`` picks the library by CPU)."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    results: dict[str, float] = {}
    for m, k, n in GEMM_SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        at, bt = torch.from_numpy(a), torch.from_numpy(b)
        wt = torch.from_numpy(w.T.copy())  # [N, K]
        mkl = torch.ops.mkl._mkl_reorder_linear_weight(wt, m)
        onednn = torch.ops.mkldnn._reorder_linear_weight(wt, m)
        ort = _ort_gemm(w, b, m, threads)
        runs: dict[str, Callable[[], Any]] = {
            "numpy": lambda: np.add(a @ w, b),  # noqa: B023 (called in this iteration)
            "mkl_addmm": lambda: torch.addmm(bt, at, wt.T),  # noqa: B023
            "mkl_packed": lambda: torch.ops.mkl._mkl_linear(at, mkl, wt, bt, m),  # noqa: B023
            "onednn": lambda: torch.ops.mkldnn._linear_pointwise(at, onednn, bt, "none", [], ""),  # noqa: B023
        }
        if ort is not None:
            runs["ort"] = lambda: ort.run(None, {"x": a})  # noqa: B023
        for name, fn in runs.items():
            results[f"{m}x{k}x{n} {name}"] = best_of(fn, 15)
    return results


def _ort_gemm(w: Any, b: Any, rows: int, threads: int) -> Any:
    try:
        import onnxruntime  # type: ignore[import-untyped]
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"])],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, w.shape[1]])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def child(kind: str) -> dict[str, float]:
    if kind.startswith("gemm"):
        return gemm(int(kind.removeprefix("gemm")))
    if kind.startswith("mlp"):
        return mlp(int(kind.removeprefix("mlp")))
    if kind == "elementwise":
        return elementwise()
    return chain(kind.removeprefix("chain_"))


def measure(kind: str, threads: int = 1) -> dict[str, float]:
    env = dict(os.environ, **dict.fromkeys(BLAS_VARS, str(threads)))
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        print(json.dumps(child(argv[1])))
        return
    wanted = argv or ["chain", "mlp", "elementwise"]
    if "chain" in wanted:
        for kind, what in CHAINS.items():
            r = measure(f"chain_{kind}")
            print(
                f"chain of {N} {what}: optimizer on {r['on'] * 1e6:.4f} us/original node "
                f"(compile {r['compile_on'] * 1e3:.0f} ms), off {r['off'] * 1e6:.3f} us/node "
                f"(compile {r['compile_off'] * 1e3:.0f} ms), numpy loop "
                f"{r['numpy'] * 1e6:.3f} us/node; off/numpy {r['off'] / r['numpy']:.2f}x"
            )
    if "mlp" in wanted:
        print(
            f"MLP {'-'.join(map(str, MLP_SIZES))}, batch {MLP_BATCH}, ms (best of 20, "
            "interleaved; ratio to ONNX Runtime in the same run):"
        )
        for threads in (1, 2):
            r = measure(f"mlp{threads}", threads)
            ort = r.get("ort")
            cells = ", ".join(
                f"{name} {value * 1e3:.2f}" + (f" ({value / ort:.2f}x)" if ort else "")
                for name, value in r.items()
            )
            print(f"  {threads} thread(s): {cells}")

    if "gemm" in wanted:
        print("The MLP's products with bias (M x K x N), ms, best of 15; ratio to ONNX Runtime:")
        for threads in (1, 2):
            r = measure(f"gemm{threads}", threads)
            for m, k, n in GEMM_SHAPES:
                shape = f"{m}x{k}x{n}"
                ort = r.get(f"{shape} ort")
                cells = ", ".join(
                    f"{name.split()[1]} {value * 1e3:.3f}"
                    + (f" ({value / ort:.2f}x)" if ort else "")
                    for name, value in r.items()
                    if name.startswith(shape + " ")
                )
                print(f"  {threads} thread(s) {shape}: {cells}")

    if "elementwise" in wanted:
        r = measure("elementwise")
        for size in (4096, 1 << 20, 1 << 23):
            on, off = r[f"on_{size}"], r[f"off_{size}"]
            print(
                f"8 elementwise ops on float32[{size}]: fused {on * 1e3:.3f} ms, op by op "
                f"{off * 1e3:.3f} ms, fused/op-by-op {on / off:.2f}x"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
