"""What flushing subnormals costs a step: ``Session.run`` of one small Add with the CPU
device's flushing on (the default) and off (``SessionConfig(flush_denormals=False)``).

The flag is set and restored once per step and thread (two foreign calls), never per
node, so the difference is a constant per run; this measures it on the smallest step
there is, where it shows most. Rounds alternate between the two sessions so that the
machine's noise falls on both alike; the result is the median over rounds of the best
of each round.

Command: ``.venv/bin/python benchmarks/bench_denormals.py [rounds]``
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import kernloom as kl

RUNS_PER_ROUND = 2000


def _best_per_run(session: kl.Session, fetch: kl.Tensor, feeds: dict[kl.Tensor, object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(RUNS_PER_ROUND):
            session.run(fetch, feeds)
        best = min(best, (time.perf_counter() - started) / RUNS_PER_ROUND)
    return best


def main(rounds: int) -> None:
    graph = kl.Graph()
    with graph.as_default():
        x = kl.placeholder(kl.float32, [16], name="x")
        y = kl.ops.add(x, x, name="y")
    feeds: dict[kl.Tensor, object] = {x: np.ones(16, np.float32)}
    on_config = kl.SessionConfig(inter_op_threads=1)
    off_config = kl.SessionConfig(inter_op_threads=1, flush_denormals=False)
    with kl.Session(graph, config=on_config) as on, kl.Session(graph, config=off_config) as off:
        for session in (on, off):
            for _ in range(500):
                session.run(y, feeds)
        pairs = [(_best_per_run(on, y, feeds), _best_per_run(off, y, feeds)) for _ in range(rounds)]
    flushing = statistics.median(p[0] for p in pairs) * 1e6
    ieee = statistics.median(p[1] for p in pairs) * 1e6
    print(f"run() of one Add [16], 1 inter-op thread, median of {rounds} rounds:")
    print(f"  flush_denormals=True  {flushing:7.2f} us")
    print(f"  flush_denormals=False {ieee:7.2f} us")
    print(f"  difference            {flushing - ieee:7.2f} us per run ({flushing / ieee:.3f}x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
