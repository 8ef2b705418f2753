"""A classifier's last layer and softmax, direct against on the transpose, as the dense
chain runs them (``dense_chain.TRANSPOSED_HEAD_ROWS``): after a 1024-wide (or 256-wide)
ReLU layer has just run -- the caches as a real step leaves them -- the time of

- ``direct``: oneDNN's product on the packed [K, N] weight with the bias, then torch's
  softmax along the short last axis into the output;
- ``transposed``: oneDNN's product ``W^T h^T`` ([N, M]), the bias down its columns, the
  softmax along dim 0, one transposing copy into the output.

Median µs of ``--rounds`` alternating rounds, one process, oneDNN on ``--threads``:

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_classifier_head.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from kernloom_gpu_torch.kernels.packed_matmul import HAS_ONEDNN

Head = Callable[[torch.Tensor], None]


def heads(rows: int, k: int, n: int, rng: np.random.Generator) -> tuple[Head, Head]:
    linear = torch.ops.mkldnn._linear_pointwise
    weight = torch.from_numpy((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    bias = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, max(rows, 64))
    column = bias.reshape(-1, 1).contiguous()
    out = torch.empty(rows, n)

    def direct(h: torch.Tensor) -> None:
        torch.softmax(linear(h, packed, bias, "none", [], ""), 1, out=out)

    def transposed(h: torch.Tensor) -> None:
        logits = linear(weight, h, None, "none", [], "")
        logits += column
        out.copy_(torch.softmax(logits, 0).t())

    direct(torch.ones(rows, k))
    want = out.clone()
    transposed(torch.ones(rows, k))
    torch.testing.assert_close(out, want)
    return direct, transposed


def measure(rows: int, k: int, n: int, rounds: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    linear = torch.ops.mkldnn._linear_pointwise
    x = torch.from_numpy(rng.standard_normal((rows, k)).astype(np.float32))
    before = torch.from_numpy((rng.standard_normal((k, k)) * 0.05).astype(np.float32))
    before = torch.ops.mkldnn._reorder_linear_weight(before, max(rows, 64))
    zeros = torch.zeros(k)
    direct, transposed = heads(rows, k, n, rng)
    times: dict[str, list[float]] = {"direct": [], "transposed": []}
    for i in range(rounds):
        order = [("direct", direct), ("transposed", transposed)]
        for name, head in order if i % 2 else order[::-1]:
            h = torch.relu_(linear(x, before, zeros, "none", [], ""))
            started = time.perf_counter()
            head(h)
            times[name].append(time.perf_counter() - started)
    return statistics.median(times["direct"]), statistics.median(times["transposed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=150)
    args = parser.parse_args()
    if not HAS_ONEDNN:
        raise SystemExit("this torch has no oneDNN: nothing to measure")
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s), µs, median of {args.rounds}: direct / transposed")
    for k in (256, 1024):
        for rows in (16, 64, 256, 1024):
            for n in (2, 10):
                direct, transposed = measure(rows, k, n, args.rounds)
                print(
                    f"  {rows:5d} x {k:4d} x {n:2d}: {direct * 1e6:7.1f} / {transposed * 1e6:7.1f}"
                    f"  ({transposed / direct:.2f}x)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
