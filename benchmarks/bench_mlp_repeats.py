"""Issue 20's MLP, kernloom against ONNX Runtime only, with the suite's children and
interleaving (``suite_workloads.mlp``, ``isolation.run_interleaved``, 0.2 s settle) but a
chosen number of timed calls per round: the suite's rounds take the best of 5 calls,
which leaves ONNX Runtime's warm-up in some rounds; more calls per round measure each
runtime's steady state.

    .venv/bin/python benchmarks/bench_mlp_repeats.py --threads 2 --rounds 31 --repeats 5 20
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import isolation

WORKLOADS = Path(__file__).with_name("suite_workloads.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--repeats", type=int, nargs="+", default=[5, 20])
    args = parser.parse_args()
    for repeats in args.repeats:
        children = [
            isolation.Child(
                name=runtime,
                script=WORKLOADS,
                factory="mlp",
                params={"runtime": runtime, "threads": args.threads, "repeats": repeats},
                threads=args.threads,
            )
            for runtime in ("onnxruntime", "kernloom_on")
        ]
        results = isolation.run_interleaved(children, args.rounds, settle_s=0.2)
        ort, ours = results["onnxruntime"].seconds, results["kernloom_on"].seconds
        ratios = sorted(a / b for a, b in zip(ours, ort, strict=True))
        quarter = len(ratios) // 4
        print(
            f"best of {repeats}: ONNX Runtime {statistics.median(ort) * 1e3:.3f} ms, kernloom "
            f"{statistics.median(ours) * 1e3:.3f} ms; kernloom/ORT per round median "
            f"{statistics.median(ratios):.3f} [{ratios[quarter]:.3f}-{ratios[-quarter - 1]:.3f}], "
            f"kernloom faster in {sum(r < 1 for r in ratios)}/{len(ratios)}"
        )


if __name__ == "__main__":
    main()
