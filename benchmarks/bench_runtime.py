"""The runtime benchmarks of the executor-and-session issue, each a ratio to a reference
measured in the same run (this machine is shared and noisy: compare ratios, not times).

    .venv/bin/python benchmarks/bench_runtime.py            # all four, ~1.5 minutes
    .venv/bin/python benchmarks/bench_runtime.py dispatch   # one of them

BLAS thread counts are fixed per measurement in a child process (OpenBLAS reads its
thread count when numpy is imported), so every number comes from a fresh interpreter.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROUNDS = 101
BEST_OF = 6
"""MLP rounds; each is the best of BEST_OF runs of ours and of numpy's."""
BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def best_of(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def child(kind: str, threads: int) -> dict[str, float]:
    import numpy as np

    import kernloom as kl

    if kind == "dispatch":
        n = 1000
        g = kl.Graph()
        with g.as_default():
            x = kl.placeholder(kl.float32, [16], name="x")
            y = x
            for _ in range(n):
                y = kl.ops.add(y, x)
        xv = np.ones(16, np.float32)
        # The executor's per-node cost: the graph as built (the optimizer would merge it).
        config = kl.SessionConfig(inter_op_threads=1, graph_optimizer=False)
        with kl.Session(g, config) as sess:
            ours = best_of(lambda: sess.run(y, {x: xv}), 30)

        def loop() -> None:
            v = xv
            for _ in range(n):
                v = np.add(v, xv)

        numpy_s = best_of(loop, 30)
        # The general executor (pending counts, ready stack, a context per kernel): two
        # independent chains of n/2 with two inter-op threads, which the straight line
        # cannot take.
        g2 = kl.Graph()
        with g2.as_default():
            x2 = kl.placeholder(kl.float32, [16], name="x")
            ends = []
            for _ in range(2):
                y2 = x2
                for _ in range(n // 2):
                    y2 = kl.ops.add(y2, x2)
                ends.append(y2)
        with kl.Session(g2, kl.SessionConfig(inter_op_threads=2, graph_optimizer=False)) as sess:
            general = best_of(lambda: sess.run(ends, {x2: xv}), 30)
        return {
            "us_per_node": ours / n * 1e6,
            "numpy_us_per_node": numpy_s / n * 1e6,
            "general_us_per_node": general / n * 1e6,
        }

    if kind == "mlp":
        rng = np.random.default_rng(0)
        sizes = (784, 1024, 1024, 10)
        ws = [
            (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
            for a, b in itertools.pairwise(sizes)
        ]
        xv = rng.standard_normal((256, 784)).astype(np.float32)
        g = kl.Graph()
        with g.as_default():
            x = kl.placeholder(kl.float32, [None, 784], name="x")
            h = x
            for i, w in enumerate(ws):
                h = kl.ops.mat_mul(h, kl.constant(w))
                if i < len(ws) - 1:
                    h = kl.ops.relu(h)
            probs = kl.ops.softmax(h)

        from kernloom.demo import numpy_mlp  # plain numpy: the reference

        def direct() -> Any:
            return numpy_mlp(xv, ws)

        config = kl.SessionConfig(inter_op_threads=threads, intra_op_threads=threads)
        with kl.Session(g, config) as sess:
            np.testing.assert_allclose(sess.run(probs, {x: xv}), direct(), rtol=1e-4, atol=1e-6)
            # Interleave the two in short rounds, alternating which goes first, so that
            # drift and bursts on a shared machine hit both alike; judge by the median of
            # the rounds' ratios and show the middle half of them.
            ours_rounds: list[float] = []
            numpy_rounds: list[float] = []

            def run() -> Any:
                return sess.run(probs, {x: xv})

            for round_ in range(ROUNDS):
                if round_ % 2:
                    numpy_rounds.append(best_of(direct, BEST_OF, 1))
                    ours_rounds.append(best_of(run, BEST_OF, 1))
                else:
                    ours_rounds.append(best_of(run, BEST_OF, 1))
                    numpy_rounds.append(best_of(direct, BEST_OF, 1))
        ratios = sorted(a / b for a, b in zip(ours_rounds, numpy_rounds, strict=True))
        return {
            "ms": min(ours_rounds) * 1e3,
            "numpy_ms": min(numpy_rounds) * 1e3,
            "ratio": ratios[len(ratios) // 2],
            "ratio_q1": ratios[len(ratios) // 4],
            "ratio_q3": ratios[3 * len(ratios) // 4],
        }

    if kind == "interop":
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((768, 768)) / np.sqrt(768)).astype(np.float32)
        g = kl.Graph()
        with g.as_default():
            a = kl.constant(w)
            chains = []
            for _ in range(2):
                y = a
                for _ in range(4):
                    y = kl.ops.tanh(kl.ops.mat_mul(y, a))
                chains.append(y)
            out = kl.ops.add(*chains)
        times = {}
        for n in (1, 2):
            # The graph is all constants: the optimizer would fold it to one value.
            config = kl.SessionConfig(inter_op_threads=n, intra_op_threads=1, graph_optimizer=False)
            with kl.Session(g, config) as sess:
                times[n] = best_of(lambda: sess.run(out), 15)
        return {"one_thread_ms": times[1] * 1e3, "two_threads_ms": times[2] * 1e3}

    if kind == "memory":
        count = 128 * 2**20 // 4
        g = kl.Graph()
        with g.as_default():
            x = kl.placeholder(kl.float32, [count], name="x")
            y = x
            for op in (
                kl.ops.neg,
                kl.ops.exp,
                kl.ops.tanh,
                kl.ops.relu,
                kl.ops.sigmoid,
                kl.ops.square,
                kl.ops.sqrt,
                kl.ops.neg,
            ):
                y = op(y)
        xv = np.random.default_rng(0).standard_normal(count).astype(np.float32)
        md = kl.RunMetadata()
        with kl.Session(g, kl.SessionConfig(inter_op_threads=1)) as sess:
            sess.run(y, {x: xv}, run_metadata=md)
        peak = max(s.peak_bytes_in_use for s in md.memory.values())
        return {"peak_mib": peak / 2**20, "tensor_mib": xv.nbytes / 2**20}
    raise SystemExit(f"unknown benchmark {kind!r}")


def measure(kind: str, threads: int) -> dict[str, float]:
    env = dict(os.environ)
    env.update({var: str(threads) for var in BLAS_VARS})
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(threads)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmark {kind} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(selected: list[str]) -> None:
    kinds = selected or ["dispatch", "mlp", "interop", "memory"]
    print(f"kernloom runtime benchmarks (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    if "dispatch" in kinds:
        r = measure("dispatch", 1)
        print(
            f"dispatch  1000-Add chain, [16] float32, 1 inter-op thread: "
            f"{r['us_per_node']:.2f} us/node; numpy loop {r['numpy_us_per_node']:.2f} us/node "
            f"-> {r['us_per_node'] / r['numpy_us_per_node']:.2f}x numpy (target: <= 1.0 us/node)"
        )
        print(
            f"          general executor (2 chains of 500, 2 inter-op threads): "
            f"{r['general_us_per_node']:.2f} us/node"
        )
    if "mlp" in kinds:
        for threads in (1, 2):
            r = measure("mlp", threads)
            print(
                f"mlp       batch 256, 784-1024-1024-10, {threads} thread(s): {r['ms']:.2f} ms; "
                f"numpy {r['numpy_ms']:.2f} ms -> {r['ratio']:.3f}x numpy (median of {ROUNDS} "
                f"interleaved rounds, middle half {r['ratio_q1']:.3f}-{r['ratio_q3']:.3f}; "
                f"target: <= 1.03x)"
            )
    if "interop" in kinds:
        r = measure("interop", 1)
        print(
            f"interop   2 chains of 4 768x768 matmul+tanh, BLAS 1 thread: 1 thread "
            f"{r['one_thread_ms']:.1f} ms, 2 threads {r['two_threads_ms']:.1f} ms -> "
            f"{r['one_thread_ms'] / r['two_threads_ms']:.2f}x speed-up (target: >= 1.85x)"
        )
    if "memory" in kinds:
        r = measure("memory", 1)
        print(
            f"memory    8 elementwise ops on a {r['tensor_mib']:.0f} MiB tensor: allocator peak "
            f"{r['peak_mib']:.0f} MiB beyond the feed -> {r['peak_mib'] / r['tensor_mib']:.2f}x "
            f"the tensor (target: <= 1.1x)"
        )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
    else:
        main(sys.argv[1:])
