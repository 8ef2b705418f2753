"""The torch plugin's ``torch_dense_chain`` pass on and off, in one process: two sessions
of the same MLP (MatMul + BiasAdd + Relu layers and a softmax), one with the pass disabled,
alternating, ``--rounds`` rounds of best-of-5 each; prints each median and the median of
the per-round ratio chain / nodes.

    .venv/bin/python benchmarks/bench_dense_chain.py --threads 1 --batch 64 --sizes 128-256-256-10

Run with ``OMP_NUM_THREADS`` equal to ``--threads`` (torch reads it at import).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

import numpy as np

import kernloom as kl


def mlp(sizes: list[int]) -> tuple[kl.Graph, Any, Any]:
    rng = np.random.default_rng(0)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, sizes[0]], name="x")
        h = x
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            w = (rng.standard_normal((a, b)) * 0.05).astype(np.float32)
            bias = rng.standard_normal(b).astype(np.float32)
            h = kl.ops.bias_add(kl.ops.mat_mul(h, kl.constant(w)), kl.constant(bias))
            if i < len(sizes) - 2:
                h = kl.ops.relu(h)
        y = kl.ops.softmax(h)
    return g, x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--sizes", default="784-1024-1024-10")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split("-")]
    g, x, y = mlp(sizes)
    xv = np.random.default_rng(1).standard_normal((args.batch, sizes[0])).astype(np.float32)
    runs = {}
    for name, disabled in (("chain", ()), ("nodes", ("torch_dense_chain",))):
        config = kl.SessionConfig(
            inter_op_threads=1, intra_op_threads=args.threads, disabled_passes=disabled
        )
        runs[name] = kl.Session(g, config).make_callable(y, [x])
    np.testing.assert_allclose(runs["chain"](xv), runs["nodes"](xv), rtol=1e-5, atol=1e-6)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            run(xv)
            best = float("inf")
            for _ in range(5):
                started = time.perf_counter()
                run(xv)
                best = min(best, time.perf_counter() - started)
            times[name].append(best)
    ratio = statistics.median(a / b for a, b in zip(times["chain"], times["nodes"], strict=True))
    medians = " ".join(f"{k} {statistics.median(v) * 1e6:.1f} µs" for k, v in times.items())
    where = f"{args.threads} thread(s), batch {args.batch}, {args.sizes}"
    print(f"{where}: {medians}; chain/nodes {ratio:.3f}")


if __name__ == "__main__":
    main()
