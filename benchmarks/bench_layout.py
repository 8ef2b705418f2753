"""One CPU kernel choice on and off on the ONNX models, in one process, rounds alternating
(every other round in reverse), best of 5 runs each; prints the medians, the median
per-round ratio and the rounds the choice was faster. ``--change``:

- ``layout`` (the default): Concat and Transpose keep the NHWC memory of NCHW images, or
  write C order (``KEEP_LAYOUT`` of ``kernloom_cpu_numpy.kernels.array`` and of the torch
  plugin's ``CpuConcat``, read on every call: one session);
- ``torch-concat``: large float concatenations on the CPU in ``torch.cat`` on the intra-op
  threads, or numpy's (``kernloom_gpu_torch.kernels.array.SMALL_CONCAT``, read on every
  call: one session);
- ``torch-transpose``: large float transposes on the CPU copied by torch on the intra-op
  threads, or by numpy (``kernloom_gpu_torch.kernels.array.SMALL_TRANSPOSE``, read on
  every call: one session);
- ``conv-plan``: oneDNN convolutions make their last call again for the same input layout
  and constant filter, or decide every call anew (``kernloom_gpu_torch.kernels.onednn.
  KEEP_PLAN``, read on every call: one session).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_layout.py \
        --models inception_v1 densenet121 resnet50
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_layout.py --change conv-plan \
        --models densenet121

Outputs are checked against the first run's in every round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from bench_onnx import _load  # the script's own folder

import kernloom as kl
import kernloom.onnx as klonnx
from kernloom_cpu_numpy.kernels import array
from kernloom_gpu_torch.kernels import array as torch_array
from kernloom_gpu_torch.kernels import onednn

TORCH_CONCAT = torch_array.SMALL_CONCAT
TORCH_TRANSPOSE = torch_array.SMALL_TRANSPOSE


def compare(name: str, threads: int, rounds: int, change: str) -> str:
    data, input_name, x = _load(name, 1)
    config = kl.SessionConfig(inter_op_threads=threads, intra_op_threads=threads)
    session = klonnx.InferenceSession(data, config=config)
    sessions = {True: session, False: session}
    feed = {input_name: x}
    (expected,) = session.run(None, feed)
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(rounds):
        for keep in (True, False) if round_ % 2 == 0 else (False, True):
            array.KEEP_LAYOUT = torch_array.KEEP_LAYOUT = keep or change != "layout"
            torch_array.SMALL_CONCAT = (
                TORCH_CONCAT if keep or change != "torch-concat" else sys.maxsize
            )
            torch_array.SMALL_TRANSPOSE = (
                TORCH_TRANSPOSE if keep or change != "torch-transpose" else sys.maxsize
            )
            onednn.KEEP_PLAN = keep or change != "conv-plan"
            session = sessions[keep]
            (out,) = session.run(None, feed)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
            best = float("inf")
            for _ in range(5):
                started = time.perf_counter()
                session.run(None, feed)
                best = min(best, time.perf_counter() - started)
            times[keep].append(best)
    array.KEEP_LAYOUT = torch_array.KEEP_LAYOUT = True
    torch_array.SMALL_CONCAT = TORCH_CONCAT
    torch_array.SMALL_TRANSPOSE = TORCH_TRANSPOSE
    onednn.KEEP_PLAN = True
    on, off = (statistics.median(times[k]) * 1e3 for k in (True, False))
    ratios = [a / b for a, b in zip(times[True], times[False], strict=True)]
    faster = sum(r < 1 for r in ratios)
    return (
        f"{name}, batch 1, {threads} thread(s), {change}: on {on:.1f} ms, off "
        f"{off:.1f} ms; on / off {statistics.median(ratios):.3f} (faster {faster}/{rounds})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["inception_v1", "densenet121"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--change",
        choices=["layout", "torch-concat", "torch-transpose", "conv-plan"],
        default="layout",
    )
    args = parser.parse_args()
    for name in args.models:
        print(compare(name, args.threads, args.rounds, args.change))


if __name__ == "__main__":
    main()
