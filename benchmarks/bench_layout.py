"""What keeping the NHWC memory of NCHW images through Concat and Transpose saves on the
ONNX models (``kernloom_cpu_numpy.kernels.array.KEEP_LAYOUT``): one kernloom session per
model, rounds alternating the layout kept and C order (every other round in reverse),
best of 5 runs each; prints the medians, the median per-round ratio and the rounds the
kept layout was faster.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_layout.py \
        --models inception_v1 densenet121 resnet50

Outputs are checked against the first run's in every round.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from bench_onnx import _load  # the script's own folder

import kernloom as kl
import kernloom.onnx as klonnx
from kernloom_cpu_numpy.kernels import array


def compare(name: str, threads: int, rounds: int) -> str:
    data, input_name, x = _load(name, 1)
    config = kl.SessionConfig(inter_op_threads=threads, intra_op_threads=threads)
    session = klonnx.InferenceSession(data, config=config)
    feed = {input_name: x}
    (expected,) = session.run(None, feed)
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(rounds):
        for keep in (True, False) if round_ % 2 == 0 else (False, True):
            array.KEEP_LAYOUT = keep
            (out,) = session.run(None, feed)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
            best = float("inf")
            for _ in range(5):
                started = time.perf_counter()
                session.run(None, feed)
                best = min(best, time.perf_counter() - started)
            times[keep].append(best)
    array.KEEP_LAYOUT = True
    kept, c_order = (statistics.median(times[k]) * 1e3 for k in (True, False))
    ratios = [a / b for a, b in zip(times[True], times[False], strict=True)]
    faster = sum(r < 1 for r in ratios)
    return (
        f"{name}, batch 1, {threads} thread(s): layout kept {kept:.1f} ms, C order "
        f"{c_order:.1f} ms; kept / C order {statistics.median(ratios):.3f} "
        f"(faster {faster}/{rounds})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["inception_v1", "densenet121"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    for name in args.models:
        print(compare(name, args.threads, args.rounds))


if __name__ == "__main__":
    main()
