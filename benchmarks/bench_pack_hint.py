"""oneDNN's packed weight against the row count it was packed for: a product of ``rows``
rows on a 1024x1024 weight packed (``torch.ops.mkldnn._reorder_linear_weight``) with each
row-count hint, relative to the best hint for those rows (median of 15 calls, the same
weight and bias, two intra-op threads unless ``--threads``). A constant weight is packed
once, on the first call, for that call's rows (``packed_matmul.PackedWeight``): the table
says what a later call with other rows pays for it.

    .venv/bin/python benchmarks/bench_pack_hint.py [--threads T]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

HINTS = (1, 4, 16, 64, 256, 1024)
ROWS = (1, 4, 8, 64, 256, 1000)


def _median_us(fn: object, calls: int = 15) -> float:
    for _ in range(3):
        fn()  # type: ignore[operator]
    times = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter_ns() - started)
    return statistics.median(times) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    linear = torch.ops.mkldnn._linear_pointwise
    reorder = torch.ops.mkldnn._reorder_linear_weight
    weight = torch.randn(1024, 1024)
    bias = torch.randn(1024)
    packed = {hint: reorder(weight, hint) for hint in HINTS}
    print(f"| rows | {' | '.join(f'packed for {h}' for h in HINTS)} | best µs |")
    print(f"| ---: | {' | '.join('---:' for _ in HINTS)} | ---: |")
    for rows in ROWS:
        x = torch.randn(rows, 1024)
        times = {
            h: _median_us(lambda p=p, x=x: linear(x, p, bias, "none", [], ""))
            for h, p in packed.items()
        }
        best = min(times.values())
        cells = " | ".join(f"{times[h] / best:.2f}" for h in HINTS)
        print(f"| {rows} | {cells} | {best:.0f} |")


if __name__ == "__main__":
    main()
