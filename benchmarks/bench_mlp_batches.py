"""Issue 20's MLP (784-1024-1024-10, weights from ``suite_workloads``) at small batches,
kernloom against ONNX Runtime, each alone in a child process of its own (twice each,
alternating), per thread count and batch: the median over 30 rounds of the best of 20
calls, in µs.

    .venv/bin/python benchmarks/bench_mlp_batches.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

BATCHES = (1, 16, 64)


def child(runtime: str, threads: int, batch: int) -> float:
    import numpy as np
    import suite_workloads as sw

    weights, biases, _ = sw.mlp_weights()
    x = np.random.default_rng(1).standard_normal((batch, sw.MLP_SIZES[0])).astype(np.float32)
    run: Any
    if runtime == "onnxruntime":
        sw.MLP_BATCH = "N"  # type: ignore[assignment]  # a symbolic batch dimension
        session = sw.onnxruntime_mlp(weights, biases, threads)
        run = lambda: session.run(None, {"x": x})  # noqa: E731
    else:
        import kernloom as kl

        g, xp, y = sw.kernloom_mlp_graph(weights, biases, batch=None)
        config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads)
        call = kl.Session(g, config).make_callable(y, [xp])
        run = lambda: call(x)  # noqa: E731
    for _ in range(50):
        run()
    rounds = []
    for _ in range(30):
        best = float("inf")
        for _ in range(20):
            started = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - started)
        rounds.append(best)
    return statistics.median(rounds)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    here = os.path.dirname(os.path.abspath(__file__))
    print("| threads | batch | kernloom µs | ONNX Runtime µs |\n| ---: | ---: | --- | --- |")
    for threads in (1, 2):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
        env["MKL_NUM_THREADS"] = str(threads)
        env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
        for batch in BATCHES:
            got: dict[str, list[str]] = {"kernloom": [], "onnxruntime": []}
            for runtime in ("onnxruntime", "kernloom") * 2:
                argv = [sys.executable, __file__, "--child", runtime, str(threads), str(batch)]
                out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
                seconds = json.loads(out.stdout.strip().splitlines()[-1])
                got[runtime].append(f"{seconds * 1e6:.1f}")
            kl_us, ort_us = (" / ".join(got[k]) for k in ("kernloom", "onnxruntime"))
            print(f"| {threads} | {batch} | {kl_us} | {ort_us} |")


if __name__ == "__main__":
    main()
