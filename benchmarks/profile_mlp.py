"""Where a kernloom run of issue 20's MLP spends its time: inside the GEMM library's calls,
in the in-place activations, in the Softmax, and the rest (the executor and the kernels'
Python around them), timed with ``perf_counter`` around each, median of 200 runs in one
process per thread count and form (each in a fresh child interpreter with BLAS threads
fixed): ``chain``, the layers and the softmax as one ``_TorchDenseChain`` node (the torch
plugin's ``torch_dense_chain`` pass, the default), and ``nodes``, that pass disabled.

    .venv/bin/python benchmarks/profile_mlp.py

The wrappers add a few µs to "rest"; the GEMM share is what matters (``OPTIMIZER.md``).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench_optimizer import BLAS_VARS  # the script's own folder

RUNS = 200


def profile(threads: int, chain: bool) -> dict[str, float | str]:
    from suite_workloads import kernloom_mlp_graph, mlp_weights

    import kernloom as kl
    from kernloom_gpu_torch.kernels import dense_chain, fused, math, packed_matmul

    weights, biases, xv = mlp_weights()
    g, x, y = kernloom_mlp_graph(weights, biases)
    config = kl.SessionConfig(
        inter_op_threads=1,
        intra_op_threads=threads,
        disabled_passes=() if chain else ("torch_dense_chain",),
    )
    run = kl.Session(g, config).make_callable(y, [x])
    spent = {"gemm": 0.0, "activation": 0.0, "softmax": 0.0}

    def timed(part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - started

        return wrapper

    onednn = packed_matmul.GEMM_LIBRARY == packed_matmul.ONEDNN
    gemm = "_linear_pointwise" if onednn else "_mkl_linear"
    setattr(packed_matmul, gemm, timed("gemm", getattr(packed_matmul, gemm)))
    # The chain's kernel and the separate nodes' kernels call these through their modules.
    # (dense_chain imports these two without re-exporting them.)
    dense_chain.apply_activation = timed("activation", dense_chain.apply_activation)  # type: ignore[attr-defined]
    fused.apply_activation = timed("activation", fused.apply_activation)
    dense_chain.along_last_axis = timed("softmax", dense_chain.along_last_axis)  # type: ignore[attr-defined]
    math.along_last_axis = timed("softmax", math.along_last_axis)
    for _ in range(20):
        run(xv)
    rows: dict[str, list[float]] = {"total": [], **{k: [] for k in spent}}
    for _ in range(RUNS):
        for k in spent:
            spent[k] = 0.0
        started = time.perf_counter()
        run(xv)
        rows["total"].append(time.perf_counter() - started)
        for k, v in spent.items():
            rows[k].append(v)
    result = {k: statistics.median(v) for k, v in rows.items()}
    result["rest"] = result["total"] - sum(result[k] for k in spent)
    return {**result, "library": packed_matmul.GEMM_LIBRARY}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        print(json.dumps(profile(int(argv[1]), argv[2] == "chain")))
        return
    for threads, form in itertools.product((1, 2), ("chain", "nodes")):
        env = dict(os.environ, **dict.fromkeys(BLAS_VARS, str(threads)))
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(threads), form],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        parts = ", ".join(
            f"{k} {r[k] * 1e6:.0f} µs" for k in ("gemm", "activation", "softmax", "rest")
        )
        print(
            f"{threads} thread(s), {r['library']}, {form}: total {r['total'] * 1e3:.2f} ms; {parts}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
