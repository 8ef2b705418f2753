"""The torch plugin's ``torch_dense_chain`` pass on and off, in one process: two sessions
of the same MLP (MatMul + BiasAdd + Relu layers and a softmax), one with the pass disabled,
alternating (every other round in reverse order), ``--rounds`` rounds of best-of-5 each;
prints each median and the median of the per-round ratio chain / nodes. ``--replay``:
instead, one session with the chain, its steps replaying the last run's calls
(``dense_chain.REPLAY``) or deciding again, and ONNX Runtime's session of the same model
(where installed) in the same rounds.

    .venv/bin/python benchmarks/bench_dense_chain.py --threads 1 --batch 64 --sizes 128-256-256-10
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_dense_chain.py --threads 2 --replay

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
from kernloom_gpu_torch.kernels import dense_chain


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
    parser.add_argument("--replay", action="store_true", help="replaying against deciding")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split("-")]
    g, x, y = mlp(sizes)
    xv = np.random.default_rng(1).standard_normal((args.batch, sizes[0])).astype(np.float32)
    runs = _replay_runs(g, x, y, args.threads, sizes) if args.replay else _pass_runs(g, x, y, args)
    first, second = list(runs)[:2]
    np.testing.assert_allclose(runs[first](xv), runs[second](xv), rtol=1e-5, atol=1e-6)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(args.rounds):  # each other round in reverse: no one always goes first
        order = list(runs.items())
        for name, run in order if round_ % 2 == 0 else order[::-1]:
            dense_chain.REPLAY = name != "decide"
            run(xv)
            best = float("inf")
            for _ in range(5):
                started = time.perf_counter()
                run(xv)
                best = min(best, time.perf_counter() - started)
            times[name].append(best)
    medians = " ".join(f"{k} {statistics.median(v) * 1e6:.1f} µs" for k, v in times.items())
    ratios = []
    for other in list(runs)[1:]:
        per_round = [a / b for a, b in zip(times[first], times[other], strict=True)]
        faster = sum(r < 1 for r in per_round)
        ratios.append(
            f"{first}/{other} {statistics.median(per_round):.3f} (faster {faster}/{args.rounds})"
        )
    where = f"{args.threads} thread(s), batch {args.batch}, {args.sizes}"
    print(f"{where}: {medians}; {'; '.join(ratios)}")


def _pass_runs(g: kl.Graph, x: Any, y: Any, args: argparse.Namespace) -> dict[str, Any]:
    runs = {}
    for name, disabled in (("chain", ()), ("nodes", ("torch_dense_chain",))):
        config = kl.SessionConfig(
            inter_op_threads=1, intra_op_threads=args.threads, disabled_passes=disabled
        )
        runs[name] = kl.Session(g, config).make_callable(y, [x])
    return runs


def _replay_runs(g: kl.Graph, x: Any, y: Any, threads: int, sizes: list[int]) -> dict[str, Any]:
    """``replay`` and ``decide`` (one session: the round sets ``REPLAY``), and
    ``onnxruntime`` where it is installed."""
    config = kl.SessionConfig(inter_op_threads=1, intra_op_threads=threads)
    call = kl.Session(g, config).make_callable(y, [x])
    runs: dict[str, Any] = {"replay": call, "decide": call}
    try:
        ort = _onnxruntime(g, threads, sizes)
    except ImportError:
        return runs
    runs["onnxruntime"] = lambda xv: ort.run(None, {"x": xv})[0]
    return runs


def _onnxruntime(g: kl.Graph, threads: int, sizes: list[int]) -> Any:
    """ONNX Runtime's session of the same layers (the graph's constants, as Gemm + Relu
    and a Softmax: ``suite_workloads.onnxruntime_mlp``)."""
    import suite_workloads  # the script's own folder

    constants = [n.attrs["value"] for n in g.nodes if n.op == "Const"]
    weights, biases = constants[0::2], constants[1::2]
    suite_workloads.MLP_SIZES = tuple(sizes)
    suite_workloads.MLP_BATCH = "N"  # type: ignore[assignment]  # any batch
    return suite_workloads.onnxruntime_mlp(weights, biases, threads)


if __name__ == "__main__":
    main()
